"""ACO heuristic-design tasks (esopt.ahd.tasks.aco, aco_tasks, run_aco_*.py).

The solvers must find known optima on small instances, build feasible solutions and
cost them right; `score` must turn any malformed matrix into None without raising;
the runners, loaded from their files as the sandbox does, must give scorable output.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from esopt.ahd.evaluate import check_code
from esopt.ahd.tasks import aco
from esopt.ahd.tasks.aco_tasks import (
    ACOBPP,
    ACOCVRP,
    ACOTSP,
    distance_matrix,
    heuristic_matrix,
)
from esopt.ahd.tasks.base import InstanceSpec

TINY = {"n_ants": 10, "n_iterations": 10}


def brute_force_tsp(d: np.ndarray) -> float:
    n = len(d)
    return min(aco.tour_length(d, np.array((0,) + p)) for p in itertools.permutations(range(1, n)))


def assert_feasible_routes(path: np.ndarray, demands: np.ndarray, capacity: float) -> None:
    """Starts and ends at the depot, every customer exactly once, no route over capacity."""
    path = list(path)
    assert path[0] == 0 and path[-1] == 0
    customers = [v for v in path if v != 0]
    assert sorted(customers) == list(range(1, len(demands)))
    load = 0.0
    for v in path[1:]:
        load = 0.0 if v == 0 else load + demands[v]
        assert load <= capacity


def load_runner(task):
    spec = importlib.util.spec_from_file_location(f"runner_{task.name}", Path(aco.__file__).parent / task.runner)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_candidate(code: str, name: str):
    space: dict = {}
    exec(code, space)  # noqa: S102 - the tasks' own reference and template code
    return space[name]


# ------------------------------------------------------------------ solvers
def test_sampling_follows_the_weights():
    w = np.array([[1.0, 0.0, 3.0, 0.0]])
    draws = aco._sample(np.repeat(w, 20000, axis=0), np.random.default_rng(0).random(20000))
    assert set(draws.tolist()) == {0, 2}
    assert np.mean(draws == 2) == pytest.approx(0.75, abs=0.02)
    # a uniform that rounds onto the total still lands on a positive entry, never on a masked one
    assert aco._sample(w, np.array([1.0])).tolist() == [2]
    with pytest.raises(ValueError):
        aco.ACOParams(decay=0.0)


@pytest.mark.parametrize("n,seed", [(6, 0), (7, 1), (7, 2)])
def test_tsp_aco_finds_the_brute_force_optimum(n, seed):
    d = distance_matrix(np.random.default_rng(seed).random((n, 2)))
    eta = heuristic_matrix(1.0 / (d + np.eye(n)), n, 1e-9)
    length, tour = aco.solve_tsp(d, eta, aco.ACOParams(n_ants=10, n_iterations=20), np.random.default_rng(seed))
    assert sorted(tour.tolist()) == list(range(n))
    assert length == pytest.approx(aco.tour_length(d, tour))
    assert length == pytest.approx(brute_force_tsp(d), rel=1e-12)


def test_cvrp_hand_instance_optimum_and_lengths():
    # Depot at the origin, two customers along each axis, demand 5 each, capacity 10: the
    # best plan is one route per axis, 4 + 4 = 8 (any mixed route needs a third trip).
    coords = np.array([[0, 0], [1, 0], [2, 0], [0, 1], [0, 2]], dtype=float)
    demands = np.array([0, 5, 5, 5, 5], dtype=float)
    d = distance_matrix(coords)
    assert aco.route_length(d, np.array([0, 1, 2, 0, 3, 4, 0])) == pytest.approx(8.0)
    assert aco.route_length(d, np.array([0, 1, 0, 2, 0, 3, 0, 4, 0])) == pytest.approx(12.0)
    eta = heuristic_matrix(1.0 / (d + np.eye(5)), 5, 1e-9)
    length, path = aco.solve_cvrp(d, demands, 10.0, eta, aco.ACOParams(**TINY), np.random.default_rng(0))
    assert_feasible_routes(path, demands, 10.0)
    assert length == pytest.approx(aco.route_length(d, path))
    assert length == pytest.approx(8.0)


def test_cvrp_every_ant_builds_feasible_routes():
    task = ACOCVRP(params=TINY)
    inst = task.instances("search", InstanceSpec(1, 20), 3)[0]
    d = distance_matrix(np.asarray(inst["coords"]))
    demands = np.asarray(inst["demands"], dtype=float)
    assert demands[0] == 0 and demands[1:].min() >= 1 and demands.max() <= 9 and inst["capacity"] == 50
    w = np.random.default_rng(0).random((21, 21)) + 1e-3  # arbitrary odds
    paths = aco._build_routes(w, demands, 50.0, 8, np.random.default_rng(1))
    for p in paths:
        assert_feasible_routes(aco._trim(p), demands, 50.0)
    length, best = aco.solve_cvrp(d, demands, 50.0, w / w.max(), aco.ACOParams(**TINY), np.random.default_rng(2))
    assert_feasible_routes(best, demands, 50.0)
    assert length == pytest.approx(aco.route_length(d, best))
    assert length >= 2 * np.sort(d[0, 1:])[0]  # at least one trip


def test_bpp_lower_bound_and_excess_bins():
    # Four perfect pairs: 100+50, 90+60, 75+75, 120+30 -> 4 bins = ceil(600 / 150).
    easy = [100, 50, 90, 60, 75, 75, 120, 30]
    assert aco.bpp_lower_bound(np.array(easy), 150) == 4
    assert aco.bpp_lower_bound(np.array([80, 80, 80]), 150) == 2  # ceil(1.6), yet three bins are needed
    task = ACOBPP(params={"n_ants": 20, "n_iterations": 15})
    ref = compile_candidate(task.reference_code, "heuristics")
    inst = {"demands": easy, "capacity": 150, "aco_seed": 0}
    demand = np.asarray(easy, dtype=float)
    bins, assign = aco.solve_bpp(demand, 150.0, heuristic_matrix(ref(demand, 150), 8, 1e-6),
                                 task.aco_params, np.random.default_rng(0))
    loads = np.bincount(assign, weights=demand)
    assert bins == 4 and len(loads) == 4 and loads.max() <= 150
    assert task.score(inst, ref(demand, 150)) == 0.0
    three = {"demands": [80, 80, 80], "capacity": 150, "aco_seed": 0}
    assert task.score(three, np.ones((3, 3))) == 1.0


# ------------------------------------------------------------------ scoring untrusted output
BAD_OUTPUTS = {
    "none": None,
    "string": "1.0",
    "strings": [["1"] * 5] * 5,
    "dict": {"a": 1},
    "scalar": 2.0,
    "wrong shape": [[1.0] * 4] * 5,
    "too many rows": [[1.0] * 5] * 6,
    "ragged": [[1.0] * 5] * 4 + [[1.0] * 3],
    "none inside": [[1.0] * 5] * 4 + [[1.0, None, 1.0, 1.0, 1.0]],
    "nan": [[1.0] * 5] * 4 + [[1.0, float("nan"), 1.0, 1.0, 1.0]],
    "inf": [[1.0] * 5] * 4 + [[1.0, float("inf"), 1.0, 1.0, 1.0]],
    "all non-positive": [[-1.0] * 5] * 5,
    "all zero": [[0.0] * 5] * 5,
    "3-d": [[[1.0]] * 5] * 5,
}


def _five_node_instances():
    """One size-5 instance per task (TSP: 5 nodes; CVRP: depot + 4; BPP: 5 items)."""
    return [(ACOTSP(params=TINY), ACOTSP().instances("t", InstanceSpec(1, 5), 0)[0]),
            (ACOCVRP(params=TINY), ACOCVRP().instances("t", InstanceSpec(1, 4), 0)[0]),
            (ACOBPP(params=TINY), ACOBPP().instances("t", InstanceSpec(1, 5), 0)[0])]


@pytest.mark.parametrize("label", list(BAD_OUTPUTS))
def test_score_rejects_malformed_matrices(label):
    for task, inst in _five_node_instances():
        assert task.score(inst, BAD_OUTPUTS[label]) is None, (task.name, label)


def test_score_policy_for_odd_but_usable_matrices():
    for task, inst in _five_node_instances():
        ok = np.ones((5, 5))
        base = task.score(inst, ok.tolist())
        assert base is not None and math.isfinite(base)
        diag_nan = ok.copy()
        np.fill_diagonal(diag_nan, np.nan)  # the diagonal is never used, so it is ignored
        assert task.score(inst, diag_nan.tolist()) == base
        assert task.score(inst, (ok * 1e300).tolist()) == base  # only ratios matter
        some_neg, some_zero = ok.copy(), ok.copy()
        some_neg[1, 2] = -7.0
        some_zero[1, 2] = 0.0
        # negatives are clipped to the floor like zeros: nearly forbidden, not invalid
        assert task.score(inst, some_neg.tolist()) == task.score(inst, some_zero.tolist())
        assert task.score(inst, np.ones((5, 5), dtype=int)) == base  # ints and arrays are fine
    eta = heuristic_matrix([[0.0, -3.0, 2.0], [4.0, 0.0, 0.0], [1.0, 1.0, 0.0]], 3, 1e-9)
    np.testing.assert_allclose(eta, [[1.0, 1e-9, 0.5], [1.0, 1.0, 1e-9], [0.25, 0.25, 1.0]])


def test_scores_are_deterministic():
    for cls in (ACOTSP, ACOCVRP, ACOBPP):
        a, b = cls(params=TINY), cls(params=TINY)
        insts = a.instances("search", InstanceSpec(2, 12), 7)
        assert insts == b.instances("search", InstanceSpec(2, 12), 7)
        assert insts != a.instances("search", InstanceSpec(2, 12), 8)
        assert insts != a.instances("test", InstanceSpec(2, 12), 7)
        n = len(insts[0].get("coords", insts[0].get("demands")))
        h = np.random.default_rng(0).random((n, n)).tolist()
        assert [a.score(i, h) for i in insts] == [b.score(i, h) for i in insts]


def test_a_distance_heuristic_beats_a_uniform_one():
    for task, size in ((ACOTSP(params=TINY), 20), (ACOCVRP(params=TINY), 20)):
        insts = task.instances("search", InstanceSpec(6, size), 0)
        n = size if task.name == "aco_tsp" else size + 1
        informed = [task.score(i, 1.0 / (distance_matrix(np.asarray(i["coords"])) + np.eye(n))) for i in insts]
        uniform = [task.score(i, np.ones((n, n))) for i in insts]
        assert np.mean(informed) < 0.85 * np.mean(uniform), (task.name, informed, uniform)


def test_params_and_sandbox_views():
    task = ACOBPP(params={"n_ants": 3, "capacity": 100, "demand_low": 10, "demand_high": 40})
    assert (task.aco_params.n_ants, task.aco_params.n_iterations, task.aco_params.decay) == (3, 15, 0.95)
    inst = task.instances("search", InstanceSpec(1, 30), 0)[0]
    assert inst["capacity"] == 100 and 10 <= min(inst["demands"]) and max(inst["demands"]) <= 40
    assert inst["lower_bound"] == math.ceil(sum(inst["demands"]) / 100)
    assert set(task.sandbox_instance(inst)) == {"demands", "capacity"}
    assert set(ACOTSP().sandbox_instance(ACOTSP().instances("s", InstanceSpec(1, 5), 0)[0])) == {"coords"}
    cvrp = ACOCVRP().instances("s", InstanceSpec(1, 5), 0)[0]
    assert cvrp["coords"][0] == [0.5, 0.5]
    assert set(ACOCVRP().sandbox_instance(cvrp)) == {"coords", "demands", "capacity"}
    with pytest.raises(ValueError, match="unknown params"):
        ACOTSP(params={"n_ant": 5})
    with pytest.raises(ValueError, match="demand_low"):
        ACOBPP(params={"demand_low": 200}).instances("search", InstanceSpec(1, 5), 0)


# ------------------------------------------------------------------ runners, as the sandbox uses them
EXPRESSIONS = {"aco_tsp": ["1/d", "1/(d*k)", "2", "np.sqrt(np.abs(r))/k"],
               "aco_cvrp": ["1/d", "s/d", "2", "(1+q)/(d*h)"],
               "aco_bpp": ["b", "s**2", "2", "a*b"]}


@pytest.mark.parametrize("cls,size", [(ACOTSP, 12), (ACOCVRP, 12), (ACOBPP, 15)])
def test_runners_give_scorable_matrices(cls, size):
    task = cls(params=TINY)
    runner = load_runner(task)
    insts = task.instances("search", InstanceSpec(2, size), 0)
    codes = {"reference": task.reference_code, **{e: task.expression_code(e) for e in EXPRESSIONS[task.name]}}
    scores = {}
    for label, code in codes.items():
        assert check_code(code, task.function_name) is None, label
        fn = compile_candidate(code, task.function_name)
        outs = [json.loads(json.dumps(runner.run(fn, task.sandbox_instance(i)))) for i in insts]
        n = len(outs[0])
        assert all(isinstance(v, float) for v in outs[0][n - 1]) and len(outs[0][0]) == n
        scores[label] = [task.score(i, o) for i, o in zip(insts, outs)]
        assert all(s is not None and math.isfinite(s) and s >= 0 for s in scores[label]), (label, scores[label])
    if task.name != "aco_bpp":  # the template's 1/d is the reference matrix bit for bit
        assert scores["1/d"] == scores["reference"]
    assert scores["2"] == [task.score(i, np.ones((n, n))) for i in insts]
    # what the runner returns for output that is no matrix, and score's verdict on it
    inst = task.sandbox_instance(insts[0])
    for bad in (lambda *a: "oops", lambda *a: np.ones(3), lambda *a: None):
        out = runner.run(bad, inst)
        assert isinstance(out, str) and task.score(insts[0], json.loads(json.dumps(out))) is None

"""Constructive heuristic-design tasks (esopt.ahd.tasks.construct): references against brute
force, scoring and validation of untrusted outputs, seeded instances, and the runners
run in-process with the reference and expression heuristics."""

from __future__ import annotations

import importlib.util
import itertools
import math
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from esopt.ahd.evaluate import check_code
from esopt.ahd.tasks.base import HeuristicTask, InstanceSpec
from esopt.ahd.tasks.construct import (
    ASP_BLOCKED,
    ASP_OPTIMA,
    ASP_TRIPLES,
    ConstructASP,
    ConstructKP,
    ConstructTSP,
    asp_children,
    asp_expand,
    asp_greedy,
    asp_set_size,
)

AHD_DIR = Path(__file__).resolve().parents[1] / "workflow" / "esopt" / "ahd" / "tasks"
NAN = float("nan")


def load_runner(task: HeuristicTask) -> ModuleType:
    """The task's runner module, imported from its file (as the sandbox sees it: no package)."""
    spec = importlib.util.spec_from_file_location(f"runner_{task.name}", AHD_DIR / task.runner)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_fn(code: str, name: str):
    space: dict = {}
    exec(compile(code, "<heuristic>", "exec"), space)  # noqa: S102 - the tasks' own reference and template code
    return space[name]


def run_all(task: HeuristicTask, code: str, instances: list[dict]) -> list:
    fn, runner = compile_fn(code, task.function_name), load_runner(task)
    return [runner.run(fn, task.sandbox_instance(inst)) for inst in instances]


# --------------------------------------------------------------------------- TSP
def brute_force_tsp(coords: np.ndarray) -> tuple[list[int], float]:
    """The optimal tour from node 0 over all (n-1)! orders, vectorized."""
    dist = np.sqrt(((coords[:, None] - coords[None]) ** 2).sum(-1))
    orders = np.array(list(itertools.permutations(range(1, len(coords)))))
    tours = np.pad(orders, ((0, 0), (1, 1)))  # 0, order..., 0
    lengths = dist[tours[:, :-1], tours[:, 1:]].sum(axis=1)
    best = int(np.argmin(lengths))
    return tours[best, :-1].tolist(), float(lengths[best])


def test_tsp_reference_is_optimal_on_most_small_instances():
    task = ConstructTSP()
    instances = task.instances("test", InstanceSpec(n=30, size=8), seed=0)
    optimal = 0
    for inst in instances:
        tour, best = brute_force_tsp(np.array(inst["coords"]))
        assert inst["reference_length"] >= best - 1e-9  # a reference shorter than the optimum is a bug
        optimal += math.isclose(inst["reference_length"], best, rel_tol=1e-9)
        gap = task.score(inst, tour)  # the optimal tour scores <= 0 against the reference
        assert gap == pytest.approx(100 * (best / inst["reference_length"] - 1), abs=1e-9)
        assert gap <= 1e-9
    assert optimal >= 28  # 30 of 30 at the time of writing


def test_tsp_score_of_known_tours():
    task = ConstructTSP()
    square = {"coords": [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]], "reference_length": 4.0}
    assert task.score(square, [0, 1, 2, 3]) == pytest.approx(0.0)
    assert task.score(square, [0, 3, 2, 1]) == pytest.approx(0.0)
    assert task.score(square, [0, 2, 1, 3]) == pytest.approx(100 * ((2 + 2 * math.sqrt(2)) / 4 - 1))
    assert task.sandbox_instance(square) == {"coords": square["coords"]}


@pytest.mark.parametrize("output", [
    [0, 1, 1, 3], [0, 1, 2], [0, 1, 2, 3, 3], [1, 0, 2, 3], [0, 1, 2, 4], [0, 1, 2, -1], [0, 1, 2, 3.0],
    [0, 1, 2, NAN], [0, 1, 2, "3"], [0, True, 2, 3], [0, 1, 2, None], None, "0123", 0, {"tour": [0, 1, 2, 3]},
    [[0, 1, 2, 3]], [0] * 1_000_000,
])
def test_tsp_invalid_outputs_score_none(output):
    square = {"coords": [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]], "reference_length": 4.0}
    assert ConstructTSP().score(square, output) is None


# --------------------------------------------------------------------------- knapsack
def brute_force_kp(weights: list[int], values: list[int], capacity: int) -> int:
    masks = np.array(list(itertools.product([0, 1], repeat=len(weights))))
    total_w, total_v = masks @ np.array(weights), masks @ np.array(values)
    return int(total_v[total_w <= capacity].max())


def test_kp_dp_optimum_matches_brute_force():
    for ratio in (0.1, 0.25, 0.5):  # tight to loose capacities
        task = ConstructKP(params={"capacity_ratio": ratio})
        for inst in task.instances("test", InstanceSpec(n=6, size=12), seed=3):
            assert inst["capacity"] == round(ratio * 1000 * 12)
            assert inst["optimum"] == brute_force_kp(inst["weights"], inst["values"], inst["capacity"])


def test_kp_score_of_known_solutions():
    task = ConstructKP()
    inst = {"weights": [5, 4, 3], "values": [10, 40, 30], "capacity": 7, "optimum": 70}
    assert task.score(inst, [1, 2]) == pytest.approx(0.0)
    assert task.score(inst, [2, 1]) == pytest.approx(0.0)
    assert task.score(inst, [0]) == pytest.approx(100 * (1 - 10 / 70))
    assert task.score(inst, []) == pytest.approx(100.0)
    assert task.value_ratio(task.score(inst, [0])) == pytest.approx(10 / 70)
    assert task.sandbox_instance(inst) == {"weights": [5, 4, 3], "values": [10, 40, 30], "capacity": 7}


@pytest.mark.parametrize("output", [
    [0, 1], [0, 2, 1], [1, 1], [3], [-1], [1, 2.0], [1, NAN], [1, None], [True], ["1"], None, "12", 1,
    {"items": [1, 2]}, [[1, 2]], list(range(10_000)),
])
def test_kp_invalid_outputs_score_none(output):
    inst = {"weights": [5, 4, 3], "values": [10, 40, 30], "capacity": 7, "optimum": 70}
    assert ConstructKP().score(inst, output) is None


def test_kp_reference_greedy_value_ratio():
    task = ConstructKP()
    instances = task.instances("test", InstanceSpec(n=16, size=50), seed=0)
    gaps = [task.score(i, o) for i, o in zip(instances, run_all(task, task.reference_code, instances))]
    ratios = [task.value_ratio(g) for g in gaps]
    assert all(0.9 < r <= 1.0 for r in ratios)
    assert 0.97 < np.mean(ratios) < 1.0  # density greedy is close to optimal on uniform instances


# --------------------------------------------------------------------------- admissible sets
GOOD = np.zeros((3, 3, 3), dtype=bool)  # the definition, independently of the module
for _a, _b, _c in itertools.product(range(3), repeat=3):
    GOOD[_a, _b, _c] = sorted((_a, _b, _c)) in ([0, 1, 2], [0, 0, 1], [0, 0, 2])


def expand(rows) -> np.ndarray:
    """The vectors of symmetric children: every combination of cyclic rotations per group."""
    vectors = []
    for row in rows:
        groups = [sorted({tuple(np.roll(ASP_TRIPLES[t], k)) for k in range(3)}) for t in row]
        vectors += [sum(parts, ()) for parts in itertools.product(*groups)]
    return np.array(vectors, dtype=np.int64)


def is_admissible(vectors: np.ndarray, w: int) -> bool:
    """Brute force over the definition: weight w, distinct supports, and every three distinct
    vectors have a coordinate with values {0,1,2}, {0,0,1} or {0,0,2}."""
    m = len(vectors)
    if (np.count_nonzero(vectors, axis=1) != w).any():
        return False
    if len({tuple(np.flatnonzero(v)) for v in vectors}) != m:
        return False
    j, k = np.triu_indices(m, 1)
    for i in range(m - 2):
        later = j > i
        has_good = GOOD[vectors[i], vectors[j[later]], vectors[k[later]]].any(axis=1)
        if not has_good.all():
            return False
    return True


def rule_compatible(rows: list[np.ndarray]) -> bool:
    """The greedy's rules on a set of children, applied through `asp_greedy` itself: the
    children are all kept iff the rules allow them together."""
    chosen = asp_greedy(np.array(rows), np.arange(len(rows), 0, -1, dtype=float))
    return len(chosen) == len(rows)


def test_asp_single_children_are_admissible():
    for n, w in [(6, 3), (9, 6), (9, 4)]:
        for row in asp_children(n, w):
            assert is_admissible(expand([row]), w)
            assert len(expand([row])) == asp_set_size(row[None])


def test_asp_blocked_table_matches_definition():
    # One group: some rotation of each of the three triples leaves no good coordinate.
    for a, b, c in itertools.product(range(7), repeat=3):
        rotations = [expand([[t]]) for t in (a, b, c)]
        blocked = not GOOD[rotations[0][:, None, None], rotations[1][None, :, None],
                           rotations[2][None, None, :]].any(axis=-1).all()
        assert ASP_BLOCKED[a, b, c] == blocked, (a, b, c)


def conflicting_triple(rows: list[np.ndarray]) -> bool:
    """Brute force: one vector from each of three children with no good coordinate."""
    x, y, z = (expand([r]) for r in rows)
    return not GOOD[x[:, None, None], y[None, :, None], z[None, None, :]].any(axis=-1).all()


def test_asp_rules_match_brute_force_on_pairs_and_triples():
    rng = np.random.default_rng(0)
    for n in (6, 9):
        for w in range(1, n + 1):
            children = asp_children(n, w)
            pairs = list(itertools.combinations(range(len(children)), 2))
            if len(pairs) > 60:
                pairs = [pairs[i] for i in rng.choice(len(pairs), 60, replace=False)]
            for a, b in pairs:
                rows = [children[a], children[b]]
                assert rule_compatible(rows) == is_admissible(expand(rows), w), (n, w, rows)
    # Triples of pairwise compatible children, where the three-way rule decides: for n = 9
    # all the rule's conflicts (1-3% of such triples) and 40 non-conflicts per weight; for
    # n = 6 all triples.
    for n, ws, sample in [(6, range(1, 7), {}), (9, range(2, 9), {False: 40})]:
        for w in ws:
            children = asp_children(n, w)
            profiles = [tuple(np.count_nonzero(expand([c])[0].reshape(-1, 3), axis=1)) for c in children]
            triples = [t for t in itertools.combinations(range(len(children)), 3)
                       if len({profiles[i] for i in t}) == 3]  # distinct supports pairwise
            blocked = [bool(ASP_BLOCKED[tuple(children[list(t)])].all()) for t in triples]
            for kind in (True, False):
                ids = [t for t, b in zip(triples, blocked) if b == kind]
                if kind in sample and len(ids) > sample[kind]:
                    ids = [ids[i] for i in rng.choice(len(ids), sample[kind], replace=False)]
                for t in ids:
                    rows = [children[i] for i in t]
                    assert conflicting_triple(rows) == kind == (not rule_compatible(rows)), (n, w, rows)
                    if n == 9 and t == ids[0]:
                        assert is_admissible(expand(rows), w) == (not kind)  # the full definition agrees
                if n == 9 and 2 <= w <= 8:
                    assert ids  # both outcomes exercised


def test_asp_greedy_set_is_admissible_and_maximal():
    n, w = 9, 6
    children = asp_children(n, w)
    reference = np.array([sum(sum(ASP_TRIPLES[t]) for t in c) / n for c in children])  # mean entry
    random = np.random.default_rng(0).random(len(children))
    for priorities, size in [(reference, 57), (random, 84)]:
        rows = asp_greedy(children, priorities)
        vectors = expand(rows)
        assert len(vectors) == asp_set_size(rows) == size
        assert {tuple(v) for v in asp_expand(rows)} == {tuple(v) for v in vectors}
        assert is_admissible(vectors, w)
        chosen = {tuple(r) for r in rows}
        for child in children:  # every child left out would break admissibility
            if tuple(child) not in chosen:
                assert not is_admissible(np.concatenate([vectors, expand([child])]), w)
    # The random priorities reach C(9, 6) = 84, the bound from distinct supports: ASP_OPTIMA's n9w6.
    assert ASP_OPTIMA[(9, 6)] == math.comb(9, 6) == 84


def test_asp_greedy_set_is_admissible_at_n12():
    # The tiny config's size (4 groups): the reference priority's 630 vectors, by brute force (~3 s).
    children = asp_children(12, 7)
    rows = asp_greedy(children, np.array([sum(sum(ASP_TRIPLES[t]) for t in c) / 12 for c in children]))
    vectors = expand(rows)
    assert len(vectors) == asp_set_size(rows) == 630
    assert is_admissible(vectors, 7)


def test_asp_known_optima_and_scores():
    for (n, w), best in ASP_OPTIMA.items():
        assert best == math.comb(n, w)  # all attain the distinct-support bound
    task = ConstructASP()
    assert task.instances("search", InstanceSpec(n=4, size=12), seed=0) == [{"n": 12, "w": 7}]
    assert len(asp_children(12, 7)) == 448 and len(asp_children(15, 10)) == 2432
    inst = {"n": 9, "w": 6}
    assert task.score(inst, np.random.default_rng(0).random(68).tolist()) == 0.0  # the 84 above
    # LLM4AD's trivial priority (the reference): 630 of 792 and 1740 of 3003.
    for n, w, size in [(9, 6, 57), (12, 7, 630), (15, 10, 1740)]:
        out = run_all(task, task.reference_code, [{"n": n, "w": w}])[0]
        assert task.score({"n": n, "w": w}, out) == ASP_OPTIMA[(n, w)] - size
    # No known optimum: minus the size. Equal priorities add the children in their order.
    other = ConstructASP(params={"n": 9, "w": 5}).instances("search", InstanceSpec(n=1, size=0), seed=0)[0]
    assert other == {"n": 9, "w": 5}
    children = asp_children(9, 5)
    size = asp_set_size(asp_greedy(children, -np.arange(len(children), dtype=float)))
    assert task.score(other, [1.0] * len(children)) == -size < 0


@pytest.mark.parametrize("output", [
    [1.0] * 67, [1.0] * 69, [1.0] * 67 + [NAN], [1.0] * 67 + ["1"], [1.0] * 67 + [None], [1.0] * 67 + [True],
    [1.0] * 67 + [[1.0]], [1.0] * 67 + [10 ** 400], None, "1" * 68, 1.0, {"p": [1.0] * 68},
])
def test_asp_invalid_outputs_score_none(output):
    assert ConstructASP().score({"n": 9, "w": 6}, output) is None


def test_asp_infinite_priorities_are_allowed():
    task = ConstructASP()
    out, finite = [-math.inf] * 68, [0.0] * 68
    out[5], finite[5] = math.inf, 1.0
    assert task.score({"n": 9, "w": 6}, out) == task.score({"n": 9, "w": 6}, finite) is not None


def test_asp_runner_order_matches_children():
    seen = []
    load_runner(ConstructASP()).run(lambda el, n, w: seen.append(el) or 0.0, {"n": 12, "w": 7})
    expected = [sum((ASP_TRIPLES[t] for t in c), ()) for c in asp_children(12, 7)]
    assert seen == expected


# --------------------------------------------------------------------------- all tasks
SMALL = {ConstructTSP: InstanceSpec(n=3, size=12), ConstructKP: InstanceSpec(n=3, size=20),
         ConstructASP: InstanceSpec(n=1, size=9)}
EXPRESSIONS = {
    ConstructTSP: (["d", "e", "m", "1", "2", "d + e - m", "d / (m + 1e-9)"], "d"),
    ConstructKP: (["v", "w", "c", "r", "1", "-w", "r * c - w"], "r"),
    ConstructASP: (["t", "r", "f", "z", "1", "t - 3 * r + f", "(w + t) / n"], "(w + t) / n"),
}


@pytest.mark.parametrize("cls", [ConstructTSP, ConstructKP, ConstructASP])
def test_runners_with_reference_and_expressions(cls):
    task = cls()
    instances = task.instances("search", SMALL[cls], seed=1)
    assert check_code(task.reference_code, task.function_name) is None
    reference = run_all(task, task.reference_code, instances)
    assert all(task.score(i, o) is not None for i, o in zip(instances, reference))
    assert "{expr}" in task.expression_template
    assert all(f"    {name} = " in task.expression_template for name in task.features)
    assert task.signature in task.reference_code and task.signature in task.expression_template
    expressions, same_as_reference = EXPRESSIONS[cls]
    for expr in expressions:
        code = task.expression_code(expr)
        assert check_code(code, task.function_name) is None, expr
        outputs = run_all(task, code, instances)
        assert all(task.score(i, o) is not None for i, o in zip(instances, outputs)), expr
        if expr == same_as_reference:  # the expression that restates the reference heuristic
            assert outputs == reference


@pytest.mark.parametrize("cls", [ConstructTSP, ConstructKP])
def test_runners_pass_bad_choices_to_score(cls):
    task = cls()
    inst = task.instances("search", SMALL[cls], seed=0)[0]
    runner = load_runner(task)
    for bad in (-1, 10_000, 1.5, None, "0", np.array([0, 1])):
        out = runner.run(lambda *args, bad=bad: bad, task.sandbox_instance(inst))
        assert task.score(inst, out) is None, bad


@pytest.mark.parametrize("cls", [ConstructTSP, ConstructKP])
def test_instances_are_seeded(cls):
    task = cls()
    spec = SMALL[cls]
    first = task.instances("search", spec, seed=7)
    assert first == task.instances("search", spec, seed=7)
    assert len(first) == spec.n
    assert first != task.instances("search", spec, seed=8)
    assert first != task.instances("test", spec, seed=7)
    # Instance i does not depend on how many are drawn.
    assert task.instances("search", InstanceSpec(n=1, size=spec.size), seed=7) == first[:1]
    hidden = {"reference_length", "optimum"}
    assert all(not hidden & set(task.sandbox_instance(i)) for i in first)


def test_asp_instances_ignore_seed_and_split():
    task = ConstructASP()
    spec = InstanceSpec(n=5, size=15)
    assert task.instances("search", spec, seed=0) == task.instances("test", spec, seed=9) == [{"n": 15, "w": 10}]
    with pytest.raises(ValueError):
        task.instances("search", InstanceSpec(n=1, size=10), seed=0)

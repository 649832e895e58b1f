"""Constructive heuristic-design tasks: TSP, 0/1 knapsack, admissible sets (esopt.ahd.tasks).

* construct_tsp (EoH's TSP task): `select_next_node` picks the next city of a tour
  that starts and ends at node 0. Instances: `size` cities uniform in the unit
  square. Objective: optimality gap (%) of the tour against a reference tour made
  at generation time by 2-opt from nearest-neighbour starts (can be negative when a
  heuristic beats the reference; on 7 cities the reference is the brute-force optimum
  on nearly every instance, see the tests).
* construct_kp: `select_next_item` picks the next item among those that still fit.
  Instances: `size` items, integer weights and values uniform in 1..1000 (the usual
  uniform-[0, 1] setting at scale 1000, so the dynamic program is exact), capacity
  `round(capacity_ratio * 1000 * size)` with capacity_ratio = 0.25 by default: POMO's
  12.5 for 50 and 25 for 100 items in unit scale, about half the expected total weight.
  Objective: gap (%) to the DP optimum, 100 * (1 - value / optimum).
* construct_asp (FunSearch's admissible sets, as LLM4AD's `admissible_set`):
  `priority(el, n, w)` ranks the candidate vectors of a symmetric constant-weight
  admissible set; a trusted greedy in this process builds the set from the ranks.
  Objective: known optimum minus set size (0 is optimal), or minus the size where no
  optimum is known.

Each task draws instances from numpy's default_rng seeded from (task, split, seed,
index), so the search and test splits differ and every instance is reproducible on
its own. Runners (run_construct_*.py) hold the construction loops that call the
candidate; `score` here re-checks everything they return.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from esopt.ahd.tasks.base import HeuristicTask, Instance, InstanceSpec

__all__ = [
    "ASP_BLOCKED", "ASP_OPTIMA", "ASP_TRIPLES", "ConstructASP", "ConstructKP", "ConstructTSP", "asp_children",
    "asp_expand", "asp_greedy", "asp_set_size", "distance_matrix", "knapsack_optimum", "nearest_neighbour_tour",
    "tour_length", "tsp_reference", "two_opt",
]


# --------------------------------------------------------------------------- shared helpers
def _rng(task: str, split: str, seed: int, index: int) -> np.random.Generator:
    """A generator per instance: independent of how many instances are drawn."""
    key = int.from_bytes(hashlib.sha256(f"{task}/{split}".encode()).digest()[:8], "little")
    return np.random.default_rng([key, int(seed) % 2**64, int(index)])


def _int_list(output: Any, length: int | None = None, max_length: int | None = None) -> list[int] | None:
    """`output` as a list of plain ints (JSON ints), or None; lengths checked before the elements."""
    if not isinstance(output, (list, tuple)):
        return None
    if length is not None and len(output) != length:
        return None
    if max_length is not None and len(output) > max_length:
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in output):
        return None
    return list(output)


# --------------------------------------------------------------------------- TSP
def distance_matrix(coords: np.ndarray) -> np.ndarray:
    return np.sqrt(((coords[:, None, :] - coords[None, :, :]) ** 2).sum(-1))


def tour_length(dist: np.ndarray, tour: np.ndarray | list[int]) -> float:
    t = np.asarray(tour)
    return float(dist[t, np.roll(t, -1)].sum())


def nearest_neighbour_tour(dist: np.ndarray, start: int) -> np.ndarray:
    n = len(dist)
    tour = [start]
    free = np.ones(n, dtype=bool)
    free[start] = False
    for _ in range(n - 1):
        row = np.where(free, dist[tour[-1]], np.inf)
        nxt = int(np.argmin(row))
        tour.append(nxt)
        free[nxt] = False
    return np.array(tour)


def two_opt(dist: np.ndarray, tour: np.ndarray) -> np.ndarray:
    """Best-improvement 2-opt to a local optimum; each pass scores all n^2/2 moves at once."""
    t = np.array(tour)
    n = len(t)
    upper = np.triu(np.ones((n, n), dtype=bool), k=2)
    while True:
        dtt = dist[np.ix_(t, t)]  # dtt[i, j] = d(t_i, t_j)
        edge = np.diagonal(np.roll(dtt, -1, axis=1)).copy()  # d(t_i, t_{i+1})
        # Reversing t[i+1..j] swaps edges (t_i, t_i+1), (t_j, t_j+1) for (t_i, t_j), (t_i+1, t_j+1).
        delta = dtt + np.roll(dtt, (-1, -1), axis=(0, 1)) - edge[:, None] - edge[None, :]
        delta = np.where(upper, delta, 0.0)
        k = int(np.argmin(delta))
        i, j = divmod(k, n)
        if delta[i, j] >= -1e-10:
            return t
        t[i + 1:j + 1] = t[i + 1:j + 1][::-1].copy()


def tsp_reference(dist: np.ndarray, starts: int) -> tuple[np.ndarray, float]:
    """Best 2-opt local optimum from nearest-neighbour tours at nodes 0..starts-1 (at least
    one), rotated to start at 0. Several starts because one 2-opt run is ~5% above optimal."""
    best, best_len = None, math.inf
    for s in range(max(1, min(starts, len(dist)))):
        t = two_opt(dist, nearest_neighbour_tour(dist, s))
        length = tour_length(dist, t)
        if length < best_len - 1e-12:
            best, best_len = t, length
    assert best is not None
    return np.roll(best, -int(np.flatnonzero(best == 0)[0])), best_len


@dataclass
class ConstructTSP(HeuristicTask):
    """EoH's constructive TSP: the candidate chooses each next city; gap to the 2-opt reference.

    params: reference_starts (int, default 25): nearest-neighbour starts of the reference."""

    name: ClassVar[str] = "construct_tsp"
    function_name: ClassVar[str] = "select_next_node"
    signature: ClassVar[str] = "def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):"
    description: ClassVar[str] = (
        "Traveling salesman problem: find the shortest closed tour through all nodes (cities placed uniformly "
        "at random in the unit square, Euclidean distances). The tour is built step by step: it starts at node 0, "
        "and at each step the function select_next_node chooses which unvisited node to go to next; after the last "
        "node the tour returns to node 0.\n"
        "Inputs: current_node (int): the node the tour is at; destination_node (int): the node the tour must "
        "return to at the end (always 0, the start); unvisited_nodes (numpy int array of shape (k,)): the nodes not "
        "visited yet, k >= 1; distance_matrix (numpy float array of shape (n, n)): distance_matrix[i, j] is the "
        "distance between nodes i and j.\n"
        "Return: one element of unvisited_nodes (an int), the node to visit next. numpy is available as np.\n"
        "Goal: a short total tour length (scored as the gap in percent to a 2-opt reference tour)."
    )
    metric: ClassVar[str] = "gap to 2-opt reference (%)"
    reference_code: ClassVar[str] = '''import numpy as np


def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):
    """Nearest neighbour: go to the closest unvisited node."""
    distances = distance_matrix[current_node, unvisited_nodes]
    return unvisited_nodes[int(np.argmin(distances))]
'''
    expression_template: ClassVar[str] = '''import numpy as np


def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):
    d = distance_matrix[current_node, unvisited_nodes]  # distance from the current node
    e = distance_matrix[destination_node, unvisited_nodes]  # distance back to the start
    m = distance_matrix[np.ix_(unvisited_nodes, unvisited_nodes)].mean(axis=1)  # mean distance to the others
    score = np.broadcast_to(np.asarray({expr}, dtype=float), d.shape)  # the lowest score is chosen
    return unvisited_nodes[int(np.argmin(score))]
'''
    features: ClassVar[dict[str, str]] = {
        "d": "distance from the current node to each unvisited node",
        "e": "distance from each unvisited node back to the start node",
        "m": "mean distance from each unvisited node to the other unvisited nodes",
    }
    runner: ClassVar[str] = "run_construct_tsp.py"

    def instances(self, split: str, spec: InstanceSpec, seed: int) -> list[Instance]:
        if spec.size < 3:
            raise ValueError(f"{self.name}: size (cities) must be at least 3, got {spec.size}")
        starts = int(self.params.get("reference_starts", 25))
        out = []
        for i in range(spec.n):
            coords = _rng(self.name, split, seed, i).random((spec.size, 2))
            _, length = tsp_reference(distance_matrix(coords), starts)
            out.append({"coords": coords.tolist(), "reference_length": length})
        return out

    def sandbox_instance(self, instance: Instance) -> Instance:
        return {"coords": instance["coords"]}

    def score(self, instance: Instance, output: Any) -> float | None:
        """Gap (%) of the tour to the reference; None unless a permutation of all nodes starting at 0."""
        coords = np.asarray(instance["coords"], dtype=float)
        n = len(coords)
        tour = _int_list(output, length=n)
        if tour is None or tour[0] != 0 or sorted(tour) != list(range(n)):
            return None
        length = tour_length(distance_matrix(coords), tour)
        return 100.0 * (length / float(instance["reference_length"]) - 1.0)


# --------------------------------------------------------------------------- knapsack
MAX_KP_ENTRY = 1000  # weights and values are uniform integers in 1..MAX_KP_ENTRY


def knapsack_optimum(weights: list[int] | np.ndarray, values: list[int] | np.ndarray, capacity: int) -> int:
    """Exact 0/1 knapsack optimum by dynamic programming over integer capacities, O(n * capacity)."""
    best = np.zeros(int(capacity) + 1, dtype=np.int64)  # best[c]: best value within capacity c
    for w, v in zip(np.asarray(weights, dtype=np.int64), np.asarray(values, dtype=np.int64)):
        if w <= capacity:
            best[w:] = np.maximum(best[w:], best[:-w] + v)  # the right side reads the previous row
    return int(best[-1])


@dataclass
class ConstructKP(HeuristicTask):
    """Constructive 0/1 knapsack: the candidate picks each next item among those that fit; gap to the DP optimum.

    params: capacity_ratio (float, default 0.25): capacity / (MAX_KP_ENTRY * items)."""

    name: ClassVar[str] = "construct_kp"
    function_name: ClassVar[str] = "select_next_item"
    signature: ClassVar[str] = "def select_next_item(remaining_capacity, weights, values):"
    description: ClassVar[str] = (
        "0/1 knapsack problem: choose items of maximum total value whose total weight does not exceed the "
        "knapsack capacity (weights and values are integers drawn uniformly from 1..1000; the capacity is about "
        "half the total weight of all items). The knapsack is filled step by step, starting empty: at each step "
        "the function select_next_item chooses one of the items that are not in the knapsack yet and still fit; "
        "filling stops when no item fits.\n"
        "Inputs: remaining_capacity (int): capacity left in the knapsack; weights (numpy int array of shape (k,)): "
        "the weights of the k >= 1 items that are not chosen yet and fit (each <= remaining_capacity); values "
        "(numpy int array of shape (k,)): their values, in the same order.\n"
        "Return: an int index i in range(k) into these arrays, the item to add next. numpy is available as np.\n"
        "Goal: a large total value (scored as the gap in percent to the optimal value)."
    )
    metric: ClassVar[str] = "gap to the DP optimum (%)"
    reference_code: ClassVar[str] = '''import numpy as np


def select_next_item(remaining_capacity, weights, values):
    """Greedy by value density: the item with the highest value per unit of weight."""
    return int(np.argmax(values / weights))
'''
    expression_template: ClassVar[str] = '''import numpy as np


def select_next_item(remaining_capacity, weights, values):
    v = values.astype(float)  # value of each item that fits
    w = weights.astype(float)  # weight of each item that fits
    c = float(remaining_capacity)  # capacity left (a number)
    r = v / w  # value per unit of weight
    score = np.broadcast_to(np.asarray({expr}, dtype=float), v.shape)  # the highest score is chosen
    return int(np.argmax(score))
'''
    features: ClassVar[dict[str, str]] = {
        "v": "value of each item that fits",
        "w": "weight of each item that fits",
        "c": "remaining capacity of the knapsack (a number)",
        "r": "value per unit of weight of each item (v / w)",
    }
    runner: ClassVar[str] = "run_construct_kp.py"

    def instances(self, split: str, spec: InstanceSpec, seed: int) -> list[Instance]:
        if spec.size < 1:
            raise ValueError(f"{self.name}: size (items) must be at least 1, got {spec.size}")
        ratio = float(self.params.get("capacity_ratio", 0.25))
        capacity = max(1, round(ratio * MAX_KP_ENTRY * spec.size))
        out = []
        for i in range(spec.n):
            rng = _rng(self.name, split, seed, i)
            weights = rng.integers(1, MAX_KP_ENTRY + 1, spec.size)
            values = rng.integers(1, MAX_KP_ENTRY + 1, spec.size)
            out.append({"weights": weights.tolist(), "values": values.tolist(), "capacity": capacity,
                        "optimum": knapsack_optimum(weights, values, capacity)})
        return out

    def sandbox_instance(self, instance: Instance) -> Instance:
        return {k: instance[k] for k in ("weights", "values", "capacity")}

    def score(self, instance: Instance, output: Any) -> float | None:
        """Gap (%) to the optimum; None unless distinct item indices within the capacity."""
        weights, values = instance["weights"], instance["values"]
        items = _int_list(output, max_length=len(weights))
        if items is None or len(set(items)) != len(items) or any(not 0 <= i < len(weights) for i in items):
            return None
        if sum(weights[i] for i in items) > instance["capacity"]:
            return None
        optimum = instance["optimum"]
        if optimum == 0:  # nothing fits at all: the empty knapsack is optimal
            return 0.0
        return 100.0 * (1.0 - sum(values[i] for i in items) / optimum)

    @staticmethod
    def value_ratio(gap: float) -> float:
        """Value / optimum for a gap from `score` (the ratio often reported for knapsack)."""
        return 1.0 - gap / 100.0


# --------------------------------------------------------------------------- admissible sets
# A symmetric vector of {0,1,2}^n is n/3 groups of 3 coordinates, each group one of these
# triples (a "child" is the tuple of triple indices); non-constant triples also stand for
# their two cyclic rotations, so a child expands to 3**(non-constant groups) vectors.
ASP_TRIPLES: tuple[tuple[int, int, int], ...] = ((0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 2), (0, 2, 1), (1, 1, 1),
                                                 (2, 2, 2))
ASP_WEIGHTS = np.array([sum(x != 0 for x in t) for t in ASP_TRIPLES])  # non-zeros per triple: 0,1,1,2,2,3,3
ASP_DEFAULT_W = {9: 6, 12: 7, 15: 10}  # n -> w
# Largest known I(n, w); all equal C(n, w), the bound from distinct supports, so they are
# optimal. 792 and 3003: FunSearch (Romera-Paredes et al., 2024), as in LLM4AD. 84 for
# n9w6: this greedy reaches it with random priorities (the tests verify that set by brute
# force), so C(9, 6) is attained; n9w6 is easy, a test case rather than a benchmark.
ASP_OPTIMA = {(9, 6): 84, (12, 7): 792, (15, 10): 3003}


def _asp_rotations(t: int) -> list[tuple[int, int, int]]:
    x, y, z = ASP_TRIPLES[t]
    return [(x, y, z)] if x == y == z else [(x, y, z), (z, x, y), (y, z, x)]


def asp_good_coordinate(a: int, b: int, c: int) -> bool:
    """The admissibility witness: the values of three vectors at one coordinate are {0,1,2}, {0,0,1} or {0,0,2}."""
    return sorted((a, b, c)) in ([0, 1, 2], [0, 0, 1], [0, 0, 2])


def _asp_blocked_triples() -> np.ndarray:
    """blocked[a, b, c]: some rotations of triples a, b, c (one from each of three children)
    leave the group without a good coordinate. Three distinct children conflict iff every
    group is blocked (the rotations are chosen per group independently)."""
    blocked = np.zeros((7, 7, 7), dtype=bool)
    for a, b, c in itertools.product(range(7), repeat=3):
        blocked[a, b, c] = any(not any(asp_good_coordinate(*k) for k in zip(ra, rb, rc))
                               for ra in _asp_rotations(a) for rb in _asp_rotations(b) for rc in _asp_rotations(c))
    return blocked


# The other conditions need no table: two vectors of one child differ in some group, and two
# distinct rotations of a triple give a good coordinate with any third triple, so triples
# with two vectors from one child never fail; two children share a support iff their groups
# have the same weights (rotations reach every support of a weight). The tests check these
# rules against brute force on the expanded vectors.
ASP_BLOCKED = _asp_blocked_triples()


@lru_cache(maxsize=8)
def asp_children(n: int, w: int) -> np.ndarray:
    """All children of total weight w as rows of triple indices, in itertools.product order
    (the order of the runner's priorities)."""
    if n % 3 or n <= 0:
        raise ValueError(f"construct_asp: n must be a positive multiple of 3, got {n}")
    rows = [c for c in itertools.product(range(7), repeat=n // 3) if sum(int(ASP_WEIGHTS[g]) for g in c) == w]
    out = np.array(rows, dtype=np.int64).reshape(len(rows), n // 3)
    out.setflags(write=False)
    return out


def asp_greedy(children: np.ndarray, priorities: np.ndarray) -> np.ndarray:
    """FunSearch's greedy: add the highest-priority child still allowed (first on ties), then
    drop the children it rules out. Returns the chosen children in the order added."""
    profile = ASP_WEIGHTS[children]  # (m, groups) weight of each group
    alive = np.ones(len(children), dtype=bool)
    chosen: list[int] = []
    while alive.any():
        idx = np.flatnonzero(alive)
        i = int(idx[np.argmax(priorities[idx])])
        alive[i] = False
        idx = np.flatnonzero(alive)
        new, rest = children[i], children[idx]
        kill = (profile[idx] == profile[i]).all(axis=1)  # same supports
        if chosen:
            old = children[chosen]  # each (old, new, rest) triple must not be blocked in every group
            kill |= ASP_BLOCKED[old[:, None, :], new[None, None, :], rest[None, :, :]].all(axis=2).any(axis=0)
        alive[idx[kill]] = False
        chosen.append(i)
    return children[chosen]


def asp_set_size(rows: np.ndarray) -> int:
    """Number of vectors the chosen children expand to."""
    rotating = ((rows != 0) & (rows != 5) & (rows != 6)).sum(axis=1)
    return int((3 ** rotating).sum())


def asp_expand(rows: np.ndarray) -> np.ndarray:
    """The vectors of {0,1,2}^n the children stand for (all rotation combinations)."""
    out = []
    for row in rows:
        for parts in itertools.product(*[_asp_rotations(int(t)) for t in row]):
            out.append(sum(parts, ()))
    return np.array(out, dtype=np.int64).reshape(len(out), 3 * rows.shape[1])


@dataclass
class ConstructASP(HeuristicTask):
    """FunSearch's admissible set problem: the candidate ranks vectors, a trusted greedy builds the set.

    The instance is only (n, w), so it is deterministic: `seed`, `split` and `spec.n` are
    ignored and `instances` returns one instance. n is params["n"] or spec.size; w is
    params["w"] or ASP_DEFAULT_W[n] (9 -> 6, 12 -> 7, 15 -> 10)."""

    name: ClassVar[str] = "construct_asp"
    function_name: ClassVar[str] = "priority"
    signature: ClassVar[str] = "def priority(el, n, w):"
    description: ClassVar[str] = (
        "Admissible set problem (FunSearch): build a large set of vectors in {0,1,2}^n, each with exactly w "
        "non-zero entries and a support (set of non-zero positions) of its own, such that for any three distinct "
        "vectors some coordinate holds the values {0,1,2}, {0,0,1} or {0,0,2} (in any order). Only symmetric "
        "vectors are considered: the n coordinates form n/3 groups of 3, each group one of (0,0,0), (0,0,1), "
        "(0,0,2), (0,1,2), (0,2,1), (1,1,1), (2,2,2), and a vector also stands for all cyclic rotations of its "
        "non-constant groups. A greedy algorithm adds the candidate vectors in order of decreasing priority, "
        "skipping any that would break the rules; the function priority gives that priority.\n"
        "Inputs: el (tuple of n ints, each 0, 1 or 2): a candidate vector with w non-zero entries; n (int): the "
        "vector length; w (int): the number of non-zero entries.\n"
        "Return: a float, the priority of el (higher is added earlier). numpy is available as np.\n"
        "Goal: a large admissible set (scored as how many vectors it has fewer than the best known set)."
    )
    metric: ClassVar[str] = "set size below the known optimum"
    reference_code: ClassVar[str] = '''import numpy as np


def priority(el, n, w):
    """LLM4AD's trivial priority: the mean entry (vectors with more 2s first)."""
    return float(sum(el)) / n
'''
    expression_template: ClassVar[str] = '''import numpy as np


def priority(el, n, w):
    x = np.asarray(el).reshape(-1, 3)  # the n/3 groups of 3 coordinates
    t = float(np.count_nonzero(x == 2))  # number of entries equal to 2
    r = float(np.count_nonzero(x.min(axis=1) != x.max(axis=1)))  # non-constant groups
    f = float(np.count_nonzero(x.min(axis=1) > 0))  # groups (1,1,1) or (2,2,2)
    z = float(np.count_nonzero(x.max(axis=1) == 0))  # groups (0,0,0)
    return float({expr})  # the highest priority is added first
'''
    features: ClassVar[dict[str, str]] = {
        "t": "number of entries equal to 2",
        "r": "number of non-constant groups (the vector stands for 3**r rotated vectors)",
        "f": "number of groups (1,1,1) or (2,2,2)",
        "z": "number of groups (0,0,0)",
    }
    runner: ClassVar[str] = "run_construct_asp.py"

    def _n_w(self, spec: InstanceSpec) -> tuple[int, int]:
        n = int(self.params.get("n", spec.size))
        if "w" in self.params:
            w = int(self.params["w"])
        elif n in ASP_DEFAULT_W:
            w = ASP_DEFAULT_W[n]
        else:
            raise ValueError(f"{self.name}: no default w for n={n} (known: {ASP_DEFAULT_W}); set params.w")
        if n % 3 or n <= 0 or not 0 < w <= n:
            raise ValueError(f"{self.name}: need n a positive multiple of 3 and 0 < w <= n, got n={n}, w={w}")
        return n, w

    def instances(self, split: str, spec: InstanceSpec, seed: int) -> list[Instance]:
        n, w = self._n_w(spec)
        return [{"n": n, "w": w}]

    def score(self, instance: Instance, output: Any) -> float | None:
        """Known optimum minus set size (or minus the size); None unless one finite-or-inf number per child."""
        n, w = int(instance["n"]), int(instance["w"])
        children = asp_children(n, w)
        if not isinstance(output, (list, tuple)) or len(output) != len(children):
            return None
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in output):
            return None
        try:
            priorities = np.array(output, dtype=float)
        except OverflowError:  # an int beyond float range
            return None
        if np.isnan(priorities).any():
            return None
        size = asp_set_size(asp_greedy(children, priorities))
        return float(ASP_OPTIMA.get((n, w), 0) - size)

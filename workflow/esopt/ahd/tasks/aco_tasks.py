"""Heuristic matrices for Ant Colony Optimization: TSP, CVRP, bin packing (ReEvo style).

The LLM writes `heuristics(...)`, which returns a matrix eta of prior desirabilities
(of an edge, or of two items sharing a bin); the trusted ACO solver in
`esopt.ahd.tasks.aco` samples solutions with odds tau^alpha * eta^beta and learns the
pheromone tau. The runner (run_aco_*.py) only calls the candidate and returns eta;
`score` validates it here and runs the seeded solver.

What counts as a valid matrix (same for the three tasks; the diagonal is never used
by the solvers, so it is ignored):
  * a numeric n x n array (JSON lists of numbers), n = nodes or items;
  * every off-diagonal entry finite (NaN or +-inf: invalid, as it breaks ReEvo's
    sampler too);
  * at least one off-diagonal entry > 0 (otherwise it carries no information).
It is then divided by its largest off-diagonal entry (only ratios matter to the
sampler; this also tames huge values) and clipped from below to a small floor:
entries <= 0 become "nearly forbidden" rather than invalid, as ReEvo effectively does
(its `heu[heu < 1e-9] = 1e-9`). Floors: 1e-9 for TSP/CVRP, 1e-6 for BPP, as ReEvo.

Instances are drawn from numpy's default_rng seeded by a hash of (task, split, seed,
index), and each carries the seed of its ACO run, so every score is deterministic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from esopt.ahd.tasks import aco
from esopt.ahd.tasks.base import HeuristicTask, Instance, InstanceSpec


def instance_rng(*key: Any) -> np.random.Generator:
    """A generator seeded by a stable hash of the key (Python's hash() is salted)."""
    digest = hashlib.sha256("/".join(map(str, key)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def distance_matrix(coords: np.ndarray) -> np.ndarray:
    """Euclidean distances (zero diagonal)."""
    diff = coords[:, None, :] - coords[None, :, :]
    return np.sqrt((diff**2).sum(axis=-1))


def heuristic_matrix(output: Any, n: int, floor: float) -> np.ndarray | None:
    """The untrusted output as a usable n x n heuristic matrix, or None (see module doc)."""
    if isinstance(output, (list, tuple)) and len(output) != n:
        return None
    try:
        arr = np.asarray(output)
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError):
        return None
    if arr.dtype.kind not in "biuf" or arr.shape != (n, n):
        return None
    h = arr.astype(float)
    off = ~np.eye(n, dtype=bool)
    vals = h[off]
    if not np.isfinite(vals).all():
        return None
    top = vals.max(initial=-np.inf)
    if not top > 0:
        return None
    with np.errstate(all="ignore"):
        h = h / top
    h[~off] = 1.0
    return np.clip(h, floor, 1.0)


@dataclass
class _ACOTask(HeuristicTask):
    """What the three ACO tasks share: params, seeded instances, the ACO settings."""

    aco_defaults: ClassVar[dict[str, Any]] = {}
    instance_defaults: ClassVar[dict[str, Any]] = {}
    eta_floor: ClassVar[float] = 1e-9
    aco_params: aco.ACOParams = field(init=False)  # from params, over the task's ACO defaults

    def __post_init__(self) -> None:
        known = set(self.instance_defaults) | set(aco.ACOParams.__dataclass_fields__)
        unknown = set(self.params) - known
        if unknown:
            raise ValueError(f"{self.name}: unknown params {sorted(unknown)}; known: {sorted(known)}")
        self.aco_params = aco.ACOParams.from_dict(self.params, **self.aco_defaults)

    def option(self, key: str) -> Any:
        return self.params.get(key, self.instance_defaults[key])

    def demand_range(self) -> tuple[int, int, int]:
        """(capacity, lowest demand, highest demand) from params, checked."""
        capacity, low, high = (int(self.option(k)) for k in ("capacity", "demand_low", "demand_high"))
        if not 1 <= low <= high <= capacity:
            raise ValueError(f"{self.name}: need 1 <= demand_low <= demand_high <= capacity, "
                             f"got {low}, {high}, {capacity}")
        return capacity, low, high

    def _rngs(self, split: str, spec: InstanceSpec, seed: int) -> Iterator[np.random.Generator]:
        if spec.size < 3:
            raise ValueError(f"{self.name}: size must be at least 3, got {spec.size}")
        for i in range(spec.n):
            yield instance_rng(self.name, split, seed, i)

    def _aco_rng(self, instance: Instance) -> np.random.Generator:
        return np.random.default_rng(int(instance["aco_seed"]))


# ----------------------------------------------------------------------------- TSP
@dataclass
class ACOTSP(_ACOTask):
    name: ClassVar[str] = "aco_tsp"
    function_name: ClassVar[str] = "heuristics"
    signature: ClassVar[str] = "def heuristics(distance_matrix):"
    metric: ClassVar[str] = "tour length"
    runner: ClassVar[str] = "run_aco_tsp.py"
    aco_defaults: ClassVar[dict[str, Any]] = {"n_ants": 30, "n_iterations": 100, "decay": 0.9}
    description: ClassVar[str] = (
        "Traveling salesman problem (TSP) solved by Ant Colony Optimization (ACO). There are n cities, "
        "points in the unit square; a tour visits every city once and returns to the start, and the goal "
        "is the shortest tour. Ants build tours city by city: an ant at city i moves to an unvisited city "
        "j with probability proportional to pheromone[i, j] * heuristics[i, j]; the pheromone learns from "
        "short tours over the iterations. Write the function `heuristics(distance_matrix)` that gives "
        "the prior desirability of every edge. Input: distance_matrix, a numpy float array of shape (n, n) "
        "with the Euclidean distance between cities i and j (its diagonal is set to 1; the diagonal is "
        "never used). Return: a numpy array of shape (n, n) of finite numbers, higher = more promising "
        "edge. Only ratios matter (the matrix is divided by its largest entry); entries <= 0 mark edges as "
        "nearly forbidden; NaN or infinite entries make the heuristic invalid. numpy is available as np. "
        "Score: the length of the best tour the ACO finds (lower is better)."
    )
    reference_code: ClassVar[str] = (
        "import numpy as np\n"
        "\n"
        "def heuristics(distance_matrix):\n"
        "    \"\"\"Short edges are promising (ReEvo's seed heuristic).\"\"\"\n"
        "    return 1.0 / distance_matrix\n"
    )
    expression_template: ClassVar[str] = (
        "import numpy as np\n"
        "\n"
        "def heuristics(distance_matrix):\n"
        "    d = np.asarray(distance_matrix, dtype=float)  # edge length (the diagonal is 1)\n"
        "    n = len(d)\n"
        "    self_edge = np.eye(n, dtype=bool)\n"
        "    r = d / np.nanmean(np.where(self_edge, np.nan, d), axis=1, keepdims=True)  # length / the node's mean\n"
        "    k = np.argsort(np.argsort(np.where(self_edge, np.inf, d), axis=1), axis=1) + 1.0  # 1 = nearest\n"
        "    return np.broadcast_to({expr}, d.shape)  # higher = more desirable\n"
    )
    features: ClassVar[dict[str, str]] = {
        "d": "length of edge i->j",
        "r": "length of edge i->j divided by the mean length of i's edges",
        "k": "rank of j among i's neighbours by distance (1 = nearest)",
    }

    def instances(self, split: str, spec: InstanceSpec, seed: int) -> list[Instance]:
        out = []
        for rng in self._rngs(split, spec, seed):
            coords = rng.random((spec.size, 2))
            out.append({"coords": coords.tolist(), "aco_seed": int(rng.integers(2**31))})
        return out

    def sandbox_instance(self, instance: Instance) -> Instance:
        return {"coords": instance["coords"]}

    def score(self, instance: Instance, output: Any) -> float | None:
        dist = distance_matrix(np.asarray(instance["coords"], dtype=float))
        eta = heuristic_matrix(output, len(dist), self.eta_floor)
        if eta is None:
            return None
        length, _ = aco.solve_tsp(dist, eta, self.aco_params, self._aco_rng(instance))
        return length


# ---------------------------------------------------------------------------- CVRP
@dataclass
class ACOCVRP(_ACOTask):
    name: ClassVar[str] = "aco_cvrp"
    function_name: ClassVar[str] = "heuristics"
    signature: ClassVar[str] = "def heuristics(distance_matrix, coordinates, demands, capacity):"
    metric: ClassVar[str] = "total distance"
    runner: ClassVar[str] = "run_aco_cvrp.py"
    aco_defaults: ClassVar[dict[str, Any]] = {"n_ants": 30, "n_iterations": 100, "decay": 0.9}
    # ReEvo/DeepACO: capacity 50, integer demands 1..9, depot at the centre of the unit square.
    instance_defaults: ClassVar[dict[str, Any]] = {"capacity": 50, "demand_low": 1, "demand_high": 9,
                                                   "depot": "center"}
    description: ClassVar[str] = (
        "Capacitated vehicle routing problem (CVRP) solved by Ant Colony Optimization (ACO). Node 0 is the "
        "depot and nodes 1..n-1 are customers, points in the unit square, each with an integer demand. "
        "Vehicles of a given capacity leave the depot, serve customers and return; every customer is "
        "served exactly once and a route's total demand must not exceed the capacity. The goal is the "
        "shortest total distance. Ants build routes node by node: from node i an ant moves to node j "
        "(an unserved customer whose demand still fits, or the depot) with probability proportional to "
        "pheromone[i, j] * heuristics[i, j]. Write `heuristics(distance_matrix, coordinates, demands, "
        "capacity)` that gives the prior desirability of every edge. Inputs: distance_matrix, numpy float "
        "array (n, n) of Euclidean distances (diagonal set to 1, never used); coordinates, numpy float "
        "array (n, 2); demands, numpy float array (n,) with demands[0] = 0 for the depot; capacity, an int. "
        "Return: a numpy array of shape (n, n) of finite numbers, higher = more promising edge i->j. Only "
        "ratios matter (the matrix is divided by its largest entry); entries <= 0 mark edges as nearly "
        "forbidden; NaN or infinite entries make the heuristic invalid. numpy is available as np. Score: "
        "the total route length of the best solution the ACO finds (lower is better)."
    )
    reference_code: ClassVar[str] = (
        "import numpy as np\n"
        "\n"
        "def heuristics(distance_matrix, coordinates, demands, capacity):\n"
        "    \"\"\"Short edges are promising (ReEvo's seed heuristic).\"\"\"\n"
        "    return 1.0 / distance_matrix\n"
    )
    expression_template: ClassVar[str] = (
        "import numpy as np\n"
        "\n"
        "def heuristics(distance_matrix, coordinates, demands, capacity):\n"
        "    d = np.asarray(distance_matrix, dtype=float)  # edge length (the diagonal is 1)\n"
        "    e = np.where(np.eye(len(d), dtype=bool), 0.0, d)\n"
        "    s = 1.0 + e[:, :1] + e[:1, :] - e  # 1 + saving of serving i and j on one route\n"
        "    q = np.maximum(np.asarray(demands, dtype=float), 1.0)[None, :] / capacity  # j's demand share\n"
        "    h = d[:1, :]  # distance from the depot to j\n"
        "    return np.broadcast_to({expr}, d.shape)  # higher = more desirable\n"
    )
    features: ClassVar[dict[str, str]] = {
        "d": "length of edge i->j",
        "s": "1 + the saving d(i,0)+d(0,j)-d(i,j) of serving i and j on one route (1 at the depot)",
        "q": "demand of j divided by the vehicle capacity (the depot counts as demand 1)",
        "h": "distance from the depot to j (1 for the depot itself)",
    }

    def instances(self, split: str, spec: InstanceSpec, seed: int) -> list[Instance]:
        depot = self.option("depot")
        if depot not in ("center", "random"):
            raise ValueError(f"aco_cvrp: depot must be 'center' or 'random', got {depot!r}")
        capacity, low, high = self.demand_range()
        out = []
        for rng in self._rngs(split, spec, seed):
            customers = rng.random((spec.size, 2))
            start = rng.random((1, 2)) if depot == "random" else np.array([[0.5, 0.5]])
            demands = np.concatenate([[0], rng.integers(low, high + 1, size=spec.size)])
            out.append({"coords": np.concatenate([start, customers]).tolist(), "demands": demands.tolist(),
                        "capacity": capacity, "aco_seed": int(rng.integers(2**31))})
        return out

    def sandbox_instance(self, instance: Instance) -> Instance:
        return {k: instance[k] for k in ("coords", "demands", "capacity")}

    def score(self, instance: Instance, output: Any) -> float | None:
        dist = distance_matrix(np.asarray(instance["coords"], dtype=float))
        eta = heuristic_matrix(output, len(dist), self.eta_floor)
        if eta is None:
            return None
        length, _ = aco.solve_cvrp(dist, np.asarray(instance["demands"], dtype=float), float(instance["capacity"]),
                                   eta, self.aco_params, self._aco_rng(instance))
        return length


# ----------------------------------------------------------------------------- BPP
@dataclass
class ACOBPP(_ACOTask):
    name: ClassVar[str] = "aco_bpp"
    function_name: ClassVar[str] = "heuristics"
    signature: ClassVar[str] = "def heuristics(demand, capacity):"
    metric: ClassVar[str] = "bins over the lower bound"
    runner: ClassVar[str] = "run_aco_bpp.py"
    # ReEvo's offline BPP: 20 ants, 15 iterations, decay 0.95; items 20..100, capacity 150.
    aco_defaults: ClassVar[dict[str, Any]] = {"n_ants": 20, "n_iterations": 15, "decay": 0.95}
    instance_defaults: ClassVar[dict[str, Any]] = {"capacity": 150, "demand_low": 20, "demand_high": 100}
    eta_floor: ClassVar[float] = 1e-6
    description: ClassVar[str] = (
        "Offline bin packing (BPP) solved by Ant Colony Optimization (ACO). There are n items with integer "
        "sizes and identical bins of a given capacity; pack every item so that no bin's total exceeds the "
        "capacity, using as few bins as possible. Ants fill one bin at a time: the first item of a bin is "
        "random; each next item j, among the unpacked items that still fit, is chosen with probability "
        "proportional to the mean over the items i already in the bin of pheromone[i, j] * heuristics[i, j]; "
        "when nothing fits, a new bin is opened. Write `heuristics(demand, capacity)` that gives how "
        "promising it is to put items i and j in the same bin. Inputs: demand, numpy float array (n,) of "
        "item sizes; capacity, an int. Return: a numpy array of shape (n, n) of finite numbers, higher = "
        "more promising pair. Only ratios matter (the matrix is divided by its largest entry); entries <= 0 "
        "mark pairs as nearly forbidden; NaN or infinite entries make the heuristic invalid. numpy is "
        "available as np. Score: bins used by the best packing the ACO finds minus the lower bound "
        "ceil(sum(demand) / capacity) (lower is better, 0 is optimal)."
    )
    reference_code: ClassVar[str] = (
        "import numpy as np\n"
        "\n"
        "def heuristics(demand, capacity):\n"
        "    \"\"\"Prefer adding large items (ReEvo's seed heuristic).\"\"\"\n"
        "    return np.tile(demand / demand.max(), (demand.shape[0], 1))\n"
    )
    expression_template: ClassVar[str] = (
        "import numpy as np\n"
        "\n"
        "def heuristics(demand, capacity):\n"
        "    w = np.asarray(demand, dtype=float)\n"
        "    a = w[:, None] / capacity  # size of item i (in the bin) as a share of the capacity\n"
        "    b = w[None, :] / capacity  # size of candidate item j as a share of the capacity\n"
        "    s = a + b  # how full a bin holding both would be\n"
        "    return np.broadcast_to({expr}, (len(w), len(w)))  # higher = more desirable\n"
    )
    features: ClassVar[dict[str, str]] = {
        "a": "size of item i (already in the bin) divided by the capacity",
        "b": "size of candidate item j divided by the capacity",
        "s": "a + b, how full a bin holding both items would be",
    }

    def instances(self, split: str, spec: InstanceSpec, seed: int) -> list[Instance]:
        capacity, low, high = self.demand_range()
        out = []
        for rng in self._rngs(split, spec, seed):
            demands = rng.integers(low, high + 1, size=spec.size)
            out.append({"demands": demands.tolist(), "capacity": capacity,
                        "lower_bound": aco.bpp_lower_bound(demands, capacity),
                        "aco_seed": int(rng.integers(2**31))})
        return out

    def sandbox_instance(self, instance: Instance) -> Instance:
        return {"demands": instance["demands"], "capacity": instance["capacity"]}

    def score(self, instance: Instance, output: Any) -> float | None:
        demands = np.asarray(instance["demands"], dtype=float)
        eta = heuristic_matrix(output, len(demands), self.eta_floor)
        if eta is None:
            return None
        capacity = float(instance["capacity"])
        bins, _ = aco.solve_bpp(demands, capacity, eta, self.aco_params, self._aco_rng(instance))
        return float(bins - aco.bpp_lower_bound(demands, capacity))

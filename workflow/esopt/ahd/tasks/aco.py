"""A small vectorized Ant System for the ACO heuristic-design tasks (numpy only).

The solver the LLM's heuristic matrix plugs into, as in DeepACO / ReEvo (Ye et al.
2023, 2024): pheromone tau starts at 1; an ant extends its partial solution with
probability proportional to tau^alpha * eta^beta, where eta is the designed heuristic
matrix; after every iteration the pheromone decays (`decay` is the fraction kept) and
every ant deposits on the edges it used (plain Ant System, no elitism, as in ReEvo's
solvers). The best solution over all iterations is returned.

All ants of an iteration are built in lockstep (one numpy step moves every ant), so a
solve costs about n_iterations * n steps of small array operations rather than a
Python loop per ant. Everything is drawn from the `numpy.random.Generator` passed in,
so a solve is deterministic given its seed.

Heuristic matrices must already be validated (finite, positive): see
`esopt.ahd.tasks.aco_tasks`, which does that for untrusted output.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

PHEROMONE_FLOOR = 1e-10  # as ReEvo's CVRP solver: keeps every move possible
BPP_EPS = 1e-5  # ReEvo's BPP: added to the bin's mean attraction so no fitting item has zero odds


@dataclass(frozen=True)
class ACOParams:
    """Ant System settings. Defaults are ReEvo's TSP/CVRP ones (30 ants, 100 iterations)."""

    n_ants: int = 30
    n_iterations: int = 100
    alpha: float = 1.0  # weight of the pheromone
    beta: float = 1.0  # weight of the heuristic matrix
    decay: float = 0.9  # fraction of the pheromone kept per iteration (ReEvo's "decay")

    def __post_init__(self) -> None:
        if int(self.n_ants) < 1 or int(self.n_iterations) < 1:
            raise ValueError(f"ACO needs at least one ant and one iteration, got {self}")
        if not 0.0 < float(self.decay) <= 1.0:
            raise ValueError(f"ACO decay must be in (0, 1], got {self.decay}")

    @classmethod
    def from_dict(cls, params: dict[str, Any], **defaults: Any) -> ACOParams:
        """The ACO keys of a task's params (others are ignored), over per-task defaults."""
        names = {f.name for f in fields(cls)}
        merged = {**defaults, **{k: v for k, v in params.items() if k in names}}
        return cls(**merged)


def _sample(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One index per row, drawn with probability proportional to the row's weights.

    Inverse CDF with the uniforms `u` (one per row). Every row must have a positive
    weight; a draw landing past the total by rounding takes the last positive entry."""
    c = np.cumsum(weights, axis=1)
    hit = c > (u * c[:, -1])[:, None]
    idx = hit.argmax(axis=1)
    missed = ~hit[np.arange(len(idx)), idx]
    if missed.any():
        n = weights.shape[1]
        idx[missed] = n - 1 - (weights[missed, ::-1] > 0).argmax(axis=1)
    return idx


def _weights(tau: np.ndarray, eta_beta: np.ndarray, alpha: float) -> np.ndarray:
    return (tau if alpha == 1.0 else tau**alpha) * eta_beta


# ----------------------------------------------------------------------------- TSP
def tour_length(distances: np.ndarray, tour: np.ndarray) -> float:
    """Length of the closed tour (returns to its first node)."""
    tour = np.asarray(tour)
    return float(distances[tour, np.roll(tour, -1)].sum())


def _build_tours(w: np.ndarray, n_ants: int, rng: np.random.Generator) -> np.ndarray:
    """(n_ants, n) tours: random start, then next node ~ w[current] over unvisited nodes."""
    n = len(w)
    rows = np.arange(n_ants)
    tours = np.empty((n_ants, n), dtype=np.intp)
    cur = rng.integers(n, size=n_ants)
    tours[:, 0] = cur
    open_ = np.ones((n_ants, n))
    open_[rows, cur] = 0.0
    u = rng.random((n, n_ants))
    for t in range(1, n):
        cur = _sample(w[cur] * open_, u[t])
        tours[:, t] = cur
        open_[rows, cur] = 0.0
    return tours


def solve_tsp(distances: np.ndarray, heuristic: np.ndarray, params: ACOParams,
              rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """Best tour length found and the tour. Deposits are symmetric (1/length per edge)."""
    n = len(distances)
    if n < 3:
        tour = np.arange(n)
        return tour_length(distances, tour), tour
    tau = np.ones((n, n))
    eta_beta = heuristic**params.beta
    best_len, best_tour = np.inf, np.arange(n)
    for _ in range(int(params.n_iterations)):
        tours = _build_tours(_weights(tau, eta_beta, params.alpha), int(params.n_ants), rng)
        nxt = np.roll(tours, -1, axis=1)
        lengths = distances[tours, nxt].sum(axis=1)
        i = int(lengths.argmin())
        if lengths[i] < best_len:
            best_len, best_tour = float(lengths[i]), tours[i].copy()
        tau *= params.decay
        delta = np.bincount((tours * n + nxt).ravel(), weights=np.repeat(1.0 / lengths, n),
                            minlength=n * n).reshape(n, n)
        tau += delta + delta.T
    return best_len, best_tour


# ---------------------------------------------------------------------------- CVRP
def route_length(distances: np.ndarray, path: np.ndarray) -> float:
    """Length of a depot-delimited path such as [0, 3, 1, 0, 2, 0] (not closed)."""
    path = np.asarray(path)
    return float(distances[path[:-1], path[1:]].sum())


def _build_routes(w: np.ndarray, demands: np.ndarray, capacity: float, n_ants: int,
                  rng: np.random.Generator) -> np.ndarray:
    """(n_ants, steps) paths from the depot (node 0) back to it, padded with 0.

    As ReEvo/DeepACO: customers whose demand exceeds the remaining load are masked, so
    an ant returns to the depot when nothing left fits; it may also choose the depot
    earlier (its odds are tau * eta of that edge), but never twice in a row while
    customers remain. A finished ant stays at the depot (0 -> 0, length 0)."""
    n = len(demands)
    rows = np.arange(n_ants)
    left = np.ones((n_ants, n), dtype=bool)
    left[:, 0] = False
    cur = np.zeros(n_ants, dtype=np.intp)
    load = np.zeros(n_ants)
    steps = [cur]
    while True:
        remaining = left.any(axis=1)
        if not remaining.any() and not cur.any():
            break
        allowed = left & (demands[None, :] <= (capacity - load)[:, None])
        allowed[:, 0] = (cur != 0) | ~remaining
        cur = _sample(w[cur] * allowed, rng.random(n_ants))
        load = np.where(cur == 0, 0.0, load + demands[cur])
        left[rows, cur] = False
        steps.append(cur)
    return np.stack(steps, axis=1)


def _trim(path: np.ndarray) -> np.ndarray:
    """Drop the padding: repeated depot visits."""
    keep = np.ones(len(path), dtype=bool)
    keep[1:] = ~((path[1:] == 0) & (path[:-1] == 0))
    return path[keep]


def solve_cvrp(distances: np.ndarray, demands: np.ndarray, capacity: float, heuristic: np.ndarray,
               params: ACOParams, rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """Best total route length found and its path ([0, ..., 0, ..., 0]).

    Deposits go on directed edges (1/length), as in ReEvo's CVRP solver."""
    n = len(distances)
    demands = np.asarray(demands, dtype=float)
    if demands[1:].max(initial=0.0) > capacity:
        raise ValueError("a customer's demand exceeds the vehicle capacity")
    tau = np.ones((n, n))
    eta_beta = heuristic**params.beta
    best_len, best_path = np.inf, np.zeros(1, dtype=np.intp)
    for _ in range(int(params.n_iterations)):
        paths = _build_routes(_weights(tau, eta_beta, params.alpha), demands, capacity,
                              int(params.n_ants), rng)
        u, v = paths[:, :-1], paths[:, 1:]
        lengths = distances[u, v].sum(axis=1)
        i = int(lengths.argmin())
        if lengths[i] < best_len:
            best_len, best_path = float(lengths[i]), _trim(paths[i])
        tau *= params.decay
        moved = u != v
        dep = np.broadcast_to((1.0 / lengths)[:, None], u.shape)
        tau += np.bincount((u * n + v)[moved], weights=dep[moved], minlength=n * n).reshape(n, n)
        np.maximum(tau, PHEROMONE_FLOOR, out=tau)
    return best_len, best_path


# ----------------------------------------------------------------------------- BPP
def bpp_lower_bound(demands: np.ndarray, capacity: float) -> int:
    """ceil(total demand / capacity): no packing uses fewer bins."""
    return int(np.ceil(np.sum(demands) / capacity - 1e-9))


def _pack(w: np.ndarray, demands: np.ndarray, capacity: float, n_ants: int,
          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pack every item, one per step, as ReEvo's offline-BPP ACO.

    Bins are filled one at a time. A bin's first item is drawn uniformly among the
    unpacked items; each next one among the unpacked items that still fit, with odds
    = mean over the bin's items i of w[i, j] (+ BPP_EPS). When nothing fits, the bin
    is closed and a new one opened. Returns (bin index per item (n_ants, n), bins used
    (n_ants,), Falkenauer fitness mean((load/capacity)^2) (n_ants,))."""
    n = len(demands)
    rows = np.arange(n_ants)
    unpacked = np.ones((n_ants, n), dtype=bool)
    vacancy = np.full(n_ants, float(capacity))
    attraction = np.zeros((n_ants, n))  # sum over the current bin's items of w[i, :]
    count = np.zeros(n_ants)
    bin_of = np.zeros((n_ants, n), dtype=np.intp)
    current = np.zeros(n_ants, dtype=np.intp)
    u = rng.random((n, n_ants))
    for t in range(n):
        fits = unpacked & (demands[None, :] <= vacancy[:, None])
        full = ~fits.any(axis=1)
        if full.any():
            current[full] += 1
            vacancy[full] = capacity
            count[full] = 0.0
            attraction[full] = 0.0
            fits[full] = unpacked[full]
        odds = np.where(count[:, None] > 0, attraction / np.maximum(count, 1.0)[:, None] + BPP_EPS, 1.0)
        j = _sample(odds * fits, u[t])
        bin_of[rows, j] = current
        vacancy -= demands[j]
        unpacked[rows, j] = False
        count += 1.0
        attraction += w[j]
    used = current + 1
    loads = np.bincount((bin_of + rows[:, None] * n).ravel(), weights=np.tile(demands, n_ants),
                        minlength=n_ants * n).reshape(n_ants, n)
    fitness = ((loads / capacity) ** 2).sum(axis=1) / used
    return bin_of, used, fitness


def solve_bpp(demands: np.ndarray, capacity: float, heuristic: np.ndarray, params: ACOParams,
              rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """Fewest bins found and the bin index of every item.

    Each ant deposits fitness / n_ants on every pair of items it put in one bin
    (ReEvo), so pheromone learns which items go together."""
    demands = np.asarray(demands, dtype=float)
    n = len(demands)
    if demands.max(initial=0.0) > capacity:
        raise ValueError("an item is larger than the bin capacity")
    tau = np.ones((n, n))
    eta_beta = heuristic**params.beta
    best_bins, best_assign = n + 1, np.arange(n)
    n_ants = int(params.n_ants)
    for _ in range(int(params.n_iterations)):
        bin_of, used, fitness = _pack(_weights(tau, eta_beta, params.alpha), demands, capacity, n_ants, rng)
        i = int(used.argmin())
        if used[i] < best_bins:
            best_bins, best_assign = int(used[i]), bin_of[i].copy()
        tau *= params.decay
        for b, f in zip(bin_of, fitness):
            tau += (f / n_ants) * (b[:, None] == b[None, :])
    return best_bins, best_assign

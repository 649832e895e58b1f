"""Sandbox side of construct_tsp (standard library and numpy only; no esopt imports).

Builds a tour from node 0 by calling the candidate `select_next_node` until every node is
visited. A choice that is not an unvisited node ends the loop and is returned as is, so
the trusted parent's `score` rejects the tour.
"""

import operator

import numpy as np


def _as_int(x):
    """The choice as a plain int, or None (floats and arrays are not node indices)."""
    try:
        return operator.index(x)
    except TypeError:
        return None


def run(heuristic, instance):
    coords = np.asarray(instance["coords"], dtype=float)
    n = len(coords)
    dist = np.sqrt(((coords[:, None, :] - coords[None, :, :]) ** 2).sum(-1))
    tour = [0]
    unvisited = list(range(1, n))
    while unvisited:
        # Fresh copies: a heuristic that writes into its inputs cannot corrupt later steps.
        choice = _as_int(heuristic(tour[-1], 0, np.array(unvisited, dtype=np.int64), dist.copy()))
        tour.append(choice)
        if choice not in unvisited:
            return tour
        unvisited.remove(choice)
    return tour

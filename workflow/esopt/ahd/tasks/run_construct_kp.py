"""Sandbox side of construct_kp (standard library and numpy only; no esopt imports).

Fills the knapsack by calling the candidate `select_next_item` with the items that are
not chosen and still fit, mapping its local index back to the item number, until no
item fits. Returns the chosen item numbers in order. An index outside the arrays ends
the loop and is returned as is (or None), so the trusted parent's `score` rejects it.
"""

import operator

import numpy as np


def _as_int(x):
    """The choice as a plain int, or None (floats and arrays are not indices)."""
    try:
        return operator.index(x)
    except TypeError:
        return None


def run(heuristic, instance):
    weights = np.asarray(instance["weights"], dtype=np.int64)
    values = np.asarray(instance["values"], dtype=np.int64)
    remaining = int(instance["capacity"])
    free = np.ones(len(weights), dtype=bool)
    chosen = []
    while True:
        fit = np.flatnonzero(free & (weights <= remaining))
        if len(fit) == 0:
            return chosen
        choice = _as_int(heuristic(remaining, weights[fit].copy(), values[fit].copy()))
        if choice is None or not 0 <= choice < len(fit):
            chosen.append(choice)
            return chosen
        item = int(fit[choice])
        chosen.append(item)
        free[item] = False
        remaining -= int(weights[item])

"""Sandbox side of aco_bpp: call the candidate `heuristics(demand, capacity)`, return its matrix.

Self-contained (numpy and the standard library only); the trusted parent validates
the matrix and runs the ACO (esopt.ahd.tasks.aco_tasks.ACOBPP.score).
"""

import numpy as np


def _matrix_output(h, n):
    """The candidate's matrix as nested lists of floats (6 significant digits, to keep
    the output small), or a short string saying why not; the parent rejects strings."""
    try:
        a = np.asarray(h, dtype=float)
    except Exception as e:  # noqa: BLE001  any failure just means an invalid output
        return f"not a numeric array: {type(e).__name__}"
    if a.shape != (n, n):
        return f"shape {a.shape}, expected ({n}, {n})"
    return [[float(f"{x:.6g}") for x in row] for row in a.tolist()]


def run(heuristic, instance):
    demand = np.asarray(instance["demands"], dtype=float)
    return _matrix_output(heuristic(demand, int(instance["capacity"])), len(demand))

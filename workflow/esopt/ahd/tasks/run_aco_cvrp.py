"""Sandbox side of aco_cvrp: call `heuristics(distance_matrix, coordinates, demands, capacity)`.

Self-contained (numpy and the standard library only); the trusted parent validates
the matrix and runs the ACO (esopt.ahd.tasks.aco_tasks.ACOCVRP.score). Node 0 is the depot.
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
    coords = np.asarray(instance["coords"], dtype=float)
    d = np.sqrt(((coords[:, None, :] - coords[None, :, :]) ** 2).sum(axis=-1))
    np.fill_diagonal(d, 1.0)  # as ReEvo: 1/d stays finite
    demands = np.asarray(instance["demands"], dtype=float)
    return _matrix_output(heuristic(d, coords.copy(), demands, int(instance["capacity"])), len(d))

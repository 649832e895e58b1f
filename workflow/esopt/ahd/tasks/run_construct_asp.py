"""Sandbox side of construct_asp (standard library and numpy only; no esopt imports).

Only computes the candidate's priority of every child of weight w, one float each, in
itertools.product order over the 7 triples per group (the order of
esopt.ahd.tasks.construct.asp_children). The greedy that builds the admissible set runs
in the trusted parent. Each child is passed as its vector: the concatenated triples.
"""

import itertools

TRIPLES = ((0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 2), (0, 2, 1), (1, 1, 1), (2, 2, 2))
WEIGHTS = (0, 1, 1, 2, 2, 3, 3)  # non-zero entries of each triple


def run(heuristic, instance):
    n, w = int(instance["n"]), int(instance["w"])
    priorities = []
    for child in itertools.product(range(7), repeat=n // 3):
        if sum(WEIGHTS[t] for t in child) == w:
            el = sum((TRIPLES[t] for t in child), ())
            priorities.append(float(heuristic(el, n, w)))
    return priorities

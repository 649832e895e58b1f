"""Automatic heuristic design tasks (the paper's test-time setting).

Six tasks, all minimized: three constructive heuristics (construct_tsp, construct_kp,
construct_asp; esopt.ahd.tasks.construct) and three heuristic matrices for Ant Colony
Optimization (aco_tsp, aco_cvrp, aco_bpp; esopt.ahd.tasks.aco_tasks). Generated code is
evaluated by esopt.ahd.evaluate.

Each task's sandbox-side runner (run_*.py, self-contained) lives in this folder:
`HeuristicTask.runner_source` reads it by file name next to base.py and the evaluator
ships its text into the sandbox, so the runners are never imported here.
"""

from __future__ import annotations

from typing import Any

from esopt.ahd.tasks.base import HeuristicTask, InstanceSpec

TASK_NAMES = ("construct_tsp", "construct_kp", "construct_asp", "aco_tsp", "aco_cvrp", "aco_bpp")


def task_classes() -> dict[str, type[HeuristicTask]]:
    from esopt.ahd.tasks.aco_tasks import ACOBPP, ACOCVRP, ACOTSP
    from esopt.ahd.tasks.construct import ConstructASP, ConstructKP, ConstructTSP

    classes = [ConstructTSP, ConstructKP, ConstructASP, ACOTSP, ACOCVRP, ACOBPP]
    return {c.name: c for c in classes}


def make_task(name: str, params: dict[str, Any] | None = None) -> HeuristicTask:
    classes = task_classes()
    if name not in classes:
        raise ValueError(f"unknown heuristic-design task {name!r}; expected one of {list(classes)}")
    return classes[name](params=dict(params or {}))


__all__ = ["TASK_NAMES", "HeuristicTask", "InstanceSpec", "make_task", "task_classes"]

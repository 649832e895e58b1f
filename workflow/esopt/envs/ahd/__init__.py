"""Automatic heuristic design tasks (the paper's test-time setting).

Six tasks, all minimized: three constructive heuristics (construct_tsp, construct_kp,
construct_asp; esopt.envs.ahd.construct) and three heuristic matrices for Ant Colony
Optimization (aco_tsp, aco_cvrp, aco_bpp; esopt.envs.ahd.aco_tasks). Generated code is
evaluated by esopt.envs.ahd.evaluate.
"""

from __future__ import annotations

from typing import Any

from esopt.envs.ahd.base import HeuristicTask, InstanceSpec

TASK_NAMES = ("construct_tsp", "construct_kp", "construct_asp", "aco_tsp", "aco_cvrp", "aco_bpp")


def task_classes() -> dict[str, type[HeuristicTask]]:
    from esopt.envs.ahd.aco_tasks import ACOBPP, ACOCVRP, ACOTSP
    from esopt.envs.ahd.construct import ConstructASP, ConstructKP, ConstructTSP

    classes = [ConstructTSP, ConstructKP, ConstructASP, ACOTSP, ACOCVRP, ACOBPP]
    return {c.name: c for c in classes}


def make_task(name: str, params: dict[str, Any] | None = None) -> HeuristicTask:
    classes = task_classes()
    if name not in classes:
        raise ValueError(f"unknown heuristic-design task {name!r}; expected one of {list(classes)}")
    return classes[name](params=dict(params or {}))


__all__ = ["TASK_NAMES", "HeuristicTask", "InstanceSpec", "make_task", "task_classes"]

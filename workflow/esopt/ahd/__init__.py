"""Test-time automatic heuristic design (AHD): an LLM writes heuristics for combinatorial
problems, an external search (EoH or Sample) decides what to ask it, and Agentic ESOpt
optionally tunes the writer's weights online from the same evaluations.

- esopt.ahd.tasks     the six tasks (construct_tsp/kp/asp, aco_tsp/cvrp/bpp), their
                      trusted scoring and the self-contained sandbox runners (run_*.py)
- esopt.ahd.evaluate  static checks, the sandboxed run, trusted scoring (HeuristicEvaluator)
- esopt.ahd.prompts   prompts and reply parsing (TaskPrompt, Candidate, Request, parse_reply)
- esopt.ahd.search    the searches as pure logic (EoH, Sample)
- esopt.ahd.writer    the expression language the tiny writer is warm-started on
- esopt.ahd.run       one run: search, writer, evaluator, online ES (HeuristicSearchRun)

The commands are `esopt build-model --for ahd` and `esopt search-heuristics` (esopt.cli).
"""

from __future__ import annotations

from esopt.ahd.tasks import TASK_NAMES, HeuristicTask, InstanceSpec, make_task, task_classes

__all__ = ["TASK_NAMES", "HeuristicTask", "InstanceSpec", "make_task", "task_classes"]

"""The agent benchmarks' environments, by name: each one's module, task class and environment
class (the tool benchmarks, math and docvqa, in the tool_agents block; web in its own). Modules are named in full so that the pipeline sees them as imported
(esopt.provenance.imports) while only the benchmark a job runs is loaded."""

from __future__ import annotations

import importlib
from types import ModuleType

# benchmark -> (its module, its task class, its environment class)
TOOL_BENCHMARKS = {"math": ("esopt.envs.math", "MathTask", "MathEnv"),
                   "docvqa": ("esopt.envs.docvqa", "DocTask", "DocVQAEnv")}
AGENT_BENCHMARKS = {**TOOL_BENCHMARKS, "web": ("esopt.envs.web", "WebTask", "WebEnv")}
BENCHMARKS = tuple(AGENT_BENCHMARKS)


def check(benchmark: str) -> None:
    if benchmark not in BENCHMARKS:
        raise ValueError(f"benchmark {benchmark!r}: expected one of {BENCHMARKS}")


def env_module(benchmark: str) -> ModuleType:
    check(benchmark)
    return importlib.import_module(AGENT_BENCHMARKS[benchmark][0])


def task_class(benchmark: str) -> type:
    return getattr(env_module(benchmark), AGENT_BENCHMARKS[benchmark][1])


def env_class(benchmark: str) -> type:
    return getattr(env_module(benchmark), AGENT_BENCHMARKS[benchmark][2])


def instructions(benchmark: str, cfg: dict | None = None) -> str:
    """The benchmark's task instructions (the first part of the system prompt); web's in the
    config's web.prompt_style."""
    if benchmark == "web":
        w = (cfg or {}).get("web") or {}
        return env_module(benchmark).instructions(w.get("prompt_style", "full"), w.get("observation", "axtree"))
    return env_module(benchmark).instructions()

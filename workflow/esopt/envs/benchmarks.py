"""The agent benchmarks by name: each one is a package under esopt.envs (`package(name)`)
whose __init__ exports a `Benchmark` record (`BENCHMARK`); commands, rules and
demonstrations look benchmarks up here instead of branching on their names.

The names are listed here, so that they are known without importing any benchmark (the
Snakefile stays light), and `get(name)` imports only the package of the benchmark a job
runs. The packages are not named in full on purpose: esopt.provenance.imports would then
count every benchmark as code of every command that looks one up; the rerun map adds the
packages of a job's own benchmarks instead (esopt.provenance.jobs.code_files).
docs/benchmarks.md shows how to add one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

BENCHMARKS = ("math", "docvqa", "web")  # each one the package esopt.envs.NAME

Config = Mapping[str, Any]


@dataclass(frozen=True)
class Benchmark:
    """What the pipeline needs of one agent benchmark."""

    name: str
    block: str  # where its config block is: tool_agents.benchmarks.NAME (a tool benchmark) or web
    task_class: type  # a dataclass, one row of DIR/tasks.jsonl
    env_class: type  # the environment (tool benchmarks: wrapped in esopt.agent.react's ReAct protocol)
    instructions: Callable[[Config | None], str]  # the task instructions (system prompt's start) under a config
    # prepare-data: (set name: train or an eval set, its spec from the config block, the data
    # directory to write images into, the config) -> the set's tasks
    load_set: Callable[[str, Mapping[str, Any], Path, Config], list[Any]]
    data_seed: Callable[[Config, Mapping[str, Any]], int]  # (config, set spec) -> the seed a set is made from
    metric: str  # what an episode's score (its reward) is, in words
    # (tasks, trajectories) -> the benchmark's own keys of an evaluation summary (web: by_site)
    summary: Callable[[Sequence[Any], Sequence[Any]], dict[str, Any]] | None = None
    # prepare-data, after the tasks are written: (tasks, the benchmark's tools) (DocVQA: OCR reads every image once)
    prepare: Callable[[Sequence[Any], Sequence[Any]], None] | None = None
    # the tool benchmarks' expert (the tiny tool model's demonstrations, esopt.models.demonstrations.tools):
    # (task, tools) -> its tool calls, and (task, the last tool output) -> its answer, or None to drop the task
    expert_actions: Callable[[Any, Sequence[Any]], list[str]] | None = None
    expert_answer: Callable[[Any, str], str | None] | None = None

    @property
    def section(self) -> str:
        """The top-level config section of its block: tool_agents or web."""
        return self.block.split(".")[0]


def check(name: str) -> None:
    if name not in BENCHMARKS:
        raise ValueError(f"benchmark {name!r}: expected one of {BENCHMARKS}")


def package(name: str) -> str:
    """The dotted name of the benchmark's package."""
    check(name)
    return f"{__package__}.{name}"


def module(name: str) -> ModuleType:
    """The benchmark's package, imported by name: for code that needs more of a benchmark
    than its record (web's runtime, its expert) and runs for other benchmarks too, so that
    only the jobs of that benchmark list its code."""
    return importlib.import_module(package(name))


def get(name: str) -> Benchmark:
    """The benchmark `name`, importing its package (and no other benchmark's)."""
    b = module(name).BENCHMARK
    if b.name != name:
        raise ValueError(f"{package(name)}.BENCHMARK is named {b.name!r}, not {name!r}")
    return b


def task_class(name: str) -> type:
    return get(name).task_class


def env_class(name: str) -> type:
    return get(name).env_class


def instructions(name: str, cfg: Config | None = None) -> str:
    """The benchmark's task instructions (the first part of the system prompt) under `cfg`
    (web: its web.prompt_style and web.observation)."""
    return get(name).instructions(cfg)

"""The one map of what each job depends on: its config sections and its code.

Every pipeline job runs one `esopt` command. For each command this module says

- `settings(command, config, **keys)`: the config sections its result depends on. The
  Snakemake rules pass exactly this as their `settings` param (a change reruns the job),
  and `esopt audit` compares exactly this between a record's config and the config file
  now (a change elsewhere is a note). The grid lists (horizons, seeds, populations, the
  other es.variants, population_study, rl.methods, reference numbers) are wildcards or
  targets, not settings, so growing the grid reruns nothing already done; `distributed`
  changes no result.
- `code_files(command, benchmarks)`: the files of the package the command imports,
  transitively (esopt.provenance.imports), and the packages of the job's agent benchmarks
  (esopt.envs.benchmarks), which the rules list as the job's `code` input.

The keys name what one job of a command is (its horizon, variant, benchmark, ...). The
rules give them from their wildcards; the audit reads them from the record's argv
(`record_keys`), under the command-line flag each key is given with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esopt.config import (
    ahd_budget,
    engine_settings,
    model_spec,
    named_model,
    rl_engine_settings,
    section,
    tool_data_spec,
    without,
)
from esopt.envs.benchmarks import BENCHMARKS, package
from esopt.provenance.find import flag_value
from esopt.provenance.imports import code_files as _imported_files
from esopt.spec.agents import AgentTraining, agent_episodes, block_name, vllm_engine
from esopt.spec.sudoku import EsRun, RlRun, SudokuEpisodes, SudokuEvaluation

Config = dict[str, Any]


@dataclass(frozen=True)
class Job:
    """One command: what its result depends on in the config, given its keys."""

    what: str  # the sections, in words (for the audit's messages)
    view: Callable[..., dict[str, Any]]  # (config, **keys) -> the sections
    flags: dict[str, str] = field(default_factory=dict)  # key -> command-line flag; a flag without value is a bool


def _agent_episodes(c: Config, benchmark: str | None = None) -> dict[str, Any]:
    """The episode settings of an agent benchmark (esopt.spec.agents); a config without the
    benchmark's block runs no such job and gives {} (web) or {"tools": {}}."""
    if not section(c, block_name(benchmark)):
        return {} if benchmark == "web" else {"tools": {}}
    return agent_episodes(c, benchmark).settings()


def _search_heuristics(c: Config, task: str, search: str, budget: int | str, es: bool) -> dict[str, Any]:
    a = section(c, "ahd")
    out = {k: a.get(k) for k in ("response", "writer", "test_seed", "evaluation")}
    out["task"] = (a.get("tasks") or {}).get(task)
    out["budget"] = ahd_budget(c, budget)
    if search == "eoh":
        out["eoh"] = a.get("eoh")
    if es:
        out["es"] = a.get("es")
    return out


def _without_expect(model: dict[str, Any] | None) -> dict[str, Any] | None:
    """A model block as its build reads it: `expect` is what check-models compares the
    base with, not how it is built, so a new interval rebuilds nothing."""
    return None if model is None else without(model, ("expect",))


def _build_model(c: Config, name: str | None = None, probe: bool = False) -> dict[str, Any]:
    if probe:  # random weights of memory.probe's architecture, cast to model.dtype
        return {"memory": {"probe": section(c, "memory").get("probe")},
                "model": {"dtype": section(c, "model").get("dtype")}}
    return {"model": _without_expect(model_spec(c, name)), **_sudoku(c)}


def _sudoku(c: Config) -> dict[str, Any]:
    """What every Sudoku episode depends on: sudoku (not horizons), agent."""
    episodes = SudokuEpisodes.from_config(c)
    return {"sudoku": episodes.settings(), "agent": episodes.agent.settings()}


def _rl(c: Config) -> dict[str, Any]:
    """rl (not methods, seeds); {} in a config without an rl block."""
    return RlRun.from_config(c).settings() if "rl" in c else {}


def _train_es(c: Config, horizon: int, variant: str | None = None) -> dict[str, Any]:
    es = EsRun.from_config(c, int(horizon), variant or None)
    return ({"es": without(es.settings(), ("revert",)), **_sudoku(c), "engine": engine_settings(c, "sudoku")}
            | ({"evaluate": SudokuEvaluation.from_config(c).settings()} if EsRun.from_config(c).eval_every else {}))


# build-model --for tools|web|ahd: a model block of its own, as its build reads it
MODEL_BLOCKS: dict[str, Callable[[Config], dict[str, Any]]] = {
    "tools": lambda c: {"model": _without_expect(section(c, "tool_agents").get("model")),
                        "episode": _agent_episodes(c)},
    "web": lambda c: {"model": _without_expect(section(c, "web").get("model")),
                      "train": section(c, "web").get("train"),
                      "episode": _agent_episodes(c, "web")},
    "ahd": lambda c: {"model": _without_expect(section(c, "ahd").get("model")),
                      "tasks": list(section(c, "ahd").get("tasks") or {}),
                      "response": section(c, "ahd").get("response"),
                      "parents_e": section(c, "ahd").get("eoh", {}).get("parents_e")},
}


def _model_build(c: Config, target: str = "base", **keys: Any) -> dict[str, Any]:
    """build-model: the base model (`model`, a population_study model, the probe), or with
    --for tools|web|ahd that block's model."""
    return _build_model(c, **keys) if target == "base" else MODEL_BLOCKS[target](c)


def _evaluate_sudoku(c: Config) -> dict[str, Any]:
    return {"evaluate": SudokuEvaluation.from_config(c).settings(), **_sudoku(c),
            "engine": engine_settings(c, "sudoku")}


def _agent_evaluation(c: Config, benchmark: str | None) -> dict[str, Any]:
    """An agent benchmark's evaluation: its block's evaluate and episode settings, the engine when vLLM."""
    return ({"evaluate": section(c, block_name(benchmark)).get("evaluate"), "episode": _agent_episodes(c, benchmark)}
            | vllm_engine(c, benchmark or ""))


def _evaluate(c: Config, benchmark: str | None = None, block: str | None = None) -> dict[str, Any]:
    """evaluate --benchmark B: Sudoku's (the default) or an agent benchmark's. block="tool_agents"
    is the tool rules' view, one for every tool benchmark (no benchmark's own token caps or engine)."""
    if block == "tool_agents":
        return _agent_evaluation(c, None)
    if benchmark in (None, "sudoku"):
        return _evaluate_sudoku(c)
    return _agent_evaluation(c, benchmark)


JOBS: dict[str, Job] = {
    "build-model": Job("the model (or memory.probe and model.dtype), sudoku (not horizons), agent; with --for "
                       "tools, web or ahd: that block's model (not expect) and what its warm start reads",
                       _model_build, {"name": "--name", "probe": "--probe", "target": "--for"}),
    # es.revert is left out: either revert restores the weights bit for bit, no number depends on it
    "train-es": Job("es as run at H* (and its variant; not revert), sudoku (not horizons), agent, the sudoku engine, "
                    "and evaluate where es.eval_every evaluates during training",
                    _train_es, {"horizon": "--horizon", "variant": "--variant"}),
    "train-rl": Job("rl (not methods, seeds), sudoku (not horizons), agent, the rollout engine unless hf",
                    lambda c: {"rl": _rl(c), **_sudoku(c)}
                    | ({"engine": rl_engine_settings(c)} if rl_engine_settings(c)["name"] != "hf" else {})),
    "evaluate": Job("evaluate, sudoku (not horizons), agent, the sudoku engine; with --benchmark B, an agent "
                    "benchmark's evaluate and episode settings (tool_agents; web), the engine when vLLM",
                    _evaluate, {"benchmark": "--benchmark"}),
    "check-models": Job("the model's expect intervals",
                        lambda c, name=None: {"expect": named_model(c, name or None)[1].get("expect")}, {"name": "--name"}),
    "memory": Job("memory, sudoku (not horizons), rl (not methods, seeds), es (not the grid), agent",
                  lambda c: {"memory": section(c, "memory"), "sudoku": SudokuEpisodes.from_config(c).settings(),
                             "rl": _rl(c), "es": EsRun.from_config(c).settings(),
                             "agent": SudokuEpisodes.from_config(c).agent.settings()}),
    "prepare-data": Job("tool_agents.benchmarks.B's set (and ocr for DocVQA; web.SET and web.site_seed)",
                        lambda c, benchmark, set: {"set": tool_data_spec(c, benchmark, set),
                                                   "ocr": section(c, "tool_agents").get("ocr")
                                                   if benchmark == "docvqa" else None}
                        | ({"site_seed": section(c, "web").get("site_seed")} if benchmark == "web" else {}),
                        {"benchmark": "--benchmark", "set": "--set"}),
    "train-agent": Job("the method's tool_agents settings on the benchmark, the episode settings, the engine when vLLM",
                       lambda c, method, benchmark: AgentTraining.from_config(c, method, benchmark).settings(),
                       {"method": "--method", "benchmark": "--benchmark"}),
    "search-heuristics": Job("ahd settings of the task, search and budget (and ahd.es with --es)",
                             _search_heuristics,
                             {"task": "--task", "search": "--search", "budget": "--budget", "es": "--es"}),
}
BOOL_FLAGS = {"probe", "es"}


def settings(command: str, config: Config, **keys: Any) -> dict[str, Any]:
    """The config sections one job of `command` depends on (see the module doc)."""
    if command not in JOBS:
        raise KeyError(f"{command!r} is not a pipeline command (known: {', '.join(JOBS)})")
    return JOBS[command].view(config, **keys)


def record_keys(record: dict[str, Any]) -> dict[str, Any]:
    """A record's job keys: the record's own field of that name where the command writes
    one (train-agent's method and benchmark, ...), else the flag in the argv it ran with;
    keys found in neither are left out."""
    job = JOBS[record["command"]]
    argv = [str(a) for a in record.get("argv") or []]
    keys: dict[str, Any] = {}
    for key, flag in job.flags.items():
        if key in record and not isinstance(record[key], dict):
            keys[key] = record[key]
        elif key in BOOL_FLAGS:
            keys[key] = flag in argv
        elif (v := flag_value(argv, flag)) is not None:
            keys[key] = v
    return keys


def record_settings(record: dict[str, Any], config: Config) -> dict[str, Any]:
    """What `settings` gives for the job a record describes, on another config."""
    return settings(record["command"], config, **record_keys(record))


def command_module(command: str) -> str:
    """`esopt NAME` runs esopt.cli.NAME_WITH_UNDERSCORES."""
    return "esopt.cli." + command.replace("-", "_")


def code_files(command: str, benchmarks: Sequence[str] = ()) -> list[str]:
    """The package files `esopt COMMAND` imports (transitively, from the `esopt` entry point
    esopt.cli.main on) and those of the agent benchmarks the job runs (`benchmarks`: their
    packages, which commands import by name only, esopt.envs.benchmarks), as the rules list
    them; for a report job, given the notebook's path (notebooks/NAME.ipynb), the files its
    cells import."""
    if command.endswith(".ipynb"):
        return [str(f) for f in _imported_files(Path(command))]
    entry_point = command_module("main")  # esopt.cli.main, which every `esopt NAME` runs first
    return [str(f) for f in _imported_files(entry_point, command_module(command), *map(package, benchmarks))]


def record_benchmarks(record: dict[str, Any]) -> list[str]:
    """The agent benchmarks a record's job ran: its --benchmark, or for build-model --for tools
    every benchmark of the recorded tool_agents block (--for web: web)."""
    argv = [str(a) for a in record.get("argv") or []]
    target = flag_value(argv, "--for") if record.get("command") == "build-model" else None
    if target == "tools":
        return sorted(section(record.get("config") or {}, "tool_agents").get("benchmarks") or {})
    if target == "web":
        return ["web"]
    b = flag_value(argv, "--benchmark")
    return [b] if b in BENCHMARKS else []

"""Tool-agent episodes (ReAct Math with Python, DocVQA with OCR): tasks, tools, rollouts, Mean@k.

A benchmark's tasks live in a data directory written by `esopt prepare-data`
(tasks.jsonl, plus the document images for DocVQA). An episode is a ReAct
conversation (esopt.agent.react) over the whole history: question, tool calls and
their outputs, final answer. The score of an episode is its reward: 1/0 for a
correct math answer, ANLS for DocVQA.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from esopt.agent.react import make_react_env, tool_instructions
from esopt.agent.rollout import Sampling, Trajectory, rollout
from esopt.agent.tools import Tool
from esopt.envs.benchmarks import check, instructions, task_class
from esopt.io import write_text_atomic

TASKS_FILE = "tasks.jsonl"


def write_tasks(data_dir: str | os.PathLike, tasks: Sequence[Any]) -> Path:
    """tasks.jsonl in data_dir, image paths relative to it (the directory can move)."""
    data_dir = Path(data_dir)
    rows = []
    for t in tasks:
        row = asdict(t)
        if "image" in row:
            row["image"] = os.path.relpath(row["image"], data_dir)
        rows.append(json.dumps(row, ensure_ascii=False) + "\n")
    path = data_dir / TASKS_FILE
    write_text_atomic(path, "".join(rows))
    return path


def load_tasks(data_dir: str | os.PathLike, benchmark: str) -> list[Any]:
    """The tasks of a data directory written by `esopt prepare-data`."""
    data_dir = Path(data_dir)
    path = data_dir / TASKS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run `esopt prepare-data` for this data set first")
    cls = task_class(benchmark)
    names = {f.name for f in fields(cls)}
    tasks = []
    for line in path.read_text().splitlines():
        row = {k: v for k, v in json.loads(line).items() if k in names}
        if "image" in row:
            row["image"] = str(data_dir / row["image"])
        if "answers" in row:
            row["answers"] = tuple(row["answers"])
        tasks.append(cls(**row))
    return tasks


def sample_batch(tasks: Sequence[Any], n: int, seed: int) -> list[Any]:
    """n tasks drawn without replacement (with, if n exceeds the pool) by `seed`."""
    rng = random.Random(seed)
    if n <= len(tasks):
        return rng.sample(list(tasks), n)
    return [rng.choice(tasks) for _ in range(n)]


OCR_CACHE = "ocr_cache"


def make_tools(cfg: dict[str, Any], benchmark: str, data_dir: str | os.PathLike | None = None) -> list[Tool]:
    """The tools the config gives a benchmark (tool_agents.benchmarks.B.tools). OCR reads
    its results from DATA_DIR/ocr_cache, which `esopt prepare-data` fills for every image
    (OCR is deterministic: each image is read once per data set, not once per job)."""
    ta = cfg["tool_agents"]
    tools: list[Tool] = []
    for name in ta["benchmarks"][benchmark]["tools"]:
        if name == "python":
            from esopt.agent.tools.python_sandbox import PythonSandbox

            box = PythonSandbox(**ta.get("sandbox", {}))  # require_all_layers: raises here, at the job's start
            box.log_layers()  # which layers are active, once per run
            tools.append(box)
        elif name == "ocr":
            from esopt.agent.tools.ocr import OCRTool

            cache = Path(data_dir) / OCR_CACHE if data_dir is not None else None
            tools.append(OCRTool(**ta.get("ocr", {}), cache_dir=cache))
        else:
            raise ValueError(f"tool {name!r}: expected python or ocr")
    return tools


def sandbox_provenance(cfg: dict[str, Any], benchmark: str) -> dict[str, Any]:
    """{"sandbox": the layers active here, ...} for a provenance record if the benchmark
    uses the Python sandbox, else {}."""
    ta = cfg["tool_agents"]
    if "python" not in ta["benchmarks"][benchmark]["tools"]:
        return {}
    from esopt.agent.tools.python_sandbox import PythonSandbox

    return {"sandbox": PythonSandbox(**ta.get("sandbox", {})).provenance()}


def system_prompt(benchmark: str, tools: Sequence[Tool], skill: str = "") -> str:
    """Task instructions, tool documentation, then the skill document (if any)."""
    parts = [instructions(benchmark), tool_instructions(tools)]
    if skill.strip():
        parts.append(skill.strip())
    return "\n\n".join(parts)


@dataclass(frozen=True)
class ToolEpisodeSpec:
    """Everything about a batch of tool-agent episodes except the model, tasks and seed."""

    benchmark: str
    max_turns: int
    max_tool_calls: int | None
    history_turns: int | None
    sampling: Sampling
    batch_size: int | None = None

    @classmethod
    def from_config(cls, cfg: dict[str, Any], benchmark: str, decoding: str,
                    batch_size: int | None = None) -> ToolEpisodeSpec:
        check(benchmark)
        ta = cfg["tool_agents"]
        s = ta["sampling"]
        sampling = Sampling.from_profile(s, ta["max_new_tokens"], do_sample=decoding == "sample")
        return cls(benchmark=benchmark, max_turns=ta["max_turns"], max_tool_calls=ta.get("max_tool_calls"),
                   history_turns=ta.get("history_turns"), sampling=sampling, batch_size=batch_size)


def run_tool_episodes(model, tokenizer, spec: ToolEpisodeSpec, tools: Sequence[Tool], tasks: Sequence[Any],
                      seed: int, skill: str = "", counters: dict[str, int] | None = None) -> list[Trajectory]:
    """One ReAct episode per task with the model as it is now; `seed` fixes sampling."""
    return rollout(
        model, tokenizer, lambda: make_react_env(spec.benchmark, tools, spec.max_tool_calls), tasks,
        system=system_prompt(spec.benchmark, tools, skill), sampling=spec.sampling, seed=seed,
        max_turns=spec.max_turns, history_turns=spec.history_turns, batch_size=spec.batch_size, counters=counters,
    )


def summarize_tool(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Mean score (reward: success or ANLS) with its standard error, and how episodes went."""
    n = len(trajs)
    scores = [t.reward for t in trajs]
    mean = statistics.fmean(scores)
    return {
        "episodes": n,
        "score": mean,
        "score_se": statistics.pstdev(scores) / math.sqrt(n) if n > 1 else 0.0,
        "success": statistics.fmean(bool(t.info.get("success")) for t in trajs),
        "mean_reward": mean,
        "answered": statistics.fmean("answer" in t.info for t in trajs),
        "mean_turns": statistics.fmean(t.num_turns for t in trajs),
        "tool_calls_per_episode": statistics.fmean(t.info.get("tool_calls", 0) for t in trajs),
        "malformed_calls_per_episode": statistics.fmean(t.info.get("malformed_calls", 0) for t in trajs),
    }

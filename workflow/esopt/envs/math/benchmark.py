"""ReAct Math as a registered benchmark (esopt.envs.benchmarks): its task sets, its
instructions and the expert whose episodes warm-start the tiny tool model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esopt.envs.benchmarks import Benchmark, Config
from esopt.envs.math.env import MathEnv, instructions
from esopt.envs.math.generate import generate_problems, reference_code, split_of
from esopt.envs.math.load import load_aime, load_dapo
from esopt.envs.math.tasks import MathTask


def load_set(name: str, spec: Mapping[str, Any], out: Path, cfg: Config) -> list[MathTask]:
    """source generated (level: one level, or a list of levels mixed in equal parts), dapo
    (one file, split train/test here by a hash of the question) or aime."""
    src, n, seed = spec["source"], spec.get("n"), spec.get("seed", 0)
    split = "train" if name == "train" else "test"
    path = spec.get("path")
    if src == "generated":
        levels = spec.get("level", "basic")
        levels = [levels] if isinstance(levels, str) else list(levels)
        parts = [generate_problems(n // len(levels) + (i < n % len(levels)), seed=seed, split=split, level=lv)
                 for i, lv in enumerate(levels)]
        return [p[i] for i in range(max(map(len, parts))) for p in parts if i < len(p)]  # round robin
    if src == "dapo":
        rows = load_dapo(path or spec.get("hub_id"), split=spec.get("split", "train"))
        return [t for t in rows if split_of(t.question) == split][:n]
    if src == "aime":
        return load_aime(path or spec.get("hub_id"), limit=n)
    raise ValueError(f"math set {name!r}: source {src!r} is not one this benchmark knows (generated, dapo, aime)")


def expert_actions(task: MathTask, tools: Sequence[Any]) -> list[str]:
    """The program that computes the answer."""
    return [f"<python>{reference_code(task)}</python>"]


def expert_answer(task: MathTask, observation: str) -> str | None:
    """The last line the program printed, when it is the answer."""
    lines = observation.strip().splitlines()
    return lines[-1].strip() if lines and lines[-1].strip() == str(task.answer) else None


BENCHMARK = Benchmark(
    name="math", block="tool_agents.benchmarks.math", task_class=MathTask, env_class=MathEnv,
    instructions=lambda cfg: instructions(), load_set=load_set, data_seed=lambda cfg, spec: spec.get("seed", 0),
    metric="success: 1 for an answer equivalent to the gold one, else 0",
    expert_actions=expert_actions, expert_answer=expert_answer)

"""Sudoku episodes for a model state: task batches, rollouts and their summary."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from esopt.agent.rollout import Sampling, Trajectory, rollout
from esopt.config import sudoku_max_turns
from esopt.envs.sudoku import SudokuEnv, SudokuTask, generate_puzzles, instructions, protocol_of, training_tasks
from esopt.seeding import derive_seed


@dataclass(frozen=True)
class EpisodeSpec:
    """Everything about an episode batch except the model and the tasks' seed."""

    size: int
    horizon: int
    max_turns: int
    reward: str
    prompt: str
    history_turns: int | None
    sampling: Sampling
    batch_size: int | None = None
    thinking: bool = False  # agent.thinking: the chat template's enable_thinking
    observation: str = "board"  # sudoku.observation: the board, or the board and its empty cells

    @classmethod
    def from_config(cls, cfg: dict[str, Any], horizon: int, decoding: str, batch_size: int | None = None) -> "EpisodeSpec":
        s = cfg["agent"]["sampling"]
        sampling = Sampling.from_profile(s, cfg["agent"]["max_new_tokens"], do_sample=decoding == "sample")
        return cls(
            size=cfg["sudoku"]["size"], horizon=horizon, max_turns=sudoku_max_turns(cfg, horizon),
            reward=cfg["sudoku"]["reward"], prompt=cfg["sudoku"]["prompt"], history_turns=cfg["agent"]["history_turns"],
            sampling=sampling, batch_size=batch_size, thinking=cfg["agent"]["thinking"],
            observation=cfg["sudoku"]["observation"],
        )


def run_episodes(model, tokenizer, spec: EpisodeSpec, n: int, seed: int, split: str,
                 counters: dict[str, int] | None = None, tasks: list[SudokuTask] | None = None,
                 sampling_seed: int | None = None) -> list[Trajectory]:
    """n puzzles of the split drawn from `seed` (or the given `tasks`), one episode each;
    `seed` also fixes sampling unless `sampling_seed` is given. `counters` accumulates the
    tokens run through the model (see agent.rollout.rollout)."""
    if tasks is None:
        tasks = generate_puzzles(spec.size, spec.horizon, n, seed=seed, split=split)
    protocol = protocol_of(spec.prompt)
    return rollout(
        model, tokenizer, lambda: SudokuEnv(spec.max_turns, spec.reward, spec.observation, protocol), tasks,
        system=instructions(spec.size, spec.prompt), sampling=spec.sampling,
        seed=seed if sampling_seed is None else sampling_seed, max_turns=spec.max_turns,
        history_turns=spec.history_turns, batch_size=spec.batch_size, counters=counters, thinking=spec.thinking,
    )


def train_tasks(cfg: dict[str, Any], horizon: int, n: int, task_seed: int) -> list[SudokuTask]:
    """A generation's (or RL step's) n training puzzles at H*: fresh ones from `task_seed`,
    or from the fixed pool sudoku.train_pool (esopt.envs.sudoku.training_tasks)."""
    s = cfg["sudoku"]
    return training_tasks(s["size"], horizon, n, task_seed, s.get("train_pool"), s.get("train_pool_seed", 0))


def repeat_seed(seed: int, repeat: int) -> int:
    """The sampling seed of an evaluation's repeat: `seed` itself for the first (so one
    repeat is exactly the single evaluation), derived from it for the others."""
    return seed if repeat == 0 else derive_seed("eval-repeat", seed, repeat)


def combine_repeats(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary of the same puzzles played several times, from each repeat's summarize():
    the means over all episodes, and each repeat's success with their population std (the
    authors report the mean over repeats and this std)."""
    n = sum(r["episodes"] for r in runs)

    def mean(key: str) -> float:
        return sum(r[key] * r["episodes"] for r in runs) / n

    p = mean("success")
    solved = [r["success"] * r["episodes"] for r in runs]
    rates = [r["success"] for r in runs]
    avg = sum(rates) / len(rates)
    return {
        "episodes": n, "success": p, "success_se": math.sqrt(p * (1 - p) / n),
        "mean_reward": mean("mean_reward"), "mean_turns": mean("mean_turns"),
        "mean_turns_solved": (sum(r["mean_turns_solved"] * k for r, k in zip(runs, solved) if k) / sum(solved))
        if sum(solved) else None,
        "invalid_per_episode": mean("invalid_per_episode"), "illegal_per_episode": mean("illegal_per_episode"),
        "repeats": len(runs), "repeat_success": rates,
        "repeat_success_std": math.sqrt(sum((r - avg) ** 2 for r in rates) / len(rates)),
    }


def validation_score(cfg: dict[str, Any], select: dict[str, Any]):
    """score(model, tokenizer): mean sampled success over select.horizons, on
    select.episodes puzzles per horizon of the 'valid' split (the warm start's
    checkpoint selection; never the eval split the reported numbers come from)."""
    specs = [EpisodeSpec.from_config(cfg, h, "sample", batch_size=cfg["evaluate"]["batch_size"]) for h in select["horizons"]]

    def score(model, tokenizer) -> float:
        rates = [summarize(run_episodes(model, tokenizer, spec, select["episodes"], seed=select["seed"], split="valid"))["success"]
                 for spec in specs]
        return sum(rates) / len(rates)

    return score


def summarize(trajs: list[Trajectory]) -> dict[str, Any]:
    """Success rate with its binomial standard error, and how the episodes went."""
    n = len(trajs)
    solved = [bool(t.info.get("success")) for t in trajs]
    p = sum(solved) / n
    return {
        "episodes": n,
        "success": p,
        "success_se": math.sqrt(p * (1 - p) / n),
        "mean_reward": sum(t.reward for t in trajs) / n,
        "mean_turns": sum(t.num_turns for t in trajs) / n,
        "mean_turns_solved": (sum(t.num_turns for t, s in zip(trajs, solved) if s) / sum(solved)) if any(solved) else None,
        "invalid_per_episode": sum(t.info.get("invalid_actions", 0) for t in trajs) / n,
        "illegal_per_episode": sum(t.info.get("illegal_actions", 0) for t in trajs) / n,
    }


def sudoku_rl_rollouts(cfg: dict[str, Any], tokenizer, horizon: int, sampling: Sampling):
    """The RL trainer's rollout_fn on Sudoku: a step's training puzzles at H*, each
    repeated `group` times, as token trajectories (observations outside the loss mask);
    with shard=(rank, world) only the episodes i with i % world == rank (esopt.rl.trainer)."""
    from esopt.agent.tokens import token_rollout

    s, r, a = cfg["sudoku"], cfg["rl"], cfg["agent"]
    system = instructions(s["size"], s["prompt"])
    max_turns = sudoku_max_turns(cfg, horizon)
    protocol = protocol_of(s["prompt"])

    def rollout_fn(policy, task_seed, sampling_seed, group, counters, shard=(0, 1)):
        n_tasks = r["ppo" if group == 1 else "grpo"]["tasks_per_step"]
        tasks = [t for t in train_tasks(cfg, horizon, n_tasks, task_seed) for _ in range(group)]
        tasks = tasks[shard[0]::shard[1]]
        return token_rollout(
            policy, tokenizer, lambda: SudokuEnv(max_turns, s["reward"], s["observation"], protocol), tasks, system=system,
            sampling=sampling,
            seed=sampling_seed, max_turns=max_turns, history_turns=a["history_turns"],
            max_total_tokens=r["max_total_tokens"], batch_size=r["batch_size"], counters=counters,
            thinking=a["thinking"], history_thinking=a["history_thinking"],
        )

    return rollout_fn

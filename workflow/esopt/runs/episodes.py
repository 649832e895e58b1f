"""Sudoku episodes for a model state: task batches, rollouts and their summary."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from esopt.agent.rollout import Sampling, Trajectory, rollout
from esopt.envs.sudoku import SudokuEnv, SudokuTask, generate_puzzles, instructions, protocol_of, training_tasks
from esopt.seeding import derive_seed
from esopt.spec.sudoku import RlRun, SudokuEpisodes, SudokuEvaluation


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
    def from_specs(cls, episodes: SudokuEpisodes, horizon: int, decoding: str,
                   batch_size: int | None = None) -> EpisodeSpec:
        """Episodes at H* decoded greedily or sampled (`decoding`) with the agent's profile."""
        a = episodes.agent
        sampling = Sampling.from_profile(a.sampling.settings(), a.max_new_tokens, do_sample=decoding == "sample")
        return cls(
            size=episodes.size, horizon=horizon, max_turns=episodes.turn_budget(horizon), reward=episodes.reward,
            prompt=episodes.prompt, history_turns=a.history_turns, sampling=sampling, batch_size=batch_size,
            thinking=a.thinking, observation=episodes.observation,
        )

    @classmethod
    def from_config(cls, cfg: dict[str, Any], horizon: int, decoding: str, batch_size: int | None = None) -> EpisodeSpec:
        """from_specs with the config's episodes."""
        return cls.from_specs(SudokuEpisodes.from_config(cfg), horizon, decoding, batch_size)

    def record(self) -> dict[str, Any]:
        """As an ES history's run records it (`episode`)."""
        return {k: v for k, v in vars(self).items() if k != "sampling"} | {"sampling": vars(self.sampling)}


def run_episodes(model, tokenizer, spec: EpisodeSpec, n: int, seed: int, split: str,
                 counters: dict[str, int] | None = None, tasks: list[SudokuTask] | None = None,
                 sampling_seed: int | None = None, members: list[int] | None = None) -> list[Trajectory]:
    """n puzzles of the split drawn from `seed` (or the given `tasks`), one episode each;
    `seed` also fixes sampling unless `sampling_seed` is given. `counters` accumulates the
    tokens run through the model; `members`: the population engine's member slot of each
    task (see agent.rollout.rollout)."""
    if tasks is None:
        tasks = generate_puzzles(spec.size, spec.horizon, n, seed=seed, split=split)
    protocol = protocol_of(spec.prompt)
    return rollout(
        model, tokenizer, lambda: SudokuEnv(spec.max_turns, spec.reward, spec.observation, protocol), tasks,
        system=instructions(spec.size, spec.prompt), sampling=spec.sampling,
        seed=seed if sampling_seed is None else sampling_seed, max_turns=spec.max_turns,
        history_turns=spec.history_turns, batch_size=spec.batch_size, counters=counters, thinking=spec.thinking,
        members=members,
    )


def train_tasks(episodes: SudokuEpisodes, horizon: int, n: int, task_seed: int) -> list[SudokuTask]:
    """A generation's (or RL step's) n training puzzles at H*: fresh ones from `task_seed`,
    or from the fixed pool sudoku.train_pool (esopt.envs.sudoku.training_tasks)."""
    return training_tasks(episodes.size, horizon, n, task_seed, episodes.train_pool, episodes.train_pool_seed)


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


def evaluate_sudoku(policy, tokenizer, episodes: SudokuEpisodes, evaluation: SudokuEvaluation, horizon: int,
             seed: int) -> tuple[list[Trajectory], dict[str, Any]]:
    """`esopt evaluate` on Sudoku: evaluation.episodes puzzles of the eval split at H* from
    `seed`, played evaluation.repeats times (the same puzzles, each repeat sampled from its
    own seed: repeat_seed). The trajectories, repeat by repeat, and their summary."""
    spec = EpisodeSpec.from_specs(episodes, horizon, evaluation.decoding, batch_size=evaluation.batch_size)
    if evaluation.repeats == 1:
        runs = [run_episodes(policy, tokenizer, spec, evaluation.episodes, seed=seed, split="eval")]
    else:
        tasks = generate_puzzles(spec.size, spec.horizon, evaluation.episodes, seed=seed, split="eval")
        runs = [run_episodes(policy, tokenizer, spec, len(tasks), seed, "eval", tasks=tasks,
                             sampling_seed=repeat_seed(seed, k)) for k in range(evaluation.repeats)]
    trajs = [t for run in runs for t in run]
    return trajs, summarize(trajs) if evaluation.repeats == 1 else combine_repeats([summarize(run) for run in runs])


def validation_score(cfg: dict[str, Any], select: dict[str, Any]):
    """score(model, tokenizer): mean sampled success over select.horizons, on
    select.episodes puzzles per horizon of the 'valid' split (the warm start's
    checkpoint selection; never the eval split the reported numbers come from)."""
    episodes, batch_size = SudokuEpisodes.from_config(cfg), SudokuEvaluation.from_config(cfg).batch_size
    specs = [EpisodeSpec.from_specs(episodes, h, "sample", batch_size=batch_size) for h in select["horizons"]]

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


def sudoku_rl_rollouts(episodes: SudokuEpisodes, rl: RlRun, tokenizer, horizon: int, sampling: Sampling):
    """The RL trainer's rollout_fn on Sudoku: a step's training puzzles at H*, each
    repeated `group` times, as token trajectories (observations outside the loss mask);
    with shard=(rank, world) only the episodes i with i % world == rank (esopt.rl.trainer)."""
    from esopt.agent.tokens import token_rollout

    a = episodes.agent
    system = instructions(episodes.size, episodes.prompt)
    max_turns = episodes.turn_budget(horizon)
    protocol = protocol_of(episodes.prompt)

    def rollout_fn(policy, task_seed, sampling_seed, group, counters, shard=(0, 1)):
        tasks = [t for t in train_tasks(episodes, horizon, rl.tasks_per_step(group), task_seed) for _ in range(group)]
        tasks = tasks[shard[0]::shard[1]]
        return token_rollout(
            policy, tokenizer, lambda: SudokuEnv(max_turns, episodes.reward, episodes.observation, protocol), tasks,
            system=system, sampling=sampling,
            seed=sampling_seed, max_turns=max_turns, history_turns=a.history_turns,
            max_total_tokens=rl.max_total_tokens, batch_size=rl.batch_size, counters=counters,
            thinking=a.thinking, history_thinking=a.history_thinking,
        )

    return rollout_fn

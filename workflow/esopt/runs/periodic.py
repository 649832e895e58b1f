"""Evaluation during Sudoku ES training (es.eval_every), as the authors' trainer does it:
after every `eval_every` generations and after the last, the current weights play the
evaluation puzzles of the `evaluate` block (the same fixed puzzles for every run and
generation, `evaluate.repeats` times) and, with es.eval_train, the fixed training pool.

The work is split by repeat over the ranks of the collective (repeat k of a set runs on
rank k mod world size), so every number is the same whatever the number of ranks; each
result is written to EVALS (one JSON line per generation, rewritten atomically, so a
resumed run redoes only the generation it was killed in) and joins its generation's line
of metrics.jsonl. The reported number is still `esopt evaluate` on the final model.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esopt.envs.sudoku import generate_puzzles
from esopt.es import ESTrainer
from esopt.io import write_text_atomic
from esopt.runs.episodes import EpisodeSpec, combine_repeats, repeat_seed, run_episodes, summarize, train_tasks
from esopt.spec.sudoku import EsRun, SudokuEpisodes, SudokuEvaluation

log = logging.getLogger(__name__)

EVALS = "evals.jsonl"  # in the run's resume directory
SETS = {"eval": "eval", "train": "eval_train"}  # evaluation set -> its key in a metrics line
EVAL_KEYS = (*SETS.values(), "eval_wall_s")  # what an evaluation adds to its generation's metrics line


def eval_generations(generations: int, every: int | None) -> set[int]:
    """The generations after which the model is evaluated: every `every`-th and the last
    (the authors' (g + 1) % 10 == 0 or g + 1 == generations); none when `every` is None."""
    if not every:
        return set()
    return {g for g in range(generations) if (g + 1) % every == 0} | {generations - 1}


@dataclass
class PeriodicEval:
    """Evaluate `policy` (a model or an engine holding the run's current weights) at the run's H*."""

    episodes: SudokuEpisodes
    evaluation: SudokuEvaluation
    es: EsRun
    policy: Any
    tokenizer: Any
    collective: Any
    path: Path  # EVALS in the resume directory

    def __post_init__(self) -> None:
        ev, h = self.evaluation, self.es.horizon
        self.spec = EpisodeSpec.from_specs(self.episodes, h, ev.decoding, batch_size=ev.batch_size)
        self.seed, self.repeats = ev.seed, ev.repeats
        self.tasks = {"eval": generate_puzzles(self.episodes.size, h, ev.episodes, seed=self.seed, split="eval")}
        if self.es.eval_train:
            # the whole pool: train_tasks gives it in order for a batch of its own size
            self.tasks["train"] = train_tasks(self.episodes, h, self.episodes.train_pool, task_seed=0)
        self.due = eval_generations(self.es.generations, self.es.eval_every)

    def share(self, rank: int, world_size: int) -> dict[tuple[str, int], dict[str, Any]]:
        """summarize() of the (set, repeat) units rank `rank` of `world_size` plays: unit i
        of [(eval, 0), (eval, 1), ..., (train, 0), ...] when i mod world_size == rank."""
        units = [(name, k) for name in self.tasks for k in range(self.repeats)]
        return {(name, k): summarize(run_episodes(self.policy, self.tokenizer, self.spec, len(self.tasks[name]), self.seed,
                                                  "eval", tasks=self.tasks[name], sampling_seed=repeat_seed(self.seed, k)))
                for i, (name, k) in enumerate(units) if i % world_size == rank}

    def __call__(self, generation: int) -> dict[str, Any] | None:
        """Run the evaluation after `generation` if it is due; rank 0 records it."""
        if generation not in self.due:
            return None
        start = time.perf_counter()
        c = self.collective
        c.progress(stage=f"evaluating after generation {generation}")
        done: dict[tuple[str, int], dict[str, Any]] = {}
        for part in c.all_gather(self.share(c.rank, c.world_size)):
            done.update(part)
        row = {"generation": generation, "wall_s": round(time.perf_counter() - start, 3)}
        for name in self.tasks:
            row[SETS[name]] = combine_repeats([done[(name, k)] for k in range(self.repeats)])
        if c.is_main:
            rows = [r for r in read_evals(self.path) if r["generation"] != generation] + [row]
            write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["generation"])))
            log.info("eval after gen %d: success %.3f (train %s) in %.1fs", generation, row["eval"]["success"],
                     f"{row['eval_train']['success']:.3f}" if "eval_train" in row else "-", row["wall_s"])
        return row


def read_evals(path: Path) -> list[dict[str, Any]]:
    """The evaluations a run has recorded so far (none if the file is absent)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def with_evals(metrics: list[dict[str, Any]], evals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each generation's metrics line with its evaluation (keys eval, eval_train, eval_wall_s)."""
    by_gen = {r["generation"]: r for r in evals}
    out = []
    for m in metrics:
        r = by_gen.get(m["generation"])
        extra = {} if r is None else {k: r[k] for k in SETS.values() if k in r} | {"eval_wall_s": r["wall_s"]}
        out.append(m | extra)
    return out


@dataclass
class EvaluatingESTrainer(ESTrainer):
    """ESTrainer that runs `evaluate(generation)` on every rank after each generation's
    update, before the generation is recorded (a run killed in between redoes both)."""

    evaluate: PeriodicEval | None = None

    def step(self, t: int):
        rec = super().step(t)
        if self.evaluate is not None:
            self.evaluate(t)
        return rec

"""Sudoku demonstrations for the tiny model's warm start (esopt.models.sft).

Expert moves, with some injected mistakes, so the model has seen rejection feedback
and the recovery after it: the warm start leaves the base model partly competent at
short horizons and weak at long ones.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from esopt.agent.rollout import Trajectory, Turn, build_messages
from esopt.envs.sudoku import SudokuEnv, expert_action, generate_puzzles, instructions
from esopt.seeding import derive_seed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SudokuDemos:
    size: int
    blanks: tuple[int, ...]  # demonstrations are drawn at these blank counts
    puzzles_per_blank: int
    mistake_prob: float  # chance of an injected wrong move before an expert move
    history_turns: int | None
    seed: int
    prompt: str = "full"  # system prompt style
    expert: str = "fewest"  # which blank the demonstrator fills: "fewest" candidates or "first"
    observation: str = "board"  # sudoku.observation

    @classmethod
    def from_config(cls, cfg: dict[str, Any], warmstart: dict[str, Any]) -> SudokuDemos:
        """From a model's warmstart block and the config's sudoku and agent sections."""
        w = warmstart
        return cls(size=cfg["sudoku"]["size"], blanks=tuple(w["blanks"]), puzzles_per_blank=w["puzzles_per_blank"],
                   mistake_prob=w["mistake_prob"], history_turns=cfg["agent"]["history_turns"], seed=w["seed"],
                   expert=w["expert"], prompt=cfg["sudoku"]["prompt"], observation=cfg["sudoku"]["observation"])


def _wrong_action(board: str, size: int, solution: str, rng: random.Random) -> str:
    blanks = [i for i, ch in enumerate(board) if ch == "."]
    i = rng.choice(blanks)
    v = rng.choice([d for d in range(1, size + 1) if str(d) != solution[i]])
    return f"r{i // size + 1}c{i % size + 1}={v}"


def demonstrations(ws: SudokuDemos) -> Iterator[list[dict[str, str]]]:
    """Chat transcripts (system, observation(s), expert action) along expert episodes."""
    system = instructions(ws.size, ws.prompt)
    rng = random.Random(derive_seed("demos", ws.seed))
    for blanks in ws.blanks:
        for task in generate_puzzles(ws.size, blanks, ws.puzzles_per_blank, seed=ws.seed, split="train"):
            env = SudokuEnv(max_turns=4 * blanks + 4, observation=ws.observation)
            traj = Trajectory(task.id, system, env.reset(task))
            while not env.done:
                if rng.random() < ws.mistake_prob:
                    a = _wrong_action(env.board, ws.size, task.solution, rng)
                else:
                    a = expert_action(env.board, ws.size, task.solution, ws.expert)
                    yield build_messages(traj, ws.history_turns) + [{"role": "assistant", "content": a}]
                obs, r, done, info = env.step(a)
                traj.turns.append(Turn(a, obs, r))

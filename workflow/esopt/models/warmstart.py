"""Supervised warm start of the tiny model on Sudoku demonstrations.

This stands in for pretraining: a short run on expert moves (with some injected
mistakes, so the model has seen rejection feedback and the recovery after it)
leaves the base model partly competent at short horizons and weak at long ones.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from tqdm.auto import tqdm

from esopt.agent.rollout import Trajectory, Turn, build_messages
from esopt.envs.sudoku import SudokuEnv, expert_action, generate_puzzles, instructions
from esopt.seeding import derive_seed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmStart:
    size: int
    blanks: tuple[int, ...]  # demonstrations are drawn at these blank counts
    puzzles_per_blank: int
    mistake_prob: float  # chance of an injected wrong move before an expert move
    steps: int
    batch_size: int
    lr: float
    history_turns: int | None
    seed: int
    prompt: str = "full"  # system prompt style
    expert: str = "fewest"  # which blank the demonstrator fills: "fewest" candidates or "first"


def _wrong_action(board: str, size: int, solution: str, rng: random.Random) -> str:
    blanks = [i for i, ch in enumerate(board) if ch == "."]
    i = rng.choice(blanks)
    v = rng.choice([d for d in range(1, size + 1) if str(d) != solution[i]])
    return f"r{i // size + 1}c{i % size + 1}={v}"


def demonstrations(ws: WarmStart) -> Iterator[list[dict[str, str]]]:
    """Chat transcripts (system, observation(s), expert action) along expert episodes."""
    system = instructions(ws.size, ws.prompt)
    rng = random.Random(derive_seed("demos", ws.seed))
    for blanks in ws.blanks:
        for task in generate_puzzles(ws.size, blanks, ws.puzzles_per_blank, seed=ws.seed, split="train"):
            env = SudokuEnv(max_turns=4 * blanks + 4)
            traj = Trajectory(task.id, system, env.reset(task))
            while not env.done:
                if rng.random() < ws.mistake_prob:
                    a = _wrong_action(env.board, ws.size, task.solution, rng)
                else:
                    a = expert_action(env.board, ws.size, task.solution, ws.expert)
                    yield build_messages(traj, ws.history_turns) + [{"role": "assistant", "content": a}]
                obs, r, done, info = env.step(a)
                traj.turns.append(Turn(a, obs, r))


def encode(tokenizer, transcript: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    """Token ids and labels; only the final assistant reply (and its <|im_end|>) is learned.

    The prompt is tokenized exactly as at generation time and the reply appended as
    its own tokens, so training never sees a merge across the boundary."""
    prompt = tokenizer.apply_chat_template(transcript[:-1], tokenize=False, add_generation_prompt=True)
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    reply = tokenizer(transcript[-1]["content"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return p_ids + reply, [-100] * len(p_ids) + reply


def supervised_warm_start(model, tokenizer, ws: WarmStart, progress: bool = True) -> dict[str, Any]:
    examples = [encode(tokenizer, t) for t in demonstrations(ws)]
    log.info("warm start on %d demonstrations", len(examples))
    gen = torch.Generator().manual_seed(derive_seed("sft-order", ws.seed))
    opt = torch.optim.AdamW(model.parameters(), lr=ws.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50) * max(0.0, 1 - s / ws.steps))
    pad = tokenizer.pad_token_id
    model.train()
    losses = []
    bar = tqdm(range(ws.steps), desc="warm start", disable=not progress)
    for step in bar:
        idx = torch.randint(len(examples), (ws.batch_size,), generator=gen).tolist()
        batch = [examples[i] for i in idx]
        width = max(len(ids) for ids, _ in batch)
        # right padding: positions start at 0 as in an unpadded sequence
        ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in batch])
        labels = torch.tensor([l + [-100] * (width - len(l)) for _, l in batch])
        attn = (torch.arange(width)[None, :] < torch.tensor([len(i) for i, _ in batch])[:, None]).long()
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    model.eval()
    return {"demonstrations": len(examples), "final_loss": sum(losses[-50:]) / len(losses[-50:])}

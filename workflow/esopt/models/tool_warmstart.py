"""Expert ReAct demonstrations for the tool benchmarks, and the supervised warm start on them.

This stands in for pretraining at tiny scale, as the Sudoku warm start does
(esopt.models.warmstart): a few hundred steps on expert episodes leave the tiny model
partly competent, so ES and GRPO have a signal to improve. The expert runs the real
tools: a math demonstration's observation is what the sandbox printed, a DocVQA
one's is what OCR read (tasks whose answer OCR did not read verbatim are left out, so
the model never learns to answer what it could not see). With `mistake_prob` an
episode starts with a malformed call (unclosed tag) and the feedback it gets, so the
model has seen the recovery.
"""

from __future__ import annotations

import logging
import random
import statistics
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch
from tqdm.auto import tqdm

from esopt.agent.rollout import Trajectory, Turn, build_messages
from esopt.agent.tools import Tool
from esopt.seeding import derive_seed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SFTSettings:
    steps: int
    batch_size: int
    lr: float
    seed: int


def expert_actions(benchmark: str, task: Any, tools: Sequence[Tool]) -> list[str]:
    """The expert's tool call for a task (the answer follows from its output: see
    `demonstrations`). Math: the program that computes the answer. DocVQA: OCR for the
    label printed before the answer on its line ("Invoice No" for "Invoice No: INV-4821"),
    which returns that line alone; the whole text when the answer starts its line."""
    if benchmark == "math":
        from esopt.envs.math import reference_code

        return [f"<python>{reference_code(task)}</python>"]
    ocr = next(t for t in tools if t.name == "ocr")
    for line in ocr("", task).splitlines():
        for a in task.answers:
            i = line.lower().find(a.lower()) if a else -1
            label = line[:i].strip().rstrip(":").strip() if i > 0 else ""
            if label:
                return [f"<ocr>{label}</ocr>"]
    return ["<ocr></ocr>"]


def _answer_from(benchmark: str, task: Any, observation: str) -> str | None:
    """The answer the expert gives after seeing the tool output, or None to drop the task."""
    if benchmark == "math":
        lines = observation.strip().splitlines()
        return lines[-1].strip() if lines and lines[-1].strip() == str(task.answer) else None
    text = observation.lower()
    for a in task.answers:
        i = text.find(a.lower())
        if a and i >= 0:
            return observation[i:i + len(a)]  # as OCR spelled it
    return None


def demonstrations(benchmark: str, tasks: Sequence[Any], tools: Sequence[Tool], system: str,
                   mistake_prob: float, seed: int, history_turns: int | None = None,
                   progress: bool = True) -> Iterator[list[dict[str, str]]]:
    """Chat transcripts ending in an expert reply, along expert episodes of the real tools."""
    from esopt.eval.tool_episodes import make_env

    rng = random.Random(derive_seed("tool-demos", benchmark, seed))
    kept = 0
    for task in tqdm(tasks, desc=f"{benchmark} demonstrations", disable=not progress):
        env = make_env(benchmark, tools, None)
        traj = Trajectory(getattr(task, "id", ""), system, env.reset(task))
        transcripts = []
        for action in expert_actions(benchmark, task, tools):
            if rng.random() < mistake_prob:
                bad = action.rsplit("</", 1)[0]  # an unclosed call
                obs, _, _, _ = env.step(bad)
                traj.turns.append(Turn(bad, obs, 0.0))
            transcripts.append(build_messages(traj, history_turns) + [{"role": "assistant", "content": action}])
            obs, _, _, _ = env.step(action)
            traj.turns.append(Turn(action, obs, 0.0))
        answer = _answer_from(benchmark, task, traj.turns[-1].observation)
        if answer is None:
            continue
        reply = f"Answer: {answer}"
        transcripts.append(build_messages(traj, history_turns) + [{"role": "assistant", "content": reply}])
        _, reward, done, _ = env.step(reply)
        if not done or reward <= 0:
            continue  # the expert's own answer must score
        kept += 1
        yield from transcripts
    log.info("%s: %d of %d expert episodes kept", benchmark, kept, len(tasks))


def supervised_fine_tune(model, tokenizer, transcripts: Sequence[list[dict[str, str]]], s: SFTSettings,
                         progress: bool = True) -> dict[str, Any]:
    """AdamW on the final assistant reply of each transcript (linear warm-up and decay),
    the recipe of esopt.models.warmstart."""
    from esopt.models.warmstart import encode

    examples = [encode(tokenizer, t) for t in transcripts]
    if not examples:
        raise ValueError("no demonstrations to fine-tune on")
    gen = torch.Generator().manual_seed(derive_seed("tool-sft-order", s.seed))
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / 50) * max(0.0, 1 - k / s.steps))
    pad = tokenizer.pad_token_id
    model.train()
    losses: list[float] = []
    bar = tqdm(range(s.steps), desc="tool warm start", disable=not progress)
    for step in bar:
        batch = [examples[i] for i in torch.randint(len(examples), (s.batch_size,), generator=gen).tolist()]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in batch])  # right padding
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
        attn = (torch.arange(width)[None, :] < torch.tensor([len(i) for i, _ in batch])[:, None]).long()
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=f"{statistics.fmean(losses[-20:]):.3f}")
    model.eval()
    return {"examples": len(examples), "final_loss": statistics.fmean(losses[-50:])}


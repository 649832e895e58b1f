"""Supervised fine-tuning on chat transcripts: the warm start of every tiny model.

This stands in for pretraining at tiny scale: a short run on expert demonstrations
(esopt.models.demonstrations: Sudoku moves, ReAct tool episodes; the heuristic writer's
in esopt.ahd.writer) leaves the model partly competent, so ES and RL have a signal.
Only the final assistant reply of each transcript is learned.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from esopt.io import atomic_path, sha256_text
from esopt.seeding import derive_seed

log = logging.getLogger(__name__)

Transcript = list[dict[str, str]]  # chat messages, the last one the assistant reply to learn


@dataclass(frozen=True)
class SFTSettings:
    steps: int
    batch_size: int
    lr: float
    seed: int
    order_key: str = "sft-order"  # names the stream that orders the batches (seeded)
    select_every: int | None = None  # score the model every this many steps and keep the best
    select_target: float | None = None  # with select_every: stop at the first score >= this and keep that checkpoint


Scorer = Callable[[torch.nn.Module], float]  # higher is better; must not change the model


def encode(tokenizer, transcript: Transcript) -> tuple[list[int], list[int]]:
    """Token ids and labels; only the final assistant reply (and its <|im_end|>) is learned.

    The prompt is tokenized exactly as at generation time and the reply appended as
    its own tokens, so training never sees a merge across the boundary."""
    prompt = tokenizer.apply_chat_template(transcript[:-1], tokenize=False, add_generation_prompt=True)
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    reply = tokenizer(transcript[-1]["content"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return p_ids + reply, [-100] * len(p_ids) + reply


def supervised_fine_tune(model, tokenizer, transcripts: Sequence[Transcript], s: SFTSettings, desc: str = "warm start",
                         progress: bool = True, scorer: Scorer | None = None,
                         checkpoint: str | os.PathLike | None = None, run_info: dict[str, Any] | None = None,
                         ) -> dict[str, Any]:
    """AdamW on the final reply of each transcript, batches drawn with replacement in a
    seeded order, linear warm-up over 50 steps then linear decay to 0, gradients clipped at 1.

    With a `scorer` and `s.select_every`, the model is scored every select_every steps
    and at the end, and left at the best-scoring checkpoint (the earliest on ties): a
    tiny warm start can fall into a basin where the model repeats a rejected move, and
    the loss does not show it (docs/tiny_recipe.md). With `s.select_target` as well, it
    stops at the first checkpoint scoring at least the target and is left there (the best
    if none does): models of several widths warm-started to a comparable success (the
    model-size ladder) rather than each to its best. The learning-rate schedule is the
    one of `s.steps` either way, so the steps before the stop are those of a full run.

    With a `checkpoint` path, the whole state (weights, optimizer, schedule, batch order,
    RNG, losses, scores and the best checkpoint) is saved there atomically at every scored
    step, and a rerun resumes from it and ends bit for bit where an uninterrupted run
    would: a warm start longer than a sitting is built in pieces. `run_info` (e.g. the
    architecture) joins the settings and the demonstrations' digest in the record a
    resumed run must match. The caller deletes the file once the model is saved."""
    examples = [encode(tokenizer, t) for t in transcripts]
    if not examples:
        raise ValueError("no demonstrations to fine-tune on")
    log.info("%s on %d demonstrations", desc, len(examples))
    gen = torch.Generator().manual_seed(derive_seed(s.order_key, s.seed))
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / 50) * max(0.0, 1 - k / s.steps))
    pad = tokenizer.pad_token_id
    model.train()
    losses: list[float] = []
    select = _Selection(scorer, s.select_every) if scorer is not None and s.select_every else None
    start = 0
    if checkpoint is not None:
        record = {"sft": asdict(s), "demonstrations": sha256_text(json.dumps(examples)), **(run_info or {})}
        start = _resume(checkpoint, record, model, opt, sched, gen, losses, select)
    if start and select is not None and s.select_target is not None and select.curve[-1]["score"] >= s.select_target:
        start = s.steps  # killed after it reached the target: nothing left to train
    bar = tqdm(range(start, s.steps), desc=desc, disable=not progress, initial=start, total=s.steps)
    for step in bar:
        batch = [examples[i] for i in torch.randint(len(examples), (s.batch_size,), generator=gen).tolist()]
        width = max(len(ids) for ids, _ in batch)
        # right padding: positions start at 0 as in an unpadded sequence
        ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in batch])
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
        if select is not None and ((step + 1) % s.select_every == 0 or step + 1 == s.steps):
            value = select.score(model, step + 1, statistics.fmean(losses[-20:]))
            if checkpoint is not None:
                _save(checkpoint, record, step + 1, model, opt, sched, gen, losses, select)
            if s.select_target is not None and value >= s.select_target:
                log.info("step %d: validation score %.3f reached the target %.3f: warm start stops here",
                         step + 1, value, s.select_target)
                break
    model.eval()
    stats = {"examples": len(examples), "final_loss": statistics.fmean(losses[-50:])}
    if select is not None:
        stats["selection"] = select.restore_best(model)
        if s.select_target is not None:
            stats["selection"].update(target=s.select_target, target_reached=stats["selection"]["best_score"] >= s.select_target)
    return stats


def _save(path, record, step, model, opt, sched, gen, losses, select) -> None:
    state = {"run": record, "step": step, "model": model.state_dict(), "opt": opt.state_dict(),
             "sched": sched.state_dict(), "order": gen.get_state(), "rng": torch.get_rng_state(), "losses": losses,
             "selection": {"curve": select.curve, "best": select.best}}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def _resume(path, record, model, opt, sched, gen, losses, select) -> int:
    """Loads a saved state into the run's objects; the step to continue from (0: none)."""
    if not Path(path).exists():
        return 0
    st = torch.load(path, map_location="cpu", weights_only=False)
    if st["run"] != record:
        diff = sorted(k for k in set(st["run"]) | set(record) if st["run"].get(k) != record.get(k))
        raise ValueError(f"{path} belongs to a different warm start (differs in {diff}); delete it to start over")
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    sched.load_state_dict(st["sched"])
    gen.set_state(st["order"])
    torch.set_rng_state(st["rng"])
    losses[:] = st["losses"]
    if select is not None:
        select.curve, select.best = st["selection"]["curve"], st["selection"]["best"]
    log.info("warm start resumed from %s after %d steps", path, st["step"])
    return st["step"]


class _Selection:
    """The scores along a run and a CPU copy of the best checkpoint's weights."""

    def __init__(self, scorer: Scorer, every: int):
        self.scorer, self.every = scorer, every
        self.curve: list[dict[str, float]] = []
        self.best: tuple[float, int, dict[str, torch.Tensor]] | None = None

    def score(self, model, step: int, loss: float) -> float:
        model.eval()
        with torch.no_grad():
            value = float(self.scorer(model))
        model.train()
        self.curve.append({"step": step, "score": value, "loss": loss})
        log.info("step %d: validation score %.3f (loss %.3f)", step, value, loss)
        if self.best is None or value > self.best[0]:
            self.best = (value, step, {k: v.detach().clone().cpu() for k, v in model.state_dict().items()})
        return value

    def restore_best(self, model) -> dict[str, Any]:
        value, step, state = self.best
        model.load_state_dict(state)
        model.eval()
        return {"every": self.every, "best_step": step, "best_score": value, "curve": self.curve}

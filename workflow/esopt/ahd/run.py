"""One automatic-heuristic-design run: an external search (EoH or Sample), the LLM that
writes the heuristics, the sandboxed evaluator, and optionally online ES on that LLM.

Every batch the search asks for is one round: the writer answers each request with
one reply, each reply is parsed and evaluated, the evaluated children go back to the
search. The budget is the number of replies (samples) and is exact: the last batch
is cut to what is left.

With ES on (Agentic ESOpt at test time), the batches of the ES operators (EoH: m1 and
m2; Sample: every batch) are also ES generations: request i is answered by the model
perturbed with member i's seed, and the member's reward comes from the SAME
evaluation the search uses (EoH: parent objective − child objective; Sample:
−child objective; an invalid child gets the penalty reward), z-scored, then the
weights move (esopt.es). σ follows a cosine from sigma0 to 0 over the ES generations
the budget allows. Other batches (EoH's init, e1, e2) are answered by the current,
unperturbed model. The matched baseline (ES off) answers every request with the
fixed model: the same number of samples, evaluations and searches steps.

The run checkpoints after every batch (search state, samples, ES history) in one
atomic file, so a killed run resumes where it stopped and ends where an
uninterrupted run ends (evaluations are deterministic, except that a candidate near
the time limit may time out on one run and not on another).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from esopt.io import write_json_atomic
from esopt.seeding import derive_seed

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "esopt-ahd-checkpoint/1"


@dataclass(frozen=True)
class ESSettings:
    alpha: float
    sigma0: float
    operators: tuple[str, ...]  # batches of these operators are ES generations
    normalization: str = "zscore"
    penalty: float | None = None  # reward of an invalid child; None: min(valid rewards) − 1 std (or −1)
    update_rounding: str = "nearest"  # esopt.es.rounding; the history records it, so replay rounds alike


def planned_es_generations(batch_sizes: Sequence[tuple[str, int]], budget: int, operators: Sequence[str]) -> int:
    """How many ES generations a budget allows, given the search's batch plan (operator, size)."""
    used = gens = 0
    for op, n in batch_sizes:
        if used >= budget:
            break
        if op in operators and min(n, budget - used) >= 2:
            gens += 1
        used += n
    return max(gens, 1)


def batch_plan(search, budget: int) -> list[tuple[str, int]]:
    """The batches a search will ask for, assuming its initialization succeeds at once."""
    from esopt.ahd.search import EoH

    if isinstance(search, EoH):
        init = [("i1", search.init_size)]
        per_gen = [(op, search.pop_size * (search.k if op in ("m1", "m2") else 1)) for op in search.operators]
        n = math.ceil(max(budget - search.init_size, 0) / max(sum(s for _, s in per_gen), 1)) + 1
        return init + per_gen * n
    return [("i1", search.batch_size)] * (math.ceil(budget / search.batch_size) + 1)


def es_rewards(objectives: Sequence[float | None], parents: Sequence[float | None], relative: bool,
               penalty: float | None) -> list[float]:
    """Member rewards: −objective, or parent − child when `relative`; invalid children get the penalty."""
    raw: list[float | None] = []
    for obj, par in zip(objectives, parents):
        if obj is None:
            raw.append(None)
        elif relative and par is not None:
            raw.append(par - obj)
        else:
            raw.append(-obj)
    valid = [r for r in raw if r is not None]
    if penalty is None:
        if valid:
            mean = sum(valid) / len(valid)
            std = math.sqrt(sum((r - mean) ** 2 for r in valid) / len(valid))
            penalty = min(valid) - (std if std > 0 else 1.0)
        else:
            penalty = -1.0
    return [penalty if r is None else r for r in raw]


class HeuristicSearchRun:
    """Drives one run; see the module docstring. `writer_for(model)` makes the writer
    (a PolicyAnalyst-like object with complete(prompts, seed) -> replies); with ES on,
    `weights` (esopt.es.run.ESRun of the writer's model) gives the perturber."""

    def __init__(self, *, task, task_prompt, search, evaluator, writer, budget: int, seed: int,
                 checkpoint: str | Path, weights=None, es: ESSettings | None = None, run_info: dict | None = None,
                 progress: bool = True):
        self.task, self.task_prompt, self.search, self.evaluator = task, task_prompt, search, evaluator
        self.writer, self.budget, self.seed, self.weights, self.es = writer, int(budget), seed, weights, es
        self.checkpoint = Path(checkpoint)
        self.progress = progress
        self.samples: list[dict[str, Any]] = []
        self._runs_before = 0  # sandbox processes of the run before a resume
        self.used = 0
        self.batches = 0
        self.wall_s = 0.0
        from esopt.es.history import History

        run = {"kind": "ahd", **(run_info or {}), "es": None if es is None else asdict(es), "seed": seed}
        self.history = History(run=json.loads(json.dumps(run)))  # as a checkpoint reads it back (tuples: lists)
        self.perturber = None
        self.schedule = None
        if es is not None:
            if weights is None:
                raise ValueError("ES needs the writer's weights (esopt.es.run.ESRun)")
            if weights.rounding != es.update_rounding:
                raise ValueError(f"the writer's weights round {weights.rounding}, the run {es.update_rounding}")
            from esopt.es.schedule import SigmaSchedule

            self.perturber = weights.perturber
            total = planned_es_generations(batch_plan(search, budget), budget, es.operators)
            self.schedule = SigmaSchedule("cosine", es.sigma0, 0.0, total)

    def sandbox_runs(self) -> int:
        return self._runs_before + self.evaluator.sandbox_runs

    # ---- checkpoint
    def _save(self) -> None:
        write_json_atomic(self.checkpoint, {
            "format": CHECKPOINT_FORMAT, "used": self.used, "batches": self.batches, "wall_s": self.wall_s,
            "sandbox_runs": self.sandbox_runs(), "search": self.search.state_dict(), "samples": self.samples, "history": asdict(self.history)})

    def resume(self) -> None:
        if not self.checkpoint.exists():
            return
        from esopt.es.history import GenerationRecord

        d = json.loads(self.checkpoint.read_text())
        if d.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{self.checkpoint}: not an AHD checkpoint ({d.get('format')!r})")
        if d["history"]["run"] != self.history.run:
            raise ValueError(f"{self.checkpoint} belongs to a different run; delete it or use another directory")
        self.search.load_state_dict(d["search"])
        self.used, self.batches, self.wall_s, self.samples = d["used"], d["batches"], d["wall_s"], d["samples"]
        self._runs_before = d["sandbox_runs"]
        self.history.generations = [GenerationRecord(**g) for g in d["history"]["generations"]]
        if self.perturber is not None:
            self.history.replay(self.perturber)
        log.info("resumed after %d samples (%d batches, %d ES generations)", self.used, self.batches,
                 len(self.history.generations))

    # ---- one batch
    def _write(self, requests, es_on: bool, sigma: float, seeds: list[int]) -> list[str]:
        """One reply per request, sampled with the request's own seed, so the baseline and
        the ES run draw the same replies wherever their models agree."""
        replies = []
        for i, r in enumerate(requests):
            if es_on:
                self.perturber.apply(seeds[i], sigma)
            try:
                replies += self.writer.complete([r.prompt], seed=r.seed)
            finally:
                if es_on:
                    self.perturber.revert()
        return replies

    def step(self) -> None:
        from esopt.ahd.prompts import parse_reply
        from esopt.es.history import GenerationRecord
        from esopt.es.normalize import normalize_rewards

        start = time.perf_counter()
        requests = self.search.next_batch()[: self.budget - self.used]
        op = requests[0].operator
        es_on = self.es is not None and op in self.es.operators and len(requests) >= 2
        t = len(self.history.generations)
        sigma = self.schedule(min(t, self.schedule.total - 1)) if es_on else 0.0
        seeds = [derive_seed("member", self.seed, t, i) for i in range(len(requests))] if es_on else []
        replies = self._write(requests, es_on, sigma, seeds)
        parsed = [parse_reply(text, self.task_prompt, self.task) for text in replies]
        codes = [p[1] if p else "" for p in parsed]
        evals = self.evaluator.many(codes)
        children = []
        for i, (req, text, p, ev) in enumerate(zip(requests, replies, parsed, evals)):
            error = "reply has no usable heuristic" if p is None else ev.error
            children.append(req.child(reply=text, thought=p[0] if p else "", code=codes[i],
                                      objective=ev.objective if p else None, error=error))
        self.search.accept(requests, children)
        if es_on:
            parent_obj = [min((q.objective for q in r.parents if q.objective is not None), default=None)
                          for r in requests]
            rewards = es_rewards([c.objective for c in children], parent_obj, relative=op != "i1",
                                 penalty=self.es.penalty)
            z = normalize_rewards(rewards, self.es.normalization)
            rec = GenerationRecord(generation=t, sigma=sigma, alpha=self.es.alpha, task_seed=self.batches,
                                   seeds=seeds, signs=[1] * len(seeds), rewards=rewards, normalized=z,
                                   normalization=self.es.normalization, updated=any(v != 0.0 for v in z),
                                   wall_s=0.0, member_info=[{"operator": op, "valid": c.objective is not None}
                                                            for c in children])
            if rec.updated:
                self.perturber.update(rec.seeds, rec.coefficients())
            rec.wall_s = time.perf_counter() - start
            self.history.generations.append(rec)
        for c, ev in zip(children, evals):
            self.samples.append({**c.to_dict(), "batch": self.batches, "es_generation": t if es_on else None,
                                 "status": ev.status if c.code else "unparsed"})  # no timings: a resumed run's
        # samples.jsonl is byte-identical to an uninterrupted run's
        self.used += len(requests)
        self.batches += 1
        self.wall_s += time.perf_counter() - start
        self._save()

    def run(self) -> dict[str, Any]:
        self.resume()
        bar = tqdm(total=self.budget, initial=self.used, desc=f"{self.task.name} samples", disable=not self.progress)
        while self.used < self.budget:
            before = self.used
            self.step()
            bar.update(self.used - before)
            best = self.search.best()
            bar.set_postfix(best=f"{best.objective:.4g}" if best and best.objective is not None else "-")
        bar.close()
        return self.summary()

    def summary(self) -> dict[str, Any]:
        valid = [s for s in self.samples if s["objective"] is not None]
        best = self.search.best()
        curve, running = [], math.inf
        for s in self.samples:  # best-so-far after every sample: the search's anytime curve
            if s["objective"] is not None:
                running = min(running, s["objective"])
            curve.append(None if running == math.inf else running)
        return {"samples": self.used, "batches": self.batches, "valid_samples": len(valid),
                "valid_rate": len(valid) / max(self.used, 1), "unique_codes": len({s["code"] for s in self.samples}),
                "sandbox_runs": self.sandbox_runs(), "es_generations": len(self.history.generations),
                "best": None if best is None else best.to_dict(), "best_so_far": curve, "wall_s": self.wall_s}

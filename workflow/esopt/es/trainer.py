"""The ES generation loop (Agentic ESOpt), model- and environment-agnostic.

Each generation t:
  1. σ_t from the schedule; G member seeds from the run seed (antithetic: ±ε pairs);
  2. for each member: θ ← θ + σ_t·s_i·ε_i in place, R_i = fitness(same task batch), revert;
  3. R̂ = normalize(R); θ ← θ + (α/G) Σ_i R̂_i·s_i·ε_i, regenerated from seeds, accumulated
     in fp32 and rounded to the weights' dtype as cfg.update_rounding says;
  4. history.json written atomically, so a killed run resumes exactly.

Each record carries the fidelity of the update and of member 0's perturbation (cosine of
realized vs intended change and fraction of entries changed, per parameter group).

With a `Collective` of several ranks (esopt.es.distributed) each rank evaluates its
share of the members and the rewards are all-gathered; every rank applies the same
update, only rank 0 writes the history. Each rank reports its progress to the others
(member started, finished, wall time) for the slow-rank messages, and a member past the
collective's member_deadline_s stops the run (esopt.es.deadline).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from tqdm.auto import tqdm

from esopt.es.deadline import member_deadline
from esopt.es.distributed import Collective
from esopt.es.fidelity import Fidelity
from esopt.es.history import GenerationRecord, History
from esopt.es.lowrank import make_perturber
from esopt.es.normalize import normalize_rewards
from esopt.es.settings import ESConfig, member_seeds, task_seed
from esopt.io import sha256_file, write_json_atomic

log = logging.getLogger(__name__)
CONTINUED = "continued.json"  # beside history_path: the earlier sitting's history a run continued (continue_from)


@dataclass
class Member:
    generation: int
    index: int
    seed: int
    sign: int
    sigma: float
    task_seed: int


# fitness(member) -> (scalar reward, info dict saved in the history)
Fitness = Callable[[Member], tuple[float, dict[str, Any]]]


class BatchedFitness(Protocol):
    """The fitness of all of a rank's members in one call (esopt.agent.population): the
    trainer perturbs the model for each member in turn and has it `capture(slot)` the
    weights (the low-rank variant: `capture_lowrank(slot, seed, scale)`, which draws the
    member's factors itself and leaves the model alone); then `evaluate(members)` scores
    members[k] on the weights captured at slot k."""

    def capture(self, slot: int) -> None: ...

    def capture_lowrank(self, slot: int, seed: int, scale: float) -> None: ...

    def evaluate(self, members: list[Member]) -> list[tuple[float, dict[str, Any]]]: ...


@dataclass
class ESTrainer:
    model: torch.nn.Module | None  # None when `perturber` runs elsewhere (an inference engine's workers)
    cfg: ESConfig
    fitness: Fitness
    history_path: str | os.PathLike | None = None
    # the history of this run kept elsewhere (a published partial run, esopt.provenance.published),
    # continued when history_path has none; one of another run is ignored with a warning
    continue_from: str | os.PathLike | None = None
    run_info: dict[str, Any] = field(default_factory=dict)  # e.g. base weight hash; checked on resume
    on_generation: Callable[[GenerationRecord], None] | None = None
    progress: bool = True
    collective: Collective = field(default_factory=Collective)  # ranks sharing the population
    # Perturber(model) by default; or one with its interface that perturbs the weights where
    # they live, e.g. esopt.agent.vllm_engine.VLLMEngine.perturber(rounding)
    perturber: Any = None
    revert: str = "exact"  # es.revert for the default Perturber (esopt.es.perturb.resolve_revert)
    # seconds one member may take (esopt.es.deadline); None: the collective's member_deadline_s
    member_deadline_s: float | None = None
    # all members in one call instead of `fitness` one by one (a population engine); the
    # perturbations, rewards and update are the same either way
    batched: BatchedFitness | None = None
    # set by resume() when the run continued an earlier sitting's history (continue_from)
    continued: dict[str, Any] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.perturber is None:
            if self.model is None:
                raise ValueError("ESTrainer needs a model or a perturber")
            self.perturber = make_perturber(self.model, self.cfg.perturbation, self.cfg.rank,
                                            rounding=self.cfg.update_rounding, revert=self.revert)
        elif getattr(self.perturber, "rounding", self.cfg.update_rounding) != self.cfg.update_rounding:
            raise ValueError(f"the perturber rounds {self.perturber.rounding}, the run {self.cfg.update_rounding}")
        self.history = History(run={"es": self.cfg.as_record(), **self.run_info})

    def resume(self) -> int:
        """Load history_path if present (else continue_from), check it belongs to this run,
        replay its updates.

        The model must hold the base weights (with fp32_master, the master was taken from
        them and is rebuilt by the same replay). Returns the number of generations done.
        A history_path of another run is an error; a continue_from of another run (the
        config or base changed since it was published) is skipped: the run starts afresh.
        """
        own = self.history_path is not None and Path(self.history_path).exists()
        path = self.history_path if own else self.continue_from
        if path is None or not Path(path).exists():
            return 0
        old = History.load(path)
        if isinstance(old.run.get("es"), dict):  # histories from before the option rounded to nearest
            old.run["es"].setdefault("update_rounding", "nearest")
        mismatch, other_run = None, old.run != self.history.run
        if other_run:
            diff = {k for k in set(old.run) | set(self.history.run) if old.run.get(k) != self.history.run.get(k)}
            mismatch = f"{path} belongs to a different run (differs in {sorted(diff)})"
        for rec in old.generations if mismatch is None else ():
            seeds, signs = member_seeds(self.cfg, rec.generation)
            if (rec.seeds, rec.signs, rec.task_seed) != (seeds, signs, task_seed(self.cfg, rec.generation)):
                mismatch = f"{path}: seed stream of generation {rec.generation} does not match"
                break
        if mismatch is not None and own:
            raise ValueError(mismatch + ("; delete it or use another output directory" if other_run else ""))
        if mismatch is not None:
            log.warning("not continuing: %s; the run starts at generation 0", mismatch)
            return 0
        old.final = None
        old.replay(self.perturber)
        self.history = old
        # where the run was continued from, beside its own history so that a resume keeps it
        marker = Path(self.history_path).with_name(CONTINUED) if self.history_path is not None else None
        if not own:
            self.continued = {"history": str(path), "sha256": sha256_file(path), "generations": len(old.generations)}
            if marker is not None and self.collective.is_main:
                write_json_atomic(marker, self.continued)
        elif marker is not None and marker.exists():
            self.continued = json.loads(marker.read_text())
        log.info("%s from %s after %d generations", "resumed" if own else "continued", path, len(old.generations))
        return len(old.generations)

    def step(self, t: int) -> GenerationRecord:
        start = time.perf_counter()
        sigma = self.cfg.sigma(t)
        seeds, signs = member_seeds(self.cfg, t)
        tseed = task_seed(self.cfg, t)
        mine: dict[int, tuple[float, dict[str, Any]]] = {}
        perturbation = Fidelity()  # member 0's, on rank 0 (which writes the history): one is enough to see
        c = self.collective
        deadline = self.member_deadline_s if self.member_deadline_s is not None else c.member_deadline_s
        members = list(c.members(self.cfg.population))
        done: dict[int, float] = {}  # member -> wall s, reported to the other ranks
        c.progress(generation=t, members=members, done=done, running=None)
        if self.batched is not None:
            mine = self._batched(t, members, seeds, signs, sigma, tseed, perturbation, deadline)
        for i in (members if self.batched is None else ()):
            t0 = time.perf_counter()
            c.progress(running=i, running_since=time.time())
            with member_deadline(deadline, i, t, c.rank, c.world_size):
                self.perturber.apply(seeds[i], sigma * signs[i], fidelity=perturbation if i == 0 else None)
                try:
                    r, info = self.fitness(Member(t, i, seeds[i], signs[i], sigma, tseed))
                finally:
                    self.perturber.revert()
            mine[i] = (float(r), info)
            done[i] = round(time.perf_counter() - t0, 3)
            c.progress(done=done, running=None)
        for part in self.collective.all_gather(mine):  # rewards are all that travels
            mine.update(part)
        rewards = [mine[i][0] for i in range(self.cfg.population)]
        infos = [mine[i][1] for i in range(self.cfg.population)]
        z = normalize_rewards(rewards, self.cfg.normalization)
        rec = GenerationRecord(
            generation=t, sigma=sigma, alpha=self.cfg.alpha, task_seed=tseed, seeds=seeds,
            signs=signs, rewards=rewards, normalized=z, normalization=self.cfg.normalization,
            updated=any(v != 0.0 for v in z), wall_s=0.0, member_info=infos,
        )
        update = Fidelity()
        if rec.updated:
            self.perturber.update(rec.seeds, rec.coefficients(), fidelity=update)
        rec.fidelity = {"update": update.summary(), "perturbation": perturbation.summary()}
        rec.wall_s = time.perf_counter() - start
        return rec

    def _batched(self, t: int, members: list[int], seeds: list[int], signs: list[int], sigma: float, tseed: int,
                 perturbation: Fidelity, deadline: float | None) -> dict[int, tuple[float, dict[str, Any]]]:
        """Every member's weights captured one after another, then all members evaluated at once."""
        c = self.collective
        for k, i in enumerate(members):
            if self.cfg.perturbation == "lowrank":  # EGGROLL's forward: factors, no weights perturbed
                self.batched.capture_lowrank(k, seeds[i], sigma * signs[i])
                continue
            self.perturber.apply(seeds[i], sigma * signs[i], fidelity=perturbation if i == 0 else None)
            try:
                self.batched.capture(k)
            finally:
                self.perturber.revert()
        t0 = time.perf_counter()
        c.progress(running=members[0], running_since=time.time())
        # the deadline is per member; the batch has them all
        with member_deadline(None if deadline is None else deadline * len(members), members[0], t, c.rank,
                             c.world_size):
            results = self.batched.evaluate([Member(t, i, seeds[i], signs[i], sigma, tseed) for i in members])
        wall = round((time.perf_counter() - t0) / max(len(members), 1), 3)
        c.progress(done=dict.fromkeys(members, wall), running=None)
        return {i: (float(r), info) for i, (r, info) in zip(members, results)}

    def run(self) -> History:
        done = self.resume()
        bar = tqdm(range(done, self.cfg.generations), initial=done, total=self.cfg.generations,
                   desc="ES generations", disable=not (self.progress and self.collective.is_main))
        for t in bar:
            rec = self.step(t)
            self.history.generations.append(rec)
            if self.history_path is not None and self.collective.is_main:
                self.history.save(self.history_path)
            if self.on_generation is not None and self.collective.is_main:
                self.on_generation(rec)
            bar.set_postfix(sigma=f"{rec.sigma:.2e}", mean_R=f"{sum(rec.rewards) / len(rec.rewards):.3f}")
        return self.history

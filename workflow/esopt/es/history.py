"""Run history: everything needed to resume or replay an ES run from its base weights.

Only seeds, rewards and scalars are stored; weights are rebuilt by replaying each
generation's update from its seeds (the same function the run used, so bit-exact).
What can be derived is derived again, never read back: a replay normalizes the raw
rewards R_i with the run's es settings and builds the update coefficients from them
(`History.update_of`); `History.check` names every generation whose recorded σ, α,
seeds, task seed, normalized rewards or update flag are not what those settings and
rewards give.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from esopt.es.normalize import normalize_rewards
from esopt.es.schedule import SigmaSchedule
from esopt.es.settings import ESConfig, member_seeds, task_seed
from esopt.io import write_json_atomic
from esopt.seeding import derive_seed

FORMAT = "esopt-history/1"


@dataclass
class GenerationRecord:
    generation: int
    sigma: float
    alpha: float
    task_seed: int
    seeds: list[int]  # noise seed of each member (antithetic pairs share one)
    signs: list[int]  # +1 / -1
    rewards: list[float]  # raw fitness R_i
    normalized: list[float]  # R̂_i
    normalization: str
    updated: bool
    wall_s: float
    member_info: list[dict[str, Any]] = field(default_factory=list)
    # realized vs intended change per parameter group (esopt.es.fidelity): of the update,
    # and of member 0's perturbation; diagnostics only, replay does not read them
    fidelity: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def coefficients(self) -> list[float]:
        """c_i = (α / G)·R̂_i·sign_i from the recorded R̂ (the trainer, as it makes them)."""
        return update_coefficients(self.alpha, self.normalized, self.signs)

    def metrics(self) -> dict[str, Any]:
        """The generation's line of metrics.jsonl: σ, α, the members' rewards, the
        success and turns each member's episodes report (member_info), and the fidelity
        of the update and the perturbation, as KIND_{cosine,changed}_GROUP."""
        succ = [i["success"] for i in self.member_info]
        fidelity = {f"{kind}_{stat}_{group}": v for kind, groups in self.fidelity.items()
                    for group, stats in groups.items() for stat, v in stats.items()}
        return {
            "generation": self.generation, "sigma": self.sigma, "alpha": self.alpha,
            "mean_reward": statistics.fmean(self.rewards), "max_reward": max(self.rewards),
            "min_reward": min(self.rewards), "std_reward": statistics.pstdev(self.rewards),
            "success_rate": statistics.fmean(succ),
            "mean_turns": statistics.fmean(i["mean_turns"] for i in self.member_info),
            "updated": self.updated, "wall_s": self.wall_s, **fidelity,
        }


@dataclass
class History:
    run: dict[str, Any]  # the run's settings; a resume must match them exactly
    generations: list[GenerationRecord] = field(default_factory=list)
    final: dict[str, Any] | None = None  # set when the run finished (e.g. final weight hash)
    format: str = FORMAT

    def save(self, path: str | os.PathLike) -> None:
        write_json_atomic(path, asdict(self))

    @classmethod
    def load(cls, path: str | os.PathLike) -> History:
        with open(path) as f:
            data = json.load(f)
        if data.get("format") != FORMAT:
            raise ValueError(f"{path}: format {data.get('format')!r}, expected {FORMAT!r}")
        gens = [GenerationRecord(**g) for g in data["generations"]]
        return cls(run=data["run"], generations=gens, final=data.get("final"))

    @property
    def update_rounding(self) -> str:
        """How the run wrote its updates (esopt.es.rounding); runs that record none rounded to nearest."""
        return (self.run.get("es") or {}).get("update_rounding", "nearest")

    def perturber(self, model) -> Any:
        """A perturber of `model` that replays this run: its perturbation (full-rank, or the
        low-rank variant with its rank) and its update rounding."""
        from esopt.es.lowrank import make_perturber

        es = self.run.get("es") or {}
        return make_perturber(model, es.get("perturbation", "full"), es.get("rank"), rounding=self.update_rounding)

    @property
    def es(self) -> dict[str, Any]:
        """The run's es settings: ESConfig.as_record() (train-es, train-agent) or the heuristic
        search's ESSettings (run kind "ahd")."""
        es = self.run.get("es")
        return es if isinstance(es, dict) else {}

    def es_config(self):
        """The ESConfig the run was made with (None for a heuristic-search history, whose
        members and σ follow the search's batches, esopt.ahd.run)."""
        if self.run.get("kind") == "ahd":
            return None
        es = dict(self.es)
        sigma = es.pop("sigma", None)
        if not isinstance(sigma, dict):
            raise TypeError(f"run.es.sigma is {sigma!r}, not a schedule")
        return ESConfig(sigma=SigmaSchedule(**sigma), **es)

    def update_of(self, rec: GenerationRecord) -> Update:
        """A generation's update from its raw rewards: R̂ = normalize(R) with the run's
        es.normalization, c_i = (α / G)·R̂_i·sign_i with the run's es.alpha."""
        with _quiet_normalize():  # the run warned of all-equal rewards already
            z = normalize_rewards(rec.rewards, self.es.get("normalization", rec.normalization))
        alpha = self.es.get("alpha", rec.alpha)
        return Update(z, any(v != 0.0 for v in z), update_coefficients(alpha, z, rec.signs))

    def check(self) -> list[str]:
        """Every generation whose recorded values are not what the run's es settings and
        its raw rewards give: normalization, R̂, the update flag, α; for train-es/train-agent
        runs also σ_t (the schedule), the member seeds and signs and the task seed (from the
        run seed); for heuristic-search runs the member seeds (from the run seed). Empty when
        all agree."""
        try:
            cfg = self.es_config()
        except (TypeError, ValueError) as e:
            return [f"run.es does not describe an ES run ({e})"]
        ahd = self.run.get("kind") == "ahd"
        es = self.es
        bad: list[str] = []
        for i, rec in enumerate(self.generations):
            where = f"generation {rec.generation}"
            if rec.generation != i:
                bad.append(f"{where} is entry {i} of the history")
                continue
            n = len(rec.rewards)
            if not (len(rec.seeds) == len(rec.signs) == len(rec.normalized) == n) or (cfg and n != cfg.population):
                bad.append(f"{where}: {n} rewards, {len(rec.seeds)} seeds, {len(rec.signs)} signs, "
                           f"{len(rec.normalized)} normalized" + (f" (population {cfg.population})" if cfg else ""))
                continue
            try:
                up = self.update_of(rec)
            except ValueError as e:
                bad.append(f"{where}: the raw rewards do not normalize: {e}")
                continue
            norm = es.get("normalization", rec.normalization)
            if rec.normalization != norm:
                bad.append(f"{where}: normalization {rec.normalization!r}, the run's es.normalization is {norm!r}")
            if rec.normalized != up.normalized:
                k = next(j for j, (a, b) in enumerate(zip(rec.normalized, up.normalized)) if a != b)
                bad.append(f"{where}: normalized rewards {_short_list(rec.normalized)} recorded, {norm} of the raw "
                           f"rewards {_short_list(rec.rewards)} gives {_short_list(up.normalized)} (member {k})")
            if rec.updated != up.updated:
                bad.append(f"{where}: updated {rec.updated} recorded, the raw rewards give {up.updated}")
            if rec.alpha != es.get("alpha", rec.alpha):
                bad.append(f"{where}: alpha {rec.alpha} recorded, the run's es.alpha is {es.get('alpha')}")
            if cfg is not None:
                seeds, signs = member_seeds(cfg, i)
                if (rec.seeds, rec.signs) != (seeds, signs):
                    bad.append(f"{where}: member seeds or signs are not those of run seed {cfg.seed}")
                if rec.task_seed != task_seed(cfg, i):
                    bad.append(f"{where}: task seed {rec.task_seed} is not that of run seed {cfg.seed}")
                if i < cfg.generations and rec.sigma != cfg.sigma(i):
                    bad.append(f"{where}: sigma {rec.sigma} recorded, the schedule gives {cfg.sigma(i)}")
                elif i >= cfg.generations:
                    bad.append(f"{where}: beyond the run's {cfg.generations} generations")
            elif ahd:
                seeds = [derive_seed("member", self.run.get("seed"), i, k) for k in range(n)]
                if rec.seeds != seeds or rec.signs != [1] * n:
                    bad.append(f"{where}: member seeds or signs are not those of run seed {self.run.get('seed')}")
        return bad

    def replay(self, perturber, upto: int | None = None) -> None:
        """Apply the updates of generations [0, upto) to the perturber's module, each made
        again from the generation's raw rewards and seeds (update_of), not read back.

        The perturber must perturb and round as the run did: history.perturber(module)."""
        if perturber.rounding != self.update_rounding:
            raise ValueError(f"the run rounded its updates with {self.update_rounding!r}, "
                             f"the perturber with {perturber.rounding!r}: the replay would not match")
        for rec in self.generations[:upto]:
            up = self.update_of(rec)
            if up.updated:
                perturber.update(rec.seeds, up.coefficients)


def update_coefficients(alpha: float, normalized: list[float], signs: list[int]) -> list[float]:
    """c_i = (α / G)·R̂_i·sign_i, so that θ += Σ c_i ε_i is the paper's update."""
    g = len(signs)
    return [alpha / g * z * s for z, s in zip(normalized, signs)]


@dataclass(frozen=True)
class Update:
    """One generation's update as the run's settings make it from the raw rewards."""

    normalized: list[float]  # R̂ = normalize(R) with the run's es.normalization
    updated: bool  # any R̂_i != 0
    coefficients: list[float]  # (α / G)·R̂_i·sign_i with the run's es.alpha


@contextmanager
def _quiet_normalize():
    log = logging.getLogger("esopt.es.normalize")
    old = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(old)


def _short_list(xs: list[Any], n: int = 6) -> str:
    shown = ", ".join(f"{x:.6g}" if isinstance(x, float) else str(x) for x in xs[:n])
    return f"[{shown}{', …' if len(xs) > n else ''}]"

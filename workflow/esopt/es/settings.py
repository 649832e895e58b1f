"""One ES run's hyperparameters (`ESConfig`; `resolve_units` turns step size and σ given in
units of the weights' scale into absolute ones) and the seeds they fix: each generation's
member seeds and signs, and its task batch seed. The trainer runs them; the history
checks and replays them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from esopt.config import check_even_population
from esopt.es.rounding import check_rounding
from esopt.es.schedule import SigmaSchedule
from esopt.seeding import derive_seed


@dataclass
class ESConfig:
    population: int  # G, members per generation
    generations: int
    alpha: float  # effective step size (no 1/σ factor, as in the paper)
    sigma: SigmaSchedule
    antithetic: bool = False  # mirrored ±ε pairs (G must be even)
    normalization: str = "zscore"  # or "centered_rank"
    seed: int = 0
    update_rounding: str = "nearest"  # or "stochastic", "fp32_master" (esopt.es.rounding)
    perturbation: str = "full"  # or "lowrank" (EGGROLL, esopt.es.lowrank)
    rank: int | None = None  # of lowrank perturbations

    def __post_init__(self) -> None:
        check_rounding(self.update_rounding)
        if self.perturbation not in ("full", "lowrank"):
            raise ValueError(f"perturbation must be full or lowrank, got {self.perturbation!r}")
        if self.perturbation == "lowrank" and not self.rank:
            raise ValueError("a lowrank perturbation needs its rank")
        if self.population < 2:
            raise ValueError(f"population must be >= 2, got {self.population}")
        check_even_population(self.population, self.antithetic, "population", "antithetic sampling")
        if self.sigma.total != self.generations:
            raise ValueError(
                f"sigma schedule spans {self.sigma.total} generations, run has {self.generations}"
            )

    @classmethod
    def from_settings(cls, es: dict[str, Any], population: int, seed: int) -> ESConfig:
        """From one run's es settings, as a spec's settings() gives them (esopt.spec.sudoku.EsRun,
        esopt.spec.agents.AgentES): generations, alpha, sigma {schedule, sigma0, sigmaT (cosine
        only)}, antithetic, normalization, update_rounding."""
        s = es["sigma"]
        return cls(population=population, generations=es["generations"], alpha=es["alpha"],
                   sigma=SigmaSchedule(s["schedule"], s["sigma0"], s.get("sigmaT"), es["generations"]),
                   antithetic=es["antithetic"], normalization=es["normalization"], seed=seed,
                   update_rounding=es["update_rounding"],
                   # absent from full-rank settings and from records written before the variant existed
                   perturbation=es.get("perturbation", "full"), rank=es.get("rank"))

    def as_record(self) -> dict[str, Any]:
        """The run's es settings as its history records them (full-rank runs without the
        perturbation keys, as before the low-rank variant existed)."""
        rec = asdict(self)
        if self.perturbation == "full":
            del rec["perturbation"], rec["rank"]
        return rec


def member_seeds(cfg: ESConfig, generation: int) -> tuple[list[int], list[int]]:
    """Noise seeds and signs of one generation's members (a pure function of the run seed)."""
    if cfg.antithetic:
        half = [derive_seed("member", cfg.seed, generation, k) for k in range(cfg.population // 2)]
        return [s for s in half for _ in (0, 1)], [1, -1] * (cfg.population // 2)
    return [derive_seed("member", cfg.seed, generation, k) for k in range(cfg.population)], [1] * cfg.population


def task_seed(cfg: ESConfig, generation: int) -> int:
    """The seed of the task batch that every member of a generation is evaluated on."""
    return derive_seed("tasks", cfg.seed, generation)


def resolve_units(es: dict[str, Any], module: torch.nn.Module) -> tuple[dict[str, Any], float | None]:
    """es settings with alpha and sigma in absolute units, and the scale they were multiplied by:
    with units weight_scale, the module's mean |θ| over its floating-point parameters (taken on
    the base weights, before any update); with absolute (or no units key), as given and None."""
    if es.get("units", "absolute") == "absolute":
        return es, None
    scale = mean_abs_weight(module)
    return scaled_units(es, scale), scale


def mean_abs_weight(module: torch.nn.Module) -> float:
    """Mean |θ| over the module's floating-point parameters: the scale of es.units weight_scale."""
    params = [p.detach() for p in module.parameters() if p.is_floating_point()]
    return float(sum(p.float().abs().sum() for p in params) / sum(p.numel() for p in params))


def scaled_units(es: dict[str, Any], scale: float) -> dict[str, Any]:
    """es settings with alpha, sigma0 and sigmaT multiplied by `scale`."""
    sigma = {k: (v * scale if k in ("sigma0", "sigmaT") and v is not None else v) for k, v in es["sigma"].items()}
    return {**es, "alpha": es["alpha"] * scale, "sigma": sigma}

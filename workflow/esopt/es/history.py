"""Run history: everything needed to resume or replay an ES run from its base weights.

Only seeds, rewards and scalars are stored; weights are rebuilt by replaying each
generation's update from its seeds (the same function the run used, so bit-exact).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from esopt.io import write_json_atomic

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
        """c_i = (α / G)·R̂_i·sign_i, so that θ += Σ c_i ε_i is the paper's update."""
        g = len(self.seeds)
        return [self.alpha / g * z * s for z, s in zip(self.normalized, self.signs)]

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
    def load(cls, path: str | os.PathLike) -> "History":
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

    def replay(self, perturber, upto: int | None = None) -> None:
        """Apply the recorded updates of generations [0, upto) to the perturber's module.

        The perturber must round as the run did: Perturber(module, rounding=history.update_rounding)."""
        if perturber.rounding != self.update_rounding:
            raise ValueError(f"the run rounded its updates with {self.update_rounding!r}, "
                             f"the perturber with {perturber.rounding!r}: the replay would not match")
        for rec in self.generations[:upto]:
            if rec.updated:
                perturber.update(rec.seeds, rec.coefficients())


def weights_sha256(module: torch.nn.Module) -> str:
    """Hash of every parameter and buffer (name, dtype, shape, bytes), in name order."""
    h = hashlib.sha256()
    state = module.state_dict()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()

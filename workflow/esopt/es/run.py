"""One ES run's setup, as every ES job does it (Sudoku, the tool agents, heuristic design's
online ES, the memory probe): the base weights' hash, the perturber (in place on the model,
or inside an inference engine that holds the weights), the trainer with its history file,
and the final weights copied back and hashed. What differs between the jobs (the fitness,
the run's record, the trainer class, the history path) comes in as arguments.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

from esopt.es.history import History
from esopt.es.lowrank import make_perturber
from esopt.es.settings import ESConfig
from esopt.es.trainer import ESTrainer, Fitness
from esopt.hashing import weights_sha256


@dataclass
class ESRun:
    """The weights one ES run moves. `policy` is what plays the episodes: None (or the model
    itself) to perturb the model in place, or an engine with `perturber(rounding, revert=)`
    and `state_dict()` that runs ES inside it while the model waits on the host for the
    final weights. With hash_base the base weights' hash is taken now, before any update."""

    model: torch.nn.Module
    rounding: str  # es.update_rounding (esopt.es.rounding)
    revert: str  # es.revert (esopt.es.perturb.resolve_revert)
    policy: Any = None
    hash_base: bool = True
    perturbation: str = "full"  # es.perturbation (esopt.es.lowrank)
    rank: int | None = None
    base_weights_sha256: str | None = field(init=False, default=None)
    _perturber: Any = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        if self.hash_base:
            self.base_weights_sha256 = weights_sha256(self.model)

    @property
    def in_engine(self) -> bool:
        """Whether the engine holds the weights ES moves (vLLM); a population engine only
        copies each member's weights from the model, which ES perturbs in place."""
        return self.policy is not None and self.policy is not self.model and hasattr(self.policy, "perturber")

    @property
    def perturber(self) -> Any:
        """The run's perturber, built on first use: the engine's, or one of the model (its perturbation)."""
        if self._perturber is None:
            if self.in_engine and self.perturbation != "full":
                raise ValueError(f"es.perturbation {self.perturbation} runs on the hf or population engine, "
                                 "not inside vLLM (its workers draw full-rank noise)")
            self._perturber = (self.policy.perturber(self.rounding, revert=self.revert) if self.in_engine
                               else make_perturber(self.model, self.perturbation, self.rank, rounding=self.rounding,
                                                   revert=self.revert))
        return self._perturber

    def trainer(self, cfg: ESConfig, fitness: Fitness, history_path: str | os.PathLike | None = None,
                run_info: dict[str, Any] | None = None, trainer_cls: type[ESTrainer] = ESTrainer,
                **kwargs: Any) -> ESTrainer:
        """The ES trainer of this run (history_path: its resumable history); kwargs go to
        trainer_cls (on_generation, collective, progress, member_deadline_s, ...)."""
        if cfg.update_rounding != self.rounding:
            raise ValueError(f"the run rounds {cfg.update_rounding}, its weights {self.rounding}")
        if (cfg.perturbation, cfg.rank) != (self.perturbation, self.rank):
            raise ValueError(f"the run draws {cfg.perturbation} noise (rank {cfg.rank}), its weights {self.perturbation}")
        return trainer_cls(None if self.in_engine else self.model, cfg, fitness, history_path=history_path,
                           run_info=run_info or {}, revert=self.revert, perturber=self.perturber, **kwargs)

    def finish(self, history: History) -> str:
        """Copy an engine's final weights into the model, record their hash as the history's
        `final`, and return it."""
        if self.in_engine:
            load_weights(self.model, self.policy.state_dict())
        history.final = {"weights_sha256": weights_sha256(self.model)}
        return history.final["weights_sha256"]


def load_weights(model: torch.nn.Module, tensors: dict[str, Any]) -> None:
    """Copy tensors named as model.named_parameters() into the model (an engine's final weights)."""
    params = dict(model.named_parameters())
    if tensors.keys() != {n for n, p in params.items() if p.is_floating_point()}:
        raise RuntimeError("the engine's weights do not name the model's parameters")
    with torch.no_grad():
        for name, t in tensors.items():
            params[name].copy_(t)

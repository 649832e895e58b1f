"""σ schedules: cosine (Agentic ESOpt) and constant (vanilla ES)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SigmaSchedule:
    kind: str  # "cosine" | "constant"
    sigma0: float
    sigmaT: float | None = None  # cosine only
    total: int = 1  # number of generations; t runs 0..total-1 and T = total-1

    def __post_init__(self) -> None:
        if self.kind not in ("cosine", "constant"):
            raise ValueError(f"sigma schedule kind {self.kind!r}: expected 'cosine' or 'constant'")
        if self.kind == "cosine" and self.sigmaT is None:
            raise ValueError("cosine sigma schedule needs sigmaT (use 0 for test-time ES)")
        if self.sigma0 < 0 or (self.sigmaT or 0) < 0:
            raise ValueError(f"sigma must be >= 0, got sigma0={self.sigma0}, sigmaT={self.sigmaT}")
        if self.total < 1:
            raise ValueError(f"total generations must be >= 1, got {self.total}")

    def __call__(self, t: int) -> float:
        if not 0 <= t < self.total:
            raise ValueError(f"generation {t} outside 0..{self.total - 1}")
        if self.kind == "constant":
            return self.sigma0
        T = self.total - 1
        # Exact endpoints: float rounding of the formula can miss sigma0 at t = 0.
        if t == 0:
            return self.sigma0
        if t == T:
            return self.sigmaT
        # σ_t = σ_T + (σ_0 − σ_T)(1 + cos(π t / T)) / 2
        return self.sigmaT + (self.sigma0 - self.sigmaT) * (1 + math.cos(math.pi * t / T)) / 2

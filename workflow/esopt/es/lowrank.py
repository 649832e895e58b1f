"""Low-rank perturbations (EGGROLL, Sarkar et al. 2025): the ES variant `perturbation: lowrank`.

Member i perturbs every matrix W [m, n] by E_i = A_i B_iᵀ / √r with A_i [m, r] and B_i [n, r]
standard Gaussian, drawn from (member seed, tensor name) as the full-rank noise is; vectors
(norm weights) get full-rank noise. A forward pass can then apply a member as
x Wᵀ + σ s (x B_i) A_iᵀ / √r without a copy of W per member (esopt.agent.population), and the
update Σ_i c_i E_i, a sum of G rank-r terms, is of rank up to G·r.

It is a separate variant, never the default: the paper's method draws full-rank ε
(esopt.es.perturb.Perturber), and a run records its perturbation so replay uses the same.
`LowRankPerturber` is a Perturber with this noise: apply, revert (exact or snapshot) and the
update work on the materialized E_i as they do on ε.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from esopt.es.perturb import Perturber
from esopt.seeding import derive_seed

PERTURBATIONS = ("full", "lowrank")


def lowrank_factors(member_seed: int, name: str, shape: tuple[int, int], rank: int,
                    device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(A [m, r], B [n, r]) of one matrix for one member, fp32."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed("es-lowrank", member_seed, name))
    m, n = shape
    a = torch.randn(m, rank, generator=gen, device=device, dtype=torch.float32)
    b = torch.randn(n, rank, generator=gen, device=device, dtype=torch.float32)
    return a, b


class LowRankPerturber(Perturber):
    """A Perturber whose noise of each matrix is A Bᵀ / √rank (module docstring)."""

    def __init__(self, module: torch.nn.Module, rank: int, **kwargs):
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        super().__init__(module, **kwargs)
        self.rank = rank

    def _noise(self, seed: int, name: str, p: torch.Tensor) -> Iterator[tuple[int, int, torch.Tensor]]:
        if p.dim() != 2:
            yield from super()._noise(seed, name, p)
            return
        a, b = lowrank_factors(seed, name, tuple(p.shape), self.rank, p.device)
        eps = (a @ b.T).div_(math.sqrt(self.rank)).view(-1)
        for start in range(0, eps.numel(), self.chunk):
            stop = min(start + self.chunk, eps.numel())
            yield start, stop, eps[start:stop].clone()


def make_perturber(module: torch.nn.Module, perturbation: str = "full", rank: int | None = None,
                   **kwargs) -> Perturber:
    """The perturber of a run's es.perturbation: full-rank (the paper's) or low-rank of `rank`."""
    if perturbation == "full":
        return Perturber(module, **kwargs)
    if perturbation == "lowrank":
        return LowRankPerturber(module, rank, **kwargs)
    raise ValueError(f"es.perturbation must be one of {PERTURBATIONS}, got {perturbation!r}")

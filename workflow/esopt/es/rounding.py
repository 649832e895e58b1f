"""How the ES update's fp32 result is written to weights of a coarser dtype (es.update_rounding).

The update θ + Σ_i c_i ε_i is accumulated in fp32; at the paper's α 5e-4, G 32 its
entries are ≈ α/√G ≈ 9e-5, below half the bf16 spacing of most weights, so rounding to
nearest drops much of it every generation (all of it on weights near 1.0). Options:

* ``nearest``: round to nearest (the authors' code; no extra memory);
* ``stochastic``: round up with probability equal to the fraction of the spacing the
  value lies above its lower neighbour, so E[round(x)] = x: no update is lost on
  average, no extra memory. The uniforms come from a generator seeded with the
  generation's member seeds and the tensor's name, so replay from history.json draws them
  again bit for bit;
* ``fp32_master``: an fp32 copy of the weights, on the host (GPU memory stays at inference
  level), receives the update; the model gets the master rounded to nearest. Costs 4 bytes
  per parameter of host memory; on resume the master is rebuilt by replaying the history
  from the base weights, as the model is.

Only bf16 and fp16 parameters are rounded otherwise: fp32 ones are their own master, and
every option writes them (and other dtypes) as `nearest` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from esopt.seeding import derive_seed

ROUNDINGS = ("nearest", "stochastic", "fp32_master")
COARSE = (torch.bfloat16, torch.float16)  # the dtypes the options round differently


def check_rounding(rounding: str) -> str:
    if rounding not in ROUNDINGS:
        raise ValueError(f"update_rounding {rounding!r}: expected one of {ROUNDINGS}")
    return rounding


def rounding_seed(member_seeds: Sequence[int], name: str) -> int:
    """Seed of a tensor's rounding uniforms in one update: a function of what history.json records."""
    return derive_seed("es-round", name, *member_seeds)


def stochastic_round(x: torch.Tensor, dtype: torch.dtype, u: torch.Tensor) -> torch.Tensor:
    """x (fp32) rounded to one of its two neighbours in dtype, the far one with probability
    |x − nearest| / spacing, decided by uniforms u in [0, 1): unbiased, E[result] = x.
    x is overwritten."""
    near = x.to(dtype)
    rest = x.sub_(near)  # exact: the rounding error of a coarser format is an fp32 value
    toward = torch.where(rest > 0, float("inf"), float("-inf")).to(dtype)
    side = torch.nextafter(near, toward)  # the neighbour on x's side of near
    p = rest.div_(side.float().sub_(near))  # in [0, 1/2]; NaN at ±inf, never taken
    return torch.where(u < p, side, near)


class Fp32Master:
    """Flat fp32 host copies of the bf16 / fp16 parameters."""

    def __init__(self, params: Sequence[tuple[str, torch.Tensor]]):
        self.flat = {name: p.detach().reshape(-1).to("cpu", torch.float32, copy=True)
                     for name, p in params if p.dtype in COARSE}

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.flat.values())

    def add(self, name: str, start: int, acc: torch.Tensor) -> torch.Tensor:
        """master[start:] += acc (fp32, on the parameter's device); returns the new master chunk there."""
        part = self.flat[name][start : start + acc.numel()]
        m = part.to(acc.device)  # a view on the CPU, a copy on an accelerator
        m.add_(acc)
        part.copy_(m)  # a no-op on the CPU, where m is part
        return m

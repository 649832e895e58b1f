"""How much of an intended weight change survives rounding to the parameter dtype.

For a change δ meant for θ, the realized change is round(θ + δ) − θ. Two numbers per
parameter group say how much of δ the weights received: the cosine between realized and
intended change over the group's entries, and the fraction of entries that changed at all.
They are accumulated chunk by chunk while the noise is regenerated anyway (dot product,
squared norms, counts), so measuring costs a few element-wise passes and no buffer larger
than a noise chunk.

Groups, for any torch module (an HF causal LM in particular):

* ``embedding``: parameters of an ``nn.Embedding``, or shared with one (a tied lm_head);
* ``norm``: parameters of a module whose class or name says norm (LayerNorm, RMSNorm,
  Qwen3_5RMSNorm, ``*.input_layernorm``, ...), weights and biases;
* ``linear``: everything else — weight matrices, their biases, convolution kernels and the
  few per-head scalars of state-space layers. Biases go with the layer they belong to:
  like its weights they are trained values of any size, not gains near 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

GROUPS = ("linear", "norm", "embedding")


def _is_norm(module_name: str, module: torch.nn.Module) -> bool:
    leaf = module_name.rsplit(".", 1)[-1].lower()
    return "norm" in type(module).__name__.lower() or "norm" in leaf


def param_groups(module: torch.nn.Module) -> dict[str, str]:
    """Group of every parameter, by the name named_parameters() gives it (tied weights once)."""
    kinds: dict[int, set[str]] = {}
    for mname, m in module.named_modules(remove_duplicate=False):
        kind = "embedding" if isinstance(m, torch.nn.Embedding) else "norm" if _is_norm(mname, m) else "linear"
        for p in m.parameters(recurse=False):
            kinds.setdefault(id(p), set()).add(kind)
    out = {}
    for name, p in module.named_parameters():
        k = kinds.get(id(p), {"linear"})
        out[name] = next(g for g in ("embedding", "norm", "linear") if g in k)  # a tied lm_head is the embedding
    return out


@dataclass
class _Sums:
    dot: float = 0.0  # Σ realized·intended
    realized_sq: float = 0.0
    intended_sq: float = 0.0
    changed: int = 0
    numel: int = 0


class Fidelity:
    """Realized vs intended change, accumulated per group over chunks of one update or perturbation."""

    def __init__(self) -> None:
        self.sums: dict[str, _Sums] = {}

    @torch.no_grad()
    def add(self, group: str, old: torch.Tensor, new: torch.Tensor, intended: torch.Tensor) -> None:
        """One chunk: the weights before and after (parameter dtype) and the intended change δ (fp32)."""
        realized = new.to(torch.float32, copy=True).sub_(old).view(-1)  # in fp32; a copy: new may be the weights
        intended = intended.reshape(-1)
        s = self.sums.setdefault(group, _Sums())
        s.dot += float(torch.dot(realized, intended))
        s.realized_sq += float(torch.dot(realized, realized))
        s.intended_sq += float(torch.dot(intended, intended))
        s.changed += int(torch.count_nonzero(realized))
        s.numel += realized.numel()

    def absorb(self, other: Fidelity) -> None:
        """Add another accumulator's sums (e.g. one computed inside an inference engine's worker)."""
        for g, o in other.sums.items():
            s = self.sums.setdefault(g, _Sums())
            s.dot, s.realized_sq = s.dot + o.dot, s.realized_sq + o.realized_sq
            s.intended_sq += o.intended_sq
            s.changed, s.numel = s.changed + o.changed, s.numel + o.numel

    def summary(self) -> dict[str, dict[str, float]]:
        """{group: {cosine, changed}}; cosine is 0 where nothing changed (no step in δ's direction)."""
        out = {}
        for g in GROUPS:
            s = self.sums.get(g)
            if s is None or not s.numel:
                continue
            norm = math.sqrt(s.realized_sq * s.intended_sq)
            out[g] = {"cosine": s.dot / norm if norm > 0 else 0.0, "changed": s.changed / s.numel}
        return out

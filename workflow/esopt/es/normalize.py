"""Within-population reward normalization."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

log = logging.getLogger(__name__)

EPS = 1e-8


def normalize_rewards(rewards: Sequence[float], method: str = "zscore") -> list[float]:
    """R̂_i for the update. All-equal rewards carry no signal: zeros and a warning.

    zscore:        R̂_i = (R_i − μ) / (s + 1e-8), s the population std (ddof 0)
    centered_rank: ranks scaled to [−0.5, 0.5] (ties share their mean rank)
    """
    r = torch.tensor([float(x) for x in rewards], dtype=torch.float64)
    if r.numel() == 0:
        raise ValueError("no rewards to normalize")
    if not torch.isfinite(r).all():
        raise ValueError(f"rewards must be finite, got {list(rewards)}")
    if bool((r == r[0]).all()):
        log.warning("all %d rewards equal (%g): no update this generation", r.numel(), float(r[0]))
        return [0.0] * r.numel()
    if method == "zscore":
        z = (r - r.mean()) / (r.std(correction=0) + EPS)
    elif method == "centered_rank":
        n = r.numel()
        order = torch.argsort(r, stable=True)
        ranks = torch.empty(n, dtype=torch.float64)
        ranks[order] = torch.arange(n, dtype=torch.float64)
        for v in torch.unique(r):  # ties: mean rank
            m = r == v
            ranks[m] = ranks[m].mean()
        z = ranks / (n - 1) - 0.5
    else:
        raise ValueError(f"normalization {method!r}: expected 'zscore' or 'centered_rank'")
    return z.tolist()

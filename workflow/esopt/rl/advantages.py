"""Advantages: group-normalized returns (GRPO) and GAE over masked token timelines (PPO)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def group_advantages(returns: Sequence[float], groups: Sequence[int], eps: float = 1e-6) -> torch.Tensor:
    """(R − mean of its group) / (std of its group + eps), std with Bessel's correction
    as in TRL's GRPO; a group whose returns are all equal gets zeros (no signal)."""
    r = torch.as_tensor(returns, dtype=torch.float64)
    g = torch.as_tensor(groups)
    adv = torch.zeros_like(r)
    for key in g.unique():
        sel = g == key
        x = r[sel]
        if x.numel() < 2 or bool((x == x[0]).all()):
            continue
        adv[sel] = (x - x.mean()) / (x.std(unbiased=True) + eps)
    return adv.float()


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation along one episode's token timeline.

    Only positions with mask 1 (generated tokens) are steps of the MDP; observation
    and prompt tokens between turns are skipped, so the recursion carries from the
    last token of one reply straight to the first token of the next. The value after
    the last step is 0 (the episode has ended). Returns (advantages, returns) with
    zeros where mask is 0.
    """
    adv = torch.zeros_like(values, dtype=torch.float32)
    steps = mask.nonzero().flatten().tolist()
    next_value, next_adv = 0.0, 0.0
    for t in reversed(steps):
        v = float(values[t])
        delta = float(rewards[t]) + gamma * next_value - v
        next_adv = delta + gamma * lam * next_adv
        adv[t] = next_adv
        next_value = v
    ret = (adv + values.float()) * mask
    return adv, ret


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Zero mean, unit variance over the masked entries; zeros elsewhere."""
    m = mask.bool()
    vals = x[m]
    if vals.numel() < 2:
        return torch.zeros_like(x)
    out = (x - vals.mean()) / (vals.std(unbiased=False) + eps)
    return out * m

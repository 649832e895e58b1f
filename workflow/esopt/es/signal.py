"""Is there a signal for ES to follow? The pieces benchmarks/es_signal.py measures it with
(docs/es_core.md, Is there a signal?).

Every estimate there is an update made by the trainer's own functions (normalize_rewards,
update_coefficients) from antithetic pairs (+ε_k, −ε_k), so it is a coefficient vector a
over the pairs' noise: g = Σ_k a_k ε_k. Two such estimates are compared through the Gram
matrix Γ_kl = ε_k·ε_l of the noise, drawn as the perturber draws it: g·g' = aᵀΓa', without
ever holding a direction of the model's size.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch

from esopt.es.history import update_coefficients
from esopt.es.noise import noise_chunks
from esopt.es.normalize import normalize_rewards


def pair_coefficients(plus: Sequence[float], minus: Sequence[float], alpha: float, normalization: str) -> list[float]:
    """a_k of the trainer's update from one generation whose members are the pairs
    (+ε_k, −ε_k) with rewards plus[k], minus[k], in the trainer's order (+ then −, as
    esopt.es.settings.member_seeds): c = update_coefficients(α, normalize_rewards(R), signs),
    a_k = c_{k+} + c_{k−} (both members move along the same ε_k)."""
    rewards = [r for pair in zip(plus, minus, strict=True) for r in pair]
    c = update_coefficients(alpha, normalize_rewards(rewards, normalization), [1, -1] * len(plus))
    return [c[2 * k] + c[2 * k + 1] for k in range(len(plus))]


@torch.no_grad()
def noise_gram(perturber, seeds: Sequence[int]) -> torch.Tensor:
    """Γ_kl = ε(seed_k)·ε(seed_l) over every tensor the perturber perturbs, its noise drawn
    as the perturber draws it (esopt.es.noise, in its chunks); float64, [K, K]. Products in
    float32 per chunk, summed in float64. Memory: K noise chunks of one tensor at a time."""
    k = len(seeds)
    gram = torch.zeros(k, k, dtype=torch.float64)
    for name, p in perturber.params:
        streams = [noise_chunks(s, name, p.numel(), p.device, perturber.chunk) for s in seeds]
        for chunks in zip(*streams):
            e = torch.stack([eps for _, _, eps in chunks])
            gram += (e @ e.T).double().cpu()
            del e, chunks
    return gram


def gram_norm(a: Sequence[float], gram: torch.Tensor) -> float:
    """||Σ_k a_k ε_k|| = sqrt(aᵀΓa)."""
    v = torch.as_tensor(a, dtype=torch.float64)
    return float(v @ gram @ v) ** 0.5


def gram_cosine(a: Sequence[float], b: Sequence[float], gram: torch.Tensor) -> float | None:
    """cos(Σ a_k ε_k, Σ b_k ε_k) = aᵀΓb / (|a|_Γ |b|_Γ); None when either is the zero update."""
    u, v = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    nu, nv = float(u @ gram @ u), float(v @ gram @ v)
    if nu <= 0.0 or nv <= 0.0:
        return None
    return max(-1.0, min(1.0, float(u @ gram @ v) / (nu * nv) ** 0.5))


def generations_of(pairs: int, population: int) -> list[range]:
    """The disjoint generations of `population` members (population / 2 consecutive pairs)
    that `pairs` antithetic pairs make; a remainder short of a generation is left out."""
    half = population // 2
    return [range(j * half, (j + 1) * half) for j in range(pairs // half)]


def reward_spread(plus: Sequence[float], minus: Sequence[float], population: int) -> dict[str, float | int | None]:
    """How much the members' rewards differ on one task batch: the std (ddof 1) of all 2K
    member rewards, of the pair differences R+ − R−, the fraction of pairs with R+ ≠ R−,
    and the fraction of the disjoint generations of `population` members whose rewards are
    all equal (normalize_rewards gives zeros: no update)."""
    rewards = [r for pair in zip(plus, minus, strict=True) for r in pair]
    diffs = [p - m for p, m in zip(plus, minus)]
    gens = generations_of(len(plus), population)
    tied = [len({r for k in g for r in (plus[k], minus[k])}) == 1 for g in gens]
    return {
        "pairs": len(plus),
        "member_mean": statistics.fmean(rewards),
        "member_std": statistics.stdev(rewards) if len(rewards) > 1 else 0.0,
        "pair_diff_std": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
        "frac_pairs_unequal": sum(d != 0 for d in diffs) / len(diffs),
        "generations": len(gens),
        "frac_generations_tied": sum(tied) / len(gens) if gens else None,
    }

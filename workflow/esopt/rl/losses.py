"""Token-level losses of the RL baselines: clipped policy ratio, KL to a reference, clipped value."""

from __future__ import annotations

import torch
import torch.utils.checkpoint


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token mean: every generated token in the batch weighs the same."""
    return (x * mask).sum() / mask.sum().clamp(min=1)


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0,
                   chunk: int | None = None) -> torch.Tensor:
    """log π(token_t | tokens_<t) at each position t (0 at t = 0), logits divided by
    the sampling temperature as when the tokens were drawn. Right-padded batches.

    chunk None: one forward to the full [B, T, V] logits, cast to fp32. chunk n: the
    decoder's last hidden state, then the output head over n positions at a time, each
    chunk's fp32 logits recomputed in backward (checkpointed), so at most one [B, n, V]
    block is alive: for models whose logits are the output embedding of the last hidden
    state (Qwen3.5, Qwen3, Llama; no soft-capping)."""
    target = input_ids[:, 1:]
    if not chunk:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
        lp = _target_logprobs(logits, target, temperature)
    else:
        h = model.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, :-1]
        head = model.get_output_embeddings()
        parts = []
        for s in range(0, h.shape[1], chunk):
            args = (head, h[:, s:s + chunk], target[:, s:s + chunk], temperature)
            if torch.is_grad_enabled():
                parts.append(torch.utils.checkpoint.checkpoint(_head_logprobs, *args, use_reentrant=False))
            else:
                parts.append(_head_logprobs(*args))
        lp = torch.cat(parts, dim=1) if parts else h.new_zeros(h.shape[:2], dtype=torch.float32)
    return torch.nn.functional.pad(lp, (1, 0))


def _target_logprobs(logits: torch.Tensor, target: torch.Tensor, temperature: float) -> torch.Tensor:
    if temperature != 1.0:
        logits = logits / temperature
    # log_softmax at the target only: logit − logsumexp, without a [B, L, V] log-prob copy
    return logits.gather(-1, target.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def _head_logprobs(head, h: torch.Tensor, target: torch.Tensor, temperature: float) -> torch.Tensor:
    return _target_logprobs(head(h).float(), target, temperature)


def clipped_policy_loss(logp, old_logp, adv, mask, clip_low: float = 0.2, clip_high: float | None = None, weight=None):
    """PPO-style clipped surrogate, token mean (or the mean under `weight`, zero off
    the mask). clip_high (ε_high, DAPO's clip-higher) defaults to clip_low.
    Returns (loss, stats)."""
    clip_high = clip_low if clip_high is None else clip_high
    log_ratio = (logp - old_logp) * mask
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    loss = masked_mean(-torch.minimum(unclipped, clipped), mask if weight is None else weight)
    with torch.no_grad():
        stats = {
            "clip_frac": float(masked_mean((clipped < unclipped).float(), mask)),
            "approx_kl": float(masked_mean(0.5 * log_ratio ** 2, mask)),
            "ratio_mean": float(masked_mean(ratio, mask)),
        }
    return loss, stats


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(π ‖ π_ref) estimate exp(r) − r − 1 with r = log π_ref − log π (≥ 0, unbiased)."""
    r = ref_logp - logp
    return torch.exp(r) - r - 1


def clipped_value_loss(values, old_values, returns, mask, clip: float | None = 0.2) -> torch.Tensor:
    """½ max((V − R)², (clip(V, V_old ± c) − R)²), token mean."""
    err = (values - returns) ** 2
    if clip is not None:
        v_clip = old_values + torch.clamp(values - old_values, -clip, clip)
        err = torch.maximum(err, (v_clip - returns) ** 2)
    return 0.5 * masked_mean(err, mask)

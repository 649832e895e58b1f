"""The PPO critic: a transformer backbone with a scalar value head."""

from __future__ import annotations

import torch


class ValueModel(torch.nn.Module):
    """V(prefix) at every position. `separate`: its own copy of the base model's
    backbone (the default; the policy's gradients never reach it). `shared`: the
    policy's own backbone, so only the head is new."""

    def __init__(self, backbone: torch.nn.Module, hidden_size: int):
        super().__init__()
        self.backbone = backbone
        self.head = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)  # V ≡ 0 at the start: no spurious advantages
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Values aligned like token_logprobs: position t holds V of the prefix before
        token t (from the hidden state at t − 1); 0 at t = 0."""
        h = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        v = self.head(h[:, :-1].to(self.head.weight.dtype)).squeeze(-1)
        return torch.nn.functional.pad(v, (1, 0))


def build_critic(policy: torch.nn.Module, model_dir, mode: str = "separate") -> ValueModel:
    from transformers import AutoModelForCausalLM

    hidden = policy.config.get_text_config().hidden_size
    if mode == "shared":
        return ValueModel(policy.base_model, hidden)
    if mode != "separate":
        raise ValueError(f"rl.ppo.critic {mode!r}: expected 'separate' or 'shared'")
    dtype = next(policy.parameters()).dtype
    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    return ValueModel(lm.base_model, hidden).to(dtype)

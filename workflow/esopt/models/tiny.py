"""The tiny Qwen3.5-architecture causal LM that stands in for Qwen3.5 on a CPU."""

from __future__ import annotations

from typing import Any

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig


def tiny_config(spec: dict[str, Any], tokenizer) -> Qwen3_5TextConfig:
    """Qwen3_5TextConfig from the config's model.tiny block; vocabulary from the tokenizer."""
    layer_types = list(spec["layer_types"])
    return Qwen3_5TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=len(layer_types),
        layer_types=layer_types,
        num_attention_heads=spec["num_attention_heads"],
        num_key_value_heads=spec["num_key_value_heads"],
        head_dim=spec["head_dim"],
        linear_num_key_heads=spec.get("linear_num_key_heads", 2),
        linear_num_value_heads=spec.get("linear_num_value_heads", 2),
        linear_key_head_dim=spec.get("linear_key_head_dim", 32),
        linear_value_head_dim=spec.get("linear_value_head_dim", 32),
        max_position_embeddings=spec.get("max_position_embeddings", 2048),
        # Qwen3.5 rotates a quarter of each head; a tiny head has few dims to spare.
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": spec.get("partial_rotary_factor", 0.25)},
        tie_word_embeddings=spec.get("tie_word_embeddings", True),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


def build_tiny_model(spec: dict[str, Any], tokenizer, seed: int) -> Qwen3_5ForCausalLM:
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(tiny_config(spec, tokenizer))
    return model.to(getattr(torch, spec.get("dtype", "float32")))

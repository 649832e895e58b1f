"""The tiny causal LM that stands in for Qwen3.5 on a CPU.

Qwen3.5's architecture by default. `architecture: qwen3` builds a Qwen3ForCausalLM of the
same shape instead (full attention only): vLLM's Qwen3.5 module needs torchvision, which
the CPU build of vLLM cannot load, so the vLLM engine is exercised on CPU with Qwen3.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    PretrainedConfig,
    PreTrainedModel,
    Qwen3_5ForCausalLM,
    Qwen3_5TextConfig,
    Qwen3Config,
    Qwen3ForCausalLM,
)


def tiny_config(spec: dict[str, Any], tokenizer) -> PretrainedConfig:
    """The model config from the config's model.tiny block; vocabulary from the tokenizer."""
    layer_types = list(spec["layer_types"])
    if spec.get("architecture", "qwen3_5") == "qwen3":
        if set(layer_types) != {"full_attention"}:
            raise ValueError(f"model.tiny.architecture qwen3 has full attention only, got layer_types {layer_types}")
        return Qwen3Config(
            vocab_size=len(tokenizer),
            hidden_size=spec["hidden_size"],
            intermediate_size=spec["intermediate_size"],
            num_hidden_layers=len(layer_types),
            num_attention_heads=spec["num_attention_heads"],
            num_key_value_heads=spec["num_key_value_heads"],
            head_dim=spec["head_dim"],
            max_position_embeddings=spec.get("max_position_embeddings", 2048),
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            tie_word_embeddings=spec.get("tie_word_embeddings", True),
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=None,
        )
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


def build_tiny_model(spec: dict[str, Any], tokenizer, seed: int) -> PreTrainedModel:
    torch.manual_seed(seed)
    config = tiny_config(spec, tokenizer)
    model = (Qwen3ForCausalLM if isinstance(config, Qwen3Config) else Qwen3_5ForCausalLM)(config)
    return model.to(getattr(torch, spec.get("dtype", "float32")))

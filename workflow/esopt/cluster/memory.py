"""Memory per GPU of ES, Agentic GRPO and Agentic PPO for the Qwen3.5 sizes, before a run.

The parameter count is exact: the text model (Qwen3_5ForCausalLM, what esopt trains and
perturbs) is built from its config on the meta device (no weights, no download) and its
parameters counted, by kind: decoder layers, embeddings, output head. The rest is
arithmetic, in bytes per GPU (GiB in the table):

- ES (inference; each rank holds a whole replica, so the ranks do not divide it):
  bf16 weights 2N + the cache of the sequences in flight: per token, 2 x KV heads x head
  dim x 2 bytes for each full-attention layer; per sequence, the Gated DeltaNet state
  (value heads x key dim x value dim, fp32) and its conv state for each linear-attention
  layer.
- GRPO over R ranks (FSDP2, esopt.rl.sharding): fp32 master weights, fp32 gradients and
  AdamW's two fp32 moments, all sharded: 16N / R; the frozen reference when rl.kl_coef > 0:
  4N / R. On top, the larger of two phases:
  rollouts: all parameters gathered (4N) and the fp32 cache of the sequences one rank
  generates at once (its share of the step's episodes, at most rl.batch_size);
  training: two layers gathered (the one running and the next), the activations of a
  micro-batch (rl.micro_batch sequences of rl.max_total_tokens, the cap: an upper bound):
  with rl.gradient_checkpointing each layer's input (H fp32 per token and layer) plus one
  layer's working set (~ (8H + 3I) fp32 per token), without it every layer's working set;
  and the output head's fp32 logits: rl.logits_chunk positions at a time (logits and their
  gradient, 2 x V fp32 per position), or all positions (3 x V: the cast, the logits and the
  gradient).
- PPO: the same plus the separate critic (its backbone without the output head: 16N' / R
  and its own activations; no logits).

Left out: the CUDA context and allocator fragmentation (a few GiB), attention scores (SDPA
/ flash attention keep none of size T^2), the caching allocator's reuse between phases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from esopt.spec.sudoku import EsRun, RlRun

GIB = 2**30

# The text configs of the paper's Qwen3.5 sizes (Qwen3_5TextConfig keys; docs/rl_baselines.md
# gives the source of each value and says which could not be found).
QWEN35 = {
    "Qwen3.5-4B": dict(hidden_size=2560, num_hidden_layers=32, intermediate_size=9216, num_attention_heads=16,
                       num_key_value_heads=4, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=32,
                       linear_key_head_dim=128, linear_value_head_dim=128, vocab_size=248320,
                       tie_word_embeddings=True),
    "Qwen3.5-9B": dict(hidden_size=4096, num_hidden_layers=32, intermediate_size=12288, num_attention_heads=16,
                       num_key_value_heads=4, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=32,
                       linear_key_head_dim=128, linear_value_head_dim=128, vocab_size=248320,
                       tie_word_embeddings=False),
    "Qwen3.5-27B": dict(hidden_size=5120, num_hidden_layers=64, intermediate_size=17408, num_attention_heads=24,
                        num_key_value_heads=4, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=48,
                        linear_key_head_dim=128, linear_value_head_dim=128, vocab_size=248320,
                        tie_word_embeddings=False),
}
# values not found in a published config of the model itself: the assumption made
ASSUMED = {
    "Qwen3.5-4B": "tie_word_embeddings true (not found; with it 2N bytes = 8.41 GB, the paper's ESOpt memory)",
    "Qwen3.5-27B": "linear_num_value_heads 48 (not found in a Qwen3.5-27B config.json; Modular MAX's Qwen3.5 default)",
}


@dataclass(frozen=True)
class Shape:
    """What the arithmetic needs of a model: parameter counts (exact, from the meta device) and sizes."""

    name: str
    params: int  # N: every parameter of the text model
    head_params: int  # the output head's own parameters (0 when tied to the embeddings)
    embed_params: int
    layers: int
    full_layers: int  # full-attention layers (the others are Gated DeltaNet)
    hidden: int
    intermediate: int
    vocab: int
    kv_heads: int
    head_dim: int
    lin_state: int  # fp32 elements of one linear-attention layer's recurrent + conv state, per sequence


def shape(name: str, config: Any) -> Shape:
    """Build the text model of `config` (a Qwen3_5TextConfig or its dict) on the meta device and count."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    cfg = config if isinstance(config, Qwen3_5TextConfig) else Qwen3_5TextConfig(**config)
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(cfg)
    params = sum(p.numel() for p in model.parameters())  # a tied weight is one parameter
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    types = list(cfg.layer_types)
    conv_dim = (2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim
                + cfg.linear_num_value_heads * cfg.linear_value_head_dim)
    lin_state = (cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim
                 + conv_dim * cfg.linear_conv_kernel_dim)
    return Shape(name, params, 0 if head is embed else head.numel(), embed.numel(), cfg.num_hidden_layers,
                 types.count("full_attention"), cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size,
                 cfg.num_key_value_heads, cfg.head_dim, lin_state)


@dataclass(frozen=True)
class Settings:
    """The run settings the estimate depends on (from a config's specs: `settings_from_specs`)."""

    ranks: int = 1  # RL ranks (FSDP shards)
    es_sequences: int = 32  # ES sequences in flight per replica
    batch_size: int = 256  # RL sequences per generate call (per rank)
    episodes: tuple[int, int] = (256, 256)  # GRPO, PPO episodes per step (over all ranks)
    tokens: int = 4096  # tokens per sequence (the cap)
    micro_batch: int = 4
    gradient_checkpointing: bool = True
    logits_chunk: int | None = 1024
    kl: bool = True


def settings_from_specs(es: EsRun, rl: RlRun | None, tokens: int | None = None) -> Settings:
    """The run settings of a config's specs; `tokens` replaces rl.max_total_tokens as the
    sequence length. Without an rl block the RL rows are estimated at 256 episodes per step,
    4096 tokens, micro-batches of 64, no gradient checkpointing, logits chunks or reference."""
    if rl is None:
        return Settings(ranks=1, es_sequences=es.tasks_per_member, batch_size=256, episodes=(256, 256),
                        tokens=tokens or 4096, micro_batch=64, gradient_checkpointing=False, logits_chunk=None, kl=False)
    return Settings(ranks=rl.ranks, es_sequences=es.tasks_per_member, batch_size=rl.batch_size,
                    episodes=(rl.grpo.tasks_per_step * rl.grpo.group_size, rl.ppo.tasks_per_step),
                    tokens=tokens or rl.max_total_tokens, micro_batch=rl.micro_batch,
                    gradient_checkpointing=rl.gradient_checkpointing, logits_chunk=rl.logits_chunk, kl=rl.kl_coef > 0)


def cache_bytes(m: Shape, sequences: int, tokens: int, elem: int) -> float:
    """KV cache of the full-attention layers plus the linear-attention layers' fixed state."""
    kv = m.full_layers * 2 * m.kv_heads * m.head_dim * elem * tokens
    state = (m.layers - m.full_layers) * m.lin_state * 4
    return sequences * (kv + state)


def activation_bytes(m: Shape, s: Settings, logits: bool = True) -> float:
    """One micro-batch's activations in fp32 and, for the policy, its output-head logits."""
    tok = s.micro_batch * s.tokens
    per_layer = (8 * m.hidden + 3 * m.intermediate) * 4 * tok
    act = (m.layers * m.hidden * 4 * tok + per_layer) if s.gradient_checkpointing else m.layers * per_layer
    if logits:
        act += (2 * s.micro_batch * s.logits_chunk * m.vocab * 4) if s.logits_chunk else 3 * tok * m.vocab * 4
    return act


def estimate(m: Shape, s: Settings) -> dict[str, dict[str, float]]:
    """Bytes per GPU by method (es, grpo, ppo), each {total, and its parts}."""
    n, r = m.params, s.ranks
    layer_params = (n - m.embed_params - m.head_params) / m.layers
    es = {"weights_bf16": 2 * n, "cache": cache_bytes(m, s.es_sequences, s.tokens, 2)}
    out = {"es": es}
    critic_n = n - m.head_params - (m.embed_params if m.head_params == 0 else 0) + m.hidden + 1
    for algo, episodes in zip(("grpo", "ppo"), s.episodes):
        state = {"policy_state_sharded": 16 * n / r, "reference_sharded": 4 * n / r if s.kl else 0.0}
        if algo == "ppo":
            state["critic_state_sharded"] = 16 * critic_n / r
        rollout = 4 * n + cache_bytes(m, min(s.batch_size, -(-episodes // r)), s.tokens, 4)
        train = 2 * 4 * layer_params * (2 if algo == "ppo" else 1) + activation_bytes(m, s)
        if algo == "ppo":
            train += activation_bytes(m, s, logits=False)
        out[algo] = {**state, "rollout_phase": rollout, "train_phase": train, "phase_peak": max(rollout, train)}
    for v in out.values():
        v["total"] = sum(x for k, x in v.items() if k not in ("rollout_phase", "train_phase"))
    return out


def table(shapes: list[Shape], s: Settings) -> str:
    """The per-GPU estimate as text: one row per model and method, in GiB."""
    head = f"{'model':12s} {'params':>7s} {'method':6s} {'GiB/GPU':>8s}  parts (GiB)"
    lines = [head, "-" * 96]
    for m in shapes:
        for algo, parts in estimate(m, s).items():
            detail = ", ".join(f"{k} {v / GIB:.1f}" for k, v in parts.items() if k != "total" and v)
            lines.append(f"{m.name:12s} {m.params / 1e9:6.2f}B {algo:6s} {parts['total'] / GIB:8.1f}  {detail}")
    ck = "on" if s.gradient_checkpointing else "off"
    lines.append(f"settings: {s.tokens} tokens per sequence; ES {s.es_sequences} sequences per replica; GRPO/PPO "
                 f"sharded over {s.ranks} rank(s), {s.episodes[0]}/{s.episodes[1]} episodes a step, at most "
                 f"{s.batch_size} per generate call, micro-batch {s.micro_batch}, gradient checkpointing {ck}, logits "
                 f"{f'in chunks of {s.logits_chunk}' if s.logits_chunk else 'all at once'}, "
                 f"reference {'on' if s.kl else 'off'}. Not counted: CUDA context, fragmentation.")
    for name, what in ASSUMED.items():
        if any(m.name == name for m in shapes):
            lines.append(f"assumed for {name}: {what}")
    return "\n".join(lines)


def qwen35_table(es: EsRun, rl: RlRun | None, tokens: int | None = None) -> str:
    """`table` for Qwen3.5-4B/9B/27B under a config's ES and RL settings (esopt preflight
    prints it), at rl.max_total_tokens per sequence (the cap: an upper bound) or `tokens`."""
    return table([shape(name, c) for name, c in QWEN35.items()], settings_from_specs(es, rl, tokens))

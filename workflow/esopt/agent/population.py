"""Population-batched decoding for small models: every ES member's episodes in one forward.

Today's ES path (esopt.agent.engine.HFEngine) perturbs the model in place and runs one
member's episodes at a time through HF generate. For a model of a few million parameters
that is mostly per-call overhead. `PopulationEngine` keeps a copy of every member's weights
stacked along a leading member axis ([P, ...] per parameter, filled by `capture(slot)` from
the model as the ES perturber leaves it) and runs the decoder itself, with every linear
layer as one batched matmul over the members: rows of member p meet only member p's
weights. Called without `members`, it decodes with the model's own weights (a stack of one).

The forward is Qwen3.5's decoder (full-attention layers; Gated DeltaNet layers are refused),
written out so that the member axis can run through it: zero-centred RMSNorm, gated query
projection, q/k norms, partial rotary embedding, grouped-query attention, SwiGLU MLP.
It matches transformers' forward up to rounding (tests/test_population_engine.py).

Bit-identity by construction. Each row's numbers never depend on which other rows share
the call: prompts are right-aligned to position 0 (padding follows them), the KV cache has
a fixed length `context` for every call (so every attention reduction runs over the same
keys, masked ones contributing exact zeros), every member has at least MIN_ROWS rows (empty
ones padded), and batched matmuls compute each member's slice as its own matmul. So a member's replies are the same, bit for bit, whether it is
decoded alone or with fifteen others (the test checks greedy and sampled decoding).

Sampling noise is per request, as in vLLM (esopt.agent.engine): the reply to request `key`
under `seed` draws Gumbel noise from a counter-based hash of (derive_seed(*seed, "request",
key), step, token), so its noise depends on its episode, never on the batch. ES members
playing the same episodes draw the same noise (common random numbers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from esopt.agent.engine import Completion, Sampling, SeedKey, count, stop_token_ids
from esopt.es.lowrank import lowrank_factors
from esopt.es.noise import noise_chunks
from esopt.seeding import derive_seed

SUPPORTED = ("qwen3_5_text",)
# Rows per member in every call, at least: CPU BLAS (measured: MKL/oneDNN through torch 2.13
# on AVX2, float32) computes matmuls of fewer than 4 rows with other kernels, whose sums
# round differently; padding keeps every member's rows on the same kernels in every call.
MIN_ROWS = 8


def _signed(c: int) -> int:
    return c - (1 << 64) if c >= 1 << 63 else c


_MIX1, _MIX2 = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (torch shifts signed integers arithmetically)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def uniform_noise(row_seeds: torch.Tensor, step: int, vocab: int) -> torch.Tensor:
    """U(0, 1) in float64, [rows, vocab]: SplitMix64's finalizer over (row seed, step, token),
    so a row's noise is a function of its seed alone. int64 products wrap modulo 2^64."""
    offset = _signed(((step + 1) * 0x9E3779B97F4A7C15) % (1 << 64))
    x = row_seeds[:, None] + offset + torch.arange(vocab, dtype=torch.int64)[None, :] * _MIX2
    x = (x ^ _shr(x, 30)) * _MIX1
    x = (x ^ _shr(x, 27)) * _MIX2
    x = x ^ _shr(x, 31)
    return (_shr(x, 11).double() + 0.5) / float(1 << 53)


def filter_logits(scores: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k, then top-p (nucleus), as transformers' warpers define them: ties at the k-th
    score stay; the smallest set of tokens whose probability reaches top_p stays (at least one)."""
    if 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False, dim=-1)
        cum = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        drop = cum <= (1 - top_p)
        drop[..., -1] = False
        scores = scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return scores


def common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens every prompt starts with (the system prompt and chat markup), leaving each prompt
    at least one token of its own; 0 below MIN_ROWS tokens, where a matmul of so few rows
    would run on other kernels (MIN_ROWS)."""
    first, shortest = prompts[0], min(len(p) for p in prompts)
    n = 0
    while n < shortest - 1 and all(p[n] == first[n] for p in prompts):
        n += 1
    return n if n >= MIN_ROWS else 0


class LowRank(NamedTuple):
    """A matrix as the low-rank variant's members see it: base [m, n] shared by all, and
    member p's perturbation a[p] b[p]ᵀ (a [P, m, r] carries σ·sign/√r; b [P, n, r])."""

    base: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor


class PopulationEngine:
    """An Engine over stacked member weights (see the module docstring).

    slots: how many members' weights it holds; context: the KV cache's length, the most
    tokens (prompt + reply) one request may reach, fixed so that replies do not depend on
    the batch. The model keeps the base weights; `capture(slot)` copies them as they are now.

    With `rank` (the low-rank ES variant, esopt.es.lowrank) members are never copied:
    `capture_lowrank(slot, seed, scale)` stores member slot's factors of every matrix (and
    its perturbed norm vectors), and each linear layer computes x Wᵀ + (x b) aᵀ, EGGROLL's
    forward. That equals the materialized member up to rounding, not bit for bit.
    """

    name = "population"

    def __init__(self, model: torch.nn.Module, tokenizer, slots: int, context: int = 256, rank: int | None = None):
        cfg = model.config
        if cfg.model_type not in SUPPORTED:
            raise ValueError(f"the population engine runs {SUPPORTED} models, not {cfg.model_type!r}")
        if any(t != "full_attention" for t in cfg.layer_types):
            raise ValueError("the population engine runs full-attention layers only; "
                             f"this model has layer_types {cfg.layer_types}")
        if getattr(cfg, "attention_bias", False):
            raise ValueError("the population engine has no attention biases")
        self.model, self.tokenizer, self.slots, self.context = model, tokenizer, slots, context
        self.stop_ids = stop_token_ids(tokenizer, getattr(getattr(model, "generation_config", None), "eos_token_id", None))
        self.params = dict(model.named_parameters())  # tied weights appear once
        self.tied = model.lm_head.weight is model.model.embed_tokens.weight
        self.rank = rank
        self.stack = {n: torch.empty((slots, *p.shape), dtype=p.dtype) for n, p in self.params.items()
                      if rank is None or p.dim() != 2}
        self.factors = {n: (torch.empty((slots, p.shape[0], rank), dtype=p.dtype),
                            torch.empty((slots, p.shape[1], rank), dtype=p.dtype))
                        for n, p in self.params.items() if rank is not None and p.dim() == 2}
        self.captured: set[int] = set()
        self.peak_cache_bytes = 0  # the largest KV cache of a call so far
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.eps, self.layers = cfg.rms_norm_eps, cfg.num_hidden_layers
        rope = model.model.rotary_emb
        self.inv_freq, self.rope_scaling = rope.inv_freq.float().clone(), float(rope.attention_scaling)

    # ---- weights

    @torch.no_grad()
    def capture(self, slot: int) -> None:
        """Member `slot`'s weights are the model's as they are now (the perturber's θ + σεs)."""
        if self.rank is not None:
            raise RuntimeError("a low-rank engine captures members' factors (capture_lowrank), not their weights")
        for n, p in self.params.items():
            self.stack[n][slot].copy_(p)
        self.captured.add(slot)

    @torch.no_grad()
    def capture_lowrank(self, slot: int, seed: int, scale: float) -> None:
        """Member `slot` is the model's weights plus scale·E(seed), E the low-rank variant's
        noise (esopt.es.lowrank.LowRankPerturber draws the same): factors of the matrices,
        the vectors perturbed as the perturber writes them (fp32 sum, rounded once)."""
        for n, p in self.params.items():
            if p.dim() == 2:
                a, b = lowrank_factors(seed, n, tuple(p.shape), self.rank)
                self.factors[n][0][slot].copy_(a.mul_(scale / math.sqrt(self.rank)))
                self.factors[n][1][slot].copy_(b)
            else:
                eps = torch.cat([e for _, _, e in noise_chunks(seed, n, p.numel(), p.device)]).view(p.shape)
                self.stack[n][slot].copy_(eps.mul_(scale).add_(p.float()))
        self.captured.add(slot)

    def _weights(self, slots: list[int] | None) -> dict[str, torch.Tensor | LowRank]:
        if slots is None:  # the model's own weights, as a stack of one (views, no copy)
            return {n: p.detach().unsqueeze(0) for n, p in self.params.items()}
        missing = set(slots) - self.captured
        if missing:
            raise RuntimeError(f"member slots {sorted(missing)} hold no captured weights")
        every = slots == list(range(self.slots))
        idx = torch.tensor(slots)
        w: dict[str, torch.Tensor | LowRank] = {n: s if every else s.index_select(0, idx) for n, s in self.stack.items()}
        for n, (a, b) in self.factors.items():
            w[n] = LowRank(self.params[n].detach(), a if every else a.index_select(0, idx),
                           b if every else b.index_select(0, idx))
        return w

    # ---- the decoder

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Qwen3.5's zero-centred RMSNorm in float32; w [P, d] broadcast over x's middle axes."""
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        w = w.view(w.shape[0], *([1] * (x.dim() - 2)), w.shape[-1])
        return (xf * (1.0 + w.float())).type_as(x)

    @staticmethod
    def _linear(x: torch.Tensor, w: torch.Tensor | LowRank) -> torch.Tensor:
        """x [P, ..., d_in] by member p's w[p] [d_out, d_in]: one batched matmul (low rank:
        the shared base for all rows, plus each member's (x b) aᵀ)."""
        shape = x.shape
        flat = x.reshape(shape[0], -1, shape[-1])
        if isinstance(w, LowRank):
            y = torch.bmm(torch.bmm(flat, w.b), w.a.transpose(1, 2)).add_(F.linear(flat, w.base))
            return y.view(*shape[:-1], w.base.shape[0])
        y = torch.bmm(flat, w.transpose(1, 2))
        return y.view(*shape[:-1], w.shape[1])

    @staticmethod
    def _embed(w: torch.Tensor | LowRank, ids: torch.Tensor) -> torch.Tensor:
        """Rows ids [P, M, T] of member p's embedding."""
        P = ids.shape[0]
        if isinstance(w, LowRank):
            rows = w.a[torch.arange(P)[:, None, None], ids]  # [P, M, T, r]
            delta = torch.bmm(rows.reshape(P, -1, rows.shape[-1]), w.b.transpose(1, 2)).view(*ids.shape, -1)
            return w.base[ids] + delta
        return w[torch.arange(P)[:, None, None], ids]

    def _rotary(self, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = pos[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.rope_scaling).to(dtype), (emb.sin() * self.rope_scaling).to(dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        d = cos.shape[-1]
        rot, rest = x[..., :d], x[..., d:]
        half = rot.shape[-1] // 2
        rotated = torch.cat((-rot[..., half:], rot[..., :half]), dim=-1)
        return torch.cat(((rot * cos) + (rotated * sin), rest), dim=-1)

    def _forward(self, w: dict[str, torch.Tensor], ids: torch.Tensor, pos: torch.Tensor,
                 cache: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Hidden states [P, M, T, d] for tokens ids [P, M, T] at positions pos [P, M, T];
        writes their keys and values into the cache at those positions."""
        P, M, T = ids.shape
        H, KV, hd = self.heads, self.kv_heads, self.head_dim
        G = H // KV
        h = self._embed(w["model.embed_tokens.weight"], ids)
        cos, sin = self._rotary(pos, h.dtype)
        cos, sin = cos[:, :, None], sin[:, :, None]  # [P, M, 1, T, rot]: broadcast over heads
        keys = torch.arange(self.context)
        mask = (keys[None, None, None, :] > pos[..., None])[:, :, None, None]  # [P, M, 1, 1, T, C]: True where masked
        index = pos[:, :, None, :, None].expand(P, M, KV, T, hd)
        for i in range(self.layers):
            p = f"model.layers.{i}."
            x = self._rms(h, w[p + "input_layernorm.weight"])
            q, gate = self._linear(x, w[p + "self_attn.q_proj.weight"]).view(P, M, T, H, 2 * hd).chunk(2, dim=-1)
            gate = gate.reshape(P, M, T, H * hd)
            q = self._rms(q, w[p + "self_attn.q_norm.weight"]).transpose(2, 3)  # [P, M, H, T, hd]
            k = self._rms(self._linear(x, w[p + "self_attn.k_proj.weight"]).view(P, M, T, KV, hd),
                          w[p + "self_attn.k_norm.weight"]).transpose(2, 3)
            v = self._linear(x, w[p + "self_attn.v_proj.weight"]).view(P, M, T, KV, hd).transpose(2, 3)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            kc, vc = cache[i]
            kc.scatter_(3, index, k)
            vc.scatter_(3, index, v)
            # query head j reads key head j // G (transformers' repeat_kv)
            scores = torch.matmul((q * hd ** -0.5).reshape(P, M, KV, G * T, hd), kc.transpose(-1, -2))
            scores = scores.view(P, M, KV, G, T, self.context).masked_fill(mask, float("-inf"))
            probs = scores.softmax(dim=-1, dtype=torch.float32).to(q.dtype).view(P, M, KV, G * T, self.context)
            a = torch.matmul(probs, vc).view(P, M, KV, G, T, hd).permute(0, 1, 4, 2, 3, 5).reshape(P, M, T, H * hd)
            h = h + self._linear(a * torch.sigmoid(gate), w[p + "self_attn.o_proj.weight"])
            x = self._rms(h, w[p + "post_attention_layernorm.weight"])
            mlp = F.silu(self._linear(x, w[p + "mlp.gate_proj.weight"])) * self._linear(x, w[p + "mlp.up_proj.weight"])
            h = h + self._linear(mlp, w[p + "mlp.down_proj.weight"])
        return self._rms(h, w["model.norm.weight"])

    def _logits(self, w: dict[str, torch.Tensor], h: torch.Tensor) -> torch.Tensor:
        head = w["model.embed_tokens.weight"] if self.tied else w["lm_head.weight"]
        return self._linear(h, head).float()

    # ---- the Engine interface

    def close(self) -> None:
        """Nothing to release (the weights live in this process); for the engines' common interface."""
        self.stack, self.captured = {}, set()

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], sampling: Sampling, seed: SeedKey, *,
                 keys: Sequence[int] | None = None, members: Sequence[int] | None = None, logprobs: bool = False,
                 counters: dict[str, int] | None = None) -> list[Completion]:
        """One completion per prompt, in order. members[r]: the slot whose weights answer
        prompt r (None: the model's own weights for every prompt)."""
        if not prompts:
            return []
        keys = list(range(len(prompts))) if keys is None else list(keys)
        slots = sorted(set(members)) if members is not None else None
        groups = ([[r for r, m in enumerate(members) if m == s] for s in slots] if members is not None
                  else [list(range(len(prompts)))])
        P, M = len(groups), max(MIN_ROWS, *(len(g) for g in groups))
        longest = max(len(p) for p in prompts)
        if longest + sampling.max_new_tokens > self.context:
            raise ValueError(f"a prompt of {longest} tokens plus max_new_tokens {sampling.max_new_tokens} exceeds "
                             f"the population engine's context of {self.context} tokens (engine.population.context)")
        w = self._weights(slots)
        dtype = self.params["model.embed_tokens.weight"].dtype
        pad = self.tokenizer.pad_token_id
        shared = common_prefix(prompts)
        ids = torch.full((P, M, longest), pad, dtype=torch.long)
        lengths = torch.full((P, M), shared + 1, dtype=torch.long)  # empty rows: pad tokens, never read
        row_seed = torch.zeros((P, M), dtype=torch.int64)
        for g, rows in enumerate(groups):
            for j, r in enumerate(rows):
                ids[g, j, :len(prompts[r])] = torch.tensor(list(prompts[r]), dtype=torch.long)
                lengths[g, j] = len(prompts[r])
                row_seed[g, j] = derive_seed(*seed, "request", keys[r])
        cache = [tuple(torch.zeros((P, M, self.kv_heads, self.context, self.head_dim), dtype=dtype) for _ in range(2))
                 for _ in range(self.layers)]
        self.peak_cache_bytes = max(self.peak_cache_bytes, sum(2 * kc.numel() * kc.element_size() for kc, _ in cache))
        pos = torch.arange(longest).expand(P, M, longest)
        if shared:  # the prefix every prompt shares, once per member, its keys and values copied to every row
            prefix = [tuple(torch.zeros((P, 1, self.kv_heads, self.context, self.head_dim), dtype=dtype)
                            for _ in range(2)) for _ in range(self.layers)]
            self._forward(w, ids[:, :1, :shared], pos[:, :1, :shared], prefix)
            for (kc, vc), (kp, vp) in zip(cache, prefix):
                kc.copy_(kp.expand_as(kc))
                vc.copy_(vp.expand_as(vc))
        h = self._forward(w, ids[:, :, shared:], pos[:, :, shared:], cache)
        last = (lengths - 1 - shared)[:, :, None, None].expand(P, M, 1, h.shape[-1])
        logits = self._logits(w, h.gather(2, last).squeeze(2))  # [P, M, V]
        stops = torch.tensor(self.stop_ids or [-1])
        out = torch.full((P, M, sampling.max_new_tokens), pad, dtype=torch.long)
        lps = torch.zeros((P, M, sampling.max_new_tokens))
        finished = torch.zeros((P, M), dtype=torch.bool)
        seen = torch.zeros_like(logits, dtype=torch.bool)  # tokens already in the reply (presence penalty)
        for step in range(sampling.max_new_tokens):
            token = self._next(logits, seen, sampling, row_seed, step)
            if logprobs:
                lps[:, :, step] = (logits / sampling.logprob_temperature).log_softmax(-1).gather(
                    -1, token[..., None]).squeeze(-1)
            out[:, :, step] = torch.where(finished, pad, token)
            seen.scatter_(-1, token[..., None], True)
            finished |= torch.isin(token, stops)
            if bool(finished.all()) or step + 1 == sampling.max_new_tokens:
                break
            p = (lengths + step)[..., None]
            h = self._forward(w, token[..., None], p, cache)
            logits = self._logits(w, h[:, :, 0])
        done: list[Completion] = [None] * len(prompts)  # type: ignore[list-item]
        for g, rows in enumerate(groups):
            for j, r in enumerate(rows):
                gen = []
                for t in out[g, j].tolist()[: step + 1]:
                    gen.append(t)
                    if t in self.stop_ids:
                        break
                lp = lps[g, j, : len(gen)].tolist() if logprobs else None
                done[r] = Completion(gen, self.tokenizer.decode(gen, skip_special_tokens=True), lp)
        count(counters, 1, sum(len(p) for p in prompts), sum(len(c.token_ids) for c in done))
        return done

    @staticmethod
    def _next(logits: torch.Tensor, seen: torch.Tensor, sampling: Sampling, row_seed: torch.Tensor,
              step: int) -> torch.Tensor:
        """Each row's next token: greedy, or Gumbel-max over the filtered scores with the row's noise."""
        scores = logits - sampling.presence_penalty * seen.float() if sampling.presence_penalty else logits
        if not sampling.do_sample:
            return scores.argmax(-1)
        scores = filter_logits(scores / sampling.temperature, sampling.top_k, sampling.top_p)
        P, M, V = scores.shape
        u = uniform_noise(row_seed.reshape(-1), step, V).view(P, M, V)
        gumbel = (-torch.log(-torch.log(u))).float()
        return (scores + gumbel).argmax(-1)

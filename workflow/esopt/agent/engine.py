"""Inference engines: continue a batch of token prompts; get token ids, text and log-probs back.

Rollouts (esopt.agent.rollout, esopt.agent.tokens) ask an Engine for replies instead of
calling model.generate, so the same environments and trajectories run on Hugging Face
generate (`HFEngine`, the CPU default) or on vLLM (`esopt.agent.vllm_engine`, the optional
extra esopt[vllm]).

Seeds. `seed` is a key: the named parts of one random stream (esopt.seeding.derive_seed).
- HFEngine samples from torch's global generator, one generate call per batch: the prompts
  [lo, lo + batch_size) are sampled after torch.manual_seed(derive_seed(*seed, lo)). The
  noise of a reply depends on its batch (the same prompts in the same order give the same
  replies).
- vLLM samples each request with its own seed, derive_seed(*seed, "request", key), where
  key names the request (rollouts pass the episode's index): a reply's noise depends only
  on its episode, not on which other episodes are still running.
Either way every ES member that runs the same prompts under the same seed draws the same
noise: common random numbers across members.

Stopping. A reply ends at the first of the model's stop ids (stop_token_ids): the tokenizer's
eos and every id of generation_config.json's eos_token_id (Qwen3.5: <|im_end|>, which ends an
assistant turn in its chat template, and <|endoftext|>).

Presence penalty (Sampling.presence_penalty, OpenAI's and vLLM's definition): before
temperature, top-k and top-p, the logit of every token that already occurs in the reply
generated so far (not the prompt) is lowered by the penalty, once however often it occurs.
Applied in greedy and sampled decoding alike, as vLLM does.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from esopt.seeding import derive_seed

SeedKey = tuple[Any, ...]


@dataclass(frozen=True)
class Sampling:
    do_sample: bool = True
    temperature: float = 0.7
    top_p: float = 0.8
    top_k: int = 20
    max_new_tokens: int = 16  # cap on tokens per turn
    presence_penalty: float = 0.0  # subtracted from the logit of every token already in the reply

    def __post_init__(self):
        if not 0 <= self.presence_penalty <= 2:  # OpenAI's range, which vLLM enforces (negative: none here)
            raise ValueError(f"presence_penalty must be in [0, 2], got {self.presence_penalty}")

    @classmethod
    def from_profile(cls, profile: dict[str, Any], max_new_tokens: int, do_sample: bool = True) -> Sampling:
        """A config's sampling profile ({temperature, top_p, top_k, presence_penalty}) with a
        per-turn token cap; do_sample False: greedy (temperature, top-p and top-k are kept but
        unused; the presence penalty applies)."""
        return cls(do_sample=do_sample, temperature=profile["temperature"], top_p=profile["top_p"],
                   top_k=profile["top_k"], max_new_tokens=max_new_tokens,
                   presence_penalty=float(profile.get("presence_penalty", 0.0)))

    @property
    def logprob_temperature(self) -> float:
        """The temperature the sampling log-probs are taken at (1 for greedy decoding)."""
        return self.temperature if self.do_sample else 1.0

    def generate_kwargs(self) -> dict[str, Any]:
        if not self.do_sample:
            return {"do_sample": False, "max_new_tokens": self.max_new_tokens}
        return {
            "do_sample": True, "temperature": self.temperature, "top_p": self.top_p,
            "top_k": self.top_k, "max_new_tokens": self.max_new_tokens,
        }


@dataclass
class Completion:
    token_ids: list[int]  # the reply as generated, through its first EOS (or cut at max_new_tokens)
    text: str  # token_ids decoded without special tokens
    logprobs: list[float] | None = None  # per token: log_softmax(logits / T) of the model, before presence
    # penalty and top-k/top-p; when asked


class Engine(Protocol):
    """What a rollout needs from an inference engine."""

    def generate(self, prompts: Sequence[Sequence[int]], sampling: Sampling, seed: SeedKey, *,
                 keys: Sequence[int] | None = None, logprobs: bool = False,
                 counters: dict[str, int] | None = None) -> list[Completion]:
        """One completion per prompt, in order. keys name the requests for per-request
        seeds (default: their positions). counters (if given) accumulates generate_calls,
        prompt_tokens and generated_tokens."""
        ...


def count(counters: dict[str, int] | None, calls: int, prompt_tokens: int, generated_tokens: int) -> None:
    if counters is None:
        return
    for k, v in (("generate_calls", calls), ("prompt_tokens", prompt_tokens), ("generated_tokens", generated_tokens)):
        counters[k] = counters.get(k, 0) + v


def trim_at_eos(ids: list[int], eos_id: int | Collection[int] | None) -> list[int]:
    """ids through the first stop id (what follows is padding); eos_id: one id or several."""
    stops = {eos_id} if isinstance(eos_id, int) else set(eos_id or ())
    for i, t in enumerate(ids):
        if t in stops:
            return ids[: i + 1]
    return ids


def _ids(value: Any) -> list[int]:
    """An eos_token_id field (None, one id or a list) as a list."""
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def stop_token_ids(tokenizer, generation_eos: Any = None) -> list[int]:
    """The ids a reply stops at: the tokenizer's eos, then every id of the model's
    generation_config eos_token_id (one id or a list), each once, in that order (none: replies
    run to max_new_tokens)."""
    out: list[int] = []
    for i in _ids(tokenizer.eos_token_id) + _ids(generation_eos):
        if i not in out:
            out.append(i)
    return out


def model_stop_token_ids(model_dir: str | Path, tokenizer) -> list[int]:
    """stop_token_ids from a model directory: its generation_config.json's eos_token_id when
    the file is there, else the tokenizer's eos alone."""
    path = Path(model_dir) / "generation_config.json"
    eos = json.loads(path.read_text()).get("eos_token_id") if path.is_file() else None
    return stop_token_ids(tokenizer, eos)


class PresencePenalty(LogitsProcessor):
    """OpenAI's and vLLM's presence penalty for HF generate: `penalty` off the logit of every
    token that occurs in the generated part of the row (the ids after `prompt_width`, the
    width of the left-padded prompt batch), once however often it occurs."""

    def __init__(self, penalty: float, prompt_width: int):
        self.penalty, self.prompt_width = float(penalty), prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        generated = input_ids[:, self.prompt_width:]
        if generated.shape[1] == 0:
            return scores
        seen = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, generated, True)
        return scores - self.penalty * seen.to(scores.dtype)


class HFEngine:
    """Hugging Face generate on a left-padded batch: the model as it is now, in place.

    ES perturbs the module's parameters directly (esopt.es.Perturber), so every call
    sees the current member's weights with no copy. Replies stop at stop_token_ids of the
    tokenizer and the model's generation config (from_pretrained reads generation_config.json).
    """

    name = "hf"

    def __init__(self, model: torch.nn.Module, tokenizer, batch_size: int | None = None):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        gen = getattr(model, "generation_config", None)
        self.stop_ids = stop_token_ids(tokenizer, getattr(gen, "eos_token_id", None))

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], sampling: Sampling, seed: SeedKey, *,
                 keys: Sequence[int] | None = None, logprobs: bool = False,
                 counters: dict[str, int] | None = None) -> list[Completion]:
        tok, model = self.tokenizer, self.model
        model.eval()
        device = next(model.parameters()).device
        pad_id, stops = tok.pad_token_id, self.stop_ids
        eos_arg = stops[0] if len(stops) == 1 else (stops or None)
        step = self.batch_size or len(prompts) or 1
        done: list[Completion] = []
        for lo in range(0, len(prompts), step):
            batch = prompts[lo:lo + step]
            width = max(len(p) for p in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            attn = torch.zeros((len(batch), width), dtype=torch.long)
            for r, p in enumerate(batch):  # left padding
                ids[r, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
                attn[r, width - len(p):] = 1
            if sampling.do_sample:
                torch.manual_seed(derive_seed(*seed, lo))
            extra = {}
            if sampling.presence_penalty:  # none at 0: the decoding is then exactly what it was without it
                extra["logits_processor"] = LogitsProcessorList([PresencePenalty(sampling.presence_penalty, width)])
            out = model.generate(
                input_ids=ids.to(device), attention_mask=attn.to(device), **sampling.generate_kwargs(),
                pad_token_id=pad_id, eos_token_id=eos_arg, return_dict_in_generate=True, output_logits=logprobs,
                **extra,
            )
            new = out.sequences[:, width:].cpu()
            logp = (torch.stack(out.logits, dim=1).float().div(sampling.logprob_temperature).log_softmax(-1).cpu()
                    if logprobs else None)
            for r in range(len(batch)):
                gen = trim_at_eos(new[r].tolist(), stops)
                lp = None
                if logp is not None:
                    lp = logp[r, torch.arange(len(gen)), torch.tensor(gen, dtype=torch.long)].tolist() if gen else []
                done.append(Completion(gen, tok.decode(gen, skip_special_tokens=True), lp))
            count(counters, 1, sum(len(p) for p in batch), sum(len(c.token_ids) for c in done[lo:]))
        return done


def as_engine(policy: Any, tokenizer, batch_size: int | None = None) -> Engine:
    """An Engine as it is, or a torch module wrapped in HFEngine."""
    if isinstance(policy, torch.nn.Module):
        return HFEngine(policy, tokenizer, batch_size)
    if not callable(getattr(policy, "generate", None)):
        raise TypeError(f"expected a torch.nn.Module or an esopt.agent.engine.Engine, got {type(policy).__name__}")
    return policy

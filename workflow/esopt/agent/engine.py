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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from esopt.seeding import derive_seed

SeedKey = tuple[Any, ...]


@dataclass(frozen=True)
class Sampling:
    do_sample: bool = True
    temperature: float = 0.7
    top_p: float = 0.8
    top_k: int = 20
    max_new_tokens: int = 16  # cap on tokens per turn

    @classmethod
    def from_profile(cls, profile: dict[str, Any], max_new_tokens: int, do_sample: bool = True) -> Sampling:
        """A config's sampling profile ({temperature, top_p, top_k}) with a per-turn token cap;
        do_sample False: greedy (the profile is kept but unused)."""
        return cls(do_sample=do_sample, temperature=profile["temperature"], top_p=profile["top_p"],
                   top_k=profile["top_k"], max_new_tokens=max_new_tokens)

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
    logprobs: list[float] | None = None  # per token: log_softmax(logits / T), before top-k/top-p; when asked


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


def trim_at_eos(ids: list[int], eos_id: int | None) -> list[int]:
    """ids through the first EOS (what follows is padding)."""
    return ids[: ids.index(eos_id) + 1] if eos_id is not None and eos_id in ids else ids


class HFEngine:
    """Hugging Face generate on a left-padded batch: the model as it is now, in place.

    ES perturbs the module's parameters directly (esopt.es.Perturber), so every call
    sees the current member's weights with no copy.
    """

    name = "hf"

    def __init__(self, model: torch.nn.Module, tokenizer, batch_size: int | None = None):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], sampling: Sampling, seed: SeedKey, *,
                 keys: Sequence[int] | None = None, logprobs: bool = False,
                 counters: dict[str, int] | None = None) -> list[Completion]:
        tok, model = self.tokenizer, self.model
        model.eval()
        device = next(model.parameters()).device
        pad_id, eos_id = tok.pad_token_id, tok.eos_token_id
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
            out = model.generate(
                input_ids=ids.to(device), attention_mask=attn.to(device), **sampling.generate_kwargs(),
                pad_token_id=pad_id, eos_token_id=eos_id, return_dict_in_generate=True, output_logits=logprobs,
            )
            new = out.sequences[:, width:].cpu()
            logp = (torch.stack(out.logits, dim=1).float().div(sampling.logprob_temperature).log_softmax(-1).cpu()
                    if logprobs else None)
            for r in range(len(batch)):
                gen = trim_at_eos(new[r].tolist(), eos_id)
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


def open_engine(settings: dict[str, Any], model: torch.nn.Module, tokenizer, model_dir, seed: int = 0):
    """The rollout policy for engine settings (esopt.config.engine_settings): the HF model
    itself, or a VLLMEngine over model_dir. Returns (policy, record) where record names the
    engine and its version for the provenance."""
    if settings["name"] == "hf":
        import transformers

        return model, {"name": "hf", "version": transformers.__version__}
    if settings["name"] != "vllm":
        raise ValueError(f"unknown engine {settings['name']!r} (expected hf or vllm)")
    from esopt.agent.vllm_engine import VLLMEngine

    opts = {k: v for k, v in settings.items() if k != "name"}
    engine = VLLMEngine(model_dir, tokenizer, dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
                        seed=seed, **opts)
    return engine, {"name": "vllm", "version": engine.version, **opts}

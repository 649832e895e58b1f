"""The analyst LLM of a prompt optimizer, behind one interface: `Analyst.complete`.

Each prompt is one user message; `complete(prompts, seed)` returns one reply per
prompt, in order. Two implementations:

- `PolicyAnalyst`: the policy model itself (the tiny model on a CPU, or the HF
  model being trained). Batched, left-padded `generate` under no_grad, stopping at the
  model's stop ids (the rollouts' ones: esopt.agent.engine.stop_token_ids); the torch
  RNG is forked, so the caller's random streams are untouched, and seeded from
  `seed`, so the same seed gives the same replies (temperature 0: greedy). Prompts
  longer than the model's context are cut from the left of their trace part (the
  text between TRACE_BEGIN and TRACE_END), so the instructions survive.
- `OpenAIAnalyst`: any OpenAI-compatible chat server (vLLM, a hosted API) over the
  standard library's urllib. The API key is read from a named environment
  variable at request time and is never stored or put in an error message.

`make_analyst(spec, model, tokenizer)` builds either from a config dict.
"""

from __future__ import annotations

import inspect
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from esopt.agent.engine import stop_token_ids, trim_at_eos
from esopt.seeding import derive_seed

# Prompt builders mark the part of a prompt that may be cut (the trace) with these
# lines; PolicyAnalyst cuts the oldest text between them first.
TRACE_BEGIN = "--- trace begins ---"
TRACE_END = "--- trace ends ---"
CUT_NOTE = "\n[... earlier steps cut to fit the context ...]\n"

DEFAULT_SYSTEM = ("You analyse episodes of an AI agent and improve the skill document in its system prompt. "
                  "Follow the reply format exactly.")


class AnalystError(RuntimeError):
    """The analyst could not answer (server unreachable, HTTP error, bad response)."""

    def __init__(self, message: str, url: str | None = None, status: int | None = None):
        super().__init__(message)
        self.url = url
        self.status = status


@runtime_checkable
class Analyst(Protocol):
    def complete(self, prompts: list[str], seed: int) -> list[str]:
        """One reply text per prompt (a user message), in order; deterministic for a
        fixed seed as far as the backend allows."""
        ...


# --------------------------------------------------------------------------- policy model

def context_limit(model, tokenizer) -> int:
    """Positions the model can attend over: max_position_embeddings of its (text)
    config, bounded by the tokenizer's model_max_length when that is set."""
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "get_text_config"):
        cfg = cfg.get_text_config()
    limit = getattr(cfg, "max_position_embeddings", None) or 4096
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
        limit = min(limit, tok_max)
    return int(limit)


class PolicyAnalyst:
    """The policy model as the analyst.

    max_prompt_tokens: the longest prompt (chat template included) fed to the
    model; None or larger values are clamped to context_limit - max_new_tokens so
    prompt + reply always fit the positions the model was built with. batch_size
    bounds how many prompts share one generate call (None: all).

    Under ES, call it while no perturbation is applied: the analyst is the model as
    it is now. Sampling is seeded per batch from `seed` inside a forked RNG, so the
    replies depend on (seed, prompts, batch_size) and the caller's RNG is untouched."""

    def __init__(self, model, tokenizer, max_new_tokens: int = 256, temperature: float = 0.7, top_p: float = 0.8,
                 top_k: int = 20, system: str = DEFAULT_SYSTEM, max_prompt_tokens: int | None = None,
                 batch_size: int | None = None):
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (got {temperature})")
        room = context_limit(model, tokenizer) - max_new_tokens
        if room < 32:
            raise ValueError(f"max_new_tokens={max_new_tokens} leaves {room} prompt tokens of the model's "
                             f"{context_limit(model, tokenizer)}-position context")
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.top_p, self.top_k = max_new_tokens, temperature, top_p, top_k
        self.system = system
        self.max_prompt_tokens = room if max_prompt_tokens is None else max(32, min(int(max_prompt_tokens), room))
        self.batch_size = batch_size
        self.last_stats: dict[str, int] = {}

    # ---- prompt -> token ids
    def _ids(self, text: str) -> list[int]:
        # verbose=False: a prompt over model_max_length is expected here (encode cuts it)
        return list(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def _messages(self, content: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        return msgs + [{"role": "user", "content": content}]

    def encode(self, prompt: str) -> tuple[list[int], bool]:
        """Token ids of the chat prompt (with the generation prompt) and whether it was cut.

        A prompt that fits is tokenized whole. One that does not is assembled from
        separately tokenized pieces: template prefix, the instructions before
        TRACE_BEGIN, the newest part of the trace that fits, the text from TRACE_END
        on, template suffix. Without trace markers (or when the instructions alone
        are too long) the middle of the message is cut instead."""
        tok = self.tokenizer
        text = tok.apply_chat_template(self._messages(prompt), add_generation_prompt=True, tokenize=False)
        ids = self._ids(text)
        limit = self.max_prompt_tokens
        if len(ids) <= limit:
            return ids, False
        sentinel = "\u2063ESOPT-CONTENT\u2063"
        frame = tok.apply_chat_template(self._messages(sentinel), add_generation_prompt=True, tokenize=False)
        if frame.count(sentinel) != 1:  # a template that rewrites content: keep the end
            return ids[-limit:], True
        prefix, suffix = frame.split(sentinel)
        pre, suf = self._ids(prefix), self._ids(suffix)
        budget = limit - len(pre) - len(suf)
        i, j = prompt.find(TRACE_BEGIN), prompt.rfind(TRACE_END)
        if i >= 0 and j > i:
            head = self._ids(prompt[: i + len(TRACE_BEGIN)])
            body = self._ids(prompt[i + len(TRACE_BEGIN): j])
            tail = self._ids(prompt[j:])
        else:
            head, body, tail = self._ids(prompt), [], []
        note = self._ids(CUT_NOTE)
        keep = budget - len(head) - len(tail) - len(note)
        if body and keep >= len(body):  # pieces tokenize a little differently: it fits after all
            content = head + body + tail
        elif body and keep >= 0:
            content = head + note + body[len(body) - keep:] + tail
        else:  # cut the middle of the whole message
            whole = head + body + tail
            room = max(0, budget - len(note))
            content = whole[: room - room // 2] + note + (whole[len(whole) - room // 2:] if room // 2 else [])
        out = pre + content + suf
        return (out[-limit:] if len(out) > limit else out), True

    # ---- generation
    def complete(self, prompts: list[str], seed: int) -> list[str]:
        import torch

        prompts = [str(p) for p in prompts]
        if not prompts:
            return []
        tok, model = self.tokenizer, self.model
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        device = next(model.parameters()).device
        encoded = [self.encode(p) for p in prompts]
        # a reply ends at the model's stop ids, as in the rollouts (esopt.agent.engine.stop_token_ids)
        stops = stop_token_ids(tok, getattr(getattr(model, "generation_config", None), "eos_token_id", None))
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "pad_token_id": pad,
                                  "eos_token_id": stops[0] if len(stops) == 1 else (stops or None)}
        if self.temperature > 0:
            kwargs.update(do_sample=True, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)
        else:
            kwargs.update(do_sample=False)
        step = self.batch_size or len(prompts)
        replies: list[str] = []
        stats = {"prompts": len(prompts), "truncated": sum(cut for _, cut in encoded), "prompt_tokens": 0,
                 "generated_tokens": 0}
        was_training = model.training
        model.eval()
        # Seed and restore only the generators this call uses (the CPU one and the
        # model's GPU): torch.manual_seed would reseed every GPU of the process.
        cuda_index = (device.index if device.index is not None else torch.cuda.current_device()) \
            if device.type == "cuda" else None
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=[] if cuda_index is None else [cuda_index]):
                for lo in range(0, len(encoded), step):
                    batch = [ids for ids, _ in encoded[lo: lo + step]]
                    width = max(len(ids) for ids in batch)
                    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch], device=device)
                    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch], device=device)
                    if self.temperature > 0:
                        s = derive_seed("analyst", seed, lo)
                        torch.default_generator.manual_seed(s)
                        if cuda_index is not None:
                            with torch.cuda.device(cuda_index):
                                torch.cuda.manual_seed(s)
                    out = model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
                    new = out[:, width:]
                    replies += [r.strip() for r in tok.batch_decode(new, skip_special_tokens=True)]
                    stats["prompt_tokens"] += int(mask.sum())
                    stats["generated_tokens"] += sum(len(trim_at_eos(row, stops)) for row in new.tolist())
        finally:
            model.train(was_training)
        self.last_stats = stats
        return replies


# --------------------------------------------------------------------------- OpenAI-compatible server

class OpenAIAnalyst:
    """An OpenAI-compatible /chat/completions endpoint (e.g. `vllm serve`).

    base_url is the API root, e.g. http://host:8000/v1. Each prompt is its own
    request (run `max_workers` at a time) with a seed derived from `seed` and the
    prompt's index. Connection errors, timeouts, 408/409/425/429 and 5xx are retried
    `retries` times with exponential backoff; then, or on any other HTTP error or an
    unreadable response, AnalystError names the URL and the status. `extra_body`
    is merged into every request (e.g. {"top_p": 0.8} or vLLM's
    {"chat_template_kwargs": {"enable_thinking": false}})."""

    def __init__(self, base_url: str, model: str, api_key_env: str | None = None, temperature: float = 0.7,
                 max_tokens: int = 512, timeout_s: float = 120.0, retries: int = 2, system: str = DEFAULT_SYSTEM,
                 max_workers: int = 4, backoff_s: float = 1.0, extra_body: dict | None = None):
        if not str(base_url).startswith(("http://", "https://")):
            raise ValueError(f"base_url {base_url!r}: expected http(s)://host:port/v1")
        if retries < 0 or max_workers < 1 or timeout_s <= 0:
            raise ValueError("retries must be >= 0, max_workers >= 1 and timeout_s > 0")
        self.base_url = str(base_url).rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model, self.api_key_env = model, api_key_env
        self.temperature, self.max_tokens = temperature, max_tokens
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
        self.system, self.max_workers = system, max_workers
        self.extra_body = dict(extra_body or {})

    def __repr__(self) -> str:  # never the key: only the variable's name
        return f"OpenAIAnalyst(url={self.url!r}, model={self.model!r}, api_key_env={self.api_key_env!r})"

    def _api_key(self) -> str | None:
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise AnalystError(f"environment variable {self.api_key_env} (the API key for {self.url}) is not set",
                               url=self.url)
        return key

    def complete(self, prompts: list[str], seed: int) -> list[str]:
        prompts = [str(p) for p in prompts]
        if not prompts:
            return []
        key = self._api_key()
        seeds = [derive_seed("analyst", seed, i) % (2 ** 31) for i in range(len(prompts))]
        if len(prompts) == 1 or self.max_workers == 1:
            return [self._one(p, s, key) for p, s in zip(prompts, seeds)]
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(prompts))) as pool:
            return list(pool.map(self._one, prompts, seeds, [key] * len(prompts)))

    def _one(self, prompt: str, seed: int, key: str | None) -> str:
        messages = ([{"role": "system", "content": self.system}] if self.system else [])
        messages.append({"role": "user", "content": prompt})
        body = {"model": self.model, "messages": messages, "temperature": self.temperature,
                "max_tokens": self.max_tokens, "seed": seed, **self.extra_body}
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = json.dumps(body).encode()
        attempts = self.retries + 1
        for attempt in range(attempts):
            status: int | None = None
            try:
                req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                return self._content(raw)
            except urllib.error.HTTPError as e:
                status = e.code
                try:
                    detail = e.read()[:300].decode("utf-8", "replace").strip()
                except Exception:  # noqa: BLE001 - the error body is only a detail
                    detail = ""
                why = f"HTTP {status} {e.reason}" + (f": {detail}" if detail else "")
                retry = status in (408, 409, 425, 429) or status >= 500
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                why = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
                retry = True
            if not retry or attempt == attempts - 1:
                raise AnalystError(f"analyst request POST {self.url} failed after {attempt + 1} attempt(s): {why}",
                                   url=self.url, status=status)
            time.sleep(self.backoff_s * 2 ** attempt)
        raise AssertionError("unreachable")

    def _content(self, raw: bytes) -> str:
        try:
            data = json.loads(raw.decode("utf-8"))
            content = data["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise AnalystError(f"unexpected response from {self.url} ({type(e).__name__}): {raw[:200]!r}",
                               url=self.url, status=200) from None
        return "" if content is None else str(content)


# --------------------------------------------------------------------------- factory

ANALYSTS = {"policy": PolicyAnalyst, "openai": OpenAIAnalyst}


def make_analyst(spec: dict, model=None, tokenizer=None) -> Analyst:
    """An analyst from a config dict: {"kind": "policy", ...PolicyAnalyst options}
    (uses the given model and tokenizer) or {"kind": "openai", "base_url": ...,
    "model": ..., "api_key_env": ...}. Unknown kinds or options raise ValueError."""
    spec = dict(spec or {})
    kind = spec.pop("kind", None)
    if kind not in ANALYSTS:
        raise ValueError(f"analyst kind {kind!r}: expected one of {sorted(ANALYSTS)}")
    if "api_key" in spec:
        raise ValueError("analyst spec holds an API key: put it in an environment variable and name that "
                         "variable with api_key_env")
    cls = ANALYSTS[kind]
    params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    if kind == "policy":
        params = [p for p in params if p not in ("model", "tokenizer")]
    unknown = sorted(set(spec) - set(params))
    if unknown:
        raise ValueError(f"analyst kind {kind!r}: unknown option(s) {unknown}; expected some of {params}")
    if kind == "policy":
        if model is None or tokenizer is None:
            raise ValueError("analyst kind 'policy' needs the policy model and its tokenizer")
        return PolicyAnalyst(model, tokenizer, **spec)
    missing = [p for p in ("base_url", "model") if p not in spec]
    if missing:
        raise ValueError(f"analyst kind 'openai' needs {missing}")
    return OpenAIAnalyst(**spec)


__all__: Sequence[str] = [
    "DEFAULT_SYSTEM",
    "TRACE_BEGIN",
    "TRACE_END",
    "Analyst",
    "AnalystError",
    "OpenAIAnalyst",
    "PolicyAnalyst",
    "context_limit",
    "make_analyst",
]

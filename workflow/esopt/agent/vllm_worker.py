"""ES inside vLLM: a worker extension that runs esopt.es on the engine's own weights.

vLLM loads this class into every worker process (LLM(worker_extension_cls=...)); the
driver reaches it through collective_rpc (esopt.agent.vllm_engine). The weights are
perturbed, reverted and updated where they live, with the same noise definition and the
same exact revert as the Hugging Face path (esopt.es.Perturber), so only seeds and
coefficients cross the process boundary.

Names. Noise is defined per Hugging Face parameter name (esopt.es.noise): the names of the
HF causal LM (`model.layers.*`, `lm_head`), the model the HF path perturbs and saves, so a
run's history replays to the same weights on either path. vLLM renames and fuses tensors:
a multimodal checkpoint (Qwen3.5) is built as `language_model.*` beside a vision tower
`visual.*`; q/k/v become one `qkv_proj`, gate/up one `gate_up_proj`, Qwen3.5's Gated
DeltaNet in_proj_qkv/in_proj_z one `in_proj_qkvz` and in_proj_b/in_proj_a one `in_proj_ba`;
the embedding may be padded. `hf_views` maps every HF parameter onto a contiguous block of
rows of vLLM's tensor (a view, no copy) under the language model's prefix, following the
model's packed_modules_mapping. Every engine tensor of the language model must be covered;
the rest (the vision tower) is listed and left alone; a layout that is not a stack of row
blocks is refused rather than perturbed in part.

Dtypes. vLLM keeps some tensors wider than HF does (Qwen3.5's A_log in fp32; HF loads it in
bf16). `MappedPerturber` perturbs those through a copy in the HF dtype and writes it back,
so the engine's tensor always holds the HF path's value exactly.

CPU. vLLM's CPU backend repacks every linear weight for oneDNN (or its own GEMM kernels)
at load time and leaves the layer's `weight` empty, so a perturbation of the parameters
would move only embeddings and norms. Importing this module (which vLLM does in the
worker before it loads the model) makes CPU linear layers keep their plain weight and run
torch.nn.functional.linear on it, so every change to the weights is what the next
forward pass uses.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import torch

from esopt.es.fidelity import Fidelity
from esopt.es.perturb import Perturber


def _keep_plain_cpu_linear_weights() -> None:
    try:
        from vllm.model_executor.layers import utils as layer_utils
        from vllm.platforms import current_platform
    except ImportError:  # imported outside vLLM (docs, tests of hf_views)
        return
    if not current_platform.is_cpu() or getattr(layer_utils.dispatch_cpu_unquantized_gemm, "_esopt", False):
        return
    packed_dispatch = layer_utils.dispatch_cpu_unquantized_gemm

    def dispatch(layer: torch.nn.Module, remove_weight: bool) -> None:
        w = getattr(layer, "weight", None)
        if w is None or w.is_meta or w.ndim != 2:
            return packed_dispatch(layer, remove_weight)  # conv / MoE weights: vLLM's own path
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)

    dispatch._esopt = True
    layer_utils.dispatch_cpu_unquantized_gemm = dispatch


_keep_plain_cpu_linear_weights()


def language_model_prefix(model: torch.nn.Module) -> str:
    """Where the Hugging Face causal LM's names start among the engine's: vLLM builds a
    multimodal checkpoint (Qwen3.5's Qwen3_5ForConditionalGeneration) as a vision tower
    beside a language model (`language_model.`); a text-only model is the language model."""
    get = getattr(model, "get_language_model", None)
    lm = get() if callable(get) else model
    if lm is model:
        return ""
    for name, module in model.named_modules():
        if module is lm:
            return f"{name}."
    raise ValueError(f"{type(model).__name__}.get_language_model() is not one of its submodules")


def excluded_tensors(engine_params: dict[str, torch.Tensor], prefix: str) -> list[str]:
    """The engine's floating-point tensors outside the perturbed module set (the names under
    `prefix`): a multimodal model's vision tower, which the HF causal LM ES perturbs lacks."""
    return [n for n, t in engine_params.items() if t.is_floating_point() and not n.startswith(prefix)]


VOCAB_PADDING = 64  # vLLM pads an embedding's and lm_head's rows to a multiple of this (at tensor-parallel size 1)


def hf_views(engine_params: dict[str, torch.Tensor], hf_shapes: dict[str, Sequence[int]],
             packed: dict[str, Sequence[str]], prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """Each HF parameter (name -> shape, in HF order) as a view of the engine's tensor.

    An HF name is the engine's name after `prefix`, or the engine's fused name with the HF
    module name in place of the fused one (`packed`: fused -> parts in stacking order, vLLM's
    packed_modules_mapping); a part's rows start after its earlier siblings' rows (vLLM's
    merged linear layers stack their parts so at tensor-parallel size 1). Every engine tensor
    under `prefix` must be tiled by its parts' rows, except the rows a padded vocabulary adds
    at the end of an unfused tensor; the tensors outside `prefix` are left alone
    (excluded_tensors lists them).
    """
    views: list[tuple[str, torch.Tensor]] = []
    blocks: dict[str, list[tuple[int, int, str]]] = {}  # engine name -> (first row, end row, HF name)
    for name, shape in hf_shapes.items():
        shape = tuple(shape)
        target, row = name, 0
        if prefix + name not in engine_params:
            for fused, parts in packed.items():
                part = next((p for p in parts if f".{p}." in f".{name}"), None)
                if part is None or part == fused:
                    continue
                target = f".{name}".replace(f".{part}.", f".{fused}.", 1)[1:]
                for earlier in parts[: list(parts).index(part)]:
                    sibling = f".{name}".replace(f".{part}.", f".{earlier}.", 1)[1:]
                    if sibling not in hf_shapes:
                        raise ValueError(f"{name} is fused into {prefix}{target} after {sibling}, "
                                         "which the HF model lacks")
                    row += tuple(hf_shapes[sibling])[0]
                break
        target = prefix + target
        t = engine_params.get(target)
        if t is None:
            raise ValueError(f"HF parameter {name} has no tensor in the engine (looked for {target})")
        rows = shape[0] if shape else 1
        if tuple(t.shape[1:]) != shape[1:] or row + rows > (t.shape[0] if t.dim() else 1):
            raise ValueError(f"HF parameter {name} {list(shape)} does not fit rows {row}.. of {target} {list(t.shape)}")
        view = t if not shape else t[row:row + rows]
        if not view.is_contiguous():
            raise ValueError(f"{target} is not contiguous; cannot perturb {name} in place")
        views.append((name, view))
        blocks.setdefault(target, []).append((row, row + rows, name))
    for target, t in engine_params.items():
        if not t.is_floating_point() or not target.startswith(prefix):
            continue
        if target not in blocks:
            raise ValueError(f"engine parameter {target} {list(t.shape)} has no HF parameter: "
                             "it would never be perturbed")
        end = 0
        for first, last, name in sorted(blocks[target]):
            if first > end:
                raise ValueError(f"engine parameter {target} {list(t.shape)}: rows {end}..{first} have no HF parameter")
            if first < end:
                raise ValueError(f"engine parameter {target}: HF parameter {name} overlaps rows of another")
            end = last
        rows = t.shape[0] if t.dim() else 1
        padded = len(blocks[target]) == 1 and rows == -(-end // VOCAB_PADDING) * VOCAB_PADDING
        if end != rows and not padded:
            raise ValueError(f"engine parameter {target} {list(t.shape)}: rows {end}..{rows} have no HF parameter")
    return views


# (engine dtype, HF dtype) pairs where every HF value is exactly an engine value, so a tensor
# the engine keeps wider (vLLM's fp32 A_log) can hold the HF path's value bit for bit
_WIDER = {(torch.float32, torch.bfloat16), (torch.float32, torch.float16),
          (torch.float64, torch.bfloat16), (torch.float64, torch.float16), (torch.float64, torch.float32)}


def _dtype(name: str | torch.dtype) -> torch.dtype:
    dt = name if isinstance(name, torch.dtype) else getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"not a torch dtype: {name!r}")
    return dt


class MappedPerturber:
    """esopt.es.Perturber over an engine's tensors under Hugging Face names and dtypes.

    `layout`: HF name -> {"shape", "dtype"} (hf_parameter_layout). A tensor the engine keeps
    in a wider dtype than HF (vLLM keeps Qwen3.5's A_log in fp32, HF in bf16) is perturbed
    through a copy in the HF dtype, with the HF path's rounding, and written back after every
    apply, revert and update: the engine's tensor then holds exactly the HF path's value.
    The engine's tensors outside `prefix` (excluded_tensors) are not touched.
    """

    def __init__(self, engine_params: dict[str, torch.Tensor], layout: dict[str, dict[str, Any]],
                 packed: dict[str, Sequence[str]], groups: dict[str, str], prefix: str = "", **perturber_kw: Any):
        views = hf_views(engine_params, {n: v["shape"] for n, v in layout.items()}, packed, prefix)
        self.excluded = excluded_tensors(engine_params, prefix)
        tensors: list[tuple[str, torch.Tensor]] = []
        self.mirrors: list[tuple[str, torch.Tensor, torch.Tensor]] = []  # (HF name, engine view, HF-dtype copy)
        for name, view in views:
            want = _dtype(layout[name]["dtype"])
            if view.dtype == want:
                tensors.append((name, view))
                continue
            if (view.dtype, want) not in _WIDER:
                raise ValueError(f"HF parameter {name} is {want} but the engine holds it in {view.dtype}, which "
                                 "cannot hold every HF value: the two paths' weights could not be identical")
            copy = view.to(want)
            if not torch.equal(copy.to(view.dtype), view):
                raise ValueError(f"the engine's {view.dtype} {name} holds values that are not {want} values: "
                                 f"load the engine in the HF model's dtype ({want})")
            tensors.append((name, copy))
            self.mirrors.append((name, view, copy))
        self.es = Perturber.from_tensors(tensors, groups, **perturber_kw)

    @property
    def params(self) -> list[tuple[str, torch.Tensor]]:
        return self.es.params

    @property
    def numel(self) -> int:
        return self.es.numel

    @property
    def is_perturbed(self) -> bool:
        return self.es.is_perturbed

    def _check(self) -> None:
        for name, view, copy in self.mirrors:
            if not torch.equal(view, copy.to(view.dtype)):
                raise RuntimeError(f"the engine's {name} changed outside the perturber; its HF-dtype copy is stale")

    def _write_back(self) -> None:
        for _, view, copy in self.mirrors:
            view.copy_(copy)

    def apply(self, seed: int, scale: float, fidelity: Fidelity | None = None) -> None:
        self._check()
        self.es.apply(seed, scale, fidelity=fidelity)
        self._write_back()

    def revert(self) -> None:
        self.es.revert()
        self._write_back()

    def update(self, seeds: Sequence[int], coefficients: Sequence[float], fidelity: Fidelity | None = None) -> None:
        self._check()
        self.es.update(seeds, coefficients, fidelity=fidelity)
        self._write_back()


class ESWorker:
    """vLLM worker extension (collective_rpc methods, all named es_*). Tensors and fidelity
    sums come back pickled: vLLM's RPC serializer turns tensors into lists."""

    def _es_model(self) -> torch.nn.Module:
        runner = self.model_runner
        return runner.get_model() if hasattr(runner, "get_model") else runner.model

    def es_setup(self, layout: dict[str, dict[str, Any]], groups: dict[str, str], rounding: str,
                 chunk: int, revert: str = "auto") -> dict[str, Any]:
        """Build the perturber over HF-named views of this worker's language-model weights."""
        model = self._es_model()
        engine_params = dict(model.named_parameters())
        packed = dict(getattr(model, "packed_modules_mapping", {}) or {})
        self._es = MappedPerturber(engine_params, layout, packed, groups, language_model_prefix(model),
                                   chunk=chunk, rounding=rounding, revert=revert)
        return {"tensors": len(self._es.params), "numel": self._es.numel,
                "engine_numel": sum(p.numel() for p in engine_params.values() if p.is_floating_point()),
                "excluded": self._es.excluded,
                "excluded_numel": sum(engine_params[n].numel() for n in self._es.excluded),
                "mirrored": [n for n, _, _ in self._es.mirrors]}

    def es_apply(self, seed: int, scale: float, fidelity: bool = False) -> bytes:
        f = Fidelity() if fidelity else None
        self._es.apply(seed, scale, fidelity=f)
        return pickle.dumps(f)

    def es_revert(self) -> None:
        self._es.revert()

    def es_update(self, seeds: list[int], coefficients: list[float], fidelity: bool = False) -> bytes:
        f = Fidelity() if fidelity else None
        self._es.update(seeds, coefficients, fidelity=f)
        return pickle.dumps(f)

    def es_is_perturbed(self) -> bool:
        return self._es.is_perturbed

    def es_tensors(self, names: list[str] | None = None) -> bytes:
        """Copies of the weights under HF names (all, or `names`), on the host."""
        want = None if names is None else set(names)
        return pickle.dumps({n: t.detach().to("cpu", copy=True) for n, t in self._es.params
                             if want is None or n in want})

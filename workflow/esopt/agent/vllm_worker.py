"""ES inside vLLM: a worker extension that runs esopt.es on the engine's own weights.

vLLM loads this class into every worker process (LLM(worker_extension_cls=...)); the
driver reaches it through collective_rpc (esopt.agent.vllm_engine). The weights are
perturbed, reverted and updated where they live, with the same noise definition and the
same exact revert as the Hugging Face path (esopt.es.Perturber), so only seeds and
coefficients cross the process boundary.

Names. Noise is defined per Hugging Face parameter name (esopt.es.noise), but vLLM fuses
and renames tensors: q/k/v projections become one `qkv_proj`, gate/up one `gate_up_proj`,
and the embedding may be padded to a multiple of 64 rows. `hf_views` maps every HF
parameter onto a contiguous block of rows of vLLM's tensor (a view, no copy), so the
perturber sees the HF model's tensors under their HF names and a run's history replays to
the same weights on either path. A vLLM parameter the HF names do not cover, or a layout
that is not a stack of row blocks, is refused rather than perturbed in part.

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


def hf_views(engine_params: dict[str, torch.Tensor], hf_shapes: dict[str, Sequence[int]],
             packed: dict[str, Sequence[str]]) -> list[tuple[str, torch.Tensor]]:
    """Each HF parameter (name -> shape, in HF order) as a view of the engine's tensor.

    An HF name is the engine's name, or the engine's fused name with the HF module name in
    place of the fused one (`packed`: fused -> parts in stacking order, vLLM's
    packed_modules_mapping); a part's rows start after its earlier siblings' rows. Every
    engine tensor must be covered, except padding rows at its end.
    """
    views: list[tuple[str, torch.Tensor]] = []
    covered: dict[str, int] = {}
    for name, shape in hf_shapes.items():
        shape = tuple(shape)
        target, row = name, 0
        if name not in engine_params:
            for fused, parts in packed.items():
                part = next((p for p in parts if f".{p}." in f".{name}"), None)
                if part is None:
                    continue
                target = f".{name}".replace(f".{part}.", f".{fused}.", 1)[1:]
                for earlier in parts[: list(parts).index(part)]:
                    sibling = f".{name}".replace(f".{part}.", f".{earlier}.", 1)[1:]
                    if sibling not in hf_shapes:
                        raise ValueError(f"{name} is fused into {target} after {sibling}, which the HF model lacks")
                    row += tuple(hf_shapes[sibling])[0]
                break
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
        covered[target] = covered.get(target, 0) + view.numel()
    for target, t in engine_params.items():
        if t.is_floating_point() and covered.get(target, 0) == 0:
            raise ValueError(f"engine parameter {target} {list(t.shape)} has no HF parameter: "
                             "it would never be perturbed")
    return views


class ESWorker:
    """vLLM worker extension (collective_rpc methods, all named es_*). Tensors and fidelity
    sums come back pickled: vLLM's RPC serializer turns tensors into lists."""

    def _es_model(self) -> torch.nn.Module:
        runner = self.model_runner
        return runner.get_model() if hasattr(runner, "get_model") else runner.model

    def es_setup(self, hf_shapes: dict[str, list[int]], groups: dict[str, str], rounding: str,
                 chunk: int, revert: str = "auto") -> dict[str, Any]:
        """Build the perturber over HF-named views of this worker's weights."""
        model = self._es_model()
        engine_params = dict(model.named_parameters())
        packed = dict(getattr(model, "packed_modules_mapping", {}) or {})
        views = hf_views(engine_params, hf_shapes, packed)
        self._es = Perturber.from_tensors(views, groups, chunk=chunk, rounding=rounding, revert=revert)
        return {"tensors": len(views), "numel": self._es.numel,
                "engine_numel": sum(p.numel() for p in engine_params.values() if p.is_floating_point())}

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

"""vLLM's own parameter table of a model: (name, shape, dtype) as its module declares them.

ES inside vLLM perturbs the engine's tensors under Hugging Face names
(esopt.agent.vllm_worker.hf_views); whether that mapping fits a model is a question about
the tensors vLLM's model class creates. This module builds that class from a config alone,
on the meta device (no weights, no GPU, any size), and writes its table, so the mapping is
tested against the real layout on a CPU (tests/test_vllm_layout.py reads the committed
table of a tiny Qwen3.5; tests/test_vllm_qwen35_table.py regenerates it from the installed
vLLM) and dry-run at the paper's shape (benchmarks/paper_dryrun.py).

Needs vLLM (the engine environment of docs/engine.md). Building a model initializes a
one-rank gloo process group and vLLM's current config in this process: run it in a process
of its own (the command line below, or a subprocess), not beside a vllm.LLM.

    python -m esopt.agent.vllm_table --config CONFIG.json --out TABLE.json [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import socket
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import torch


class _Absent(types.ModuleType):
    """A stand-in for a package that is not installed: every attribute is another stand-in."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Absent(f"{self.__name__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _AbsentFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, package: str):
        self.package = package

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == self.package or fullname.startswith(self.package + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _Absent(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []


def _allow_missing_torchvision() -> None:
    """vLLM's Qwen3-VL/Qwen3.5 module imports transformers' image processors, which import
    torchvision at module level; the CPU build cannot have it (docs/engine.md). Building the
    model never calls it, so a stand-in is enough here. Installed only after transformers has
    decided torchvision is absent, and only in this process."""
    if importlib.util.find_spec("torchvision") is None and not any(
            isinstance(f, _AbsentFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AbsentFinder("torchvision"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_model(config: Any, dtype: str = "bfloat16", device: str = "meta", **settings: Any) -> torch.nn.Module:
    """vLLM's model for a transformers config (its `architectures` pick the class), built
    as vLLM's loader builds it (default dtype set, on `device`), tensor-parallel size 1.
    `settings`: more vllm.config.ModelConfig settings, e.g. limit_mm_per_prompt
    {"image": 0, "video": 0}, with which vLLM builds no vision tower."""
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.model_executor.models.registry import ModelRegistry
    from vllm.utils.torch_utils import set_default_torch_dtype

    _allow_missing_torchvision()
    for arch in config.architectures or []:
        # vLLM inspects a lazily registered class in a subprocess, without the stand-in above;
        # registering the class itself keeps the inspection in this process
        lazy = ModelRegistry.models.get(arch)
        if lazy is not None and hasattr(lazy, "module_name"):
            ModelRegistry.register_model(arch, getattr(importlib.import_module(lazy.module_name), lazy.class_name))
    with tempfile.TemporaryDirectory() as d:  # vLLM reads the directory again while building
        config.save_pretrained(d)
        model_config = ModelConfig(model=d, dtype=dtype, skip_tokenizer_init=True, max_model_len=256,
                                   **settings)
        vllm_config = VllmConfig(model_config=model_config)
        with set_current_vllm_config(vllm_config):
            if not parallel_state.model_parallel_is_initialized():
                parallel_state.init_distributed_environment(
                    world_size=1, rank=0, local_rank=0, backend="gloo",
                    distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
                parallel_state.initialize_model_parallel(1, 1)
        with set_default_torch_dtype(model_config.dtype), torch.device(device):
            return initialize_model(vllm_config=vllm_config)


def engine_table(model: torch.nn.Module) -> dict[str, Any]:
    """What hf_views needs to know of an engine model: its class, where the language model's
    names start, its packed_modules_mapping, and every parameter as [name, shape, dtype]."""
    import transformers
    import vllm

    from esopt.agent.vllm_worker import language_model_prefix

    return {
        "vllm": vllm.__version__,
        "transformers": transformers.__version__,
        "class": type(model).__name__,
        "language_model_prefix": language_model_prefix(model),
        "packed_modules_mapping": {k: list(v) for k, v in
                                   (getattr(model, "packed_modules_mapping", {}) or {}).items()},
        "params": [[n, list(p.shape), str(p.dtype).removeprefix("torch.")] for n, p in model.named_parameters()],
    }


def _dumps(obj: dict[str, Any]) -> str:
    """JSON with one line per parameter, so a diff of two tables reads as a diff of tensors."""
    head = json.dumps({k: v for k, v in obj.items() if k != "params"}, indent=1)
    if "params" not in obj:
        return head + "\n"
    rows = ",\n".join("  " + json.dumps(p) for p in obj["params"])
    return head[:-2] + ',\n "params": [\n' + rows + "\n ]\n}\n"


def write_json(obj: Any, out: str | Path) -> None:
    """Atomically: a temporary file beside `out`, then os.replace."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(_dumps(obj))
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True,
                    help="a transformers config.json (with its architectures), or a table to regenerate")
    ap.add_argument("--out", required=True, help="the table, JSON")
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args(argv)
    from transformers import AutoConfig

    data = json.loads(Path(args.config).read_text())
    config_dict = data.get("config", data) if "params" in data or set(data) == {"config"} else data
    config = AutoConfig.for_model(**config_dict)
    table = {"config": config_dict, "dtype": args.dtype, **engine_table(engine_model(config, args.dtype))}
    write_json(table, args.out)


if __name__ == "__main__":
    main()

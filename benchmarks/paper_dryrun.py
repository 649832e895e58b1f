"""Dry-run of ES inside vLLM at the paper's model shape: the names part.

Builds Qwen3.5-4B's config (no download), the HF causal LM's parameter layout (the names ES
noise is defined by) and vLLM's own model on the meta device, maps every HF name onto
vLLM's tensors as the worker extension does (esopt.agent.vllm_worker), and prints what
would be perturbed, what is left alone and the weights' bytes per GPU (one engine per GPU,
tensor-parallel size 1). Runs in the vLLM environment (docs/engine.md), on a CPU, in about
a minute; the memory estimate of a whole job is esopt preflight's.

    python benchmarks/paper_dryrun.py [--text KEY=VALUE ...] [--json OUT]

Qwen3.5-4B's numbers: hidden 2560, 32 layers (8 x [3 Gated DeltaNet, 1 full attention]),
16 query / 4 key-value heads of 256, FFN 9216, vocabulary 248,320 (apxml.com/models/qwen35-4b;
docs/engine.md has the run). Not found in any source this project could read, so transformers'
Qwen3_5TextConfig defaults: linear attention 16 key heads and 32 value heads of 128, conv
kernel 4; the vision tower (Qwen3_5VisionConfig defaults: depth 27, width 1152, with
out_hidden_size set to the text width). Tied embeddings assumed (as Qwen3-4B; an untied
lm_head adds 248,320 x 2560 = 636M parameters). Check against the staged checkpoint's
config.json before a run: `--text tie_word_embeddings=false` and the like.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

QWEN35_4B_TEXT: dict[str, Any] = {
    "vocab_size": 248320, "hidden_size": 2560, "intermediate_size": 9216, "num_hidden_layers": 32,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"], "num_attention_heads": 16,
    "num_key_value_heads": 4, "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "max_position_embeddings": 262144, "tie_word_embeddings": True,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
}


def qwen35_config(text: dict[str, Any]):
    from transformers import Qwen3_5Config

    text = dict(text)
    text["layer_types"] = text["layer_types"] * (text["num_hidden_layers"] // len(text["layer_types"]))
    config = Qwen3_5Config(text_config=text, vision_config={"out_hidden_size": text["hidden_size"]},
                           tie_word_embeddings=text["tie_word_embeddings"])
    config.architectures = ["Qwen3_5ForConditionalGeneration"]
    return config


def dry_run(config, dtype: str = "bfloat16", **engine_settings: Any) -> dict[str, Any]:
    """Map the HF layout onto vLLM's meta-device model; counts and bytes."""
    from esopt.agent.vllm_engine import hf_parameter_layout
    from esopt.agent.vllm_table import engine_model
    from esopt.agent.vllm_worker import excluded_tensors, hf_views, language_model_prefix

    layout, _ = hf_parameter_layout(config, dtype)
    model = engine_model(config, dtype, **engine_settings)
    params = dict(model.named_parameters())
    prefix = language_model_prefix(model)
    views = hf_views(params, {n: v["shape"] for n, v in layout.items()}, dict(model.packed_modules_mapping), prefix)
    excluded = excluded_tensors(params, prefix)
    mirrored = [n for n, v in views if str(v.dtype).removeprefix("torch.") != layout[n]["dtype"]]
    fp32 = [n for n, t in params.items() if t.dtype == torch.float32]
    nbytes = sum(t.numel() * t.element_size() for t in params.values())
    return {
        "vllm_class": type(model).__name__, "language_model_prefix": prefix,
        "engine_tensors": len(params), "engine_parameters": sum(t.numel() for t in params.values()),
        "hf_tensors_mapped": len(views), "parameters_perturbed": sum(v.numel() for _, v in views),
        "fused_text_tensors": sum(1 for n in params if n.startswith(prefix) and any(
            f".{f}." in n for f, parts in model.packed_modules_mapping.items() if list(parts) != [f])),
        "excluded_tensors": len(excluded), "excluded_parameters": sum(params[n].numel() for n in excluded),
        "fp32_tensors": len(fp32), "fp32_parameters": sum(params[n].numel() for n in fp32),
        "perturbed_through_hf_dtype_copy": len(mirrored),
        "copy_bytes": sum(v.numel() * getattr(torch, layout[n]["dtype"]).itemsize for n, v in views if n in mirrored),
        "weight_bytes_per_gpu": nbytes,
        "padding_rows_parameters": sum(t.numel() for n, t in params.items() if n.startswith(prefix))
        - sum(v.numel() for _, v in views),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", nargs="*", default=[], metavar="KEY=VALUE",
                    help="override a text-config number (JSON values), e.g. tie_word_embeddings=false")
    ap.add_argument("--json", help="also write the counts here")
    args = ap.parse_args(argv)
    text = dict(QWEN35_4B_TEXT)
    for kv in args.text:
        key, _, value = kv.partition("=")
        text[key] = json.loads(value)
    import transformers
    import vllm

    config = qwen35_config(text)
    runs = {"with vision tower": dry_run(config),
            "text only (limit_mm_per_prompt image 0, video 0)": dry_run(config, limit_mm_per_prompt={"image": 0,
                                                                                                    "video": 0})}
    print(f"Qwen3.5-4B shape, bf16, vLLM {vllm.__version__}, transformers {transformers.__version__}, "
          f"torch {torch.__version__}; `python {' '.join(sys.argv)}`")
    keys = list(next(iter(runs.values())))
    print("| | " + " | ".join(runs) + " |\n|---|" + "---|" * len(runs))
    for k in keys:
        cells = [f"{r[k]:,}" if isinstance(r[k], int) else str(r[k]) for r in runs.values()]
        print(f"| {k} | " + " | ".join(cells) + " |")
    for name, r in runs.items():
        print(f"{name}: weights {r['weight_bytes_per_gpu'] / 2**30:.2f} GiB per GPU")
    if args.json:
        from esopt.agent.vllm_table import write_json

        write_json({"text_config": text, "vllm": vllm.__version__, "runs": runs}, args.json)


if __name__ == "__main__":
    main()

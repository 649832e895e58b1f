"""The committed table of vLLM's tiny Qwen3.5 is the installed vLLM's, and vLLM's loader puts
each HF tensor where ES inside the engine reads it.

Runs where vLLM is installed (the engine environment of docs/engine.md; ESOPT_VLLM_REQUIRED
makes a broken install fail instead of skipping). Each check builds vLLM's model in a
process of its own (esopt.agent.vllm_table sets up vLLM's process-global state), about 20 s.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HAS_VLLM = importlib.util.find_spec("vllm") is not None
if os.environ.get("ESOPT_VLLM_REQUIRED") and not HAS_VLLM:  # .ci/run's engine environment
    raise RuntimeError("ESOPT_VLLM_REQUIRED is set but vllm does not import")
pytestmark = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (the engine environment of docs/engine.md)")

TABLE = Path(__file__).parent / "data" / "vllm_qwen3_5_tiny_params.json"
REGENERATE = f"python -m esopt.agent.vllm_table --config {TABLE.relative_to(Path(__file__).parent.parent)} --out same"


def test_the_committed_table_is_the_installed_vllms(tmp_path):
    out = tmp_path / "table.json"
    subprocess.run([sys.executable, "-m", "esopt.agent.vllm_table", "--config", str(TABLE), "--out", str(out)],
                   check=True, capture_output=True)
    got, want = json.loads(out.read_text()), json.loads(TABLE.read_text())
    drift = f"vLLM {got['vllm']} builds another layout than the table of vLLM {want['vllm']}; regenerate: {REGENERATE}"
    for key in ("class", "language_model_prefix", "packed_modules_mapping", "params"):
        assert got[key] == want[key], f"{key}: {drift}"


def test_vllms_loader_puts_every_hf_tensor_where_es_reads_it():
    res = subprocess.run([sys.executable, __file__], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip().endswith("same weights"), res.stdout[-2000:] + res.stderr[-4000:]


def _loader_check() -> None:
    """A random tiny Qwen3.5 checkpoint (transformers' Qwen3_5ForConditionalGeneration, bf16)
    loaded by vLLM's own load_weights; the HF causal LM holding the same text weights; then an
    ES apply/revert/update on both: the same values under HF names, A_log (fp32 in vLLM) equal
    to HF's bf16, the vision tower untouched, and a bit-exact revert."""
    import torch
    from transformers import AutoConfig, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration

    from esopt.agent.vllm_engine import hf_parameter_layout
    from esopt.agent.vllm_table import engine_model
    from esopt.agent.vllm_worker import MappedPerturber, language_model_prefix
    from esopt.es.perturb import Perturber

    table = json.loads(TABLE.read_text())
    config = AutoConfig.for_model(**table["config"])
    torch.manual_seed(0)
    checkpoint = Qwen3_5ForConditionalGeneration(config).to(torch.bfloat16).state_dict()
    engine = engine_model(config, "bfloat16", device="cpu")
    engine.load_weights(list(checkpoint.items()))
    hf = Qwen3_5ForCausalLM(config.text_config).to(torch.bfloat16)
    missing = hf.load_state_dict({k.replace("model.language_model.", "model."): v for k, v in checkpoint.items()
                                  if not k.startswith("model.visual.")}, strict=True)
    assert not missing.missing_keys
    params = dict(engine.named_parameters())
    layout, groups = hf_parameter_layout(config, "bfloat16")
    es = MappedPerturber(params, layout, dict(engine.packed_modules_mapping), groups, language_model_prefix(engine),
                         revert="exact")
    assert [n for n, _, _ in es.mirrors] == ["model.layers.0.linear_attn.A_log"]
    assert params["language_model.model.layers.0.linear_attn.A_log"].dtype == torch.float32
    start = {n: t.detach().clone() for n, t in params.items()}

    def same(step: str) -> None:
        want = dict(hf.named_parameters())
        for name, t in es.params:
            assert torch.equal(t, want[name].detach()), f"{step}: {name}"
        for name, view, _ in es.mirrors:
            assert torch.equal(view, want[name].detach().float()), f"{step}: {name} (engine fp32)"
        for name in es.excluded:
            assert torch.equal(params[name], start[name]), f"{step}: {name} moved"

    same("loaded")
    ref = Perturber(hf, revert="exact")
    with torch.no_grad():
        es.apply(5, 1e-2)
        ref.apply(5, 1e-2)
        same("applied")
        es.revert()
        ref.revert()
        for n, t in params.items():
            assert torch.equal(t, start[n]), f"reverted: {n}"
        es.update([5, 6], [0.5, -0.25])
        ref.update([5, 6], [0.5, -0.25])
        same("updated")
    print(f"{len(es.params)} HF tensors, {len(es.excluded)} vision tensors left alone: same weights")


if __name__ == "__main__":
    _loader_check()

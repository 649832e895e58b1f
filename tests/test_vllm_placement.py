"""Where vLLM engines start and what they are asked for, with vllm.LLM replaced by a recorder
(no vLLM needed): one engine per torchrun rank on the rank's own GPU, tensor parallelism
refused there, prefix caching off where the installed vLLM cannot cache hybrid models."""

import json
import logging
import os
import subprocess
import sys
import types
from types import SimpleNamespace

import pytest

from esopt.agent.vllm_engine import VLLMEngine, is_hybrid, prefix_caching_setting, rank_device

# Run by each torchrun rank: a fake vllm module whose LLM records the CUDA devices it was started
# with and its arguments; the ranks gather their records over gloo and rank 0 writes them.
RANK_SCRIPT = r"""
import json, os, sys, types
from types import SimpleNamespace

records = []

class RecordingLLM:
    def __init__(self, **kwargs):
        records.append({"visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                        "kwargs": {k: v for k, v in kwargs.items() if isinstance(v, (bool, int, float, str))}})

sys.modules["vllm"] = types.SimpleNamespace(LLM=RecordingLLM, SamplingParams=dict, __version__="recorder")

from esopt.agent.vllm_engine import VLLMEngine
from esopt.es.distributed import from_env

model_dir, out = sys.argv[1], sys.argv[2]
collective = from_env("gloo")
tok = SimpleNamespace(eos_token_id=2)
for visible in ("slurm", None):  # as torchrun started us (SLURM's list), then with none set
    if visible is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    engine = VLLMEngine(model_dir, tok, gpu_memory_utilization=0.5, max_model_len=128)
    records[-1]["after"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    records[-1]["before"] = before
    engine.close()
try:
    VLLMEngine(model_dir, tok, tensor_parallel_size=2)
except ValueError as e:
    records.append({"refused": str(e)})
gathered = collective.all_gather({"rank": collective.rank, "local_rank": os.environ["LOCAL_RANK"], "records": records})
if collective.rank == 0:
    with open(out, "w") as f:
        json.dump(gathered, f)
collective.close()
"""


def _model_dir(tmp_path, layer_types=("full_attention", "full_attention")):
    d = tmp_path / "model"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"model_type": "qwen3_5_text", "layer_types": list(layer_types)}))
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 5]}))
    return d


@pytest.mark.slow
def test_each_torchrun_rank_starts_its_engine_on_its_own_gpu(tmp_path):
    """2 gloo ranks under torchrun, SLURM's CUDA_VISIBLE_DEVICES of two GPUs: rank r's engine
    starts seeing only the r-th of them, the variable is as it was afterwards; without one,
    rank r sees GPU r; tensor_parallel_size 2 is refused on every rank."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    out = tmp_path / "records.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb"}
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          str(script), str(_model_dir(tmp_path)), str(out)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    ranks = sorted(json.loads(out.read_text()), key=lambda r: r["rank"])
    assert [r["local_rank"] for r in ranks] == ["0", "1"]
    for r, mine in zip(ranks, ("GPU-aaaa", "GPU-bbbb")):
        slurm, unset, refused = r["records"]
        assert slurm["visible"] == mine and slurm["before"] == slurm["after"] == "GPU-aaaa,GPU-bbbb"
        assert unset["visible"] == r["local_rank"] and unset["before"] is None and unset["after"] is None
        for rec in (slurm, unset):
            assert rec["kwargs"].get("tensor_parallel_size", 1) == 1
            assert rec["kwargs"]["gpu_memory_utilization"] == 0.5 and rec["kwargs"]["enable_prefix_caching"] is True
        assert "tensor_parallel_size 2 under torchrun" in refused["refused"]


def test_rank_device_picks_the_local_ranks_entry():
    assert rank_device({}) is None  # not under torchrun: vLLM's own choice
    assert rank_device({"LOCAL_RANK": "1"}) == "1"
    assert rank_device({"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "4,6"}) == "6"
    assert rank_device({"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "GPU-1f, GPU-2e"}) == "GPU-1f"
    with pytest.raises(RuntimeError, match=r"local rank 2 has no GPU of its own: CUDA_VISIBLE_DEVICES='4,6' lists 2"):
        rank_device({"LOCAL_RANK": "2", "CUDA_VISIBLE_DEVICES": "4,6"})


@pytest.fixture
def recorder(monkeypatch):
    """vllm replaced by a module whose LLM records its arguments; `cache_modes` says whether its
    CacheConfig has mamba_cache_mode (vLLM >= 0.15)."""
    calls = []

    class RecordingLLM:
        def __init__(self, **kwargs):
            calls.append(kwargs)

    def install(cache_modes: bool):
        vllm = types.ModuleType("vllm")
        vllm.LLM, vllm.SamplingParams, vllm.__version__ = RecordingLLM, dict, "0.15.0" if cache_modes else "0.14.0"
        config = types.ModuleType("vllm.config")
        config.CacheConfig = type("CacheConfig", (), {"mamba_cache_mode": "none"} if cache_modes else {})
        vllm.config = config
        monkeypatch.setitem(sys.modules, "vllm", vllm)
        monkeypatch.setitem(sys.modules, "vllm.config", config)
        return calls

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    return install


def test_prefix_caching_is_off_for_hybrid_models_where_vllm_cannot_cache_them(tmp_path, recorder, caplog):
    hybrid = _model_dir(tmp_path, ("linear_attention", "full_attention"))
    assert is_hybrid(hybrid) and not is_hybrid(_model_dir(tmp_path / "attention_only"))
    tok = SimpleNamespace(eos_token_id=2)
    calls = recorder(cache_modes=False)
    with caplog.at_level(logging.WARNING, logger="esopt.agent.vllm_engine"):
        old = VLLMEngine(hybrid, tok)
    assert calls[-1]["enable_prefix_caching"] is False and old.prefix_caching is False
    assert "cannot prefix-cache a hybrid" in caplog.text and "0.14.0" in caplog.text
    assert old.stop_ids == [2, 5]  # the tokenizer's eos, then generation_config.json's
    old.close()
    calls = recorder(cache_modes=True)
    new = VLLMEngine(hybrid, tok)
    assert calls[-1]["enable_prefix_caching"] is True and new.prefix_caching is True
    new.close()
    off = VLLMEngine(hybrid, tok, enable_prefix_caching=False)  # asked for off: off
    assert calls[-1]["enable_prefix_caching"] is False and off.prefix_caching is False
    off.close()
    assert prefix_caching_setting(True, False, False) == (True, None)  # attention only: any vLLM caches it


def test_engine_kwargs_carry_presence_penalty_and_every_stop_id(tmp_path, recorder):
    from esopt.agent.engine import Sampling

    calls = recorder(cache_modes=True)
    eng = VLLMEngine(_model_dir(tmp_path), SimpleNamespace(eos_token_id=2))
    assert calls[-1]["enable_prefix_caching"] is True
    greedy = eng._params(Sampling(do_sample=False, presence_penalty=1.5), seed=3)
    assert greedy == {"temperature": 0.0, "max_tokens": 16, "stop_token_ids": [2, 5], "detokenize": False,
                      "presence_penalty": 1.5}
    sampled = eng._params(Sampling(), seed=3)
    assert "presence_penalty" not in sampled and sampled["stop_token_ids"] == [2, 5] and sampled["seed"] == 3
    eng.close()


def test_the_engines_under_torchrun_hold_the_whole_model(tmp_path, recorder, monkeypatch):
    calls = recorder(cache_modes=True)
    VLLMEngine(_model_dir(tmp_path), SimpleNamespace(eos_token_id=2), tensor_parallel_size=2).close()
    assert calls[-1]["tensor_parallel_size"] == 2  # one process, several GPUs: vLLM's own business
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ValueError, match="tensor_parallel_size 2 under torchrun"):
        VLLMEngine(_model_dir(tmp_path), SimpleNamespace(eos_token_id=2), tensor_parallel_size=2)

"""ES inside vLLM perturbs the right tensors of a Qwen3.5 checkpoint (no vLLM needed).

tests/data/vllm_qwen3_5_tiny_params.json is the (name, shape, dtype) table vLLM's own
Qwen3_5ForConditionalGeneration declares for a tiny Qwen3.5 (text and vision), written by
`python -m esopt.agent.vllm_table` (tests/test_vllm_qwen35_table.py checks it against the
installed vLLM, and that vLLM's loader puts each HF tensor where these views read it). Here
the HF causal LM's names are mapped onto zero tensors of that table.
"""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, Qwen3_5ForCausalLM

from esopt.agent.vllm_engine import hf_parameter_layout
from esopt.agent.vllm_worker import MappedPerturber, hf_views
from esopt.es.perturb import Perturber

TABLE = json.loads((Path(__file__).parent / "data" / "vllm_qwen3_5_tiny_params.json").read_text())
PACKED, PREFIX = TABLE["packed_modules_mapping"], TABLE["language_model_prefix"]


def engine_tensors() -> dict[str, torch.Tensor]:
    return {n: torch.zeros(shape, dtype=getattr(torch, dt)) for n, shape, dt in TABLE["params"]}


def layout():
    return hf_parameter_layout(AutoConfig.for_model(**TABLE["config"]), TABLE["dtype"])


def test_the_table_is_vllms_multimodal_qwen35():
    assert TABLE["class"] == "Qwen3_5ForConditionalGeneration" and PREFIX == "language_model."
    names = [n for n, _, _ in TABLE["params"]]
    assert any(n.startswith("visual.") for n in names)
    assert {"in_proj_qkvz", "in_proj_ba", "qkv_proj", "gate_up_proj"} <= set(PACKED)


def test_every_text_tensor_is_covered_and_the_vision_tower_left_alone():
    hf, groups = layout()
    engine = engine_tensors()
    es = MappedPerturber(engine, hf, PACKED, groups, PREFIX, revert="exact")
    assert [n for n, _ in es.params] == list(hf)  # every HF name, in HF order
    assert all(n.startswith("model.") or n == "lm_head.weight" for n in hf)  # Qwen3_5ForCausalLM's names
    assert es.excluded == [n for n in engine if n.startswith("visual.")] and es.excluded
    assert es.numel == sum(torch.Size(v["shape"]).numel() for v in hf.values())
    # every engine tensor of the language model is tiled by HF rows (padding rows aside)
    text = {n: t for n, t in engine.items() if n.startswith(PREFIX)}
    padding = (engine[PREFIX + "model.embed_tokens.weight"].shape[0] - hf["model.embed_tokens.weight"]["shape"][0]) * 64
    assert padding > 0  # vLLM pads the 500-row vocabulary to 512
    assert es.numel == sum(t.numel() for t in text.values()) - 2 * padding  # embedding and lm_head padded alike


def test_fused_parts_sit_in_row_blocks_in_packed_order():
    hf, _ = layout()
    engine = engine_tensors()
    views = dict(hf_views(engine, {n: v["shape"] for n, v in hf.items()}, PACKED, PREFIX))
    gdn = "model.layers.0.linear_attn."
    qkvz = engine[PREFIX + gdn + "in_proj_qkvz.weight"]
    qkv_rows = hf[gdn + "in_proj_qkv.weight"]["shape"][0]  # 2 key dims + value dim, [q; k; v]
    assert views[gdn + "in_proj_qkv.weight"].data_ptr() == qkvz.data_ptr()
    assert views[gdn + "in_proj_z.weight"].data_ptr() == qkvz[qkv_rows:].data_ptr()
    ba = engine[PREFIX + gdn + "in_proj_ba.weight"]
    assert views[gdn + "in_proj_a.weight"].data_ptr() == ba[hf[gdn + "in_proj_b.weight"]["shape"][0]:].data_ptr()
    assert views[gdn + "conv1d.weight"].shape == engine[PREFIX + gdn + "conv1d.weight"].shape  # [dim, 1, kernel] both
    attn = "model.layers.1.self_attn."
    qkv = engine[PREFIX + attn + "qkv_proj.weight"]
    q, k = (hf[attn + p + ".weight"]["shape"][0] for p in ("q_proj", "k_proj"))
    assert views[attn + "v_proj.weight"].data_ptr() == qkv[q + k:].data_ptr()


def test_a_tensor_of_the_language_model_without_hf_name_is_refused():
    hf, _ = layout()
    engine = engine_tensors()
    engine[PREFIX + "model.layers.0.extra.weight"] = torch.zeros(4, 4, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="extra.weight.*no HF parameter"):
        hf_views(engine, {n: v["shape"] for n, v in hf.items()}, PACKED, PREFIX)
    engine = engine_tensors()
    gdn = PREFIX + "model.layers.0.linear_attn.in_proj_qkvz.weight"
    engine[gdn] = torch.zeros(engine[gdn].shape[0] + 8, engine[gdn].shape[1], dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"in_proj_qkvz.weight \[200, 64\]: rows 192..200 have no HF parameter"):
        hf_views(engine, {n: v["shape"] for n, v in hf.items()}, PACKED, PREFIX)  # not perturbed in part


def test_the_mirror_refuses_values_the_hf_dtype_cannot_hold():
    hf, groups = layout()
    engine = engine_tensors()
    engine[PREFIX + "model.layers.0.linear_attn.A_log"] += 1 + 2 ** -20  # an fp32 value no bf16 equals
    with pytest.raises(ValueError, match="A_log holds values that are not torch.bfloat16 values"):
        MappedPerturber(engine, hf, PACKED, groups, PREFIX)
    narrow = {**hf, "model.norm.weight": {**hf["model.norm.weight"], "dtype": "float32"}}
    with pytest.raises(ValueError, match="norm.weight is torch.float32 but the engine holds it in torch.bfloat16"):
        MappedPerturber(engine_tensors(), narrow, PACKED, groups, PREFIX)


def hf_model() -> Qwen3_5ForCausalLM:
    torch.manual_seed(0)
    return Qwen3_5ForCausalLM(AutoConfig.for_model(**TABLE["config"]).text_config).to(torch.bfloat16)


def loaded_engine(model):
    """The table's tensors holding the HF model's weights as vLLM's loader leaves them (A_log
    widened to fp32), and the HF layout and groups."""
    hf, groups = layout()
    engine = engine_tensors()
    for name, view in hf_views(engine, {n: v["shape"] for n, v in hf.items()}, PACKED, PREFIX):
        view.copy_(dict(model.named_parameters())[name].detach())
    return engine, hf, groups


def assert_same(es: MappedPerturber, model) -> None:
    want = dict(model.named_parameters())
    for name, t in es.params:
        assert torch.equal(t.view(torch.int16), want[name].detach().view(torch.int16)), name
    for name, view, _ in es.mirrors:  # the engine's fp32 holds the HF bf16 value exactly
        assert view.dtype == torch.float32 and torch.equal(view, want[name].detach().float()), name


@pytest.mark.parametrize("rounding,revert", [("nearest", "exact"), ("nearest", "snapshot"), ("stochastic", "exact"),
                                             ("fp32_master", "exact")])
def test_a_log_kept_in_fp32_holds_the_hf_bf16_value_through_apply_revert_update(rounding, revert):
    model = hf_model()
    engine, hf, groups = loaded_engine(model)
    es = MappedPerturber(engine, hf, PACKED, groups, PREFIX, rounding=rounding, revert=revert)
    assert [n for n, _, _ in es.mirrors] == ["model.layers.0.linear_attn.A_log"]
    ref = Perturber(model, rounding=rounding, revert=revert)
    start = {n: t.clone() for n, t in engine.items()}
    a_log = engine[PREFIX + "model.layers.0.linear_attn.A_log"]
    sigma = 1e-2
    for seed in (11, 12):
        es.apply(seed, sigma)
        ref.apply(seed, sigma)
        assert_same(es, model)
        # perturbing the fp32 tensor itself would give other weights than the HF path's
        direct = start[PREFIX + "model.layers.0.linear_attn.A_log"].clone()
        Perturber.from_tensors([("model.layers.0.linear_attn.A_log", direct)], groups).apply(seed, sigma)
        assert not torch.equal(direct, a_log)
        es.revert()
        ref.revert()
        for n, t in engine.items():  # bit-exact revert, the fp32 tensor included
            assert torch.equal(t, start[n]), n
    es.update([11, 12], [0.3, -0.2])
    ref.update([11, 12], [0.3, -0.2])
    assert_same(es, model)
    assert not torch.equal(a_log, start[PREFIX + "model.layers.0.linear_attn.A_log"])


def test_a_change_behind_the_perturbers_back_is_refused():
    model = hf_model()
    engine, hf, groups = loaded_engine(model)
    es = MappedPerturber(engine, hf, PACKED, groups, PREFIX)
    engine[PREFIX + "model.layers.0.linear_attn.A_log"] += 0.5
    with pytest.raises(RuntimeError, match="A_log changed outside the perturber"):
        es.apply(1, 1e-2)

"""The vLLM engine with ES inside it, on a tiny Qwen3 model on CPU.

Runs where vLLM is installed (.ci/run builds that environment: docs/engine.md, and sets
ESOPT_VLLM_REQUIRED so a broken install fails instead of skipping); skipped elsewhere,
except the missing-install message. One engine serves the whole module (an
engine start takes about a minute on 2 cores).
"""

import importlib.util
import os
import sys

import pytest
import torch

from esopt.agent.engine import HFEngine, Sampling
from esopt.es.fidelity import Fidelity
from esopt.es.perturb import Perturber
from esopt.models.load import load_model_and_tokenizer

HAS_VLLM = importlib.util.find_spec("vllm") is not None
if os.environ.get("ESOPT_VLLM_REQUIRED") and not HAS_VLLM:  # .ci/run's engine environment
    raise RuntimeError("ESOPT_VLLM_REQUIRED is set but vllm does not import")
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (the engine environment of docs/engine.md)")


def test_missing_vllm_names_the_extra(monkeypatch):
    if HAS_VLLM:
        monkeypatch.setitem(sys.modules, "vllm", None)  # an import of vllm now fails
    from esopt.agent.vllm_engine import VLLMEngine

    with pytest.raises(ImportError, match=r"esopt\[vllm\]|\.\[vllm\]"):
        VLLMEngine("unused", tokenizer=None)


@pytest.fixture(scope="module")
def engine(qwen3_model):
    from esopt.agent.vllm_engine import VLLMEngine

    _, tok = load_model_and_tokenizer(qwen3_model)
    eng = VLLMEngine(qwen3_model, tok, gpu_memory_utilization=0.1, max_model_len=1024)
    yield eng
    eng.close()


def hf_state(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def assert_same_weights(engine, model):
    got = engine.state_dict()
    want = hf_state(model)
    assert got.keys() == want.keys()
    for name in want:
        assert torch.equal(got[name], want[name]), name


@needs_vllm
def test_every_hf_tensor_maps_onto_the_engine_and_starts_equal(engine, qwen3_model):
    model, _ = load_model_and_tokenizer(qwen3_model)
    names = set(hf_state(model))
    assert any(".q_proj." in n for n in names) and any(".gate_proj." in n for n in names)  # fused in vLLM
    assert_same_weights(engine, model)


def _long_prompt(engine, tok):
    block = engine.llm.llm_engine.vllm_config.cache_config.block_size
    ids = tok("r1c1=1 r2c2=2 r3c3=3 r4c4=4 " * 200, add_special_tokens=False)["input_ids"]
    assert len(ids) > 2 * block, "the prompt must fill whole cache blocks to be cached"
    return ids[: 2 * block + 5]


def _greedy_logprobs(engine, prompt):
    from vllm import SamplingParams

    out = engine.llm.generate([{"prompt_token_ids": prompt}], SamplingParams(temperature=0.0, max_tokens=4, logprobs=0),
                              use_tqdm=False)[0].outputs[0]
    return [lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs)]


@needs_vllm
def test_a_weight_change_never_reuses_cached_keys_and_values(engine, qwen3_model):
    """Without a reset the prefix cache would serve the old weights' keys and values (shown
    first); through the perturber every member computes its own."""
    _, tok = load_model_and_tokenizer(qwen3_model)
    prompt = _long_prompt(engine, tok)
    before = _greedy_logprobs(engine, prompt)  # caches the prompt's blocks
    engine.llm.collective_rpc("es_apply", args=(5, 0.05, False))  # behind the perturber's back: no reset
    stale = _greedy_logprobs(engine, prompt)
    engine.reset_prefix_cache()
    fresh = _greedy_logprobs(engine, prompt)
    engine.llm.collective_rpc("es_revert")
    engine.reset_prefix_cache()
    assert stale != fresh  # the hazard is real: the stale cache changes what the model computes
    ev = engine.perturber()
    assert _greedy_logprobs(engine, prompt) == before
    ev.apply(5, 0.05)
    assert _greedy_logprobs(engine, prompt) == fresh
    ev.revert()
    assert _greedy_logprobs(engine, prompt) == before


@needs_vllm
def test_vllm_forward_matches_hf_under_the_same_perturbation(engine, qwen3_model):
    """The engine computes with the weights the perturber wrote: its log-probs of the prompt
    follow HF's forward on the same perturbed weights (bf16 kernels differ a little)."""
    from vllm import SamplingParams

    model, tok = load_model_and_tokenizer(qwen3_model, dtype="float32")
    prompt = _long_prompt(engine, tok)
    ev = engine.perturber()
    ev.apply(21, 0.05)
    try:
        out = engine.llm.generate([{"prompt_token_ids": prompt}], SamplingParams(max_tokens=1, prompt_logprobs=0),
                                  use_tqdm=False)[0]
        got = torch.tensor([d[t].logprob for t, d in zip(prompt[1:], out.prompt_logprobs[1:])])
        weights = engine.state_dict()
    finally:
        ev.revert()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(weights[n].float())
        logits = model(torch.tensor([prompt])).logits[0, :-1].float().log_softmax(-1)
    want = logits[torch.arange(len(prompt) - 1), torch.tensor(prompt[1:])]
    base_model, _ = load_model_and_tokenizer(qwen3_model, dtype="float32")
    with torch.no_grad():
        base = base_model(torch.tensor([prompt])).logits[0, :-1].float().log_softmax(-1)
    unperturbed = base[torch.arange(len(prompt) - 1), torch.tensor(prompt[1:])]
    err = (got - want).abs().mean().item()
    assert err < 0.05 and err < 0.2 * (unperturbed - want).abs().mean().item()


@needs_vllm
def test_per_request_seeds_give_common_random_numbers(engine, qwen3_model):
    _, tok = load_model_and_tokenizer(qwen3_model)
    prompts = [tok(f"r{i}c1=", add_special_tokens=False)["input_ids"] for i in range(1, 5)]
    s = Sampling(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=6)
    a = engine.generate(prompts, s, ("t", 1), keys=[0, 1, 2, 3])
    b = engine.generate(prompts[1:], s, ("t", 1), keys=[1, 2, 3])  # episode 0 already done
    c = engine.generate(prompts, s, ("t", 2), keys=[0, 1, 2, 3])
    assert [x.token_ids for x in a[1:]] == [x.token_ids for x in b]
    assert [x.token_ids for x in a] != [x.token_ids for x in c]
    counters: dict[str, int] = {}
    g = engine.generate(prompts, Sampling(do_sample=False, max_new_tokens=6), ("t", 1), counters=counters)
    assert counters["generated_tokens"] == sum(len(x.token_ids) for x in g)
    assert all(x.text == tok.decode(x.token_ids, skip_special_tokens=True) for x in g)
    with pytest.raises(NotImplementedError, match="HF engine"):
        engine.generate(prompts, s, ("t", 1), logprobs=True)


@needs_vllm
def test_greedy_replies_match_hf_generate(engine, qwen3_model):
    """Same prompts, greedy: most replies are the same tokens (kernels differ in bf16 rounding,
    so an argmax may flip on a near tie)."""
    model, tok = load_model_and_tokenizer(qwen3_model)
    prompts = [tok(f"r{i}c{j}=", add_special_tokens=False)["input_ids"] for i in range(1, 5) for j in range(1, 5)]
    greedy = Sampling(do_sample=False, max_new_tokens=6)
    hf = HFEngine(model, tok).generate(prompts, greedy, ("g",))
    ev = engine.generate(prompts, greedy, ("g",))
    same = sum(a.token_ids == b.token_ids for a, b in zip(hf, ev))
    assert same >= 0.75 * len(prompts), f"{same}/{len(prompts)} greedy replies agree"


@needs_vllm
def test_presence_penalty_follows_hf_and_changes_replies(engine, qwen3_model):
    """The same presence penalty in both engines (vLLM's SamplingParams, HF's logits processor):
    the penalty changes greedy replies, and the two engines' penalized replies mostly agree."""
    from esopt.agent.tokens import ChatTokens
    from esopt.envs.sudoku import SudokuEnv, generate_puzzles, instructions

    model, tok = load_model_and_tokenizer(qwen3_model)
    chat = ChatTokens(tok, instructions(4, "short"))  # Sudoku turns: replies such as r2c2=3 repeat tokens
    prompts = [chat.prompt(SudokuEnv(max_turns=8).reset(t)) for t in generate_puzzles(4, 3, 16, seed=2, split="train")]
    plain = Sampling(do_sample=False, max_new_tokens=12)
    pen = Sampling(do_sample=False, max_new_tokens=12, presence_penalty=2.0)
    hf = HFEngine(model, tok).generate(prompts, pen, ("p",))
    ev = engine.generate(prompts, pen, ("p",))
    ev_plain = engine.generate(prompts, plain, ("p",))
    assert [c.token_ids for c in ev] != [c.token_ids for c in ev_plain]
    repeats = lambda cs: sum(len(c.token_ids) - len(set(c.token_ids)) for c in cs)
    assert repeats(ev) < repeats(ev_plain)
    same = sum(a.token_ids == b.token_ids for a, b in zip(hf, ev))
    assert same >= 0.75 * len(prompts), f"{same}/{len(prompts)} penalized greedy replies agree"


@needs_vllm
def test_replies_stop_at_every_eos_id_of_the_generation_config(engine, qwen3_model, tmp_path):
    """A generation_config.json with two eos ids (as Qwen3.5's <|im_end|>, <|endoftext|>):
    the engine stops at the second one too: at a token a reply emitted before its end, and not
    earlier in it. Seeded sampling at T 1, not greedy, so the replies vary: the warm start
    differs by CPU type, and an Intel-built model's greedy replies offered no such token. The
    same batch with the same seeds both times: each request's draws repeat, and so its reply
    up to the stop."""
    import json
    import shutil

    from esopt.agent.engine import model_stop_token_ids

    _, tok = load_model_and_tokenizer(qwen3_model)
    prompts = [tok(f"r{i}c{j}=", add_special_tokens=False)["input_ids"] for i in range(1, 5) for j in range(1, 5)]
    sampled = Sampling(do_sample=True, temperature=1.0, max_new_tokens=12)
    free = engine.generate(prompts, sampled, ("e",))
    assert [c.token_ids for c in engine.generate(prompts, sampled, ("e",))] == [c.token_ids for c in free]
    i, k = next((i, k) for i, c in enumerate(free) for k in range(len(c.token_ids) - 1)
                if c.token_ids[k] not in c.token_ids[:k] and c.token_ids[k] != tok.eos_token_id)
    other = free[i].token_ids[k]  # emitted at step k of reply i, not before, and not its last
    two = tmp_path / "two_eos"
    shutil.copytree(qwen3_model, two)
    gen = json.loads((two / "generation_config.json").read_text())
    (two / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": [tok.eos_token_id, other]}))
    assert engine.stop_ids == [tok.eos_token_id]
    engine.stop_ids = model_stop_token_ids(two, tok)  # as VLLMEngine(two, ...) would read them
    try:
        stopped = engine.generate(prompts, sampled, ("e",))[i]
    finally:
        engine.stop_ids = [tok.eos_token_id]
    assert stopped.token_ids == free[i].token_ids[: k + 1]


@needs_vllm
def test_this_vllm_prefix_caches_hybrid_models(engine):
    """vLLM >= 0.15 (CacheConfig.mamba_cache_mode): prefix caching stays on for Qwen3.5."""
    import vllm

    from esopt.agent.vllm_engine import caches_hybrid_prefixes

    assert caches_hybrid_prefixes(vllm) and engine.prefix_caching


@needs_vllm
def test_same_seeds_and_rewards_give_identical_weights_on_hf_and_vllm(engine, qwen3_model):
    """apply / revert / update with the same seeds and coefficients, compared tensor by tensor
    under HF names; linear weights included (vLLM's CPU backend would repack them away).
    Last in the module: the update leaves the engine off its base weights."""
    model, _ = load_model_and_tokenizer(qwen3_model)
    base = hf_state(model)
    hf, ev = Perturber(model), engine.perturber()
    hf.apply(11, 0.01)
    ev.apply(11, 0.01)
    assert_same_weights(engine, model)
    moved = engine.state_dict()
    for name in ("model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.up_proj.weight",
                 "model.layers.0.self_attn.o_proj.weight"):
        assert not torch.equal(moved[name], base[name]), f"{name} did not move"
    hf.revert()
    ev.revert()
    assert_same_weights(engine, model)
    assert all(torch.equal(engine.state_dict()[n], base[n]) for n in base)  # the exact revert
    f_hf, f_ev = Fidelity(), Fidelity()
    hf.update([11, 12, 13], [0.004, -0.002, 0.001], fidelity=f_hf)
    ev.update([11, 12, 13], [0.004, -0.002, 0.001], fidelity=f_ev)
    assert_same_weights(engine, model)
    assert f_ev.summary() == f_hf.summary()


@needs_vllm
def test_cached_multi_turn_prompts_give_the_re_encoded_replies(engine, qwen3_model):
    """history_turns null: turn t's prompt is the whole conversation; the prefix cache serves
    turns 1..t-1, and greedy replies are those of re-encoding every turn."""
    from esopt.agent.rollout import rollout
    from esopt.agent.vllm_engine import ReEncoding
    from esopt.envs.sudoku import SudokuEnv, generate_puzzles, instructions

    _, tok = load_model_and_tokenizer(qwen3_model)
    tasks = generate_puzzles(4, 3, 6, seed=2, split="train")

    def run(policy):
        counters: dict[str, int] = {}
        trajs = rollout(policy, tok, lambda: SudokuEnv(max_turns=8), tasks, system=instructions(4, "short"),
                        sampling=Sampling(do_sample=False, max_new_tokens=8), seed=0, max_turns=8,
                        history_turns=None, counters=counters)
        return [[t.action for t in tr.turns] for tr in trajs], counters

    cached, c1 = run(engine)
    again, c2 = run(ReEncoding(engine))
    assert cached == again and c1 == c2
    assert max(len(a) for a in cached) > 2  # several turns: later prompts hold earlier ones

"""The engine interface's decoding controls on the HF path: presence penalty, stop ids from the
model's generation config, the device of the HF copy (vLLM's side: tests/test_vllm_engine.py)."""

import json
import shutil
from types import SimpleNamespace

import pytest
import torch

from esopt.agent.engine import HFEngine, PresencePenalty, Sampling, model_stop_token_ids, stop_token_ids, trim_at_eos
from esopt.agent.engines import hf_model_device
from esopt.models.load import load_model_and_tokenizer


@pytest.fixture(scope="module")
def tiny(smoke_model):
    model, tok = load_model_and_tokenizer(smoke_model, dtype="float32")
    prompts = [tok(f"r{i}c{j}=", add_special_tokens=False)["input_ids"] for i in range(1, 4) for j in range(1, 3)]
    return model, tok, prompts


def test_profile_reads_presence_penalty_and_defaults_to_none():
    prof = {"temperature": 1.0, "top_p": 1.0, "top_k": 40}
    assert Sampling.from_profile(prof, 64).presence_penalty == 0.0
    assert Sampling.from_profile({**prof, "presence_penalty": 1.5}, 64).presence_penalty == 1.5
    assert Sampling.from_profile({**prof, "presence_penalty": 2}, 64, do_sample=False).presence_penalty == 2.0
    for bad in (-1, 2.5):  # vLLM takes OpenAI's range [-2, 2]; a negative penalty is not offered
        with pytest.raises(ValueError, match=rf"presence_penalty must be in \[0, 2\], got {bad}"):
            Sampling(presence_penalty=bad)


def test_presence_penalty_lowers_each_generated_token_once_and_spares_the_prompt():
    prompt_width = 3
    ids = torch.tensor([[9, 9, 4, 5, 5, 7],  # prompt 9 9 4 (4 is never generated); generated 5 5 7
                        [0, 2, 2, 3, 1, 1]])
    scores = torch.zeros(2, 10)
    out = PresencePenalty(1.5, prompt_width)(ids, scores)
    want = torch.zeros(2, 10)
    want[0, [5, 7]] = -1.5  # 5 twice: still once
    want[1, [3, 1]] = -1.5
    assert torch.equal(out, want)
    assert torch.equal(PresencePenalty(1.5, 6)(ids, scores), scores)  # nothing generated yet


def _greedy_with_penalty(model, prompt, penalty, steps):
    """The definition, step by step: argmax of logits - penalty * [token in the reply so far]."""
    ids, reply = list(prompt), []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            if reply:
                logits[torch.tensor(sorted(set(reply)))] -= penalty
            nxt = int(logits.argmax())
            ids.append(nxt)
            reply.append(nxt)
    return reply


def test_greedy_replies_with_presence_penalty_follow_the_definition(tiny):
    """The tiny model repeats one token with a large margin; its logits scaled by 0.1 (a hook
    on the output layer) leave the penalty room to change its choices."""
    model, tok, prompts = tiny
    hook = model.lm_head.register_forward_hook(lambda mod, args, out: out * 0.1)
    try:
        _check_presence_penalty(model, tok, prompts)
    finally:
        hook.remove()


def _check_presence_penalty(model, tok, prompts):
    eng = HFEngine(model, tok)
    eng.stop_ids = [len(tok) + 1]  # an id no reply holds: never stop early, compare whole replies
    for penalty in (0.7, 2.0):
        got = eng.generate(prompts[:3], Sampling(do_sample=False, max_new_tokens=8, presence_penalty=penalty), ("p",))
        for p, c in zip(prompts, got):
            assert c.token_ids == _greedy_with_penalty(model, p, penalty, 8)
    repeats = lambda cs: sum(len(c.token_ids) - len(set(c.token_ids)) for c in cs)
    pen = eng.generate(prompts, Sampling(do_sample=False, max_new_tokens=8, presence_penalty=2.0), ("p",))
    plain = eng.generate(prompts, Sampling(do_sample=False, max_new_tokens=8), ("p",))
    assert repeats(pen) < repeats(plain)  # the penalty breaks the tiny model's repetitions


def test_no_presence_penalty_decodes_exactly_as_before(tiny, monkeypatch):
    """presence_penalty 0 adds no logits processor: generate is called as it was before the
    penalty existed, so greedy and sampled replies are bit for bit the same."""
    model, tok, prompts = tiny
    calls = []
    real = model.generate
    monkeypatch.setattr(model, "generate", lambda **kw: calls.append(kw) or real(**kw))
    for s in (Sampling(do_sample=False, max_new_tokens=6), Sampling(max_new_tokens=6, temperature=1.0, top_k=0)):
        got = HFEngine(model, tok).generate(prompts, s, ("s", 1))
        assert "logits_processor" not in calls[-1] and calls[-1]["eos_token_id"] == tok.eos_token_id
        # the call as the engine made it before presence penalties and stop-id lists
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
        attn = (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()
        if s.do_sample:
            from esopt.seeding import derive_seed

            torch.manual_seed(derive_seed("s", 1, 0))
        out = real(input_ids=ids, attention_mask=attn, **s.generate_kwargs(), pad_token_id=tok.pad_token_id,
                   eos_token_id=tok.eos_token_id)
        want = [trim_at_eos(r[width:].tolist(), tok.eos_token_id) for r in out]
        assert [c.token_ids for c in got] == want


def test_replies_stop_at_every_eos_id_of_the_generation_config(tiny, smoke_model, tmp_path):
    """A model whose generation_config.json lists two eos ids (as Qwen3.5's: <|im_end|> and
    <|endoftext|>) stops at the second one too, not only at the tokenizer's eos."""
    model, tok, prompts = tiny
    eng = HFEngine(model, tok)
    free = eng.generate(prompts[:1], Sampling(do_sample=False, max_new_tokens=8), ("e",))[0].token_ids
    assert len(free) == 8 and tok.eos_token_id not in free  # with the tokenizer's eos alone: no stop
    k = next(i for i, t in enumerate(free) if t not in free[:i])
    other = free[k]  # a token the model emits greedily at step k, and not before

    two = tmp_path / "two_eos"
    shutil.copytree(smoke_model, two)
    gen = json.loads((two / "generation_config.json").read_text())
    gen["eos_token_id"] = [tok.eos_token_id, other]
    (two / "generation_config.json").write_text(json.dumps(gen))
    assert model_stop_token_ids(two, tok) == [tok.eos_token_id, other]
    assert model_stop_token_ids(smoke_model, tok) == [tok.eos_token_id]

    m2, t2 = load_model_and_tokenizer(two, dtype="float32")
    stopped = HFEngine(m2, t2).generate(prompts[:1], Sampling(do_sample=False, max_new_tokens=8), ("e",))[0]
    assert stopped.token_ids == free[: k + 1]  # through the second eos id, then stops


def test_stop_ids_are_the_tokenizer_eos_then_the_generation_configs(tiny):
    _, tok, _ = tiny
    e = tok.eos_token_id
    assert stop_token_ids(tok, None) == [e]
    assert stop_token_ids(tok, [e + 1, e, e + 1]) == [e, e + 1]
    assert stop_token_ids(tok, e + 2) == [e, e + 2]
    assert trim_at_eos([4, e + 1, 5, e], [e, e + 1]) == [4, e + 1]
    assert stop_token_ids(SimpleNamespace(eos_token_id=None), None) == []  # no eos anywhere: run to the cap


def test_the_hf_copy_stays_on_the_host_when_the_engine_is_vllm():
    assert hf_model_device({"name": "vllm", "gpu_memory_utilization": 0.9}) == "cpu"
    assert hf_model_device({"name": "hf"}) is None  # the rank's GPU where there is one (default_device)

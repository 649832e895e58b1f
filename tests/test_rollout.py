"""Batched multi-turn rollouts with the tiny Qwen3.5 model and the Sudoku environment."""

import pytest
import torch

from esopt.agent.rollout import Sampling, Trajectory, Turn, build_messages, rollout
from esopt.envs.sudoku import SudokuEnv, generate_puzzles, instructions
from esopt.models.load import load_model_and_tokenizer


def run(model, tok, tasks, sampling, seed=0, batch_size=None):
    return rollout(model, tok, lambda: SudokuEnv(max_turns=5), tasks, system=instructions(4, "short"),
                   sampling=sampling, seed=seed, max_turns=5, batch_size=batch_size)


# full attention only (the smoke and tiny default models) and the Qwen3.5 mix with a linear-attention layer
MODELS = pytest.mark.parametrize("model_dir", ["smoke_model", "hybrid_model"])


@MODELS
def test_left_padded_batch_gives_the_same_logits_as_one_prompt(model_dir, request):
    model, tok = load_model_and_tokenizer(request.getfixturevalue(model_dir), dtype="float32")
    short = tok.apply_chat_template([{"role": "user", "content": "1.34"}], tokenize=False, add_generation_prompt=True)
    long = tok.apply_chat_template([{"role": "system", "content": "Sudoku 4x4. Reply rRcC=V"},
                                    {"role": "user", "content": "placed r1c2=3\n1.34\n34.2\n.143\n432."}], tokenize=False, add_generation_prompt=True)
    enc = tok([short, long], return_tensors="pt", padding=True, add_special_tokens=False)
    alone = tok([short], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        batched = model(**enc).logits[0, -1]
        single = model(**alone).logits[0, -1]
    assert enc["input_ids"].shape[1] > alone["input_ids"].shape[1]  # really padded
    assert torch.allclose(batched, single, atol=1e-4)


@MODELS
def test_rollout_records_every_turn_and_never_crashes_on_model_output(model_dir, request):
    model, tok = load_model_and_tokenizer(request.getfixturevalue(model_dir))
    tasks = generate_puzzles(4, 2, 6, seed=3, split="train")
    trajs = run(model, tok, tasks, Sampling(do_sample=True, max_new_tokens=8))
    assert [t.task_id for t in trajs] == [t.id for t in tasks]
    for tr in trajs:
        assert tr.done and 1 <= tr.num_turns <= 5
        assert tr.info["turns"] == tr.num_turns
        assert tr.reward in (0.0, 1.0) and tr.reward == float(tr.info["success"])


@MODELS
def test_same_seed_same_episodes_and_batch_size_does_not_matter_for_sampling_seed(model_dir, request):
    model, tok = load_model_and_tokenizer(request.getfixturevalue(model_dir))
    tasks = generate_puzzles(4, 2, 6, seed=4, split="train")
    s = Sampling(do_sample=True, max_new_tokens=8)
    a = [[t.action for t in tr.turns] for tr in run(model, tok, tasks, s, seed=9)]
    b = [[t.action for t in tr.turns] for tr in run(model, tok, tasks, s, seed=9)]
    c = [[t.action for t in tr.turns] for tr in run(model, tok, tasks, s, seed=10)]
    assert a == b and a != c


def test_greedy_reply_cache_changes_nothing(smoke_model, monkeypatch):
    """A repeated prompt reuses the earlier greedy reply: same episodes, fewer generate calls."""
    model, tok = load_model_and_tokenizer(smoke_model, dtype="float32")
    tasks = generate_puzzles(4, 3, 8, seed=5, split="train")
    greedy = Sampling(do_sample=False, max_new_tokens=8)
    calls = []
    real_generate = model.generate
    monkeypatch.setattr(model, "generate", lambda **kw: calls.append(kw["input_ids"].shape[0]) or real_generate(**kw))
    cached = run(model, tok, tasks, greedy, batch_size=1)
    rows = sum(calls)
    # reference: each episode alone, no cache shared with the others
    alone = [run(model, tok, [t], greedy, batch_size=1)[0] for t in tasks]
    assert [[x.action for x in tr.turns] for tr in cached] == [[x.action for x in tr.turns] for tr in alone]
    # one generated row per distinct prompt (history_turns=0: the prompt is the latest observation)
    seen = {obs for tr in cached for obs in [tr.first_observation] + [t.observation for t in tr.turns[:-1]]}
    assert rows == len(seen) < sum(tr.num_turns for tr in cached)


def test_history_window_keeps_the_last_exchanges():
    tr = Trajectory("t", "sys", "obs0", [Turn("a1", "obs1", 0.0), Turn("a2", "obs2", 0.0)])
    roles = lambda msgs: [(m["role"], m["content"]) for m in msgs]
    assert roles(build_messages(tr, 0)) == [("system", "sys"), ("user", "obs2")]
    assert roles(build_messages(tr, 1)) == [("system", "sys"), ("user", "obs1"), ("assistant", "a2"), ("user", "obs2")]
    assert roles(build_messages(tr, None)) == [("system", "sys"), ("user", "obs0"), ("assistant", "a1"), ("user", "obs1"),
                                               ("assistant", "a2"), ("user", "obs2")]

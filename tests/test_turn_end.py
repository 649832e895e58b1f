"""A reply ends its turn at any of the model's stop ids (Qwen3.5: <|im_end|> and <|endoftext|>
from generation_config.json), in the token rollouts and the policy analyst alike, not only at
the tokenizer's eos."""

import json
import shutil

import pytest

from esopt.agent.engine import HFEngine, Sampling
from esopt.agent.tokens import ChatTokens, reply_stop_ids, token_rollout
from esopt.envs.sudoku import SudokuEnv, generate_puzzles, instructions
from esopt.models.load import load_model_and_tokenizer
from esopt.prompt.analyst import PolicyAnalyst

GREEDY = Sampling(do_sample=False, max_new_tokens=8)


@pytest.fixture(scope="module")
def smoke(smoke_model):
    return load_model_and_tokenizer(smoke_model, dtype="float32")


def first_new_token(ids, eos):
    """(k, ids[k]): the first position whose token is neither eos nor seen before it."""
    return next((k, t) for k, t in enumerate(ids) if t != eos and t not in ids[:k])


def with_second_eos(smoke_model, tmp_path, other):
    """The smoke model whose generation_config.json lists [the tokenizer's eos, other]."""
    two = tmp_path / f"eos_{other}"
    shutil.copytree(smoke_model, two)
    path = two / "generation_config.json"
    gen = json.loads(path.read_text())
    gen["eos_token_id"] = [gen["eos_token_id"], other]
    path.write_text(json.dumps(gen))
    return load_model_and_tokenizer(two, dtype="float32")


def episode(model, tok):
    system = instructions(4, "short")
    tasks = generate_puzzles(4, 2, 1, seed=0, split="train")
    return token_rollout(model, tok, lambda: SudokuEnv(2), tasks, system, GREEDY, seed=0, max_turns=2,
                         history_turns=None)[0], system


def test_a_reply_ending_at_the_generation_configs_second_eos_ends_its_turn(smoke, smoke_model, tmp_path):
    model, tok = smoke
    assert reply_stop_ids(HFEngine(model, tok), tok) == {tok.eos_token_id}  # the tiny model: its eos alone
    free, system = episode(model, tok)
    k, other = first_new_token(free.tokens[0].gen_ids, tok.eos_token_id)

    m2, t2 = with_second_eos(smoke_model, tmp_path, other)
    assert reply_stop_ids(HFEngine(m2, t2), t2) == {t2.eos_token_id, other}
    tr, _ = episode(m2, t2)
    first, second = tr.tokens[0], tr.tokens[1]
    assert first.gen_ids == free.tokens[0].gen_ids[: k + 1]  # stopped at the second eos id
    chat = ChatTokens(t2, system)
    assert chat.closing(True) != chat.closing(False)  # the tiny template's closing starts with its eos
    # the turn ended: the template's closing less its eos follows, not the whole closing
    assert second.context_ids == chat.closing(True) + chat.user(tr.turns[0].observation)
    assert not second.new_sequence


def test_the_policy_analyst_stops_at_the_generation_configs_second_eos(smoke, smoke_model, tmp_path):
    model, tok = smoke
    prompt = "Improve the skill document."
    free = PolicyAnalyst(model, tok, max_new_tokens=8, temperature=0)
    free.complete([prompt], seed=0)
    assert free.last_stats["generated_tokens"] == 8  # the tokenizer's eos alone: no stop
    ids = HFEngine(model, tok).generate([free.encode(prompt)[0]], GREEDY, ("a",))[0].token_ids  # the same greedy reply
    k, other = first_new_token(ids, tok.eos_token_id)

    m2, t2 = with_second_eos(smoke_model, tmp_path, other)
    stopped = PolicyAnalyst(m2, t2, max_new_tokens=8, temperature=0)
    reply = stopped.complete([prompt], seed=0)[0]
    assert stopped.last_stats["generated_tokens"] == k + 1
    assert reply == t2.decode(ids[: k + 1], skip_special_tokens=True).strip()

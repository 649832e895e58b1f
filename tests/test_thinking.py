"""Rollouts with Qwen3.5's thinking chat template: what the model was conditioned on, what
the loss masks, and what the environment gets, turn by turn."""

import copy
from types import SimpleNamespace

import pytest
import torch

from esopt.agent.rollout import Sampling, Trajectory, Turn, build_messages, render_prompt, rollout
from esopt.agent.tokens import ChatTokens, token_rollout
from esopt.envs.sudoku import SudokuEnv, generate_puzzles, instructions
from esopt.models.load import load_model_and_tokenizer
from esopt.models.tokenizer import THINK_CLOSE, THINK_OPEN, qwen35_chat_template, train_tokenizer
from esopt.rl.losses import token_logprobs
from esopt.rl.trainer import collate

SYSTEM = "Answer with one move."
EMPTY_THINK = "<think>\n\n</think>\n\n"


def _tokenizer(template=None):
    tok = train_tokenizer(["plan the move r1c2=3 obs board feedback placed"] * 20, vocab_size=300)
    tok.add_tokens([THINK_OPEN, THINK_CLOSE])  # one token each, not special: decoding keeps them, as Qwen's
    if template is not None:
        tok.chat_template = template
    return tok


@pytest.fixture(scope="module")
def qwen35_tok():
    return _tokenizer(qwen35_chat_template())


def _render(tok, msgs, gen, **kw):
    return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen, **kw)


def test_qwen35_template_thinks_by_default_and_drops_earlier_thinking(qwen35_tok):
    tok = qwen35_tok
    base = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    head = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    assert _render(tok, base, True) == head + "<think>\n"
    assert _render(tok, base, True, enable_thinking=True) == head + "<think>\n"
    assert _render(tok, base, True, enable_thinking=False) == head + EMPTY_THINK
    reply = {"role": "assistant", "content": "A", "reasoning_content": "R"}
    assert _render(tok, base + [reply], False) == head + "<think>\nR\n</think>\n\nA<|im_end|>\n"
    # reasoning written inline in content is split the same way
    inline = {"role": "assistant", "content": "R\n</think>\n\nA"}
    assert _render(tok, base + [inline], False) == _render(tok, base + [reply], False)
    # once a newer user query follows, the reply is rendered without its think block
    later = _render(tok, base + [reply, {"role": "user", "content": "O"}], True)
    assert later == head + "A<|im_end|>\n<|im_start|>user\nO<|im_end|>\n<|im_start|>assistant\n<think>\n"
    # a wrapped tool result is not a query: the reply before it keeps its reasoning
    tool = _render(tok, base + [reply, {"role": "user", "content": "<tool_response>x</tool_response>"}], True)
    assert "<think>\nR\n</think>" in tool


def test_chat_tokens_accept_dropped_thinking_and_refuse_other_unstable_templates(qwen35_tok):
    own = _tokenizer()
    assert not ChatTokens(own, SYSTEM).drops_thinking
    for thinking in (False, True):
        assert ChatTokens(qwen35_tok, SYSTEM, thinking).drops_thinking
    with pytest.raises(ValueError, match="no thinking mode"):
        ChatTokens(own, SYSTEM, thinking=True)
    # a template that counts the user's messages in the system prompt re-renders the history differently
    counting = _tokenizer(
        "{{ '<|im_start|>system\\n' + messages[0]['content'] + ' ('"
        " + (messages|selectattr('role', 'equalto', 'user')|list|length)|string + ')<|im_end|>\\n' }}"
        "{% for m in messages[1:] %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    with pytest.raises(ValueError, match="not only by dropping its think block"):
        ChatTokens(counting, SYSTEM)


class ScriptedPolicy(torch.nn.Module):
    """Replies with reply(turn, row) and records the ids each call was conditioned on."""

    def __init__(self, tok, reply):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))  # rollouts read the device from a parameter
        self.tok, self.reply, self.seen = tok, reply, []

    def generate(self, input_ids, attention_mask, max_new_tokens, return_dict_in_generate=False, **_):
        turn = len(self.seen)
        self.seen.append([ids[m.bool()].tolist() for ids, m in zip(input_ids, attention_mask)])
        rows = [self.tok(self.reply(turn, r), add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
                for r in range(len(input_ids))]
        new = torch.full((len(rows), max(map(len, rows))), self.tok.pad_token_id)
        for r, row in enumerate(rows):
            new[r, :len(row)] = torch.tensor(row)
        seqs = torch.cat([input_ids, new], 1)
        if not return_dict_in_generate:
            return seqs
        return SimpleNamespace(sequences=seqs, logits=tuple(torch.zeros(len(rows), len(self.tok)) for _ in new.T))


class RecordingEnv:
    """Three turns, one observation each; keeps the actions it was given."""

    def __init__(self):
        self.actions = []

    def reset(self, task):
        return f"board {task}"

    def step(self, action):
        self.actions.append(action)
        return f"feedback {len(self.actions)}", 0.0, len(self.actions) == 3, {}


def thought_then_move(turn, row):
    return f"plan {turn}\n</think>\n\nr1c2=3"


def _episode(tok, reply, thinking, history_thinking="keep", history_turns=None):
    policy, envs = ScriptedPolicy(tok, reply), []

    def make_env():
        envs.append(RecordingEnv())
        return envs[-1]

    tr = token_rollout(policy, tok, make_env, ["t"], SYSTEM, Sampling(max_new_tokens=32), seed=0, max_turns=3,
                       history_turns=history_turns, thinking=thinking, history_thinking=history_thinking)[0]
    return tr, [seen[0] for seen in policy.seen], envs[0].actions


def _turns_in_sequences(tr):
    """(sequence, start, end) of each turn's context and reply, as the loss sees them."""
    seqs, where, at = tr.sequences(), [], -1
    for t in tr.tokens:
        if t.new_sequence or at < 0:
            at, offset = at + 1, 0
        where.append((seqs[at], offset + len(t.context_ids), offset + len(t.context_ids) + len(t.gen_ids)))
        offset += len(t.context_ids) + len(t.gen_ids)
    return where


@pytest.mark.parametrize("history_thinking", ["keep", "drop"])
def test_with_thinking_the_loss_sees_what_the_model_was_conditioned_on(qwen35_tok, history_thinking):
    tok = qwen35_tok
    tr, seen, actions = _episode(tok, thought_then_move, thinking=True, history_thinking=history_thinking)
    assert tr.num_turns == 3 and len(seen) == 3
    for t, (seq, gen_at, gen_end), conditioned in zip(tr.tokens, _turns_in_sequences(tr), seen):
        assert seq["ids"][:gen_at] == conditioned  # the sequence up to this reply is what the model saw
        assert seq["ids"][gen_at:gen_end] == t.gen_ids and all(seq["mask"][gen_at:gen_end])
        if history_thinking == "drop":  # a re-rendered context holds no generated ids
            assert not any(seq["mask"][:gen_at])
        assert tok.decode(conditioned).endswith("<|im_start|>assistant\n<think>\n")  # the open block is context
    # the environment gets the answers; the reasoning stays on the turn
    assert actions == ["r1c2=3"] * 3
    assert [turn.reasoning for turn in tr.turns] == ["plan 0", "plan 1", "plan 2"]
    later = tok.decode(seen[2])
    if history_thinking == "keep":  # one growing sequence: earlier thinking as generated
        assert len(tr.sequences()) == 1 and "plan 0" in later and "plan 1" in later
    else:  # re-rendered: exactly the prompt ES and evaluation would build, earlier thinking dropped
        assert len(tr.sequences()) == 3 and "plan" not in later
        partial = Trajectory("t", SYSTEM, "board t", tr.turns[:2])
        assert later == render_prompt(tok, build_messages(partial, None), thinking=True)


@pytest.mark.parametrize("history_turns", [None, 0])
def test_with_thinking_off_the_empty_think_block_is_prompt_not_generated(qwen35_tok, history_turns):
    tok = qwen35_tok
    tr, seen, actions = _episode(tok, lambda turn, row: "r1c2=3", thinking=False, history_turns=history_turns)
    empty = tok(EMPTY_THINK, add_special_tokens=False)["input_ids"]
    for t, (seq, gen_at, _gen_end) in zip(tr.tokens, _turns_in_sequences(tr)):
        assert seq["ids"][gen_at - len(empty):gen_at] == empty and not any(seq["mask"][gen_at - len(empty):gen_at])
        assert THINK_OPEN not in tok.decode(t.gen_ids) and tok.decode(t.gen_ids) == "r1c2=3" + tok.eos_token
    assert sum(sum(s["mask"]) for s in tr.sequences()) == tr.generated_tokens
    assert actions == ["r1c2=3"] * 3 and all(turn.reasoning == "" for turn in tr.turns)


def test_text_rollouts_give_the_environment_the_answer_and_drop_earlier_thinking(qwen35_tok):
    tok = qwen35_tok
    policy, envs = ScriptedPolicy(tok, thought_then_move), []

    def make_env():
        envs.append(RecordingEnv())
        return envs[-1]

    tr = rollout(policy, tok, make_env, ["t"], SYSTEM, Sampling(max_new_tokens=32), seed=0, max_turns=3,
                 history_turns=None, thinking=True)[0]
    assert envs[0].actions == ["r1c2=3"] * 3 and tr.turns[0] == Turn("r1c2=3", "feedback 1", 0.0, "plan 0")
    last_prompt = tok.decode(policy.seen[2][0])
    assert "plan" not in last_prompt and last_prompt.endswith("<|im_start|>assistant\n<think>\n")


def test_thinking_needs_a_template_with_a_thinking_mode():
    with pytest.raises(ValueError, match="no thinking mode"):
        rollout(ScriptedPolicy(_tokenizer(), thought_then_move), _tokenizer(), RecordingEnv, ["t"], SYSTEM,
                Sampling(max_new_tokens=32), seed=0, max_turns=1, thinking=True)


@pytest.mark.parametrize("history_thinking", ["keep", "drop"])
def test_sampling_logprobs_match_a_training_forward_with_the_thinking_template(smoke_model, history_thinking):
    model, tok = load_model_and_tokenizer(smoke_model, dtype="float32")
    tok = copy.deepcopy(tok)
    tok.chat_template = qwen35_chat_template()  # think tags as plain text: the smoke vocabulary has no such tokens
    tasks = generate_puzzles(4, 2, 2, seed=0, split="train")
    trajs = token_rollout(model, tok, lambda: SudokuEnv(2), tasks, instructions(4, "short"),
                          Sampling(temperature=0.7, max_new_tokens=8), seed=0, max_turns=2, history_turns=None,
                          thinking=True, history_thinking=history_thinking)
    batch = collate(trajs, tok.pad_token_id)
    with torch.no_grad():
        lp = token_logprobs(model, batch["input_ids"], batch["attention_mask"], temperature=0.7)
    m = batch["loss_mask"].bool()
    assert m.any() and torch.allclose(lp[m], batch["old_logp"][m], atol=1e-4)

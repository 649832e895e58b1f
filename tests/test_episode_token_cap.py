"""A tool benchmark's token budgets: its own per-reply cap over the shared one, and a cap on an
episode's replies and observations (the authors' DocVQA: 512 per reply, 32,768 per episode)
that ends the episode unanswered."""

import copy
from pathlib import Path

import pytest

from esopt.agent.engine import Completion, Sampling
from esopt.agent.react import ReActEnv
from esopt.agent.rollout import observation_tokens, rollout
from esopt.config import load_config
from esopt.models.tokenizer import qwen35_chat_template, train_tokenizer
from esopt.runs.tool_episodes import ToolEpisodeSpec, summarize_tool
from esopt.spec.agents import ToolEpisodes

CONFIG = Path(__file__).resolve().parents[1] / "config"
CALL, ANSWER, OUTPUT = "<echo>abcdef</echo>", "Answer: 42", "fedcba"


class Echo:
    name, description = "echo", "echo text back reversed"

    def __call__(self, argument, task):
        return argument[::-1]


class Judge:
    """Scores 'Answer: 42' (success, done) and asks for an answer otherwise."""

    def reset(self, task):
        return f"question {task}"

    def step(self, action):
        if ANSWER in action:
            return "correct", 1.0, True, {"success": True, "answer": "42"}
        return "No final answer found.", 0.0, False, {}


class Scripted:
    """An engine whose episodes call the tool on every turn, except that episode `answers`
    answers on its turn `answer_turn`; replies are the tokenizer's ids of the text."""

    def __init__(self, tok, answers=None, answer_turn=None):
        self.tok, self.answers, self.answer_turn, self.turns = tok, answers, answer_turn, {}

    def generate(self, prompts, sampling, seed, *, keys=None, logprobs=False, counters=None):
        out = []
        for key in keys:
            turn = self.turns[key] = self.turns.get(key, -1) + 1
            text = ANSWER if (key == self.answers and turn == self.answer_turn) else CALL
            out.append(Completion(self.tok(text, add_special_tokens=False)["input_ids"], text))
        return out


@pytest.fixture(scope="module")
def tok():
    t = train_tokenizer([f"question T {CALL} {ANSWER} {OUTPUT} correct No final answer found."] * 20, vocab_size=300)
    t.chat_template = qwen35_chat_template()
    return t


def episodes(tok, engine, cap, do_sample, max_turns=8):
    return rollout(engine, tok, lambda: ReActEnv(Judge(), [Echo()]), ["T0", "T1"], "Use the tool.",
                   Sampling(do_sample=do_sample, max_new_tokens=16), seed=0, max_turns=max_turns,
                   history_turns=None, max_episode_tokens=cap)


@pytest.mark.parametrize("do_sample", [False, True])  # greedy: replies through the prompt cache
def test_an_episode_that_reaches_its_token_cap_ends_unanswered(tok, do_sample):
    per_turn = len(tok(CALL, add_special_tokens=False)["input_ids"]) + observation_tokens(tok, OUTPUT, False)
    assert observation_tokens(tok, OUTPUT, False) > len(tok(OUTPUT, add_special_tokens=False)["input_ids"])

    free = episodes(tok, Scripted(tok), None, do_sample)
    assert all(t.num_turns == 8 and "ended" not in t.info for t in free)  # no cap: the turn budget ends them

    capped = episodes(tok, Scripted(tok), 2 * per_turn + 1, do_sample)
    for t in capped:  # 2 turns leave it under the cap, the 3rd reaches it
        assert t.done and t.num_turns == 3 and t.reward == 0.0
        assert t.info["ended"] == "max_episode_tokens" and t.info["episode_tokens"] == 3 * per_turn
        assert t.info["tool_calls"] == 3
    assert summarize_tool(capped)["answered"] == 0.0

    # a reply that reaches the cap and answers is scored, as the authors score their last reply
    answered = episodes(tok, Scripted(tok, answers=1, answer_turn=2), 2 * per_turn + 1, do_sample)
    assert answered[1].num_turns == 3 and answered[1].reward == 1.0 and "ended" not in answered[1].info
    assert answered[0].info["ended"] == "max_episode_tokens"


def test_a_benchmarks_own_token_caps_override_the_shared_ones():
    cfg = load_config(CONFIG / "tiny_full.yaml")
    before = ToolEpisodes.from_config(cfg)
    shared = cfg["tool_agents"]["max_new_tokens"]
    assert before.caps("docvqa") == (shared, None)
    spec = ToolEpisodeSpec.from_episodes(before, "docvqa", "sample")
    assert spec.sampling.max_new_tokens == shared and spec.max_episode_tokens is None
    assert "token_caps" not in before.settings()  # no override: the job settings read exactly as without the keys

    over = copy.deepcopy(cfg)
    over["tool_agents"]["benchmarks"]["docvqa"] |= {"max_new_tokens": 7, "max_episode_tokens": 300}
    episodes = ToolEpisodes.from_config(over)
    assert episodes.caps("docvqa") == (7, 300)
    assert episodes.caps("math") == (shared, None)
    spec = ToolEpisodeSpec.from_episodes(episodes, "docvqa", "sample")
    assert spec.sampling.max_new_tokens == 7 and spec.max_episode_tokens == 300
    assert ToolEpisodeSpec.from_episodes(episodes, "math", "sample").max_episode_tokens is None
    assert episodes.settings()["token_caps"] == {"docvqa": {"max_new_tokens": 7, "max_episode_tokens": 300}}

    paper = ToolEpisodes.from_config(load_config(CONFIG / "paper.yaml"))  # the authors' budgets (docs/paper_protocol.md)
    assert paper.caps("docvqa") == (512, 32768)
    assert paper.caps("math") == (4096, None)

"""parse_action's two syntaxes on a corpus of realistic replies (tests/data/web/vab_replies.jsonl).

Each corpus line: `reply`, `expect` (the action VisualAgentBench's harness reads,
VAB-WebArena-Lite/new/actions.py:1904-2006, as esopt's Action fields; null where the harness
reads none), `why`, and, where today's tolerant reading is pinned, `tolerant`. The
expectations were checked against the harness's own function on these replies and on the
authors' 1,980 recorded replies (docs/web.md, "1. Actions"). No browser is needed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from esopt.envs.web.actions import SYNTAXES, Action, ActionError, parse_action

CORPUS = [json.loads(line) for line in
          (Path(__file__).parent / "data" / "web" / "vab_replies.jsonl").read_text().splitlines() if line.strip()]


def _matches(got: Action | ActionError, expect: dict | None) -> bool:
    if expect is None:
        return isinstance(got, ActionError)
    return isinstance(got, Action) and all(getattr(got, k) == v for k, v in expect.items())


def test_corpus_is_large_and_varied():
    assert len(CORPUS) >= 40
    assert sum(row["expect"] is None for row in CORPUS) >= 15  # harness parse failures
    assert sum("tolerant" in row for row in CORPUS) >= 10


@pytest.mark.parametrize("row", CORPUS, ids=[row["why"][:50] for row in CORPUS])
def test_vab_syntax_reads_what_the_harness_reads(row):
    got = parse_action(row["reply"], syntax="vab")
    assert _matches(got, row["expect"]), (row["why"], got)
    if isinstance(got, ActionError):
        assert got.message and len(got.message) < 600


@pytest.mark.parametrize("row", [r for r in CORPUS if "tolerant" in r],
                         ids=[r["why"][:50] for r in CORPUS if "tolerant" in r])
def test_tolerant_syntax_is_unchanged(row):
    assert _matches(parse_action(row["reply"]), row["tolerant"])
    assert parse_action(row["reply"]) == parse_action(row["reply"], syntax="tolerant")


def test_last_call_wins_where_the_tolerant_reading_takes_the_first():
    reply = 'Let me wait... no, click the Go button.\n\ndo(action="Click", element="27")'
    assert parse_action(reply, syntax="vab") == Action("click", element="27")
    assert parse_action(reply) == Action("wait")


def test_vab_errors_say_what_to_write():
    msg = parse_action("I will stop here.", syntax="vab").message
    assert "No do(...) or exit(...) call" in msg and 'exit(message="answer")' in msg
    msg = parse_action('do(action="Wait")', syntax="vab").message
    assert "'Wait'" in msg and "Scroll Down" in msg
    assert 'element="ID"' in parse_action('do(action="Click", element=27)', syntax="vab").message
    assert "argument=" in parse_action('do(action="Type", element="3")', syntax="vab").message
    assert "message=" in parse_action("exit(42)", syntax="vab").message


def test_unknown_syntax_is_a_caller_error():
    with pytest.raises(ValueError, match="'webarena'.*tolerant, vab"):
        parse_action("click [1]", syntax="webarena")


_PIECES = ['do(', 'exit(', 'go_backward(', ')', '(', '"', "'", '"""', '\\', '\n', ' ', ',', '=', '#', '[', ']', '```',
           'action="Click"', 'action="Type"', 'element="12"', 'element=', 'argument="x"', 'message="m"', '**{}',
           'find_element_by_instruction(instruction="x")', 'click [3]', 'stop [', '<think>', '</think>', '\x00',
           '\ud800', '1e999', '9' * 5000, '(' * 300, 'lambda: 0', '{1: [2, (3,)]}', "b'x'", 'f"{x}"', 'é€']


@pytest.mark.parametrize("syntax", SYNTAXES)
def test_fuzzed_replies_never_raise(syntax):
    rng = random.Random(27)
    for _ in range(3000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 12)))
        got = parse_action(text, syntax=syntax)
        assert isinstance(got, (Action, ActionError))
        if isinstance(got, Action):
            assert got.kind in ("click", "type", "hover", "press", "scroll", "select", "goto", "go_back",
                                "go_forward", "wait", "stop")
    for odd in (None, 12, b"do(action='Click', element='3')", ["exit(message='x')"], "x" * 200_000):
        assert isinstance(parse_action(odd, syntax=syntax), (Action, ActionError))  # type: ignore[arg-type]

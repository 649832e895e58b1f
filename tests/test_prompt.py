"""esopt.prompt: skill edits, the hierarchical merge, Trace2Skill, and both analysts against real backends."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
import torch

from esopt.agent.rollout import Trajectory, Turn
from esopt.models.load import load_model_and_tokenizer
from esopt.prompt import (
    Analyst,
    AnalystError,
    Edit,
    FixedContext,
    OpenAIAnalyst,
    PolicyAnalyst,
    PromptOptimizer,
    Proposal,
    SkillDocument,
    Trace2Skill,
    compose_system,
    make_analyst,
    merge_hierarchical,
    merge_pair,
    parse_edits,
    render_trace,
)
from esopt.prompt.analyst import CUT_NOTE, TRACE_BEGIN, TRACE_END
from esopt.prompt.skill import SkillItem


def add(section, text):
    return Edit("add", section, text, None)


def remove(n):
    return Edit("remove", "", "", n)


def revise(n, text):
    return Edit("revise", "", text, n)


# --------------------------------------------------------------------------- parse_edits

def test_parse_edits_reads_well_formed_and_tolerant_lines():
    reply = "\n".join([
        "ADD [Checks]: Verify the row before placing a digit.",
        "- add [moves]: one move per turn",
        "2. REVISE #2: Read the whole board first.",
        "**REMOVE #3**",
        "revise 1 no hash or colon",
        "REMOVE #1 (it was wrong)",
        "ADD: A lesson without a section.",
        "DELETE #2",
    ])
    edits, bad = parse_edits(reply, n_items=3)
    assert bad == 0
    assert edits == [
        add("Checks", "Verify the row before placing a digit."),
        add("moves", "one move per turn"),
        revise(2, "Read the whole board first."),
        remove(3),
        revise(1, "no hash or colon"),
        remove(1),
        add("General", "A lesson without a section."),
        remove(2),
    ]


def test_parse_edits_counts_malformed_and_ignores_prose_and_never_raises():
    reply = "\n".join([
        "Here are my thoughts about the episode.",   # prose: ignored
        "Additionally, the agent was slow.",          # 'Additionally' is not ADD: ignored
        "NONE",                                       # ignored
        "ADD [Checks]:",                              # empty text
        "ADD [Checks]: " + "x" * 201,                 # overlong
        "ADD [<section>]: <lesson>",                  # the format line copied
        "REVISE #9: beyond the document",             # out of range
        "REVISE #0: zero",                            # out of range
        "REMOVE the second item",                     # no target
        "REVISE #2:",                                 # no text
        "ADD [Checks]: a real lesson",
        "<think>ADD [X]: thinking is not an answer</think>",
    ])
    edits, bad = parse_edits(reply, n_items=3)
    assert edits == [add("Checks", "a real lesson")]
    assert bad == 7
    for garbage in [None, "", 12345, b"\xff\xfe", "ADD [" * 1000, "\x00\n\r\n#" * 50, "REMOVE #99999999999999"]:
        assert parse_edits(garbage, n_items=2)[0] == []
    assert parse_edits("REVISE #12: fine", n_items=None)[0] == [revise(12, "fine")]


# --------------------------------------------------------------------------- skill document

DOC = """# Skills

## Checks
- Verify the row before placing a digit.
- Verify the box too.

## Format
- Reply with exactly one move per turn.
"""


def test_skill_document_render_parse_round_trip_and_numbering():
    doc = SkillDocument.parse(DOC)
    assert doc.render() == DOC
    assert SkillDocument.parse(doc.render()).render() == DOC
    assert [(n, it.text) for n, it in doc.numbered()] == [
        (1, "Verify the row before placing a digit."), (2, "Verify the box too."), (3, "Reply with exactly one move per turn.")]
    numbered = doc.render(numbered=True)
    assert "- [#3] Reply with exactly one move per turn." in numbered
    assert SkillDocument.parse(numbered).render() == DOC  # the numbered form reads back too
    messy = "intro text\n- orphan bullet\n##   Checks  \n-    spaced   out  \n## checks\n* star bullet\n"
    assert SkillDocument.parse(messy).render() == "# Skills\n\n## General\n- orphan bullet\n\n## Checks\n- spaced out\n- star bullet\n"
    assert SkillDocument().render() == "# Skills\n"
    capped = SkillDocument.parse(DOC, max_items=2, max_item_chars=10)
    assert [it.text for it in capped.items] == ["Verify the", "Verify the"]


def test_apply_uses_the_numbering_the_analysts_saw():
    doc = SkillDocument.parse("## A\n- a1\n- a2\n## B\n- b1\n- b2\n")
    res = doc.apply([remove(1), revise(3, "b1 new"), remove(2), revise(4, "b2 new"), add("a", "a3"), add("C", "c1")])
    # had #1 and #2 been deleted before REVISE #3, that revision would have hit b2 (or nothing)
    assert doc.render() == "# Skills\n\n## A\n- a3\n\n## B\n- b1 new\n- b2 new\n\n## C\n- c1\n"
    assert res.as_dict() == {"applied": 6, "reinforced": 0, "skipped": 0, "evicted": 0}


def test_apply_reinforces_duplicates_and_skips_a_second_edit_of_one_item():
    doc = SkillDocument.parse("## A\n- Check the row.\n- Check the box.\n")
    res = doc.apply([Proposal(add("Other", "check the ROW"), 2), revise(2, "Check the 2x2 box."), remove(2), remove(7)])
    assert doc.render() == "# Skills\n\n## A\n- Check the row.\n- Check the 2x2 box.\n"
    assert [it.support for it in doc.items] == [3, 1]
    assert res.as_dict() == {"applied": 1, "reinforced": 1, "skipped": 2, "evicted": 0}


def test_max_items_evicts_least_supported_then_oldest():
    doc = SkillDocument([SkillItem("S", "x", 1, 0), SkillItem("S", "y", 3, 1), SkillItem("S", "z", 1, 2)], max_items=3)
    res = doc.apply([Proposal(add("S", "new1"), 2), Proposal(add("S", "new2"), 1)])
    # (support, serial): x (1,0), z (1,2), new2 (1,4), new1 (2,3), y (3,1) -> x and z go
    assert [it.text for it in doc.items] == ["y", "new1", "new2"]
    assert res.evicted == 2 and len(doc) == 3


# --------------------------------------------------------------------------- hierarchical merge

def test_merge_pair_contradictions_support_wins_tie_keeps_neither():
    assert merge_pair([Proposal(remove(2), 2)], [Proposal(revise(2, "x"), 1)]) == [Proposal(remove(2), 2)]
    assert merge_pair([Proposal(remove(2), 1)], [Proposal(revise(2, "x"), 1)]) == []
    assert merge_pair([Proposal(revise(2, "x"), 1)], [Proposal(revise(2, "y"), 1)]) == []
    assert merge_pair([Proposal(revise(2, "x"), 1)], [Proposal(revise(2, "X."), 1)]) == [Proposal(revise(2, "x"), 2)]


def test_hierarchical_merge_hand_worked():
    l1 = [add("A", "Check the row first."), remove(3)]
    l2 = [add("B", "check the row first"), revise(3, "Better text")]
    l3 = [add("A", "Use one move per turn."), remove(3)]
    l4 = [add("General", "check THE row, first!"), remove(3), remove(3)]  # a repeat inside one reply is one vote
    # level 1: m12 = [add check (2)] (remove #3 vs revise #3 tie 1:1 -> neither)
    #          m34 = [remove #3 (2), add move (1), add check (1)]
    # level 2: pool m12 + m34 -> add check 3, remove #3 2, add move 1
    assert merge_hierarchical([l1, l2, l3, l4]) == [
        Proposal(add("A", "Check the row first."), 3), Proposal(remove(3), 2), Proposal(add("A", "Use one move per turn."), 1)]
    # an odd list waits a level: [m12, l3] -> add check 2, add move 1, remove #3 1
    assert merge_hierarchical([l1, l2, l3]) == [
        Proposal(add("A", "Check the row first."), 2), Proposal(add("A", "Use one move per turn."), 1), Proposal(remove(3), 1)]
    assert merge_hierarchical([l1, l2, l3, l4], max_edits=2) == merge_hierarchical([l1, l2, l3, l4])[:2]
    assert merge_hierarchical([]) == [] and merge_hierarchical([[], []]) == []


# --------------------------------------------------------------------------- Trace2Skill with a scripted analyst

def traj(name, ok, steps=2):
    turns = [Turn(f"move {k} of {name}", f"feedback {k}", 0.0) for k in range(1, steps + 1)]
    return Trajectory(name, "sys", f"Question of {name}", turns, 1.0 if ok else 0.0, True, {"success": ok})


class ScriptedAnalyst:
    """A test double: replies are looked up by the trace named in the prompt, one script per call."""

    def __init__(self, rounds):
        self.rounds, self.calls, self.prompts = rounds, 0, []

    def complete(self, prompts, seed):
        script = self.rounds[self.calls]
        self.calls += 1
        self.prompts.append(list(prompts))
        return [next(r for name, r in script.items() if f"Question of {name}\n" in p) for p in prompts]


ROUNDS = [
    {"s1": "ADD [Moves]: Place one digit per turn.\nADD [Checks]: Check the row before placing.",
     "s2": "- add [moves]: place one digit per turn\nThis is prose.",
     "f1": "ADD [Checks]: Check the column before placing.\nREMOVE #1",
     "f2": "garbage\nADD [Checks]: Check the column before placing!\nREVISE #2: x"},
    {"s1": "REVISE #3: Check the row and the box before placing.",
     "s2": "REMOVE #2",
     "f1": "REVISE #3: Check the row and the box before placing.\nADD [Moves]: Place one digit per turn.",
     "f2": "REMOVE #2"},
]
TRAJS = [traj("s1", True), traj("f1", False), traj("s2", True), traj("f2", False)]
GEN0_DOC = ("# Skills\n\n## Moves\n- Place one digit per turn.\n\n"
            "## Checks\n- Check the column before placing.\n- Check the row before placing.\n")
GEN1_DOC = "# Skills\n\n## Moves\n- Place one digit per turn.\n\n## Checks\n- Check the row and the box before placing.\n"


def test_trace2skill_update_gives_the_hand_worked_document():
    analyst = ScriptedAnalyst(ROUNDS)
    opt = Trace2Skill(analyst, task_description="4x4 Sudoku, one move per turn")
    assert isinstance(opt, PromptOptimizer) and isinstance(analyst, Analyst)
    assert opt.context() == ""
    s0 = opt.update(TRAJS, 0)
    # prompts: successes then failures, each in rollout order; tree pairs (s1, s2) and (f1, f2)
    # m(s1,s2) = place 2, row 1; m(f1,f2) = column 2; root: place 2, column 2, row 1
    assert opt.context() == GEN0_DOC
    assert {k: s0[k] for k in ("traces", "successes", "failures", "proposed", "malformed", "merged", "applied", "items")} == \
        {"traces": 4, "successes": 2, "failures": 2, "proposed": 5, "malformed": 2, "merged": 3, "applied": 3, "items": 3}
    p = analyst.prompts[0]
    assert [x.split("Question of ")[1].split("\n")[0] for x in p] == ["s1", "s2", "f1", "f2"]
    assert "4x4 Sudoku" in p[0] and "It SUCCEEDED." in p[0] and "It FAILED." in p[2] and "(empty: no items yet)" in p[0]
    s1 = opt.update(TRAJS, 1)
    # round 2 saw [#1] place, [#2] column, [#3] row: revise #3 (2), remove #2 (2), add place (1) reinforces #1
    assert "- [#3] Check the row before placing." in analyst.prompts[1][0]
    assert opt.context() == GEN1_DOC
    assert (s1["applied"], s1["reinforced"], s1["items"]) == (2, 1, 2)
    assert opt.document.items[0].support == 3
    with pytest.raises(ValueError, match="already updated"):
        opt.update(TRAJS, 1)


def test_trace2skill_state_round_trip_continues_identically():
    a = ScriptedAnalyst(ROUNDS)
    opt = Trace2Skill(a, seed=3)
    opt.update(TRAJS, 0)
    state = json.loads(json.dumps(opt.state_dict()))  # JSON-serializable
    assert state["context"] == GEN0_DOC
    continued = opt.update(TRAJS, 1)

    b = ScriptedAnalyst(ROUNDS)
    b.calls = 1
    resumed = Trace2Skill(b, seed=3)
    resumed.load_state_dict(state)
    assert resumed.context() == GEN0_DOC
    assert resumed.update(TRAJS, 1) == continued
    assert b.prompts[-1] == a.prompts[-1] and resumed.state_dict() == opt.state_dict()
    with pytest.raises(ValueError, match="seed"):
        Trace2Skill(ScriptedAnalyst(ROUNDS), seed=4).load_state_dict(state)


def test_selection_is_seeded_per_generation_and_capped():
    trajs = [traj(f"t{i}", i % 3 == 0) for i in range(30)]
    opt = Trace2Skill(ScriptedAnalyst([]), success_traces=2, failure_traces=3, seed=7)
    pick = [t.task_id for t, _ in opt.select(trajs, 5)]
    assert pick == [t.task_id for t, _ in opt.select(trajs, 5)]
    assert len(pick) == 5 and [ok for _, ok in opt.select(trajs, 5)] == [True, True, False, False, False]
    assert any(pick != [t.task_id for t, _ in opt.select(trajs, g)] for g in range(6, 10))
    assert Trace2Skill(ScriptedAnalyst([]), seed=7).update([], 0)["traces"] == 0


def test_render_trace_keeps_the_newest_steps_within_budget():
    t = traj("long", False, steps=60)
    text = render_trace(t, False, max_chars=400)
    assert "earlier step(s) omitted" in text and "move 60 of long" in text and "move 1 of long" not in text
    assert text.index(TRACE_BEGIN) < text.index("Step 60") < text.index(TRACE_END) < text.index("Outcome: FAILURE")
    assert len(text) < 700


def test_fixed_context_and_compose_system():
    fixed = FixedContext("be careful")
    assert isinstance(fixed, PromptOptimizer) and fixed.context() == "be careful"
    fixed.update([traj("a", True)], 0)
    assert fixed.context() == "be careful"
    assert compose_system("You play.", "") == "You play."
    assert compose_system("You play.\n", GEN0_DOC) == "You play.\n\n" + GEN0_DOC.strip()


# --------------------------------------------------------------------------- PolicyAnalyst on the real tiny model

def test_policy_analyst_on_the_tiny_model(smoke_model):
    model, tok = load_model_and_tokenizer(smoke_model, dtype="float32", device="cpu")
    analyst = PolicyAnalyst(model, tok, max_new_tokens=12, temperature=0.7)
    assert analyst.max_prompt_tokens == model.config.max_position_embeddings - 12
    opt = Trace2Skill(analyst, max_trace_chars=20000)
    long_prompt = opt.prompt(traj("long", False, steps=400), False)
    short_prompt = opt.prompt(traj("short", True), True)
    ids, cut = analyst.encode(long_prompt)
    assert cut and len(ids) <= analyst.max_prompt_tokens
    text = tok.decode(ids)
    # the instructions on both sides survive; the oldest steps are cut, the newest stay
    assert "You improve the skill document" in text and "If nothing should change, reply NONE." in text
    assert CUT_NOTE.strip() in text and "move 400 of long" in text and "move 1 of long\n" not in text
    assert text.rstrip().endswith("<|im_start|>assistant")
    assert analyst.encode(short_prompt)[1] is False

    rng_before = torch.get_rng_state()
    replies = analyst.complete([short_prompt, long_prompt], seed=11)
    assert torch.equal(rng_before, torch.get_rng_state())  # the caller's RNG stream is untouched
    assert len(replies) == 2 and all(isinstance(r, str) for r in replies)
    assert analyst.complete([short_prompt, long_prompt], seed=11) == replies
    assert analyst.last_stats["truncated"] == 1 and analyst.last_stats["prompt_tokens"] <= 2 * analyst.max_prompt_tokens
    greedy = PolicyAnalyst(model, tok, max_new_tokens=6, temperature=0.0, max_prompt_tokens=300)
    assert greedy.max_prompt_tokens == 300 and len(greedy.encode(long_prompt)[0]) <= 300
    assert greedy.complete([short_prompt], seed=1) == greedy.complete([short_prompt], seed=2)

    stats = opt.update([traj("a", True), traj("b", False)], 0)  # the tiny model's edits are mostly noise
    assert stats["traces"] == 2 and stats["truncated_prompts"] == 0 and stats["items"] == len(opt.document)


# --------------------------------------------------------------------------- OpenAIAnalyst against a real HTTP server

class _Handler(BaseHTTPRequestHandler):
    requests: ClassVar[list] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if body["model"] == "broken":
            self._send(503, {"error": "overloaded"})
        elif body["model"] == "bad-request":
            self._send(400, {"error": "no such model"})
        elif self.path != "/v1/chat/completions" or self.headers.get("Authorization") != "Bearer sk-test-123":
            self._send(401, {"error": "unauthorized"})
        else:
            prompt = body["messages"][-1]["content"]
            self._send(200, {"choices": [{"message": {"role": "assistant", "content": f"ADD [Echo]: {prompt}"}}]})

    def _send(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server(monkeypatch):
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    _Handler.requests = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_openai_analyst_posts_chat_completions(server, monkeypatch):
    monkeypatch.setenv("ESOPT_TEST_KEY", "sk-test-123")
    analyst = make_analyst({"kind": "openai", "base_url": server, "model": "analyst-model",
                            "api_key_env": "ESOPT_TEST_KEY", "temperature": 0.0, "max_tokens": 64})
    assert isinstance(analyst, OpenAIAnalyst) and "sk-test" not in repr(analyst) and "sk-test" not in str(vars(analyst))
    replies = analyst.complete(["first prompt", "second prompt", "third"], seed=5)
    assert replies == ["ADD [Echo]: first prompt", "ADD [Echo]: second prompt", "ADD [Echo]: third"]
    reqs = sorted(_Handler.requests, key=lambda r: r["body"]["messages"][-1]["content"])
    assert all(r["path"] == "/v1/chat/completions" and r["auth"] == "Bearer sk-test-123" for r in reqs)
    b = reqs[0]["body"]
    assert b["model"] == "analyst-model" and b["temperature"] == 0.0 and b["max_tokens"] == 64
    assert [m["role"] for m in b["messages"]] == ["system", "user"] and b["messages"][1]["content"] == "first prompt"
    assert isinstance(b["seed"], int) and len({r["body"]["seed"] for r in reqs}) == 3
    _Handler.requests = []
    assert analyst.complete(["first prompt", "second prompt", "third"], seed=5) == replies
    assert sorted(r["body"]["seed"] for r in _Handler.requests) == sorted(r["body"]["seed"] for r in reqs)

    monkeypatch.delenv("ESOPT_TEST_KEY")
    with pytest.raises(AnalystError, match="ESOPT_TEST_KEY"):
        analyst.complete(["x"], seed=0)


def test_openai_analyst_http_errors_name_url_and_status(server):
    _Handler.requests = []
    broken = OpenAIAnalyst(server, "broken", retries=1, backoff_s=0.0)
    with pytest.raises(AnalystError, match=r"/v1/chat/completions failed after 2 attempt\(s\): HTTP 503") as e:
        broken.complete(["x"], seed=0)
    assert e.value.status == 503 and e.value.url == server + "/chat/completions" and len(_Handler.requests) == 2
    _Handler.requests = []
    with pytest.raises(AnalystError, match="after 1 attempt.*HTTP 400") as e:  # a client error is not retried
        OpenAIAnalyst(server, "bad-request", retries=3, backoff_s=0.0).complete(["x"], seed=0)
    assert e.value.status == 400 and len(_Handler.requests) == 1
    with pytest.raises(AnalystError, match="HTTP 401"):  # no key sent
        OpenAIAnalyst(server, "analyst-model", retries=0).complete(["x"], seed=0)


def test_openai_analyst_unreachable_url_fails_quickly(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    t0 = time.monotonic()
    with pytest.raises(AnalystError, match=f"127.0.0.1:{port}/v1/chat/completions failed after 2 attempt") as e:
        OpenAIAnalyst(url, "m", timeout_s=1.0, retries=1, backoff_s=0.0).complete(["x"], seed=0)
    assert time.monotonic() - t0 < 5 and e.value.status is None


def test_make_analyst_rejects_bad_specs():
    with pytest.raises(ValueError, match=r"expected one of \['openai', 'policy'\]"):
        make_analyst({"kind": "gpt"})
    with pytest.raises(ValueError, match="needs the policy model"):
        make_analyst({"kind": "policy", "max_new_tokens": 96})
    with pytest.raises(ValueError, match="unknown option.*max_new_token"):
        make_analyst({"kind": "openai", "base_url": "http://h:8000/v1", "model": "m", "max_new_token": 5})
    with pytest.raises(ValueError, match="api_key_env"):
        make_analyst({"kind": "openai", "base_url": "http://h:8000/v1", "model": "m", "api_key": "sk-x"})
    with pytest.raises(ValueError, match="base_url"):
        make_analyst({"kind": "openai", "model": "m"})

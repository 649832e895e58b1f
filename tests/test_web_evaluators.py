"""The web benchmark's pure parts, no browser: evaluators, action parsing, task files, templates."""

import contextlib
import json

import pytest

from esopt.envs.web.actions import Action, ActionError, parse_action
from esopt.envs.web.evaluators import (
    SEMANTICS_FIELD,
    CallableJudge,
    EvaluationError,
    JudgeError,
    OpenAIJudge,
    call_helper,
    clean_answer,
    evaluate,
    is_judge_failure,
    make_judge,
    must_include,
    program_html,
    semantics_of,
    string_match,
    url_match,
    uses_page,
    word_tokens,
)
from esopt.envs.web.tasks import TaskFormatError, WebTask, load_tasks, resolve_urls, write_tasks
from esopt.envs.web.templates import TEMPLATES, generate_tasks, split_of


def task(eval_block, intent="What is it?", **extra):
    base = {"reference_answers": None, "reference_url": "", "program_html": [], "string_note": "", "url_note": "GOLD in PRED"}
    return {"task_id": 1, "sites": ["shopping"], "start_url": "__SHOPPING__", "intent": intent,
            "eval": {**base, **eval_block}, **extra}


def answers(**refs):
    return task({"eval_types": ["string_match"], "reference_answers": refs})


# --- string_match -------------------------------------------------------------------


def test_clean_answer_strips_one_pair_of_quotes_and_lowercases():
    assert clean_answer('  "Rustic Kettle" ') == "rustic kettle"
    assert clean_answer("'x'") == "x"
    assert clean_answer("it's") == "it's"


def test_exact_match_passes_on_the_cleaned_reference_and_fails_otherwise():
    cfg = answers(exact_match="Emma Lopez")
    assert string_match(cfg, "emma lopez", None)[0] == 1.0
    assert string_match(cfg, '"Emma Lopez"', None)[0] == 1.0
    assert string_match(cfg, "Emma Lopez.", None)[0] == 0.0
    assert string_match(cfg, "It is Emma Lopez", None)[0] == 0.0


def test_must_include_needs_every_phrase_and_tokenizes_single_characters():
    cfg = answers(must_include=["17.99", "kettle"])
    assert string_match(cfg, "The kettle costs $17.99", None)[0] == 1.0
    assert string_match(cfg, "It costs $17.99", None)[0] == 0.0
    one_char = answers(must_include=["5"])
    assert string_match(one_char, "There are 5 orders", None)[0] == 1.0
    assert string_match(one_char, "There are 15 orders", None)[0] == 0.0  # "5" is not a token of "15"
    alternatives = answers(must_include=["open |OR| opened"])
    assert string_match(alternatives, "It is opened", None)[0] == 1.0


def test_must_exclude_rejects_any_listed_phrase():
    cfg = answers(must_include=["closed"], must_exclude=["open"])
    assert string_match(cfg, "closed", None)[0] == 1.0
    assert string_match(cfg, "open or closed", None)[0] == 0.0
    assert string_match(cfg, "reopened? no: closed", None)[0] == 1.0  # token-wise: "open" is not "reopened"


def test_one_of_needs_any_listed_phrase():
    cfg = answers(one_of=["Eco Kettle", "Pro Toaster"])
    assert string_match(cfg, "the pro toaster", None)[0] == 1.0
    assert string_match(cfg, "the blender", None)[0] == 0.0


def test_fuzzy_match_asks_the_judge_for_every_reference():
    seen = []

    def judge(intent, reference, answer, kind):
        seen.append((kind, reference, answer))
        return "correct" if "kettle" in answer else "incorrect"

    cfg = answers(fuzzy_match=["a kettle"])
    assert string_match(cfg, "A small kettle", CallableJudge(judge))[0] == 1.0
    assert string_match(cfg, "A toaster", CallableJudge(judge))[0] == 0.0
    assert seen[0] == ("fuzzy", "a kettle", "a small kettle")
    assert string_match(cfg, "", CallableJudge(judge))[0] == 0.0  # empty answer: no judge call
    assert len(seen) == 2


def test_fuzzy_na_is_exact_first_then_the_unachievable_judge():
    cfg = task({"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": "N/A"},
                "string_note": "the shop sells no cars"})
    judge = CallableJudge(lambda intent, reference, answer, kind: kind == "unachievable" and "car" in answer)
    assert string_match(cfg, "N/A", judge)[0] == 1.0
    assert string_match(cfg, "they do not sell cars", judge)[0] == 1.0
    assert string_match(cfg, "$12", judge)[0] == 0.0


def test_a_judge_failure_is_an_error_with_the_episode_never_a_silent_zero():
    def broken(**kw):
        raise ConnectionError("endpoint down")

    cfg = answers(fuzzy_match=["a kettle"])
    res = evaluate(cfg, "a kettle", "http://x/", None, judge=CallableJudge(broken))
    assert res.score == 0.0 and res.error and "endpoint down" in res.error
    no_judge = evaluate(cfg, "a kettle", "http://x/", None, judge=None)
    assert no_judge.error and "needs a judge" in no_judge.error
    unreadable = evaluate(cfg, "a kettle", "http://x/", None, judge=CallableJudge(lambda **kw: "maybe?"))
    assert unreadable.error and "no verdict" in unreadable.error


def test_openai_judge_that_cannot_be_reached_raises_judge_error():
    judge = OpenAIJudge("http://127.0.0.1:9/v1", "judge-model", api_key="k", timeout=2, retries=0)
    with pytest.raises(JudgeError, match="failed after 1 tries"):
        judge(intent="q", reference="a", answer="a", kind="fuzzy")


# VisualAgentBench's judge request, written out as its helper_functions_eval.py builds it
# (VAB-WebArena-Lite/new/helper_functions_eval.py l.586-606 and l.619-641 at 9055fc2), for
# question "q", reference "r", prediction "a"; the model is the authors' (evaluation_judge.patch).
VAB_FUZZY = ("Help a teacher to grade the answer of a student given a question. Keep in mind that the student may use "
             "different phrasing or wording to answer the question. The goal is to evaluate whether the answer is "
             "semantically equivalent to the reference answer.\n"
             "question: q\nreference answer: r\nall the string 'N/A' that you see is a special sequence that means "
             "'not achievable'\nstudent answer: a\nConclude the judgement by 'correct', 'incorrect', or 'partially "
             "correct'. Only output one of these options, and nothing else.")
VAB_UA = ("task: q\nactual unachievable reason: r\nreported unachievable reason: a\nThe task described above is "
          "inherently unachievable due to the reason specified under 'actual unachievable reason'. An individual "
          "previously attempted this task and was unable to complete it. They provided a reason for their failure, "
          "which is listed under 'reported unachievable reason'. Your role is to review both the actual and reported "
          "reasons. Determine if the reported reason aligns with the actual reason, even if implicitly. If the stated "
          "reason is in line with the actual reason, respond with 'same'. Otherwise, respond with 'different'.")


@contextlib.contextmanager
def chat_endpoint(replies):
    """A real HTTP /chat/completions stand-in answering from `replies` in turn: a text (the
    judge's reply) or an int (that HTTP status, an error); the request bodies go to `.bodies`."""
    import http.server
    import threading
    from types import SimpleNamespace

    state = SimpleNamespace(bodies=[], url="")
    queue = list(replies)

    class Endpoint(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            state.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            reply = queue.pop(0) if len(queue) > 1 else queue[0]
            code, data = (reply, b'{"error": "refused"}') if isinstance(reply, int) else (
                200, json.dumps({"choices": [{"message": {"content": reply}}]}).encode())
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def test_the_openai_judge_asks_what_visualagentbench_asks_with_its_settings():
    with chat_endpoint(["Correct", "Same"]) as ep:
        judge = make_judge({"kind": "openai", "base_url": ep.url, "model": "gpt-4.1-mini"})
        assert judge(intent="q", reference="r", answer="a", kind="fuzzy") is True
        assert judge(intent="q", reference="r", answer="a", kind="unachievable") is True
    fuzzy, ua = ep.bodies
    for body, text in ((fuzzy, VAB_FUZZY), (ua, VAB_UA)):
        assert body == {"model": "gpt-4.1-mini", "temperature": 0, "top_p": 1.0, "max_tokens": 768,
                        "messages": [{"role": "system", "content": "You are a helpful assistant"},
                                     {"role": "user", "content": text}]}


@pytest.mark.parametrize("reply, kind, verdict", [
    ("Correct", "fuzzy", True), ("correct.", "fuzzy", True), ("Incorrect", "fuzzy", False),
    ("partially correct", "fuzzy", False), ("The answer is correct, not incorrect", "fuzzy", False),
    ("same", "unachievable", True), ("Different.", "unachievable", False), ("not the same, different", "unachievable", False),
])
def test_the_verdict_is_read_as_visualagentbench_reads_it(reply, kind, verdict):
    assert CallableJudge(lambda **kw: reply)(intent="q", reference="r", answer="a", kind=kind) is verdict


def test_the_openai_judge_retries_overload_fails_fast_on_a_wrong_key_and_never_guesses(monkeypatch):
    import esopt.envs.web.evaluators as ev

    monkeypatch.setattr(ev.time, "sleep", lambda s: None)  # the backoff's waits
    with chat_endpoint([429, 500, "correct"]) as ep:  # VAB retries rate limits and server errors
        assert OpenAIJudge(ep.url, "m")(intent="q", reference="r", answer="a", kind="fuzzy") is True
        assert len(ep.bodies) == 3
    for replies, says in (([401], "after 1 tries: HTTP 401"),  # a wrong key: at once
                          ([503], "after 4 tries"),  # 1 + VAB's 3 retries
                          (["I cannot tell."], "no verdict")):  # VAB's assert: no verdict, no score
        with chat_endpoint(replies) as ep, pytest.raises(JudgeError, match=says):
            OpenAIJudge(ep.url, "m")(intent="q", reference="r", answer="a", kind="fuzzy")


def test_the_judges_prompt_and_settings_can_be_replaced():
    with chat_endpoint(["Correct."]) as ep:
        judge = make_judge({"kind": "openai", "base_url": ep.url, "model": "m", "system": "Be brief",
                            "max_tokens": 16, "prompts": {"fuzzy": "Q: {intent} R: {reference} A: {answer}"}})
        assert judge(intent="q", reference="r", answer="a", kind="fuzzy") is True
        no_system = make_judge({"kind": "openai", "base_url": ep.url, "model": "m", "system": ""})
        assert no_system(intent="q", reference="r", answer="a", kind="fuzzy") is True
    assert ep.bodies[0]["max_tokens"] == 16 and ep.bodies[0]["messages"] == [
        {"role": "system", "content": "Be brief"}, {"role": "user", "content": "Q: q R: r A: a"}]
    assert [m["role"] for m in ep.bodies[1]["messages"]] == ["user"]
    with pytest.raises(ValueError, match="unknown kinds"):
        OpenAIJudge("http://h/v1", "m", prompts={"fuzz": "x"})
    with pytest.raises(ValueError, match="judge prompt 'fuzzy'"):
        OpenAIJudge("http://h/v1", "m", prompts={"fuzzy": "grade {student}"})


def test_make_judge_from_config():
    assert make_judge(None) is None
    assert isinstance(make_judge({"kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "m"}), OpenAIJudge)
    j = make_judge({"kind": "callable", "target": "json:loads"})
    assert isinstance(j, CallableJudge)
    with pytest.raises(ValueError, match="needs target"):
        make_judge({"kind": "callable"})
    with pytest.raises(ValueError, match="expected 'openai' or 'callable'"):
        make_judge({"kind": "oracle"})


# --- url_match ----------------------------------------------------------------------


def nav(ref, note="GOLD in PRED"):
    return task({"eval_types": ["url_match"], "reference_url": ref, "url_note": note})


def test_url_match_gold_in_pred_with_query_parameters():
    cfg = nav("http://h:1/tok/search?q=kettle")
    assert url_match(cfg, "http://h:1/tok/search?q=kettle") == 1.0
    assert url_match(cfg, "http://h:1/tok/search/?q=kettle&page=2") == 1.0  # trailing slash, extra parameter
    assert url_match(cfg, "http://h:1/tok/search?q=toaster") == 0.0
    assert url_match(cfg, "http://h:1/tok/search") == 0.0
    assert url_match(nav("http://h:1/tok/product/KIT-100/"), "http://h:1/tok/product/KIT-100") == 1.0
    assert url_match(nav("http://h:1/tok/product/KIT-100"), "http://h:1/tok/product/KIT-101") == 0.0


def test_url_match_alternatives_and_exact_rule():
    cfg = nav("http://h/a |OR| http://h/b")
    assert url_match(cfg, "http://h/b") == 1.0
    assert url_match(nav("http://h/a", "EXACT"), "http://h/a/x") == 0.0
    assert url_match(nav("http://h/a", "EXACT"), "http://h/a/") == 1.0
    with pytest.raises(EvaluationError):
        url_match(nav("http://h/a", "FUZZY"), "http://h/a")


# --- program_html (the page logic; the browser side is in test_web_browser.py) ------------


class FakeProbe:
    def __init__(self, pages):
        self.pages, self.calls = pages, []

    def text(self, url, js, prep_actions=None):
        self.calls.append((url, js))
        return self.pages.get((url, js), "")


def html_task(*targets):
    return task({"eval_types": ["program_html"], "program_html": [
        {"url": u, "locator": loc, "required_contents": req} for u, loc, req in targets]})


def test_program_html_kinds_on_a_fake_page():
    probe = FakeProbe({("http://h/cart", "document.x"): "Qty: 2 &amp; more", (None, None): "<p>closed</p>"})
    ok = html_task(("http://h/cart", "document.x", {"must_include": ["qty: 2 & more", "nope |OR| more"]}),
                   ("last", "", {"must_exclude": ["open"]}))
    assert program_html(ok, probe, "http://h/final", {})[0] == 1.0
    bad = html_task(("http://h/cart", "document.x", {"exact_match": "Qty: 3"}))
    assert program_html(bad, probe, "http://h/final", {})[0] == 0.0
    with pytest.raises(EvaluationError, match="unknown locator"):
        program_html(html_task(("last", "window.x", {"exact_match": "a"})), probe, "http://h/final", {})


def test_program_html_helpers_are_named_functions_with_literal_arguments():
    helpers = {"latest": lambda: "http://h/orders/7", "post": lambda url: url + "/post"}
    probe = FakeProbe({("http://h/orders/7", "document.y"): "Eco Kettle x 1"})
    cfg = html_task(("func:latest()", "document.y", {"must_include": ["eco kettle"]}))
    assert program_html(cfg, probe, "http://h/final", helpers)[0] == 1.0
    assert call_helper("post('__last_url__')", helpers, "http://h/f") == "http://h/f/post"
    assert call_helper("post(__last_url__)", helpers, "http://h/f") == "http://h/f/post"
    with pytest.raises(EvaluationError, match="unknown helper"):
        call_helper("__import__('os')", helpers, "")
    with pytest.raises(EvaluationError, match="literals"):
        call_helper("post(open('x'))", helpers, "")


class PagedProbe(FakeProbe):
    """A probe that also hands helpers a page (`page(url)`), as the browser's does."""

    def __init__(self, pages, page_values):
        super().__init__(pages)
        self.page_values, self.opened = page_values, []

    @contextlib.contextmanager
    def page(self, url):
        self.opened.append(url)
        yield {"url": url, "value": self.page_values.get(url)}


def test_page_helpers_get_the_probes_page_at_the_targets_url():
    helpers = {"role": lambda page, name: page["value"] if name == "vinta" else "", "plain": lambda x: x}
    assert uses_page("role(__page__, 'vinta')") and uses_page("role(page=__page__)")
    assert not uses_page("plain('__page__')") and not uses_page("plain(__last_url__)")
    probe = PagedProbe({}, {"http://g/p/-/project_members": "Maintainer", None: "Owner"})
    cfg = html_task(("http://g/p/-/project_members", "func:role(__page__, 'vinta')", {"must_include": ["Maintainer"]}),
                    ("last", "func:role(__page__, 'vinta')", {"exact_match": "owner"}))
    assert program_html(cfg, probe, "http://g/final", helpers) == (1.0, [1.0, 1.0])
    assert probe.opened == ["http://g/p/-/project_members", None]  # None: the final page itself
    wrong = html_task(("http://g/p/-/project_members", "func:role(__page__, 'nobody')", {"must_include": ["Maintainer"]}))
    assert program_html(wrong, probe, "http://g/final", helpers)[0] == 0.0
    # a probe without pages, __page__ outside a locator, a page where none is given: errors, never a 0
    with pytest.raises(EvaluationError, match="opens none"):
        program_html(cfg, FakeProbe({}), "http://g/final", helpers)
    with pytest.raises(EvaluationError, match="only to locator helpers"):
        program_html(html_task(("func:role(__page__, 'vinta')", "", {"must_include": ["x"]})), probe, "u", helpers)
    with pytest.raises(EvaluationError, match="only to locator helpers"):
        call_helper("role(__page__, 'vinta')", helpers, "http://g/final")
    assert call_helper("role(__page__, 'vinta')", helpers, "u", page={"value": "Guest"}) == "Guest"
    with pytest.raises(EvaluationError, match="literals"):
        call_helper("role(page, 'vinta')", helpers, "u", page={"value": "Guest"})  # only the name __page__


def fuzzy_html(refs, url="last"):
    return html_task((url, "document.querySelector('textarea').value", {"fuzzy_match": refs}))


def test_program_html_fuzzy_match_asks_the_judge_once_with_the_references_joined():
    asked = []

    def judge(intent, reference, answer, kind):
        asked.append((intent, reference, answer, kind))
        return "correct" if "refund" in answer.lower() else "incorrect"

    probe = FakeProbe({(None, "document.querySelector('textarea').value"): "I want a REFUND for order 180"})
    cfg = fuzzy_html(["refund", "000000180"])
    assert program_html(cfg, probe, "http://h/f", {}, CallableJudge(judge)) == (1.0, [1.0])
    assert asked == [("What is it?", "refund, 000000180", "I want a REFUND for order 180", "fuzzy")]
    other = FakeProbe({(None, "document.querySelector('textarea').value"): "please ship faster"})
    assert evaluate(cfg, "", "http://h/f", other, judge=CallableJudge(judge)).score == 0.0
    # a judge that raises, none at all, an unreadable verdict: the evaluation fails loudly
    def broken(**kw):
        raise TimeoutError("judge timed out")

    res = evaluate(cfg, "", "http://h/f", probe, judge=CallableJudge(broken))
    assert res.score == 0.0 and "JudgeError" in res.error and "timed out" in res.error
    res = evaluate(cfg, "", "http://h/f", probe, judge=None)
    assert res.score == 0.0 and "needs a judge" in res.error
    res = evaluate(cfg, "", "http://h/f", probe, judge=CallableJudge(lambda **kw: "hmm"))
    assert "no verdict" in res.error
    with pytest.raises(JudgeError):
        program_html(cfg, probe, "http://h/f", {}, None)


# --- the "vab" semantics (VisualAgentBench's evaluator) beside "webarena" -------------------


def both(cfg):
    """The config with "webarena" and with "vab" semantics."""
    return dict(cfg), {**cfg, SEMANTICS_FIELD: "vab"}


def test_semantics_come_from_the_task_config():
    assert semantics_of({}) == "webarena" and semantics_of({SEMANTICS_FIELD: "vab"}) == "vab"
    WebTask(both(answers(exact_match="5"))[1])  # the task format allows the field
    res = evaluate({**answers(exact_match="5"), SEMANTICS_FIELD: "visualwebarena"}, "5", "http://h", None)
    assert res.score == 0.0 and "esopt_semantics 'visualwebarena'" in res.error


def test_vab_url_match_defaults_to_exact_and_tests_the_whole_url_as_a_substring():
    no_note = task({"eval_types": ["url_match"], "reference_url": "http://h/p/-/issues/719"})
    del no_note["eval"]["url_note"]
    wa, vab = both(no_note)
    assert url_match(wa, "http://h/p/-/issues/719#note_3") == 1.0  # webarena: GOLD in PRED by default
    assert url_match(vab, "http://h/p/-/issues/719#note_3") == 0.0  # vab: EXACT by default
    assert url_match(vab, "http://h/p/-/issues/719/") == 1.0
    wa, vab = both(nav("http://h/search?a=1&b=2"))
    assert url_match(wa, "http://h/search?b=2&a=1") == 1.0  # webarena: query parameters, any order
    assert url_match(vab, "http://h/search?b=2&a=1") == 0.0  # vab: the reference text inside the URL
    assert url_match(vab, "http://h/search?a=1&b=2&page=3") == 1.0 == url_match(wa, "http://h/search?a=1&b=2&page=3")
    wa, vab = both(nav("http://localhost:8023/p"))
    assert url_match(vab, "http://127.0.0.1:8023/p") == 1.0 and url_match(wa, "http://127.0.0.1:8023/p") == 0.0
    wa, vab = both(nav("http://h/a", "EXACT"))
    assert url_match(wa, "http://h/a//") == 1.0 and url_match(vab, "http://h/a//") == 0.0  # vab drops one "/"
    wa, vab = both(nav("http://h/a", None))
    assert url_match(wa, "http://h/a/b") == 1.0
    with pytest.raises(EvaluationError, match="url_note None"):
        url_match(vab, "http://h/a/b")  # VAB: url_note null is no rule


def test_vab_must_include_matches_every_one_word_reference_as_a_whole_word():
    wa, vab = both(answers(must_include=["kettle", "17.99"]))
    assert string_match(wa, "Two kettles at $17.99", None)[0] == 1.0  # webarena: substrings
    assert string_match(vab, "Two kettles at $17.99", None)[0] == 0.0  # vab: "kettle" is not a word there
    assert string_match(vab, "The kettle costs $17.99.", None)[0] == 1.0
    wa, vab = both(answers(must_include=["5", "orders"]))
    assert string_match(wa, "15 orders", None)[0] == 1.0  # webarena: whole tokens only for a one-element list
    assert string_match(vab, "15 orders", None)[0] == 0.0
    wa, vab = both(answers(must_include=["pics |OR| funny"]))
    assert string_match(vab, "posted in /f/pics", None)[0] == 1.0  # words split at "/" count too
    assert string_match(vab, "posted in picsart", None)[0] == 0.0 and string_match(wa, "posted in picsart", None)[0] == 1.0
    wa, vab = both(answers(must_include=["Emma Lopez"]))  # several words: a substring in both
    assert string_match(vab, "emma lopezz", None)[0] == 1.0 == string_match(wa, "emma lopezz", None)[0]
    assert must_include("don't", "i don'tknow", semantics="vab") == 1.0  # two words (do n't): a substring
    # program_html's must_include is word-wise in vab too
    probe = FakeProbe({(None, "document.x"): "Maintainers"})
    wa, vab = both(html_task(("last", "document.x", {"must_include": ["Maintainer"]})))
    assert program_html(wa, probe, "u", {})[0] == 1.0 and program_html(vab, probe, "u", {})[0] == 0.0


# WebArena-Lite task 81 (WebArena's 349) as VisualAgentBench's VAB-WebArena-Lite/new/test_webarena_lite.raw.json
# has it (l.2588-2617 at 9055fc2): VAB turned WebArena's {"exact_match": "yjlou"} into a must_include string.
TASK_81 = {
    "sites": ["gitlab"], "task_id": 81, "require_login": True, "storage_state": "./.auth/gitlab_state.json",
    "start_url": "__GITLAB__", "geolocation": None,
    "intent_template": "Who else have access to my repo {{repo}}, show me their usernames",
    "instantiation_dict": {"repo": "gimmiethat.space"},
    "intent": "Who else have access to my repo gimmiethat.space, show me their usernames", "require_reset": False,
    "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": "yjlou"}, "reference_url": "",
             "program_html": [], "string_note": "", "reference_answer_raw_annotation": "yjlou"},
    "intent_template_id": 298, "old_task_id": 349,
}


def test_task_81s_must_include_string_is_an_unscored_task_error_as_in_the_harness():
    """VAB asserts a list (evaluators.py:242); run.py records the AssertionError as an unhandled
    error and leaves the task unscored, counted as not passed: so do we, whatever the answer."""
    WebTask(TASK_81)  # the task file is valid: only its evaluation fails
    vab = {**TASK_81, SEMANTICS_FIELD: "vab"}
    for answer in ("yjlou", "The other member is yjlou", ""):
        res = evaluate(vab, answer, "http://127.0.0.1:8023/", None)
        assert res.score == 0.0 and res.error.startswith("EvaluationError: task 81: reference_answers.must_include")
        assert "evaluators.py:242" in res.error and not is_judge_failure(res.error)
    assert evaluate({**TASK_81, SEMANTICS_FIELD: "webarena"}, "yjlou", "u", None).score == 1.0  # one reference there
    # VAB's other asserted lists fail alike; its "N/A" fuzzy_match is a string by design
    for refs, line in (({"must_exclude": "x"}, 247), ({"one_of": "x"}, 253), ({"fuzzy_match": "x"}, 276)):
        res = evaluate({**answers(**refs), SEMANTICS_FIELD: "vab"}, "y", "u", None, judge=CallableJudge(lambda **kw: 1))
        assert res.error and f"evaluators.py:{line}" in res.error, refs
    assert evaluate({**answers(fuzzy_match="N/A"), SEMANTICS_FIELD: "vab"}, "N/A", "u", None).score == 1.0
    probe = FakeProbe({(None, "document.x"): "yjlou"})
    res = evaluate({**html_task(("last", "document.x", {"must_include": "yjlou"})), SEMANTICS_FIELD: "vab"}, "", "u", probe)
    assert res.error and "program_html required_contents.must_include" in res.error and "evaluators.py:429" in res.error
    ok = {**html_task(("last", "document.x", {"exact_match": "yjlou"})), SEMANTICS_FIELD: "vab"}
    assert evaluate(ok, "", "u", probe).score == 1.0  # exact_match is a string in VAB


def test_vab_fuzzy_match_sends_the_references_joined_in_one_question():
    asked = []

    def judge(intent, reference, answer, kind):
        asked.append(reference)
        return True

    wa, vab = both(answers(fuzzy_match=["driving: 13min", "walking: 1h 45min"]))
    assert string_match(wa, "13 and 105 minutes", CallableJudge(judge))[0] == 1.0
    assert asked == ["driving: 13min", "walking: 1h 45min"]  # webarena: one question per reference
    asked.clear()
    assert string_match(vab, "13 and 105 minutes", CallableJudge(judge))[0] == 1.0
    assert asked == ["driving: 13min, walking: 1h 45min"]  # vab: one question
    asked.clear()
    assert string_match(wa, "", CallableJudge(judge))[0] == 0.0 and asked == []  # webarena: empty, no question
    assert string_match(vab, "", CallableJudge(judge))[0] == 1.0 and asked == ["driving: 13min, walking: 1h 45min"]
    assert "needs a judge" in evaluate(vab, "x", "u", None, judge=None).error
    raising = CallableJudge(lambda **kw: 1 / 0)
    assert "ZeroDivisionError" in evaluate(vab, "x", "u", None, judge=raising).error


def test_vab_na_verdict_replaces_the_product_and_answers_keep_their_whitespace():
    cfg = task({"eval_types": ["string_match"], "reference_answers": {"exact_match": "12", "fuzzy_match": "N/A"},
                "string_note": "no such order"})
    wa, vab = both(cfg)
    says_same = CallableJudge(lambda intent, reference, answer, kind: kind == "unachievable")
    assert string_match(wa, "there is no such order", says_same)[0] == 0.0  # webarena: 0 x 1
    assert string_match(vab, "there is no such order", says_same)[0] == 1.0  # VAB: the verdict replaces the 0
    wa, vab = both(answers(exact_match="5"))
    assert string_match(wa, " 5 ", None)[0] == 1.0 and string_match(vab, " 5 ", None)[0] == 0.0
    assert clean_answer(' "x" ', "vab") == ' "x" ' and clean_answer('"x"', "vab") == "x"


def test_vab_program_html_does_not_unescape_and_a_helpers_none_fails():
    probe = FakeProbe({(None, None): "<p>Tom &amp; Jerry</p>"})
    wa, vab = both(html_task(("last", "", {"must_include": ["tom & jerry"]})))
    assert program_html(wa, probe, "u", {})[0] == 1.0 and program_html(vab, probe, "u", {})[0] == 0.0
    helpers = {"nothing": lambda: None, "yes": lambda: "yes"}
    wa, vab = both(html_task(("last", "func:nothing()", {"must_include": ["none"]}),
                             ("last", "func:yes()", {"exact_match": "yes"})))
    assert program_html(wa, FakeProbe({}), "u", helpers) == (1.0, [1.0, 1.0])  # webarena: str(None)
    assert program_html(vab, FakeProbe({}), "u", helpers) == (0.0, [0.0])  # VAB: None ends it with 0


@pytest.mark.parametrize("text, words", [  # nltk 3.10's output on each (Treebank tokenizer, untrained punkt)
    ("$17.99.", ["$", "17.99", "."]),
    ("it costs 17.99. next", ["it", "costs", "17.99.", "next"]),
    ('data-sku="b0sku2"', ["data-sku=", "''", "b0sku2", "''"]),
    ("<span>maintainer</span>", ["<", "span", ">", "maintainer", "<", "/span", ">"]),
    ("don't kellogg's", ["do", "n't", "kellogg", "'s"]),
    ("a,b 1,000 x,5 12:30 a:b end:", ["a", ",", "b", "1,000", "x,5", "12:30", "a", ":", "b", "end", ":"]),
    ("hello... world", ["hello", "...", "world"]),
    ("t-shirt a/b a=b c+d", ["t-shirt", "a/b", "a=b", "c+d"]),
    ("the kettle. it costs $5", ["the", "kettle", ".", "it", "costs", "$", "5"]),
    ("http://foo.com/x?q=1&r=2", ["http", ":", "//foo.com/x", "?", "q=1", "&", "r=2"]),
    ('he said "yes" ok', ["he", "said", "``", "yes", "''", "ok"]),
    ("cannot gonna", ["can", "not", "gon", "na"]),
    ("i'm you're they'll", ["i", "'m", "you", "'re", "they", "'ll"]),
    ("'hello' dogs' toys", ["'", "hello", "'", "dogs", "'", "toys"]),
    ("(x) a;b 50% a&b ?!", ["(", "x", ")", "a", ";", "b", "50", "%", "a", "&", "b", "?", "!"]),
    ("x—y 1.4km e.g. ok.)", ["x", "—", "y", "1.4km", "e.g.", "ok", ".", ")"]),
])
def test_word_tokens_follow_nltk(text, words):
    assert word_tokens(text) == words


def test_evaluate_multiplies_the_evaluators():
    cfg = task({"eval_types": ["string_match", "url_match"], "reference_answers": {"exact_match": "5"},
                "reference_url": "http://h/a"})
    assert evaluate(cfg, "5", "http://h/a", None).score == 1.0
    assert evaluate(cfg, "5", "http://h/b", None).score == 0.0
    assert evaluate(cfg, "6", "http://h/a", None).score == 0.0


# --- actions ------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("click [12]", Action("click", "12")),
    ("I will click it.\n```click [3]```", Action("click", "3")),
    ("type [7] [blue kettle]", Action("type", "7", "blue kettle", True)),
    ("type [7] [blue kettle] [0]", Action("type", "7", "blue kettle", False)),
    ("type [7] [a [nested] text]", Action("type", "7", "a [nested] text", True)),
    ("hover [4]", Action("hover", "4")),
    ("press [ctrl+a]", Action("press", text="Control+a")),
    ("scroll [down]", Action("scroll", text="down")),
    ("scroll [direction=up]", Action("scroll", text="up")),
    ("select [9] [feature]", Action("select", "9", "feature")),
    ("goto [http://127.0.0.1:5000/x]", Action("goto", text="http://127.0.0.1:5000/x")),
    ("go_back", Action("go_back")),
    ("stop [$17.99]", Action("stop", text="$17.99")),
    ("stop []", Action("stop", text="")),
    ('do(action="Click", element="12")', Action("click", "12")),
    ('do(action="Type", argument="hello", element="5")', Action("type", "5", "hello", False)),
    ('do(action="Search", argument="kettle", element="5")', Action("type", "5", "kettle", True)),
    ('do(action="Hover", element="2")', Action("hover", "2")),
    ('do(action="Press Enter")', Action("press", text="Enter")),
    ('do(action="Scroll Down")', Action("scroll", text="down")),
    ('do(action="Select Dropdown Option", argument="bug", element="9")', Action("select", "9", "bug")),
    ('do(action="Go Backward")', Action("go_back")),
    ('exit(message="The answer is 5")', Action("stop", text="The answer is 5")),
])
def test_both_action_syntaxes_parse(text, expected):
    assert parse_action(text) == expected


@pytest.mark.parametrize("text, says", [
    ("", "No action found"),
    ("I think the answer is 5", "No action found"),
    ("click", "needs an element id"),
    ("click [the blue one]", "element id must be the number"),
    ("type [7]", "needs an element id and a text"),
    ("scroll [left]", "scroll [down] or scroll [up]"),
    ("tab_focus", "needs a tab number"),
    ('do(action="Fly", element="1")', "unknown action"),
    ('do(action="Click")', 'needs element="ID"'),
    (None, "No action found"),
])
def test_malformed_actions_explain_themselves(text, says):
    out = parse_action(text)
    assert isinstance(out, ActionError) and says in out.message


# --- task files -------------------------------------------------------------------------


def test_load_tasks_reads_webarena_files_and_fills_site_urls(tmp_path):
    one = answers(exact_match="5")
    (tmp_path / "1.json").write_text(json.dumps(one))
    two = dict(one, task_id=2, start_url="__REDDIT__/f/books")
    (tmp_path / "2.json").write_text(json.dumps(two))
    tasks = load_tasks(tmp_path, site_urls={"shopping": "http://shop.example:7770/"})
    assert [t.id for t in tasks] == ["1", "2"]
    assert tasks[0].config["start_url"] == "http://shop.example:7770"
    assert tasks[1].config["start_url"] == "__REDDIT__/f/books"  # filled in per episode
    write_tasks(tmp_path / "all.json", tasks)
    assert [t.id for t in load_tasks(tmp_path / "all.json")] == ["1", "2"]
    with pytest.raises(TaskFormatError, match="appears twice"):
        load_tasks([one, one])


def test_malformed_task_files_are_rejected_with_the_field():
    with pytest.raises(TaskFormatError, match="missing field 'eval'"):
        WebTask({"task_id": 3, "intent": "x", "start_url": "u"})
    with pytest.raises(TaskFormatError, match="eval type 'dom_match'"):
        WebTask(task({"eval_types": ["dom_match"]}))
    with pytest.raises(TaskFormatError, match="reference_answers.regex"):
        WebTask(answers(regex="x"))
    with pytest.raises(TaskFormatError, match="url_match needs"):
        WebTask(task({"eval_types": ["url_match"]}))


def test_placeholders_resolve_including_shopping_admin():
    urls = {"shopping": "http://h:1/t", "shopping_admin": "http://h:1/t/admin"}
    assert resolve_urls("__SHOPPING_ADMIN__/login and __SHOPPING__/cart", urls) == "http://h:1/t/admin/login and http://h:1/t/cart"
    assert resolve_urls(["__GITLAB__"], urls) == ["__GITLAB__"]


# --- templates ------------------------------------------------------------------------


def test_same_seed_same_tasks_and_splits_are_disjoint():
    a, b = generate_tasks(0, "train"), generate_tasks(0, "train")
    assert [t.to_json() for t in a] == [t.to_json() for t in b]
    ev = generate_tasks(0, "eval")
    assert not {t.intent for t in a} & {t.intent for t in ev}
    assert all(split_of(t.intent) == "train" for t in a) and all(split_of(t.intent) == "eval" for t in ev)
    assert len({t.id for t in a + ev}) == len(a) + len(ev)
    for tid in TEMPLATES:  # a smaller per_template is a prefix of each template's tasks
        every = [t.to_json() for t in generate_tasks(0, "train", templates=[tid])]
        assert [t.to_json() for t in generate_tasks(0, "train", 2, templates=[tid])] == every[:2]


def test_every_template_has_training_tasks_and_every_evaluator_kind_is_used():
    train = generate_tasks(0, "train")
    assert {t.template_id for t in train} == set(TEMPLATES)
    kinds = {k for t in train + generate_tasks(0, "eval") for k in t.eval_types}
    assert kinds == {"string_match", "url_match", "program_html"}
    refs = {k for t in train for k in (t.config["eval"]["reference_answers"] or {})}
    assert {"exact_match", "must_include", "must_exclude", "one_of"} <= refs
    for t in train:
        assert t.expert and t.expert[-1]["do"] == "stop"


def test_a_different_seed_gives_different_sites_and_tasks():
    assert [t.intent for t in generate_tasks(0, "train", 3)] != [t.intent for t in generate_tasks(1, "train", 3)]

"""The web benchmark's pure parts, no browser: evaluators, action parsing, task files, templates."""

import json

import pytest

from esopt.envs.web.actions import Action, ActionError, parse_action
from esopt.envs.web.evaluators import (
    CallableJudge,
    EvaluationError,
    JudgeError,
    OpenAIJudge,
    call_helper,
    clean_answer,
    evaluate,
    make_judge,
    program_html,
    string_match,
    url_match,
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
    ("new_tab", "tabs are not supported"),
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

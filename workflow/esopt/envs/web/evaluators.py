"""WebArena's evaluators: string_match, url_match and program_html, with WebArena's semantics.

Scores are 0 or 1; a task's score is the product over its eval_types, and within one
evaluator the product over its checks (every check must pass).

string_match, on the answer of `stop [answer]`, cleaned (`clean_answer`: surrounding
whitespace and one pair of quotes removed, lower-cased):
  exact_match   the cleaned answer equals the cleaned reference
  must_include  every listed phrase is a substring of the answer (alternatives joined by
                " |OR| " : any one); a one-element list whose reference is a single character
                is matched against the answer's tokens, so "0" is not found inside "10"
  must_exclude  no listed phrase is in the answer (token-wise for one-token phrases)
  one_of        at least one listed phrase is a substring of the answer
  fuzzy_match   a judge (an LLM, or any callable) says the answer means each reference;
                the reference "N/A" asks for an exact "N/A" first, then the judge compares
                the answer with eval.string_note (why the task cannot be done)
url_match: with url_note "GOLD in PRED" (the default), some reference URL's host+path
  (trailing slashes dropped) is a substring of the final page's, and every query
  parameter of the references has one of its reference values in the final URL;
  "EXACT": the URL equals a reference. References are joined by " |OR| ".
program_html: for each target, the text a locator selects on a page must contain
  (must_include, with " |OR| " alternatives; must_exclude) or equal (exact_match) the
  required contents, after HTML unescaping. `url` is "last" (the final page), a URL
  (opened on a fresh page of the episode's browser context, so in the episode's site
  state and login), or "func:helper(...)"; `locator` is "" (the page's HTML),
  JavaScript starting with "document." or "[...document." (its value as text; a script
  error selects ""), or "func:helper(...)". Helpers are named functions the sites
  provide (esopt.envs.web.sites.server); the call's arguments are literals, with
  __last_url__ standing for the final URL. No task text is ever run as Python.

A judge that fails (no answer, an unreadable verdict, an exception) raises JudgeError;
the environment records it with the episode (info["error"]) instead of scoring a 0.
"""

from __future__ import annotations

import ast
import html
import importlib
import json
import logging
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

OR = " |OR| "


class JudgeError(RuntimeError):
    """The fuzzy-match judge could not give a verdict; the episode records this, never a silent 0."""


class EvaluationError(RuntimeError):
    """A task's evaluation could not be run (a malformed locator, an unknown helper)."""


# --- string matching ------------------------------------------------------------------


def clean_answer(answer: str) -> str:
    answer = str(answer).strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "'\"":
        answer = answer[1:-1]
    return answer.lower()


def tokens(text: str) -> list[str]:
    """Words and punctuation marks (close to nltk's word_tokenize for matching purposes)."""
    return re.findall(r"\w+(?:[.,]\d+)*|[^\w\s]", text)


def exact_match(ref: str, pred: str) -> float:
    return float(clean_answer(pred) == clean_answer(ref))


def must_include(ref: str, pred: str, tokenize: bool = False) -> float:
    r, p = clean_answer(ref), clean_answer(pred)
    if tokenize and len(r) == 1 and len(tokens(r)) == 1:
        return float(r in tokens(p))
    return float(r in p)


def must_exclude(ref: str, pred: str) -> float:
    r, p = clean_answer(ref), clean_answer(pred)
    if len(tokens(r)) == 1:
        return float(r not in tokens(p))
    return float(r not in p)


def one_of(refs: list[str], pred: str) -> float:
    p = clean_answer(pred)
    return float(any(clean_answer(r) in p for r in refs))


# --- the judge ------------------------------------------------------------------------


class Judge(Protocol):
    def __call__(self, *, intent: str, reference: str, answer: str, kind: str) -> bool:
        """Whether `answer` to `intent` means `reference` (kind "fuzzy"), or, kind
        "unachievable", gives the reason `reference` for the task not being doable."""


JUDGE_PROMPT = {
    "fuzzy": ("You grade a student's answer to a question against the reference answer. Different wording is "
              "fine; what counts is whether the student's answer means the same as the reference.\n"
              "Question: {intent}\nReference answer: {reference}\nStudent answer: {answer}\n"
              "Reply with one word: correct, incorrect, or partially correct."),
    "unachievable": ("A task cannot be done, for this reason: {reference}\nTask: {intent}\n"
                     "Does the following reply say the task cannot be done, for that reason? Reply: {answer}\n"
                     "Reply with one word: same (the same reason) or different."),
}


def read_verdict(text: str, kind: str) -> bool:
    """The judge's one-word verdict; JudgeError when the reply holds none."""
    t = text.strip().lower()
    if kind == "unachievable":
        if "different" in t:
            return False
        if "same" in t:
            return True
    else:
        if "partially correct" in t or "incorrect" in t:
            return False
        if "correct" in t:
            return True
    raise JudgeError(f"the judge's reply has no verdict: {text[:200]!r}")


class CallableJudge:
    """A local judge: `fn(intent=..., reference=..., answer=..., kind=...)` returning a bool, a
    number (> 0.5 passes) or a verdict text; an exception becomes a JudgeError."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn

    def __call__(self, *, intent: str, reference: str, answer: str, kind: str) -> bool:
        try:
            out = self.fn(intent=intent, reference=reference, answer=answer, kind=kind)
        except JudgeError:
            raise
        except Exception as e:
            raise JudgeError(f"the judge {getattr(self.fn, '__name__', self.fn)!r} failed: {type(e).__name__}: {e}") from e
        if isinstance(out, bool):
            return out
        if isinstance(out, (int, float)):
            return float(out) > 0.5
        if isinstance(out, str):
            return read_verdict(out, kind)
        raise JudgeError(f"the judge returned {type(out).__name__}, expected a bool, a number or a verdict text")


class OpenAIJudge:
    """A judge behind an OpenAI-compatible chat endpoint (`base_url`/chat/completions), as
    WebArena's fuzzy match uses; greedy, one short reply per check."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 60.0, retries: int = 2):
        if not re.match(r"^https?://", base_url):
            raise ValueError(f"judge base_url must start with http:// or https://, got {base_url!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.timeout, self.retries = model, float(timeout), int(retries)
        self.api_key = api_key if api_key is not None else os.environ.get(api_key_env, "")

    def __call__(self, *, intent: str, reference: str, answer: str, kind: str) -> bool:
        body = json.dumps({"model": self.model, "temperature": 0, "max_tokens": 16, "messages": [
            {"role": "user", "content": JUDGE_PROMPT[kind].format(intent=intent, reference=reference, answer=answer)}]})
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = None
        for attempt in range(self.retries + 1):
            try:
                req = urllib.request.Request(self.url, data=body.encode(), headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    reply = json.loads(r.read())["choices"][0]["message"]["content"]
                return read_verdict(reply or "", kind)
            except JudgeError:
                raise
            except (urllib.error.URLError, OSError, KeyError, IndexError, TypeError, ValueError) as e:
                last = e
                if attempt < self.retries:
                    time.sleep(min(2 ** attempt, 8))
        raise JudgeError(f"the judge at {self.url} failed after {self.retries + 1} tries: {type(last).__name__}: {last}")


def make_judge(spec: Any) -> Judge | None:
    """A judge from config: None; a callable; {"kind": "openai", "base_url", "model", ["api_key_env"],
    ["timeout"]}; or {"kind": "callable", "target": "package.module:function"}."""
    if spec is None or isinstance(spec, (CallableJudge, OpenAIJudge)):
        return spec
    if callable(spec):
        return CallableJudge(spec)
    if not isinstance(spec, Mapping) or "kind" not in spec:
        raise ValueError(f"judge: expected None, a callable or a mapping with 'kind', got {spec!r}")
    kind = spec["kind"]
    if kind == "openai":
        missing = [k for k in ("base_url", "model") if not spec.get(k)]
        if missing:
            raise ValueError(f"judge kind 'openai' needs {missing}")
        return OpenAIJudge(spec["base_url"], spec["model"], api_key_env=spec.get("api_key_env", "OPENAI_API_KEY"),
                           timeout=spec.get("timeout", 60.0), retries=spec.get("retries", 2))
    if kind == "callable":
        target = str(spec.get("target", ""))
        mod, _, name = target.partition(":")
        if not mod or not name:
            raise ValueError(f"judge kind 'callable' needs target 'package.module:function', got {target!r}")
        return CallableJudge(getattr(importlib.import_module(mod), name))
    raise ValueError(f"judge kind {kind!r}: expected 'openai' or 'callable'")


def string_match(config: Mapping[str, Any], answer: str, judge: Judge | None) -> tuple[float, dict[str, float]]:
    pred = clean_answer(answer)
    refs = config["eval"]["reference_answers"]
    score, details = 1.0, {}
    for approach, value in refs.items():
        if approach == "exact_match":
            s = exact_match(str(value), pred)
        elif approach == "must_include":
            values = value if isinstance(value, list) else [value]
            s = 1.0
            for v in values:
                s *= float(any(must_include(alt, pred, tokenize=len(values) == 1) for alt in str(v).split(OR)))
        elif approach == "must_exclude":
            s = 1.0
            for v in (value if isinstance(value, list) else [value]):
                s *= must_exclude(str(v), pred)
        elif approach == "one_of":
            s = one_of([str(v) for v in (value if isinstance(value, list) else [value])], pred)
        elif approach == "fuzzy_match":
            s = _fuzzy(config, value, pred, judge)
        else:
            raise EvaluationError(f"unknown reference_answers kind {approach!r}")
        details[approach] = s
        score *= s
    return score, details


def _fuzzy(config: Mapping[str, Any], value: Any, pred: str, judge: Judge | None) -> float:
    intent = config.get("intent", "")
    if value == "N/A":
        if exact_match("N/A", pred):
            return 1.0
        if judge is None:
            raise JudgeError("fuzzy_match needs a judge (eval.judge in the config) and none is set")
        return float(judge(intent=intent, reference=config["eval"].get("string_note", ""), answer=pred, kind="unachievable"))
    if judge is None:
        raise JudgeError("fuzzy_match needs a judge (eval.judge in the config) and none is set")
    s = 1.0
    for ref in (value if isinstance(value, list) else [value]):
        if not pred:  # WebArena: an empty answer matches only an empty reference
            s *= float(not str(ref))
        else:
            s *= float(judge(intent=intent, reference=str(ref), answer=pred, kind="fuzzy"))
    return s


# --- URLs -------------------------------------------------------------------------------


def _clean_url(url: str) -> str:
    return str(url).strip().rstrip("/")


def _split_url(url: str) -> tuple[str, dict[str, list[str]]]:
    parsed = urllib.parse.urlparse(url)
    return _clean_url(parsed.netloc + parsed.path), urllib.parse.parse_qs(parsed.query)


def url_match(config: Mapping[str, Any], final_url: str) -> float:
    refs = [_clean_url(u) for u in str(config["eval"]["reference_url"]).split(OR)]
    pred = _clean_url(final_url)
    rule = config["eval"].get("url_note") or "GOLD in PRED"
    if rule == "EXACT":
        return float(pred in refs)
    if rule != "GOLD in PRED":
        raise EvaluationError(f"unknown url_note {rule!r}: expected 'GOLD in PRED' or 'EXACT'")
    pred_base, pred_query = _split_url(pred)
    ref_query: dict[str, set[str]] = defaultdict(set)
    base_ok = False
    for ref in refs:
        base, query = _split_url(ref)
        base_ok = base_ok or base in pred_base
        for k, vs in query.items():
            ref_query[k].update(vs)
    query_ok = all(any(v in pred_query.get(k, []) for v in vs) for k, vs in ref_query.items())
    return float(base_ok and query_ok)


# --- program_html -----------------------------------------------------------------------


class PageProbe(Protocol):
    """How program_html reads pages: `text(url, js)` is the value of `js` on `url` (None: the
    final page), `js` None meaning the page's HTML; a script error gives ""."""

    def text(self, url: str | None, js: str | None, prep_actions: list[str] | None = None) -> str: ...


def call_helper(expr: str, helpers: Mapping[str, Callable[..., Any]], final_url: str) -> Any:
    """Run "name(literal, ...)" with `name` one of `helpers`; __last_url__ is the final URL."""
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError as e:
        raise EvaluationError(f"helper call {expr!r} does not parse: {e.msg}") from e
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise EvaluationError(f"helper call {expr!r}: expected name(arguments)")
    name = node.func.id
    if name not in helpers:
        raise EvaluationError(f"unknown helper {name!r}: these sites provide {sorted(helpers)}")

    def arg(a):
        if isinstance(a, ast.Name) and a.id == "__last_url__":
            return final_url
        try:
            value = ast.literal_eval(a)
        except ValueError as e:
            raise EvaluationError(f"helper call {expr!r}: arguments must be literals or __last_url__") from e
        return value.replace("__last_url__", final_url) if isinstance(value, str) else value

    args = [arg(a) for a in node.args]
    kwargs = {k.arg: arg(k.value) for k in node.keywords}
    return helpers[name](*args, **kwargs)


def program_html(config: Mapping[str, Any], probe: PageProbe, final_url: str,
                 helpers: Mapping[str, Callable[..., Any]]) -> tuple[float, list[float]]:
    score, per_target = 1.0, []
    for target in config["eval"]["program_html"]:
        url = str(target["url"])
        if url.startswith("func:"):
            url = str(call_helper(url[len("func:"):], helpers, final_url))
        page_url = None if url == "last" else url
        locator = str(target.get("locator", ""))
        if not locator.strip():
            selected = probe.text(page_url, None)
        elif locator.startswith(("document.", "[...document.")):
            selected = probe.text(page_url, locator, target.get("prep_actions"))
        elif locator.startswith("func:"):
            selected = str(call_helper(locator[len("func:"):], helpers, final_url))
        else:
            raise EvaluationError(f"unknown locator {locator[:60]!r}: expected '', 'document...' or 'func:...'")
        selected = html.unescape(selected or "")
        req = target["required_contents"]
        if "exact_match" in req:
            s = exact_match(str(req["exact_match"]), selected)
        elif "must_include" in req:
            s = 1.0
            for content in req["must_include"]:
                s *= float(any(must_include(alt, selected) for alt in str(content).split(OR)))
        elif "must_exclude" in req:
            s = 1.0
            for content in req["must_exclude"]:
                s *= must_exclude(str(content), selected)
        else:
            raise EvaluationError(f"unknown required_contents {sorted(req)}: expected exact_match, must_include "
                                  "or must_exclude")
        per_target.append(s)
        score *= s
    return score, per_target


@dataclass
class EvalResult:
    score: float
    details: dict[str, Any] = field(default_factory=dict)  # per evaluator: its score and checks
    error: str | None = None  # why the evaluation could not be done (judge, malformed task, browser)


def evaluate(config: Mapping[str, Any], answer: str, final_url: str, probe: PageProbe | None,
             helpers: Mapping[str, Callable[..., Any]] | None = None, judge: Judge | None = None) -> EvalResult:
    """The task's score for this answer and final page (config with placeholders filled in).
    Judge and task errors come back in `error` with score 0, never as a quiet miss."""
    details: dict[str, Any] = {}
    score = 1.0
    try:
        for kind in config["eval"]["eval_types"]:
            if kind == "string_match":
                s, d = string_match(config, answer, judge)
                details["string_match"] = {"score": s, **d}
            elif kind == "url_match":
                s = url_match(config, final_url)
                details["url_match"] = {"score": s, "url": final_url}
            elif kind == "program_html":
                if probe is None:
                    raise EvaluationError("program_html needs a page probe (a browser)")
                s, per = program_html(config, probe, final_url, helpers or {})
                details["program_html"] = {"score": s, "targets": per}
            else:
                raise EvaluationError(f"unknown eval type {kind!r}")
            score *= s
    except (JudgeError, EvaluationError) as e:
        log.error("task %s: evaluation failed: %s", config.get("task_id"), e)
        return EvalResult(0.0, details, f"{type(e).__name__}: {e}")
    return EvalResult(score, details)

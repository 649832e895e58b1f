"""WebArena's evaluators: string_match, url_match and program_html, in two semantics.

Scores are 0 or 1; a task's score is the product over its eval_types, and within one
evaluator the product over its checks (every check must pass).

Semantics (the task config's esopt addition "esopt_semantics", `semantics_of`):
  "webarena" (the default; the generated local tasks): WebArena's own evaluator, below.
  "vab": VisualAgentBench's VAB-WebArena-Lite evaluator (THUDM/VisualAgentBench @ 9055fc2,
    VAB-WebArena-Lite/new/evaluators.py, which replaces WebArena's), as the WebArena-Lite
    results were scored; webarena.load_suite sets it on the tasks it reads from VAB's files.
    Where it differs, below as "vab:".

string_match, on the answer of `stop [answer]`, cleaned (`clean_answer`: surrounding
whitespace and one pair of quotes removed, lower-cased; vab: no whitespace removed):
  exact_match   the cleaned answer equals the cleaned reference
  must_include  every listed phrase is a substring of the answer (alternatives joined by
                " |OR| " : any one); a one-element list whose reference is a single character
                is matched against the answer's tokens, so "0" is not found inside "10".
                vab: every reference that is one word (`word_tokens`, nltk's word_tokenize)
                must be one of the answer's words, or a part of one split at "/"; longer
                references are substrings. vab: must_include, must_exclude, one_of and a
                fuzzy_match other than "N/A" must be lists, or the task cannot be scored
                (EvaluationError), as VAB's asserts make it (Lite task 81; VAB_LISTS)
  must_exclude  no listed phrase is in the answer (word-wise for one-word phrases)
  one_of        at least one listed phrase is a substring of the answer
  fuzzy_match   a judge (an LLM, or any callable) says the answer means each reference (an
                empty answer matches only an empty reference, without asking); vab: the
                references joined by ", " go to the judge in one question, an empty answer
                too. The reference "N/A" asks for an exact "N/A" first, then the judge compares
                the answer with eval.string_note (why the task cannot be done); vab: when the
                product so far is not 1 that verdict replaces it, as VAB's loop does
url_match: with url_note "GOLD in PRED" (the default), some reference URL's host+path
  (trailing slashes dropped) is a substring of the final page's, and every query
  parameter of the references has one of its reference values in the final URL;
  "EXACT": the URL equals a reference. References are joined by " |OR| ".
  vab: no url_note means "EXACT"; "GOLD in PRED" is a plain substring test of a whole
  reference URL in the final URL (query string as written); "localhost" reads as 127.0.0.1
  and one trailing "/" is dropped; any other url_note (null, "") is an EvaluationError.
program_html: for each target, the text a locator selects on a page must contain
  (must_include, with " |OR| " alternatives; must_exclude) or equal (exact_match) the
  required contents, after HTML unescaping (vab: none; its must_include is word-wise as
  above), or a judge must find that it means them (fuzzy_match: the references joined by
  ", ", one question, kind "fuzzy"; VAB's addition, the same in both semantics). `url` is
  "last" (the final page), a URL (opened on a fresh page of the episode's browser context,
  so in the episode's site state and login; vab: then 3 s of settling, as VAB sleeps), or
  "func:helper(...)"; `locator` is "" (the page's HTML), JavaScript starting with
  "document." or "[...document." (its value as text; a script error selects ""; vab: null
  selects "None"), or "func:helper(...)". Helpers are named functions the sites provide
  (esopt.envs.web.sites.server); the call's arguments are literals, __last_url__ standing
  for the final URL and, in a locator, __page__ for a live Playwright page at the target's
  URL (the probe's `page(url)`). vab: a helper's None fails the evaluator. No task text is
  ever run as Python.

The judge (`make_judge`): a callable, or OpenAIJudge, which asks VisualAgentBench's questions with
VAB's settings (JUDGE_PROMPT, JUDGE_SYSTEM, JUDGE_SETTINGS) and reads the verdict as VAB does.
A judge that fails (no answer, a reply without a verdict, an exception) or is missing where a
check needs one raises JudgeError; the environment records it with the episode
(info["error"] starting "JudgeError:", `is_judge_failure`) instead of scoring a 0, and an
evaluation round stops on it (esopt.runs.tool_episodes).
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


# --- semantics ------------------------------------------------------------------------

SEMANTICS = ("webarena", "vab")
SEMANTICS_FIELD = "esopt_semantics"  # the task config's field (an esopt addition, like "expert")


def semantics_of(config: Mapping[str, Any]) -> str:
    """The task's evaluator semantics: "webarena" unless its config says "vab"."""
    value = config.get(SEMANTICS_FIELD)
    if value is None:
        return "webarena"
    if value not in SEMANTICS:
        raise EvaluationError(f"{SEMANTICS_FIELD} {value!r}: expected one of {SEMANTICS}")
    return value


# --- string matching ------------------------------------------------------------------


def clean_answer(answer: str, semantics: str = "webarena") -> str:
    """Lower case, one pair of surrounding quotes removed; "webarena" strips whitespace first."""
    answer = str(answer)
    if semantics == "vab":  # VAB's clean_answer keeps the whitespace (and takes a lone quote as a pair)
        if answer[:1] in ("'", '"') and answer.endswith(answer[0]):
            answer = answer[1:-1]
        return answer.lower()
    answer = answer.strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "'\"":
        answer = answer[1:-1]
    return answer.lower()


def tokens(text: str) -> list[str]:
    """Words and punctuation marks (the "webarena" semantics' word test)."""
    return re.findall(r"\w+(?:[.,]\d+)*|[^\w\s]", text)


# --- Penn Treebank words (what nltk.word_tokenize gives, for matching) ---------------------

_QUOTE_OPEN = re.compile(r'(^|[\s(\[{<])"')
_PADDED = [
    (re.compile(r"\.{2,}"), r" \g<0> "),                       # ellipses
    (re.compile(r"`+|--|[;@#$%&?!*\[\](){}<>«»“”‘’„—–]"), r" \g<0> "),
    (re.compile(r"[:,](?!\d)"), r" \g<0> "),                   # not inside 12:30, 1,000
]
_SUFFIX = re.compile(r"(?i)^(.+?)('s|'m|'d|'ll|'re|'ve|n't|')$")
_SUFFIX_WORDS = {"'s", "'m", "'d", "'ll", "'re", "'ve"}
_SPLIT_WORDS = {"cannot": ("can", "not"), "gonna": ("gon", "na"), "gotta": ("got", "ta"), "wanna": ("wan", "na"),
                "gimme": ("gim", "me"), "lemme": ("lem", "me"), "d'ye": ("d", "'ye"), "more'n": ("more", "'n")}
_CLOSERS = {")", "]", "}", ">", "''", "'", "»", "”", "’"}
_NUMBER = re.compile(r"^-?[.,]?\d[\d,.\-]*$")
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "etc", "inc", "ltd", "co", "no", "mt", "ave", "prof"}


def word_tokens(text: str) -> list[str]:
    """`text`'s words in the Penn Treebank convention nltk.word_tokenize follows (VAB matches
    one-word references against these): punctuation, brackets and quotes are tokens, but not
    "-", "/", "=", "+" or "_" inside a word; commas and colons stay inside numbers (1,000,
    12:30); "don't" is "do" + "n't", "it's" "it" + "'s"; a sentence's final period is a token,
    other periods stay (17.99, e.g.). Double quotes become `` and ''. An approximation written
    from nltk's documented and observed behaviour (nltk is not a dependency): sentence ends in
    the middle of a text are guessed as punkt does for lower-cased text (a period after a word,
    not after a number, a single letter, an abbreviation or a word with inner periods)."""
    text = _QUOTE_OPEN.sub(r"\1 `` ", str(text))
    text = text.replace('"', " '' ")
    for pattern, repl in _PADDED:
        text = pattern.sub(repl, text)
    raw = text.split()
    last = len(raw) - 1  # the text's last word (closing brackets and quotes after it aside)
    while last >= 0 and raw[last] in _CLOSERS:
        last -= 1
    out: list[str] = []
    for i, w in enumerate(raw):
        if w.startswith("'") and len(w) > 1 and w.lower() not in _SUFFIX_WORDS and not w.startswith("''"):
            out.append("'")
            w = w[1:]
        period = False  # the text's last period is a token; one in the middle too, but not after
        if len(w) > 1 and w.endswith(".") and not w.endswith(".."):  # a number, letter or abbreviation
            stem = w[:-1]
            period = i == last or not (_NUMBER.match(stem) or len(stem) == 1 or "." in stem
                                       or stem.lower() in _ABBREVIATIONS)
            w = stem if period else w
        closing = len(w) > 2 and w.endswith("''")  # 12'' (inches)
        w = w[:-2] if closing else w
        m = _SUFFIX.match(w) if w not in ("''", "'") else None
        if w.lower() in _SPLIT_WORDS:
            out.extend(_SPLIT_WORDS[w.lower()])
        elif m and not (m.group(2) == "'" and m.group(1).endswith("'")):
            out.extend([m.group(1), m.group(2)])
        else:
            out.append(w)
        if closing:
            out.append("''")
        if period:
            out.append(".")
    return out


def exact_match(ref: str, pred: str, semantics: str = "webarena") -> float:
    return float(clean_answer(pred, semantics) == clean_answer(ref, semantics))


def must_include(ref: str, pred: str, tokenize: bool = False, semantics: str = "webarena") -> float:
    r, p = clean_answer(ref, semantics), clean_answer(pred, semantics)
    if semantics == "vab":  # any one-word reference is a whole word of the answer, "/" splitting words too
        if len(word_tokens(r)) == 1:
            words = word_tokens(p)
            return float(r in words or any(r in w.split("/") for w in words if "/" in w))
        return float(r in p)
    if tokenize and len(r) == 1 and len(tokens(r)) == 1:
        return float(r in tokens(p))
    return float(r in p)


def must_exclude(ref: str, pred: str, semantics: str = "webarena") -> float:
    r, p = clean_answer(ref, semantics), clean_answer(pred, semantics)
    split = word_tokens if semantics == "vab" else tokens
    if len(split(r)) == 1:
        return float(r not in split(p))
    return float(r not in p)


def one_of(refs: list[str], pred: str, semantics: str = "webarena") -> float:
    p = clean_answer(pred, semantics)
    return float(any(clean_answer(r, semantics) in p for r in refs))


# --- the judge ------------------------------------------------------------------------


class Judge(Protocol):
    def __call__(self, *, intent: str, reference: str, answer: str, kind: str) -> bool:
        """Whether `answer` to `intent` means `reference` (kind "fuzzy"), or, kind
        "unachievable", gives the reason `reference` for the task not being doable."""


# The judge's questions, VisualAgentBench's own (data, reproduced): VAB-WebArena-Lite/new/
# helper_functions_eval.py, llm_fuzzy_match l.586-591 and llm_ua_match l.620-629, each asked after
# the system message JUDGE_SYSTEM (l.593, l.631) with temperature 0, top_p 1.0 and max_tokens 768
# (l.600-606, l.635-641); the model is the config's (VAB: gpt-4-1106-preview, l.601; the authors'
# webarena-train-time/vab_extensions/evaluation_judge.patch l.6, l.10: gpt-4.1-mini).
JUDGE_PROMPT = {
    "fuzzy": ("Help a teacher to grade the answer of a student given a question. Keep in mind that the student "
              "may use different phrasing or wording to answer the question. The goal is to evaluate whether the "
              "answer is semantically equivalent to the reference answer.\n"
              "question: {intent}\n"
              "reference answer: {reference}\n"
              "all the string 'N/A' that you see is a special sequence that means 'not achievable'\n"
              "student answer: {answer}\n"
              "Conclude the judgement by 'correct', 'incorrect', or 'partially correct'. Only output one of these "
              "options, and nothing else."),
    "unachievable": ("task: {intent}\n"
                     "actual unachievable reason: {reference}\n"
                     "reported unachievable reason: {answer}\n"
                     "The task described above is inherently unachievable due to the reason specified under 'actual "
                     "unachievable reason'. An individual previously attempted this task and was unable to complete "
                     "it. They provided a reason for their failure, which is listed under 'reported unachievable "
                     "reason'. Your role is to review both the actual and reported reasons. Determine if the reported "
                     "reason aligns with the actual reason, even if implicitly. If the stated reason is in line with "
                     "the actual reason, respond with 'same'. Otherwise, respond with 'different'."),
}
JUDGE_SYSTEM = "You are a helpful assistant"
JUDGE_SETTINGS = {"temperature": 0, "top_p": 1.0, "max_tokens": 768}
JUDGE_RETRIES = 3  # VAB's retry_with_exponential_backoff (new/openai_utils.py l.21-32): 3 retries


def read_verdict(text: str, kind: str) -> bool:
    """The judge's verdict as VAB reads it (helper_functions_eval.py l.608-612, l.643-647): lower
    case; "fuzzy": "partially correct" or "incorrect" anywhere fails, else "correct" passes;
    "unachievable": "different" fails, else "same" passes. A reply with neither is VAB's failed
    assert (the task unscored): JudgeError."""
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
    """A judge behind an OpenAI-compatible chat endpoint (`base_url`/chat/completions) asking
    what VisualAgentBench's judge asks, as it asks it: JUDGE_PROMPT after the system message
    JUDGE_SYSTEM, temperature 0, top_p 1.0, max_tokens 768, the verdict read by read_verdict.
    `prompts` (kind -> a template with {intent}, {reference} and {answer}), `system` ("" for
    none) and `max_tokens` replace those. HTTP 429, 400 and 5xx replies and lost connections
    are retried `retries` times with exponential backoff (VAB: 3); what still fails, and a reply
    without a verdict, raise JudgeError."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 60.0, retries: int = JUDGE_RETRIES, prompts: Mapping[str, str] | None = None,
                 system: str | None = None, max_tokens: int = JUDGE_SETTINGS["max_tokens"]):
        if not re.match(r"^https?://", str(base_url)):
            raise ValueError(f"judge base_url must start with http:// or https://, got {base_url!r}")
        if not model:
            raise ValueError("judge model: expected the served model's name (the authors': gpt-4.1-mini)")
        unknown = sorted(set(prompts or {}) - set(JUDGE_PROMPT))
        if unknown:
            raise ValueError(f"judge prompts for unknown kinds {unknown}: expected {sorted(JUDGE_PROMPT)}")
        for kind, template in (prompts or {}).items():
            try:
                str(template).format(intent="", reference="", answer="")
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(f"judge prompt {kind!r}: a template with only {{intent}}, {{reference}} and "
                                 f"{{answer}} in braces expected ({type(e).__name__}: {e})") from e
        if int(retries) < 0 or int(max_tokens) < 1:
            raise ValueError(f"judge retries must be >= 0 and max_tokens >= 1, got {retries!r} and {max_tokens!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.timeout, self.retries = model, float(timeout), int(retries)
        self.api_key = api_key if api_key is not None else os.environ.get(api_key_env, "")
        self.prompts = {**JUDGE_PROMPT, **{k: str(v) for k, v in (prompts or {}).items()}}
        self.system = JUDGE_SYSTEM if system is None else str(system)
        self.max_tokens = int(max_tokens)

    def request(self, *, intent: str, reference: str, answer: str, kind: str) -> dict[str, Any]:
        """The chat-completions body this judge posts for one check."""
        text = self.prompts[kind].format(intent=intent, reference=reference, answer=answer)
        messages = [{"role": "system", "content": self.system}] if self.system else []
        return {"model": self.model, **JUDGE_SETTINGS, "max_tokens": self.max_tokens,
                "messages": [*messages, {"role": "user", "content": text}]}

    def __call__(self, *, intent: str, reference: str, answer: str, kind: str) -> bool:
        body = json.dumps(self.request(intent=intent, reference=reference, answer=answer, kind=kind)).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        why = ""
        for attempt in range(self.retries + 1):
            try:
                req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    reply = json.loads(r.read())["choices"][0]["message"]["content"]
            except urllib.error.HTTPError as e:
                detail = e.read()[:300].decode(errors="replace")
                why = f"HTTP {e.code} {detail}".strip()
                if not (e.code in (400, 429) or e.code >= 500):
                    break  # a wrong key, model or URL: asking again changes nothing
            except (urllib.error.URLError, OSError, KeyError, IndexError, TypeError, ValueError) as e:
                why = f"{type(e).__name__}: {e}"
            else:
                return read_verdict(reply if isinstance(reply, str) else "", kind)
            if attempt < self.retries:
                time.sleep(min(2 ** (attempt + 1), 16))
        raise JudgeError(f"the judge {self.model!r} at {self.url} failed after {attempt + 1} tries: {why}")


def make_judge(spec: Any) -> Judge | None:
    """A judge from config: None; a callable; {"kind": "openai", "base_url", "model", ["api_key_env"],
    ["timeout"], ["retries"], ["prompts"], ["system"], ["max_tokens"]}; or {"kind": "callable",
    "target": "package.module:function"}."""
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
                           timeout=spec.get("timeout", 60.0), retries=spec.get("retries", JUDGE_RETRIES),
                           prompts=spec.get("prompts"), system=spec.get("system"),
                           max_tokens=spec.get("max_tokens", JUDGE_SETTINGS["max_tokens"]))
    if kind == "callable":
        target = str(spec.get("target", ""))
        mod, _, name = target.partition(":")
        if not mod or not name:
            raise ValueError(f"judge kind 'callable' needs target 'package.module:function', got {target!r}")
        return CallableJudge(getattr(importlib.import_module(mod), name))
    raise ValueError(f"judge kind {kind!r}: expected 'openai' or 'callable'")


# Where VAB's evaluator asserts a list (VAB-WebArena-Lite/new/evaluators.py, line): any other value
# raises AssertionError there, which run.py (l.555-563) catches as an "[Unhandled Error]": the task is
# left unscored (its actions/N.json keeps score -0.1, l.298 and l.444), which score.py (l.73-75, l.12)
# counts as not passed. WebArena-Lite task 81 (`"must_include": "yjlou"`) is one.
VAB_LISTS = {"must_include": 242, "must_exclude": 247, "one_of": 253, "fuzzy_match": 276}
VAB_HTML_LISTS = {"must_include": 429, "must_exclude": 442, "fuzzy_match": 474}


def _vab_list(config: Mapping[str, Any], where: str, value: Any, line: int) -> None:
    if not isinstance(value, list):
        raise EvaluationError(
            f"task {config.get('task_id')}: {where} is {type(value).__name__} {value!r}, where VisualAgentBench's "
            f"evaluator asserts a list (VAB-WebArena-Lite/new/evaluators.py:{line}); its harness records the task "
            "as an unhandled error, unscored, and counts it as not passed")


def string_match(config: Mapping[str, Any], answer: str, judge: Judge | None) -> tuple[float, dict[str, float]]:
    sem = semantics_of(config)
    pred = clean_answer(answer, sem)
    refs = config["eval"]["reference_answers"]
    score, details = 1.0, {}
    for approach, value in refs.items():
        if sem == "vab" and approach in VAB_LISTS and not (approach == "fuzzy_match" and value == "N/A"):
            _vab_list(config, f"reference_answers.{approach}", value, VAB_LISTS[approach])
        if approach == "exact_match":
            s = exact_match(str(value), pred, sem)
        elif approach == "must_include":
            values = value if isinstance(value, list) else [value]
            s = 1.0
            for v in values:
                s *= float(any(must_include(alt, pred, len(values) == 1, sem) for alt in str(v).split(OR)))
        elif approach == "must_exclude":
            s = 1.0
            for v in (value if isinstance(value, list) else [value]):
                s *= must_exclude(str(v), pred, sem)
        elif approach == "one_of":
            s = one_of([str(v) for v in (value if isinstance(value, list) else [value])], pred, sem)
        elif approach == "fuzzy_match" and sem == "vab" and value == "N/A":
            # VAB: the product so far times the exact "n/a" test; unless that is 1, the
            # unachievable-task verdict replaces the product (earlier checks included)
            score *= exact_match("N/A", pred, sem)
            if score != 1.0:
                score = float(_need(judge)(intent=config.get("intent", ""), answer=pred, kind="unachievable",
                                           reference=config["eval"].get("string_note", "")))
            details[approach] = score
            continue
        elif approach == "fuzzy_match":
            s = _fuzzy(config, value, pred, judge, sem)
        else:
            raise EvaluationError(f"unknown reference_answers kind {approach!r}")
        details[approach] = s
        score *= s
    return score, details


def _need(judge: Judge | None) -> Judge:
    if judge is None:
        raise JudgeError("fuzzy_match needs a judge (eval.judge in the config) and none is set")
    return judge


def _listed(value: Any) -> list[str]:
    return [str(v) for v in (value if isinstance(value, list) else [value])]


def _fuzzy(config: Mapping[str, Any], value: Any, pred: str, judge: Judge | None, semantics: str = "webarena") -> float:
    intent = config.get("intent", "")
    if value == "N/A":
        if exact_match("N/A", pred):
            return 1.0
        return float(_need(judge)(intent=intent, reference=config["eval"].get("string_note", ""), answer=pred,
                                  kind="unachievable"))
    if semantics == "vab":  # VAB: one question with the references joined, whatever the answer
        return float(_need(judge)(intent=intent, reference=", ".join(_listed(value)), answer=pred, kind="fuzzy"))
    _need(judge)
    s = 1.0
    for ref in _listed(value):
        if not pred:  # WebArena: an empty answer matches only an empty reference
            s *= float(not ref)
        else:
            s *= float(judge(intent=intent, reference=ref, answer=pred, kind="fuzzy"))
    return s


# --- URLs -------------------------------------------------------------------------------


def _clean_url(url: str) -> str:
    return str(url).strip().rstrip("/")


def _split_url(url: str) -> tuple[str, dict[str, list[str]]]:
    parsed = urllib.parse.urlparse(url)
    return _clean_url(parsed.netloc + parsed.path), urllib.parse.parse_qs(parsed.query)


def url_match(config: Mapping[str, Any], final_url: str) -> float:
    if semantics_of(config) == "vab":
        return _vab_url_match(config["eval"], final_url)
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


def _vab_url_match(ev: Mapping[str, Any], final_url: str) -> float:
    def clean(url: Any) -> str:
        url = str(url).replace("localhost", "127.0.0.1")
        return url.removesuffix("/")

    pred, refs = clean(final_url), [clean(u) for u in str(ev["reference_url"]).split(OR)]
    rule = ev.get("url_note", "EXACT")  # VAB's default when the key is absent (null stays null: an error)
    if rule == "EXACT":
        return float(pred in refs)
    if rule == "GOLD in PRED":
        return float(any(ref in pred for ref in refs))
    raise EvaluationError(f"unknown url_note {rule!r}: expected 'GOLD in PRED' or 'EXACT' (or none: EXACT)")


# --- program_html -----------------------------------------------------------------------


class PageProbe(Protocol):
    """How program_html reads pages: `text(url, js)` is the value of `js` on `url` (None: the
    final page), `js` None meaning the page's HTML; a script error gives "". A probe that
    can also hand a helper a live page has `page(url)`, a context manager yielding the
    Playwright page showing `url` (None: the final page), as `__page__` needs."""

    def text(self, url: str | None, js: str | None, prep_actions: list[str] | None = None) -> str: ...


def _helper_call(expr: str, helpers: Mapping[str, Callable[..., Any]]) -> ast.Call:
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError as e:
        raise EvaluationError(f"helper call {expr!r} does not parse: {e.msg}") from e
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise EvaluationError(f"helper call {expr!r}: expected name(arguments)")
    if node.func.id not in helpers:
        raise EvaluationError(f"unknown helper {node.func.id!r}: these sites provide {sorted(helpers)}")
    return node


def uses_page(expr: str) -> bool:
    """Whether the helper call `expr` passes __page__ (then it needs a live page)."""
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return False
    args = [*node.args, *(k.value for k in node.keywords)] if isinstance(node, ast.Call) else []
    return any(isinstance(a, ast.Name) and a.id == "__page__" for a in args)


def call_helper(expr: str, helpers: Mapping[str, Callable[..., Any]], final_url: str, page: Any = None) -> Any:
    """Run "name(literal, ...)" with `name` one of `helpers`; __last_url__ is the final URL,
    __page__ the live page `page` (an EvaluationError where none is given)."""
    node = _helper_call(expr, helpers)

    def arg(a):
        if isinstance(a, ast.Name) and a.id == "__last_url__":
            return final_url
        if isinstance(a, ast.Name) and a.id == "__page__":
            if page is None:
                raise EvaluationError(f"helper call {expr!r}: __page__ (the page at the check's url) is given only to "
                                      "locator helpers, by a probe that opens pages")
            return page
        try:
            value = ast.literal_eval(a)
        except ValueError as e:
            raise EvaluationError(f"helper call {expr!r}: arguments must be literals, __last_url__ or __page__") from e
        return value.replace("__last_url__", final_url) if isinstance(value, str) else value

    args = [arg(a) for a in node.args]
    kwargs = {k.arg: arg(k.value) for k in node.keywords}
    return helpers[node.func.id](*args, **kwargs)


def program_html(config: Mapping[str, Any], probe: PageProbe, final_url: str,
                 helpers: Mapping[str, Callable[..., Any]], judge: Judge | None = None) -> tuple[float, list[float]]:
    sem = semantics_of(config)
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
            expr = locator[len("func:"):]
            if uses_page(expr):
                opener = getattr(probe, "page", None)
                if opener is None:
                    raise EvaluationError(f"helper call {expr!r} needs the page (__page__), and this probe opens none")
                with opener(page_url) as page:
                    value = call_helper(expr, helpers, final_url, page=page)
            else:
                value = call_helper(expr, helpers, final_url)
            if value is None and sem == "vab":  # VAB: nothing selected, the page is wrong: the evaluator fails
                per_target.append(0.0)
                return 0.0, per_target
            selected = str(value)
        else:
            raise EvaluationError(f"unknown locator {locator[:60]!r}: expected '', 'document...' or 'func:...'")
        selected = selected or ""
        if sem != "vab":  # VAB matches the text as the page gave it
            selected = html.unescape(selected)
        req = target["required_contents"]
        branch = next((k for k in ("exact_match", *VAB_HTML_LISTS) if k in req), None)  # VAB's order too
        if sem == "vab" and branch in VAB_HTML_LISTS:
            _vab_list(config, f"program_html required_contents.{branch}", req[branch], VAB_HTML_LISTS[branch])
        if "exact_match" in req:
            s = exact_match(str(req["exact_match"]), selected, sem)
        elif "must_include" in req:
            s = 1.0
            for content in _listed(req["must_include"]):
                s *= float(any(must_include(alt, selected, False, sem) for alt in content.split(OR)))
        elif "must_exclude" in req:
            s = 1.0
            for content in _listed(req["must_exclude"]):
                s *= must_exclude(content, selected, sem)
        elif "fuzzy_match" in req:  # VAB's: one question, the references joined
            s = float(_need(judge)(intent=config.get("intent", ""), reference=", ".join(_listed(req["fuzzy_match"])),
                                   answer=selected, kind="fuzzy"))
        else:
            raise EvaluationError(f"unknown required_contents {sorted(req)}: expected exact_match, must_include, "
                                  "must_exclude or fuzzy_match")
        per_target.append(s)
        score *= s
    return score, per_target


JUDGE_FAILURE = "JudgeError"  # how EvalResult.error (and an episode's info["error"]) starts after a judge failure


def is_judge_failure(error: str | None) -> bool:
    """Whether an evaluation error (EvalResult.error, info["error"]) is the judge's: no answer,
    no verdict, or no judge where a check needs one. An evaluation round stops on one
    (esopt.runs.tool_episodes), as the authors' harness aborts such a repeat."""
    return bool(error) and str(error).startswith(JUDGE_FAILURE + ":")


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
        semantics_of(config)
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
                s, per = program_html(config, probe, final_url, helpers or {}, judge)
                details["program_html"] = {"score": s, "targets": per}
            else:
                raise EvaluationError(f"unknown eval type {kind!r}")
            score *= s
    except (JudgeError, EvaluationError) as e:
        log.error("task %s: evaluation failed: %s", config.get("task_id"), e)
        return EvalResult(0.0, details, f"{type(e).__name__}: {e}")
    return EvalResult(score, details)

"""ReAct Math: a math problem, an optional Python tool, and one final answer.

The environment sees only the agent's non-tool replies (esopt.agent.react runs the
<python>...</python> calls). A reply without a final answer (no \\boxed{} and no
"Answer:" line, see esopt.envs.answers) gets an explanatory observation and the
episode goes on; the first reply with a final answer ends it with reward 1.0 when
`is_equivalent(answer, gold)` and 0.0 otherwise.

Problems come from three places:

* `generate_problems(n, seed, split, level)`: generated arithmetic and word problems
  whose integer answer needs a computation a tiny model cannot do in its head but
  can delegate to Python by copying the numbers from the question. "basic" (two
  operands, one operation) stands in for DAPO-Math, "hard" (3-4 operands, mixed
  operations, word problems) for AIME. Each task carries the Python expression that
  solves it (`solution_code`; `reference_code(task)` makes it a program) for
  supervised demonstrations. Train/test split by hash of the question, as in
  esopt.envs.sudoku: a question is 'test' iff the first 8 hex digits of its sha256
  are divisible by 4 (`split_of`), and the generator discards candidates of the other
  split, so the splits are disjoint for any seeds and counts.
* `load_dapo(...)`: DAPO-Math-17k (BytedTsinghua-SIA/DAPO-Math-17k), from the hub or
  a local parquet/jsonl/json file.
* `load_aime(...)`: AIME problems (default MathArena/aime_2026), hub or local file.
  The hub is read through esopt.envs.hub_data: offline with the dataset not cached,
  a HubUnavailableError (re-exported here) says so and how to pass a local file.

Answer checking: `is_equivalent` uses math-verify when it is importable (`CHECKER`
says which checker is active), behind a fast exact path for plain numbers, and a
normalized exact match (`fallback_equivalent`) otherwise. It never raises.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import random
import re
import signal
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from esopt.envs.answers import extract_answer
from esopt.envs.hub_data import HubUnavailableError, load_hub_rows
from esopt.seeding import derive_seed

log = logging.getLogger(__name__)

__all__ = [
    "AIME_HUB_ID",
    "CHECKER",
    "DAPO_HUB_ID",
    "DEFAULT_AIME_YEAR",
    "HAVE_MATH_VERIFY",
    "LEVELS",
    "HubUnavailableError",
    "MathEnv",
    "MathTask",
    "fallback_equivalent",
    "generate_problems",
    "instructions",
    "is_equivalent",
    "load_aime",
    "load_dapo",
    "normalize",
    "reference_code",
    "split_of",
]


# --- tasks ---------------------------------------------------------------------


@dataclass(frozen=True)
class MathTask:
    id: str
    question: str
    answer: str  # the gold final answer as text, e.g. "1901"
    source: str  # "generated-basic", "generated-hard", "dapo-math-17k", "aime-2026", ...
    solution_code: str = ""  # a Python expression computing the answer (generated tasks only)

    def __post_init__(self) -> None:
        if not self.question.strip():
            raise ValueError("question must not be empty")
        if not self.answer.strip():
            raise ValueError("answer must not be empty")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def reference_code(task: MathTask) -> str:
    """A one-line Python program that prints the task's answer, e.g. "print(347*29+18)"."""
    if not task.solution_code:
        raise ValueError(f"task {task.id} ({task.source}) has no solution_code: only generated tasks carry one")
    return f"print({task.solution_code})"


# --- answer checking ---------------------------------------------------------------

try:  # math-verify: sympy-based equivalence (fractions, radicals, sets, intervals, ...)
    from math_verify import parse as _mv_parse
    from math_verify import verify as _mv_verify

    HAVE_MATH_VERIFY = True
except Exception:  # not installed, or broken: the normalized match still works
    _mv_parse = _mv_verify = None
    HAVE_MATH_VERIFY = False

CHECKER = "math-verify" if HAVE_MATH_VERIFY else "normalized-match"

# math-verify bounds parsing and comparing with signal.alarm, which works only in the
# main thread (elsewhere it raises ValueError) and cancels any alarm already pending.
# So the alarm is used only in the main thread with no timer armed; otherwise the
# timeout is off and `_too_costly` (always applied) keeps out inputs that make sympy
# run for ages (power towers, huge exponents, factorials). Seconds, int; 0 disables.
TIMEOUT_SECONDS = 1
MAX_VERIFY_CHARS = 200  # longer answers are compared by the normalized match only


class _DropTimeoutDisabledWarning(logging.Filter):
    # math-verify warns once when its timeout is off; we turn it off on purpose.
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())

_TEXT_CMD = re.compile(r"\\(?:text|textbf|textrm|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"\\[,;:! ]|\\quad|\\qquad|~")
_CMD_END = re.compile(r"\\[A-Za-z]+$")
_FRAC = re.compile(r"\\frac\s*\{\s*([+-]?\d+)\s*\}\s*\{\s*([+-]?\d+)\s*\}|\\frac\s*(\d)\s*(\d)")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)")
_RATIO = re.compile(r"([+-]?)(\d+)/(\d+)")
_MAX_DIGITS = 1000  # longer numbers are not converted (int() caps at 4300 digits)


def _unwrap_boxed(s: str) -> str:
    """"\\boxed{x}" -> "x" (repeatedly, and only when the box spans the whole string)."""
    while True:
        m = re.match(r"\\(?:boxed|fbox)\s*\{", s)
        if not m or not s.endswith("}"):
            return s
        depth = 0
        for j in range(m.end() - 1, len(s)):
            depth += {"{": 1, "}": -1}.get(s[j], 0)
            if depth == 0:
                break
        if j != len(s) - 1:  # "\boxed{1}+\boxed{2}": not one box
            return s
        s = s[m.end():-1].strip()


def _drop_spaces(s: str) -> str:
    """Remove whitespace, except one space that ends a command before a letter ("\\pi r")."""
    out = ""
    for tok in s.split():
        if out and tok[0].isalpha() and _CMD_END.search(out):
            out += " "
        out += tok
    return out


def _strip_delimiters(s: str) -> str:
    s = s.strip()
    for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right):
            s = s[len(left):-len(right)]
    return s.replace("$", "").strip()


def normalize(ans: Any) -> str:
    """Canonical text of an answer for exact comparison.

    Drops $ and \\( \\) delimiters, \\boxed{}, \\text{}-like wrappers, \\left/\\right,
    LaTeX spacing, whitespace and a trailing period; turns \\dfrac/\\tfrac into
    \\frac and a \\frac of two integers into "a/b"; removes thousands separators
    from a number ("1,234" -> "1234"); writes a plain decimal canonically
    ("0.50" -> "0.5", "+7" -> "7", "3.0" -> "3"). Never raises: for anything else
    it returns a best-effort string.
    """
    try:
        s = _strip_delimiters(str(ans)).rstrip(".").rstrip()  # "$\\boxed{5}$." -> "\\boxed{5}"
        s = _unwrap_boxed(s)
        for _ in range(3):  # nested wrappers: \text{\textbf{5}}
            s = _TEXT_CMD.sub(r"\1", s)
        s = s.replace("\\left", "").replace("\\right", "")
        s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
        s = _SPACING.sub("", s)
        s = _drop_spaces(s)
        s = s.rstrip(".")
        s = _FRAC.sub(lambda m: f"{m[1]}/{m[2]}" if m[1] is not None else f"{m[3]}/{m[4]}", s)
        if _THOUSANDS.fullmatch(s):
            s = s.replace(",", "")
        if _DECIMAL.fullmatch(s) and len(s) <= _MAX_DIGITS:
            s = _canonical_decimal(Fraction(s), s)
        return s
    except Exception:
        return str(ans).strip() if isinstance(ans, str) else ""


def _canonical_decimal(x: Fraction, text: str) -> str:
    if x.denominator == 1:
        return str(x.numerator)
    digits = text.lstrip("+-")
    whole, _, frac = digits.partition(".")
    frac = frac.rstrip("0")
    sign = "-" if x < 0 else ""
    return f"{sign}{int(whole or '0')}.{frac}"


def _as_rational(s: str) -> Fraction | None:
    """The value of a normalized plain number ("12", "-0.5", "3/4"), else None."""
    if len(s) > _MAX_DIGITS:
        return None
    try:
        if _DECIMAL.fullmatch(s):
            return Fraction(s)
        m = _RATIO.fullmatch(s)
        if m and int(m[3]) != 0:
            return Fraction(int(m[2]), int(m[3])) * (-1 if m[1] == "-" else 1)
    except (ValueError, ZeroDivisionError, OverflowError):
        pass
    return None


def fallback_equivalent(prediction: Any, gold: Any) -> bool:
    """Equivalence without math-verify: normalized texts are equal, or both are plain
    rational numbers ("1/2", "\\frac{1}{2}", "0.5") of equal value. Never raises."""
    try:
        p, g = normalize(prediction), normalize(gold)
        if not p or not g:
            return False
        if p == g:
            return True
        x, y = _as_rational(p), _as_rational(g)
        return x is not None and y is not None and x == y
    except Exception:
        return False


_EXP_BIG = re.compile(r"(?:\^|\*\*)\s*[({]?\s*[+-]?\d{4,}")  # 10^{10000}
_EXP_TOWER = re.compile(r"(?:\^|\*\*)\s*(?:\{[^{}]*(?:\^|\*\*)|\([^()]*(?:\^|\*\*)|[\w.]+\s*(?:\^|\*\*))")
_LONG_NUMBER = re.compile(r"\d{60,}")


def _too_costly(s: str) -> bool:
    """Inputs that can keep sympy busy for minutes (there is no timeout off the main thread)."""
    return (
        len(s) > MAX_VERIFY_CHARS
        or "!" in s
        or "\\uparrow" in s
        or s.count("^") + s.count("**") > 3
        or bool(_EXP_BIG.search(s) or _EXP_TOWER.search(s) or _LONG_NUMBER.search(s))
    )


def _timeout_seconds() -> int | None:
    if TIMEOUT_SECONDS <= 0 or os.name != "posix" or threading.current_thread() is not threading.main_thread():
        return None
    try:
        if signal.getitimer(signal.ITIMER_REAL)[0] > 0:  # someone else's alarm is pending: leave it alone
            return None
    except Exception:
        return None
    return int(TIMEOUT_SECONDS)


def _mv_input(ans: str) -> str:
    """Math-verify extracts LaTeX only between delimiters: answer text -> "$...$"."""
    s = _unwrap_boxed(_strip_delimiters(ans))
    if re.fullmatch(r".*\d\.", s):  # "5." -> "5" (math-verify keeps "5." as a string)
        s = s[:-1]
    return f"${s}$"


def _math_verify_equivalent(prediction: str, gold: str) -> bool:
    timeout = _timeout_seconds()
    try:
        g = _mv_parse(_mv_input(gold), parsing_timeout=timeout)
        p = _mv_parse(_mv_input(prediction), parsing_timeout=timeout)
        if not g or not p:
            return False
        return bool(_mv_verify(g, p, timeout_seconds=timeout))
    except BaseException as e:  # math-verify's TimeoutException derives from BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        log.debug("math-verify failed on %r vs %r", prediction[:80], gold[:80], exc_info=True)
        return False


def is_equivalent(prediction: Any, gold: Any) -> bool:
    """Whether `prediction` states the same answer as `gold` (both answer texts, e.g.
    from extract_answer). Never raises on garbage.

    Fast path first: normalized texts match, or both are plain rationals (equal
    value: True; two different integers: False). Otherwise math-verify decides when
    it is importable (CHECKER == "math-verify") and the input is not one that can
    stall sympy; else False (the normalized match already said no)."""
    try:
        if prediction is None or gold is None:
            return False
        prediction, gold = str(prediction), str(gold)
        if fallback_equivalent(prediction, gold):
            return True
        if not HAVE_MATH_VERIFY:
            return False
        p, g = _as_rational(normalize(prediction)), _as_rational(normalize(gold))
        if p is not None and g is not None and p.denominator == 1 and g.denominator == 1:
            return False  # two different integers
        if _too_costly(prediction) or _too_costly(gold):
            return False
        return _math_verify_equivalent(prediction, gold)
    except Exception:
        return False


# --- generated problems ----------------------------------------------------------

LEVELS = ("basic", "hard")
SPLITS = {"train": "train", "test": "test", "eval": "test"}  # "eval" is the sudoku name of the test split
MAX_FAILED_ATTEMPTS = 2000  # consecutive rejected candidates before giving up


def split_of(question: str) -> str:
    return "test" if int(_sha256(question)[:8], 16) % 4 == 0 else "train"


def _canonical_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'test' ('eval' = 'test'), got {split!r}")
    return SPLITS[split]


# A template draws numbers from the rng and returns (question, python expression).
# Numbers are written in the question exactly as in the expression (no separators),
# so a program can copy them; every expression evaluates to a positive integer.
Template = Callable[[random.Random], "tuple[str, str]"]


def _b_add(r: random.Random) -> tuple[str, str]:
    a, b = r.randint(10000, 99999), r.randint(1000, 99999)
    return f"What is {a} + {b}?", f"{a}+{b}"


def _b_sub(r: random.Random) -> tuple[str, str]:
    a = r.randint(10000, 99999)
    b = r.randint(1000, a - 1000)
    return f"What is {a} - {b}?", f"{a}-{b}"


def _b_mul(r: random.Random) -> tuple[str, str]:
    a, b = r.randint(100, 999), r.randint(11, 99)
    return f"What is {a} * {b}?", f"{a}*{b}"


def _b_div(r: random.Random) -> tuple[str, str]:
    b, q = r.randint(11, 99), r.randint(100, 999)
    return f"What is {b * q} / {b}?", f"{b * q}//{b}"


def _b_crates(r: random.Random) -> tuple[str, str]:
    a, b = r.randint(23, 199), r.randint(12, 99)
    return f"A crate holds {b} bottles. How many bottles are in {a} crates?", f"{a}*{b}"


def _b_share(r: random.Random) -> tuple[str, str]:
    b, q = r.randint(12, 60), r.randint(23, 99)
    return (f"{b * q} stickers are shared equally among {b} children. How many stickers does each child get?",
            f"{b * q}//{b}")


def _h_mul_add(r: random.Random) -> tuple[str, str]:
    a, b, c = r.randint(100, 999), r.randint(11, 99), r.randint(10, 999)
    return f"What is {a} * {b} + {c}?", f"{a}*{b}+{c}"


def _h_mul_sub_mul(r: random.Random) -> tuple[str, str]:
    a, b, c, d = r.randint(100, 999), r.randint(11, 99), r.randint(100, 999), r.randint(11, 99)
    if a * b < c * d:
        a, b, c, d = c, d, a, b
    if a * b == c * d:
        a += 1
    return f"What is {a} * {b} - {c} * {d}?", f"{a}*{b}-{c}*{d}"


def _h_sum_mul(r: random.Random) -> tuple[str, str]:
    a, b, c = r.randint(100, 999), r.randint(100, 999), r.randint(11, 99)
    return f"What is ({a} + {b}) * {c}?", f"({a}+{b})*{c}"


def _h_mul3(r: random.Random) -> tuple[str, str]:
    a, b, c = r.randint(11, 99), r.randint(11, 99), r.randint(3, 29)
    return f"What is {a} * {b} * {c}?", f"{a}*{b}*{c}"


def _h_mul_add_div(r: random.Random) -> tuple[str, str]:
    a, b, d = r.randint(100, 999), r.randint(11, 99), r.randint(3, 19)
    c = (-(a * b)) % d or d  # a*b + c divisible by d, c >= 1
    c += d * r.randint(0, 40)
    return f"What is ({a} * {b} + {c}) / {d}?", f"({a}*{b}+{c})//{d}"


def _h_pens(r: random.Random) -> tuple[str, str]:
    a, b, c = r.randint(12, 99), r.randint(12, 99), r.randint(10, 999)
    return (f"A shop sells {a} boxes with {b} pens each and {c} loose pens. How many pens are there?",
            f"{a}*{b}+{c}")


def _h_orchard(r: random.Random) -> tuple[str, str]:
    a, b = r.randint(12, 99), r.randint(12, 99)
    c = r.randint(10, a * b - 1)
    return (f"A farm has {a} rows of {b} apple trees. A storm destroys {c} trees. How many apple trees are left?",
            f"{a}*{b}-{c}")


def _h_school(r: random.Random) -> tuple[str, str]:
    a, b, c, d = r.randint(12, 99), r.randint(12, 99), r.randint(12, 99), r.randint(12, 99)
    question = (f"A school orders {a} packs of {b} notebooks and {c} packs of {d} pencils. "
                "How many items does it order in total?")
    return question, f"{a}*{b}+{c}*{d}"


def _h_library(r: random.Random) -> tuple[str, str]:
    a, b, c = r.randint(12, 99), r.randint(12, 99), r.randint(10, 999)
    d = r.randint(10, a * b + c - 1)
    question = (f"A library has {a} shelves with {b} books each. It buys {c} new books and gives away {d} old ones. "
                "How many books does it have now?")
    return question, f"{a}*{b}+{c}-{d}"


def _h_buses(r: random.Random) -> tuple[str, str]:
    a, c = r.randint(12, 99), r.randint(3, 12)
    b = c * r.randint(3, 9)  # a*b divisible by c
    question = (f"{a} buses each carry {b} students. At the museum the students split into groups of {c}. "
                "How many groups are there?")
    return question, f"{a}*{b}//{c}"


TEMPLATES: dict[str, tuple[Template, ...]] = {
    "basic": (_b_add, _b_sub, _b_mul, _b_div, _b_crates, _b_share),
    "hard": (_h_mul_add, _h_mul_sub_mul, _h_sum_mul, _h_mul3, _h_mul_add_div,
             _h_pens, _h_orchard, _h_school, _h_library, _h_buses),
}


def _evaluate(expr: str) -> int:
    value = eval(compile(expr, "<math-task>", "eval"), {"__builtins__": {}})  # our own template output
    if not isinstance(value, int) or value < 0:
        raise AssertionError(f"template expression {expr!r} gave {value!r}, not a non-negative int")
    return value


def generate_problems(n: int, seed: int, split: str, level: str = "basic") -> list[MathTask]:
    """`n` distinct generated problems of `split` ('train' or 'test'; 'eval' = 'test') and
    `level` ('basic' or 'hard').

    Candidate k is drawn from an rng keyed on (seed, split, level, k), so the output is
    deterministic and a shorter call is a prefix of a longer one; candidates whose
    question hashes to the other split (`split_of`) are discarded, so train and test
    never share a question."""
    split = _canonical_split(split)
    if level not in TEMPLATES:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    templates = TEMPLATES[level]
    tasks: list[MathTask] = []
    seen: set[str] = set()
    attempt, failed = 0, 0
    while len(tasks) < n:
        if failed >= MAX_FAILED_ATTEMPTS:
            raise RuntimeError(f"generated only {len(tasks)}/{n} {level} {split} problems: "
                               f"{failed} consecutive candidates were duplicates or of the other split")
        rng = random.Random(derive_seed("math-problem", seed, split, level, attempt))
        attempt += 1
        question, expr = rng.choice(templates)(rng)
        if split_of(question) != split or question in seen:
            failed += 1
            continue
        failed = 0
        seen.add(question)
        tasks.append(MathTask(id=_sha256(question)[:12], question=question, answer=str(_evaluate(expr)),
                              source=f"generated-{level}", solution_code=expr))
    return tasks


# --- real data: DAPO-Math-17k and AIME ---------------------------------------------

DAPO_HUB_ID = "BytedTsinghua-SIA/DAPO-Math-17k"
AIME_HUB_ID = "MathArena/aime_{year}"
DEFAULT_AIME_YEAR = 2026
_FILE_SUFFIXES = (".parquet", ".jsonl", ".json")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")

# DAPO-Math-17k wraps every problem in the same instructions; MathEnv brings its own.
_DAPO_PREFIX = re.compile(r"^\s*Solve the following math problem step by step\..*?"
                          r"where \$Answer is the answer to the problem\.\s*", re.DOTALL)
_DAPO_SUFFIX = re.compile(r"\s*Remember to put your answer on its own line after \"Answer:\"\.?\s*$")


def _load_hub(hub_id: str, split: str, loader: str) -> Iterable[dict]:
    return load_hub_rows(hub_id, split, local_help=f"{loader}(path='DIR/...parquet'), "
                                                   "a .parquet/.jsonl/.json file or a folder of them")


def _read_file(p: Path) -> list[dict]:
    import pandas as pd

    if p.suffix == ".parquet":
        df = pd.read_parquet(p)
    elif p.suffix == ".jsonl":
        df = pd.read_json(p, lines=True)
    else:
        try:
            df = pd.read_json(p)
        except ValueError:  # JSON lines under a .json name
            df = pd.read_json(p, lines=True)
    return df.to_dict("records")


def _rows(path: str | os.PathLike | None, default_hub_id: str, split: str, loader: str) -> tuple[Iterable[dict], str]:
    """Rows of a local file/folder or a hub dataset, and the name it was read from."""
    if path is None:
        return _load_hub(default_hub_id, split, loader), default_hub_id
    text = os.fspath(path)
    p = Path(text).expanduser()
    local = p.exists() or p.suffix in _FILE_SUFFIXES or text.startswith((".", "/", "~")) or not _HUB_ID.fullmatch(text)
    if not local:
        return _load_hub(text, split, loader), text
    if not p.exists():
        raise FileNotFoundError(f"{loader}: no such file or folder: {text}")
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in _FILE_SUFFIXES)
        if not files:
            raise FileNotFoundError(f"{loader}: no .parquet/.jsonl/.json file under {text}")
    elif p.suffix in _FILE_SUFFIXES:
        files = [p]
    else:
        raise ValueError(f"{loader}: {text} is not a .parquet, .jsonl or .json file")
    return (row for f in files for row in _read_file(f)), text


def _plain(v: Any) -> Any:
    """numpy scalars/arrays (from pandas) -> Python values."""
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
        try:
            return v.tolist()
        except Exception:
            return v
    return v


def _get(row: dict, key: str | Sequence[str]) -> Any:
    """row[key] with dotted paths into nested dicts ("reward_model.ground_truth"); a
    sequence of keys gives the first one present. None when absent."""
    for k in ([key] if isinstance(key, str) else key):
        v: Any = row
        for part in k.split("."):
            v = _plain(v)
            if isinstance(v, dict) and part in v:
                v = v[part]
            else:
                v = None
                break
        v = _plain(v)
        if not _missing(v):
            return v
    return None


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _answer_text(v: Any) -> str | None:
    if _missing(v):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, (list, tuple)):  # some sets keep a one-element list of answers
        v = v[0] if len(v) == 1 else ", ".join(map(str, v))
    return str(v).strip() or None


def _question_text(v: Any) -> str | None:
    """A problem string, or the user content of a chat message list."""
    if isinstance(v, (list, tuple)):
        users = [m.get("content") for m in v if isinstance(m, dict) and m.get("role", "user") == "user"]
        v = users[0] if users else None
    if _missing(v) or not isinstance(v, str):
        return None
    return v.strip()


def _build_tasks(rows: Iterable[dict], source: str, where: str, question_key, answer_key, id_key,
                 limit: int | None, clean: Callable[[str], str] = lambda q: q, dedup: bool = True,
                 keep: Callable[[dict], bool] = lambda row: True) -> list[MathTask]:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    tasks: list[MathTask] = []
    ids: set[str] = set()
    questions: set[str] = set()
    no_answer: list[str] = []
    no_question = 0
    for i, row in enumerate(rows):
        if limit is not None and len(tasks) >= limit:
            break
        if not keep(row):
            continue
        q = _question_text(_get(row, question_key))
        if q is None:
            no_question += 1
            continue
        q = clean(q)
        raw_id = _get(row, id_key)
        tid = f"{source}-{raw_id}" if raw_id is not None else f"{source}-{_sha256(q)[:12]}"
        a = _answer_text(_get(row, answer_key))
        if a is None:
            no_answer.append(tid)
            continue
        if dedup and q in questions:
            continue
        if tid in ids:
            tid = f"{source}-{_sha256(q)[:12]}"
        questions.add(q)
        ids.add(tid)
        tasks.append(MathTask(id=tid, question=q, answer=a, source=source))
    if no_answer:
        log.warning("%s: skipped %d rows without an answer (%s): %s%s", where, len(no_answer), answer_key,
                    ", ".join(no_answer[:5]), ", ..." if len(no_answer) > 5 else "")
    if no_question:
        log.warning("%s: skipped %d rows without a question (%s)", where, no_question, question_key)
    return tasks


def _strip_dapo_instructions(q: str) -> str:
    out = _DAPO_SUFFIX.sub("", _DAPO_PREFIX.sub("", q)).strip()
    return out or q


def load_dapo(path: str | os.PathLike | None = None, split: str = "train", limit: int | None = None, *,
              question_key: str | Sequence[str] = ("prompt", "problem", "question"),
              answer_key: str | Sequence[str] = ("reward_model.ground_truth", "answer", "solution"),
              id_key: str | Sequence[str] = ("extra_info.index", "index", "id"),
              strip_instructions: bool = True, dedup: bool = True) -> list[MathTask]:
    """DAPO-Math-17k problems (hub id BytedTsinghua-SIA/DAPO-Math-17k, split 'train' only).

    `path`: None (the hub dataset), another hub id "owner/name", or a local .parquet,
    .jsonl or .json file or a folder of them (`split` is then ignored). Rows follow the
    verl layout: `prompt` is a chat list whose user message holds the problem wrapped
    in DAPO's "Solve the following math problem step by step..." instructions (removed
    when `strip_instructions`; MathEnv has its own), `reward_model.ground_truth` the
    answer (an integer for every DAPO row), `extra_info.index` a stable id. The hub
    copy repeats each problem about 100 times (1.79M rows); `dedup` keeps the first
    copy of each question. Keys take dotted paths into nested columns; a sequence of
    keys means the first one present. Rows without an answer are skipped with a
    warning. `limit` caps the number of tasks returned.
    """
    rows, where = _rows(path, DAPO_HUB_ID, split, "load_dapo")
    clean = _strip_dapo_instructions if strip_instructions else (lambda q: q)
    return _build_tasks(rows, "dapo-math-17k", where, question_key, answer_key, id_key, limit, clean, dedup)


def load_aime(path: str | os.PathLike | None = None, year: int | None = None, limit: int | None = None,
              *, split: str = "train",
              question_key: str | Sequence[str] = ("problem", "question", "Problem", "Question"),
              answer_key: str | Sequence[str] = ("answer", "Answer"),
              id_key: str | Sequence[str] = ("problem_idx", "id", "ID", "Problem Number")) -> list[MathTask]:
    """AIME problems (answers are integers 0-999).

    `path` None loads the hub dataset MathArena/aime_{year} (MathArena's LaTeX-verified
    AIME sets: columns problem_idx/problem/answer, one 'train' split of 30 problems, AIME
    I and II). The default year is 2026 (DEFAULT_AIME_YEAR), the AIME the paper
    evaluated on; year=2025 gives MathArena/aime_2025. Otherwise `path` is a hub id
    or a local .parquet/.jsonl/.json file or folder with a `problem` (or `question`)
    and an `answer` column. With a path, `year` only filters: when it is given and
    the data has a `year` column, only that year's rows are kept. Task ids and the
    source read "aime-{year}" (the year given, else one in the path's name, else
    none). Rows without an answer are skipped with a warning; `limit` caps the number
    of tasks.
    """
    label = year
    if path is None:
        label = year = DEFAULT_AIME_YEAR if year is None else year
    elif year is None:
        found = re.findall(r"(?<!\d)(19[89]\d|20\d\d)(?!\d)", Path(os.fspath(path)).name)
        label = int(found[-1]) if found else None
    rows, where = _rows(path, AIME_HUB_ID.format(year=year), split, "load_aime")
    source = f"aime-{label}" if label is not None else "aime"

    def keep(row: dict) -> bool:
        y = _get(row, ("year", "Year"))
        if year is None or y is None:
            return True
        try:
            return int(str(y).strip()[:4]) == int(year)
        except ValueError:
            return True

    tasks = _build_tasks(rows, source, where, question_key, answer_key, id_key, limit, keep=keep)
    if not tasks:
        log.warning("%s: no AIME problems loaded (year=%s)", where, year)
    return tasks


# --- environment -----------------------------------------------------------------

NO_ANSWER_FEEDBACK = "No final answer found. When you know the result, reply 'Answer: <number>'."


def instructions(style: str = "full") -> str:
    """The system prompt (tool documentation is added by the ReAct wrapper). "short"
    is for the tiny model, where every prompt token is paid on every turn."""
    if style == "short":
        return "Solve the problem. End with: Answer: <number>"
    if style != "full":
        raise ValueError(f"prompt style {style!r}: expected 'full' or 'short'")
    return ("Solve the math problem. Compute exactly: use the tool for any arithmetic you cannot do "
            "with certainty instead of guessing. When you know the result, reply with a final line "
            "'Answer: <number>'.")


class MathEnv:
    """One problem per episode; `step` takes raw model text and never raises on it.

    A reply without a final answer costs nothing but a turn (and counts as an invalid
    action); the first reply with one ends the episode. `max_invalid` (optional) ends
    the episode with reward 0 after that many replies without an answer."""

    def __init__(self, max_invalid: int | None = None, prompt_style: str = "full"):
        if max_invalid is not None and (not isinstance(max_invalid, int) or max_invalid < 1):
            raise ValueError(f"max_invalid must be a positive int or None, got {max_invalid!r}")
        instructions(prompt_style)  # validates the style
        self.max_invalid = max_invalid
        self.prompt_style = prompt_style
        self._task: MathTask | None = None
        self._done = True
        self._invalid = 0

    @property
    def task(self) -> MathTask | None:
        return self._task

    @property
    def done(self) -> bool:
        return self._done

    def instructions(self) -> str:
        return instructions(self.prompt_style)

    def reset(self, task: MathTask) -> str:
        self._task = task
        self._done = False
        self._invalid = 0
        return task.question

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("episode is over; call reset() before step()")
        text = action if isinstance(action, str) else str(action)
        try:
            pred = extract_answer(text)
        except Exception:
            pred = None
        gold = self._task.answer
        if pred is None:
            self._invalid += 1
            self._done = self.max_invalid is not None and self._invalid >= self.max_invalid
            info = {"success": False, "answer": None, "gold": gold, "invalid_actions": self._invalid}
            return NO_ANSWER_FEEDBACK, 0.0, self._done, info
        success = is_equivalent(pred, gold)
        self._done = True
        info = {"success": success, "answer": pred, "gold": gold, "invalid_actions": self._invalid}
        return ("Correct." if success else "Incorrect."), float(success), True, info

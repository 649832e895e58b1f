"""Whether a final answer equals the gold one: math-verify when importable, else a normalized match.

`is_equivalent` uses math-verify when it is importable (`CHECKER` says which checker
is active), behind a fast exact path for plain numbers, and a normalized exact match
(`fallback_equivalent`) otherwise; inputs that can stall sympy are kept away from it
(`_too_costly`). It never raises.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
from fractions import Fraction
from typing import Any

log = logging.getLogger(__package__)  # "esopt.envs.math", as before the split

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

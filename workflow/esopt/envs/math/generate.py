"""Generated arithmetic and word problems, each with the Python expression that solves it.

"basic" (two operands, one operation) stands in for DAPO-Math, "hard" (3-4 operands,
mixed operations, word problems) for AIME. Train/test split by hash of the question
(`split_of`); `reference_code(task)` makes a task's expression a program.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from esopt.envs.hub_data import canonical_split
from esopt.envs.math.tasks import MathTask
from esopt.io import sha256_text
from esopt.seeding import derive_seed

LEVELS = ("basic", "hard")
MAX_FAILED_ATTEMPTS = 2000  # consecutive rejected candidates before giving up


def split_of(question: str) -> str:
    return "test" if int(sha256_text(question)[:8], 16) % 4 == 0 else "train"


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
    split = canonical_split(split)
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
        tasks.append(MathTask(id=sha256_text(question)[:12], question=question, answer=str(_evaluate(expr)),
                              source=f"generated-{level}", solution_code=expr))
    return tasks


def reference_code(task: MathTask) -> str:
    """A one-line Python program that prints the task's answer, e.g. "print(347*29+18)"."""
    if not task.solution_code:
        raise ValueError(f"task {task.id} ({task.source}) has no solution_code: only generated tasks carry one")
    return f"print({task.solution_code})"

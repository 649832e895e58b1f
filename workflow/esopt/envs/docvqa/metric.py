"""ANLS, the DocVQA metric: 1 for an exact match up to case and spacing, partial
credit for near misses, 0 past a normalized edit distance of `ANLS_THRESHOLD`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ANLS_THRESHOLD = 0.5


def normalize(text: Any) -> str:
    """Lower case, outer whitespace stripped, inner whitespace collapsed to one space."""
    return " ".join(str(text).lower().split())


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions all cost 1)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def anls(prediction: Any, answers: Sequence[str] | str, threshold: float = ANLS_THRESHOLD) -> float:
    """Average Normalized Levenshtein Similarity of one question (the DocVQA metric):
    the max over gold answers of 1 - NL when NL < threshold, else 0, where
    NL = levenshtein(pred, gold) / max(len(pred), len(gold)) on normalized strings."""
    if prediction is None:
        return 0.0
    if isinstance(answers, str):
        answers = [answers]
    p = normalize(prediction)
    best = 0.0
    for gold in answers:
        g = normalize(gold)
        longest = max(len(p), len(g))
        if longest == 0:
            return 1.0
        nl = levenshtein(p, g) / longest
        if nl < threshold:
            best = max(best, 1.0 - nl)
    return best

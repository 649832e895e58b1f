"""The task of ReAct Math: a question and its gold final answer."""

from __future__ import annotations

from dataclasses import dataclass


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

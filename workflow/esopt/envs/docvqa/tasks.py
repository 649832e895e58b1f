"""The task of DocVQA: a question about a document image and its gold answers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DocTask:
    """One question about one document image (`image`: a path the OCR tool can open)."""

    id: str
    image: str
    question: str
    answers: tuple[str, ...]
    doc_type: str

    def __post_init__(self) -> None:
        if isinstance(self.answers, str):
            object.__setattr__(self, "answers", (self.answers,))
        elif not isinstance(self.answers, tuple):
            object.__setattr__(self, "answers", tuple(self.answers))
        if not self.answers:
            raise ValueError(f"task {self.id}: answers must not be empty")
        if not str(self.question).strip():
            raise ValueError(f"task {self.id}: question must not be empty")

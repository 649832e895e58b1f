"""The DocVQA environment: one question per episode, judged by ANLS."""

from __future__ import annotations

from esopt.envs.answers import extract_answer
from esopt.envs.docvqa.metric import ANLS_THRESHOLD, anls
from esopt.envs.docvqa.tasks import DocTask

NO_ANSWER_FEEDBACK = "No final answer found; finish with 'Answer: <text>'"


def instructions(style: str = "full") -> str:
    """The task part of the system prompt (the tool documentation is added by
    esopt.agent.react.tool_instructions). "short" for the tiny model."""
    if style == "short":
        return "Answer questions about a document from its OCR text. Copy the value exactly."
    if style != "full":
        raise ValueError(f"prompt style {style!r}: expected 'full' or 'short'")
    return ("You answer a question about a document image that you cannot see. Read its text with the OCR "
            "tool, find the line with the label the question asks about, and copy the value exactly as "
            "written there. Finish with 'Answer: <text>'.")


class DocVQAEnv:
    """One question per episode; `step` judges a final answer by ANLS and never raises on
    model text. A reply without a final answer gets feedback and the episode goes on
    (the turn limit is the rollout's)."""

    def __init__(self, threshold: float = ANLS_THRESHOLD):
        self.threshold = threshold
        self._task: DocTask | None = None
        self._done = True
        self._invalid = 0

    @property
    def task(self) -> DocTask | None:
        return self._task

    @property
    def done(self) -> bool:
        return self._done

    def reset(self, task: DocTask) -> str:
        self._task = task
        self._done = False
        self._invalid = 0
        return f"Question: {task.question}\n(Read the document with the OCR tool.)"

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("episode is over; call reset() before step()")
        answer = extract_answer(action if isinstance(action, str) else str(action))
        if answer is None:
            self._invalid += 1
            return NO_ANSWER_FEEDBACK, 0.0, False, {"invalid_actions": self._invalid}
        r = anls(answer, self._task.answers, self.threshold)
        self._done = True
        info = {"anls": r, "success": r >= 0.5, "answer": answer, "invalid_actions": self._invalid}
        return f"Answer recorded: {answer}", r, True, info

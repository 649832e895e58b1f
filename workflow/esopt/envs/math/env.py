"""The ReAct Math environment: one problem per episode, judged by `is_equivalent`."""

from __future__ import annotations

from esopt.envs.answers import extract_answer
from esopt.envs.math.answers import is_equivalent
from esopt.envs.math.tasks import MathTask

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

"""Final answers in model output: \\boxed{...} or an "Answer:" line."""

from __future__ import annotations

import re

_ANSWER_LINE = re.compile(r"(?:^|\n)\s*(?:final\s+)?answer\s*[:：]\s*(.+)", re.IGNORECASE)


def _last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), braces balanced; None if absent or unclosed."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, j = 1, i
    while j < len(text):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
        j += 1
    return None


def extract_answer(text: str) -> str | None:
    """The final answer a reply states, or None when it states none.

    \\boxed{} wins (the last one, as math graders read it); otherwise the text of the
    last "Answer:" line, without a trailing period."""
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    found = _ANSWER_LINE.findall(text)
    if not found:
        return None
    ans = found[-1].strip()
    if ans.endswith("."):  # "Answer: Paris." -> "Paris"
        ans = ans[:-1].rstrip()
    return ans or None

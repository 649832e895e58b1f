"""What the web agent is told: the system prompt and each turn's observation text.

The system prompt describes the observation the agent is actually given and the action
grammar it may answer in; `format_observation` lays out one turn (objective, URL, what the
previous action did, turns left, page title, then the page cut to `max_chars`).
"""

from __future__ import annotations

from esopt.envs.web.observe import truncate


def instructions(style: str = "full") -> str:
    """The system prompt of the web benchmark. "short" for the tiny model."""
    if style == "short":
        return ("Web tasks. One action per reply: click [id], type [id] [text], hover [id], press [key], "
                "scroll [down], goto [url], go_back, stop [answer].")
    if style != "full":
        raise ValueError(f"prompt style {style!r}: expected 'full' or 'short'")
    return ("You are a web agent. Each message shows your objective, the current URL, the result of your "
            "previous action and the page as an accessibility tree, one element per line with its id in "
            "brackets. Reply with exactly one action:\n"
            "click [id] | type [id] [text] (presses Enter after; type [id] [text] [0] does not) | hover [id] | "
            "press [key, e.g. Enter] | scroll [down] or scroll [up] | select [id] [option] | goto [url] | "
            "go_back | go_forward | stop [answer].\n"
            "When the objective asks for information, finish with stop [answer]; otherwise finish with stop [] "
            "once it is done.")


def format_observation(*, intent: str, url: str, feedback: str, turns_left: int, title: str, page: str,
                       max_chars: int, restate_objective: bool = False) -> str:
    """One turn's observation: the objective first (so `history_turns: 0` works), then the
    URL, the previous action's result, the turns left and the page title, then the page cut
    so the whole fits `max_chars`."""
    head = (f"Objective: {intent}\nURL: {url}\nPrevious action: {feedback}\n"
            f"Turns left: {turns_left}\nPage: {title}\n")
    # restated after the page too: a small model then copies names from a few tokens back
    tail = f"\nObjective: {intent}" if restate_objective else ""
    return head + truncate(page, max(200, max_chars - len(head) - len(tail))) + tail

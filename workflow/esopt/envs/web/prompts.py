"""What the web agent is told: the system prompt and each turn's observation text.

The system prompt describes the observation the agent is actually given and the action
grammar it may answer in (`check_prompt` refuses a pairing where it does not);
`format_observation` lays out one turn.

Styles (web.prompt_style):
- "full": WebArena's syntax explained, the page as an accessibility tree (observation axtree);
- "short": one line of WebArena's syntax, for the tiny model (any observation);
- "webrl": the authors' system prompt, the `intro` of their
  webarena-train-time/vab_extensions/p_webrl_chat_qwen_action.json (zz1358m/Agentic-ESOpt @
  8c08393; the file scripts/webarena/run.sh:43 runs), reproduced as data, and the turn laid
  out as VisualAgentBench's WebRLChatPromptConstructor gives it (VAB-WebArena-Lite/new/
  prompt_constructor.py:570-614): the task, the agent's previous replies by round, the
  current page's simplified HTML (observation webrl, or html).
"""

from __future__ import annotations

from collections.abc import Sequence

from esopt.envs.web.observe import MODES, truncate

STYLES = ("full", "short", "webrl")
# the observations each system prompt describes truthfully
DESCRIBES = {"full": ("axtree",), "short": MODES, "webrl": ("html", "webrl")}

# The intro of the authors' p_webrl_chat_qwen_action.json, character for character
# (sha256 80e6b739..., pinned in tests/test_web_observation.py).
WEBRL_INTRO = (
    "# Setup\n"
    "You are a professional web browsing agent. Given the user's task and the simplified HTML of the "
    "current webpage, choose exactly one next browser action.\n"
    "\n"
    "# Output contract\n"
    "Return exactly one executable action line, with no markdown, no code block, and no explanation. You "
    "may optionally put one '# Element:' comment immediately before the action, but the final executable "
    "line must be one of the allowed functions.\n"
    "\n"
    "# Allowed actions\n"
    "- do(action=\"Click\", element=\"ELEMENT_ID\")\n"
    "- do(action=\"Right Click\", element=\"ELEMENT_ID\")\n"
    "- do(action=\"Type\", argument=\"TEXT\", element=\"ELEMENT_ID\")\n"
    "- do(action=\"Search\", argument=\"TEXT\", element=\"ELEMENT_ID\")\n"
    "- do(action=\"Hover\", element=\"ELEMENT_ID\")\n"
    "- do(action=\"Scroll Up\")\n"
    "- do(action=\"Scroll Down\")\n"
    "- do(action=\"Press Enter\")\n"
    "- do(action=\"Select Dropdown Option\", argument=\"OPTION\", element=\"ELEMENT_ID\")\n"
    "- go_backward()\n"
    "- go_forward()\n"
    "- exit(message=\"ANSWER\")\n"
    "\n"
    "# Decision rules\n"
    "- If the answer requested by the task is already visible in the simplified HTML and the visible "
    "table or field matches all requested constraints such as object type, date range, period, and "
    "attribute, immediately use exit(message=\"ANSWER\") with the exact answer. Do not answer from an "
    "unrelated dashboard widget when the task asks for a different field or date range.\n"
    "- If the task is complete after reading the current page, use exit(message=\"ANSWER\").\n"
    "- Use only element IDs that are visible in the current simplified HTML.\n"
    "- For Click, Right Click, Type, Search, Select Dropdown Option, and Hover, element must be a visible "
    "element id; never omit it.\n"
    "- Do not use the browser address bar.\n"
    "- Do not repeat the same action if it did not change the page. Try a different visible control or "
    "exit if enough information is present.\n"
    "- If a page is loading, use do(action=\"Wait\").\n"
    "- Prefer the shortest path that solves the task.\n"
    "- On Magento Admin report pages, set the Period dropdown to match the requested time granularity "
    "before clicking Show Report: use Year for full-year questions, Month for quarter/month questions, "
    "and Day only for day-level questions. Fill From and To dates, click Show Report, then read the "
    "relevant sorted or summary row. Do not scroll through every transaction to manually count rows.\n"
    "- For Magento best-selling product, brand, or product-type questions, the answer must match the "
    "requested field. A product name is not a brand unless the task asks for product.\n"
    "\n"
    "# Examples\n"
    "# Element: the Reports section on the left sidebar\n"
    "do(action=\"Click\", element=\"7\")\n"
    "# Element: the Period dropdown\n"
    "do(action=\"Select Dropdown Option\", argument=\"Month\", element=\"20\")\n"
    "# Element: the From date input\n"
    "do(action=\"Type\", argument=\"01/01/2023\", element=\"22\")\n"
    "do(action=\"Scroll Down\")\n"
    "exit(message=\"Quest Lumaflex Band\")"
)


def check_prompt(style: str, observation: str) -> None:
    """Raise ValueError unless `style` is a prompt style whose system prompt describes the
    observation mode `observation` (an accessibility-tree prompt over HTML misleads the agent)."""
    if style not in STYLES:
        raise ValueError(f"prompt style {style!r}: expected one of {STYLES}")
    if observation not in DESCRIBES[style]:
        fits = [s for s in STYLES if observation in DESCRIBES[s]]
        raise ValueError(f"prompt style {style!r} describes the observation as {' or '.join(DESCRIBES[style])}, "
                         f"not {observation!r}: with observation {observation!r} use prompt style "
                         + " or ".join(repr(s) for s in fits))


def instructions(style: str = "full", observation: str | None = None) -> str:
    """The system prompt of the web benchmark in `style`; given `observation`, it must
    describe that observation mode (`check_prompt`)."""
    if observation is not None:
        check_prompt(style, observation)
    if style == "short":
        return ("Web tasks. One action per reply: click [id], type [id] [text], hover [id], press [key], "
                "scroll [down], goto [url], go_back, stop [answer].")
    if style == "webrl":
        return WEBRL_INTRO
    if style != "full":
        raise ValueError(f"prompt style {style!r}: expected one of {STYLES}")
    return ("You are a web agent. Each message shows your objective, the current URL, the result of your "
            "previous action and the page as an accessibility tree, one element per line with its id in "
            "brackets. Reply with exactly one action:\n"
            "click [id] | type [id] [text] (presses Enter after; type [id] [text] [0] does not) | hover [id] | "
            "press [key, e.g. Enter] | scroll [down] or scroll [up] | select [id] [option] | goto [url] | "
            "go_back | go_forward | stop [answer].\n"
            "When the objective asks for information, finish with stop [answer]; otherwise finish with stop [] "
            "once it is done.")


def format_observation(*, intent: str, url: str, feedback: str, turns_left: int, title: str, page: str,
                       max_chars: int | None, restate_objective: bool = False, style: str = "full",
                       previous_actions: Sequence[str] = ()) -> str:
    """One turn's observation, cut so the whole fits `max_chars` (None: the page is never cut).

    "full" and "short": the objective first (so `history_turns: 0` works), then the URL, the
    previous action's result, the turns left and the page title, then the page.
    "webrl": the harness's turn (prompt_constructor.py:598-611) in one message, so that
    `history_turns: 0` gives the agent what the harness's conversation gives it: the task,
    each earlier round's reply (`previous_actions`, the harness's action history, whose
    pages it replaces by a placeholder) and the current page only; no URL, title or
    feedback line, which the harness does not give."""
    if style == "webrl":
        head = (f"Task Instruction: {intent}\n\n" + "".join(f"Round {i}\n{a}\n\n" for i, a in enumerate(previous_actions))
                + f"Round {len(previous_actions)}\n\n")
        return head + truncate(page, None if max_chars is None else max(200, max_chars - len(head)))
    head = (f"Objective: {intent}\nURL: {url}\nPrevious action: {feedback}\n"
            f"Turns left: {turns_left}\nPage: {title}\n")
    # restated after the page too: a small model then copies names from a few tokens back
    tail = f"\nObjective: {intent}" if restate_objective else ""
    return head + truncate(page, None if max_chars is None else max(200, max_chars - len(head) - len(tail))) + tail

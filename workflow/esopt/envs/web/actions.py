"""Agent actions read from model text, in one of two modes (`parse_action(text, syntax=...)`).

`syntax="tolerant"` (the default; the local sites' models): the first action found, in
WebArena's or the WebRL authors' syntax, verbs read out of prose included.
`syntax="vab"` (the real suite, config `web.action_syntax: vab`): VisualAgentBench's rule
(VAB-WebArena-Lite/new/actions.py:1904-2006): the last exit( / do( call of the reply, which
must end the reply; only the do() actions VAB executes (Click, Type, Search, Hover,
Press Enter, Scroll Up/Down, Select Dropdown Option, Go Backward/Forward), string arguments,
numeric element ids; nothing is read from prose.

Tolerant, WebArena style (one action; text inside the last ``` fence wins when there is one):

    click [12]                 type [7] [blue kettle]      type [7] [blue kettle] [0]  (no Enter after)
    hover [12]                 press [Enter]               press [Control+a]
    scroll [down]              scroll [up]                 select [9] [feature]
    goto [http://...]          go_back                     go_forward
    stop [answer]              stop []                     (the answer is the text inside the brackets)

Tolerant, WebRL (the authors') style:

    do(action="Click", element="12")             do(action="Type", argument="blue kettle", element="7")
    do(action="Search", argument="kettle", element="7")   (type, then Enter)
    do(action="Hover", element="12")             do(action="Press Enter")   do(action="Press", argument="Tab")
    do(action="Scroll Down")  do(action="Scroll Up")     do(action="Select Dropdown Option", argument="bug", element="9")
    do(action="Go Backward")  do(action="Go Forward")    do(action="Goto", argument="http://...")
    do(action="Wait")         exit(message="answer")

`parse_action` never raises: it returns an `Action` or an `ActionError` whose message
says what was wrong and what to write instead (the observation the agent gets).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

KINDS = ("click", "type", "hover", "press", "scroll", "select", "goto", "go_back", "go_forward", "wait", "stop",
         "new_tab", "tab_focus", "close_tab")
NEEDS_ELEMENT = ("click", "type", "hover", "select")
MAX_TEXT = 2000  # longer typed text or answers are cut (a runaway generation is not a form value)

USAGE = ("Write one action, e.g. click [12], type [7] [blue kettle], hover [12], press [Enter], scroll [down], "
         "select [9] [option], goto [url], go_back, stop [answer]")

_VERBS = ("click", "type", "hover", "press", "scroll", "select", "goto", "go_back", "go_forward", "stop", "wait",
          "new_tab", "tab_focus", "close_tab")
_VERB_RE = re.compile(r"(?<![\w\[])(" + "|".join(_VERBS) + r")\b", re.IGNORECASE)
_FENCE_RE = re.compile(r"```(?:[a-z]*\n)?(.*?)```", re.DOTALL)
_CALL_RE = re.compile(r"\b(do|exit)\s*\(", re.IGNORECASE)
# (?<!\w): a keyword starts a word; without it a long run of word characters costs quadratic time
_KWARG_RE = re.compile(r"(?<!\w)(\w+)\s*=\s*(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')", re.DOTALL)
_ID_RE = re.compile(r"^\s*(?:id\s*=\s*)?e?(\d+|f\d+e\d+)\s*$", re.IGNORECASE)
_KEY_ALIASES = {"ctrl": "Control", "control": "Control", "cmd": "Meta", "meta": "Meta", "command": "Meta",
                "alt": "Alt", "option": "Alt", "shift": "Shift", "enter": "Enter", "return": "Enter", "esc": "Escape",
                "escape": "Escape", "tab": "Tab", "space": "Space", "backspace": "Backspace", "delete": "Delete",
                "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
                "pageup": "PageUp", "pagedown": "PageDown", "home": "Home", "end": "End"}


@dataclass(frozen=True)
class Action:
    kind: str  # one of KINDS
    element: str | None = None  # an element id of the current observation
    text: str = ""  # typed text, key, scroll direction, option, URL, or the answer
    enter: bool = False  # type: press Enter afterwards

    def render(self) -> str:
        """The action in WebArena syntax (what trajectories record)."""
        if self.kind in ("go_back", "go_forward", "wait", "new_tab", "close_tab"):
            return self.kind
        if self.kind == "type":
            return f"type [{self.element}] [{self.text}]" + ("" if self.enter else " [0]")
        if self.kind == "select":
            return f"select [{self.element}] [{self.text}]"
        if self.kind in ("click", "hover"):
            return f"{self.kind} [{self.element}]"
        return f"{self.kind} [{self.text}]"


@dataclass(frozen=True)
class ActionError:
    message: str


def _brackets(s: str) -> tuple[list[str], str]:
    """The leading [..] groups of `s` (nested brackets kept inside a group) and the rest."""
    args, i = [], 0
    while True:
        while i < len(s) and s[i] in " \t":
            i += 1
        if i >= len(s) or s[i] != "[":
            return args, s[i:]
        depth, j = 0, i
        while j < len(s):
            depth += {"[": 1, "]": -1}.get(s[j], 0)
            if depth == 0:
                break
            j += 1
        if depth != 0:  # unclosed: take the rest of the line as the last argument
            line_end = s.find("\n", i)
            end = len(s) if line_end < 0 else line_end
            args.append(s[i + 1:end].rstrip().rstrip("]"))
            return args, s[end:]
        args.append(s[i + 1:j])
        i = j + 1


def _element(raw: str) -> str | None:
    m = _ID_RE.match(raw)
    return m.group(1).lower() if m else None


def normalize_key(raw: str) -> str:
    """'ctrl+a' -> 'Control+a', 'enter' -> 'Enter' (Playwright's key names)."""
    parts = [p.strip() for p in raw.strip().split("+") if p.strip()]
    return "+".join(_KEY_ALIASES.get(p.lower(), p) for p in parts)


def _webarena(verb: str, rest: str) -> Action | ActionError:
    args, _ = _brackets(rest)
    verb = verb.lower()
    if verb == "tab_focus":  # WebArena's tab actions: tabs numbered from 0
        if not args or not args[0].strip().isdigit():
            return ActionError(f"tab_focus needs a tab number in brackets, e.g. tab_focus [0]. {USAGE}")
        return Action("tab_focus", text=args[0].strip())
    if verb in ("go_back", "go_forward", "wait", "new_tab", "close_tab"):
        return Action(verb)
    if verb == "stop":
        return Action("stop", text=(args[0] if args else rest.strip().strip("`").strip())[:MAX_TEXT])
    if verb in NEEDS_ELEMENT:
        if not args:
            return ActionError(f"{verb} needs an element id in brackets, e.g. {verb} [12]. {USAGE}")
        el = _element(args[0])
        if el is None:
            return ActionError(f"{verb} [{args[0][:40]}]: the element id must be the number in brackets "
                               f"of an element of the page, e.g. {verb} [12]")
        if verb in ("click", "hover"):
            return Action(verb, element=el)
        if len(args) < 2:
            example = "type [7] [blue kettle]" if verb == "type" else "select [9] [bug]"
            return ActionError(f"{verb} needs an element id and a text, e.g. {example}")
        if verb == "select":
            return Action("select", element=el, text=args[1].strip()[:MAX_TEXT])
        enter = True
        if len(args) >= 3:
            flag = args[2].strip().lower().removeprefix("press_enter_after=")
            enter = flag not in ("0", "false", "no")
        return Action("type", element=el, text=args[1][:MAX_TEXT], enter=enter)
    if not args or not args[0].strip():
        example = {"press": "press [Enter]", "scroll": "scroll [down]", "goto": "goto [http://...]"}[verb]
        return ActionError(f"{verb} needs an argument in brackets, e.g. {example}")
    arg = args[0].strip()
    if verb == "scroll":
        direction = arg.lower().removeprefix("direction=").strip()
        if direction not in ("up", "down"):
            return ActionError(f"scroll [{arg[:40]}]: write scroll [down] or scroll [up]")
        return Action("scroll", text=direction)
    if verb == "press":
        return Action("press", text=normalize_key(arg))
    return Action("goto", text=arg)


_DO_ACTIONS = {  # WebRL action name (lower case) -> our kind
    "click": "click", "right click": "click", "type": "type", "search": "type", "hover": "hover",
    "press enter": "press", "press": "press", "press key": "press", "scroll down": "scroll", "scroll up": "scroll",
    "select dropdown option": "select", "select": "select", "go backward": "go_back", "go back": "go_back",
    "go forward": "go_forward", "wait": "wait", "goto": "goto", "go to": "goto", "navigate": "goto",
}


def _call_kwargs(text: str) -> dict[str, str]:
    """Keyword arguments of the first do(...)/exit(...) call: ast when it parses, else a regex."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
        if isinstance(node, ast.Call):
            return {k.arg: str(ast.literal_eval(k.value)) for k in node.keywords if k.arg}
    except Exception:
        pass
    out = {}
    for k, v in _KWARG_RE.findall(text):
        try:
            out.setdefault(k, str(ast.literal_eval(v)))
        except Exception:
            out.setdefault(k, v[1:-1])
    return out


def _call_text(text: str, start: int) -> str:
    """The text of the call that opens at `start` up to its closing parenthesis (quotes respected)."""
    depth, quote, i = 0, None, text.index("(", start)
    for j in range(i, len(text)):
        ch = text[j]
        if quote:
            if ch == "\\":
                continue
            if ch == quote and text[j - 1] != "\\":
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return text[start:j + 1]
    return text[start:]


def _webrl(name: str, call: str) -> Action | ActionError:
    kw = _call_kwargs(call)
    if name.lower() == "exit":
        return Action("stop", text=kw.get("message", kw.get("answer", ""))[:MAX_TEXT])
    raw = kw.get("action", "").strip()
    kind = _DO_ACTIONS.get(raw.lower())
    if kind is None:
        return ActionError(f'do(action="{raw[:40]}"): unknown action; use one of Click, Type, Search, Hover, '
                           'Press Enter, Scroll Down, Scroll Up, Select Dropdown Option, Go Backward, Go Forward, '
                           'Goto, Wait, or exit(message="answer")')
    arg = kw.get("argument", kw.get("text", ""))
    if kind in NEEDS_ELEMENT:
        el = _element(kw.get("element", ""))
        if el is None:
            return ActionError(f'do(action="{raw}") needs element="ID", the number of an element of the page')
        if kind in ("click", "hover"):
            return Action(kind, element=el)
        if kind == "select":
            return Action("select", element=el, text=arg.strip()[:MAX_TEXT])
        return Action("type", element=el, text=arg[:MAX_TEXT], enter=raw.lower() == "search")
    if kind == "press":
        return Action("press", text="Enter" if raw.lower() == "press enter" or not arg else normalize_key(arg))
    if kind == "scroll":
        return Action("scroll", text="down" if "down" in raw.lower() else "up")
    if kind == "goto":
        return Action("goto", text=arg.strip()) if arg.strip() else ActionError('Goto needs argument="URL"')
    return Action(kind)


SYNTAXES = ("tolerant", "vab")


def parse_action(text: str, syntax: str = "tolerant") -> Action | ActionError:
    """The action in a model reply; never raises on the reply.

    `syntax="tolerant"` (the local sites' models): the first call or verb, either syntax
    (the module docstring). `syntax="vab"`: VisualAgentBench's rule for the real suite
    (`_parse_vab`). An unknown `syntax` is a caller's mistake and raises ValueError.
    """
    if syntax not in SYNTAXES:
        raise ValueError(f"action syntax {syntax!r}: expected one of {', '.join(SYNTAXES)}")
    if syntax == "vab":
        return _parse_vab(text)
    try:
        text = text if isinstance(text, str) else str(text)
        fenced = _FENCE_RE.findall(text)
        for candidate in ([fenced[-1]] if fenced else []) + [text]:
            call = _CALL_RE.search(candidate)
            verb = _VERB_RE.search(candidate)
            if call and (verb is None or call.start() <= verb.start()):
                return _webrl(call.group(1), _call_text(candidate, call.start()))
            if verb:
                return _webarena(verb.group(1), candidate[verb.end():])
        return ActionError(f"No action found in your reply. {USAGE}")
    except Exception as e:  # a parser bug must not end the episode
        return ActionError(f"Could not read your action ({type(e).__name__}). {USAGE}")


# VisualAgentBench (VAB-WebArena-Lite/new/actions.py:1904-2006, create_webrl_id_based_action): the text
# from the last "exit(" (else the last "do(", else the last "go_backward(") to the end must be one Python
# call; its keywords are literals; only these do() actions exist (lower-cased, exact).
_VAB_KEYS = ("exit(", "do(", "go_backward(")
_VAB_DO = {"press enter": "press", "scroll up": "scroll", "scroll down": "scroll", "click": "click", "type": "type",
           "hover": "hover", "select dropdown option": "select", "go forward": "go_forward",
           "go backward": "go_back", "search": "type"}
VAB_USAGE = ('Write one call as the last line, e.g. do(action="Click", element="12"), '
             'do(action="Type", argument="blue kettle", element="7"), do(action="Scroll Down") or exit(message="answer"); '
             'actions: Click, Type, Search, Hover, Press Enter, Scroll Up, Scroll Down, Select Dropdown Option, '
             'Go Backward, Go Forward')


def _vab_call(text: str) -> str:
    """The expression the harness parses: from the last exit( / do( / go_backward( (in that order of
    preference) to the end; with none of them, the text from its first line not starting with '#'."""
    for key in _VAB_KEYS:
        if key in text:
            return (key + text.split(key)[-1]).strip()
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.strip().startswith("#"):
            return "\n".join(lines[i:]).strip()
    return ""


def _parse_vab(text: str) -> Action | ActionError:
    """The action VisualAgentBench's harness reads from a reply, or an ActionError where it reads none.

    Where the harness fails (ActionParsingError, and the KeyError/TypeError it lets escape for a missing
    or non-string argument), this returns an ActionError saying what to write; it never raises.
    """
    try:
        expr = _vab_call(str(text).strip())
        short = expr if len(expr) <= 80 else expr[:77] + "..."
        try:
            node = ast.parse(expr, mode="eval").body
        except Exception:
            what = "No do(...) or exit(...) call found" if not expr or not re.search(r"\w\s*\(", expr) else \
                f"Could not read {short!r} as one call (nothing may follow its closing parenthesis)"
            if expr.startswith("exit(") and "do(" in expr:
                what += "; an exit( anywhere in the reply is read before any do("
            return ActionError(f"{what}. {VAB_USAGE}")
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            return ActionError(f"{short!r} is not a do(...) or exit(...) call. {VAB_USAGE}")
        name, kw = node.func.id, {}
        for k in node.keywords:
            try:
                kw[k.arg] = ast.literal_eval(k.value)
            except Exception:
                return ActionError(f"{name}(...): the value of {k.arg or '**'} must be a quoted string, "
                                   f'e.g. element="12". {VAB_USAGE}')
        if name == "exit":
            message = kw.get("message")
            if not isinstance(message, str):
                return ActionError('exit needs message="..." (the answer, or "" when there is none)')
            return Action("stop", text=message)
        if name != "do":
            return ActionError(f"{name}(...) is not an action here. {VAB_USAGE}")
        raw = kw.get("action")
        kind = _VAB_DO.get(raw.lower()) if isinstance(raw, str) else None
        if kind is None:
            return ActionError(f"do(action={raw!r}): not an action here. {VAB_USAGE}")
        if kind in ("press", "scroll", "go_back", "go_forward"):
            text_ = {"press enter": "Enter", "scroll up": "up", "scroll down": "down"}.get(raw.lower(), "")
            return Action(kind, text=text_)
        element = kw.get("element")
        el = element if isinstance(element, str) and re.fullmatch(r"[0-9]+", element) else None
        if el is None:  # the harness looks the id up as data-label-id, verbatim
            return ActionError(f'do(action="{raw}") needs element="ID", the id of an element of the page '
                               f'as a quoted number, e.g. element="12"')
        if kind in ("click", "hover"):
            return Action(kind, element=el)
        argument = kw.get("argument")
        if not isinstance(argument, str):
            return ActionError(f'do(action="{raw}") needs argument="..." (a quoted string) and element="ID"')
        if kind == "select":
            return Action("select", element=el, text=argument)
        return Action("type", element=el, text=argument, enter=raw.lower() == "search")
    except Exception as e:  # a parser bug must not end the episode
        return ActionError(f"Could not read your action ({type(e).__name__}). {VAB_USAGE}")

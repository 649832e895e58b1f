"""Prompts and reply parsing for automatic heuristic design (AHD) searches.

An AHD search (EoH, Sample: esopt.ahd.search) keeps candidate heuristics and asks
an LLM for new ones; it never runs a model or evaluates code itself. The driver
takes the search's `Request`s, sends each `Request.prompt` to the LLM (sampling
with `Request.seed`), parses the reply with `parse_reply`, evaluates the code in
the sandbox (esopt.ahd.evaluate) and hands back one `Candidate` per request
(`Request.child(...)` fills in the bookkeeping fields).

Two prompt modes (`TaskPrompt.mode`):

- "function": a real LLM writes a complete Python function. The wording is EoH's
  (Liu et al., ICML 2024; the official code's `eoh_evolution.py`): the task
  description, then the parents (each parent's one-sentence description and code;
  no objective values, as in EoH), then the operator's instruction, then
  "First, describe your new algorithm and main steps in one sentence. The
  description must be inside a brace. Next, implement it in Python as a function
  named ... This function should accept N input(s): ... Do not give additional
  explanations." The signature line replaces EoH's per-problem input/output notes.
- "expression": a tiny (~1M-parameter) model writes only a Python expression over
  the task's named features; the task's `expression_template` turns it into the
  function. The model is warm-started on exactly these prompts, so the format is
  short, rigid and deterministic, one line per item, parents one per line:

      task construct_tsp op m1
      vars d e m
      parent 1: d+0.5*e
      write:

  The first line names the task and the operator, the second the variables in the
  task's `features` order, then `parent <i>: <expression>` for each parent in the
  order the search drew them (none for i1), then the literal `write:`. The reply's
  first non-empty line is the new expression.

Replies are untrusted text: `parse_reply` never raises, and returns None for
anything it cannot use.
"""

from __future__ import annotations

import ast
import io
import math
import re
import textwrap
import tokenize
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from esopt.ahd.tasks.base import HeuristicTask

OPERATORS = ("i1", "e1", "e2", "m1", "m2")
MODES = ("function", "expression")
MAX_EXPR_CHARS = 200  # longer "expressions" from a tiny model are rambling, not formulas
MAX_REPLY_CHARS = 100_000  # replies are cut here before parsing (bounds the work on hostile text)
_TRIM_ATTEMPTS = 32  # at most this many parses when cutting trailing prose off unfenced code
_FORBIDDEN_IN_EXPR = (";", "import", "__")

# Operator instructions, EoH's wording (eoh_evolution.py get_prompt_*).
_E1 = "Please help me create a new algorithm that has a totally different form from the given ones."
_E2 = "Please help me create a new algorithm that has a totally different form from the given ones but can be motivated from them."
_M1 = ("Please assist me in creating a new algorithm that has a different form but can be a modified version "
       "of the algorithm provided.")
_M2 = ("Please identify the main algorithm parameters and assist me in creating a new algorithm that has a "
       "different parameter settings of the score function provided.")
_DESCRIBE = ("First, describe your new algorithm and main steps in one sentence. The description must be inside a brace. "
             "Next, implement it in Python as a function named")
_DESCRIBE_E2 = ("Firstly, identify the common backbone idea in the provided algorithms. Secondly, based on the backbone "
                "idea describe your new algorithm in one sentence. The description must be inside a brace. "
                "Thirdly, implement it in Python as a function named")


@dataclass
class Candidate:
    """One generated heuristic and what became of it.

    The search creates the bookkeeping fields (id, operator, parents, generation:
    see `Request.child`); the driver fills in what the LLM and the evaluator
    produced. `objective` is minimized; None means invalid (unparsable reply, code
    that failed, an infeasible or non-finite result). `verdict` is what the search
    made of it: "kept" (in the population right after its batch), "discarded" (valid
    and unique but cut by survival), "duplicate" (same code or objective as a
    member), "invalid", or "sampled" (Sample keeps no population).
    """

    id: int
    operator: str
    thought: str = ""
    code: str = ""
    objective: float | None = None
    parents: list[int] = field(default_factory=list)
    generation: int = 0
    reply: str = ""
    error: str = ""
    verdict: str = ""

    @property
    def valid(self) -> bool:
        return self.objective is not None and math.isfinite(self.objective)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Candidate:
        obj = d.get("objective")
        return cls(id=int(d["id"]), operator=str(d["operator"]), thought=str(d.get("thought", "")),
                   code=str(d.get("code", "")), objective=None if obj is None else float(obj),
                   parents=[int(p) for p in d.get("parents", [])], generation=int(d.get("generation", 0)),
                   reply=str(d.get("reply", "")), error=str(d.get("error", "")), verdict=str(d.get("verdict", "")))


@dataclass
class Request:
    """One LLM call a search wants: the prompt, the parents it shows, and the
    fields the child will carry.

    `index` is the position in the batch and `batch` the search's batch counter
    (accept checks both, so a stale or reordered batch is refused); `child_id` is
    the id the child must have; `seed` is the sampling seed for this call. Requests
    with the same prompt (EoH's k > 1, every Sample request) differ only by their
    seed, so the driver must sample with it (or at least sample, not decode greedily).
    """

    operator: str
    prompt: str
    parents: list[Candidate]
    child_id: int
    index: int
    batch: int
    generation: int
    seed: int

    def child(self, reply: str = "", thought: str = "", code: str = "", objective: float | None = None,
              error: str = "") -> Candidate:
        """The candidate this request produced (what accept expects back)."""
        return Candidate(id=self.child_id, operator=self.operator, thought=thought, code=code, objective=objective,
                         parents=[p.id for p in self.parents], generation=self.generation, reply=reply, error=error)


def _signature_inputs(signature: str) -> tuple[str, ...]:
    """The argument names of a `def` line (ast first, a plain split if that fails)."""
    sig = signature.strip()
    try:
        src = sig if sig.endswith(":") else sig + ":"
        fn = ast.parse(src + "\n    pass\n").body[0]
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = fn.args
            names = [x.arg for x in (*a.posonlyargs, *a.args)]
            names += [f"*{a.vararg.arg}"] if a.vararg else []
            names += [x.arg for x in a.kwonlyargs]
            names += [f"**{a.kwarg.arg}"] if a.kwarg else []
            return tuple(names)
    except (SyntaxError, ValueError, IndexError):
        pass
    inside = sig[sig.find("(") + 1: sig.rfind(")")] if "(" in sig and ")" in sig else ""
    parts = (p.split(":")[0].split("=")[0].strip() for p in inside.split(","))
    return tuple(p for p in parts if p and p not in ("/", "*"))


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


@dataclass(frozen=True)
class TaskPrompt:
    """Everything the prompt builders need from a task, in one immutable value."""

    mode: str
    task_name: str
    function_name: str
    signature: str
    description: str
    inputs: tuple[str, ...]
    features: tuple[str, ...]
    expression_template: str = ""

    _INSTRUCTION: ClassVar[dict[str, str]] = {"e1": _E1, "e2": _E2, "m1": _M1, "m2": _M2}

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown prompt mode {self.mode!r} (expected one of {MODES})")
        if self.mode == "expression" and not self.features:
            raise ValueError(f"task {self.task_name!r} has no features: expression mode needs named variables")

    @classmethod
    def from_task(cls, task: HeuristicTask, mode: str = "function") -> TaskPrompt:
        signature = str(task.signature).strip()
        return cls(mode=mode, task_name=str(task.name), function_name=str(task.function_name), signature=signature,
                   description=str(task.description).strip(), inputs=_signature_inputs(signature),
                   features=tuple(str(f) for f in (getattr(task, "features", None) or {})),
                   expression_template=str(getattr(task, "expression_template", "") or ""))

    # ---- builders
    def build(self, operator: str, parents: Sequence[Candidate] = ()) -> str:
        """The prompt of `operator` with these parents (none for i1, one for m1/m2)."""
        if operator not in OPERATORS:
            raise ValueError(f"unknown operator {operator!r} (expected one of {OPERATORS})")
        if operator == "i1" and parents:
            raise ValueError("i1 takes no parents")
        if operator in ("m1", "m2") and len(parents) != 1:
            raise ValueError(f"{operator} takes exactly one parent, got {len(parents)}")
        if operator in ("e1", "e2") and not parents:
            raise ValueError(f"{operator} needs at least one parent")
        if self.mode == "expression":
            return self._expression_prompt(operator, parents)
        return self._function_prompt(operator, parents)

    def prompt_i1(self) -> str:
        return self.build("i1")

    def prompt_e1(self, parents: Sequence[Candidate]) -> str:
        return self.build("e1", parents)

    def prompt_e2(self, parents: Sequence[Candidate]) -> str:
        return self.build("e2", parents)

    def prompt_m1(self, parent: Candidate) -> str:
        return self.build("m1", [parent])

    def prompt_m2(self, parent: Candidate) -> str:
        return self.build("m2", [parent])

    # ---- function mode (EoH's wording)
    def _tail(self, operator: str) -> str:
        n = len(self.inputs)
        inputs = ", ".join(f"'{x}'" for x in self.inputs) if self.inputs else "none"
        lead = _DESCRIBE_E2 if operator == "e2" else _DESCRIBE
        return (f"{lead} {self.function_name}. This function should accept {n} input(s): {inputs}. "
                f"Use exactly this signature: {self.signature}\n"
                "Do not give additional explanations.")

    def _function_prompt(self, operator: str, parents: Sequence[Candidate]) -> str:
        parts = [self.description]
        if operator in ("e1", "e2"):
            n = len(parents)
            lines = [f"I have {n} existing algorithm{'s' if n != 1 else ''} with their codes as follows:"]
            for i, p in enumerate(parents, 1):
                lines.append(f"No.{i} algorithm and the corresponding code are:")
                lines.append(_one_line(p.thought) or "(no description)")
                lines.append(p.code.strip())
            lines.append(self._INSTRUCTION[operator])
            parts.append("\n".join(lines))
        elif operator in ("m1", "m2"):
            p = parents[0]
            parts.append(f"I have one algorithm with its code as follows. Algorithm description: "
                         f"{_one_line(p.thought) or '(no description)'}\nCode:\n{p.code.strip()}\n"
                         f"{self._INSTRUCTION[operator]}")
        parts.append(self._tail(operator))
        return "\n".join(parts)

    # ---- expression mode (compact, for a tiny model)
    def _expression_prompt(self, operator: str, parents: Sequence[Candidate]) -> str:
        lines = [f"task {self.task_name} op {operator}", "vars " + " ".join(self.features)]
        lines += [f"parent {i}: {_one_line(p.thought) or '?'}" for i, p in enumerate(parents, 1)]
        lines.append("write:")
        return "\n".join(lines)


# ---- reply parsing
def _strip_think(text: str) -> str:
    """Drop a leading <think>...</think> block (reasoning models); an unclosed one
    swallows the rest, since a reply cut inside its reasoning holds no answer."""
    s = text.lstrip()
    if not s.startswith("<think>"):
        return text
    end = s.find("</think>")
    return "" if end < 0 else s[end + len("</think>"):]


def _defines(code: str, function_name: str) -> bool:
    return re.search(rf"^[ \t]*def[ \t]+{re.escape(function_name)}[ \t]*\(", code, re.MULTILINE) is not None


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False


def _fenced_blocks(lines: list[str]) -> list[tuple[int, str]]:
    """(line index of the opening fence, body) of each ``` block; an unclosed last
    block runs to the end. Line scanning, so linear in the text."""
    blocks: list[tuple[int, str]] = []
    start: int | None = None
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            if start is None:
                start = i
            else:
                blocks.append((start, "\n".join(lines[start + 1: i])))
                start = None
    if start is not None:
        blocks.append((start, "\n".join(lines[start + 1:])))
    return blocks


_CODE_START = re.compile(r"(import[ \t]+\w|from[ \t]+[\w.]+[ \t]+import[ \t]|def[ \t]+\w)")


def _trim_trailing_prose(lines: list[str], function_name: str) -> str:
    """Unfenced code runs to the end of the reply, so prose after it breaks the
    syntax. Keep the longest prefix, cut before an unindented line, that parses and
    still defines the function; if none does, keep everything (the evaluator then
    reports the syntax error)."""
    code = "\n".join(lines)
    if _parses(code):
        return code
    cuts = [i for i, line in enumerate(lines) if i > 0 and line.strip() and not line[:1].isspace()]
    for i in reversed(cuts[-_TRIM_ATTEMPTS:]):
        head = "\n".join(lines[:i])
        if _defines(head, function_name) and _parses(head):
            return head
    return code


def _first_brace(text: str) -> str:
    """The content of the first balanced {...} in text, on one line ("" if none)."""
    start = text.find("{")
    if start < 0:
        return ""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return _one_line(text[start + 1: i])
    return ""


def _parse_function(text: str, function_name: str) -> tuple[str, str] | None:
    lines = _strip_think(text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    code_line: int | None = None
    code = ""
    for start, body in _fenced_blocks(lines):
        if _defines(body, function_name):
            code_line, code = start, textwrap.dedent(body)
            break
    if code_line is None:
        for i, line in enumerate(lines):
            if _CODE_START.match(line.lstrip()):
                code_line = i
                break
        if code_line is None:
            return None
        code = _trim_trailing_prose(textwrap.dedent("\n".join(lines[code_line:])).split("\n"), function_name)
    code = code.strip("\n")
    if not code.strip() or not _defines(code, function_name):
        return None
    thought = _first_brace("\n".join(lines[:code_line]))
    return thought, code + "\n"


def parse_expression(text: str) -> str | None:
    """The expression in a tiny model's reply: its first non-empty line, stripped.
    None if it is too long, not a Python expression, or contains ';', 'import',
    '__' or unprintable characters (a formula needs none of them)."""
    for line in text.split("\n"):
        expr = line.strip()
        if expr:
            break
    else:
        return None
    if len(expr) > MAX_EXPR_CHARS or not expr.isprintable() or any(s in expr for s in _FORBIDDEN_IN_EXPR):
        return None
    try:
        ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    return expr


def parse_reply(text: Any, task_prompt: TaskPrompt, task: HeuristicTask | None = None) -> tuple[str, str] | None:
    """(thought, code) from an LLM reply, or None if the reply is unusable. Never raises.

    Function mode: code is the first ```-fenced block that defines the function
    (`def <function_name>(`); without one, the text from the first line that starts
    with `import`, `from ... import` or `def` to the end (trailing prose cut off
    when that makes it parse). thought is the first {...} before the code, on one
    line ("" if there is none). A leading <think> block is ignored.
    Expression mode: thought is the expression (`parse_expression`) and code is
    `task.expression_code(expr)` (the task prompt's template when no task is given).
    """
    try:
        if not isinstance(text, str):
            return None
        text = text[:MAX_REPLY_CHARS]
        if task_prompt.mode == "expression":
            expr = parse_expression(text)
            if expr is None:
                return None
            if task is not None:
                code = task.expression_code(expr)
            else:
                code = task_prompt.expression_template.replace("{expr}", expr)
            return expr, code
        return _parse_function(text, task_prompt.function_name)
    except Exception:  # noqa: BLE001 - untrusted text must never crash a search
        return None


def code_key(code: str) -> str:
    """A normal form of code for duplicate detection: the token sequence without
    comments and blank lines, tokens separated by one space (so `a+b` and `a + b`
    are the same). Code that does not tokenize falls back to lines with comments
    cut at '#', whitespace runs collapsed and blank lines dropped."""
    try:
        toks: list[str] = []
        skip = {tokenize.COMMENT, tokenize.NL, tokenize.ENDMARKER}
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in skip:
                continue
            if tok.type == tokenize.NEWLINE:
                toks.append("\n")
            elif tok.type == tokenize.INDENT:
                toks.append("<indent>")
            elif tok.type == tokenize.DEDENT:
                toks.append("<dedent>")
            else:
                toks.append(tok.string)
        return " ".join(toks).replace(" \n ", "\n").strip()
    except Exception:  # noqa: BLE001 - tokenize raises several kinds on broken code
        lines = (" ".join(line.split("#", 1)[0].split()) for line in code.splitlines())
        return "\n".join(line for line in lines if line)

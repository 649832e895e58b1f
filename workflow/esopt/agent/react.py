"""ReAct tool use: a reply is a tool call, a final answer, or feedback-worthy.

The format the system prompt documents (`tool_instructions`):

    <python>print(347*29 + 18)</python>     run the tool named `python` on the text inside
    Answer: 10081                           or \\boxed{10081}: the final answer

`ReActEnv` wraps a task environment (esopt.envs.math.MathEnv, esopt.envs.docvqa.DocVQAEnv:
they judge final answers) and runs tool calls itself:

- a reply holding a complete `<name>...</name>` call of a known tool runs that tool
  on the text inside; its output is the next observation (text after the closing
  tag is ignored: the model has not seen the output yet);
- an unknown tool, an unclosed call or a call past the tool budget gets an
  observation that says what was wrong and what to write instead;
- anything else goes to the task environment, which scores a final answer or asks
  for one.

Observations are user messages in the chat, so the RL baselines' loss mask (1 only
on generated tokens, esopt.agent.tokens) already leaves them out of the loss.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from esopt.agent.rollout import TextEnv
from esopt.agent.tools import Tool

_TAG = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>")
# The final-answer markers of esopt.envs.answers: a reply that gives an answer and
# opens no tool tag before it is an answer, not a malformed call.
_ANSWER = re.compile(r"\\boxed\{|(?:^|\n)\s*(?:final\s+)?answer\s*[:：]", re.IGNORECASE)


def tool_instructions(tools: Sequence[Tool]) -> str:
    """The lines of the system prompt that document the tools and the answer format."""
    lines = ["Tools (one call per reply; the output comes back as the next message):"]
    lines += [f"<{t.name}>...</{t.name}> {t.description}" for t in tools]
    lines.append("When you know the result, reply: Answer: <answer>")
    return "\n".join(lines)


def parse_call(text: str, names: Sequence[str]) -> tuple[str, str, str] | None:
    """(kind, name, argument) for the first tool tag of a reply, or None when there is none.

    kind: "call" (complete call of a known tool), "unknown" (a closed tag that is
    not a tool), "unclosed" (a known tool's tag without its closing tag). Tags after
    a final answer belong to the answer."""
    answer = _ANSWER.search(text)
    for m in _TAG.finditer(text):
        if answer is not None and m.start() > answer.start():
            return None  # tags after the answer are part of the answer
        name = m.group(1)
        if name not in names:
            if f"</{name}>" in text[m.end():]:
                return "unknown", name, ""
            continue  # a lone tag in prose is not a call
        close = text.find(f"</{name}>", m.end())
        if close < 0:
            return "unclosed", name, text[m.end():]
        return "call", name, text[m.end():close].strip("\n")
    return None


class ReActEnv:
    """A TextEnv that runs tool calls and hands everything else to the task env."""

    def __init__(self, env: TextEnv, tools: Sequence[Tool] | Mapping[str, Tool], max_tool_calls: int | None = None):
        self.env = env
        self.tools = dict(tools) if isinstance(tools, Mapping) else {t.name: t for t in tools}
        self.max_tool_calls = max_tool_calls
        self.task: Any = None

    def reset(self, task: Any) -> str:
        self.task = task
        self.counts = {"tool_calls": 0, "malformed_calls": 0}
        return self.env.reset(task)

    def _info(self, info: dict) -> dict:
        return {**info, **self.counts}

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        call = parse_call(action, list(self.tools))
        if call is None:
            obs, reward, done, info = self.env.step(action)
            return obs, reward, done, self._info(info)
        kind, name, arg = call
        usage = ", ".join(f"<{n}>...</{n}>" for n in self.tools)
        if kind == "unknown":
            self.counts["malformed_calls"] += 1
            return f"Unknown tool <{name}>. Tools: {usage}.", 0.0, False, self._info({})
        if kind == "unclosed":
            self.counts["malformed_calls"] += 1
            return f"Your <{name}> call has no closing </{name}>; nothing was run.", 0.0, False, self._info({})
        if self.max_tool_calls is not None and self.counts["tool_calls"] >= self.max_tool_calls:
            self.counts["malformed_calls"] += 1
            return (f"No tool calls left ({self.max_tool_calls} used). Reply with Answer: <answer>.",
                    0.0, False, self._info({}))
        self.counts["tool_calls"] += 1
        return self.tools[name](arg, self.task), 0.0, False, self._info({})


def make_react_env(benchmark: str, tools: Sequence[Tool], max_tool_calls: int | None) -> ReActEnv:
    """A fresh environment of a tool benchmark (esopt.envs.benchmarks) in the ReAct protocol."""
    from esopt.envs.benchmarks import env_class

    return ReActEnv(env_class(benchmark)(), tools, max_tool_calls)

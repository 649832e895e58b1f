"""The scripted expert: plays a task's plan through the agent's action interface.

A plan (a generated task's "expert" field, esopt.envs.web.templates) is a list of steps:

    {"do": "click", "role": "link", "name": "Kitchen"}
    {"do": "type", "role": "textbox", "name": "Search products", "text": "kettle", "enter": true}
    {"do": "select", "role": "combobox", "name": "Label", "option": "bug"}
    {"do": "goto", "url": "__SHOPPING__/cart"}
    {"do": "stop", "answer": "$17.99"}

At each turn the expert reads the current observation (the accessibility tree), finds the
element of the step by its role and accessible name, and writes the action an agent would
write: `click [12]`, `type [6] [kettle]`, ..., in WebArena's syntax or the WebRL authors'
(`syntax="webrl"`). An element it cannot find is an ExpertError: the plan and the site
disagree, which tests/test_web_expert.py catches for every template.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from esopt.envs.web.tasks import WebTask, resolve_urls

SYNTAXES = ("webarena", "webrl")


class ExpertError(RuntimeError):
    """The expert's plan does not fit the page it sees."""


def find_element(observation: str, role: str, name: str) -> str | None:
    """The id of the first node `[id] role 'name'` of an accessibility-tree observation (the
    name matched exactly, then as a prefix), or None."""
    exact = re.compile(r"^\s*\[(\w+)\] " + re.escape(f"{role} '{name}'") + r"(?= |:|$)", re.MULTILINE)
    m = exact.search(observation)
    if m:
        return m.group(1)
    prefix = re.compile(r"^\s*\[(\w+)\] " + re.escape(f"{role} '{name}"), re.MULTILINE)
    m = prefix.search(observation)
    return m.group(1) if m else None


def _q(text: str) -> str:
    return json.dumps(text)


class ScriptedExpert:
    """`act(observation)` gives the next action of the plan; `done` once it has stopped."""

    def __init__(self, plan: list[dict], urls: Mapping[str, str] | None = None, syntax: str = "webarena"):
        if syntax not in SYNTAXES:
            raise ValueError(f"syntax {syntax!r}: expected one of {SYNTAXES}")
        if not plan or plan[-1].get("do") != "stop":
            raise ValueError("an expert plan must end with a stop step")
        self.plan = resolve_urls(list(plan), dict(urls or {}))
        self.syntax = syntax
        self.k = 0

    @classmethod
    def for_task(cls, task: WebTask, urls: Mapping[str, str] | None = None, syntax: str = "webarena") -> ScriptedExpert:
        if not task.expert:
            raise ValueError(f"task {task.id} has no expert plan (only generated tasks carry one)")
        return cls(task.expert, urls, syntax)

    @property
    def done(self) -> bool:
        return self.k >= len(self.plan)

    def act(self, observation: str) -> str:
        if self.done:
            raise ExpertError("the plan is over")
        step = self.plan[self.k]
        self.k += 1
        do = step["do"]
        if do == "stop":
            return f"exit(message={_q(step['answer'])})" if self.syntax == "webrl" else f"stop [{step['answer']}]"
        if do == "goto":
            return f'do(action="Goto", argument={_q(step["url"])})' if self.syntax == "webrl" else f"goto [{step['url']}]"
        el = find_element(observation, step["role"], step["name"])
        if el is None:
            raise ExpertError(f"step {self.k} ({do} {step['role']} {step['name']!r}): no such element in\n{observation[:3000]}")
        if do == "click":
            return f'do(action="Click", element="{el}")' if self.syntax == "webrl" else f"click [{el}]"
        if do == "type":
            if self.syntax == "webrl":
                kind = "Search" if step.get("enter", True) else "Type"
                return f'do(action="{kind}", argument={_q(step["text"])}, element="{el}")'
            return f"type [{el}] [{step['text']}]" + ("" if step.get("enter", True) else " [0]")
        if do == "select":
            if self.syntax == "webrl":
                return f'do(action="Select Dropdown Option", argument={_q(step["option"])}, element="{el}")'
            return f"select [{el}] [{step['option']}]"
        raise ExpertError(f"unknown plan step {do!r}")

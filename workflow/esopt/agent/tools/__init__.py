"""Tools a ReAct agent can call (esopt.agent.react parses the calls).

A tool is any object with a `name` (the tag the model writes: <python>...</python>),
a one-line `description` for the system prompt, and `__call__(argument, task) -> str`
that returns the observation text. Tools never raise on bad input from the model:
whatever goes wrong is described in the returned text.
"""

from __future__ import annotations

from typing import Any, Protocol


class Tool(Protocol):
    name: str
    description: str

    def __call__(self, argument: str, task: Any) -> str: ...

"""Prompt optimizers: the external context c that co-evolves with the weights.

Each ES generation's rollouts feed both the ES update of θ and a prompt optimizer,
which proposes the next context c (text appended to the agent's system prompt).
Every optimizer has the same interface, `PromptOptimizer`:

    ctx = opt.context()                      # "" at the start
    system = compose_system(base_system, ctx)
    trajs = rollout(..., system=system, ...)
    stats = opt.update(trajs, generation)     # for the log
    state = opt.state_dict()                  # JSON; load_state_dict(state) resumes exactly

Implementations: `Trace2Skill` (esopt.prompt.trace2skill) and `FixedContext`
(the "Sample" baseline: one prompt that never changes). The analyst LLM behind an
optimizer is an `Analyst` (esopt.prompt.analyst).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from esopt.prompt.analyst import (
    Analyst,
    AnalystError,
    OpenAIAnalyst,
    PolicyAnalyst,
    make_analyst,
)
from esopt.prompt.skill import (
    Edit,
    Proposal,
    SkillDocument,
    SkillItem,
    merge_hierarchical,
    merge_pair,
    parse_edits,
)
from esopt.prompt.trace2skill import PROMPT_TEMPLATE, Trace2Skill, render_trace

if TYPE_CHECKING:
    from esopt.agent.rollout import Trajectory


@runtime_checkable
class PromptOptimizer(Protocol):
    def context(self) -> str:
        """The text appended to the system prompt now ("" at the start)."""
        ...

    def update(self, trajectories: Sequence[Trajectory], generation: int) -> dict[str, Any]:
        """Propose and apply the next context from one generation's trajectories;
        returns stats for the log (edits proposed/applied/rejected, ...)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """JSON-serializable state: a run resumed from it continues identically."""
        ...

    def load_state_dict(self, d: dict[str, Any]) -> None:
        ...


class FixedContext:
    """A context that never changes (the "Sample" baseline; "" for none)."""

    name = "fixed"

    def __init__(self, text: str = ""):
        self.text = str(text)

    def context(self) -> str:
        return self.text

    def update(self, trajectories: Sequence[Trajectory], generation: int) -> dict[str, Any]:
        return {"generation": int(generation), "traces": 0, "applied": 0, "context_chars": len(self.text)}

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.name, "text": self.text}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if d.get("kind") != self.name:
            raise ValueError(f"not a FixedContext state (kind={d.get('kind')!r})")
        self.text = str(d["text"])


def compose_system(system: str, context: str) -> str:
    """The system prompt with the context appended after a blank line ("" adds nothing)."""
    return f"{system.rstrip()}\n\n{context.strip()}" if context.strip() else system


__all__ = [
    "PROMPT_TEMPLATE",
    "Analyst",
    "AnalystError",
    "Edit",
    "FixedContext",
    "OpenAIAnalyst",
    "PolicyAnalyst",
    "PromptOptimizer",
    "Proposal",
    "SkillDocument",
    "SkillItem",
    "Trace2Skill",
    "compose_system",
    "make_analyst",
    "merge_hierarchical",
    "merge_pair",
    "parse_edits",
    "render_trace",
]

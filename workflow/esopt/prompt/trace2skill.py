"""Trace2Skill: analysts turn a generation's successful and failed traces into edits of a skill document.

The method (as the paper uses it for prompt-parameter co-evolution): each ES
generation produces rollouts D_t; the same rollouts feed the ES update of the
weights and this optimizer of the external context c (a markdown skill document
appended to the system prompt). One generation of Trace2Skill:

1. pick up to `success_traces` successful and `failure_traces` failed trajectories
   (a seeded draw: derive_seed("trace2skill", seed, generation));
2. render each as a compact text trace (question, every action and observation,
   outcome) and build one analyst prompt per trace (PROMPT_TEMPLATE): task
   description, the current document with numbered items, the trace, and what
   to extract: for a success what to keep doing, for a failure what to avoid or do
   instead, written as ADD / REVISE / REMOVE edits;
3. ask the analyst LLM once for all prompts (one batch);
4. parse each reply into edits (esopt.prompt.skill.parse_edits: untrusted text,
   never raises) and keep at most `max_edits_per_trace` per trace;
5. merge the per-trace edit lists hierarchically: neighbours pairwise, level by
   level, as a binary tree, until one list remains. Each merge node joins
   near-identical edits (normalized text; support = number of traces that proposed
   it), cancels contradictory edits of the same item (the best-supported one stays,
   a tie keeps none), and orders by support; the root list is capped at
   `max_merged_edits`;
6. apply the merged edits to the document. Item numbers refer to the document the
   analysts saw; nothing is renumbered until all edits are applied. An ADD of a
   lesson already in the document reinforces it (its support grows). Over
   `max_items`, the least-supported items go first, the oldest among equals.

Simplifications against the original Trace2Skill:

- the merge is rule-based (normalized-text dedup, support counts, a fixed rule for
  contradictions), not an LLM merger that rewrites and consolidates lessons; two
  lessons that say the same thing in different words stay two items;
- one analyst call per trace and one reply format (line edits), no multi-turn
  analyst, no tool use, no separate "skill files";
- the analyst may be the policy model itself (PolicyAnalyst: a tiny model writes
  mostly malformed edits, which are counted and dropped) or any OpenAI-compatible
  server (OpenAIAnalyst);
- a trajectory counts as successful when info["success"] is true (every environment
  reports it: esopt.envs) or its reward is positive
  or its reward is positive (override with is_success).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from esopt.prompt.analyst import TRACE_BEGIN, TRACE_END, Analyst, AnalystError
from esopt.prompt.skill import SkillDocument, merge_hierarchical, parse_edits
from esopt.seeding import derive_seed

if TYPE_CHECKING:
    from esopt.agent.rollout import Trajectory

PROMPT_TEMPLATE = """\
You improve the skill document of an AI agent. The document is added to the agent's system prompt; \
it holds short, general lessons that help the agent on every task of this kind.

Task of the agent:
{task}

Current skill document (items are numbered [#1], [#2], ...):
{document}

Below is one episode of the agent. It {verdict}.

{trace}

{guidance}

Reply with at most {max_edits} edits, one per line, in exactly this format:
ADD [<section>]: <lesson>
REVISE #<number>: <new text of that item>
REMOVE #<number>
A lesson is one general, actionable sentence of at most {max_chars} characters that helps on other tasks too; \
do not copy answers that only fit this episode. REVISE and REMOVE take item numbers from the current document. \
A section groups related lessons: reuse an existing section name when one fits.{full} \
If nothing should change, reply NONE."""

GUIDANCE = {
    True: ("The episode succeeded. What did the agent do that made it work and that it should keep doing? "
           "Add that lesson if the document lacks it, or revise an item that says it incompletely."),
    False: ("The episode failed. What went wrong, and what should the agent do instead? Add a lesson that "
            "prevents this mistake, revise an item that is incomplete, or remove an item that misled the agent."),
}
NO_TASK = "(not described: infer it from the episode)"
EMPTY_DOCUMENT = "(empty: no items yet)"
STAT_KEYS = ("traces", "successes", "failures", "proposed", "malformed", "over_cap", "merged", "applied",
             "reinforced", "skipped", "evicted")


def default_is_success(traj: Trajectory) -> bool:
    info = traj.info or {}
    return bool(info.get("success") or traj.reward > 0)


def _clip(text: str, n: int) -> str:
    """At most about n characters: the head and the tail, the middle marked as cut."""
    text = str(text).strip()
    if len(text) <= n:
        return text
    half = max(1, (n - 7) // 2)
    return text[:half] + " [...] " + text[-half:]


def render_trace(traj: Trajectory, success: bool, max_chars: int = 2000) -> str:
    """Question, then the steps between TRACE_BEGIN and TRACE_END, then the outcome.

    The question gets at most a third of max_chars, each action or observation at
    most a quarter (middle cut). Steps that do not fit are dropped oldest first
    (the newest step is always kept), and the trace says how many were dropped."""
    question = _clip(traj.first_observation, max(40, max_chars // 3))
    field = max(40, max_chars // 4)
    steps = [f"Step {k}\nAction: {_clip(t.action, field) or '(empty reply)'}\nObservation: {_clip(t.observation, field)}"
             for k, t in enumerate(traj.turns, 1)]
    budget = max_chars - len(question)
    kept: list[str] = []
    used = 0
    for s in reversed(steps):
        if kept and used + len(s) + 1 > budget:
            break
        kept.append(s)
        used += len(s) + 1
    kept.reverse()
    lines = ["Question:", question, TRACE_BEGIN]
    if len(kept) < len(steps):
        lines.append(f"[... {len(steps) - len(kept)} earlier step(s) omitted ...]")
    lines += kept or ["(no steps)"]
    lines.append(TRACE_END)
    outcome = f"Outcome: {'SUCCESS' if success else 'FAILURE'} (reward {traj.reward:g}, {len(traj.turns)} turn(s))"
    details = [f"{k}={_clip(str(v), 60)}" for k, v in (traj.info or {}).items()
               if k != "success" and isinstance(v, (str, int, float, bool)) and str(v).strip()][:6]
    if details:
        outcome += "\nDetails: " + "; ".join(details)
    lines.append(outcome)
    return "\n".join(lines)


class Trace2Skill:
    """The Trace2Skill prompt optimizer (see the module docstring); a PromptOptimizer."""

    name = "trace2skill"

    def __init__(self, analyst: Analyst, success_traces: int = 2, failure_traces: int = 2, max_edits_per_trace: int = 3,
                 max_items: int = 12, max_trace_chars: int = 2000, seed: int = 0, task_description: str = "",
                 max_item_chars: int = 200, max_merged_edits: int | None = None,
                 is_success: Callable[[Trajectory], bool] | None = None):
        if min(success_traces, failure_traces) < 0 or success_traces + failure_traces < 1:
            raise ValueError("success_traces and failure_traces must be >= 0 with at least one trace in all")
        if max_edits_per_trace < 1 or max_trace_chars < 200:
            raise ValueError("max_edits_per_trace must be >= 1 and max_trace_chars >= 200")
        self.analyst = analyst
        self.success_traces, self.failure_traces = int(success_traces), int(failure_traces)
        self.max_edits_per_trace, self.max_trace_chars = int(max_edits_per_trace), int(max_trace_chars)
        self.max_merged_edits = int(max_merged_edits) if max_merged_edits is not None else 2 * self.max_edits_per_trace
        self.seed, self.task_description = int(seed), str(task_description)
        self.is_success = is_success or default_is_success
        self.document = SkillDocument(max_items=max_items, max_item_chars=max_item_chars)
        self.updates = 0
        self.last_generation: int | None = None
        self.totals = {k: 0 for k in STAT_KEYS}
        self.last_replies: list[str] = []  # for logging; not part of the state

    # ---- PromptOptimizer
    def context(self) -> str:
        return self.document.render() if len(self.document) else ""

    def update(self, trajectories: Sequence[Trajectory], generation: int) -> dict[str, Any]:
        generation = int(generation)
        if self.last_generation is not None and generation <= self.last_generation:
            raise ValueError(f"Trace2Skill already updated at generation {self.last_generation}; "
                             f"got generation {generation} (a resumed run must not apply a generation twice)")
        picked = self.select(trajectories, generation)
        prompts = [self.prompt(t, ok) for t, ok in picked]
        stats: dict[str, Any] = {"generation": generation, **{k: 0 for k in STAT_KEYS}}
        stats["traces"] = len(picked)
        stats["successes"] = sum(ok for _, ok in picked)
        stats["failures"] = len(picked) - stats["successes"]
        replies: list[str] = []
        if prompts:
            replies = list(self.analyst.complete(prompts, seed=derive_seed("trace2skill-analyst", self.seed, generation)))
            if len(replies) != len(prompts):
                raise AnalystError(f"analyst returned {len(replies)} replies for {len(prompts)} prompts")
        per_trace = []
        for reply in replies:
            edits, bad = parse_edits(reply, n_items=len(self.document), max_chars=self.document.max_item_chars)
            stats["malformed"] += bad
            stats["over_cap"] += max(0, len(edits) - self.max_edits_per_trace)
            edits = edits[: self.max_edits_per_trace]
            stats["proposed"] += len(edits)
            per_trace.append(edits)
        merged = merge_hierarchical(per_trace, max_edits=self.max_merged_edits)
        stats["merged"] = len(merged)
        stats.update(self.document.apply(merged).as_dict())
        stats["items"] = len(self.document)
        stats["context_chars"] = len(self.context())
        truncated = getattr(self.analyst, "last_stats", {}).get("truncated") if prompts else None
        if truncated is not None:
            stats["truncated_prompts"] = int(truncated)
        for k in STAT_KEYS:
            self.totals[k] += int(stats[k])
        self.updates += 1
        self.last_generation = generation
        self.last_replies = replies
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.name, "version": 1, "config": self.config(), "document": self.document.state_dict(),
                "context": self.context(), "updates": self.updates, "last_generation": self.last_generation,
                "totals": dict(self.totals)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if d.get("kind") != self.name or d.get("version") != 1:
            raise ValueError(f"not a Trace2Skill v1 state (kind={d.get('kind')!r}, version={d.get('version')!r})")
        differ = sorted(k for k, v in self.config().items() if d["config"].get(k) != v)
        if differ:
            raise ValueError(f"Trace2Skill state was saved with other settings: {differ} "
                             f"(saved {[d['config'].get(k) for k in differ]}, now {[self.config()[k] for k in differ]})")
        self.document = SkillDocument.from_state_dict(d["document"])
        self.updates = int(d["updates"])
        self.last_generation = None if d["last_generation"] is None else int(d["last_generation"])
        self.totals = {k: int(d["totals"].get(k, 0)) for k in STAT_KEYS}

    # ---- pieces (public for inspection and tests)
    def config(self) -> dict[str, Any]:
        return {"success_traces": self.success_traces, "failure_traces": self.failure_traces,
                "max_edits_per_trace": self.max_edits_per_trace, "max_items": self.document.max_items,
                "max_item_chars": self.document.max_item_chars, "max_trace_chars": self.max_trace_chars,
                "max_merged_edits": self.max_merged_edits, "seed": self.seed,
                "task_description": self.task_description}

    def select(self, trajectories: Sequence[Trajectory], generation: int) -> list[tuple[Trajectory, bool]]:
        """Up to k successes and k failures, a seeded draw per generation; successes
        first, each group in rollout order."""
        flags = [bool(self.is_success(t)) for t in trajectories]
        rng = random.Random(derive_seed("trace2skill", self.seed, generation))
        succ = [i for i, ok in enumerate(flags) if ok]
        fail = [i for i, ok in enumerate(flags) if not ok]
        pick_s = sorted(rng.sample(succ, min(self.success_traces, len(succ))))
        pick_f = sorted(rng.sample(fail, min(self.failure_traces, len(fail))))
        return [(trajectories[i], flags[i]) for i in pick_s + pick_f]

    def prompt(self, traj: Trajectory, success: bool) -> str:
        doc = self.document
        full = ""
        if len(doc) >= doc.max_items:
            full = f" The document is full ({doc.max_items} items): prefer REVISE or REMOVE to ADD."
        return PROMPT_TEMPLATE.format(
            task=self.task_description.strip() or NO_TASK,
            document=doc.render(numbered=True).strip() if len(doc) else EMPTY_DOCUMENT,
            verdict="SUCCEEDED" if success else "FAILED",
            trace=render_trace(traj, success, self.max_trace_chars),
            guidance=GUIDANCE[bool(success)],
            max_edits=self.max_edits_per_trace,
            max_chars=doc.max_item_chars,
            full=full,
        )

"""What every heuristic-design task provides (esopt.ahd.tasks).

A task is a combinatorial problem, a Python function the LLM must write for it (the
heuristic), and a trusted algorithm that uses the heuristic's outputs. Generated code
never runs in this process: `esopt.ahd.evaluate` runs the task's *runner* (a
self-contained module, numpy and the standard library only) together with the
candidate in a sandboxed process. The runner returns plain JSON outputs (a tour, an
item order, a heuristic matrix, a vector of priorities), and the task's `score`,
here in the trusted parent, validates them and computes the objective. So a forged
output can at worst be a feasible solution, which is scored as what it is.

All objectives are minimized (as in the paper's launchers); `metric` says what the
number means, e.g. "optimality gap (%)".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

Instance = dict[str, Any]  # JSON-serializable: it is embedded in the sandboxed program


@dataclass(frozen=True)
class InstanceSpec:
    """How many instances of which size; one per split (search, test)."""

    n: int  # number of instances
    size: int  # problem size (nodes, items, ...); tasks without a size ignore it


@dataclass
class HeuristicTask:
    """Base class. Subclasses set the class attributes and implement the three methods."""

    name: ClassVar[str]  # registry key, e.g. "construct_tsp"
    function_name: ClassVar[str]  # the function the candidate must define
    signature: ClassVar[str]  # its `def` line, e.g. "def select_next_node(current_node, ...):"
    description: ClassVar[str]  # the problem and what the function gets and returns (prompt text)
    metric: ClassVar[str]  # what the objective means, e.g. "optimality gap (%)"; lower is better
    reference_code: ClassVar[str]  # the reference baseline heuristic: a complete function
    # Tiny models write only an expression over named features; this template (with an
    # "{expr}" placeholder) turns it into a complete function with the same signature.
    expression_template: ClassVar[str]
    features: ClassVar[dict[str, str]]  # feature name -> meaning, the expression's variables
    runner: ClassVar[str]  # file name of the sandbox-side module, next to this file

    params: dict[str, Any] = field(default_factory=dict)  # task options from the config

    # ---- to implement
    def instances(self, split: str, spec: InstanceSpec, seed: int) -> list[Instance]:
        """Seeded instances. Deterministic in (split, spec, seed). May precompute
        reference values (an optimum, a lower bound) and keep them in the instance."""
        raise NotImplementedError

    def sandbox_instance(self, instance: Instance) -> Instance:
        """What the runner needs of an instance (default: all of it). Drop reference
        values here so candidate code cannot read them."""
        return instance

    def score(self, instance: Instance, output: Any) -> float | None:
        """The objective of the runner's output on this instance (minimized), or None if
        the output is invalid (wrong type or shape, infeasible solution, NaN)."""
        raise NotImplementedError

    # ---- provided
    def runner_source(self) -> str:
        return (Path(__file__).parent / self.runner).read_text()

    def expression_code(self, expr: str) -> str:
        """The complete candidate function for a tiny model's expression."""
        return self.expression_template.replace("{expr}", expr.strip())

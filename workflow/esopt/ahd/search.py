"""External searches for automatic heuristic design: EoH and Sample, as pure logic.

A search decides which prompts to send; a driver (not here) samples the LLM,
evaluates the code and reports back. The loop, with the budget counted in LLM
samples by the driver:

    used = 0
    while used < budget:
        requests = search.next_batch()[: budget - used]   # the final batch may be cut
        children = [req.child(reply=..., thought=..., code=..., objective=..., error=...) for req in requests]
        search.accept(requests, children)
        used += len(children)

`next_batch` is a pure function of the state (calling it twice gives the same
batch) and every random draw comes from `random.Random(derive_seed(..., seed,
batch))`, so no RNG state is saved: a search restored from `state_dict()` issues
exactly the batches an uninterrupted one would. `accept` takes the children of
one batch in request order. A truncated batch is a prefix: `requests[:n]` with n
children; the requests that were cut were never sent, their ids are never used,
and the batch counts as done (the next call moves on to the next operator).

EoH as implemented (Liu et al., "Evolution of Heuristics", ICML 2024; checked
against the official code, FeiLiu36/EoH: eoh.py, eoh_interface_EC.py,
eoh_evolution.py, selection/prob_rank.py, management/pop_greedy.py):

- Candidates are (thought, code) pairs: a one-sentence description in braces and
  the function. Prompts show parents' thoughts and code, never objective values.
- Initialization: batches of `init_size` i1 requests ("design a new algorithm",
  no parents), each followed by survival, until the population holds enough
  valid, distinct candidates for the parent draws (max(parents_e, 1) if e1 or e2
  is used, else 1), or `max_init_batches` batches have run and at least one valid
  candidate exists, in which case the search continues with what it has (e1/e2
  then show fewer parents). If no valid candidate has appeared, i1 batches go on.
- A generation applies the operators in order (default e1, e2, m1, m2), one
  batch each: e1 and e2 ask `pop_size` times for a child of `parents_e` parents
  (e1: "totally different form"; e2: "identify the common backbone idea", then a
  different form motivated by them); m1 and m2 select `pop_size` single parents
  and ask k times for each (m1: "a modified version"; m2: "different parameter
  settings of the score function").
- Parent selection is EoH's rank-based rule (prob_rank.py): the population is
  sorted best first (ties by id) and member r (r = 0 the best) has weight
  1 / (r + 1 + N), N the current population size; that is the paper's
  p_i ∝ 1/(r_i + N) with ranks counted from 1. Parents of one request are drawn
  without replacement.
- Survival runs after every batch, as in the official code (eoh.py calls
  population_management after each operator): population ∪ children, valid only,
  duplicates dropped, the best `pop_size` by objective (ties by id) stay. So the
  children of e1 can already be parents in e2 of the same generation. (The paper's
  text reads as one survival per generation; we follow the code.)
- Duplicates: a child whose normalized code (prompts.code_key) or objective
  (rounded to `objective_decimals`, as EoH rounds objectives to 5 decimals) equals
  that of a population member or of an earlier valid child of the same batch does
  not enter (verdict "duplicate"). Invalid children (objective None or not finite)
  never enter.

Differences from the official code:

- e1/e2 parents are distinct; EoH draws them with replacement (random.choices),
  so it sometimes shows the same algorithm twice.
- EoH's initialization is always two i1 batches of pop_size (2·pop_size samples);
  here it stops as soon as enough candidates exist (set init_size=2*pop_size to
  spend what EoH spends). EoH crashes when no valid candidate appears; here i1
  batches continue.
- EoH re-asks the LLM once when a child's code equals a member's code before
  evaluating it; here every LLM call counts against the budget, so a duplicate
  is simply not admitted.
- m1/m2 issue k requests per selected parent (k = 1 reproduces the code, which
  draws a parent per request; the paper's 2000-sample setting uses k = 3).
- Operators are always applied (EoH's operator_weights, all 1 by default, are
  not modelled); the LLM is not told objective values either way.

Sample, the baseline: every batch is `batch_size` i1 requests with the one fixed
prompt; the best valid candidate wins. No population, no duplicates check.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from esopt.ahd.prompts import Candidate, Request, TaskPrompt, code_key
from esopt.seeding import derive_seed

EVOLUTION_OPERATORS = ("e1", "e2", "m1", "m2")


def rank_weights(n: int) -> list[float]:
    """EoH's selection weights for a population of n sorted best first:
    1 / (r + 1 + n) for rank r = 0..n-1 (selection/prob_rank.py)."""
    return [1.0 / (r + 1 + n) for r in range(n)]


def select_parents(population: Sequence[Candidate], n: int, rng: random.Random) -> list[Candidate]:
    """min(n, len(population)) distinct members drawn by rank weight without
    replacement (population sorted best first), in the order drawn."""
    pool = list(population)
    weights = rank_weights(len(pool))
    chosen: list[Candidate] = []
    for _ in range(min(n, len(pool))):
        i = rng.choices(range(len(pool)), weights=weights)[0]
        chosen.append(pool.pop(i))
        weights.pop(i)
    return chosen


def _sort_key(c: Candidate) -> tuple[float, int]:
    assert c.objective is not None
    return (c.objective, c.id)


def _normalize_objective(c: Candidate) -> None:
    """Objectives become plain floats (numpy scalars are not JSON); a non-finite
    or non-numeric one becomes None, with a note in error."""
    if c.objective is None:
        return
    try:
        value = float(c.objective)
    except (TypeError, ValueError):
        value = math.nan
    if math.isfinite(value):
        c.objective = value
    else:
        c.error = c.error or f"non-finite objective {c.objective!r}"
        c.objective = None


class _Search:
    """What EoH and Sample share: ids, the batch counter, the history, accept's checks."""

    kind = ""

    def __init__(self, task_prompt: TaskPrompt, seed: int):
        self.task_prompt = task_prompt
        self.seed = int(seed)
        self._history: list[Candidate] = []
        self._next_id = 0
        self._batch = 0  # batches accepted so far; names the next batch

    @property
    def history(self) -> list[Candidate]:
        """Every candidate accepted so far (valid or not), in order."""
        return list(self._history)

    def best(self) -> Candidate | None:
        """The valid candidate with the lowest objective (the oldest among equals); None before any."""
        valid = [c for c in self._history if c.valid]
        return min(valid, key=_sort_key) if valid else None

    def _requests(self, operator: str, parent_sets: Sequence[Sequence[Candidate]], generation: int) -> list[Request]:
        out = []
        for i, parents in enumerate(parent_sets):
            out.append(Request(operator=operator, prompt=self.task_prompt.build(operator, parents),
                               parents=list(parents), child_id=self._next_id + i, index=i, batch=self._batch,
                               generation=generation, seed=derive_seed(f"{self.kind}-sample", self.seed, self._batch, i)))
        return out

    def _check(self, requests: Sequence[Request], candidates: Sequence[Candidate]) -> None:
        """The candidates must be the children of a prefix of the current batch, in order."""
        if len(candidates) > len(requests):
            raise ValueError(f"{len(candidates)} candidates for {len(requests)} requests")
        for i, r in enumerate(requests):
            if r.batch != self._batch or r.index != i:
                raise ValueError(f"request {i} is (batch {r.batch}, index {r.index}), expected (batch {self._batch}, "
                                 f"index {i}): pass the requests of the current next_batch() in order, cut only at the end")
        for r, c in zip(requests, candidates, strict=False):
            if c.id != r.child_id or c.operator != r.operator:
                raise ValueError(f"candidate (id {c.id}, {c.operator}) does not answer request (id {r.child_id}, "
                                 f"{r.operator}): build children with Request.child, in request order")

    def _record(self, candidates: Sequence[Candidate]) -> None:
        for c in candidates:
            _normalize_objective(c)
        self._history.extend(candidates)
        self._next_id += len(candidates)
        self._batch += 1

    def _base_stats(self) -> dict[str, Any]:
        n = len(self._history)
        valid = sum(c.valid for c in self._history)
        best = self.best()
        return {"batches": self._batch, "samples": n, "valid": valid, "valid_rate": valid / n if n else 0.0,
                "best_objective": best.objective if best else None, "best_id": best.id if best else None}

    def _base_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": 1, "config": self.config(), "next_id": self._next_id,
                "batch": self._batch, "history": [c.to_dict() for c in self._history]}

    def _load_base_state(self, d: dict[str, Any]) -> None:
        if d.get("kind") != self.kind or d.get("version") != 1:
            raise ValueError(f"not a {self.kind} v1 state (kind={d.get('kind')!r}, version={d.get('version')!r})")
        mine = self.config()
        differ = sorted(k for k in set(mine) | set(d["config"]) if d["config"].get(k) != mine.get(k))
        if differ:
            raise ValueError(f"{self.kind} state was saved with other settings: {differ} "
                             f"(saved {[d['config'].get(k) for k in differ]}, now {[mine.get(k) for k in differ]})")
        self._history = [Candidate.from_dict(c) for c in d["history"]]
        self._next_id = int(d["next_id"])
        self._batch = int(d["batch"])

    def config(self) -> dict[str, Any]:
        tp = self.task_prompt
        return {"task": tp.task_name, "mode": tp.mode, "seed": self.seed}


class EoH(_Search):
    """Evolution of Heuristics (see the module docstring), driven batch by batch."""

    kind = "eoh"

    def __init__(self, task_prompt: TaskPrompt, pop_size: int = 10, parents_e: int = 2, k: int = 1,
                 operators: Sequence[str] = EVOLUTION_OPERATORS, init_size: int | None = None, seed: int = 0,
                 max_init_batches: int = 2, objective_decimals: int | None = 5):
        super().__init__(task_prompt, seed)
        operators = tuple(operators)
        if pop_size < 1 or parents_e < 1 or k < 1 or max_init_batches < 1:
            raise ValueError("pop_size, parents_e, k and max_init_batches must be >= 1")
        if not operators or any(op not in EVOLUTION_OPERATORS for op in operators):
            raise ValueError(f"operators must be a non-empty sequence of {EVOLUTION_OPERATORS}, got {operators}")
        if init_size is not None and init_size < 1:
            raise ValueError("init_size must be >= 1")
        self.pop_size, self.parents_e, self.k = int(pop_size), int(parents_e), int(k)
        self.operators = operators
        self.init_size = int(init_size) if init_size is not None else self.pop_size
        self.max_init_batches = int(max_init_batches)
        self.objective_decimals = objective_decimals
        self._population: list[Candidate] = []  # sorted best first
        self._initializing = True
        self._init_batches = 0
        self._generation = 0  # completed generations
        self._op_index = 0  # next operator within the generation

    # ---- views
    @property
    def population(self) -> list[Candidate]:
        """The current population, best first (valid, unique, at most pop_size)."""
        return list(self._population)

    @property
    def generation(self) -> int:
        """Completed generations (0 during initialization and the first generation)."""
        return self._generation

    @property
    def initializing(self) -> bool:
        return self._initializing

    def best(self) -> Candidate | None:
        """The best member (survival never drops it, so it is the best valid,
        non-duplicate candidate seen); None while the population is empty."""
        return self._population[0] if self._population else None

    def next_operator(self) -> str:
        return "i1" if self._initializing else self.operators[self._op_index]

    def requests_per_generation(self) -> int:
        """LLM samples one generation costs: pop_size per e1/e2, pop_size*k per m1/m2."""
        return sum(self.pop_size * (self.k if op in ("m1", "m2") else 1) for op in self.operators)

    def min_population(self) -> int:
        """Valid members initialization aims for: enough distinct parents for e1/e2."""
        return max(self.parents_e, 1) if any(op in ("e1", "e2") for op in self.operators) else 1

    def config(self) -> dict[str, Any]:
        return {**super().config(), "pop_size": self.pop_size, "parents_e": self.parents_e, "k": self.k,
                "operators": list(self.operators), "init_size": self.init_size,
                "max_init_batches": self.max_init_batches, "objective_decimals": self.objective_decimals}

    # ---- the step API
    def next_batch(self) -> list[Request]:
        """The requests of the next batch (the same until accept is called)."""
        op = self.next_operator()
        if op == "i1":
            return self._requests("i1", [[] for _ in range(self.init_size)], generation=0)
        rng = random.Random(derive_seed("eoh-select", self.seed, self._batch))
        if op in ("e1", "e2"):
            sets = [select_parents(self._population, self.parents_e, rng) for _ in range(self.pop_size)]
        else:  # m1, m2: pop_size selections, k requests with the same parent each
            sets = []
            for _ in range(self.pop_size):
                parent = select_parents(self._population, 1, rng)
                sets += [parent] * self.k
        return self._requests(op, sets, generation=self._generation + 1)

    def accept(self, requests: Sequence[Request], candidates: Sequence[Candidate]) -> dict[str, Any]:
        """Record the evaluated children of the current batch (a prefix of it if the
        budget ran out), run survival, advance to the next operator; returns this
        batch's stats."""
        self._check(requests, candidates)
        op = self.next_operator()
        self._record(candidates)
        valid = self._admit(candidates)
        self._survive(valid)
        if self._initializing:
            self._init_batches += 1
            enough = len(self._population) >= self.min_population()
            capped = self._init_batches >= self.max_init_batches and len(self._population) > 0
            if enough or capped:
                self._initializing = False
        else:
            self._op_index += 1
            if self._op_index == len(self.operators):
                self._op_index = 0
                self._generation += 1
        verdicts = [c.verdict for c in candidates]
        best = self.best()
        return {"operator": op, "n": len(candidates), "valid": sum(c.valid for c in candidates),
                "duplicates": verdicts.count("duplicate"), "kept": verdicts.count("kept"),
                "best_batch_objective": min((c.objective for c in candidates if c.valid), default=None),
                "best_objective": best.objective if best else None, "population_size": len(self._population),
                "generation": self._generation}

    def _objective_key(self, value: float) -> float:
        return round(value, self.objective_decimals) if self.objective_decimals is not None else value

    def _admit(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        """The valid children that duplicate neither a member nor an earlier child
        of this batch; marks the others "invalid" or "duplicate"."""
        codes = {code_key(m.code) for m in self._population}
        objectives = {self._objective_key(m.objective) for m in self._population if m.objective is not None}
        admitted = []
        for c in candidates:
            if not c.valid:
                c.verdict = "invalid"
                continue
            assert c.objective is not None
            ck, ok = code_key(c.code), self._objective_key(c.objective)
            if ck in codes or ok in objectives:
                c.verdict = "duplicate"
                continue
            codes.add(ck)
            objectives.add(ok)
            admitted.append(c)
        return admitted

    def _survive(self, admitted: Sequence[Candidate]) -> None:
        """The best pop_size of population ∪ admitted children stay."""
        pool = sorted([*self._population, *admitted], key=_sort_key)
        self._population = pool[: self.pop_size]
        kept = {c.id for c in self._population}
        for c in admitted:
            c.verdict = "kept" if c.id in kept else "discarded"

    # ---- inspection and state
    def stats(self) -> dict[str, Any]:
        pop = [c.objective for c in self._population if c.objective is not None]
        return {**self._base_stats(), "phase": "init" if self._initializing else "evolve",
                "generation": self._generation, "next_operator": self.next_operator(),
                "duplicates": sum(c.verdict == "duplicate" for c in self._history),
                "population_size": len(pop), "population_mean_objective": sum(pop) / len(pop) if pop else None}

    def state_dict(self) -> dict[str, Any]:
        """JSON-serializable; load_state_dict(state) resumes with identical batches."""
        return {**self._base_state(), "population": [c.id for c in self._population],
                "initializing": self._initializing, "init_batches": self._init_batches,
                "generation": self._generation, "op_index": self._op_index}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self._load_base_state(d)
        by_id = {c.id: c for c in self._history}
        self._population = sorted((by_id[int(i)] for i in d["population"]), key=_sort_key)
        self._initializing = bool(d["initializing"])
        self._init_batches = int(d["init_batches"])
        self._generation = int(d["generation"])
        self._op_index = int(d["op_index"])


class Sample(_Search):
    """The baseline: batch_size i1 requests per batch, one fixed prompt, keep the best."""

    kind = "sample"

    def __init__(self, task_prompt: TaskPrompt, batch_size: int = 10, seed: int = 0):
        super().__init__(task_prompt, seed)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.batch_size = int(batch_size)

    @property
    def generation(self) -> int:
        """Batches accepted so far (Sample has no generations; a batch stands in)."""
        return self._batch

    @property
    def population(self) -> list[Candidate]:
        """The best candidate so far as a one-member population (empty before any valid one)."""
        best = self.best()
        return [best] if best else []

    def requests_per_generation(self) -> int:
        return self.batch_size

    def config(self) -> dict[str, Any]:
        return {**super().config(), "batch_size": self.batch_size}

    def next_batch(self) -> list[Request]:
        return self._requests("i1", [[] for _ in range(self.batch_size)], generation=self._batch)

    def accept(self, requests: Sequence[Request], candidates: Sequence[Candidate]) -> dict[str, Any]:
        """Record a batch's candidates (a prefix if the budget ran out); returns its stats."""
        self._check(requests, candidates)
        self._record(candidates)
        for c in candidates:
            c.verdict = "sampled" if c.valid else "invalid"
        best = self.best()
        return {"operator": "i1", "n": len(candidates), "valid": sum(c.valid for c in candidates),
                "best_batch_objective": min((c.objective for c in candidates if c.valid), default=None),
                "best_objective": best.objective if best else None, "generation": self._batch}

    def stats(self) -> dict[str, Any]:
        return {**self._base_stats(), "generation": self._batch}

    def state_dict(self) -> dict[str, Any]:
        return self._base_state()

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self._load_base_state(d)

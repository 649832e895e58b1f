"""Evaluating model-written heuristics: static checks, then a sandboxed run, then trusted scoring.

1. `check_code` parses the candidate and refuses, before anything runs, code that
   imports outside `ALLOWED_IMPORTS`, touches dunder attributes or names, calls
   builtins that reach the interpreter (`eval`, `exec`, `open`, `getattr`, ...), has
   top-level statements other than imports, definitions and constant assignments, or
   does not define the task's function. This is a filter that gives clear reasons,
   not the security boundary.
2. The boundary is `PythonSandbox` (esopt.agent.tools.python_sandbox): a fresh process
   per candidate with wall-clock, CPU, memory, file-size and process limits, and, where
   this host allows, a seccomp filter (no sockets, namespaces, mounts, ptrace, ...), no
   network, its own PID namespace, a read-only filesystem with the host's shared
   directories hidden, and an unprivileged uid (`HeuristicEvaluator.sandbox.layers`
   says which; `require_all_layers` fails at construction rather than run with fewer).
   The program it runs is the task's runner (trusted, self-contained) plus the
   candidate, exec'd into a namespace of its own; it prints the runner's outputs for
   every instance as one JSON line behind a per-call random marker.
3. Back in this process, `task.score` validates each output (a feasible tour,
   capacity respected, a finite matrix of the right shape) and computes the
   objective from it and the instance. Anything that goes wrong at any step makes the
   candidate invalid with a reason; nothing a candidate does raises here.

The result line can be forged, and that is bounded by step 3. The runner and the
candidate share one process, so a candidate that gets past the static check (it is a
filter: string-based attribute access, say) can read the marker from the harness's
frames or code and print a line of its own, then exit. It gains nothing that step 3
does not grant: the line's outputs are scored as if the runner had produced them,
feasibility and objective computed here from the instance, never taken from the
candidate (the ACO tasks even run the colony here, from the candidate's heuristic
matrix). A forger can only submit solutions it actually found, within the same CPU and
wall-clock limits, which a heuristic could equally compute inside its own function
(it sees the whole instance). No channel the candidate cannot reach exists inside that
process, so the design relies on this bound (tests/test_ahd_evaluate.py forges a line).

The objective of a candidate is the mean of its per-instance objectives (minimized).
"""

from __future__ import annotations

import ast
import json
import secrets
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from esopt.agent.tools.python_sandbox import PythonSandbox
from esopt.ahd.tasks.base import HeuristicTask, Instance

# Modules a heuristic may import (the top-level name; numpy only with these submodules).
ALLOWED_IMPORTS = frozenset({"numpy", "math", "random", "itertools", "functools", "heapq", "collections",
                             "operator", "statistics", "typing", "bisect"})
NUMPY_SUBMODULES = frozenset({"numpy", "numpy.linalg", "numpy.random", "numpy.fft"})
# Builtins that reach the interpreter, the filesystem or other objects' internals.
FORBIDDEN_NAMES = frozenset({"eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars",
                             "input", "breakpoint", "getattr", "setattr", "delattr", "memoryview", "help",
                             "exit", "quit", "dir", "type", "object", "super", "classmethod", "staticmethod"})
# Attributes with no business in a heuristic (numpy's escape hatches to native code and files).
FORBIDDEN_ATTRIBUTES = frozenset({"ctypeslib", "ctypes", "load_library", "lib", "system", "popen", "tofile",
                                  "fromfile", "load", "save", "savez", "memmap", "DataSource", "f2py",
                                  "distutils", "testing", "gi_frame", "f_globals", "f_locals", "f_back",
                                  "cr_frame", "tb_frame",
                                  # attribute access or evaluation by string, out of this check's sight
                                  "attrgetter", "methodcaller", "get_type_hints", "ForwardRef"})
MAX_CODE_CHARS = 20_000


def check_code(code: str, function_name: str) -> str | None:
    """None if the code may run, else why not (one line)."""
    if not isinstance(code, str) or not code.strip():
        return "empty code"
    if len(code) > MAX_CODE_CHARS:
        return f"code is {len(code)} characters, over the {MAX_CODE_CHARS} allowed"
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        return f"does not parse: {type(e).__name__}: {e}"
    for stmt in tree.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and not _calls_anything(stmt):
            continue  # module constants
        if not isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef)):
            return f"line {stmt.lineno}: only imports, functions and constants at the top level"
    try:
        nodes = list(ast.walk(tree))
    except RecursionError:
        return "code is nested too deeply"
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if why := _import_refused(alias.name):
                    return f"line {node.lineno}: {why}"
        elif isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                return f"line {node.lineno}: relative imports are not allowed"
            if why := _import_refused(node.module):
                return f"line {node.lineno}: {why}"
            for alias in node.names:
                if alias.name in FORBIDDEN_ATTRIBUTES or alias.name.startswith("__"):
                    return f"line {node.lineno}: {node.module}.{alias.name} is not allowed"
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("__") or node.attr in FORBIDDEN_ATTRIBUTES:
                return f"line {node.lineno}: attribute {node.attr!r} is not allowed"
        elif isinstance(node, ast.Name):
            if node.id in FORBIDDEN_NAMES or node.id.startswith("__"):
                return f"line {node.lineno}: name {node.id!r} is not allowed"
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            return f"line {node.lineno}: global/nonlocal is not allowed"
    if not any(isinstance(s, ast.FunctionDef) and s.name == function_name for s in tree.body):
        return f"no top-level function named {function_name!r}"
    return None


def _import_refused(module: str) -> str | None:
    top = module.split(".")[0]
    if top not in ALLOWED_IMPORTS:
        return f"import of {module!r} is not allowed (allowed: {', '.join(sorted(ALLOWED_IMPORTS))})"
    if top == "numpy" and module not in NUMPY_SUBMODULES:
        return f"import of {module!r} is not allowed (numpy submodules: {', '.join(sorted(NUMPY_SUBMODULES))})"
    return None


def _calls_anything(stmt: ast.AST) -> bool:
    return any(isinstance(n, (ast.Call, ast.Lambda, ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp))
               for n in ast.walk(stmt))


# --------------------------------------------------------------------------- evaluation
@dataclass
class Evaluation:
    objective: float | None  # mean per-instance objective (minimized); None: invalid
    status: str  # ok | refused | error | timeout | memory | killed | invalid_output
    error: str = ""  # why it is invalid
    per_instance: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    cached: bool = False  # the same code was evaluated before in this run (no sandbox call)

    @property
    def valid(self) -> bool:
        return self.objective is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_PROGRAM = '''
{runner}

# ---- esopt harness (the candidate runs in a namespace of its own)
import json as _esopt_json


def _esopt_plain(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    return repr(o)


def _esopt_main():
    instances = _esopt_json.loads({instances!r})
    space = {{"__name__": "heuristic"}}
    exec(compile({code!r}, "<heuristic>", "exec"), space)
    fn = space.get({function!r})
    if not callable(fn):
        raise TypeError("the code does not define a function named {function}")
    outputs = [run(fn, inst) for inst in instances]
    print({marker!r} + _esopt_json.dumps(outputs, default=_esopt_plain), flush=True)


_esopt_main()
'''


class HeuristicEvaluator:
    """Evaluates candidate code for one task on a fixed list of instances.

    Identical code (byte for byte) is evaluated once per evaluator: the search still
    counts each sample against its budget, `sandbox_runs` counts the processes."""

    def __init__(self, task: HeuristicTask, instances: Sequence[Instance], *, timeout_s: float = 10.0,
                 cpu_s: int = 10, memory_mb: int = 1024, output_mb: int = 16, workers: int = 1,
                 require_all_layers: bool = False):
        if not instances:
            raise ValueError(f"{task.name}: no instances to evaluate on")
        self.task, self.instances = task, list(instances)
        self.sandbox = PythonSandbox(timeout_s=timeout_s, cpu_s=cpu_s, memory_mb=memory_mb,
                                     capture_bytes=output_mb << 20, max_output_chars=2000,
                                     require_all_layers=require_all_layers)
        self.sandbox.log_layers()
        self.workers = max(1, int(workers))
        self._payload = json.dumps([task.sandbox_instance(i) for i in self.instances])
        self._runner = task.runner_source()
        self._cache: dict[str, Evaluation] = {}
        self._lock = threading.Lock()
        self.sandbox_runs = 0

    def __call__(self, code: str) -> Evaluation:
        with self._lock:
            hit = self._cache.get(code)
        if hit is not None:
            return replace(hit, cached=True, wall_s=0.0)
        ev = self._evaluate(code)
        with self._lock:
            self._cache.setdefault(code, ev)
        return ev

    def many(self, codes: Sequence[str]) -> list[Evaluation]:
        """Evaluations in the order of `codes` (run `workers` at a time)."""
        if self.workers == 1 or len(codes) < 2:
            return [self(c) for c in codes]
        first: dict[str, int] = {}
        for i, c in enumerate(codes):
            first.setdefault(c, i)
        with ThreadPoolExecutor(self.workers) as pool:
            done = dict(zip(first, pool.map(self, list(first))))
        return [done[c] if first[c] == i else replace(done[c], cached=True, wall_s=0.0) for i, c in enumerate(codes)]

    # ---- internals
    def _evaluate(self, code: str) -> Evaluation:
        why = check_code(code, self.task.function_name)
        if why is not None:
            return Evaluation(None, "refused", why)
        marker = f"@@esopt-result-{secrets.token_hex(8)}@@"
        program = _PROGRAM.format(runner=self._runner, instances=self._payload, code=code,
                                  function=self.task.function_name, marker=marker)
        with self._lock:
            self.sandbox_runs += 1
        try:
            r = self.sandbox.run(program)
        except Exception as e:  # noqa: BLE001  the host's trouble: the candidate is invalid, the search goes on
            return Evaluation(None, "error", f"sandbox failure: {type(e).__name__}: {e}")
        if r.status != "ok":
            detail = r.message or _last_line(r.stderr)
            if r.status == "error" and r.stderr.strip():
                detail = _last_line(r.stderr)
            return Evaluation(None, r.status, detail[:500], wall_s=r.wall_s)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith(marker)]
        if not lines:
            why = "output was cut (too large)" if r.truncated else "the program printed no result"
            return Evaluation(None, "invalid_output", why, wall_s=r.wall_s)
        try:
            outputs = json.loads(lines[-1][len(marker):])
        except (ValueError, RecursionError) as e:
            return Evaluation(None, "invalid_output", f"unreadable result: {e}"[:500], wall_s=r.wall_s)
        if not isinstance(outputs, list) or len(outputs) != len(self.instances):
            return Evaluation(None, "invalid_output", "wrong number of outputs", wall_s=r.wall_s)
        scores = []
        for k, (inst, out) in enumerate(zip(self.instances, outputs)):
            try:
                s = self.task.score(inst, out)
            except Exception as e:  # noqa: BLE001  a scoring bug on odd output must not stop the search
                s, why = None, f"{type(e).__name__}: {e}"
            else:
                why = "infeasible or malformed output"
            if s is None or s != s or s in (float("inf"), float("-inf")):
                return Evaluation(None, "invalid_output", f"instance {k}: {why}"[:500], wall_s=r.wall_s)
            scores.append(float(s))
        return Evaluation(sum(scores) / len(scores), "ok", "", scores, r.wall_s)


def sandbox_provenance(cfg: dict[str, Any]) -> dict[str, Any]:
    """What a run's provenance records of the evaluator's sandbox: the layers active here."""
    return {**PythonSandbox().provenance(),
            "require_all_layers": bool(cfg["ahd"]["evaluation"].get("require_all_layers", False))}


def _last_line(text: str) -> str:
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")

"""Audit a result against its provenance.json: re-hash, re-check the config, replay ES.

One provenance record (see esopt.report.provenance) is checked in this order:

record        the file parses and holds the keys every record has
config-hash   config_sha256 == sha256 of the recorded (resolved) config
config-file   the config file at config_path, loaded and resolved *now* (schema
              defaults filled), against the recorded config in the sections this
              result depends on: what the pipeline's rule passes as params (see
              `depends_on`), so growing the grid (horizons, seeds, populations,
              es.variants, population_study, rl.methods, reference numbers) or editing
              an unrelated section is a note, as it reruns nothing. A relevant
              difference fails and names the dotted keys. When the file is byte for
              byte the one the run read, differences at keys the file spells out fail
              (the record contradicts its own config file: a forged record); differences
              only at keys the file leaves to schema defaults are a note (the code moved
              on, not the config)
input         every recorded input file re-hashed (model weights, config, data, the
              upstream record); the config file's own hash is a note, not a failure,
              when its relevant sections resolve as recorded
chain         an input that is another record (DIR/provenance.json of the training run
              or model build): the files it records as produced agree with the hashes
              this record took of them
output        every recorded output file re-hashed
model-weights build-model: every weight file in weights_sha256 that the outputs do not list
history       ES: history.json agrees with the record on the base and final weight
              hashes, the method (--variant) and the horizon
ranks         ES over torch.distributed ranks: every replica's final weights hash
              to final_weights_sha256
base-weights  ES/RL: the base model (the --model input) loads to base_weights_sha256
replay        ES: the history replayed onto the base model gives final_weights_sha256
              (train-rl: a note; RL runs cannot be replayed; search-heuristics --es: the
              writer's online updates)
saved-weights ES/RL: the saved DIR/model loads to final_weights_sha256 (not for
              search-heuristics, which keeps no model)
code          note only: the recorded git commit (and dirty flag) against the checkout now

Report records (command "notebook:NAME", written by the figure notebooks beside their
table as TABLE.provenance.json) hold no config: their inputs and outputs are re-hashed.

Weight checks load models on the CPU; the replay runs on the device type the run's
weights lived on (the record's model_device; older records: a GPU whenever one was
visible). ES noise is drawn per device type: a GPU run is replayed on a GPU, and
skipped with a message where there is none, with the run's torch thread count.
Models with more than `max_replay_params` parameters skip the weight checks with a
message (run `esopt replay` where the model fits); small ones are compared bit for
bit, no tolerance.

Recorded paths are relative to the directory the command ran in (the pipeline's
working directory). They are resolved (1) as they are when absolute, else (2) against
`root` when given, else (3) against the directory that, joined with the recorded
output paths, gives the files beside the provenance file (so a results/ tree audits
from anywhere, and a moved tree still finds its own outputs), else (4) against the
current directory.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from math import prod
from pathlib import Path
from typing import Any

import yaml

from esopt.config import (
    ES_GRID_KEYS,
    ConfigError,
    config_sha256,
    es_settings,
    load_config,
    model_spec,
)
from esopt.io import sha256_file

log = logging.getLogger("esopt.audit")

DEFAULT_MAX_REPLAY_PARAMS = 50_000_000
REPLAY_MODES = ("auto", "always", "never")
REQUIRED_KEYS = ("command", "config", "config_sha256", "inputs", "outputs")
SYMBOL = {"ok": "✓", "fail": "✗", "skip": "-", "note": "·"}


class AuditError(ValueError):
    """A user mistake (no such path, nothing to audit); not a failed check."""


@dataclass
class Check:
    name: str  # record, config-hash, config-file, input, output, ...
    target: str  # the path the check is about, as the record names it
    status: str  # ok | fail | skip | note
    detail: str = ""
    record: str = ""  # the provenance file the check belongs to

    @property
    def ok(self) -> bool:
        return self.status != "fail"

    def line(self) -> str:
        return f"  {SYMBOL[self.status]} {self.name:<13} {self.target}" + (f": {self.detail}" if self.detail else "")


@dataclass
class AuditReport:
    target: str
    records: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def first_failure(self) -> Check | None:
        return next(iter(self.failures), None)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(SYMBOL, 0)
        for c in self.checks:
            out[c.status] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        first = self.first_failure
        return {"target": self.target, "ok": self.ok, "records": self.records, "counts": self.counts(),
                "first_failure": asdict(first) if first else None,
                "checks": [asdict(c) | {"ok": c.ok} for c in self.checks]}


# ---------------------------------------------------------------- finding records


def is_provenance_file(p: Path) -> bool:
    return p.name == "provenance.json" or p.name.endswith(".provenance.json")


def records_under(d: Path) -> list[Path]:
    """Every provenance file under a directory (hidden directories such as .resume/ skipped)."""
    found = []
    for p in d.rglob("*provenance.json"):
        rel = p.relative_to(d).parts
        if p.is_file() and is_provenance_file(p) and not any(part.startswith(".") for part in rel[:-1]):
            found.append(p)
    return sorted(found)


def _abs(p: str | os.PathLike) -> Path:
    return Path(os.path.abspath(p))  # absolute, normalized, symlinks kept as the user named them


def display_path(p: Path) -> str:
    """A path as the user would type it: relative to the current directory when under it."""
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def infer_root(prov: Path, rec: dict[str, Any]) -> Path | None:
    """The directory the command ran in, from where its provenance file now lies."""
    here = _abs(prov).parent
    outputs = rec.get("outputs") if isinstance(rec.get("outputs"), dict) else {}
    for o in sorted(outputs, key=lambda o: len(Path(o).parts)):
        op = Path(o)
        if op.is_absolute():
            continue
        d = op.parent.parts
        if len(d) <= len(here.parts) - 1 and here.parts[len(here.parts) - len(d):] == d:
            return Path(*here.parts[: len(here.parts) - len(d)])
    return None


def produced_files(prov: Path, rec: dict[str, Any], root: Path | None) -> set[Path]:
    """Absolute paths a record vouches for: its outputs and, for build-model, the weight files."""
    base = root or infer_root(prov, rec) or Path.cwd()
    res = lambda p: _abs(p if Path(p).is_absolute() else base / p)
    files = {res(o) for o in (rec.get("outputs") or {})}
    model_dir = _model_dir_of_build(rec, res)
    if model_dir is not None:
        files |= {model_dir / f for f in rec.get("weights_sha256") or {}}
    return files


def producer_of(path: Path, root: Path | None = None, levels: int = 4) -> Path | None:
    """The provenance file that lists `path` (a file, or a directory: any file under it) as
    produced: beside it or up to `levels` directories above it, else in a sibling of its
    directory (a report's figure in results/figures/, its record in results/tables/)."""
    path = _abs(path)
    if is_provenance_file(path):
        return path
    candidates: list[Path] = []
    if path.suffix:
        candidates.append(path.with_suffix(".provenance.json"))
    for d in [path.parent, *path.parent.parents][:levels]:
        candidates += [d / "provenance.json", *sorted(d.glob("*.provenance.json"))]
    up = path.parent.parent
    if up != path.parent:
        siblings = sorted(d for d in up.iterdir() if d.is_dir() and d != path.parent and not d.name.startswith("."))
        candidates += [c for d in siblings for c in sorted(d.glob("*.provenance.json"))]
    for c in dict.fromkeys(candidates):
        rec = _read_record(c) if c.is_file() else None
        if rec is None:
            continue
        files = produced_files(c, rec, root)
        if path in files or any(path in f.parents for f in files):
            return c
    return None


def find_records(path: str | os.PathLike, root: Path | None = None) -> list[Path]:
    """PATH → the provenance files to audit (see the CLI's help)."""
    p = _abs(path)
    if not p.exists():
        raise AuditError(f"{path}: no such file or directory")
    if p.is_file() and is_provenance_file(p):
        return [p]
    if p.is_dir():
        found = records_under(p)
        if found:
            return found
    prov = producer_of(p, root)
    if prov is None:
        what = "no provenance file under it, and none" if p.is_dir() else "no provenance file"
        raise AuditError(f"{path}: {what} beside or above it lists it as an output")
    return [prov]


# ---------------------------------------------------------------- helpers


def _val(v: Any, width: int = 40) -> str:
    s = json.dumps(v)
    return s if len(s) <= width else s[: width - 1] + "…"


def config_differences(recorded: Any, current: Any, path: tuple = ()) -> list[tuple[tuple, str]]:
    """(key path, message) wherever two configs differ, with both values (long ones cut)."""
    key = ".".join(map(str, path)) or "(config)"
    if isinstance(recorded, dict) and isinstance(current, dict):
        out = []
        for k in sorted(set(recorded) | set(current), key=str):
            if k not in current:
                out.append(((*path, k), f"{key + '.' if path else ''}{k} removed (was {_val(recorded[k])})"))
            elif k not in recorded:
                out.append(((*path, k), f"{key + '.' if path else ''}{k} added ({_val(current[k])})"))
            else:
                out += config_differences(recorded[k], current[k], (*path, k))
        return out
    if recorded != current:
        return [(path, f"{key}: recorded {_val(recorded)}, now {_val(current)}")]
    return []


def config_diff(recorded: Any, current: Any) -> list[str]:
    """Dotted keys where two configs differ, with both values."""
    return [msg for _, msg in config_differences(recorded, current)]


def _is_set_in(raw: Any, path: tuple) -> bool:
    """Whether a YAML mapping spells out the key at `path` (rather than leaving it to a default)."""
    for k in path:
        if not isinstance(raw, dict) or k not in raw:
            return False
        raw = raw[k]
    return True


def _without(d: Any, keys: tuple[str, ...]) -> Any:
    return {k: v for k, v in d.items() if k not in keys} if isinstance(d, dict) else d


def _section(c: dict[str, Any], key: str) -> Any:
    return c.get(key) if isinstance(c, dict) else None


def _missing(e: Exception) -> str:
    return f"(not in the config: {str(e).splitlines()[0]})"


def _model_view(c: dict[str, Any], name: str | None) -> dict[str, Any]:
    main = (_section(c, "model") or {}).get("name")
    key = "model" if name is None or name == main else f"population_study.models[{name}]"
    try:
        return {key: model_spec(c, name)}
    except (ConfigError, KeyError, TypeError) as e:
        return {key: _missing(e)}


def _es_view(c: dict[str, Any], horizon: int, variant: str | None) -> Any:
    try:
        return es_settings(c, horizon, variant)
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError) as e:
        return _missing(e)


def _run_horizon(rec: dict[str, Any]) -> int | None:
    argv, wc = rec.get("argv") or [], rec.get("wildcards") or {}
    for h in (_arg(argv, "--horizon"), wc.get("horizon") if isinstance(wc, dict) else None):
        try:
            return int(h)
        except (TypeError, ValueError):
            continue
    return None


def depends_on(rec: dict[str, Any]) -> tuple[str, Callable[[dict[str, Any]], dict[str, Any]]] | None:
    """The config sections a result depends on, mirroring what its rule passes as params
    (workflow/rules/*.smk): (what, view) where view(config) is those sections, or None
    (an unknown command): the whole config counts. The grid lists (horizons, seeds,
    populations, es.variants other than the run's, population_study, rl.methods) are
    wildcards or targets, not params, and `distributed` changes no result."""
    cmd, argv = rec.get("command"), rec.get("argv") or []
    sudoku = lambda c: _without(_section(c, "sudoku"), ("horizons",))
    agent = lambda c: _section(c, "agent")
    if cmd == "build-model" and "--probe" in argv:
        return "memory.probe, model.dtype", lambda c: {
            "memory": {"probe": (_section(c, "memory") or {}).get("probe")},
            "model": {"dtype": (_section(c, "model") or {}).get("dtype")}}
    if cmd == "build-model":
        name = _arg(argv, "--name")
        return (f"the model {name or '(main)'}, sudoku (not horizons), agent",
                lambda c: {**_model_view(c, name), "sudoku": sudoku(c), "agent": agent(c)})
    if cmd == "train-es":
        h, variant = _run_horizon(rec), _arg(argv, "--variant")
        if h is None:
            return None
        what = f"es as run at H*={h}" + (f" (variant {variant})" if variant else "") + ", sudoku (not horizons), agent"
        return what, lambda c: {"es": _es_view(c, h, variant), "sudoku": sudoku(c), "agent": agent(c)}
    if cmd == "train-rl":
        return "rl (not methods, seeds), sudoku (not horizons), agent", lambda c: {
            "rl": _without(_section(c, "rl"), ("methods", "seeds")), "sudoku": sudoku(c), "agent": agent(c)}
    if cmd == "evaluate":
        return "evaluate, sudoku (not horizons), agent", lambda c: {
            "evaluate": _section(c, "evaluate"), "sudoku": sudoku(c), "agent": agent(c)}
    if cmd in TOOL_COMMANDS:
        return _tool_view(cmd, rec)
    if cmd in AHD_COMMANDS:
        return _ahd_view(cmd, rec)
    if cmd == "memory":
        return "memory, sudoku (not horizons), rl (not methods, seeds), es (not the grid), agent", lambda c: {
            "memory": _section(c, "memory"), "sudoku": sudoku(c),
            "rl": _without(_section(c, "rl"), ("methods", "seeds")),
            "es": _without(_section(c, "es"), ES_GRID_KEYS), "agent": agent(c)}
    return None


TOOL_COMMANDS = ("prepare-data", "build-tool-model", "train-agent", "evaluate-agent")
_TOOL_EPISODE = ("max_turns", "max_tool_calls", "max_new_tokens", "history_turns", "sampling", "sandbox", "ocr")


def _tool_view(cmd: str, rec: dict[str, Any]) -> tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]:
    """The tool_agents sections a tool-agent result depends on (as workflow/rules/tools.smk
    passes them): the episode settings and tools, plus the set (prepare-data), the model
    (build-tool-model), the method's settings (train-agent) or evaluate (evaluate-agent).
    Benchmark, set and method come from the record (argv as a fallback)."""
    argv = rec.get("argv") or []
    bench = rec.get("benchmark") or _arg(argv, "--benchmark")
    data_set = rec.get("set") or _arg(argv, "--set")
    method = rec.get("method") or _arg(argv, "--method")

    def ta(c):
        return _section(c, "tool_agents") or {}

    def episode(c):
        t = ta(c)
        return {k: t.get(k) for k in _TOOL_EPISODE} | {
            "tools": {b: s.get("tools") for b, s in (t.get("benchmarks") or {}).items()}}

    if cmd == "prepare-data":
        def view(c):
            b = (ta(c).get("benchmarks") or {}).get(bench) or {}
            spec = b.get("train") if data_set == "train" else (b.get("eval") or {}).get(data_set)
            return {"set": spec, "ocr": ta(c).get("ocr") if bench == "docvqa" else None}
        return f"tool_agents.benchmarks.{bench} set {data_set} (+ ocr)", view
    if cmd == "build-tool-model":
        return "tool_agents.model and episode settings", lambda c: {"model": ta(c).get("model"), "episode": episode(c)}
    if cmd == "train-agent":
        def view(c):
            t = ta(c)
            if method == "grpo":
                g = t.get("grpo") or {}
                rl = {k: v for k, v in (_section(c, "rl") or {}).items() if k not in g and k not in ("grpo", "ppo", "methods", "seeds")}
                return {"grpo": g, "rl": rl, "episode": episode(c)}
            out = {"es": t.get("es"), "es_override": ((t.get("benchmarks") or {}).get(bench) or {}).get("es"),
                   "episode": episode(c)}
            if method and "trace2skill" in method:
                out["trace2skill"] = t.get("trace2skill")
            return out
        return f"tool_agents settings of {method} on {bench}, episode settings", view
    return "tool_agents.evaluate and episode settings", lambda c: {"evaluate": ta(c).get("evaluate"), "episode": episode(c)}


AHD_COMMANDS = ("build-ahd-model", "search-heuristics")


def _ahd_view(cmd: str, rec: dict[str, Any]) -> tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]:
    """The ahd sections a heuristic-design result depends on (as workflow/rules/ahd.smk
    passes them): the writer model, or one run's task, budget, search and ES settings."""
    argv = rec.get("argv") or []

    def ahd(c):
        return _section(c, "ahd") or {}

    if cmd == "build-ahd-model":
        return "ahd.model, tasks, response, eoh.parents_e", lambda c: {
            "model": ahd(c).get("model"), "tasks": list(ahd(c).get("tasks") or {}), "response": ahd(c).get("response"),
            "parents_e": (ahd(c).get("eoh") or {}).get("parents_e")}
    task = rec.get("task") or _arg(argv, "--task")
    search = rec.get("search") or _arg(argv, "--search")
    budget = rec.get("budget") or _arg(argv, "--budget")
    es = rec.get("es") if "es" in rec else "--es" in argv

    def view(c):
        a = ahd(c)
        out = {k: a.get(k) for k in ("response", "writer", "test_seed", "evaluation")}
        out["task"] = (a.get("tasks") or {}).get(task)
        out["budget"] = next((b for b in a.get("budgets") or [] if str(b.get("samples")) == str(budget)), None)
        if search == "eoh":
            out["eoh"] = a.get("eoh")
        if es:
            out["es"] = a.get("es")
        return out
    return f"ahd settings of {task} / {search} / budget {budget}{' + ES' if es else ''}", view


def count_parameters(model_dir: Path) -> int | None:
    """Parameter count from safetensors headers (no weights read); None without safetensors."""
    total, seen = 0, False
    for f in sorted(model_dir.rglob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        total += sum(prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
        seen = True
    return total if seen else None


def _arg(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _model_dir_of_build(rec: dict[str, Any], res: Callable[[str], Path]) -> Path | None:
    if rec.get("command") != "build-model" or not isinstance(rec.get("weights_sha256"), dict):
        return None
    out = _arg(rec.get("argv") or [], "--out")
    if out:
        return res(out)
    for o in rec.get("outputs") or {}:
        if Path(o).name == "weights.sha256.json":
            return res(o).parent
    return None


def _short(h: str | None) -> str:
    return (h or "none")[:12]


def current_git() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def run_device(rec: dict[str, Any]) -> str:
    """Device type an ES run's weights lived on; noise is drawn per device type, so a replay
    must match it. The record's model_device says it ("cuda:0" -> "cuda"); older records
    name a GPU whenever CUDA was visible, and models loaded on it then
    (esopt.models.load.default_device)."""
    md = rec.get("model_device")
    if isinstance(md, str) and md:
        return md.split(":", 1)[0]
    return "cuda" if (rec.get("device") or {}).get("gpu") else "cpu"


def _device_available(device: str) -> bool:
    import torch

    if device == "cpu":
        return True
    if device == "cuda":
        return torch.cuda.is_available()
    backend = getattr(torch.backends, device, None)
    return bool(backend is not None and getattr(backend, "is_available", lambda: False)())


@contextmanager
def torch_threads(n: Any) -> Iterator[None]:
    """Run with the thread count the record was made with (bit-exactness is per device and threads)."""
    import torch

    old = torch.get_num_threads()
    if isinstance(n, int) and n > 0:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# ---------------------------------------------------------------- the auditor


class Auditor:
    def __init__(self, root: str | os.PathLike | None = None, replay: str = "auto",
                 max_replay_params: int = DEFAULT_MAX_REPLAY_PARAMS,
                 on_check: Callable[[Check], None] | None = None):
        if replay not in REPLAY_MODES:
            raise AuditError(f"replay={replay!r}: expected one of {REPLAY_MODES}")
        self.root = _abs(root) if root is not None else None
        if self.root is not None and not self.root.is_dir():
            raise AuditError(f"--root {root}: not a directory")
        self.replay = replay
        self.max_replay_params = max_replay_params
        self.on_check = on_check
        self._hashes: dict[Path, tuple[int, int, str]] = {}
        self._git = current_git()

    # -- plumbing

    def _emit(self, out: list[Check], check: Check) -> None:
        out.append(check)
        if self.on_check:
            self.on_check(check)

    def sha256(self, path: Path) -> str:
        st = path.stat()
        hit = self._hashes.get(path)
        if hit and hit[:2] == (st.st_size, st.st_mtime_ns):
            return hit[2]
        h = sha256_file(path)
        self._hashes[path] = (st.st_size, st.st_mtime_ns, h)
        return h

    def _hash_check(self, name: str, shown: str, path: Path, want: Any, rec_path: str) -> Check:
        if not isinstance(want, str):
            return Check(name, shown, "fail", f"recorded hash is not a string: {want!r}", rec_path)
        if not path.is_file():
            return Check(name, shown, "fail", f"missing (looked for {path}; recorded sha256 {_short(want)})", rec_path)
        got = self.sha256(path)
        if got != want:
            return Check(name, shown, "fail", f"sha256 recorded {_short(want)}, now {_short(got)}", rec_path)
        return Check(name, shown, "ok", "", rec_path)

    # -- one record

    def audit_record(self, prov: Path) -> list[Check]:
        prov = _abs(prov)
        rp = display_path(prov)
        out: list[Check] = []
        emit = lambda c: self._emit(out, c)
        rec = _read_record(prov)
        if rec is None:
            emit(Check("record", rp, "fail", "not a JSON object (unreadable or corrupted)", rp))
            return out
        missing = [k for k in REQUIRED_KEYS if k not in rec]
        if missing or not isinstance(rec["inputs"], dict) or not isinstance(rec["outputs"], dict):
            emit(Check("record", rp, "fail", f"not a provenance record (missing or malformed: {', '.join(missing) or 'inputs/outputs'})", rp))
            return out
        base = self.root or infer_root(prov, rec) or Path.cwd()
        res = lambda p: _abs(p if Path(p).is_absolute() else base / p)
        emit(Check("record", rp, "ok", f"{rec['command']}, paths relative to {base}", rp))

        # config: the record agrees with itself, then with the file it names
        got = config_sha256(rec["config"]) if isinstance(rec["config"], dict) else None
        if got != rec["config_sha256"]:
            emit(Check("config-hash", rp, "fail",
                       f"config_sha256 recorded {_short(rec['config_sha256'])}, recorded config hashes to {_short(got)}", rp))
        else:
            emit(Check("config-hash", rp, "ok", _short(got), rp))
        cp = rec.get("config_path")
        config_ok = False  # the config file resolves as recorded in the sections this result depends on
        if not cp:
            if str(rec["command"]).startswith("notebook:"):
                emit(Check("config-file", "(none)", "note", "a report: its settings are the notebook parameters "
                           "the record holds (params); its inputs carry their own records", rp))
            else:
                emit(Check("config-file", "(none)", "skip", "the record names no config file", rp))
        elif not res(cp).is_file():
            emit(Check("config-file", cp, "fail", f"missing (looked for {res(cp)})", rp))
        else:
            try:
                current = load_config(res(cp))
            except ConfigError as e:
                emit(Check("config-file", cp, "fail", f"does not load now: {str(e).splitlines()[0]}", rp))
            else:
                config_ok = self._config_file_checks(rec, cp, res, current, emit, rp)

        # files
        for p, want in rec["inputs"].items():
            c = self._hash_check("input", p, res(p), want, rp)
            if c.status == "fail" and cp and config_ok and res(p) == res(cp) and res(p).is_file():
                c = Check("input", p, "note", c.detail + ": the file changed, but not in the sections this result "
                          "depends on (see config-file)", rp)
            emit(c)
        for p, want in rec["inputs"].items():
            if is_provenance_file(Path(p)) and res(p).is_file() and self.sha256(res(p)) == want:
                c = self._chain_check(rec, p, res, rp)
                if c is not None:
                    emit(c)
        for p, want in rec["outputs"].items():
            emit(self._hash_check("output", p, res(p), want, rp))
        model_dir = _model_dir_of_build(rec, res)
        if model_dir is not None:
            outs = {res(o): h for o, h in rec["outputs"].items()}
            for f, want in rec["weights_sha256"].items():
                shown = str(Path(_arg(rec.get("argv") or [], "--out") or model_dir) / f)
                if model_dir / f in outs:  # re-hashed as an output above; the record must agree with itself
                    if outs[model_dir / f] != want:
                        emit(Check("model-weights", shown, "fail", f"the record disagrees with itself: outputs "
                                   f"{_short(outs[model_dir / f])}, weights_sha256 {_short(want)}", rp))
                    continue
                emit(self._hash_check("model-weights", shown, model_dir / f, want, rp))

        # weights: ES history, replay, saved model
        if rec["command"] in ("train-es", "train-rl") or (rec["command"] == "search-heuristics" and rec.get("es")):
            lacking = [k for k in ("base_weights_sha256", "final_weights_sha256") if not isinstance(rec.get(k), str)]
            if lacking:
                emit(Check("history" if rec["command"] == "train-es" else "saved-weights", rp, "fail",
                           f"a {rec['command']} record without {' and '.join(lacking)}: nothing to check the weights against", rp))
            else:
                for c in self.weight_checks(rec, res, rp):
                    emit(c)

        # code: a note, never a failure (code moves on; the record says which code made the result)
        g = rec.get("git") or {}
        if g.get("commit"):
            now = "the same commit" if g["commit"] == self._git else f"now {_short(self._git)}"
            emit(Check("code", "git", "note", f"made by {_short(g['commit'])}{' (dirty tree)' if g.get('dirty') else ''}, {now}", rp))
        return out

    def _config_file_checks(self, rec: dict[str, Any], cp: str, res: Callable[[str], Path],
                            current: dict[str, Any], emit: Callable[[Check], None], rp: str) -> bool:
        """config-file: the file now against the recorded config (see the module doc).
        True when the sections the result depends on resolve as recorded."""
        path = res(cp)
        found = config_differences(rec["config"], current)
        recorded_bytes = next((h for q, h in rec["inputs"].items() if res(q) == path), None)
        unchanged = recorded_bytes == self.sha256(path)
        raw = yaml.safe_load(path.read_text())
        listed = lambda msgs: "; ".join(msgs[:5]) + (f" (+{len(msgs) - 5} more)" if len(msgs) > 5 else "")
        if unchanged:
            # the file is byte for byte what the run read: every difference comes from how
            # it resolves, the code's defaults (a note) or a record that contradicts it (a failure)
            spelled = [msg for k, msg in found if _is_set_in(raw, k)]
            if spelled:
                emit(Check("config-file", cp, "fail", "the recorded config contradicts the file it names "
                           "(which is unchanged): " + listed(spelled), rp))
                return False
            if found:
                emit(Check("config-file", cp, "note", "file unchanged, but the current schema fills its defaults "
                           "differently (code changed since the run): " + listed([m for _, m in found]), rp))
            else:
                emit(Check("config-file", cp, "ok", "resolves to the recorded config", rp))
            return True
        # the file changed: any difference in what the result depends on is a rerun for the
        # pipeline (its params changed), whether the file or the schema's defaults made it
        dep = depends_on(rec)
        if dep is None:
            what, relevant = "the whole config", found
        else:
            what, view = dep
            relevant = config_differences(view(rec["config"]), view(current))
        if relevant:
            emit(Check("config-file", cp, "fail", "differs from the recorded config: " + listed([m for _, m in relevant])
                       + (f" (in what {rec['command']} depends on: {what})" if dep else ""), rp))
            return False
        elif found:
            keys = list(dict.fromkeys(".".join(map(str, k)) or "(config)" for k, _ in found))
            emit(Check("config-file", cp, "note", "config changed in sections this result does not depend on: "
                       + ", ".join(keys[:8]) + (f" (+{len(keys) - 8} more)" if len(keys) > 8 else ""), rp))
        else:
            emit(Check("config-file", cp, "ok", "resolves to the recorded config", rp))
        return True

    def _chain_check(self, rec: dict[str, Any], p: str, res: Callable[[str], Path], rp: str) -> Check | None:
        """An input that is another record: the files it produced, as this record hashed them."""
        up_path = res(p)
        up = _read_record(up_path)
        if up is None or not isinstance(up.get("outputs"), dict):
            return Check("chain", p, "fail", "the upstream record is not a provenance record", rp)
        up_base = self.root or infer_root(up_path, up) or Path.cwd()
        up_res = lambda q: _abs(q if Path(q).is_absolute() else up_base / q)
        made = {up_res(q): h for q, h in up["outputs"].items()}
        model_dir = _model_dir_of_build(up, up_res)
        if model_dir is not None:
            made |= {model_dir / f: h for f, h in up["weights_sha256"].items()}
        mine = {res(q): h for q, h in rec["inputs"].items()}
        shared = sorted(made.keys() & mine.keys())
        if not shared:
            return None
        bad = [display_path(f) for f in shared if made[f] != mine[f]]
        if bad:
            return Check("chain", p, "fail", f"{len(bad)} of {len(shared)} files differ from what {up.get('command')} "
                         f"produced: {', '.join(bad[:3])}" + (" …" if len(bad) > 3 else ""), rp)
        return Check("chain", p, "ok", f"{len(shared)} input files are what {up.get('command')} produced", rp)

    def weight_checks(self, rec: dict[str, Any], res: Callable[[str], Path], rp: str) -> list[Check]:
        from esopt.es.history import History

        checks: list[Check] = []
        es = rec["command"] in ("train-es", "search-heuristics")
        hist_key = next((o for o in rec["outputs"] if Path(o).name == "history.json"), None)
        history = None
        if es and hist_key is None:
            checks.append(Check("history", "(none)", "fail", "train-es record lists no history.json output", rp))
        elif es:
            try:
                history = History.load(res(hist_key))
            except (OSError, ValueError, TypeError, KeyError) as e:
                checks.append(Check("history", hist_key, "fail", f"does not load: {e}", rp))
            else:
                bad = []
                variant = _arg(rec.get("argv") or [], "--variant")
                want_method = f"es_{variant}" if variant else "esopt"  # esopt.cli.train_es.method_name
                if history.run.get("method") is not None and history.run["method"] != want_method:
                    bad.append(f"method {history.run['method']!r}, the command ran {want_method!r}")
                h = _run_horizon(rec)
                if history.run.get("horizon") is not None and h is not None and history.run["horizon"] != h:
                    bad.append(f"horizon {history.run['horizon']}, the command ran H*={h}")
                if history.run.get("base_weights_sha256") != rec.get("base_weights_sha256"):
                    bad.append(f"base weights {_short(history.run.get('base_weights_sha256'))} != record {_short(rec.get('base_weights_sha256'))}")
                final = (history.final or {}).get("weights_sha256")
                if final != rec["final_weights_sha256"]:
                    bad.append(f"final weights {_short(final)} != record {_short(rec['final_weights_sha256'])}")
                checks.append(Check("history", hist_key, "fail" if bad else "ok",
                                    "; ".join(bad) or f"{len(history.generations)} generations, hashes agree with the record", rp))

        ranks = rec.get("ranks")
        if es and isinstance(ranks, dict):
            ws, reps = ranks.get("world_size"), ranks.get("replica_weights_sha256")
            if not isinstance(reps, list) or len(reps) != ws:
                checks.append(Check("ranks", rp, "fail", f"world_size {ws} but replica hashes {reps!r}", rp))
            elif any(r != rec["final_weights_sha256"] for r in reps):
                odd = [i for i, r in enumerate(reps) if r != rec["final_weights_sha256"]]
                checks.append(Check("ranks", rp, "fail", f"replicas {odd} of {ws} ended at other weights than "
                                    f"final_weights_sha256 {_short(rec['final_weights_sha256'])}", rp))
            elif isinstance(ws, int) and ws > 1:
                checks.append(Check("ranks", rp, "ok", f"{ws} replicas ended at {_short(rec['final_weights_sha256'])}", rp))
        model_arg = _arg(rec.get("argv") or [], "--model")
        out_arg = _arg(rec.get("argv") or [], "--out")
        base_dir = res(model_arg) if model_arg else None
        saves_model = rec["command"] != "search-heuristics"  # online ES at test time keeps no model
        saved_key = str(Path(out_arg) / "model") if out_arg and saves_model else None
        saved_dir = res(saved_key) if saved_key else None
        names = (["base-weights"] + (["replay"] if es else []) + (["saved-weights"] if saves_model else []))
        targets = {"base-weights": model_arg or "(none)", "replay": hist_key or "(none)", "saved-weights": saved_key or "(none)"}

        def skip_all(why: str) -> list[Check]:
            return checks + [Check(n, targets[n], "skip", why, rp) for n in names]

        if not es:
            checks.append(Check("replay", "(train-rl)", "note", "RL runs are not replayable (optimizer state, sampled "
                                "rollouts): their outputs are re-hashed and their weights checked, nothing more", rp))
        if base_dir is None or not (base_dir / "config.json").is_file():
            return skip_all(f"base model directory not found ({base_dir}); see the input checks")
        n = count_parameters(base_dir)
        if self.replay != "always" and (n is None or n > self.max_replay_params):
            size = "unknown size (no safetensors)" if n is None else f"{n:.1e} params > --max-replay-params {self.max_replay_params:.1e}"
            return skip_all(f"skipped: {size}; run `esopt replay` (or audit --replay always) where the model fits")
        return checks + self._load_and_replay(rec, history, base_dir, saved_dir, targets, es, rp)

    def _load_and_replay(self, rec, history, base_dir: Path, saved_dir: Path | None, targets: dict[str, str],
                         es: bool, rp: str) -> list[Check]:
        from transformers.utils import logging as hf_logging

        from esopt.es import Perturber
        from esopt.es.history import weights_sha256
        from esopt.models.load import load_model_and_tokenizer

        hf_logging.disable_progress_bar()  # one "Loading weights" bar per model would bury the checks
        checks: list[Check] = []
        device = run_device(rec) if es else "cpu"
        run_on = device
        replay_here = True
        if not _device_available(device):
            device, replay_here = "cpu", False  # the hashes still check on the CPU; the replay cannot
        with torch_threads((rec.get("device") or {}).get("torch_threads")):
            # train-rl loads its base in rl.dtype (fp32 master weights) and hashes that
            dtype = None if es else (rec.get("base_weights_dtype") or (rec["config"].get("rl") or {}).get("dtype"))
            try:
                model, _ = load_model_and_tokenizer(base_dir, dtype=dtype, device=device)
            except Exception as e:  # noqa: BLE001 -- a swapped or broken model fails the check; the audit goes on
                checks.append(Check("base-weights", targets["base-weights"], "fail", f"does not load: {type(e).__name__}: {e}", rp))
                model = None
            base_ok = False
            if model is not None:
                got = weights_sha256(model)
                base_ok = got == rec.get("base_weights_sha256")
                checks.append(Check("base-weights", targets["base-weights"], "ok" if base_ok else "fail",
                                    f"{_short(got)}" if base_ok else
                                    f"loads to {_short(got)}, the run started from {_short(rec.get('base_weights_sha256'))}", rp))
            if es:
                n_gen = len(history.generations) if history is not None else 0
                if history is None:
                    checks.append(Check("replay", targets["replay"], "fail", "no loadable history to replay", rp))
                elif not base_ok:
                    checks.append(Check("replay", targets["replay"], "fail", "the base model is not the run's base (see base-weights)", rp))
                elif self.replay == "never":
                    checks.append(Check("replay", targets["replay"], "skip", "skipped (--no-replay)", rp))
                elif not replay_here:
                    gpu = (rec.get("device") or {}).get("gpu")
                    where = rec.get("model_device") or run_on
                    checks.append(Check("replay", targets["replay"], "skip",
                                        f"the run's weights lived on {where}" + (f" ({gpu})" if gpu else "")
                                        + f" and ES noise is drawn per device type: audit where {run_on} is "
                                        "available to replay it", rp))
                else:
                    log.info("replaying %d generations of %s on %s", n_gen, targets["replay"], device)
                    history.replay(Perturber(model))
                    got = weights_sha256(model)
                    ok = got == rec["final_weights_sha256"]
                    detail = f"{n_gen} generations on {device} → {_short(got)}, as saved"
                    if not ok:
                        detail = (f"{n_gen} generations on {device} → {_short(got)}, "
                                  f"the run saved {_short(rec['final_weights_sha256'])}" + self._drift(rec))
                    checks.append(Check("replay", targets["replay"], "ok" if ok else "fail", detail, rp))
            del model
            if rec["command"] == "search-heuristics":
                pass  # test-time ES keeps no model: the replay is its weight check
            elif saved_dir is None or not (saved_dir / "config.json").is_file():
                checks.append(Check("saved-weights", targets["saved-weights"], "fail", f"no saved model at {saved_dir}", rp))
            else:
                try:
                    saved, _ = load_model_and_tokenizer(saved_dir, device="cpu")
                    got = weights_sha256(saved)
                    del saved
                except Exception as e:  # noqa: BLE001 -- as above
                    checks.append(Check("saved-weights", targets["saved-weights"], "fail", f"does not load: {type(e).__name__}: {e}", rp))
                else:
                    ok = got == rec["final_weights_sha256"]
                    checks.append(Check("saved-weights", targets["saved-weights"], "ok" if ok else "fail",
                                        _short(got) if ok else f"loads to {_short(got)}, the run recorded {_short(rec['final_weights_sha256'])}", rp))
        return checks

    @staticmethod
    def _drift(rec: dict[str, Any]) -> str:
        """Why a replay may legitimately differ: other package versions or another device."""
        from esopt.report.provenance import package_versions

        now = package_versions()
        then = rec.get("packages") or {}
        diff = [f"{k} {then.get(k)} then, {now.get(k)} now" for k in ("python", "torch") if then.get(k) != now.get(k)]
        return f" ({'; '.join(diff)})" if diff else ""


def audit(path: str | os.PathLike, *, root: str | os.PathLike | None = None, replay: str = "auto",
          max_replay_params: int = DEFAULT_MAX_REPLAY_PARAMS, upstream: bool = False, progress: bool = False,
          on_check: Callable[[Check], None] | None = None,
          on_record: Callable[[Path], None] | None = None) -> AuditReport:
    """Audit every provenance record PATH names (see find_records); collect every check.

    upstream: also audit the records that produced this record's inputs (the training
    run behind an evaluated model, the build behind a base model), transitively.
    """
    from tqdm.auto import tqdm

    auditor = Auditor(root, replay, max_replay_params, on_check)
    queue = find_records(path, auditor.root)
    report = AuditReport(str(path))
    seen: set[Path] = set()
    bar = tqdm(total=len(queue), desc="audit", unit="record", disable=not progress or len(queue) < 2)
    while queue:
        prov = queue.pop(0)
        if prov in seen:
            continue
        seen.add(prov)
        report.records.append(display_path(prov))
        if on_record:
            on_record(prov)
        report.checks += auditor.audit_record(prov)
        bar.update(1)
        if upstream:
            rec = _read_record(prov) or {}
            base = auditor.root or infer_root(prov, rec) or Path.cwd()
            for p in rec.get("inputs") or {}:
                up = producer_of(_abs(p if Path(p).is_absolute() else base / p), auditor.root)
                if up is not None and up not in seen and up not in queue:
                    queue.append(up)
                    bar.total += 1
    bar.close()
    return report

"""The checks of one provenance record (see esopt.provenance.audit for the list)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from esopt.config import ConfigError, config_sha256, load_config
from esopt.io import sha256_file
from esopt.provenance import jobs
from esopt.provenance.find import (
    AuditError,
    PublishedTree,
    _abs,
    _model_dir_of_build,
    _read_record,
    display_path,
    flag_value,
    infer_root,
    is_provenance_file,
)
from esopt.provenance.published import not_published

DEFAULT_MAX_REPLAY_PARAMS = 50_000_000
REPLAY_MODES = ("auto", "always", "never")
REQUIRED_KEYS = ("command", "config", "config_sha256", "inputs", "outputs")
SYMBOL = {"ok": "✓", "fail": "✗", "warn": "!", "skip": "-", "note": "·"}


@dataclass
class Check:
    name: str  # record, config-hash, config-file, input, output, ...
    target: str  # the path the check is about, as the record names it
    status: str  # ok | fail | warn (passes; fails under --strict) | skip | note
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

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.status == "warn"]

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


def _run_horizon(rec: dict[str, Any]) -> int | None:
    argv, wc = rec.get("argv") or [], rec.get("wildcards") or {}
    for h in (flag_value(argv, "--horizon"), wc.get("horizon") if isinstance(wc, dict) else None):
        try:
            return int(h)
        except (TypeError, ValueError):
            continue
    return None


def depends_on(rec: dict[str, Any]) -> tuple[str, Callable[[dict[str, Any]], Any]] | None:
    """The config sections a result depends on (esopt.provenance.jobs, the map the rules'
    params come from): (what, view) where view(config) is those sections, or None (not a
    pipeline command: the whole config counts). A config the view cannot read (a section
    missing) shows as a message in place of the sections."""
    if rec.get("command") not in jobs.JOBS:
        return None

    def view(c: dict[str, Any]) -> Any:
        try:
            return jobs.record_settings(rec, c)
        except (ConfigError, KeyError, TypeError, ValueError, AttributeError) as e:
            return f"(not in the config: {str(e).splitlines()[0]})"

    keys = jobs.record_keys(rec)
    shown = ", ".join(k if v is True else f"{k} {v}" for k, v in keys.items() if v not in (None, False))
    return jobs.JOBS[rec["command"]].what + (f"; for {shown}" if shown else ""), view


def is_es_agent(rec: dict[str, Any]) -> bool:
    """A train-agent record of a method that trains the weights with ES (a replayable history)."""
    return rec.get("command") == "train-agent" and any(Path(o).name == "history.json" for o in rec.get("outputs") or {})


@lru_cache(maxsize=64)
def _code_files(cmd: str, benchmarks: tuple[str, ...], top: Path) -> frozenset[str] | None:
    return None if (f := _code_files_of({"command": cmd}, top, benchmarks)) is None else frozenset(f)


def _code_files_of(rec: dict[str, Any], top: Path, benchmarks: tuple[str, ...] = ()) -> set[str] | None:
    """The files (from the repository root) that the record's command runs: its imports and
    its agent benchmarks' packages, as the pipeline lists them for the job
    (esopt.provenance.jobs.code_files), or a report's notebook and its imports; None for a
    command the map does not know (all code counts)."""
    cmd = str(rec.get("command") or "")
    try:
        if cmd.startswith("notebook:"):
            nb = top / "notebooks" / f"{cmd.split(':', 1)[1]}.ipynb"
            if not nb.is_file():
                return None
            files = [nb, *map(Path, jobs.code_files(str(nb)))]
        elif cmd in jobs.JOBS or cmd in ("audit", "replay"):
            files = list(map(Path, jobs.code_files(cmd, benchmarks)))
        else:
            return None
    except (OSError, ValueError, SyntaxError):
        return None
    out = set()
    for f in files:
        try:
            out.add(str(f.resolve().relative_to(top.resolve())))
        except ValueError:
            continue
    return out


def _short(h: str | None) -> str:
    return (h or "none")[:12]


# ---------------------------------------------------------------- the auditor


class RecordChecks:
    """Everything the Auditor checks of a record but its weights (esopt.provenance.weights)."""

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
        self._checkout = None  # esopt.provenance.code_state.Checkout, made at the first code check

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
        # a published record (esopt.provenance.published): its paths map to the published copies,
        # else to the working directory the tree belongs to (the config file, a model built there)
        tree = PublishedTree.containing(prov)
        base = tree.root if tree is not None else self.root or infer_root(prov, rec) or Path.cwd()
        res = tree.local if tree is not None else lambda p: _abs(p if Path(p).is_absolute() else base / p)
        emit(Check("record", rp, "ok", f"{rec['command']}, paths relative to {base}"
                   + (f", published in {display_path(tree.dir)}" if tree is not None else ""), rp))

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
        rerun_upstream: dict[str, Check] = {}  # published: an upstream record another sitting's rerun replaced
        absent: dict[str, int] = {}  # published: inputs not published and not here, by why
        for p, want in rec["inputs"].items():
            c = self._hash_check("input", p, res(p), want, rp)
            if c.status == "fail" and cp and config_ok and res(p) == res(cp) and res(p).is_file():
                c = Check("input", p, "note", c.detail + ": the file changed, but not in the sections this result "
                          "depends on (see config-file)", rp)
            elif c.status == "fail" and tree is not None and not res(p).exists():
                absent[not_published(p)] = absent.get(not_published(p), 0) + 1
                continue
            elif c.status == "fail" and tree is not None and is_provenance_file(Path(p)) and tree.rel(p) in tree.files:
                chain = self._chain_check(rec, p, res, rp)
                if chain is not None and chain.status == "ok":
                    rerun_upstream[p] = chain
                    c = Check("input", p, "note", c.detail + ": the published record is another run of the same job "
                              "(a later sitting); the files this result used are the ones it produced (chain)", rp)
            emit(c)
        if absent:
            emit(Check("input", "(not published)", "skip", f"{sum(absent.values())} input(s) neither published nor "
                       "here: " + ", ".join(f"{why} {n}" for why, n in sorted(absent.items()))
                       + " (make them with snakemake to check them)", rp))
        for p, want in rec["inputs"].items():
            if p in rerun_upstream:
                emit(rerun_upstream[p])
            elif is_provenance_file(Path(p)) and res(p).is_file() and self.sha256(res(p)) == want:
                c = self._chain_check(rec, p, res, rp)
                if c is not None:
                    emit(c)
        left_out: dict[str, int] = {}  # published: outputs deliberately not published, by why
        for p, want in rec["outputs"].items():
            if tree is not None and tree.rel(p) not in tree.files and not res(p).exists():
                why = not_published(p)
                left_out[why] = left_out.get(why, 0) + 1
                continue
            emit(self._hash_check("output", p, res(p), want, rp))
        if left_out:
            emit(Check("output", "(not published)", "note", f"{sum(left_out.values())} output(s) not published: "
                       + ", ".join(f"{why} {n}" for why, n in sorted(left_out.items())), rp))
        model_dir = _model_dir_of_build(rec, res)
        if tree is not None and model_dir is not None and not model_dir.is_dir():
            model_dir = None  # a published model build: its weights are not published (noted above)
        if model_dir is not None:
            outs = {res(o): h for o, h in rec["outputs"].items()}
            for f, want in rec["weights_sha256"].items():
                shown = str(Path(flag_value(rec.get("argv") or [], "--out") or model_dir) / f)
                if model_dir / f in outs:  # re-hashed as an output above; the record must agree with itself
                    if outs[model_dir / f] != want:
                        emit(Check("model-weights", shown, "fail", f"the record disagrees with itself: outputs "
                                   f"{_short(outs[model_dir / f])}, weights_sha256 {_short(want)}", rp))
                    continue
                emit(self._hash_check("model-weights", shown, model_dir / f, want, rp))

        # derived values: recomputed from what they derive from (esopt.provenance.derived)
        try:
            derived = self.derived_checks(rec, res, rp)
        except Exception as e:  # noqa: BLE001 -- a result too broken to recompute fails; the audit goes on
            derived = [Check("derived", rp, "fail", f"cannot be recomputed: {type(e).__name__}: {e}", rp)]
        for c in derived:
            emit(c)
        if tree is not None and rec["command"] == "evaluate" and not any(c.name == "summary" for c in derived):
            emit(Check("summary", rp, "note", "trajectories are not published: the summary is not recomputed here "
                       "(audit the results/ tree of the sitting that made it)", rp))

        # weights: ES history, replay, saved model
        if rec["command"] in ("train-es", "train-rl") or (rec["command"] == "search-heuristics" and rec.get("es")) \
                or is_es_agent(rec):
            lacking = [k for k in ("base_weights_sha256", "final_weights_sha256") if not isinstance(rec.get(k), str)]
            if lacking:
                emit(Check("history" if rec["command"] == "train-es" else "saved-weights", rp, "fail",
                           f"a {rec['command']} record without {' and '.join(lacking)}: nothing to check the weights against", rp))
            else:
                for c in self.weight_checks(rec, res, rp, published=tree is not None):
                    emit(c)

        emit(self._code_check(rec, rp))
        return out

    def _code_check(self, rec: dict[str, Any], rp: str) -> Check:
        """code: the tree the record was made from against the checkout now, file by file
        (esopt.provenance.code_state). A difference in a file the command runs (its
        imports, as the pipeline lists them for the job) or one the audit cannot rule out
        is a warning; differences only elsewhere (docs, tests, other commands) are listed."""
        from esopt.provenance.code_state import Checkout

        g = rec.get("git") or {}
        if not g.get("commit"):
            return Check("code", "git", "note", "the record names no commit", rp)
        if self._checkout is None:
            self._checkout = Checkout()
        co = self._checkout
        made = f"made by {_short(g['commit'])}{' (dirty tree)' if g.get('dirty') else ''}"
        diff = co.differences(g)
        if co.top is None:
            return Check("code", "git", "note", f"{made}; {diff.unknown}", rp)
        now = "the same commit" if g["commit"] == co.head else f"now {_short(co.head)}"
        runs = _code_files(str(rec.get("command")), tuple(jobs.record_benchmarks(rec)), co.top)
        mine = [f for f in diff.files if runs is None or f in runs]
        other = [f for f in diff.files if f not in mine]
        listed = lambda fs: ", ".join(fs[:5]) + (f" (+{len(fs) - 5} more)" if len(fs) > 5 else "")
        what = "the code it runs" if runs is not None else "the checkout"
        parts = []
        if mine:
            parts.append(f"{len(mine)} file(s) of {what} differ from the record's tree: {listed(mine)}")
        if other:
            parts.append(f"{len(other)} other file(s) differ: {listed(other)}")
        if diff.unknown:
            parts.append(diff.unknown)
        if not diff.files and not diff.unknown:
            parts.append("no file differs" + (" (the same changes as then)" if g.get("dirty") else ""))
        status = "warn" if mine or diff.unknown else "ok"
        return Check("code", "git", status, f"{made}, {now}: " + "; ".join(parts), rp)

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
        up_tree = PublishedTree.containing(up_path)
        up_base = up_tree.root if up_tree is not None else self.root or infer_root(up_path, up) or Path.cwd()
        up_res = up_tree.local if up_tree is not None else lambda q: _abs(q if Path(q).is_absolute() else up_base / q)
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

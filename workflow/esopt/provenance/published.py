"""Published results: a config's compact outputs, committed into the repository.

A long grid outlives one sitting, and results/ does not (a fresh clone each time).
`esopt publish` copies the compact outputs of every finished job of a config from
results/ into published/NAME/ (config `published.dir` and `name`), at the paths they had
under results/, with a MANIFEST.json; the Snakemake rules then read a job's published
copy instead of running it, while the job's settings are what the config asks for, and
`esopt audit` checks published trees.

Compact: provenance records, evaluations, ES histories, metrics, budgets, check and
memory results, report tables, and a model build's files up to `published.model_mib` (the
tiny bases: a warm start is not bit-reproducible across CPU types, so a fresh clone on
another machine restores the grid's base, `restore_model`, instead of building another).
Never trained weights (an ES run's are replayed from its base model and history.json; an
RL run's cannot be), optimizer checkpoints of finished runs, trajectories, figures or notebooks.
A run a sitting stopped before its end is published as a partial run: an ES run's resume
history (partial/RUN/history.json, a few kB a generation), an RL run's resume checkpoint
(partial/RUN/checkpoint.pt: weights and optimizer state, which an RL run cannot rebuild, up
to `published.checkpoint_mib`); train-es or train-rl on a fresh clone continues it
(`partial_run`), and publishing the finished run removes it. Staleness follows the
rerun map (esopt.provenance.jobs.settings, what the rules pass as params): a published
job is used only while its settings, and
those of every upstream job whose record it lists among its inputs, equal the config's.
No torch here: the Snakefile imports it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esopt.config import named_model
from esopt.io import atomic_path, sha256_file, write_json_atomic
from esopt.provenance import jobs
from esopt.provenance.find import (
    FORMAT,
    MANIFEST,
    PARTIAL_FILES,
    PublishedTree,
    _abs,
    _read_record,
    display_path,
    flag_value,
    infer_root,
    is_provenance_file,
    records_under,
)
from esopt.spec.sudoku import EsRun

REQUIRED = ("command", "config", "config_sha256", "inputs", "outputs", "end")  # a record is written last: complete
# compact files of training and search runs, by name, and the kind publish counts them as
COMPACT_NAMES = {"history.json": "history", "metrics.jsonl": "metrics", "budget.json": "budget",
                 "result.json": "result", "skill.md": "skill", "skill_history.jsonl": "skill history"}
RESULT_KINDS = {"evaluate": "evaluation", "check-models": "check", "memory": "memory"}
WEIGHTS_NOTE = {"train-es": "ES weights are not published: the replay rebuilds them from the base model and history.json",
                "train-rl": "RL weights are not published, and an RL run cannot be replayed: its record, metrics and "
                            "budget are checked, its trained weights are not"}


def published_dir(config: dict[str, Any], workdir: str | os.PathLike = ".") -> Path:
    """published/NAME/ of a validated config (config `published.dir`), under the working directory."""
    return Path(workdir) / config["published"]["dir"] / config["name"]


def not_published(path: str | os.PathLike) -> str:
    """Why an output a record lists is left out of a published tree."""
    p = Path(path)
    if "models" in p.parts[:-1]:
        return "a model build's files over published.model_mib (build_model makes them again)"
    if "model" in p.parts[:-1] or p.suffix in (".safetensors", ".bin"):
        return "model weights"
    if "trajectories" in p.parts[:-1] or p.name.endswith(".trajectories.jsonl"):
        return "trajectories"
    if p.name == "checkpoint.pt":
        return "optimizer checkpoint"
    if p.suffix == ".png":
        return "figure (redrawn by the report rules)"
    if p.suffix == ".ipynb":
        return "executed notebook"
    return "not a compact output"


def compact_kind(rec: dict[str, Any], output: str | os.PathLike) -> str | None:
    """The kind of a recorded output that is published (evaluation, history, ...), or None."""
    p, cmd = Path(output), str(rec.get("command") or "")
    if is_provenance_file(p):
        return "record"
    if cmd == "build-model" and isinstance(rec.get("weights_sha256"), dict):
        return "model"  # a model build's files (published up to published.model_mib)
    if "model" in p.parts[:-1] or "trajectories" in p.parts[:-1]:
        return None
    if cmd in RESULT_KINDS and p.suffix == ".json" and not p.name.endswith(".trajectories.jsonl"):
        return RESULT_KINDS[cmd]
    if cmd.startswith("notebook:") and p.suffix == ".csv":
        return "table"
    return COMPACT_NAMES.get(p.name)


def stale_settings(rec: dict[str, Any], config: dict[str, Any]) -> str | None:
    """Why a record's job would run again under `config` (its settings differ, or the config
    has no such job), or None when its settings are the config's. Reports (no config) are
    never stale by settings: their inputs are."""
    if rec.get("command") not in jobs.JOBS:
        return None
    try:
        then = jobs.record_settings(rec, rec["config"])
        now = jobs.record_settings(rec, config)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return f"not a job of this config ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    if then != now:
        diff = _differing_keys(then, now)
        return "settings differ at " + ", ".join(diff[:3]) + (f" (+{len(diff) - 3} more)" if len(diff) > 3 else "")
    return None


def _differing_keys(a: Any, b: Any, path: str = "") -> list[str]:
    """The dotted keys where two settings differ (the audit's config-file check shows the values)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [k for key in sorted(set(a) | set(b), key=str)
                for k in (_differing_keys(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))
                          if key in a and key in b else [f"{path}.{key}" if path else str(key)])]
    return [] if a == b else [path or "(settings)"]


def git_commit_exists(commit: str, cwd: str | os.PathLike | None = None) -> bool:
    """Whether the repository at cwd has this commit (`git cat-file -e COMMIT^{commit}`)."""
    try:
        return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=cwd,
                              capture_output=True).returncode == 0
    except OSError:
        return False


def _head(cwd: str | os.PathLike | None = None) -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                              check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def stale(tree: PublishedTree, record_rel: str, config: dict[str, Any],
          cache: dict[str, str | None] | None = None, _seen: tuple[str, ...] = ()) -> str | None:
    """Why the published job whose record is `record_rel` would run again under config (its
    settings, or an upstream job's whose record it lists as an input, differ; an upstream
    record that is not published), or None when it is fresh. `cache`: answers so far."""
    cache = {} if cache is None else cache
    if record_rel in cache:
        return cache[record_rel]
    rec = _read_record(tree.dir / record_rel)
    why = "its record is not readable" if rec is None else stale_settings(rec, config)
    if why is None and rec is not None:
        for p in rec.get("inputs") or {}:
            up = tree.rel(p)
            if up is None or not is_provenance_file(Path(p)) or up in _seen:
                continue
            if up not in tree.files:
                why = f"its upstream record {p} is not published"
            elif (w := stale(tree, up, config, cache, (*_seen, record_rel))) is not None:
                why = f"upstream {p}: {w}"
            elif not chain_agrees(rec, _read_record(tree.dir / up) or {}):
                why = f"made from another run of {p} than the published one"
            if why:
                break
    cache[record_rel] = why
    return why


def fresh_copy(tree: PublishedTree, results_path: str, config: dict[str, Any],
               cache: dict[str, str | None] | None = None) -> Path | None:
    """The published copy of a results/ file, when it is intact (its manifest hash) and its
    job is fresh for config; else None (the job runs as usual)."""
    rel = tree.rel(results_path)
    entry = tree.files.get(rel) if rel is not None else None
    if entry is None:
        return None
    f = tree.dir / rel
    if not f.is_file() or sha256_file(f) != entry["sha256"] or stale(tree, entry["record"], config, cache) is not None:
        return None
    return f


def _published_tree_for(config: dict[str, Any], out: str | os.PathLike,
                        workdir: str | os.PathLike) -> tuple[PublishedTree, Path] | None:
    """The config's published tree and `out` relative to the working directory, when the
    config reads published results, the tree exists and `out` lies under workdir."""
    tree = PublishedTree.open(published_dir(config, workdir)) if config["published"]["use"] else None
    o = Path(out)
    if o.is_absolute():
        try:
            o = o.relative_to(_abs(workdir))
        except ValueError:
            return None
    return (tree, o) if tree is not None else None


def partial_run(config: dict[str, Any], out: str | os.PathLike, name: str, workdir: str | os.PathLike = ".") -> Path | None:
    """The published file `name` (history.json: an ES run; checkpoint.pt: an RL run) of the
    unfinished run whose output directory is `out` (a results/ path), when the config reads
    published results and the copy hashes as its manifest lists; else None. Whether it is
    this run's (settings, base weights, episodes, seeds) is the trainer's check when it
    continues it (esopt.es.trainer.ESTrainer.resume, esopt.rl.trainer.RLTrainer.resume)."""
    if name not in PARTIAL_FILES:
        raise ValueError(f"{name!r}: a partial run's file is one of {PARTIAL_FILES}")
    if (found := _published_tree_for(config, out, workdir)) is None:
        return None
    tree, o = found
    run = tree.rel(o)
    entry = tree.partials.get(run) if run is not None else None
    if entry is None or entry.get("file", PARTIAL_FILES[0]) != name:
        return None
    f = tree.partial_file(run)
    return Path(os.path.relpath(f, _abs(workdir))) if f.is_file() and sha256_file(f) == entry["sha256"] else None


def checkpoint_summary(path: str | os.PathLike) -> tuple[dict[str, Any], int] | None:
    """(run record, steps done) of an RL resume checkpoint (esopt.rl.trainer.RLTrainer.state),
    or None when it is not one. Loads it with torch (tensors and plain containers only)."""
    import torch

    try:
        st = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - any unreadable file is "not a checkpoint"
        return None
    if not isinstance(st, dict) or not isinstance(st.get("run"), dict) or not isinstance(st.get("step"), int):
        return None
    return st["run"], st["step"]


def restore_model(config: dict[str, Any], out: str | os.PathLike, workdir: str | os.PathLike = ".") -> dict[str, Any] | None:
    """Restore the published build of the model directory `out` (a results/ path) when the
    config reads published results, the build is fresh for it (its settings) and every file
    it made is published intact: the files are copied to `out`, each atomically, its record
    last (a record marks a finished job). Returns that record, or None (build as usual).
    Why: a warm start is bit-reproducible on one CPU type only, and a grid run in pieces
    needs one base in every sitting, whatever machine a sitting gets."""
    if (found := _published_tree_for(config, out, workdir)) is None:
        return None
    tree, o = found
    rel = tree.rel(o / "provenance.json")
    if rel is None or rel not in tree.files or stale(tree, rel, config) is not None:
        return None
    rec = _read_record(tree.dir / rel) or {}
    made = {k: v for k, v in (rec.get("outputs") or {}).items() if compact_kind(rec, k) == "model"}
    if not made or sha256_file(tree.dir / rel) != tree.files[rel]["sha256"]:
        return None
    copies = []
    for key, sha in made.items():
        src_rel = tree.rel(key)
        entry = tree.files.get(src_rel) if src_rel is not None else None
        src = tree.dir / src_rel if src_rel is not None else None
        if entry is None or entry["sha256"] != sha or not src.is_file() or sha256_file(src) != sha:
            return None  # a build published without its files, or one of them changed
        copies.append((src, Path(workdir) / o / Path(src_rel).relative_to(Path(rel).parent)))
    for src, dst in [*copies, (tree.dir / rel, Path(workdir) / o / "provenance.json")]:
        with atomic_path(dst) as tmp:
            shutil.copyfile(src, tmp)
    return rec


class PipelineInputs:
    """What the report rules read (workflow/rules/common.smk: `result(path)`): a results/
    path, or its published copy when that is fresh for the config (config `published`)."""

    def __init__(self, config: dict[str, Any], workdir: str | os.PathLike = "."):
        self.config = config
        d = published_dir(config, workdir)
        self.tree = PublishedTree.open(d) if config["published"]["use"] else None
        self.shown = Path(config["published"]["dir"]) / config["name"]
        self._stale: dict[str, str | None] = {}

    def __call__(self, results_path: str) -> str:
        if self.tree is None:
            return results_path
        f = fresh_copy(self.tree, results_path, self.config, self._stale)
        if f is None:
            return results_path
        return str(self.shown / self.tree.rel(results_path))


# ---------------------------------------------------------------- esopt publish


@dataclass
class PublishReport:
    to: Path
    published: Counter = field(default_factory=Counter)  # kind -> files copied (new or replacing a stale copy)
    unchanged: int = 0  # files already published, identical
    kept: list[str] = field(default_factory=list)  # records of jobs whose fresh published copy stays
    stale: list[str] = field(default_factory=list)  # published records the config would run again
    skipped: dict[str, list[str]] = field(default_factory=dict)  # reason -> records
    partial: dict[str, str] = field(default_factory=dict)  # unfinished runs published now -> "N generations" / "N steps"
    finished: list[str] = field(default_factory=list)  # partial runs removed: their finished run is published
    models_left_out: list[str] = field(default_factory=list)  # model builds over published.model_mib

    def skip(self, why: str, rec: str) -> None:
        self.skipped.setdefault(why, []).append(rec)

    def lines(self) -> list[str]:
        n = sum(self.published.values())
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.published.items()))
        out = [f"published {n} file(s) to {display_path(self.to)}" + (f": {kinds}" if kinds else "")
               + f"; {self.unchanged} already there, unchanged"]
        if self.kept:
            out.append(f"kept {len(self.kept)} published job(s) whose copy in results/ is another run of the same "
                       f"settings (the first finished copy stays): {', '.join(self.kept[:3])}"
                       + (" ..." if len(self.kept) > 3 else ""))
        if self.stale:
            out.append(f"{len(self.stale)} published job(s) are stale for this config (the pipeline does not use "
                       f"them; publishing their rerun replaces them): {', '.join(self.stale[:3])}"
                       + (" ..." if len(self.stale) > 3 else ""))
        if self.partial:
            out.append(f"published {len(self.partial)} unfinished run(s) as partial runs (an ES run's history, "
                       "an RL run's checkpoint; train-es and train-rl continue them in a later sitting): "
                       + ", ".join(f"{r} ({done})" for r, done in sorted(self.partial.items())[:3])
                       + (" ..." if len(self.partial) > 3 else ""))
        if self.finished:
            out.append(f"removed {len(self.finished)} partial run(s) whose finished run is published: "
                       f"{', '.join(self.finished[:3])}" + (" ..." if len(self.finished) > 3 else ""))
        if self.models_left_out:
            out.append(f"published the record only of {len(self.models_left_out)} model build(s) over "
                       f"published.model_mib (a fresh clone builds them again): {', '.join(self.models_left_out[:3])}"
                       + (" ..." if len(self.models_left_out) > 3 else ""))
        for why, recs in sorted(self.skipped.items()):
            out.append(f"not published, {why}: {len(recs)} record(s): {', '.join(recs[:3])}"
                       + (" ..." if len(recs) > 3 else ""))
        return out


@dataclass
class _Job:
    prov: Path  # the record in results/
    rel: str  # the record's path under results/
    rec: dict[str, Any]
    files: dict[str, tuple[Path, str, str]]  # rel -> (source, sha256, kind)
    upstream: list[str]  # the paths under results/ of the upstream records among its inputs


def _candidate(prov: Path, results: Path, config: dict[str, Any], report: PublishReport) -> _Job | None:
    """A finished job of this config in results/, with the compact files it publishes."""
    shown = prov.relative_to(results).as_posix()
    rec = _read_record(prov)
    if rec is None or any(k not in rec for k in REQUIRED) or not isinstance(rec["outputs"], dict):
        report.skip("unfinished or unreadable record", shown)
        return None
    cmd = str(rec["command"])
    report_job = cmd.startswith("notebook:")
    if cmd not in jobs.JOBS and not report_job:
        report.skip("not a pipeline job", shown)
        return None
    if not report_job and (rec["config"] or {}).get("name") != config["name"]:
        report.skip(f"another config than {config['name']!r}", shown)
        return None
    if stale_settings(rec, config) is not None:
        report.skip("stale (the config asks for other settings)", shown)
        return None
    root = infer_root(prov, rec) or Path.cwd()
    outputs: dict[str, tuple[Path, str, str]] = {}  # rel -> (source, recorded sha256, kind)
    for key, want in rec["outputs"].items():
        src = _abs(key if Path(key).is_absolute() else root / key)
        try:
            rel = src.relative_to(results).as_posix()
        except ValueError:
            continue
        kind = compact_kind(rec, key)
        if kind is not None:
            outputs[rel] = (src, want, kind)
    model = [rel for rel, (src, _, kind) in outputs.items() if kind == "model"]
    mib = sum(outputs[rel][0].stat().st_size for rel in model if outputs[rel][0].is_file()) / 2**20
    if mib > config["published"]["model_mib"]:  # its record is published, its files are not (nor hashed)
        report.models_left_out.append(f"{shown} ({mib:.0f} MiB)")
        for rel in model:
            del outputs[rel]
    files: dict[str, tuple[Path, str, str]] = {}
    for rel, (src, want, kind) in outputs.items():
        if not src.is_file() or sha256_file(src) != want:
            report.skip("an output differs from its record", shown)
            return None
        files[rel] = (src, want, kind)
    files[shown] = (prov, sha256_file(prov), "record")
    upstream = []
    for p in rec["inputs"]:
        q = _abs(p if Path(p).is_absolute() else root / p)
        if is_provenance_file(q) and results in q.parents:
            upstream.append(q.relative_to(results).as_posix())
    return _Job(prov, shown, rec, files, upstream)


def chain_agrees(rec: dict[str, Any], up: dict[str, Any]) -> bool:
    """The files an upstream record produced have the hashes this record took of them as
    inputs (both as recorded, relative to the pipeline's working directory): a rerun of the
    upstream job in another sitting made the same model, or the record was made from it."""
    made = {**(up.get("outputs") or {}), **_weights_of(up)}
    mine = rec.get("inputs") or {}
    return all(made[f] == mine[f] for f in made.keys() & mine.keys())


def _weights_of(rec: dict[str, Any]) -> dict[str, str]:
    """build-model records that list only weights.sha256.json: their weight files, by recorded path."""
    if rec.get("command") != "build-model" or not isinstance(rec.get("weights_sha256"), dict):
        return {}
    out = flag_value([str(a) for a in rec.get("argv") or []], "--out")
    return {str(Path(out) / f): h for f, h in rec["weights_sha256"].items()} if out else {}


def publish(config: dict[str, Any], config_path: str | os.PathLike, results: str | os.PathLike = "results",
            to: str | os.PathLike | None = None, argv: list[str] | None = None) -> PublishReport:
    """Copy the compact outputs of every finished, fresh job of `config` from results/ into
    `to` (default published/NAME/), atomically, then write its MANIFEST.json. Idempotent:
    files already published unchanged are left alone; a job whose published copy is fresh
    keeps it (a rerun in a later sitting differs only in timings); a stale copy is replaced.
    A job is published once every upstream record it lists is published or published with it."""
    results = _abs(results)
    if not results.is_dir():
        raise FileNotFoundError(f"--results {results}: no such directory")
    to = _abs(to) if to is not None else _abs(published_dir(config))
    report = PublishReport(to)
    tree = PublishedTree.open(to) or PublishedTree(to, {"format": FORMAT, "config": config["name"], "files": {}})
    root = Path.cwd()
    tree.manifest["root"] = os.path.relpath(root, to)
    tree.manifest["results"] = os.path.relpath(results, root)
    candidates = [j for p in records_under(results) if (j := _candidate(p, results, config, report)) is not None]
    # reports last: their inputs are the jobs' files, published first
    candidates.sort(key=lambda j: str(j.rec["command"]).startswith("notebook:"))
    by_rel = {j.rel: j for j in candidates}
    changed: dict[str, tuple[Path, dict[str, Any]]] = {}  # rel -> (source, manifest entry)
    known: dict[str, str | None] = {}  # staleness of published records, as found
    done: set[str] = set()

    def place(job: _Job, seen: tuple[str, ...] = ()) -> bool:
        """Publish a job after its upstream records; False when it cannot be."""
        if job.rel in done:
            return True
        for up_rel in job.upstream:
            if up_rel in by_rel and up_rel not in seen and not place(by_rel[up_rel], (*seen, job.rel)):
                report.skip("its upstream job is not published", job.rel)
                return False
            if up_rel not in tree.files and up_rel not in changed:
                report.skip("its upstream job is neither published nor publishable (unfinished, stale or "
                            "not in results/)", job.rel)
                return False
            up = _read_record(changed[up_rel][0] if up_rel in changed else tree.dir / up_rel) or {}
            if not chain_agrees(job.rec, up):
                report.skip("made from another run of its upstream job than the published one (remove the "
                            "published copy to replace both)", job.rel)
                return False
        existing = tree.files.get(job.rel)
        # a job's fresh published copy stays; a report's is replaced by a newer table (the grid grew)
        report_job = str(job.rec["command"]).startswith("notebook:")
        intact = all((tree.dir / r).is_file() and sha256_file(tree.dir / r) == e["sha256"]
                     for r, e in tree.files.items() if e.get("record") == job.rel)
        same_run = existing is not None and existing["sha256"] == job.files[job.rel][1]
        if existing is not None and not report_job and intact and stale(tree, job.rel, config, known) is None:
            if all(tree.files.get(r, {}).get("sha256") == sha for r, (_, sha, _) in job.files.items()):
                report.unchanged += len(job.files)
                done.add(job.rel)
                return True
            if not same_run:  # another run of the job: the published one stays
                report.kept.append(job.rel)
                done.add(job.rel)
                return True
            # the published record's own run, with files it did not publish then (a model build's)
        git = job.rec.get("git") or {}
        for rel, (src, sha, kind) in job.files.items():
            if intact and tree.files.get(rel, {}).get("sha256") == sha:
                report.unchanged += 1
                continue
            changed[rel] = (src, {"sha256": sha, "kind": kind, "record": job.rel, "commit": git.get("commit"),
                                  "dirty": git.get("dirty"), "config_sha256": job.rec["config_sha256"]})
            report.published[kind] += 1
        done.add(job.rel)
        return True

    for job in candidates:
        if job.rec["command"].startswith("notebook:"):
            # a report of this config: each input is a result published here (now or before)
            mine = Path(config["published"]["dir"]) / config["name"]
            outside = [q for q in job.rec["inputs"] if not Path(q).is_relative_to(mine)
                       and ((r := tree.rel(q)) is None or (r not in tree.files and r not in changed))]
            if outside:
                report.skip("a report whose inputs are not all this config's published results", job.rel)
                continue
        place(job)
    partial = _partial_runs(results, tree, config, changed, known, report)
    if changed or partial:
        head = _head(root)
        for rel, (src, entry) in sorted(changed.items()):
            with atomic_path(tree.dir / rel) as tmp:
                shutil.copyfile(src, tmp)
            tree.files[rel] = entry
        for run, (src, entry) in sorted(partial.items()):
            if src is not None:
                with atomic_path(tree.partial_file(run, entry.get("file"))) as tmp:
                    shutil.copyfile(src, tmp)
        gone = [tree.partial_file(run) for run, (_, entry) in partial.items() if entry is None]  # as listed now
        if partial:  # the kept entries, the new ones; the key only while a run is listed
            runs = {r: e for r, e in tree.partials.items() if r not in partial}
            runs |= {r: e | {"commit": head} for r, (_, e) in partial.items() if e is not None}
            tree.manifest["partial"] = dict(sorted(runs.items()))
            if not runs:
                del tree.manifest["partial"]
        tree.manifest.update(config_path=str(config_path), command=argv if argv is not None else sys.argv,
                             commit=head)
        tree.manifest["files"] = dict(sorted(tree.files.items()))
        write_json_atomic(tree.dir / MANIFEST, tree.manifest)
        for f in gone:  # after the manifest: a removed file is listed nowhere
            f.unlink(missing_ok=True)
            for d in f.parents:  # the run's empty directories, up to published/NAME/
                if d == tree.dir or not d.is_dir() or any(d.iterdir()):
                    break
                d.rmdir()
    now: dict[str, str | None] = {}
    report.stale = [r for r, e in tree.files.items() if e["kind"] == "record" and stale(tree, r, config, now)]
    return report


def _partial_runs(results: Path, tree: PublishedTree, config: dict[str, Any], changed: dict[str, Any],
                  known: dict[str, str | None], report: PublishReport) -> dict[str, tuple[Path | None, dict[str, Any] | None]]:
    """What publishing does to the partial runs: run -> (file to copy, its manifest entry);
    (None, None) removes a published partial run whose finished run is published fresh (now or
    before). An unfinished train-es run of this config is one whose resume directory holds a
    history of at least one generation (a killed run, or one a sitting stopped), at a path of
    this config's grid, without periodic evaluations (es.eval_every: a later sitting would not
    have them); an unfinished train-rl run, one whose resume directory holds a checkpoint of at
    least one step, at a path of the grid, no larger than published.checkpoint_mib. A
    published partial run is replaced by a longer history or checkpoint of the same run, or
    by another run's (the config changed), never by a shorter one of the same run."""

    def finished(run: str) -> bool:  # its record is published fresh, or is with this call
        rec = f"{run}/provenance.json"
        return rec in changed or (rec in tree.files and stale(tree, rec, config, known) is None)

    out: dict[str, tuple[Path | None, dict[str, Any] | None]] = {}
    for h in sorted(results.glob("**/.resume/history.json")):
        run_dir = h.parent.parent
        run, shown = run_dir.relative_to(results).as_posix(), h.relative_to(results).as_posix()
        if (run_dir / "provenance.json").is_file() or finished(run):
            continue  # finished (its record is written before the resume directory goes)
        hist = _read_record(h) or {}
        r = hist.get("run") or {}
        if not hist.get("generations") or r.get("benchmark") != "sudoku" or not isinstance(r.get("es"), dict):
            report.skip("not an unfinished train-es run with a generation done", shown)
            continue
        why = _not_an_es_run_of(config, run, r)
        if why:
            report.skip(why, shown)
            continue
        sha, n = sha256_file(h), len(hist["generations"])
        listed = tree.partials.get(run)
        if listed is not None and listed["sha256"] == sha:
            report.unchanged += 1
            continue
        if listed is not None and n <= listed["generations"] and (_read_record(tree.partial_file(run)) or {}).get("run") == r:
            report.skip("a history of the same run no longer than its published partial one", shown)
            continue
        out[run] = (h, {"sha256": sha, "generations": n})
        report.partial[run] = f"{n} generations"
    limit = config["published"]["checkpoint_mib"]
    for ck in sorted(results.glob("**/.resume/checkpoint.pt")):
        run_dir = ck.parent.parent
        run, shown = run_dir.relative_to(results).as_posix(), ck.relative_to(results).as_posix()
        if (run_dir / "provenance.json").is_file() or finished(run):
            continue
        if (why := _not_an_rl_run_of(config, run)) is not None:
            report.skip(why, shown)
            continue
        if (mib := ck.stat().st_size / 2**20) > limit:
            report.skip(f"an unfinished RL run whose checkpoint is over published.checkpoint_mib ({mib:.0f} > "
                        f"{limit:g} MiB): it continues only on the machine that holds it", shown)
            continue
        summary = checkpoint_summary(ck)
        if summary is None or summary[1] < 1:
            report.skip("not an RL resume checkpoint with a step done", shown)
            continue
        r, n = summary
        if (r.get("rl") or {}).get("steps") != config["rl"]["steps"]:
            report.skip("an unfinished RL run of other settings than the config's (rl.steps)", shown)
            continue
        sha = sha256_file(ck)
        listed = tree.partials.get(run)
        if listed is not None and listed["sha256"] == sha:
            report.unchanged += 1
            continue
        if listed is not None and n <= listed.get("steps", 0) and \
                (checkpoint_summary(tree.partial_file(run)) or ({}, 0))[0] == r:
            report.skip("a checkpoint of the same run no longer than its published partial one", shown)
            continue
        out[run] = (ck, {"file": "checkpoint.pt", "sha256": sha, "steps": n})
        report.partial[run] = f"{n} steps"
    for run in tree.partials:
        if finished(run):
            out[run] = (None, None)
            report.finished.append(run)
    return out


def _not_an_rl_run_of(config: dict[str, Any], run: str) -> str | None:
    """Why results/RUN is not a train-rl run this config's grid has (None when it is): its path
    (train/METHOD/MODEL/sudoku/hH_sS, METHOD one of rl.methods). The trainer checks the rest
    (every rl setting, the base's weight hash, the episodes' limits) when it continues it."""
    parts = run.split("/")
    ok = len(parts) == 5 and parts[0] == "train" and parts[3] == "sudoku" and re.fullmatch(r"h\d+_s\d+", parts[4])
    if not ok:
        return "not a train-rl run directory (train/METHOD/MODEL/sudoku/hH_sS)"
    if parts[1] not in ((config.get("rl") or {}).get("methods") or ()) or parts[2] != config["model"]["name"]:
        return "not a train-rl run of this config (its method or model)"
    return None


def _not_an_es_run_of(config: dict[str, Any], run: str, history_run: dict[str, Any]) -> str | None:
    """Why results/RUN is not a train-es run this config's grid has, that a later sitting
    continues (None when it is): its path (train/es[_VARIANT]/MODEL/sudoku/hH_gG_sS), its
    generations, es.eval_every. The trainer checks the rest when it continues it."""
    parts = run.split("/")
    m = re.fullmatch(r"h(\d+)_g(\d+)_s(\d+)", parts[-1]) if len(parts) == 5 else None
    if m is None or parts[0] != "train" or parts[3] != "sudoku" or not parts[1].startswith("es"):
        return "not a train-es run directory (train/es[_VARIANT]/MODEL/sudoku/hH_gG_sS)"
    variant = parts[1].removeprefix("es").removeprefix("_") or None
    try:
        if parts[2] != config["model"]["name"]:
            named_model(config, parts[2])
        es = EsRun.from_config(config, int(m[1]), variant)
    except (KeyError, ValueError, TypeError) as e:
        return f"not a train-es run of this config ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    if es.eval_every:
        return "an unfinished ES run with periodic evaluations (es.eval_every), which a later sitting would not have"
    if history_run["es"].get("generations") != es.generations:
        return "an unfinished ES run of other settings than the config's (es.generations)"
    return None

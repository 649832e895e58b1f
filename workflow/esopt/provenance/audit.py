"""Audit a result against its provenance.json: re-hash, re-check the config, recompute
what derives from something else, replay ES.

One provenance record (see esopt.provenance.record) is checked in this order:

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
outputs, es-settings, updates, rewards, episodes, metrics, budget, summary, result
              derived values recomputed from what they derive from, never trusted as
              recorded (esopt.provenance.derived)
history       ES: history.json agrees with the record on the base and final weight
              hashes, the method (--variant) and the horizon
ranks         ES over torch.distributed ranks: every replica's final weights hash
              to final_weights_sha256
base-weights  ES/RL: the base model (the --model input) loads to base_weights_sha256
weight-scale  ES under es.units weight_scale: the scale α and σ were multiplied by is
              the base's mean |θ|
replay        ES: the history replayed onto the base model gives final_weights_sha256,
              each update made again from the generation's raw rewards (train-rl: a note; RL runs cannot be replayed; search-heuristics --es: the
              writer's online updates)
saved-weights ES/RL: the saved DIR/model loads to final_weights_sha256 (not for
              search-heuristics, which keeps no model)
code          the tree the record was made from (commit and changed files) against the
              checkout now, file by file: a warning when a file the command runs differs
              (esopt.provenance.code_state)

upstream      --upstream: a warning for an input that no record lists as produced

A record in a published tree (published/NAME/, esopt.provenance.published) is audited with
its paths mapped through the tree's manifest; outputs never published are a note, inputs
neither published nor here a skip, weights it has no base model for skipped with a message.

After the records, auditing a directory adds:

coverage      a warning for every file under it that no record lists as an output (a
              result whose record was deleted, a file added to a run)
manifest      a published tree: every listed file hashes as MANIFEST.json lists it and is
              an output of its record (a file it does not list: a warning)
partial       a published tree with unfinished runs (published/NAME/partial/): each ES
              history or RL checkpoint hashes as listed, with the generations or steps
              listed (a warning names them: the grid is not complete)
commit        a published tree: every commit its results came from exists in git

A warning passes; `esopt audit --strict` fails on it (and on a skipped check).

Report records (command "notebook:NAME", written by the figure notebooks beside their
table as TABLE.provenance.json) hold no config: their inputs and outputs are re-hashed.

Weight checks and replays: esopt.provenance.weights. How recorded paths are resolved:
esopt.provenance.find.
"""


from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from esopt.io import sha256_file
from esopt.provenance.derived import DerivedChecks
from esopt.provenance.find import (
    MANIFEST,
    PublishedTree,
    _abs,
    _read_record,
    display_path,
    find_records,
    infer_root,
    is_provenance_file,
    produced_files,
    producer_of,
    records_under,
    resolver,
)
from esopt.provenance.published import checkpoint_summary, git_commit_exists
from esopt.provenance.record_checks import (
    DEFAULT_MAX_REPLAY_PARAMS,
    AuditReport,
    Check,
    RecordChecks,
)
from esopt.provenance.weights import WeightChecks

LOG_DIRS = ("logs",)  # rule logs: how a job ran, not a result (results/logs/, and papermill's
LOG_SUFFIXES = (".log",)  # executed notebooks, results/notebooks/*.ipynb, kept as report rules' logs)


class Auditor(RecordChecks, DerivedChecks, WeightChecks):
    """Checks records one by one (audit_record), keeping file hashes between them."""


def _is_log(rel: Path) -> bool:
    return (any(part in LOG_DIRS for part in rel.parts[:-1]) or rel.suffix in LOG_SUFFIXES
            or (rel.suffix == ".ipynb" and rel.parent.name == "notebooks"))


def _shown(files: list[str], n: int = 5) -> str:
    return ", ".join(files[:n]) + (f" (+{len(files) - n} more)" if len(files) > n else "")


def coverage_check(directory: Path, records: list[Path], root: Path | None,
                   trees: Sequence[PublishedTree]) -> Check:
    """coverage: every file under an audited directory is a record or an output one lists
    (hidden directories and rule logs aside), or a published tree's manifest or partial run
    (the manifest and partial checks'); the others are results nothing vouches for."""
    covered: set[Path] = {f for t in trees for f in (t.dir / MANIFEST, *map(t.partial_file, t.partials))}
    configs: set[Path] = set()
    for prov in records:
        rec = _read_record(prov) or {}
        covered.add(_abs(prov))
        tree = PublishedTree.containing(prov)
        if tree is not None:  # a published record: its outputs are the published copies (the manifest checks them)
            covered |= {tree.local(o) for o in rec.get("outputs") or {}}
            continue
        covered |= produced_files(prov, rec, root) if isinstance(rec.get("outputs"), dict) else set()
        if rec.get("config_path"):
            base = root or infer_root(prov, rec) or Path.cwd()
            cp = Path(rec["config_path"])
            configs.add(_abs(cp if cp.is_absolute() else base / cp))
    files, logs = [], 0
    for f in sorted(directory.rglob("*")):
        rel = f.relative_to(directory)
        if not f.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        if _is_log(rel):
            logs += 1
            continue
        if _abs(f) in covered or _abs(f) in configs or any(d in covered for d in _abs(f).parents):
            continue
        files.append(str(rel))
    shown = display_path(directory)
    aside = f" ({logs} rule logs not counted)" if logs else ""
    if files:
        orphans = [f for f in files if not is_provenance_file(Path(f))]
        return Check("coverage", shown, "warn", f"{len(files)} file(s) no record lists as an output{aside}: "
                     + _shown(orphans or files), shown)
    return Check("coverage", shown, "ok", f"every file is a record or an output one lists{aside}", shown)


def partial_check(tree: PublishedTree, shown: str) -> Check:
    """partial: the unfinished runs' files hash as listed and hold what is listed: an ES
    history its generations, an RL checkpoint its steps."""
    bad, runs = [], []
    for run, entry in sorted(tree.partials.items()):
        f = tree.partial_file(run)
        rl = f.name == "checkpoint.pt"
        unit, listed = ("steps", entry.get("steps")) if rl else ("generations", entry.get("generations"))
        if rl:
            summary = checkpoint_summary(f) if f.is_file() else None
            done = summary[1] if summary is not None else None
        else:
            hist = _read_record(f) if f.is_file() else None
            done = len(hist.get("generations") or []) if hist is not None else None
        if done is None:
            bad.append(f"{run}: {'checkpoint' if rl else 'history'} missing or unreadable")
        elif sha256_file(f) != entry.get("sha256"):
            bad.append(f"{run}: sha256 listed {str(entry.get('sha256'))[:12]}, now {sha256_file(f)[:12]}")
        elif done != listed:
            bad.append(f"{run}: {done} {unit}, {listed} listed")
        else:
            runs.append(f"{run} ({done} {unit})")
    if bad:
        return Check("partial", shown, "fail", f"{len(bad)} of {len(tree.partials)} partial run(s) differ from "
                     "MANIFEST.json: " + _shown(bad, 3), shown)
    return Check("partial", shown, "warn", f"{len(runs)} unfinished run(s) published as partial runs (a later "
                 "sitting continues them; the grid is not complete): " + _shown(runs, 3), shown)


def published_checks(tree: PublishedTree) -> list[Check]:
    """manifest, commit: a published tree's MANIFEST.json against its files (every listed file
    hashes as listed and is an output its record lists with that hash and config hash; a file
    it does not list warns), and every commit it names exists in this repository."""
    shown = display_path(tree.dir)
    out: list[Check] = []
    bad, unlisted = [], []
    for rel, entry in sorted(tree.files.items()):
        f = tree.dir / rel
        rec = _read_record(tree.dir / entry.get("record", ""))
        recorded = {tree.rel(o): h for o, h in ((rec or {}).get("outputs") or {}).items()}
        if not f.is_file():
            bad.append(f"{rel}: missing")
        elif sha256_file(f) != entry.get("sha256"):
            bad.append(f"{rel}: sha256 listed {str(entry.get('sha256'))[:12]}, now {sha256_file(f)[:12]}")
        elif rec is None:
            bad.append(f"{rel}: its record {entry.get('record')} is not readable")
        elif rel != entry["record"] and recorded.get(rel) != entry["sha256"]:
            bad.append(f"{rel}: its record {entry['record']} does not list it with this sha256")
        elif rec.get("config_sha256") != entry.get("config_sha256"):
            bad.append(f"{rel}: config sha256 listed {str(entry.get('config_sha256'))[:12]}, its record says "
                       f"{str(rec.get('config_sha256'))[:12]}")
    partial = {tree.partial_file(run).relative_to(tree.dir).as_posix(): run for run in tree.partials}
    for f in sorted(tree.dir.rglob("*")):
        rel = f.relative_to(tree.dir).as_posix()
        if f.is_file() and rel != MANIFEST and rel not in tree.files and rel not in partial \
                and not any(p.startswith(".") for p in f.parts):
            unlisted.append(rel)
    if bad:
        out.append(Check("manifest", shown, "fail", f"{len(bad)} of {len(tree.files)} listed file(s) differ from "
                         "MANIFEST.json: " + _shown(bad, 3), shown))
    else:
        out.append(Check("manifest", shown, "ok", f"{len(tree.files)} file(s) hash as MANIFEST.json lists them, each "
                         "an output of its record", shown))
    if unlisted:
        out.append(Check("manifest", shown, "warn", f"{len(unlisted)} file(s) MANIFEST.json does not list: "
                         + _shown(unlisted), shown))
    if partial:
        out.append(partial_check(tree, shown))
    commits = sorted({e["commit"] for e in tree.files.values() if e.get("commit")})
    # the repository the tree is committed to; outside one, the checkout this audit runs from
    repo = tree.dir if git_commit_exists("HEAD", tree.dir) else Path(__file__).parent
    missing = [c for c in commits if not git_commit_exists(c, repo)]
    if missing:
        out.append(Check("commit", shown, "fail", f"{len(missing)} commit(s) the results came from are not in the "
                         f"repository at {display_path(repo)} (git cat-file -e): " + _shown([c[:12] for c in missing]),
                         shown))
    elif commits:
        out.append(Check("commit", shown, "ok", f"the {len(commits)} commit(s) the results came from are in the "
                         f"repository at {display_path(repo)}", shown))
    return out


def unproduced_inputs(prov: Path, rec: dict, auditor: Auditor, produced: set[Path]) -> list[Check]:
    """--upstream: inputs beside results that no record lists as produced (a result whose
    record was deleted). The config file and inputs outside the record's tree are left out;
    `produced`: what the records audited produced (other records are looked up)."""
    if PublishedTree.containing(prov) is not None:
        return []  # a published record's inputs are checked against the manifest's tree (its input checks)
    base = auditor.root or infer_root(prov, rec) or Path.cwd()
    tops = {Path(o).parts[0] for o in rec.get("outputs") or {} if not Path(o).is_absolute() and len(Path(o).parts) > 1}
    cp = rec.get("config_path")
    out = []
    for p in rec.get("inputs") or {}:
        q = Path(p)
        if q.is_absolute() or p == cp or q.parts[0] not in tops or is_provenance_file(q):
            continue
        path = _abs(base / q)
        if path in produced or any(d in produced for d in path.parents):
            continue
        if path.is_file() and producer_of(path, auditor.root) is None:
            out.append(p)
    if not out:
        return []
    return [Check("upstream", _shown(out, 3), "warn", f"{len(out)} input(s) that no record lists as produced: "
                  "nothing vouches for them (a deleted record?)", display_path(prov))]


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
    target = _abs(path)
    queue = records_under(target) if target.is_dir() else []
    # a published tree of partial runs only (a first sitting that finished nothing) has no record
    bare = PublishedTree.open(target) if target.is_dir() and not queue else None
    if not queue and bare is None:
        queue = find_records(path, auditor.root)
    listed = list(queue)
    audited: list[tuple[Path, dict]] = []  # with --upstream: (record, its content), in audit order
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
            res = resolver(prov, rec, auditor.root)
            for p in rec.get("inputs") or {}:
                up = producer_of(res(p), auditor.root)
                if up is not None and up not in seen and up not in queue:
                    queue.append(up)
                    bar.total += 1
            audited.append((prov, rec))
    bar.close()
    if upstream:  # after every record, so that what they produced is known without a search
        produced = set().union(*(produced_files(p, r, auditor.root) for p, r in audited
                                 if isinstance(r.get("outputs"), dict)))
        for prov, rec in audited:
            for c in unproduced_inputs(prov, rec, auditor, produced):
                if on_record:
                    on_record(prov)
                auditor._emit(report.checks, c)
    if bare is not None or target.is_dir() and listed and all(target in p.parents for p in listed):
        if on_record:
            on_record(target)
        trees = {t.dir: t for p in listed if (t := PublishedTree.containing(p)) is not None}
        if bare is not None:
            trees[bare.dir] = bare
        for d, tree in sorted(trees.items()):
            if d == target or target in d.parents:
                for c in published_checks(tree):
                    auditor._emit(report.checks, c)
        auditor._emit(report.checks, coverage_check(target, listed, auditor.root, list(trees.values())))
    return report

"""Finding provenance records, and the paths they name.

Recorded paths are relative to the directory the command ran in (the pipeline's
working directory). They are resolved (1) as they are when absolute, else (2) against
`root` when given, else (3) against the directory that, joined with the recorded
output paths, gives the files beside the provenance file (so a results/ tree audits
from anywhere, and a moved tree still finds its own outputs), else (4) against the
current directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class AuditError(ValueError):
    """A user mistake (no such path, nothing to audit); not a failed check."""


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
    res = resolver(prov, rec, root)
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
    if up != path.parent and up.is_dir():
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



def flag_value(argv: list[str], flag: str) -> str | None:
    """The value given to a command-line flag in a record's argv (`--flag V` or `--flag=V`)."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _model_dir_of_build(rec: dict[str, Any], res: Callable[[str], Path]) -> Path | None:
    if rec.get("command") != "build-model" or not isinstance(rec.get("weights_sha256"), dict):
        return None
    out = flag_value(rec.get("argv") or [], "--out")
    if out:
        return res(out)
    for o in rec.get("outputs") or {}:
        if Path(o).name == "weights.sha256.json":
            return res(o).parent
    return None


# ---------------------------------------------------------------- published trees

MANIFEST = "MANIFEST.json"  # of a published tree (esopt.provenance.published, `esopt publish`)
# published/NAME/partial/RUN/FILE: unfinished runs a later sitting continues, an ES run's resume
# history (history.json) or an RL run's resume checkpoint (checkpoint.pt, up to published.checkpoint_mib)
PARTIAL = "partial"
PARTIAL_FILES = ("history.json", "checkpoint.pt")
FORMAT = "esopt-published/1"


@dataclass
class PublishedTree:
    """published/NAME/ and its manifest (esopt.provenance.published). Recorded paths (relative
    to the pipeline's working directory, e.g. results/eval/...) map to the published copy when
    there is one, else to the working directory the tree belongs to (`root`: the config file,
    a model built there)."""

    dir: Path
    manifest: dict[str, Any]

    @classmethod
    def open(cls, d: str | os.PathLike) -> PublishedTree | None:
        """The tree at d, or None where d has no manifest of this format."""
        m = _read_record(Path(d) / MANIFEST)
        return cls(_abs(d), m) if m is not None and m.get("format") == FORMAT else None

    @classmethod
    def containing(cls, path: str | os.PathLike) -> PublishedTree | None:
        """The published tree a file lies in (a manifest in one of its directories), or None."""
        for d in _abs(path).parents:
            if (d / MANIFEST).is_file():
                return cls.open(d)
        return None

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        return self.manifest.setdefault("files", {})

    @property
    def partials(self) -> dict[str, dict[str, Any]]:
        """Unfinished runs, by run directory under results/: their file's sha256 and the
        generations (ES) or steps (RL) it holds; the file is PARTIAL/RUN/history.json for an ES
        run, PARTIAL/RUN/checkpoint.pt for an RL run (entry "file"). Read only: `esopt publish`
        writes the manifest's "partial"."""
        return self.manifest.get("partial") or {}

    def partial_file(self, run: str, name: str | None = None) -> Path:
        """Where run's partial file is: `name`, else the one its entry lists (history.json by default)."""
        return self.dir / PARTIAL / run / (name or self.partials.get(run, {}).get("file", PARTIAL_FILES[0]))

    @property
    def root(self) -> Path:
        return _abs(self.dir / self.manifest.get("root", "../.."))

    @property
    def results(self) -> str:
        return self.manifest.get("results", "results")

    def _moved(self, recorded: Path) -> Path:
        """An absolute recorded path that is gone (the checkout that ran the job, e.g. a
        worktree of an earlier sitting: Snakemake records --configfile absolute): the
        longest tail of it that exists under `root`, else the path itself. The checks that
        read it compare its content with the record, so a wrong file fails, never passes."""
        parts = recorded.parts[1:]
        for i in range(len(parts)):
            here = self.root.joinpath(*parts[i:])
            if here.exists():
                return here
        return _abs(recorded)

    def rel(self, recorded: str | os.PathLike) -> str | None:
        """A recorded path's place in the tree (its path under results/), or None outside results/."""
        p = Path(recorded)
        if p.is_absolute():
            return None
        try:
            return p.relative_to(self.results).as_posix()
        except ValueError:
            return None

    def local(self, recorded: str | os.PathLike) -> Path:
        """Where a recorded path is read: its published copy (a file, or a model build's
        directory whose files are published), else under the working directory."""
        p = Path(recorded)
        if p.is_absolute():
            return _abs(p) if _abs(p).exists() else self._moved(p)
        rel = self.rel(p)
        if rel in self.files or (rel is not None and any(
                f.startswith(rel.rstrip("/") + "/") and e.get("kind") == "model" for f, e in self.files.items())):
            return self.dir / rel  # a published file, or a model build's directory whose files are published
        return _abs(self.root / p)


def resolver(prov: Path, rec: dict[str, Any], root: Path | None = None) -> Callable[[str], Path]:
    """Recorded path -> the file it names now, for the record at `prov`: through its published
    tree's manifest when it lies in one, else against `root`, else the inferred root, else the
    current directory (see the module doc)."""
    tree = PublishedTree.containing(prov)
    if tree is not None:
        return tree.local
    base = root or infer_root(prov, rec) or Path.cwd()
    return lambda p: _abs(p if Path(p).is_absolute() else base / p)

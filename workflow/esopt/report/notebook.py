"""Small helpers shared by the report notebooks in notebooks/ (run by papermill from
the pipeline root, or opened by a reader in Jupyter)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

_WILDCARDS = set("*?[")


def expand_paths(paths: str | os.PathLike | Iterable[str | os.PathLike] | None) -> list[str]:
    """A path, a glob pattern or a list of them -> a list of paths. Patterns expand to
    their sorted matches, leaving out provenance records (*.provenance.json); a plain
    path is kept as is (so a missing input fails where it is read, by name)."""
    if paths is None:
        return []
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if _WILDCARDS & set(p):
            out += sorted(m for m in glob.glob(p) if not m.endswith(".provenance.json"))
        else:
            out.append(p)
    return out


def chdir_to_inputs(*paths: str | os.PathLike | Iterable[str | os.PathLike] | None) -> Path:
    """Make the inputs' relative paths resolve: stay in the working directory if the
    first relative input (a path or a pattern) is found there (papermill --cwd at the
    pipeline root), else move to the nearest parent where it is (a notebook opened in
    Jupyter starts in its own folder). Returns the directory used."""
    first = None
    for group in paths:
        group = [group] if isinstance(group, (str, os.PathLike)) else list(group or [])
        first = next((os.fspath(p) for p in group if not os.path.isabs(p)), None)
        if first is not None:
            break
    here = Path.cwd()
    if first is None or glob.glob(first):
        return here
    for parent in here.parents:
        if glob.glob(os.path.join(glob.escape(str(parent)), first)):
            os.chdir(parent)
            return parent
    return here

"""Small helpers shared by the report notebooks in notebooks/ (run by papermill from
the pipeline root, or opened by a reader in Jupyter): input patterns, and the report's
provenance record (write_provenance), which `esopt audit` checks like any other."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

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


def run_files(paths: str | os.PathLike | Iterable[str | os.PathLike] | None, names: Iterable[str]) -> list[str]:
    """Training run directories (or a file in one; patterns expanded) -> the files `names`
    in each: what a notebook reads of a run, without the model weights beside them."""
    out: list[str] = []
    for p in expand_paths(paths):
        run = p if os.path.isdir(p) else os.path.dirname(p)
        out += [os.path.join(run, n) for n in names]
    return out


def _plain(value: Any) -> Any:
    """A JSON-safe copy of a notebook parameter (keys as strings, odd values as text)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    return json.loads(json.dumps(value, default=str))


def write_provenance(inputs: str | os.PathLike | Iterable[str | os.PathLike] | None,
                     outputs: Iterable[str | os.PathLike], params: dict[str, Any] | None = None, *,
                     name: str = "report", path: str | os.PathLike | None = None) -> Path:
    """The report's provenance record, beside its table: TABLE.provenance.json for the
    first output (results/tables/x.csv -> results/tables/x.provenance.json), in the format
    of every other record (esopt.provenance.record), so `esopt audit` re-hashes the
    notebook's inputs (patterns expanded) and outputs (tables, figure). Command
    "notebook:NAME"; no config file: the notebook's parameters are recorded as params."""
    from esopt.provenance.record import Provenance

    outputs = [os.fspath(o) for o in outputs]
    if not outputs:
        raise ValueError("write_provenance: no outputs (the first is the table the record lies beside)")
    missing = [o for o in outputs if not os.path.exists(o)]
    if missing:
        raise FileNotFoundError(f"write_provenance: outputs not written: {missing}")
    ins = list(dict.fromkeys(expand_paths(inputs)))
    record = Path(path) if path is not None else Path(outputs[0]).with_suffix(".provenance.json")
    prov = Provenance(f"notebook:{name}", {}, None, inputs=ins)
    prov.write(record, outputs=outputs, extra={"argv": [], "notebook": name, "params": _plain(params or {})})
    return record

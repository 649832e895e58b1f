"""DAPO-Math-17k and AIME problems, from local parquet/jsonl/json files or the hub."""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from esopt.envs.hub_data import is_local, load_hub_rows
from esopt.envs.math.tasks import MathTask
from esopt.io import sha256_text

log = logging.getLogger(__package__)  # "esopt.envs.math", as before the split

DAPO_HUB_ID = "BytedTsinghua-SIA/DAPO-Math-17k"
AIME_HUB_ID = "MathArena/aime_{year}"
DEFAULT_AIME_YEAR = 2026
_FILE_SUFFIXES = (".parquet", ".jsonl", ".json")

# DAPO-Math-17k wraps every problem in the same instructions; MathEnv brings its own.
_DAPO_PREFIX = re.compile(r"^\s*Solve the following math problem step by step\..*?"
                          r"where \$Answer is the answer to the problem\.\s*", re.DOTALL)
_DAPO_SUFFIX = re.compile(r"\s*Remember to put your answer on its own line after \"Answer:\"\.?\s*$")


def _load_hub(hub_id: str, split: str, loader: str) -> Iterable[dict]:
    return load_hub_rows(hub_id, split, local_help=f"{loader}(path='DIR/...parquet'), "
                                                   "a .parquet/.jsonl/.json file or a folder of them")


def _read_file(p: Path) -> list[dict]:
    import pandas as pd

    if p.suffix == ".parquet":
        df = pd.read_parquet(p)
    elif p.suffix == ".jsonl":
        df = pd.read_json(p, lines=True)
    else:
        try:
            df = pd.read_json(p)
        except ValueError:  # JSON lines under a .json name
            df = pd.read_json(p, lines=True)
    return df.to_dict("records")


def _rows(path: str | os.PathLike | None, default_hub_id: str, split: str, loader: str) -> tuple[Iterable[dict], str]:
    """Rows of a local file/folder or a hub dataset, and the name it was read from."""
    if path is None:
        return _load_hub(default_hub_id, split, loader), default_hub_id
    text = os.fspath(path)
    p = Path(text).expanduser()
    if not is_local(text, _FILE_SUFFIXES):
        return _load_hub(text, split, loader), text
    if not p.exists():
        raise FileNotFoundError(f"{loader}: no such file or folder: {text}")
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in _FILE_SUFFIXES)
        if not files:
            raise FileNotFoundError(f"{loader}: no .parquet/.jsonl/.json file under {text}")
    elif p.suffix in _FILE_SUFFIXES:
        files = [p]
    else:
        raise ValueError(f"{loader}: {text} is not a .parquet, .jsonl or .json file")
    return (row for f in files for row in _read_file(f)), text


def _plain(v: Any) -> Any:
    """numpy scalars/arrays (from pandas) -> Python values."""
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
        try:
            return v.tolist()
        except Exception:
            return v
    return v


def _get(row: dict, key: str | Sequence[str]) -> Any:
    """row[key] with dotted paths into nested dicts ("reward_model.ground_truth"); a
    sequence of keys gives the first one present. None when absent."""
    for k in ([key] if isinstance(key, str) else key):
        v: Any = row
        for part in k.split("."):
            v = _plain(v)
            if isinstance(v, dict) and part in v:
                v = v[part]
            else:
                v = None
                break
        v = _plain(v)
        if not _missing(v):
            return v
    return None


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _answer_text(v: Any) -> str | None:
    if _missing(v):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, (list, tuple)):  # some sets keep a one-element list of answers
        v = v[0] if len(v) == 1 else ", ".join(map(str, v))
    return str(v).strip() or None


def _question_text(v: Any) -> str | None:
    """A problem string, or the user content of a chat message list."""
    if isinstance(v, (list, tuple)):
        users = [m.get("content") for m in v if isinstance(m, dict) and m.get("role", "user") == "user"]
        v = users[0] if users else None
    if _missing(v) or not isinstance(v, str):
        return None
    return v.strip()


def _build_tasks(rows: Iterable[dict], source: str, where: str, question_key, answer_key, id_key,
                 limit: int | None, clean: Callable[[str], str] = lambda q: q, dedup: bool = True,
                 keep: Callable[[dict], bool] = lambda row: True) -> list[MathTask]:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    tasks: list[MathTask] = []
    ids: set[str] = set()
    questions: set[str] = set()
    no_answer: list[str] = []
    no_question = 0
    for row in rows:
        if limit is not None and len(tasks) >= limit:
            break
        if not keep(row):
            continue
        q = _question_text(_get(row, question_key))
        if q is None:
            no_question += 1
            continue
        q = clean(q)
        raw_id = _get(row, id_key)
        tid = f"{source}-{raw_id}" if raw_id is not None else f"{source}-{sha256_text(q)[:12]}"
        a = _answer_text(_get(row, answer_key))
        if a is None:
            no_answer.append(tid)
            continue
        if dedup and q in questions:
            continue
        if tid in ids:
            tid = f"{source}-{sha256_text(q)[:12]}"
        questions.add(q)
        ids.add(tid)
        tasks.append(MathTask(id=tid, question=q, answer=a, source=source))
    if no_answer:
        log.warning("%s: skipped %d rows without an answer (%s): %s%s", where, len(no_answer), answer_key,
                    ", ".join(no_answer[:5]), ", ..." if len(no_answer) > 5 else "")
    if no_question:
        log.warning("%s: skipped %d rows without a question (%s)", where, no_question, question_key)
    return tasks


def _strip_dapo_instructions(q: str) -> str:
    out = _DAPO_SUFFIX.sub("", _DAPO_PREFIX.sub("", q)).strip()
    return out or q


def load_dapo(path: str | os.PathLike | None = None, split: str = "train", limit: int | None = None, *,
              question_key: str | Sequence[str] = ("prompt", "problem", "question"),
              answer_key: str | Sequence[str] = ("reward_model.ground_truth", "answer", "solution"),
              id_key: str | Sequence[str] = ("extra_info.index", "index", "id"),
              strip_instructions: bool = True, dedup: bool = True) -> list[MathTask]:
    """DAPO-Math-17k problems (hub id BytedTsinghua-SIA/DAPO-Math-17k, split 'train' only).

    `path`: None (the hub dataset), another hub id "owner/name", or a local .parquet,
    .jsonl or .json file or a folder of them (`split` is then ignored). Rows follow the
    verl layout: `prompt` is a chat list whose user message holds the problem wrapped
    in DAPO's "Solve the following math problem step by step..." instructions (removed
    when `strip_instructions`; MathEnv has its own), `reward_model.ground_truth` the
    answer (an integer for every DAPO row), `extra_info.index` a stable id. The hub
    copy repeats each problem about 100 times (1.79M rows); `dedup` keeps the first
    copy of each question. Keys take dotted paths into nested columns; a sequence of
    keys means the first one present. Rows without an answer are skipped with a
    warning. `limit` caps the number of tasks returned.
    """
    rows, where = _rows(path, DAPO_HUB_ID, split, "load_dapo")
    clean = _strip_dapo_instructions if strip_instructions else (lambda q: q)
    return _build_tasks(rows, "dapo-math-17k", where, question_key, answer_key, id_key, limit, clean, dedup)


def load_aime(path: str | os.PathLike | None = None, year: int | None = None, limit: int | None = None,
              *, split: str = "train",
              question_key: str | Sequence[str] = ("problem", "question", "Problem", "Question"),
              answer_key: str | Sequence[str] = ("answer", "Answer"),
              id_key: str | Sequence[str] = ("problem_idx", "id", "ID", "Problem Number")) -> list[MathTask]:
    """AIME problems (answers are integers 0-999).

    `path` None loads the hub dataset MathArena/aime_{year} (MathArena's LaTeX-verified
    AIME sets: columns problem_idx/problem/answer, one 'train' split of 30 problems, AIME
    I and II). The default year is 2026 (DEFAULT_AIME_YEAR), the AIME the paper
    evaluated on; year=2025 gives MathArena/aime_2025. Otherwise `path` is a hub id
    or a local .parquet/.jsonl/.json file or folder with a `problem` (or `question`)
    and an `answer` column. With a path, `year` only filters: when it is given and
    the data has a `year` column, only that year's rows are kept. Task ids and the
    source read "aime-{year}" (the year given, else one in the path's name, else
    none). Rows without an answer are skipped with a warning; `limit` caps the number
    of tasks.
    """
    label = year
    if path is None:
        label = year = DEFAULT_AIME_YEAR if year is None else year
    elif year is None:
        found = re.findall(r"(?<!\d)(19[89]\d|20\d\d)(?!\d)", Path(os.fspath(path)).name)
        label = int(found[-1]) if found else None
    rows, where = _rows(path, AIME_HUB_ID.format(year=year), split, "load_aime")
    source = f"aime-{label}" if label is not None else "aime"

    def keep(row: dict) -> bool:
        y = _get(row, ("year", "Year"))
        if year is None or y is None:
            return True
        try:
            return int(str(y).strip()[:4]) == int(year)
        except ValueError:
            return True

    tasks = _build_tasks(rows, source, where, question_key, answer_key, id_key, limit, keep=keep)
    if not tasks:
        log.warning("%s: no AIME problems loaded (year=%s)", where, year)
    return tasks

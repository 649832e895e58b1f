"""The real Single-Page DocVQA: the official annotation JSON, parquet files of
lmms-lab/DocVQA, or the hub (network or a warm cache)."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from esopt.envs.docvqa.render import _png_bytes
from esopt.envs.docvqa.tasks import DocTask
from esopt.envs.hub_data import is_local, load_hub_rows
from esopt.io import atomic_path

log = logging.getLogger(__package__)  # "esopt.envs.docvqa", as before the split

DEFAULT_HUB_ID = "lmms-lab/DocVQA"
DEFAULT_HUB_CONFIG = "DocVQA"


def _local_help(hub_id: str) -> str:
    return ("load_docvqa('DIR/val_v1.0_withQT.json') with the official Single-Page "
            "DocVQA annotation JSON (images relative to its folder, e.g. documents/xyz.png), or "
            f"load_docvqa('DIR/validation-00000-of-00006.parquet') with parquet files of {hub_id}")


def _hub_rows(hub_id: str, config: str | None, split: str) -> Iterable[dict]:
    # any_error: a failure online (say, an unknown config) is a HubUnavailableError too
    ds = load_hub_rows(hub_id, split, config, what="DocVQA", local_help=_local_help(hub_id), any_error=True)
    if "image" in getattr(ds, "features", {}):
        import datasets

        try:
            ds = ds.cast_column("image", datasets.Image(decode=False))  # keep the PNG bytes as they are
        except Exception:  # noqa: BLE001 - decoded images work too, only slower
            pass
    return ds


def _parquet_rows(files: Sequence[Path]) -> Iterator[dict]:
    import pyarrow.parquet as pq

    for f in files:
        pf = pq.ParquetFile(f)
        for batch in pf.iter_batches(batch_size=64):
            yield from batch.to_pylist()


def _image_bytes(value: Any) -> bytes | None:
    """PNG (or other image) bytes of a parquet/hub image cell: bytes, {"bytes", "path"} or PIL."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, dict):
        if value.get("bytes"):
            return bytes(value["bytes"])
        if value.get("path") and os.path.isfile(value["path"]):
            return Path(value["path"]).read_bytes()
        return None
    if hasattr(value, "save"):  # a PIL image
        return _png_bytes(value)
    return None


def _save_image(data: bytes, path: Path) -> None:
    """`data` as a PNG at `path` (converted when it is another format); kept when present."""
    if path.is_file():
        return
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        from PIL import Image

        with Image.open(io.BytesIO(data)) as im:
            data = _png_bytes(im.convert("RGB") if im.mode not in ("L", "RGB") else im)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")[:80] or "doc"


def _answers(v: Any) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if hasattr(v, "tolist"):
        v = v.tolist()
    return tuple(str(a).strip() for a in v if a is not None and str(a).strip())


def _tasks_from_rows(rows: Iterable[dict], where: str, limit: int | None, image_of) -> list[DocTask]:
    tasks: list[DocTask] = []
    unanswered = missing = 0
    ids: set[str] = set()
    for row in rows:
        if limit is not None and len(tasks) >= limit:
            break
        answers = _answers(row.get("answers"))
        question = str(row.get("question") or "").strip()
        if not answers or not question:
            unanswered += 1
            continue
        qid = str(row.get("questionId", row.get("question_id", len(tasks) + unanswered)))
        tid = f"docvqa-{qid}"
        if tid in ids:
            continue
        image = image_of(row)
        if image is None:
            missing += 1
            continue
        ids.add(tid)
        tasks.append(DocTask(id=tid, image=str(image), question=question, answers=answers, doc_type="docvqa"))
    if unanswered:
        log.warning("%s: skipped %d questions without answers (a test split has none: use validation)",
                    where, unanswered)
    if missing:
        log.warning("%s: skipped %d questions without an image", where, missing)
    return tasks


def _from_json(path: Path, limit: int | None) -> list[DocTask]:
    obj = json.loads(path.read_text())
    data = obj.get("data") if isinstance(obj, dict) else obj
    if not isinstance(data, list):
        raise ValueError(f"{path} is not a DocVQA annotation file: expected {{'data': [...]}}")
    root = path.parent
    absent: list[str] = []

    def image_of(row: dict) -> Path | None:
        rel = row.get("image")
        if not rel:
            return None
        for base in (root, root.parent):
            if (base / rel).is_file():
                return (base / rel).resolve()
        absent.append(rel)
        return (root / rel).resolve()  # the OCR tool says it is missing

    tasks = _tasks_from_rows(data, str(path), limit, image_of)
    if absent:
        log.warning("%s: %d of %d images are missing (looked under %s), e.g. %s",
                    path, len(absent), len(tasks), root, absent[0])
    return tasks


def _default_image_dir(name: str, split: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "esopt" / "docvqa"
    return base / _safe_name(name) / _safe_name(split)


def _from_rows_with_images(rows: Iterable[dict], where: str, limit: int | None, image_dir: Path) -> list[DocTask]:
    def image_of(row: dict) -> Path | None:
        data = _image_bytes(row.get("image"))
        if data is None:
            return None
        doc = row.get("docId")
        page = row.get("ucsf_document_page_no")
        name = _safe_name(f"{doc}_{page}" if doc is not None and page is not None else str(doc)) \
            if doc is not None else hashlib.sha256(data).hexdigest()[:16]
        path = image_dir / f"{name}.png"
        _save_image(data, path)
        return path.resolve()

    return _tasks_from_rows(rows, where, limit, image_of)


def load_docvqa(path: str | os.PathLike | None = None, split: str = "validation", limit: int | None = None,
                image_dir: str | os.PathLike | None = None, config: str | None = DEFAULT_HUB_CONFIG) -> list[DocTask]:
    """Real Single-Page DocVQA questions.

    `path`: the official annotation JSON ({"data": [{"questionId", "question", "image",
    "docId", "answers"}]}, images relative to the JSON's folder or its parent); a
    .parquet file or a folder of them (lmms-lab/DocVQA columns questionId, question,
    answers, image, docId; files whose name holds `split` when some do); or a hub id
    (default lmms-lab/DocVQA, `config` DocVQA), read with datasets.load_dataset, which
    needs the network or a warm cache (HubUnavailableError otherwise). Images from
    parquet/hub rows are written as PNGs to `image_dir` (default
    ~/.cache/esopt/docvqa/NAME/SPLIT) so the OCR tool can open them. Questions
    without answers (the test split) are skipped with a warning. `limit`: at most
    this many tasks, in file order."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    text = os.fspath(path) if path is not None else DEFAULT_HUB_ID
    p = Path(text).expanduser()
    if not is_local(text, (".json", ".parquet")):
        out = Path(image_dir) if image_dir is not None else _default_image_dir(text, split)
        return _from_rows_with_images(_hub_rows(text, config, split), text, limit, out)
    if not p.exists():
        raise FileNotFoundError(f"load_docvqa: no such file or folder: {text}")
    if p.is_file() and p.suffix == ".json":
        return _from_json(p, limit)
    if p.is_dir():
        jsons = sorted(p.glob("*.json"))
        files = sorted(p.rglob("*.parquet"))
        if not files and len(jsons) == 1:
            return _from_json(jsons[0], limit)
        named = [f for f in files if split in f.name]
        files = named or files
        if not files:
            raise FileNotFoundError(f"load_docvqa: no .parquet file (or single annotation .json) under {text}")
    elif p.suffix == ".parquet":
        files = [p]
    else:
        raise ValueError(f"load_docvqa: {text} is not an annotation .json or a .parquet file")
    out = Path(image_dir) if image_dir is not None else _default_image_dir(p.stem, split)
    return _from_rows_with_images(_parquet_rows(files), text, limit, out)

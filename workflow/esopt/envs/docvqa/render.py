"""Rendered documents: the generated forms, receipts and tables drawn as PNGs with PIL.

600x400 grayscale, DejaVu Sans 24 px when the system or matplotlib has it, else
Pillow's built-in scalable font. `render_documents` writes the images, tasks.jsonl
and manifest.json of one split.
"""

from __future__ import annotations

import io
import json
import logging
import os
import random
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from esopt.envs.docvqa.generate import _MAKERS, DOC_TYPES, HEIGHT, WIDTH, _doc_key, split_of
from esopt.envs.docvqa.tasks import DocTask
from esopt.envs.hub_data import canonical_split
from esopt.io import atomic_path, write_json_atomic, write_text_atomic
from esopt.seeding import derive_seed

log = logging.getLogger(__package__)  # "esopt.envs.docvqa", as before the split

RENDER_FORMAT = 1  # bump when the same (seed, split, n) would render different documents
FONT_SIZE, TITLE_SIZE = 24, 26
MAX_ATTEMPTS = 1000  # candidates per document before giving up

_FONT_DIRS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/dejavu", "/usr/share/fonts/TTF",
              "/usr/share/fonts/truetype", "/usr/local/share/fonts", "/Library/Fonts",
              os.path.expanduser("~/.fonts"), os.path.expanduser("~/.local/share/fonts"))

TASKS_FILE = "tasks.jsonl"
MANIFEST_FILE = "manifest.json"


def find_font(bold: bool = False) -> str | None:
    """Path of DejaVu Sans (Bold) from the system fonts or matplotlib, or None."""
    name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
    dirs = list(_FONT_DIRS)
    try:
        import importlib.util

        spec = importlib.util.find_spec("matplotlib")  # locates it without importing it
        if spec is not None and spec.origin:
            dirs.append(os.path.join(os.path.dirname(spec.origin), "mpl-data", "fonts", "ttf"))
    except (ImportError, ValueError):
        pass
    for d in dirs:
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    return None


_warned_font = False


def _font(size: int, bold: bool = False):
    from PIL import ImageFont

    path = find_font(bold) or (find_font(False) if bold else None)
    if path is not None:
        return ImageFont.truetype(path, size)
    global _warned_font
    if not _warned_font:
        log.warning("DejaVu Sans not found (system fonts, matplotlib): rendering with Pillow's built-in font")
        _warned_font = True
    return ImageFont.load_default(size=size)  # Pillow >= 10.1: a scalable built-in font


def font_name() -> str:
    p = find_font()
    return os.path.basename(p) if p else "Pillow built-in (Aileron)"


def render_image(items: list[dict]):
    """The document drawn as a grayscale PIL image (black on white)."""
    from PIL import Image, ImageDraw

    img = Image.new("L", (WIDTH, HEIGHT), 255)
    draw = ImageDraw.Draw(img)
    fonts = {False: _font(FONT_SIZE), True: _font(TITLE_SIZE, bold=True)}
    for it in items:
        if "rule" in it:
            x0, y, x1 = it["rule"]
            draw.line([(x0, y), (x1, y)], fill=0, width=2)
            continue
        font = fonts[it["bold"]]
        x = it["x"] - font.getlength(it["text"]) if it["align"] == "right" else it["x"]
        draw.text((round(x), it["y"]), it["text"], fill=0, font=font)
    return img


def _png_bytes(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False)
    return buf.getvalue()


def _task_rows(tasks: Sequence[DocTask], root: Path) -> str:
    rows = []
    for t in tasks:
        row = asdict(t)
        row["image"] = os.path.relpath(t.image, root)
        row["answers"] = list(t.answers)
        rows.append(json.dumps(row, ensure_ascii=False) + "\n")
    return "".join(rows)


def _read_tasks(root: Path) -> list[DocTask]:
    tasks = []
    for line in (root / TASKS_FILE).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            tasks.append(DocTask(id=row["id"], image=str(root / row["image"]), question=row["question"],
                                 answers=tuple(row["answers"]), doc_type=row["doc_type"]))
    return tasks


def render_documents(out_dir: str | os.PathLike, n: int, seed: int, split: str,
                     questions_per_image: int = 2) -> list[DocTask]:
    """`n` synthetic document images of `split` in out_dir (PNGs, tasks.jsonl, manifest.json)
    and their tasks: `questions_per_image` questions per image (fewer when a document
    has fewer); document i is a form, a receipt or a table as i % 3 is 0, 1 or 2.

    Candidate k for document i is drawn from an rng keyed on (seed, split, i, k) and
    kept when it is of `split` and new, so the output is deterministic (same images,
    byte for byte, on one machine) and a shorter call is a prefix of a longer one.
    Files are written atomically, manifest.json last; a call on a complete out_dir of
    the same (seed, split, n, questions_per_image) reuses it, and on a different one
    raises rather than overwrite it. OCR time per image: docs/tool_agents.md, OCR."""
    split = canonical_split(split)
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    if not isinstance(questions_per_image, int) or questions_per_image < 1:
        raise ValueError(f"questions_per_image must be an int >= 1, got {questions_per_image!r}")
    root = Path(out_dir)
    want = {"format": RENDER_FORMAT, "seed": seed, "split": split, "n": n, "questions_per_image": questions_per_image}
    manifest = root / MANIFEST_FILE
    if manifest.exists():
        try:
            have = json.loads(manifest.read_text())
        except ValueError:
            have = {}
        if {k: have.get(k) for k in want} != want:
            raise ValueError(f"{root} already holds rendered documents of {({k: have.get(k) for k in want})}, "
                             f"not {want}; use another directory or delete it")
        if (root / TASKS_FILE).exists():
            tasks = _read_tasks(root)
            if all(Path(t.image).is_file() for t in tasks):
                return tasks
        log.warning("%s is incomplete; rendering it again", root)
    root.mkdir(parents=True, exist_ok=True)

    tasks: list[DocTask] = []
    seen: set[str] = set()
    for i in range(n):
        doc_type = DOC_TYPES[i % len(DOC_TYPES)]
        for attempt in range(MAX_ATTEMPTS):
            rng = random.Random(derive_seed("docvqa-render", seed, split, i, attempt))
            items, questions = _MAKERS[doc_type](rng)
            key = _doc_key(doc_type, items)
            if split_of(key) == split and key not in seen:
                break
        else:
            raise RuntimeError(f"document {i} of {split}: {MAX_ATTEMPTS} candidates were all duplicates "
                               "or of the other split")
        seen.add(key)
        doc_id = f"{split}-{i:05d}"
        image = root / f"{doc_id}.png"
        with atomic_path(image) as tmp:
            tmp.write_bytes(_png_bytes(render_image(items)))
        picked, asked = [], set()
        for q, answers in rng.sample(questions, len(questions)):
            if q not in asked:
                asked.add(q)
                picked.append((q, answers))
            if len(picked) == questions_per_image:
                break
        for j, (q, answers) in enumerate(picked):
            tasks.append(DocTask(id=f"{doc_id}-q{j}", image=str(image.resolve()), question=q,
                                 answers=tuple(answers), doc_type=doc_type))
    write_text_atomic(root / TASKS_FILE, _task_rows(tasks, root))
    write_json_atomic(manifest, {**want, "font": font_name(), "images": n, "tasks": len(tasks)})
    return tasks

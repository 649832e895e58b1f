"""DocVQA: questions about a document image, answered from what an OCR tool reads.

The agent never sees the image or its ground-truth text: it calls the OCR tool
(esopt.agent.tools.ocr, added by the ReAct wrapper esopt.agent.react) and must answer
from the text that comes back. The score of an answer is ANLS, the DocVQA metric
(`anls`): 1 for an exact match up to case and spacing, partial credit for near
misses, 0 past a normalized edit distance of 0.5.

Two sources of tasks:
- `render_documents`: synthetic forms, receipts and small tables drawn here with PIL
  (600x400 grayscale PNGs, DejaVu Sans 24 px when the system or matplotlib has it,
  else Pillow's built-in scalable font). Every answer is a string printed in the
  image, found by its label ("Invoice No:", "TOTAL", a row and a column).
  Measured with the rapidocr engine (1 onnxruntime thread, on one core of a 2-core
  machine): OCR takes 0.42 s per image on average (0.65 s at most; CPU time equals
  wall time), once per image since the tool caches. It read every answer verbatim
  for 300 rendered documents (600 questions, seed 7, both splits); with Pillow's
  built-in font instead of DejaVu Sans, 120 of 120. tests/test_ocr.py checks a few
  on every run.
  Train/test split by hash: a document is 'test' iff the first 8 hex digits of the
  sha256 of its content are divisible by 5 (`split_of`); the generator drops
  documents of the other split, so the splits are disjoint by construction.
- `load_docvqa`: the real Single-Page DocVQA, from the official annotation JSON,
  a parquet file/folder of `lmms-lab/DocVQA`, or the hub (network or a warm cache;
  esopt.envs.hub_data, whose HubUnavailableError is re-exported here, otherwise).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import random
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from esopt.envs.answers import extract_answer
from esopt.envs.hub_data import HubUnavailableError, load_hub_rows  # noqa: F401 - re-exports HubUnavailableError
from esopt.io import atomic_path, write_json_atomic, write_text_atomic
from esopt.seeding import derive_seed

log = logging.getLogger(__name__)

SPLITS = {"train": "train", "test": "test", "eval": "test"}  # "eval" is the sudoku name of the test split
ANLS_THRESHOLD = 0.5
NO_ANSWER_FEEDBACK = "No final answer found; finish with 'Answer: <text>'"
DEFAULT_HUB_ID = "lmms-lab/DocVQA"
DEFAULT_HUB_CONFIG = "DocVQA"
TASKS_FILE = "tasks.jsonl"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class DocTask:
    """One question about one document image (`image`: a path the OCR tool can open)."""

    id: str
    image: str
    question: str
    answers: tuple[str, ...]
    doc_type: str

    def __post_init__(self) -> None:
        if isinstance(self.answers, str):
            object.__setattr__(self, "answers", (self.answers,))
        elif not isinstance(self.answers, tuple):
            object.__setattr__(self, "answers", tuple(self.answers))
        if not self.answers:
            raise ValueError(f"task {self.id}: answers must not be empty")
        if not str(self.question).strip():
            raise ValueError(f"task {self.id}: question must not be empty")


# --------------------------------------------------------------------------- ANLS


def normalize(text: Any) -> str:
    """Lower case, outer whitespace stripped, inner whitespace collapsed to one space."""
    return " ".join(str(text).lower().split())


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions all cost 1)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def anls(prediction: Any, answers: Sequence[str] | str, threshold: float = ANLS_THRESHOLD) -> float:
    """Average Normalized Levenshtein Similarity of one question (the DocVQA metric):
    the max over gold answers of 1 - NL when NL < threshold, else 0, where
    NL = levenshtein(pred, gold) / max(len(pred), len(gold)) on normalized strings."""
    if prediction is None:
        return 0.0
    if isinstance(answers, str):
        answers = [answers]
    p = normalize(prediction)
    best = 0.0
    for gold in answers:
        g = normalize(gold)
        longest = max(len(p), len(g))
        if longest == 0:
            return 1.0
        nl = levenshtein(p, g) / longest
        if nl < threshold:
            best = max(best, 1.0 - nl)
    return best


# --------------------------------------------------------------------------- the environment


def instructions(style: str = "full") -> str:
    """The task part of the system prompt (the tool documentation is added by
    esopt.agent.react.tool_instructions). "short" for the tiny model."""
    if style == "short":
        return "Answer questions about a document from its OCR text. Copy the value exactly."
    if style != "full":
        raise ValueError(f"prompt style {style!r}: expected 'full' or 'short'")
    return ("You answer a question about a document image that you cannot see. Read its text with the OCR "
            "tool, find the line with the label the question asks about, and copy the value exactly as "
            "written there. Finish with 'Answer: <text>'.")


class DocVQAEnv:
    """One question per episode; `step` judges a final answer by ANLS and never raises on
    model text. A reply without a final answer gets feedback and the episode goes on
    (the turn limit is the rollout's)."""

    def __init__(self, threshold: float = ANLS_THRESHOLD):
        self.threshold = threshold
        self._task: DocTask | None = None
        self._done = True
        self._invalid = 0

    @property
    def task(self) -> DocTask | None:
        return self._task

    @property
    def done(self) -> bool:
        return self._done

    def reset(self, task: DocTask) -> str:
        self._task = task
        self._done = False
        self._invalid = 0
        return f"Question: {task.question}\n(Read the document with the OCR tool.)"

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("episode is over; call reset() before step()")
        answer = extract_answer(action if isinstance(action, str) else str(action))
        if answer is None:
            self._invalid += 1
            return NO_ANSWER_FEEDBACK, 0.0, False, {"invalid_actions": self._invalid}
        r = anls(answer, self._task.answers, self.threshold)
        self._done = True
        info = {"anls": r, "success": r >= 0.5, "answer": answer, "invalid_actions": self._invalid}
        return f"Answer recorded: {answer}", r, True, info


# --------------------------------------------------------------------------- rendered documents

RENDER_FORMAT = 1  # bump when the same (seed, split, n) would render different documents
WIDTH, HEIGHT = 600, 400
FONT_SIZE, TITLE_SIZE = 24, 26
MARGIN, LINE_PITCH = 28, 40
DOC_TYPES = ("form", "receipt", "table")
MAX_ATTEMPTS = 1000  # candidates per document before giving up

_FONT_DIRS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/dejavu", "/usr/share/fonts/TTF",
              "/usr/share/fonts/truetype", "/usr/local/share/fonts", "/Library/Fonts",
              os.path.expanduser("~/.fonts"), os.path.expanduser("~/.local/share/fonts"))

FIRST_NAMES = ("Maria", "James", "Aisha", "Peter", "Linda", "Omar", "Sofia", "Daniel", "Grace", "Victor",
               "Helen", "Marcus", "Nina", "Robert", "Yuki", "Carlos", "Emma", "Samuel", "Priya", "Thomas")
LAST_NAMES = ("Lopez", "Becker", "Khan", "Novak", "Turner", "Silva", "Morgan", "Fischer", "Okafor", "Russo",
              "Dubois", "Tanaka", "Walsh", "Meyer", "Petrov", "Hughes", "Garcia", "Nguyen", "Brooks", "Santos")
CITIES = ("Springfield", "Riverton", "Lakeview", "Fairmont", "Brookfield", "Greenville", "Westport",
          "Ashland", "Milford", "Clayton", "Kingston", "Oakridge", "Hillsboro", "Marston")
DEPARTMENTS = ("Sales", "Finance", "Research", "Logistics", "Marketing", "Support", "Legal", "Purchasing")
FORM_TITLES = ("REGISTRATION FORM", "APPLICATION FORM", "CUSTOMER DETAILS", "ORDER FORM", "INVOICE")
STORES = ("GREEN LEAF MARKET", "CORNER CAFE", "CITY HARDWARE", "BLUE OCEAN DELI", "SUNRISE BAKERY",
          "PARK STREET BOOKS", "METRO PHARMACY", "HARBOR GROCERY")
ITEMS = ("Coffee beans", "Green tea", "Bread loaf", "Olive oil", "Notebook", "Batteries", "Light bulb",
         "Orange juice", "Dish soap", "Paper towels", "Chocolate bar", "Apples", "Milk", "Cheese", "Pasta",
         "Shampoo", "Toothpaste", "Candles", "Rice", "Honey")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
# (title, corner label, column labels, row labels, question template, value range). Short column
# labels keep the header's words apart; values have 3+ digits (OCR misreads lone 2-digit cells).
TABLES = (
    ("Quarterly Sales (units)", "Region", ("Q1", "Q2", "Q3"), ("North", "South", "East", "West", "Central"),
     "How many units did {row} sell in {col}?", (100, 999)),
    ("Monthly Visitors", "Branch", ("Jan", "Feb", "Mar"), ("Downtown", "Airport", "Harbor", "Uptown", "Mall"),
     "How many visitors did {row} have in {col}?", (100, 9999)),
    ("Annual Budget (USD)", "Team", ("2021", "2022", "2023"), ("Design", "Support", "Sales", "Legal", "Research"),
     "What was the budget of {row} in {col}?", (1000, 9999)),
)


def _canonical_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'test' ('eval' = 'test'), got {split!r}")
    return SPLITS[split]


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def split_of(doc_key: str) -> str:
    """The split of a document, by the hash of its canonical content (`_doc_key`)."""
    return "test" if int(_sha256(doc_key)[:8], 16) % 5 == 0 else "train"


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


def _date(rng: random.Random) -> str:
    y, m, d = rng.randint(2015, 2024), rng.randint(1, 12), rng.randint(1, 28)
    style = rng.randrange(3)
    if style == 0:
        return f"{y}-{m:02d}-{d:02d}"
    if style == 1:  # full month names: "12 Oct 2023" often comes back as "12 0ct 2023"
        return f"{d} {MONTHS[m - 1]} {y}"
    return f"{m:02d}/{d:02d}/{y}"


def _money(cents: int) -> str:
    return f"{cents // 100:,}.{cents % 100:02d}"


# A document is a list of drawing items (dicts) plus candidate questions:
#   {"text": str, "x": int, "y": int, "bold": bool, "align": "left" | "right"}  (x: right edge for "right")
#   {"rule": [x0, y, x1]}   a horizontal line
# and [(question, (answers...))].


def _form(rng: random.Random) -> tuple[list[dict], list[tuple[str, tuple[str, ...]]]]:
    title = rng.choice(FORM_TITLES)
    name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    amount = _money(rng.randint(5_000, 500_000))
    date = _date(rng)
    fields = {  # label: (value, question, answers)
        "Name:": (name, "What is the name on the form?", (name,)),
        "Date:": (date, "What is the date on the form?", (date,)),
        "Invoice No:": (f"INV-{rng.randint(1000, 9999)}", "What is the invoice number?", None),
        "Account No:": (str(rng.randint(10_000_000, 99_999_999)), "What is the account number?", None),
        "Phone:": (f"555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}", "What is the phone number?", None),
        "City:": (rng.choice(CITIES), "Which city is given on the form?", None),
        "Department:": (rng.choice(DEPARTMENTS), "Which department is named on the form?", None),
        "Amount Due:": (f"${amount}", "What is the amount due?", (f"${amount}", amount)),
    }
    labels = ["Name:", "Date:"] + rng.sample([k for k in fields if k not in ("Name:", "Date:")], 4)
    items: list[dict] = [{"text": title, "x": MARGIN, "y": 18, "bold": True, "align": "left"}]
    questions = []
    for i, label in enumerate(labels):
        value, question, answers = fields[label]
        y = 18 + LINE_PITCH * (i + 1) + 12
        items.append({"text": label, "x": MARGIN, "y": y, "bold": False, "align": "left"})
        items.append({"text": value, "x": 250, "y": y, "bold": False, "align": "left"})
        questions.append((question, answers or (value,)))
    return items, questions


def _receipt(rng: random.Random) -> tuple[list[dict], list[tuple[str, tuple[str, ...]]]]:
    store = rng.choice(STORES)
    date = _date(rng)
    names = rng.sample(ITEMS, rng.randint(3, 5))
    cents = rng.sample(range(99, 5_000), len(names))
    right = WIDTH - MARGIN
    items: list[dict] = [{"text": store, "x": MARGIN, "y": 18, "bold": True, "align": "left"},
                         {"text": f"Date: {date}", "x": MARGIN, "y": 18 + LINE_PITCH, "bold": False, "align": "left"}]
    questions = [("What is the name of the store?", (store,)), ("What is the date on the receipt?", (date,))]
    y = 18 + 2 * LINE_PITCH + 8
    for name, c in zip(names, cents):
        items.append({"text": name, "x": MARGIN, "y": y, "bold": False, "align": "left"})
        items.append({"text": _money(c), "x": right, "y": y, "bold": False, "align": "right"})
        questions.append((f"How much did the {name.lower()} cost?", (_money(c),)))
        y += LINE_PITCH
    items.append({"rule": [MARGIN, y + 2, right]})
    total = _money(sum(cents))
    items.append({"text": "TOTAL", "x": MARGIN, "y": y + 12, "bold": True, "align": "left"})
    items.append({"text": total, "x": right, "y": y + 12, "bold": False, "align": "right"})
    questions += [("What is the total amount?", (total,))] * 2  # the total is asked twice as often
    return items, questions


def _table(rng: random.Random) -> tuple[list[dict], list[tuple[str, tuple[str, ...]]]]:
    title, corner, all_cols, all_rows, template, (lo, hi) = rng.choice(TABLES)
    cols = list(all_cols)
    rows = rng.sample(all_rows, 4)
    values = rng.sample(range(lo, hi + 1), len(rows) * len(cols))
    col_x = (320, 450, WIDTH - MARGIN)  # right edges of the number columns
    items: list[dict] = [{"text": title, "x": MARGIN, "y": 18, "bold": True, "align": "left"}]
    y = 18 + LINE_PITCH + 12
    items.append({"text": corner, "x": MARGIN, "y": y, "bold": True, "align": "left"})
    for c, x in zip(cols, col_x):
        items.append({"text": c, "x": x, "y": y, "bold": True, "align": "right"})
    items.append({"rule": [MARGIN, y + LINE_PITCH - 6, WIDTH - MARGIN]})
    questions = []
    for r, row in enumerate(rows):
        y += LINE_PITCH
        items.append({"text": row, "x": MARGIN, "y": y, "bold": False, "align": "left"})
        for k, (c, x) in enumerate(zip(cols, col_x)):
            v = str(values[r * len(cols) + k])
            items.append({"text": v, "x": x, "y": y, "bold": False, "align": "right"})
            questions.append((template.format(row=row, col=c), (v,)))
    return items, questions


_MAKERS = {"form": _form, "receipt": _receipt, "table": _table}


def _doc_key(doc_type: str, items: list[dict]) -> str:
    return json.dumps({"doc_type": doc_type, "items": items}, sort_keys=True, separators=(",", ":"))


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
    kept when it is of `split` and new, so the output is deterministic (same images, byte for byte, on one machine) and a shorter call is a
    prefix of a longer one. Files are written atomically, manifest.json last; a call
    on a complete out_dir of the same (seed, split, n, questions_per_image) reuses it,
    and on a different one raises rather than overwrite it. OCR time: see the module
    docstring (about 0.42 s per image with rapidocr on one thread)."""
    split = _canonical_split(split)
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


# --------------------------------------------------------------------------- the real DocVQA


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


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
    local = p.exists() or p.suffix in (".json", ".parquet") or text.startswith((".", "/", "~")) \
        or not _HUB_ID.fullmatch(text)
    if not local:
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

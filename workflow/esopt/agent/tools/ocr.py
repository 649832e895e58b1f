"""OCR of a task's document image, as a ReAct tool: `<ocr></ocr>` or `<ocr>phrase</ocr>`.

The agent never sees the document's ground-truth text, only what the OCR engine
reads: an empty call returns the whole text, one visual line per line, in reading
order (top to bottom, then left to right), cut at `max_chars`; a phrase returns
only the lines that contain it (case-insensitive; spaces are ignored as a fallback,
since OCR drops some).

Engines:
  rapidocr   RapidOCR (PP-OCRv4 det/cls/rec ONNX models, shipped inside the
             rapidocr-onnxruntime wheel: no download; a dependency of esopt).
  tesseract  the `tesseract` binary (TSV output), when installed.
  auto       rapidocr if importable, else tesseract.

OCR is deterministic per image and ES calls the tool thousands of times on the same
few hundred images, so results are cached in memory by the sha256 of the image bytes
(a (path, mtime, size) memo skips re-reading the file) and, with `cache_dir`, on disk
as one small JSON per image (written atomically, so jobs running side by side can
share one directory; a file from another engine or version is ignored).

Threads: RapidOCR's sessions take `intra_op_num_threads`/`inter_op_num_threads`
(config.yaml Global section, passed as RapidOCR(**kwargs) and copied to the Det,
Cls and Rec sessions); `threads=1` (the default) sets both to 1, because the
pipeline runs jobs side by side on few cores (RapidOCR ignores values above
os.cpu_count()). OpenCV's own pool in pre-processing is left alone: on these small
images it adds nothing (docs/tool_agents.md, OCR).

Spaces: the PP-OCRv4 recogniser often drops the space between English words
("InvoiceNo:INV-4821"). For rapidocr, spaces are put back where the image has a
blank gap between two recognised characters at least `space_gap` x the text height
wide (character positions from RapidOCR's word boxes, gaps from the ink profile of
the line); inside numbers, dates and codes (digits, '.', ',', '-', '/') only at
1.6 x that gap (a tabular '1' has wide side bearings); never before closing
punctuation or after an opening one. Spaces the model did emit are kept. On
rendered documents this turns "InvoiceNo:" back into "Invoice No:" (how often answers
come back verbatim: docs/tool_agents.md, OCR).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENGINES = ("auto", "rapidocr", "tesseract")
INSTALL_HINT = "pip install rapidocr-onnxruntime"  # a dependency of esopt, missing only from a broken install
CACHE_FORMAT = 1  # bump when what a cache file holds changes meaning
TRUNCATION_MARKER = "[... truncated: {shown} of {total} characters shown; call <ocr>phrase</ocr> to find a line]"
DIGIT_GAP_FACTOR = 1.6
_NUMERIC = set("0123456789.,-/")  # what numbers, dates and codes are made of
_NO_SPACE_BEFORE = set(".,:;!?)]}%'\"")
_NO_SPACE_AFTER = set("([{$#'\"")


@dataclass(frozen=True)
class OCRLine:
    """One visual line: its text, its box (x0, y0, x1, y1 in pixels) and the engine's
    confidence (mean over the pieces merged into the line)."""

    text: str
    box: tuple[float, float, float, float]
    score: float


# --------------------------------------------------------------------------- images


def _load_rgb(data: bytes):
    """The image as an H x W x 3 uint8 RGB array; transparency composited on white."""
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        im.load()
        if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
            im = im.convert("RGBA")
            bg = Image.new("RGBA", im.size, (255, 255, 255, 255))
            im = Image.alpha_composite(bg, im)
        elif im.mode in ("I;16", "I;16B", "I;16L", "I"):
            arr = np.asarray(im, dtype=np.float64)
            hi = arr.max() or 1.0
            im = Image.fromarray((arr * (255.0 / hi)).astype(np.uint8))
        rgb = np.asarray(im.convert("RGB"), dtype=np.uint8)
    if rgb.ndim != 3 or rgb.shape[0] < 2 or rgb.shape[1] < 2:
        raise ValueError(f"image of shape {rgb.shape} is too small to read")
    return np.ascontiguousarray(rgb)


def _gray(rgb):
    import numpy as np

    return (rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114).astype(np.uint8)


# --------------------------------------------------------------------------- reading order


def reading_order(pieces: Sequence[OCRLine], join: str = " ") -> list[OCRLine]:
    """Merge text pieces into visual lines, top to bottom, each left to right.

    A piece joins a line when its vertical centre lies inside the line's vertical
    extent (and the line's centre inside the piece's), so a form's label and its
    value, or a table row's cells, read as one line."""
    todo = sorted((p for p in pieces if p.text.strip()), key=lambda p: ((p.box[1] + p.box[3]) / 2, p.box[0]))
    lines: list[list[OCRLine]] = []
    extents: list[list[float]] = []  # [y0, y1] of each open line
    for p in todo:
        cy = (p.box[1] + p.box[3]) / 2
        home = None
        for k in range(len(lines) - 1, max(len(lines) - 4, -1), -1):  # the last few lines
            ext = extents[k]
            if ext[0] <= cy <= ext[1] and p.box[1] <= (ext[0] + ext[1]) / 2 <= p.box[3]:
                home = k
                break
        if home is None:
            lines.append([p])
            extents.append([p.box[1], p.box[3]])
        else:
            lines[home].append(p)
            ext = extents[home]
            ext[0], ext[1] = min(ext[0], p.box[1]), max(ext[1], p.box[3])
    out = []
    for line in lines:
        line.sort(key=lambda p: p.box[0])
        box = (min(p.box[0] for p in line), min(p.box[1] for p in line),
               max(p.box[2] for p in line), max(p.box[3] for p in line))
        text = join.join(p.text.strip() for p in line)
        out.append(OCRLine(text, box, sum(p.score for p in line) / len(line)))
    out.sort(key=lambda ln: (ln.box[1] + ln.box[3]) / 2)
    return out


# --------------------------------------------------------------------------- engines


def _axis_box(quad: Sequence[Sequence[float]]) -> tuple[float, float, float, float]:
    xs = [float(p[0]) for p in quad]
    ys = [float(p[1]) for p in quad]
    return (min(xs), min(ys), max(xs), max(ys))


def restore_spaces(gray, quad, chars: Sequence[str], char_quads: Sequence, space_gap: float) -> str:
    """The recognised characters with a space wherever the ink has a blank gap of at
    least `space_gap` x text height between two of them (see the module docstring)."""
    import numpy as np

    text = "".join(chars)
    if len(chars) < 2 or len(char_quads) != len(chars) or any(ord(c) >= 0x2E80 for c in text):
        return text  # CJK or mismatched boxes: characters and boxes may not line up
    q = np.asarray(quad, dtype=np.float64)
    if abs(q[1, 1] - q[0, 1]) > 0.1 * max(abs(q[1, 0] - q[0, 0]), 1.0):
        return text  # not a horizontal line
    x0, y0, x1, y1 = _axis_box(quad)
    h_img, w_img = gray.shape
    xa, xb = max(int(x0), 0), min(int(np.ceil(x1)), w_img)
    ya, yb = max(int(y0), 0), min(int(np.ceil(y1)), h_img)
    if xb - xa < 4 or yb - ya < 4:
        return text
    crop = gray[ya:yb, xa:xb].astype(np.float64)
    lo, hi = np.percentile(crop, 5), np.percentile(crop, 95)
    if hi - lo < 40:
        return text  # too little contrast to tell ink from paper
    ink = crop < (lo + hi) / 2  # dark text on light paper
    if ink.mean() > 0.5:
        ink = ~ink  # light text on a dark band
    rows = np.flatnonzero(ink.any(axis=1))
    if len(rows) == 0:
        return text
    min_gap = space_gap * (rows[-1] - rows[0] + 1)
    cols = ink.any(axis=0)
    gaps = []  # (centre in image x, width) of blank runs wide enough to be a space
    start = None
    for i, filled in enumerate(np.append(cols, True)):
        if not filled and start is None:
            start = i
        elif filled and start is not None:
            if start > 0 and i < len(cols) and i - start >= min_gap:
                gaps.append((xa + (start + i) / 2, i - start))
            start = None
    if not gaps:
        return text
    cx = [float(np.mean([p[0] for p in cq])) for cq in char_quads]
    out = [chars[0]]
    for i in range(1, len(chars)):
        a, b = chars[i - 1], chars[i]
        if not (a.isspace() or b.isspace() or b in _NO_SPACE_BEFORE or a in _NO_SPACE_AFTER):
            # inside numbers: tabular figures ('1') leave wide side bearings, so ask for a wider gap
            need = min_gap * (DIGIT_GAP_FACTOR if a in _NUMERIC and b in _NUMERIC else 1.0)
            if any(cx[i - 1] < g < cx[i] and w >= need for g, w in gaps):
                out.append(" ")
        out.append(b)
    return "".join(out)


class _RapidOCR:
    name = "rapidocr"

    def __init__(self, threads: int | None, space_gap: float | None, min_score: float):
        try:
            import rapidocr_onnxruntime  # noqa: F401
        except ImportError as e:
            raise ImportError(f"OCR engine 'rapidocr' needs rapidocr-onnxruntime ({e}); "
                              f"install it with `{INSTALL_HINT}`") from e
        self.threads = threads
        self.space_gap = space_gap
        self.min_score = min_score
        self._ocr = None
        self._lock = threading.Lock()

    def signature(self) -> str:
        try:
            from importlib.metadata import version

            v = version("rapidocr-onnxruntime")
        except Exception:  # noqa: BLE001 - metadata is best effort
            v = "?"
        return f"rapidocr-onnxruntime {v}; min_score {self.min_score}; space_gap {self.space_gap}"

    def _engine(self):
        if self._ocr is None:
            from rapidocr_onnxruntime import RapidOCR

            kwargs: dict[str, Any] = {"text_score": self.min_score}
            if self.threads:
                kwargs.update(intra_op_num_threads=int(self.threads), inter_op_num_threads=int(self.threads))
            self._ocr = RapidOCR(**kwargs)
        return self._ocr

    def pieces(self, rgb, path: Path) -> list[OCRLine]:
        import numpy as np

        bgr = np.ascontiguousarray(rgb[..., ::-1])
        words = self.space_gap is not None
        with self._lock:
            ocr = self._engine()
            if words:
                result, _ = ocr(bgr, return_word_box=True, text_score=self.min_score)
            else:
                result, _ = ocr(bgr)
        if not result:
            return []
        gray = _gray(rgb) if words else None
        out = []
        for r in result:
            quad, text, score = r[0], str(r[1]), float(r[2])
            if words and len(r) >= 5:
                text = restore_spaces(gray, quad, list(r[4]), r[3], self.space_gap)
            out.append(OCRLine(text, _axis_box(quad), score))
        return out

    def __getstate__(self):
        return {**self.__dict__, "_ocr": None, "_lock": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()


class _Tesseract:
    name = "tesseract"

    def __init__(self, lang: str = "eng", timeout_s: float = 120.0, min_score: float = 0.0):
        self.binary = shutil.which("tesseract")
        if self.binary is None:
            raise RuntimeError("OCR engine 'tesseract' needs the `tesseract` binary on PATH (e.g. apt-get install "
                               f"tesseract-ocr); or use engine 'rapidocr': `{INSTALL_HINT}`")
        self.lang = lang
        self.timeout_s = timeout_s
        self.min_score = min_score

    def signature(self) -> str:
        try:
            v = subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=30)
            first = (v.stdout or v.stderr).splitlines()[0]
        except Exception:  # noqa: BLE001
            first = "?"
        return f"{first}; lang {self.lang}"

    def pieces(self, rgb, path: Path) -> list[OCRLine]:
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, format="PNG")
        proc = subprocess.run([self.binary, "stdin", "stdout", "-l", self.lang, "--psm", "3", "tsv"],
                              input=buf.getvalue(), capture_output=True, timeout=self.timeout_s,
                              env={**os.environ, "OMP_THREAD_LIMIT": "1"})
        if proc.returncode != 0:
            raise RuntimeError(f"tesseract failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[-300:]}")
        lines: dict[tuple[str, str, str, str], list[tuple[int, int, int, int, float, str]]] = {}
        rows = proc.stdout.decode("utf-8", errors="replace").splitlines()
        for row in rows[1:]:
            f = row.split("\t")
            if len(f) < 12 or f[0] != "5" or not f[11].strip():
                continue
            conf = float(f[10])
            if conf < 0 or conf / 100 < self.min_score:
                continue
            left, top, width, height = (int(v) for v in f[6:10])
            lines.setdefault((f[1], f[2], f[3], f[4]), []).append((left, top, width, height, conf / 100, f[11]))
        out = []
        for words in lines.values():
            words.sort()
            box = (min(w[0] for w in words), min(w[1] for w in words),
                   max(w[0] + w[2] for w in words), max(w[1] + w[3] for w in words))
            out.append(OCRLine(" ".join(w[5] for w in words), tuple(float(v) for v in box),
                               sum(w[4] for w in words) / len(words)))
        return out


def make_engine(engine: str, threads: int | None = 1, space_gap: float | None = 0.3, min_score: float = 0.5):
    """The OCR engine named `engine` (see ENGINES); a clear error when it is not installed."""
    if engine == "rapidocr":
        return _RapidOCR(threads, space_gap, min_score)
    if engine == "tesseract":
        return _Tesseract()
    if engine == "auto":
        errors = []
        try:
            return _RapidOCR(threads, space_gap, min_score)
        except ImportError as e:
            errors.append(str(e))
        try:
            return _Tesseract()
        except RuntimeError as e:
            errors.append(str(e))
        raise RuntimeError(f"no OCR engine available; install one with `{INSTALL_HINT}` (rapidocr-onnxruntime). "
                           "Tried: " + " | ".join(errors))
    raise ValueError(f"OCR engine {engine!r}: expected one of {ENGINES}")


# --------------------------------------------------------------------------- the tool


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().lower()


class OCRTool:
    """`<ocr></ocr>`: the task's document text; `<ocr>phrase</ocr>`: the lines containing it.

    `engine`: rapidocr | tesseract | auto. `max_chars`: cap on the text an empty call
    returns. `cache_dir`: where to keep OCR results on disk (None: memory only).
    `threads`: onnxruntime threads per session (1 by default; None leaves ORT's own).
    `space_gap`: see the module docstring (None: keep RapidOCR's text as is).
    The task needs an `image` attribute: the path of the document image."""

    name = "ocr"
    description = "reads the document: empty for all its text, or a phrase for the lines that contain it"

    def __init__(self, engine: str = "auto", max_chars: int = 1500, cache_dir: str | os.PathLike | None = None,
                 threads: int | None = 1, space_gap: float | None = 0.3, min_score: float = 0.5,
                 max_cached_images: int = 100_000):
        if engine not in ENGINES:
            raise ValueError(f"OCR engine {engine!r}: expected one of {ENGINES}")
        if not isinstance(max_chars, int) or max_chars < 50:
            raise ValueError(f"max_chars must be an int >= 50, got {max_chars!r}")
        self.engine = make_engine(engine, threads=threads, space_gap=space_gap, min_score=min_score)
        self.max_chars = max_chars
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.max_cached_images = max_cached_images
        self._signature: str | None = None
        self._by_hash: dict[str, list[OCRLine]] = {}
        self._hash_of: dict[tuple[str, int, int], str] = {}
        self.stats = {"engine_calls": 0, "memory_hits": 0, "disk_hits": 0}

    # ------------------------------------------------------------------ reading

    @property
    def signature(self) -> str:
        """What produced the cached lines: engine, version and settings."""
        if self._signature is None:
            self._signature = f"format {CACHE_FORMAT}; {self.engine.signature()}"
        return self._signature

    def _cache_file(self, digest: str) -> Path:
        tag = hashlib.sha256(self.signature.encode()).hexdigest()[:8]
        return self.cache_dir / f"{digest}.{self.engine.name}-{tag}.json"

    def _from_disk(self, digest: str) -> list[OCRLine] | None:
        if self.cache_dir is None:
            return None
        path = self._cache_file(digest)
        try:
            obj = json.loads(path.read_text())
            if obj.get("sha256") != digest or obj.get("signature") != self.signature:
                return None
            return [OCRLine(ln["text"], tuple(ln["box"]), float(ln["score"])) for ln in obj["lines"]]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("ignoring unreadable OCR cache file %s: %s", path, e)
            return None

    def _to_disk(self, digest: str, lines: list[OCRLine], source: Path) -> None:
        if self.cache_dir is None:
            return
        from esopt.io import write_json_atomic

        obj = {"sha256": digest, "signature": self.signature, "source": str(source),
               "lines": [{"text": ln.text, "box": list(ln.box), "score": round(ln.score, 4)} for ln in lines]}
        try:
            write_json_atomic(self._cache_file(digest), obj)
        except OSError as e:
            log.warning("cannot write OCR cache in %s: %s", self.cache_dir, e)

    def read(self, image_path: str | os.PathLike) -> list[OCRLine]:
        """The document's lines in reading order. Raises FileNotFoundError for a missing
        file and ValueError for one that is not a readable image."""
        path = Path(image_path)
        st = path.stat()  # FileNotFoundError for a missing image
        memo = (str(path.resolve()), st.st_mtime_ns, st.st_size)
        digest = self._hash_of.get(memo)
        if digest is not None and digest in self._by_hash:
            self.stats["memory_hits"] += 1
            return list(self._by_hash[digest])
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        lines = self._by_hash.get(digest)
        if lines is not None:
            self.stats["memory_hits"] += 1
        else:
            lines = self._from_disk(digest)
            if lines is not None:
                self.stats["disk_hits"] += 1
            else:
                try:
                    rgb = _load_rgb(data)
                except Exception as e:  # noqa: BLE001 - PIL raises many kinds
                    raise ValueError(f"{path} is not a readable image: {e}") from e
                self.stats["engine_calls"] += 1
                lines = reading_order(self.engine.pieces(rgb, path))
                self._to_disk(digest, lines, path)
            if len(self._by_hash) >= self.max_cached_images:
                self._by_hash.clear()
                self._hash_of.clear()
            self._by_hash[digest] = lines
        self._hash_of[memo] = digest
        return list(lines)

    def text(self, image_path: str | os.PathLike) -> str:
        """The whole OCR text, one line per visual line (not truncated)."""
        return "\n".join(ln.text for ln in self.read(image_path))

    # ------------------------------------------------------------------ the tool call

    def _truncate(self, lines: list[str]) -> str:
        total = sum(len(ln) for ln in lines) + max(len(lines) - 1, 0)
        if total <= self.max_chars:
            return "\n".join(lines)
        kept, used = [], 0
        for ln in lines:
            extra = len(ln) + (1 if kept else 0)
            if used + extra > self.max_chars:
                if not kept:
                    kept.append(ln[: self.max_chars])
                    used = self.max_chars
                break
            kept.append(ln)
            used += extra
        return "\n".join(kept) + "\n" + TRUNCATION_MARKER.format(shown=used, total=total)

    def __call__(self, argument: str, task: Any) -> str:
        image = getattr(task, "image", None)
        if not image:
            return "This task has no document image to read."
        try:
            lines = [ln.text for ln in self.read(image)]
        except FileNotFoundError:
            return f"The document image {Path(str(image)).name} is missing; there is nothing to read."
        except ValueError as e:
            log.warning("OCR could not read %s: %s", image, e)
            return f"The document image {Path(str(image)).name} could not be read (not a valid image)."
        except Exception as e:  # noqa: BLE001 - a tool never raises on the model's account
            log.warning("OCR failed on %s: %r", image, e)
            return f"OCR failed on the document image ({type(e).__name__}); try again or answer from what you have."
        if not lines:
            return "OCR found no text in the document."
        phrase = (argument if isinstance(argument, str) else str(argument)).strip().strip("\"'`").strip()
        if not phrase:
            return self._truncate(lines)
        want = _norm(phrase)
        hits = [ln for ln in lines if want in _norm(ln)]
        if not hits:  # OCR may have dropped (or added) spaces: compare without them
            squeezed = want.replace(" ", "")
            hits = [ln for ln in lines if squeezed in _norm(ln).replace(" ", "")]
        if not hits:
            return (f'No line of the document contains "{phrase[:80]}". '
                    "Call <ocr></ocr> with nothing inside for the whole text.")
        return self._truncate(hits)

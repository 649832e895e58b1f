"""The OCR tool on documents rendered by esopt.envs.docvqa (real rapidocr, one thread)."""

import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("rapidocr_onnxruntime")

from esopt.agent.tools.ocr import OCRLine, OCRTool, make_engine, reading_order, restore_spaces  # noqa: E402
from esopt.envs.docvqa import FORM_TITLES, DocTask, render_documents  # noqa: E402


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """One form, one receipt and one table of the test split, 2 questions each."""
    tasks = render_documents(tmp_path_factory.mktemp("docs"), 3, seed=11, split="test")
    assert {t.doc_type for t in tasks} == {"form", "receipt", "table"}
    return tasks


@pytest.fixture(scope="module")
def tool():
    return OCRTool(engine="rapidocr")


def test_ocr_reads_rendered_documents(docs, tool):
    for task in docs:
        out = tool("", task)
        assert any(a in out for a in task.answers), (task.question, task.answers, out)
    # the form's labels come back on the same line as their values, in reading order
    form = next(t for t in docs if t.doc_type == "form")
    lines = tool.text(form.image).splitlines()
    assert lines[0] in FORM_TITLES
    assert lines[1].startswith("Name: ") and lines[2].startswith("Date: ")
    receipt = next(t for t in docs if t.doc_type == "receipt")
    assert tool.text(receipt.image).splitlines()[-1].startswith("TOTAL ")


def test_read_returns_lines_in_reading_order(docs, tool):
    lines = tool.read(docs[0].image)
    assert lines and all(isinstance(ln, OCRLine) for ln in lines)
    tops = [ln.box[1] for ln in lines]
    assert tops == sorted(tops)
    assert all(0.5 <= ln.score <= 1.0 for ln in lines)


def test_phrase_filter(docs, tool):
    receipt = next(t for t in docs if t.doc_type == "receipt")
    out = tool("total", receipt)
    assert out.startswith("TOTAL ") and "\n" not in out
    assert tool('"Total"', receipt) == out  # quotes around the phrase are dropped
    assert tool("tot al", receipt) == out  # spaces are ignored when nothing matches with them
    out = tool("no such phrase xyz", receipt)
    assert "No line" in out and "no such phrase xyz" in out and "<ocr></ocr>" in out


def test_max_chars_truncates_with_a_marker(docs):
    short = OCRTool(engine="rapidocr", max_chars=60)
    out = short("", docs[0])
    body, marker = out.rsplit("\n", 1)
    assert len(body) <= 60 and "truncated" in marker


def test_missing_or_bad_image_gives_an_observation(tmp_path, tool):
    missing = DocTask(id="m", image=str(tmp_path / "gone.png"), question="?", answers=("x",), doc_type="form")
    out = tool("", missing)
    assert "missing" in out and "gone.png" in out
    (tmp_path / "junk.png").write_bytes(b"not an image at all")
    junk = dataclasses.replace(missing, image=str(tmp_path / "junk.png"))
    assert "could not be read" in tool("", junk)
    assert "no document image" in tool("", object())
    assert tool.stats["engine_calls"] >= 0  # nothing raised


def test_cache_hit_does_not_call_the_engine_again(docs, tmp_path, monkeypatch):
    t = OCRTool(engine="rapidocr", cache_dir=tmp_path / "cache")
    calls = []
    real = t.engine.pieces
    monkeypatch.setattr(t.engine, "pieces", lambda *a: calls.append(1) or real(*a))
    first = t("", docs[0])
    assert len(calls) == 1
    assert t("", docs[0]) == first and t("total", docs[0]) is not None
    assert len(calls) == 1 and t.stats["memory_hits"] >= 2
    # the same bytes under another name: found by hash
    copy = tmp_path / "copy.png"
    copy.write_bytes(Path(docs[0].image).read_bytes())
    assert t("", dataclasses.replace(docs[0], image=str(copy))) == first
    assert len(calls) == 1
    # a fresh tool (another job) finds the result on disk
    files = list((tmp_path / "cache").glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["lines"]
    fresh = OCRTool(engine="rapidocr", cache_dir=tmp_path / "cache")
    monkeypatch.setattr(fresh.engine, "pieces", lambda *a: pytest.fail("engine called despite the disk cache"))
    assert fresh("", docs[0]) == first and fresh.stats["disk_hits"] == 1


def test_engine_errors_are_clear(monkeypatch):
    with pytest.raises(ValueError, match="expected one of"):
        OCRTool(engine="abbyy")
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(RuntimeError, match=r"tesseract.*pip install rapidocr-onnxruntime"):
        make_engine("tesseract")
    import builtins

    real_import = builtins.__import__

    def no_rapidocr(name, *a, **k):
        if name.startswith("rapidocr_onnxruntime"):
            raise ImportError("No module named 'rapidocr_onnxruntime'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_rapidocr)
    with pytest.raises(ImportError, match=r"pip install rapidocr-onnxruntime"):
        OCRTool(engine="rapidocr")
    with pytest.raises(RuntimeError, match=r"no OCR engine available.*pip install rapidocr-onnxruntime"):
        OCRTool(engine="auto")


def test_rapidocr_runs_single_threaded(tool):
    assert tool.engine.threads == 1
    ocr = tool.engine._engine()
    for ort in (ocr.text_det.infer, ocr.text_cls.infer, ocr.text_rec.session):  # RapidOCR 1.4's attribute names
        opts = ort.session.get_session_options()
        assert opts.intra_op_num_threads == 1 and opts.inter_op_num_threads == 1


def test_reading_order_merges_pieces_of_one_line():
    pieces = [
        OCRLine("23.50", (400, 101, 460, 125), 0.9),
        OCRLine("TOTAL", (30, 100, 110, 126), 1.0),
        OCRLine("Date: 2023-04-17", (30, 60, 250, 84), 0.8),
        OCRLine("   ", (30, 140, 40, 150), 0.5),
    ]
    lines = reading_order(pieces)
    assert [ln.text for ln in lines] == ["Date: 2023-04-17", "TOTAL 23.50"]
    assert lines[1].box == (30, 100, 460, 126) and lines[1].score == pytest.approx(0.95)


def test_restore_spaces_uses_ink_gaps():
    import numpy as np

    gray = np.full((20, 100), 255, np.uint8)
    for x0, x1 in ((10, 18), (20, 28), (50, 58), (60, 68)):  # "ab" gap "cd": a word gap at 28..50
        gray[4:16, x0:x1] = 0
    quad = [[5, 2], [75, 2], [75, 18], [5, 18]]
    boxes = [[[x0, 2], [x1, 2], [x1, 18], [x0, 18]] for x0, x1 in ((10, 18), (20, 28), (50, 58), (60, 68))]
    assert restore_spaces(gray, quad, list("abcd"), boxes, 0.3) == "ab cd"
    assert restore_spaces(gray, quad, list("1234"), boxes, 0.3) == "12 34"  # 22 px >> 1.6 x 3.6 px
    assert restore_spaces(gray, quad, list("ab.d"), boxes, 0.3) == "ab.d"  # never before '.'
    assert restore_spaces(gray, quad, list("abc"), boxes, 0.3) == "abc"  # boxes do not match: as is


def test_tesseract_engine_parses_tsv(tmp_path, monkeypatch, docs):
    """The tesseract engine on a stand-in binary that prints a fixed TSV (tesseract is
    not installed here): words grouped by (block, paragraph, line), lines in reading order."""
    tsv = "\n".join([
        "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext",
        "1\t1\t0\t0\t0\t0\t0\t0\t600\t400\t-1\t",
        "5\t1\t1\t1\t2\t1\t30\t100\t80\t24\t95.5\tTOTAL",
        "5\t1\t1\t1\t2\t2\t400\t101\t60\t24\t91.0\t23.50",
        "5\t1\t1\t1\t1\t1\t30\t60\t60\t24\t96.0\tDate:",
        "5\t1\t1\t1\t1\t2\t100\t60\t120\t24\t90.0\t2023-04-17",
        "5\t1\t1\t1\t1\t3\t300\t60\t10\t24\t-1\t",
    ])
    fake = tmp_path / "tesseract"
    fake.write_text(f"#!/bin/sh\ncat > /dev/null\ncat <<'TSV'\n{tsv}\nTSV\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    t = OCRTool(engine="tesseract")
    assert t.engine.name == "tesseract"
    assert t("", docs[0]) == "Date: 2023-04-17\nTOTAL 23.50"
    assert t("total", docs[0]) == "TOTAL 23.50"

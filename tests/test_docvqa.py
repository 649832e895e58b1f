import json
import logging
from pathlib import Path

import pytest

from esopt.envs.docvqa import (
    NO_ANSWER_FEEDBACK,
    DocTask,
    DocVQAEnv,
    HubUnavailableError,
    anls,
    instructions,
    levenshtein,
    load_docvqa,
    render_documents,
    split_of,
)

# --- ANLS --------------------------------------------------------------------------


def test_levenshtein_small_cases():
    assert levenshtein("", "") == 0
    assert levenshtein("abc", "") == 3
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("flaw", "lawn") == 2
    assert levenshtein("23.50", "23.60") == 1


def test_anls_hand_worked_examples():
    assert anls("INV-4821", ["INV-4821"]) == 1.0
    # one substitution in a 5-character answer: NL = 1/5, score 0.8
    assert anls("23.60", ["23.50"]) == pytest.approx(0.8)
    # one deletion: NL = 1/5 (the longer string's length), score 0.8
    assert anls("23.5", ["23.50"]) == pytest.approx(0.8)
    # NL = 2/4 = 0.5 is not below the threshold: 0
    assert anls("abxy", ["abcd"]) == 0.0
    # NL = 3/5 >= 0.5: 0
    assert anls("12345", ["12999"]) == 0.0
    # NL just below 0.5 (3/7): 1 - 3/7
    assert anls("abcdxyz", ["abcdefg"]) == pytest.approx(4 / 7)


def test_anls_ignores_case_and_whitespace():
    assert anls("  maria   LOPEZ ", ["Maria Lopez"]) == 1.0
    assert anls("Maria\tLopez\n", ["maria lopez"]) == 1.0


def test_anls_is_max_over_golds():
    golds = ["$1,250.00", "1,250.00", "twelve fifty"]
    assert anls("1,250.00", golds) == 1.0
    assert anls("1,250.01", golds) == pytest.approx(1 - 1 / 8)  # nearest gold: "1,250.00"
    assert anls("nothing like it", golds) == 0.0
    assert anls("x", "x") == 1.0  # a lone string is one gold answer
    assert anls(None, golds) == 0.0


# --- rendered documents ----------------------------------------------------------


def test_render_is_deterministic_and_reused(tmp_path):
    a = render_documents(tmp_path / "a", 6, seed=3, split="train")
    b = render_documents(tmp_path / "b", 6, seed=3, split="train")
    assert len(a) == 12  # 2 questions per image
    assert [(t.id, t.question, t.answers, t.doc_type) for t in a] == \
           [(t.id, t.question, t.answers, t.doc_type) for t in b]
    images = sorted({t.image for t in a})
    assert len(images) == 6
    for ia, ib in zip(images, sorted({t.image for t in b})):
        assert Path(ia).read_bytes() == Path(ib).read_bytes()
    assert {t.doc_type for t in a} == {"form", "receipt", "table"}
    # tasks.jsonl: image paths relative to the directory, readable by the pipeline's loader
    rows = [json.loads(ln) for ln in (tmp_path / "a" / "tasks.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [t.id for t in a]
    assert all("/" not in r["image"] for r in rows)
    # a complete directory is reused as it is
    mtime = (tmp_path / "a" / "tasks.jsonl").stat().st_mtime_ns
    assert render_documents(tmp_path / "a", 6, seed=3, split="train") == a
    assert (tmp_path / "a" / "tasks.jsonl").stat().st_mtime_ns == mtime
    with pytest.raises(ValueError, match="already holds"):
        render_documents(tmp_path / "a", 6, seed=4, split="train")
    # a shorter call is a prefix of a longer one
    c = render_documents(tmp_path / "c", 3, seed=3, split="train")
    assert [t.question for t in c] == [t.question for t in a[:6]]


def test_render_answers_are_printed_strings(tmp_path):
    tasks = render_documents(tmp_path, 9, seed=0, split="test")
    for t in tasks:
        assert t.answers and all(a.strip() == a and a for a in t.answers)
        assert t.question.endswith("?")
    assert len({t.id for t in tasks}) == len(tasks)


def test_render_train_and_test_are_disjoint(tmp_path):
    train = render_documents(tmp_path / "train", 30, seed=0, split="train")
    test = render_documents(tmp_path / "test", 30, seed=0, split="eval")  # "eval" is "test"
    digest = lambda tasks: {Path(t.image).read_bytes() for t in tasks}
    assert not digest(train) & digest(test)
    assert json.loads((tmp_path / "test" / "manifest.json").read_text())["split"] == "test"
    assert split_of("anything") in ("train", "test")
    with pytest.raises(ValueError, match="split"):
        render_documents(tmp_path / "x", 1, seed=0, split="validation")


# --- the real DocVQA loaders -------------------------------------------------------


def test_load_official_json(tmp_path, caplog):
    (tmp_path / "documents").mkdir()
    (tmp_path / "documents" / "abc.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # existence is all the loader checks
    ann = {
        "dataset_name": "docvqa",
        "dataset_split": "val",
        "data": [
            {"questionId": 101, "question": "What is the date?", "image": "documents/abc.png", "docId": 7,
             "answers": ["May 5, 1998", "5 May 1998"]},
            {"questionId": 102, "question": "Who signed it?", "image": "documents/abc.png", "docId": 7,
             "answers": ["J. Smith"]},
            {"questionId": 103, "question": "What is the title?", "image": "documents/abc.png", "docId": 7},
        ],
    }
    path = tmp_path / "val_v1.0.json"
    path.write_text(json.dumps(ann))
    with caplog.at_level(logging.WARNING):
        tasks = load_docvqa(path)
    assert "without answers" in caplog.text  # question 103 has none
    assert [t.id for t in tasks] == ["docvqa-101", "docvqa-102"]
    t = tasks[0]
    assert t.question == "What is the date?"
    assert t.answers == ("May 5, 1998", "5 May 1998")
    assert t.image == str((tmp_path / "documents" / "abc.png").resolve())
    assert t.doc_type == "docvqa"
    assert load_docvqa(str(path), limit=1) == tasks[:1]


def test_load_parquet_writes_images(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import io

    import pyarrow.parquet as pq
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (40, 20), 255).save(buf, format="PNG")
    table = pa.table({
        "questionId": ["q1", "q2"],
        "question": ["What is it?", "Unanswered?"],
        "answers": [["a thing"], None],
        "image": [{"bytes": buf.getvalue(), "path": None}] * 2,
        "docId": [11, 11],
    })
    pq.write_table(table, tmp_path / "validation-00000-of-00001.parquet")
    tasks = load_docvqa(tmp_path, image_dir=tmp_path / "images")
    assert [(t.id, t.answers) for t in tasks] == [("docvqa-q1", ("a thing",))]
    assert Path(tasks[0].image).read_bytes() == buf.getvalue()


def test_hub_offline_error_is_clear(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    with pytest.raises(HubUnavailableError) as err:
        load_docvqa("lmms-lab/DocVQA", split="validation", image_dir=tmp_path / "img")
    msg = str(err.value)
    assert "lmms-lab/DocVQA" in msg and "offline" in msg and "local file" in msg and ".json" in msg
    assert isinstance(err.value, ConnectionError)


def test_missing_local_file_is_not_a_hub_id(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_docvqa(tmp_path / "nope.json")


# --- the environment -------------------------------------------------------------

TASK = DocTask(id="t0", image="/nonexistent.png", question="What is the total amount?",
               answers=("23.50",), doc_type="receipt")


def test_env_asks_for_an_answer_then_scores_it():
    env = DocVQAEnv()
    obs = env.reset(TASK)
    assert "What is the total amount?" in obs and "OCR" in obs
    obs, r, done, info = env.step("Let me think about the receipt.")
    assert (obs, r, done) == (NO_ANSWER_FEEDBACK, 0.0, False)
    assert info["invalid_actions"] == 1
    obs, r, done, info = env.step("The receipt says TOTAL 23.50.\nAnswer: 23.50")
    assert (r, done) == (1.0, True)
    assert info == {"anls": 1.0, "success": True, "answer": "23.50", "invalid_actions": 1}
    with pytest.raises(RuntimeError):
        env.step("Answer: 23.50")


def test_env_partial_and_wrong_answers():
    env = DocVQAEnv()
    env.reset(TASK)
    _, r, done, info = env.step("\\boxed{23.60}")
    assert r == pytest.approx(0.8) and done and info["success"] and info["invalid_actions"] == 0
    env.reset(TASK)
    _, r, done, info = env.step("Answer: 7")
    assert r == 0.0 and done and not info["success"]


def test_instructions_mention_the_answer_format():
    assert "Answer:" in instructions()
    assert "<ocr>" not in instructions()  # tool docs come from the ReAct wrapper
    assert len(instructions("short")) < len(instructions())

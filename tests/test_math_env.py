import contextlib
import io
import json
import logging
import threading

import pytest

from esopt.envs.math import (
    CHECKER,
    HAVE_MATH_VERIFY,
    LEVELS,
    NO_ANSWER_FEEDBACK,
    HubUnavailableError,
    MathEnv,
    MathTask,
    fallback_equivalent,
    generate_problems,
    instructions,
    is_equivalent,
    load_aime,
    load_dapo,
    normalize,
    reference_code,
    split_of,
)
from esopt.envs.math import answers as math_answers

TASK = MathTask(id="t1", question="A shop sells 37 boxes with 48 pens each and 125 loose pens. How many pens are there?",
                answer="1901", source="test", solution_code="37*48+125")
HALF = MathTask(id="t2", question="What is 1 divided by 2?", answer="\\frac{1}{2}", source="test")

GARBAGE = ["\\boxed{", "}}}{{", "", "   ", "\\frac{", "{{{{", "\\sqrt{", "$$$", "\x00\\frac{", "1/0", "\\boxed{}}",
           "(" * 50, "9" * 5000, "10^{10^{10^{10}}}", "2**2**100", "99!!!", "\\text{", "Answer:", "nan", "∞"]


# --- the environment ---------------------------------------------------------------


@pytest.mark.parametrize("reply", [
    "37*48 = 1776, plus 125 is 1901.\nAnswer: 1901",
    "So the total is \\boxed{1901}.",
    "Final answer: 1,901.",
    "Answer: $1901$",
    "The result is \\boxed{\\text{1901}}",
])
def test_correct_final_answer_ends_with_reward_one(reply):
    env = MathEnv()
    assert env.reset(TASK) == TASK.question
    obs, reward, done, info = env.step(reply)
    assert (reward, done, info["success"], info["gold"], info["invalid_actions"]) == (1.0, True, True, "1901", 0)
    assert info["answer"] is not None and isinstance(obs, str)


def test_wrong_answer_ends_with_reward_zero_and_boxed_wins():
    env = MathEnv()
    env.reset(TASK)
    _, reward, done, info = env.step("Answer: 1900")
    assert (reward, done, info["success"], info["answer"]) == (0.0, True, False, "1900")
    env.reset(TASK)
    # the last \boxed{} is the answer, even after an "Answer:" line
    _, reward, _, info = env.step("Answer: 1900\nwait, \\boxed{1901}")
    assert reward == 1.0 and info["answer"] == "1901"


def test_reply_without_answer_gets_feedback_and_is_counted():
    env = MathEnv()
    env.reset(HALF)
    for k in (1, 2):
        obs, reward, done, info = env.step("Let me think about it.")
        assert (obs, reward, done) == (NO_ANSWER_FEEDBACK, 0.0, False)
        assert info == {"success": False, "answer": None, "gold": "\\frac{1}{2}", "invalid_actions": k}
    _, reward, done, info = env.step("Answer: 0.5")
    assert (reward, done, info["success"], info["invalid_actions"]) == (1.0, True, True, 2)
    with pytest.raises(RuntimeError):
        env.step("Answer: 0.5")


def test_max_invalid_ends_episode_and_reset_clears_counts():
    env = MathEnv(max_invalid=2)
    env.reset(TASK)
    assert env.step("hmm")[2] is False
    _, reward, done, info = env.step(None)  # non-string model output never raises
    assert (reward, done, info["invalid_actions"]) == (0.0, True, 2)
    env.reset(TASK)
    assert env.step("Answer: 1901")[3]["invalid_actions"] == 0
    with pytest.raises(ValueError):
        MathEnv(max_invalid=0)


def test_step_before_reset_raises():
    with pytest.raises(RuntimeError):
        MathEnv().step("Answer: 1")


@pytest.mark.parametrize("reply", GARBAGE + ["\\boxed{\\boxed{", "Answer: \\boxed{"])
def test_env_never_raises_on_garbage(reply):
    env = MathEnv()
    env.reset(TASK)
    obs, reward, _, info = env.step(reply)
    assert reward == 0.0 and isinstance(obs, str) and info["success"] is False


def test_instructions_are_short_and_name_the_format():
    for style in ("full", "short"):
        text = instructions(style)
        assert "Answer:" in text and "<python>" not in text
    assert MathEnv(prompt_style="short").instructions() == instructions("short")
    with pytest.raises(ValueError):
        instructions("long")


# --- answer checking -------------------------------------------------------------

EQUIVALENT = [
    ("1/2", "\\frac{1}{2}"), ("0.5", "\\frac{1}{2}"), ("0.5", "1/2"), ("\\dfrac{1}{2}", "0.5"), ("-\\frac12", "-0.5"),
    ("1,234", "1234"), ("1234", "1,234"), ("$42$", "42"), ("42", "$42$"), ("\\boxed{42}", "42"), ("42.", "42"),
    ("\\text{42}", "42"), ("0.50", "0.5"), ("+7", "7"), ("3.0", "3"), (" 1 234 ", "1234"), ("\\(12\\)", "12"),
    ("\\left(1,2\\right)", "(1, 2)"),
]
NOT_EQUIVALENT = [("41", "42"), ("0.51", "0.5"), ("1/3", "1/2"), ("-42", "42"), ("12", "1,2"), ("4200", "42")]


@pytest.mark.parametrize("pred,gold", EQUIVALENT)
def test_equivalent_answers(pred, gold):
    assert is_equivalent(pred, gold)
    assert fallback_equivalent(pred, gold)


@pytest.mark.parametrize("pred,gold", NOT_EQUIVALENT)
def test_different_answers(pred, gold):
    assert not is_equivalent(pred, gold)
    assert not fallback_equivalent(pred, gold)


@pytest.mark.parametrize("pred", GARBAGE)
def test_garbage_is_false_and_never_raises(pred):
    for gold in ("42", "\\frac{1}{2}", "3\\sqrt{2}"):
        assert is_equivalent(pred, gold) is False
        assert fallback_equivalent(pred, gold) is False
        assert isinstance(normalize(pred), str)
    assert is_equivalent(None, "1") is False and is_equivalent("1", None) is False


def test_normalize():
    assert normalize("$\\boxed{1,234}$.") == "1234"
    assert normalize("\\dfrac{3}{4}") == "3/4"
    assert normalize("0.50") == "0.5" and normalize("-0.0") == "0" and normalize("007") == "7"
    assert normalize("\\pi r^2") == "\\pi r^2"  # the space that ends a command stays
    assert normalize("\\text{ Paris }") == "Paris"


def test_checker_flag():
    assert CHECKER == ("math-verify" if HAVE_MATH_VERIFY else "normalized-match")


@pytest.mark.skipif(not HAVE_MATH_VERIFY, reason="math-verify not installed")
def test_math_verify_handles_symbolic_answers_in_any_thread():
    cases = [("3\\sqrt{2}", "\\sqrt{18}", True), ("x=5", "5", True), ("2^{10}", "1024", True),
             ("2\\sqrt{2}", "\\sqrt{18}", False)]
    for pred, gold, want in cases:
        assert is_equivalent(pred, gold) is want
        assert not fallback_equivalent(pred, gold) or want  # the fallback is stricter
    # off the main thread math-verify's signal-based timeout cannot work: it must be off, not raise
    out = {}
    th = threading.Thread(target=lambda: out.update(r=[is_equivalent(p, g) for p, g, _ in cases]
                                                      + [is_equivalent("10^{10^{10}}", "42")]))
    th.start()
    th.join(timeout=30)
    assert out["r"] == [want for _, _, want in cases] + [False]


def test_without_math_verify_the_fallback_decides(monkeypatch):
    monkeypatch.setattr(math_answers, "HAVE_MATH_VERIFY", False)
    assert is_equivalent("\\frac{1}{2}", "0.5") and is_equivalent("1,234", "1234")
    assert not is_equivalent("3\\sqrt{2}", "\\sqrt{18}")  # needs sympy
    assert not is_equivalent("}}}{{", "42")


# --- generated problems ----------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
def test_generator_is_deterministic_and_prefix_stable(level):
    a = generate_problems(40, seed=3, split="train", level=level)
    assert a == generate_problems(40, seed=3, split="train", level=level)
    assert generate_problems(10, seed=3, split="train", level=level) == a[:10]
    assert a != generate_problems(40, seed=4, split="train", level=level)
    assert len({t.question for t in a}) == 40 and len({t.id for t in a}) == 40
    assert all(t.source == f"generated-{level}" and t.answer.isdigit() for t in a)


@pytest.mark.parametrize("level", LEVELS)
def test_train_and_test_are_disjoint(level):
    train = generate_problems(500, seed=0, split="train", level=level)
    test = generate_problems(200, seed=0, split="test", level=level)
    assert not {t.question for t in train} & {t.question for t in test}
    assert {split_of(t.question) for t in train} == {"train"} and {split_of(t.question) for t in test} == {"test"}
    assert generate_problems(5, seed=0, split="eval", level=level) == test[:5]  # 'eval' names the test split


@pytest.mark.parametrize("level", LEVELS)
def test_reference_code_prints_the_answer_and_numbers_are_verbatim(level):
    import re

    for task in generate_problems(60, seed=7, split="train", level=level):
        code = reference_code(task)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(code, {})
        assert buf.getvalue().strip() == task.answer
        assert "\n" not in code
        # every number of the program is written in the question
        question_numbers = set(re.findall(r"\d+", task.question))
        assert set(re.findall(r"\d+", code)) <= question_numbers, (code, task.question)
        env = MathEnv()
        env.reset(task)
        assert env.step(f"Answer: {task.answer}")[1] == 1.0


def test_levels_differ_in_size():
    basic = generate_problems(200, seed=1, split="train", level="basic")
    hard = generate_problems(200, seed=1, split="train", level="hard")
    n_ops = lambda t: sum(t.solution_code.count(op) for op in "+-*/") - t.solution_code.count("//")
    assert all(n_ops(t) == 1 for t in basic)
    assert all(n_ops(t) >= 2 for t in hard)
    assert any(not t.question.startswith("What is") for t in hard)  # word problems


def test_generator_rejects_bad_arguments():
    with pytest.raises(ValueError):
        generate_problems(1, seed=0, split="dev")
    with pytest.raises(ValueError):
        generate_problems(1, seed=0, split="train", level="olympiad")
    with pytest.raises(ValueError):
        reference_code(HALF)


# --- loaders -----------------------------------------------------------------------

DAPO_PROMPT = ("Solve the following math problem step by step. The last line of your response should be of the form "
               "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{q}\n\n"
               "Remember to put your answer on its own line after \"Answer:\".")


def _dapo_rows():
    def row(q, a, idx):
        return {"data_source": "math_dapo", "prompt": [{"content": DAPO_PROMPT.format(q=q), "role": "user"}],
                "ability": "MATH", "reward_model": {"ground_truth": a, "style": "rule-lighteval/MATH_v2"},
                "extra_info": {"index": idx}}
    return [row("What is $2+3$?", "5", "a1"), row("Find $x$ if $x^2=49$, $x>0$.", "7", "a2"),
            row("What is $2+3$?", "5", "a1-copy"),  # the hub copy repeats problems
            row("No answer here?", None, "a3"), row("Compute $10 \\cdot 10$.", "100", "a4")]


def test_load_dapo_parquet_and_jsonl(tmp_path, caplog):
    pd = pytest.importorskip("pandas")
    rows = _dapo_rows()
    pq, jl = tmp_path / "dapo.parquet", tmp_path / "dapo.jsonl"
    pd.DataFrame(rows).to_parquet(pq)
    jl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for path in (pq, str(jl)):
        with caplog.at_level(logging.WARNING, logger="esopt.envs.math"):
            tasks = load_dapo(path)
        assert [t.question for t in tasks] == ["What is $2+3$?", "Find $x$ if $x^2=49$, $x>0$.", "Compute $10 \\cdot 10$."]
        assert [t.answer for t in tasks] == ["5", "7", "100"]
        assert [t.id for t in tasks] == ["dapo-math-17k-a1", "dapo-math-17k-a2", "dapo-math-17k-a4"]
        assert all(t.source == "dapo-math-17k" and t.solution_code == "" for t in tasks)
        assert "without an answer" in caplog.text and "a3" in caplog.text
        caplog.clear()
    assert len(load_dapo(pq, limit=2)) == 2
    assert len(load_dapo(pq, dedup=False)) == 4
    assert load_dapo(pq, strip_instructions=False)[0].question.startswith("Solve the following")
    assert [t.id for t in load_dapo(tmp_path, limit=10)][:3] == [t.id for t in load_dapo(pq)]  # a folder


def test_load_dapo_with_custom_columns(tmp_path):
    path = tmp_path / "flat.json"
    path.write_text(json.dumps([{"q": "What is 6*7?", "sol": 42}, {"q": "What is 1+1?", "sol": 2.0}]))
    tasks = load_dapo(path, question_key="q", answer_key="sol", id_key="nope")
    assert [(t.question, t.answer) for t in tasks] == [("What is 6*7?", "42"), ("What is 1+1?", "2")]


def test_load_aime_jsonl_and_parquet(tmp_path, caplog):
    pd = pytest.importorskip("pandas")
    rows = [{"problem_idx": 1, "problem": "Find the remainder when $2^{10}$ is divided by 1000.", "answer": 24},
            {"problem_idx": 2, "problem": "Another problem.", "answer": None},
            {"problem_idx": 3, "problem": "Third problem.", "answer": 999}]
    jl = tmp_path / "aime.jsonl"
    jl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq = tmp_path / "aime.parquet"
    pd.DataFrame(rows).to_parquet(pq)
    for path in (jl, pq):
        with caplog.at_level(logging.WARNING, logger="esopt.envs.math"):
            tasks = load_aime(path, year=2026)
        assert [(t.id, t.answer, t.source) for t in tasks] == [("aime-2026-1", "24", "aime-2026"),
                                                               ("aime-2026-3", "999", "aime-2026")]
        assert "without an answer" in caplog.text
        caplog.clear()
    # a 'question' column instead of 'problem', and a year column filters
    multi = tmp_path / "multi.jsonl"
    multi.write_text("".join(json.dumps(r) + "\n" for r in [
        {"question": "Q2025", "answer": "5", "year": 2025}, {"question": "Q2026", "answer": "6", "year": 2026}]))
    assert [t.question for t in load_aime(multi, year=2026)] == ["Q2026"]
    assert [t.source for t in load_aime(multi)] == ["aime", "aime"]  # no year: no filter
    assert len(load_aime(jl, limit=1)) == 1
    named = tmp_path / "aime_2025.jsonl"
    named.write_text(jl.read_text())
    assert load_aime(named)[0].id == "aime-2025-1"  # the year in the file name labels the tasks


def test_missing_local_file_names_it(tmp_path):
    missing = tmp_path / "nope" / "dapo.parquet"
    with pytest.raises(FileNotFoundError, match="dapo.parquet"):
        load_dapo(missing)
    with pytest.raises(FileNotFoundError, match="aime_missing.jsonl"):
        load_aime(str(tmp_path / "aime_missing.jsonl"))


def test_offline_hub_error_is_clear_and_fast(monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_id = "esopt-test-made-up/no-such-math-dataset"
    for loader in (load_dapo, load_aime):
        with pytest.raises(HubUnavailableError) as err:
            loader(hub_id)
        msg = str(err.value)
        assert hub_id in msg and "offline" in msg and "local" in msg and loader.__name__ in msg
        assert isinstance(err.value, ConnectionError)

"""Evaluation during ES training (es.eval_every), fixed training puzzles (sudoku.train_pool)
and evaluation repeats (evaluate.repeats), on the smoke model in-process."""

import json

import pytest

from esopt.config import engine_settings, load_config
from esopt.es.distributed import Collective
from esopt.runs.episodes import combine_repeats, summarize
from esopt.runs.periodic import eval_generations
from esopt.runs.sudoku_training import train_es
from esopt.spec.sudoku import EsRun, SudokuEpisodes, SudokuEvaluation

from conftest import SMOKE


def test_evaluation_generations_follow_the_authors_schedule():
    assert eval_generations(100, 10) == {9, 19, 29, 39, 49, 59, 69, 79, 89, 99}
    assert eval_generations(25, 10) == {9, 19, 24}
    assert eval_generations(100, None) == set()


def smoke_config(**sudoku):
    cfg = load_config(SMOKE)
    cfg["es"]["generations"] = 3
    cfg["sudoku"].update(sudoku)
    return cfg


def run(cfg, model, tmp_path, name):
    resume, traj = tmp_path / name / ".resume", tmp_path / name / "trajectories"
    resume.mkdir(parents=True)
    return train_es(EsRun.from_config(cfg, 3), SudokuEpisodes.from_config(cfg), SudokuEvaluation.from_config(cfg),
                    engine_settings(cfg, "sudoku"), str(model), 4, 1, resume, traj, Collective())


def test_a_tiny_run_evaluates_at_the_due_generations_on_fixed_puzzles(tmp_path, smoke_model):
    cfg = smoke_config(train_pool=8, train_pool_seed=5)
    cfg["es"].update(eval_every=2, eval_train=True)
    cfg["evaluate"].update(episodes=4, repeats=2)
    res = run(cfg, smoke_model, tmp_path, "evals")
    evaluated = [m["generation"] for m in res.metrics if "eval" in m]
    assert evaluated == [1, 2]  # after every 2nd generation and after the last
    for m in res.metrics:
        if "eval" in m:
            assert m["eval"]["episodes"] == 8 and m["eval"]["repeats"] == 2 and len(m["eval"]["repeat_success"]) == 2
            assert m["eval_train"]["episodes"] == 16 and m["eval_wall_s"] >= 0
    # the same 8 training puzzles in every generation (member 0's kept episodes: generations 0 and 2)
    ids = {g: [json.loads(line)["task_id"] for line in (tmp_path / "evals" / "trajectories" / f"gen{g:04d}.jsonl")
                .read_text().splitlines()] for g in (0, 2)}
    assert ids[0] == ids[2] and len(set(ids[0])) == 8
    assert res.history.run["train_pool"] == 8
    # the audit: metrics.jsonl is the history's lines plus evaluations at exactly the due generations
    from esopt.provenance.derived import DerivedChecks

    assert DerivedChecks._es_metrics({"config": cfg}, res.metrics, res.history)[0] == "ok"
    moved = [{k: v for k, v in m.items() if not k.startswith("eval")} for m in res.metrics]
    moved[0] |= {k: v for k, v in res.metrics[1].items() if k.startswith("eval")}
    assert DerivedChecks._es_metrics({"config": cfg}, moved, res.history)[0] == "fail"


def test_the_default_run_evaluates_nothing_and_draws_new_puzzles(tmp_path, smoke_model):
    res = run(smoke_config(), smoke_model, tmp_path, "plain")
    assert not any("eval" in m for m in res.metrics) and "train_pool" not in res.history.run
    ids = {g: [json.loads(line)["task_id"] for line in (tmp_path / "plain" / "trajectories" / f"gen{g:04d}.jsonl")
                .read_text().splitlines()] for g in (0, 2)}
    assert ids[0] != ids[2]


def test_combined_repeats_are_the_mean_over_all_episodes():
    from esopt.agent.rollout import Trajectory

    def trajs(solved):
        return [Trajectory("t", "", "", reward=float(s), info={"success": s}) for s in solved]

    runs = [trajs([True, False, False, False]), trajs([True, True, False, False])]
    got = combine_repeats([summarize(r) for r in runs])
    whole = summarize(runs[0] + runs[1])
    assert got["success"] == whole["success"] == 0.375 and got["episodes"] == 8
    assert got["repeat_success"] == [0.25, 0.5] and got["repeat_success_std"] == pytest.approx(0.125)


def test_evaluate_repeats_the_same_puzzles_and_the_audit_recomputes_it(tmp_path, smoke_model):
    import yaml

    from esopt.cli import audit, evaluate

    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["evaluate"].update(episodes=4, repeats=3)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "h2.json"
    assert evaluate.main(["--config", str(config), "--model", str(smoke_model), "--horizon", "2", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    rows = [json.loads(line) for line in out.with_suffix(".trajectories.jsonl").read_text().splitlines()]
    assert summary["episodes"] == 12 and summary["repeats"] == 3 and len(rows) == 12
    assert [r["task_id"] for r in rows[:4]] * 3 == [r["task_id"] for r in rows]
    # one repeat is exactly the single evaluation: repeat 0 samples from the seed itself
    cfg["evaluate"].update(repeats=1)
    (tmp_path / "single.yaml").write_text(yaml.safe_dump(cfg))
    single = tmp_path / "single.json"
    assert evaluate.main(["--config", str(tmp_path / "single.yaml"), "--model", str(smoke_model), "--horizon", "2",
                          "--out", str(single)]) == 0
    first = [json.loads(line) for line in single.with_suffix(".trajectories.jsonl").read_text().splitlines()]
    assert [r["turns"] for r in first] == [r["turns"] for r in rows[:4]] and "repeats" not in json.loads(single.read_text())
    assert audit.main([str(out)]) == 0
    # what the audit recomputes: the summary from the trajectories, the episodes through the environment
    from esopt.provenance.derived import DerivedChecks

    rec = json.loads(out.with_suffix(".provenance.json").read_text())
    rec["argv"] = ["esopt", "evaluate", "--model", str(smoke_model), "--horizon", "2", "--out", str(out)]  # run in-process
    assert DerivedChecks._evaluate_summary(rec, summary, rows, None)[0] == "ok"
    assert DerivedChecks._evaluation_episodes(rec, rows)[0] == "ok"
    assert DerivedChecks._evaluate_summary(rec, summary, rows[:8], None)[0] == "fail"


def test_ranks_share_the_evaluation_and_give_what_one_process_gives(tmp_path, smoke_model):
    from esopt.models.load import load_model_and_tokenizer
    from esopt.runs.periodic import PeriodicEval

    cfg = smoke_config(train_pool=8)
    cfg["es"].update(eval_every=1, eval_train=True)
    cfg["evaluate"].update(episodes=3, repeats=2)
    model, tok = load_model_and_tokenizer(str(smoke_model))
    ev = PeriodicEval(SudokuEpisodes.from_config(cfg), SudokuEvaluation.from_config(cfg), EsRun.from_config(cfg, 3),
                      model, tok, Collective(), tmp_path / "evals.jsonl")
    one = ev.share(0, 1)
    parts = [ev.share(r, 3) for r in range(3)]
    assert [sorted(p) for p in parts] == [[("eval", 0), ("train", 1)], [("eval", 1)], [("train", 0)]]
    assert {k: v for p in parts for k, v in p.items()} == one
    row = ev(0)
    assert row["eval"]["episodes"] == 6 and row["eval_train"]["episodes"] == 16
    assert json.loads((tmp_path / "evals.jsonl").read_text())["eval"] == row["eval"]

"""Heuristic design through the real commands (smoke scale): the tiny writer, one run of
each search with and without online ES, what the runs write, and the audit (ES replay
of the writer's online updates, tampering, config sections)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from esopt.cli import audit, build_model, search_heuristics

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("ahd")
    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    cfg["ahd"]["tasks"]["aco_bpp"] = {"search": {"n": 2, "size": 12}, "test": {"n": 2, "size": 12},
                                      "params": {"n_ants": 4, "n_iterations": 2}}
    path = d / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert build_model.main(["--for", "ahd", "--config", str(path), "--out", str(d / "writer")]) == 0
    return {"dir": d, "config": str(path), "model": str(d / "writer")}


def search(s, out, task="construct_tsp", method="eoh", es=True, budget=16):
    return search_heuristics.main(["--config", s["config"], "--task", task, "--search", method, "--budget",
                                   str(budget), *(["--es"] if es else []), "--seed", "0", "--model", s["model"],
                                   "--out", str(out)])


def test_the_writer_answers_expression_prompts(setup):
    prov = json.loads((Path(setup["model"]) / "provenance.json").read_text())
    assert prov["command"] == "build-model" and prov["model"]["parameters"] > 0
    assert (Path(setup["model"]) / "model.safetensors").exists()


@pytest.mark.parametrize("method", ["eoh", "sample"])
def test_a_run_writes_its_results_and_matches_its_baseline(setup, tmp_path, method):
    for es in (False, True):
        assert search(setup, tmp_path / str(es), method=method, es=es) == 0
    base, es = (json.loads((tmp_path / f"{v}/result.json").read_text()) for v in ("False", "True"))
    for r in (base, es):
        assert r["samples"] == 16 and r["metric"] == "gap to 2-opt reference (%)"
        assert r["reference_test_objective"] is not None  # nearest neighbour on the test instances
        assert len((tmp_path / f"{r['es']}/samples.jsonl").read_text().splitlines()) == 16
        assert not (tmp_path / f"{r['es']}/.resume").exists()
    assert base["es_generations"] == 0 and not (tmp_path / "False/history.json").exists()
    assert es["es_generations"] > 0 and "final_weights_sha256" in es
    history = json.loads((tmp_path / "True/history.json").read_text())
    assert history["run"]["search"] == method and len(history["generations"]) == es["es_generations"]


def test_an_aco_task_runs_too(setup, tmp_path):
    assert search(setup, tmp_path / "bpp", task="aco_bpp", method="sample", es=False) == 0
    r = json.loads((tmp_path / "bpp/result.json").read_text())
    assert r["metric"] == "bins over the lower bound" and r["samples"] == 16


def test_audit_replays_the_writers_online_updates_and_catches_tampering(setup, tmp_path, capsys):
    out = tmp_path / "run"  # a process of its own, as the rule runs it: the record's argv names the base model
    subprocess.run([sys.executable, "-m", "esopt.cli.search_heuristics", "--config", setup["config"], "--task",
                    "construct_tsp", "--search", "eoh", "--budget", "16", "--es", "--seed", "0", "--model",
                    setup["model"], "--out", str(out)], check=True, capture_output=True)
    capsys.readouterr()
    assert audit.main([str(out)]) == 0
    text = capsys.readouterr().out
    assert "replay" in text and "as saved" in text
    cfg_path = Path(setup["config"])
    saved = cfg_path.read_text()
    try:
        cfg = yaml.safe_load(saved)
        cfg["ahd"]["budgets"].append({"samples": 16, "k": 2, "sample_batch": 2})  # another budget: not this run's
        cfg_path.write_text(yaml.safe_dump(cfg))
        assert audit.main([str(out), "--no-replay"]) == 0
        cfg["ahd"]["es"]["alpha"] = 0.5  # what the writer was updated with
        cfg_path.write_text(yaml.safe_dump(cfg))
        capsys.readouterr()
        assert audit.main([str(out), "--no-replay"]) == 1
        assert "ahd settings of the task, search and budget (and ahd.es with --es); for task construct_tsp, search eoh, budget 16, es" in capsys.readouterr().out
    finally:
        cfg_path.write_text(saved)
    result = out / "result.json"
    result.write_text(result.read_text().replace('"samples": 16', '"samples": 17'))
    assert audit.main([str(out), "--no-replay"]) == 1


def test_a_budget_not_in_the_config_is_a_clear_error(setup, tmp_path, capsys):
    assert search(setup, tmp_path / "x", budget=7) == 2
    assert "--budget 7: not one of the config's ahd.budgets [16]" in capsys.readouterr().err

"""esopt audit: a clean result passes; a tampered file, a changed config or a swapped model fails;
a config change in sections a result does not depend on (a grown grid) is a note."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from esopt.cli import audit as audit_cli
from esopt.config import load_config
from esopt.provenance.find import infer_root
from esopt.provenance.record_checks import config_diff, depends_on
from esopt.report.notebook import write_provenance

from conftest import ROOT, SMOKE

RUN = "results/train/es/run"
BASE = "results/models/smoke"
EVAL = "results/eval/run/h2.json"
EVAL_BASE = "results/eval/smoke/base/h2.json"


def esopt(cwd, *args):
    return subprocess.run([sys.executable, "-m", "esopt.cli.main", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, check=True)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """A working directory holding a real base model, ES run and evaluations of the trained
    and the base model, made by the real commands with paths relative to it (as the
    pipeline records them)."""
    wd = tmp_path_factory.mktemp("audit") / "work"
    wd.mkdir()
    cfg = yaml.safe_load(SMOKE.read_text())
    # A smoke model that sometimes places a digit, and no antithetic pairs, so that some
    # generation changes the weights and the replay check has something to replay.
    cfg["model"]["warmstart"]["steps"] = 150
    cfg["sudoku"]["reward"] = "shaped"
    cfg["es"]["antithetic"] = False
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg))
    one = ("--config", "config.yaml", "--threads", 1)
    esopt(wd, "build-model", *one, "--out", BASE)
    esopt(wd, "train-es", *one, "--horizon", 2, "--population", 4, "--seed", 1, "--model", BASE, "--out", RUN)
    esopt(wd, "evaluate", *one, "--model", f"{RUN}/model", "--horizon", 2, "--out", EVAL)
    esopt(wd, "evaluate", *one, "--model", BASE, "--horizon", 2, "--out", EVAL_BASE)
    prov = json.loads((wd / RUN / "provenance.json").read_text())
    assert prov["base_weights_sha256"] != prov["final_weights_sha256"], "the run made no update: replay would prove nothing"
    return wd


@pytest.fixture
def work(pipeline, tmp_path) -> Path:
    """A private copy (moved elsewhere: the audit must find the paths by itself)."""
    return Path(shutil.copytree(pipeline, tmp_path / "moved"))


def audit(capsys, *args) -> tuple[int, str]:
    rc = audit_cli.main([str(a) for a in args])
    return rc, capsys.readouterr().out


def failed_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("audit: FAILED:"))


def report(path: Path) -> dict:
    return json.loads(path.read_text())


def check(rep: dict, name: str) -> dict:
    return next(c for c in rep["checks"] if c["name"] == name)


@pytest.mark.slow
def test_clean_result_passes_with_a_real_replay(work, tmp_path):
    out = tmp_path / "report.json"
    res = subprocess.run([sys.executable, "-m", "esopt.cli.main", "audit", work / "results", "--json", out],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines()[-1].startswith("audit: OK:")
    rep = report(out)
    assert len(rep["records"]) == 4 and rep["ok"]
    replay = check(rep, "replay")
    assert replay["status"] == "ok" and "3 generations" in replay["detail"], replay
    assert {"config-hash", "config-file", "input", "chain", "output", "history", "base-weights",
            "saved-weights"} <= {c["name"] for c in rep["checks"] if c["status"] == "ok"}
    # the evaluation lists the training run's record as an input: chained by hash
    chain = [c for c in rep["checks"] if c["name"] == "chain" and c["target"] == f"{RUN}/provenance.json"]
    assert chain and chain[0]["status"] == "ok" and "train-es produced" in chain[0]["detail"], chain


@pytest.mark.slow
@pytest.mark.parametrize("name", ["metrics.jsonl", "budget.json"])
def test_tampered_result_file_fails_naming_it(work, capsys, name):
    f = work / RUN / name
    f.write_text(f.read_text().replace("0", "1", 1))
    rc, out = audit(capsys, work / RUN)
    assert rc == 1
    assert failed_line(out).startswith(f"audit: FAILED: output {RUN}/{name}: sha256 recorded")


@pytest.mark.slow
def test_deleted_output_fails_as_missing(work, capsys):
    (work / RUN / "history.json").unlink()
    rc, out = audit(capsys, work / RUN / "provenance.json", "--no-replay")
    assert rc == 1 and failed_line(out).startswith(f"audit: FAILED: output {RUN}/history.json: missing")


@pytest.mark.slow
def test_changed_config_fails_naming_the_config_and_key(work, capsys):
    cfg_path = work / "config.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["es"]["alpha"] = 0.02
    cfg_path.write_text(yaml.safe_dump(cfg))
    rc, out = audit(capsys, work / RUN)
    assert rc == 1
    assert failed_line(out).startswith("audit: FAILED: config-file config.yaml: differs from the recorded config: "
                                       "es.alpha: recorded 0.01, now 0.02")
    assert "✗ input         config.yaml: sha256 recorded" in out
    # evaluations do not depend on es (evaluate_base/evaluate_es pass evaluate, sudoku, agent)
    for ev in (EVAL_BASE, EVAL):
        rc, out = audit(capsys, work / ev)
        assert rc == 0, out
        assert "· config-file   config.yaml: config changed in sections this result does not depend on: es.alpha" in out
        assert "· input         config.yaml: sha256 recorded" in out
    # ... but the training run behind the ES model's evaluation does
    rc, out = audit(capsys, work / EVAL, "--upstream", "--no-replay")
    assert rc == 1 and failed_line(out).endswith(f"[{work / RUN / 'provenance.json'}]")


@pytest.mark.slow
def test_comment_only_config_edit_is_a_note(work, capsys):
    with open(work / "config.yaml", "a") as f:
        f.write("# a comment\n")
    rc, out = audit(capsys, work / EVAL)
    assert rc == 0, out
    assert "✓ config-file   config.yaml: resolves to the recorded config" in out
    assert "· input         config.yaml: sha256 recorded" in out and "not in the sections this result depends on" in out


@pytest.mark.slow
def test_a_grown_grid_is_a_note_not_a_failure(work, capsys, tmp_path):
    # what the pipeline reruns nothing for: a new ES variant, horizon, population study entry
    cfg_path = work / "config.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["es"]["variants"]["wide"] = {"horizons": [4], "sigma": {"sigma0": 0.02}}
    cfg["es"]["by_horizon"] = {4: {"alpha": 0.5}}
    cfg["es"]["populations"] = [4, 8]
    cfg["sudoku"]["horizons"] = [2, 3, 4]
    cfg["population_study"]["populations"] = [2, 4, 8]
    cfg["threads"] = 2
    cfg_path.write_text(yaml.safe_dump(cfg))
    rc, out = audit(capsys, work / "results", "--no-replay", "--json", tmp_path / "r.json")
    assert rc == 0, out
    notes = {c["record"]: c["detail"] for c in report(tmp_path / "r.json")["checks"]
             if c["name"] == "config-file" and c["status"] == "note"}
    assert len(notes) == 4, notes
    assert notes[str(work / RUN / "provenance.json")] == (
        "config changed in sections this result does not depend on: es.by_horizon, es.populations, "
        "es.variants.wide, population_study.populations, sudoku.horizons, threads")
    # the run's own horizon's settings do count
    cfg["es"]["by_horizon"] = {2: {"alpha": 0.5}}
    cfg_path.write_text(yaml.safe_dump(cfg))
    rc, out = audit(capsys, work / RUN, "--no-replay")
    line = failed_line(out)
    assert rc == 1 and "es.alpha: recorded 0.01, now 0.5 (in what train-es depends on: es as run at H*" in line
    assert "; for horizon 2" in line


@pytest.mark.slow
def test_swapped_base_model_is_caught(work, capsys, tmp_path):
    # another model of the same architecture: the trained one's weights
    shutil.copy(work / RUN / "model" / "model.safetensors", work / BASE / "model.safetensors")
    rc, out = audit(capsys, work / RUN, "--json", tmp_path / "r.json")
    assert rc == 1
    assert failed_line(out).startswith(f"audit: FAILED: input {BASE}/model.safetensors: sha256 recorded")
    rep = report(tmp_path / "r.json")
    assert check(rep, "base-weights")["status"] == "fail"
    assert check(rep, "replay")["status"] == "fail"
    # the model's own record catches it too (build-model lists every file of the model as an output)
    rc, out = audit(capsys, work / BASE)
    assert rc == 1 and failed_line(out).startswith(f"audit: FAILED: output {BASE}/model.safetensors: sha256 recorded")


@pytest.mark.slow
def test_tampered_recorded_config_is_caught(work, capsys):
    p = work / RUN / "provenance.json"
    prov = json.loads(p.read_text())
    prov["config"]["es"]["alpha"] = 0.5
    p.write_text(json.dumps(prov))
    rc, out = audit(capsys, p, "--no-replay")
    assert rc == 1 and failed_line(out).startswith("audit: FAILED: config-hash ")
    # a forger who also fixes config_sha256 is caught by the config file
    prov["config_sha256"] = hashlib.sha256(json.dumps(prov["config"], sort_keys=True).encode()).hexdigest()
    p.write_text(json.dumps(prov))
    rc, out = audit(capsys, p, "--no-replay")
    assert rc == 1
    assert failed_line(out).startswith("audit: FAILED: config-file config.yaml: the recorded config contradicts the "
                                       "file it names (which is unchanged): es.alpha: recorded 0.5, now 0.01")


@pytest.mark.slow
def test_a_new_schema_default_is_a_note_not_a_failure(work, capsys):
    # a record made by older code, whose schema did not yet fill some default the file leaves out
    p = work / RUN / "provenance.json"
    prov = json.loads(p.read_text())
    raw = yaml.safe_load((work / "config.yaml").read_text())
    key = next(k for k in prov["config"]["rl"] if k not in raw["rl"])
    del prov["config"]["rl"][key]
    prov["config_sha256"] = hashlib.sha256(json.dumps(prov["config"], sort_keys=True).encode()).hexdigest()
    p.write_text(json.dumps(prov))
    rc, out = audit(capsys, p, "--no-replay")
    assert rc == 0, out
    assert "· config-file   config.yaml: file unchanged, but the current schema fills its defaults differently" in out
    assert f"rl.{key} added" in out


@pytest.mark.slow
def test_path_forms_and_upstream(work, capsys, tmp_path):
    for target in (work / RUN / "metrics.jsonl", work / RUN / "model", work / RUN / "model" / "config.json"):
        rc, out = audit(capsys, target, "--no-replay", "--json", tmp_path / "r.json")
        assert rc == 0, out
        assert report(tmp_path / "r.json")["records"] == [str(work / RUN / "provenance.json")]
    rc, out = audit(capsys, work / EVAL, "--upstream", "--no-replay", "--json", tmp_path / "r.json")
    assert rc == 0, out
    assert report(tmp_path / "r.json")["records"] == [
        str(work / "results/eval/run/h2.provenance.json"), str(work / RUN / "provenance.json"),
        str(work / BASE / "provenance.json")]


@pytest.mark.slow
def test_root_option_and_user_errors(work, capsys, tmp_path):
    # paths recorded relative to a directory the tree no longer sits under resolve with --root
    rc, out = audit(capsys, work / RUN, "--root", work, "--no-replay")
    assert rc == 0, out
    (work / "orphan.csv").write_text("a,b\n")
    for bad in (work / "nope", work / "orphan.csv"):
        assert audit_cli.main([str(bad)]) == 2
        assert "esopt: error:" in capsys.readouterr().err
    assert audit_cli.main([str(work / RUN), "--root", str(work / "nope")]) == 2


@pytest.mark.slow
def test_older_records_pass_and_diverged_replicas_fail(work, capsys):
    p = work / RUN / "provenance.json"
    prov = json.loads(p.read_text())
    assert prov["model_device"] == "cpu" and prov["ranks"]["world_size"] == 1
    old = {k: v for k, v in prov.items() if k not in ("model_device", "ranks")}  # as older code wrote it
    p.write_text(json.dumps(old))
    rc, out = audit(capsys, p)
    assert rc == 0 and "✓ replay" in out, out
    final = prov["final_weights_sha256"]
    # a run over two ranks: its budget says so too (the audit recomputes the budget)
    b = work / RUN / "budget.json"
    b.write_text(json.dumps(json.loads(b.read_text()) | {"ranks": 2}))
    prov["outputs"][f"{RUN}/budget.json"] = hashlib.sha256(b.read_bytes()).hexdigest()
    p.write_text(json.dumps(prov | {"ranks": {"world_size": 2, "replica_weights_sha256": [final, final]}}))
    rc, out = audit(capsys, p, "--no-replay")
    assert rc == 0 and "✓ ranks" in out and "2 replicas ended at" in out, out
    p.write_text(json.dumps(prov | {"ranks": {"world_size": 2, "replica_weights_sha256": [final, "0" * 64]}}))
    rc, out = audit(capsys, p, "--no-replay")
    assert rc == 1 and failed_line(out).startswith("audit: FAILED: ranks ") and "replicas [1] of 2" in out
    # the history records which method ran: a vanilla-ES history passed off as ESOpt's fails
    h = work / RUN / "history.json"
    h.write_text(h.read_text().replace('"method": "esopt"', '"method": "es_vanilla"'))
    p.write_text(json.dumps(prov))
    rc, out = audit(capsys, p, "--no-replay")
    assert "✗ history" in out and "method 'es_vanilla', the command ran 'esopt'" in out


@pytest.mark.slow
def test_report_provenance_is_audited(work, capsys, tmp_path, monkeypatch):
    # what a report notebook's last cell does, from the pipeline root
    monkeypatch.chdir(work)
    table, figure = Path("results/tables/t.csv"), Path("results/figures/t.png")
    table.parent.mkdir(parents=True)
    figure.parent.mkdir(parents=True)
    table.write_text("method,success\nbase,0.5\n")
    figure.write_bytes(b"\x89PNG\r\n\x1a\n")
    rec = write_provenance(["results/eval/*/*/h2.json", "results/eval/run/h*.json"], [table, figure],
                           {"reference": {4: 1.0}}, name="t")
    assert rec == Path("results/tables/t.provenance.json")
    made = json.loads(rec.read_text())
    assert made["command"] == "notebook:t" and made["params"] == {"reference": {"4": 1.0}}
    assert list(made["inputs"]) == [EVAL_BASE, EVAL] and list(made["outputs"]) == [str(table), str(figure)]
    monkeypatch.chdir(ROOT)  # as the other tests: records shown as absolute paths
    for target in (work / table, work / figure):  # the figure's record lies beside the table
        rc, out = audit(capsys, target, "--json", tmp_path / "r.json")
        assert rc == 0, out
        assert report(tmp_path / "r.json")["records"] == [str(work / rec)]
    rc, out = audit(capsys, work / table, "--upstream", "--no-replay", "--json", tmp_path / "r.json")
    assert rc == 0 and len(report(tmp_path / "r.json")["records"]) == 5, out  # + 2 evaluations, the run, the model
    (work / table).write_text("method,success\nbase,0.9\n")
    rc, out = audit(capsys, work / "results", "--no-replay")
    assert rc == 1 and failed_line(out).startswith("audit: FAILED: output results/tables/t.csv: sha256 recorded")


@pytest.mark.slow
def test_large_model_skips_replay_with_a_message(work, capsys):
    rc, out = audit(capsys, work / RUN, "--max-replay-params", 10)
    assert rc == 0
    assert "- replay" in out and "--max-replay-params" in out and "esopt replay" in out
    rc, out = audit(capsys, work / RUN, "--max-replay-params", 10, "--strict")
    assert rc == 1 and failed_line(out).startswith("audit: FAILED: base-weights")


def test_config_diff_names_dotted_keys():
    a = {"es": {"alpha": 0.01, "sigma": {"sigma0": 0.1}}, "threads": 1}
    b = {"es": {"alpha": 0.02, "sigma": {"sigma0": 0.1}}, "extra": True}
    assert config_diff(a, b) == ["es.alpha: recorded 0.01, now 0.02", "extra added (true)", "threads removed (was 1)"]
    assert config_diff(a, a) == []


def test_config_sections_mirror_the_rules_params():
    cfg = load_config(SMOKE)
    view = lambda rec: depends_on(rec)[1](cfg)
    es = lambda *a: {"command": "train-es", "argv": ["esopt", "train-es", "--horizon", "3", *a]}
    assert set(view(es())) == {"es", "sudoku", "agent", "engine"} and "horizons" not in view(es())["sudoku"]
    assert view(es())["engine"] == {"name": "population", "context": 96} and "revert" not in view(es())["es"]  # revert changes no number
    assert view(es())["es"]["sigma"]["schedule"] == "cosine" and "variants" not in view(es())["es"]
    assert view(es("--variant", "vanilla"))["es"]["sigma"]["schedule"] == "constant"
    assert view(es("--variant", "sigmaT0"))["es"]["sigma"]["sigmaT"] == 0.0
    assert "seeds" not in view({"command": "train-rl", "argv": []})["rl"]
    assert set(view({"command": "evaluate", "argv": []})) == {"evaluate", "sudoku", "agent", "engine"}
    mem = view({"command": "memory", "argv": []})
    assert set(mem) == {"memory", "sudoku", "rl", "es", "agent"} and "variants" not in mem["es"]
    wide = view({"command": "build-model", "argv": ["--name", "smoke-qwen35-wide"]})
    assert wide["model"]["tiny"]["hidden_size"] == 48
    built = view({"command": "build-model", "argv": ["--name", "smoke-qwen35"]})["model"]
    # the expected interval is what the base is checked against, not how it is built
    assert built == {k: v for k, v in cfg["model"].items() if k != "expect"} and cfg["model"]["expect"]
    assert view({"command": "check-models", "argv": ["--name", "smoke-qwen35"]}) == {"expect": cfg["model"]["expect"]}
    assert depends_on({"command": "replay", "argv": []}) is None  # unknown: the whole config counts


def test_root_is_inferred_from_where_the_record_lies(tmp_path):
    prov = tmp_path / "x" / "results" / "train" / "run" / "provenance.json"
    rec = {"outputs": {"results/train/run/model/a.bin": "0", "results/train/run/history.json": "0"}}
    assert infer_root(prov, rec) == tmp_path / "x"
    assert infer_root(tmp_path / "elsewhere" / "provenance.json", rec) is None

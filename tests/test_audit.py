"""esopt audit: a clean result passes; a tampered file, a changed config or a swapped model fails."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, SMOKE
from esopt.cli import audit as audit_cli
from esopt.report.audit import config_diff, infer_root

RUN = "results/train/es/run"
BASE = "results/models/smoke"
EVAL = "results/eval/run/h2.json"


def esopt(cwd, *args):
    return subprocess.run([sys.executable, "-m", "esopt.cli.main", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, check=True)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """A working directory holding a real base model, ES run and evaluation, made by the
    real commands with paths relative to it (as the pipeline records them)."""
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
    assert len(rep["records"]) == 3 and rep["ok"]
    replay = check(rep, "replay")
    assert replay["status"] == "ok" and "3 generations" in replay["detail"], replay
    assert {"config-hash", "config-file", "input", "output", "model-weights", "history", "base-weights",
            "saved-weights"} <= {c["name"] for c in rep["checks"] if c["status"] == "ok"}


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


@pytest.mark.slow
def test_comment_only_config_edit_fails_the_input_hash_and_says_so(work, capsys):
    with open(work / "config.yaml", "a") as f:
        f.write("# a comment\n")
    rc, out = audit(capsys, work / EVAL)
    assert rc == 1
    assert "✓ config-file   config.yaml: resolves to the recorded config" in out
    assert "comments or layout were edited" in failed_line(out)


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
    # the model's own record catches it too
    rc, out = audit(capsys, work / BASE)
    assert rc == 1 and failed_line(out).startswith(f"audit: FAILED: model-weights {BASE}/model.safetensors")


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


def test_root_is_inferred_from_where_the_record_lies(tmp_path):
    prov = tmp_path / "x" / "results" / "train" / "run" / "provenance.json"
    rec = {"outputs": {"results/train/run/model/a.bin": "0", "results/train/run/history.json": "0"}}
    assert infer_root(prov, rec) == tmp_path / "x"
    assert infer_root(tmp_path / "elsewhere" / "provenance.json", rec) is None

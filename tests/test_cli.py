"""The command-line contract: kill/resume, replay, provenance, clear errors."""

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest
import yaml

from conftest import SMOKE, done_generations

pytestmark = pytest.mark.slow


def esopt(*args, check=True, **kw):
    return subprocess.run([sys.executable, "-m", "esopt.cli.main", *map(str, args)], capture_output=True, text=True, check=check, **kw)


def write_config(tmp_path, **changes):
    cfg = yaml.safe_load(SMOKE.read_text())
    for dotted, value in changes.items():
        *path, key = dotted.split(".")
        node = cfg
        for p in path:
            node = node[p]
        node[key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def train_args(config, model, out):
    return ["train-es", "--config", config, "--horizon", 2, "--population", 4, "--seed", 1, "--model", model, "--out", out]


def test_a_variant_can_decode_its_members_otherwise(tmp_path, smoke_model):
    config = write_config(tmp_path, **{"es.generations": 1, "es.member_decoding": "greedy",
                                       "es.variants": {"sampled": {"member_decoding": "sample"}}})
    runs = {}
    for name, variant in (("greedy", []), ("sampled", ["--variant", "sampled"])):
        esopt(*train_args(config, smoke_model, tmp_path / name), *variant)
        runs[name] = json.loads((tmp_path / name / "history.json").read_text())["run"]
    assert runs["greedy"]["episode"]["sampling"]["do_sample"] is False
    assert runs["sampled"]["episode"]["sampling"]["do_sample"] is True


def test_resume_after_kill_matches_uninterrupted_run(tmp_path, smoke_model):
    config = write_config(tmp_path, **{"es.generations": 14, "es.tasks_per_member": 6})
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "esopt.cli.main", *map(str, train_args(config, smoke_model, killed))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600  # generous: a loaded CI machine may be slow
    while done_generations(killed) < 4 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    at_kill = done_generations(killed)
    assert 4 <= at_kill < 14
    # nothing that looks like a finished result
    assert not (killed / "history.json").exists() and not (killed / "model").exists()

    esopt(*train_args(config, smoke_model, killed))  # resumes from .resume/
    fresh = tmp_path / "fresh"
    esopt(*train_args(config, smoke_model, fresh))

    h_killed = json.loads((killed / "history.json").read_text())
    h_fresh = json.loads((fresh / "history.json").read_text())
    assert h_killed["final"]["weights_sha256"] == h_fresh["final"]["weights_sha256"]
    strip = lambda h: [{k: v for k, v in g.items() if k != "wall_s"} for g in h["generations"]]
    assert strip(h_killed) == strip(h_fresh)
    assert not (killed / ".resume").exists()

    # replay rebuilds the saved weights from the base model and the history alone
    res = esopt("replay", "--base", smoke_model, "--history", killed / "history.json", "--out", tmp_path / "replayed")
    assert "matches the weights the run saved" in res.stdout
    assert h_fresh["final"]["weights_sha256"] in res.stdout

    prov = json.loads((fresh / "provenance.json").read_text())
    for key in ("git", "config_sha256", "inputs", "packages", "device", "wall_s", "peak_rss_bytes", "seeds"):
        assert key in prov
    assert prov["seeds"] == {"es": 1} and prov["packages"]["torch"]
    metrics = [json.loads(line) for line in (fresh / "metrics.jsonl").read_text().splitlines()]
    assert [m["generation"] for m in metrics] == list(range(14))
    assert {"sigma", "mean_reward", "max_reward", "success_rate", "wall_s"} <= set(metrics[0])


def test_evaluate_writes_summary_trajectories_and_provenance(tmp_path, smoke_model):
    out = tmp_path / "eval" / "h2.json"
    esopt("evaluate", "--config", SMOKE, "--model", smoke_model, "--horizon", 2, "--out", out, "--meta", '{"method": "base"}')
    summary = json.loads(out.read_text())
    assert summary["episodes"] == 16 and 0 <= summary["success"] <= 1 and summary["meta"] == {"method": "base"}
    lines = out.with_suffix(".trajectories.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert len(lines) == 16 and {"system", "first_observation", "turns", "reward", "num_turns"} <= set(first)
    assert json.loads(out.with_suffix(".provenance.json").read_text())["seeds"] == {"evaluate": 7}


def test_a_built_model_is_readable_by_others(smoke_model):
    # models are shared (a cluster's group, published/): every file as the umask allows,
    # not the 0600 that save_pretrained leaves on model.safetensors
    umask = os.umask(0)
    os.umask(umask)
    modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in smoke_model.iterdir()}
    assert "model.safetensors" in modes
    assert modes == dict.fromkeys(modes, 0o666 & ~umask)


def test_a_wrong_config_key_stops_with_its_name(tmp_path, smoke_model):
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["es"]["populaton"] = [4]
    cfg["sudoku"]["max_turns"] = "many"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    res = esopt(*train_args(bad, smoke_model, tmp_path / "x"), check=False)
    assert res.returncode == 2
    assert "'populaton' was unexpected" in res.stderr and "sudoku.max_turns" in res.stderr
    assert "Traceback" not in res.stderr


def test_hub_model_without_network_fails_at_once_with_how_to_prestage(tmp_path):
    config = write_config(tmp_path, **{"model.source": "hub", "model.hub": {"repo_id": "Qwen/Qwen3.5-4B", "revision": "851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a"}})
    start = time.time()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # CI may or may not resolve the hub's name: be offline either way
    res = esopt("build-model", "--config", config, "--out", tmp_path / "m", check=False, env=env)
    # the bound catches a hang or download retries, not speed: 8 s alone, past 60 s once on
    # a CPU that other jobs shared
    assert res.returncode == 2 and time.time() - start < 180
    assert "could not download Qwen/Qwen3.5-4B@851bf6e" in res.stderr
    assert "hf download Qwen/Qwen3.5-4B --revision 851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a" in res.stderr
    assert "model.local_path" in res.stderr


def test_prestaged_local_model_is_used_and_hashed(tmp_path, smoke_model):
    config = write_config(tmp_path, **{"model.source": "local", "model.local_path": str(smoke_model)})
    out = tmp_path / "models" / "staged"
    esopt("build-model", "--config", config, "--out", out)
    hashes = json.loads((out / "weights.sha256.json").read_text())
    assert list(hashes) == ["model.safetensors"] and len(hashes["model.safetensors"]) == 64

"""esopt train-es with engine.sudoku vllm: killed and resumed, replayed on the HF path.

Runs where vLLM is installed (docs/engine.md; .ci/run's engine environment); each
command starts its own engine (about a minute on 2 cores).
"""

import importlib.util
import json
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml

from conftest import SMOKE, done_generations

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]


def esopt(*args, **kw):
    return subprocess.run([sys.executable, "-m", "esopt.cli.main", *map(str, args)], capture_output=True, text=True,
                          check=True, **kw)


def test_killed_vllm_run_resumes_to_the_same_weights_and_replays_on_hf(tmp_path, qwen3_model):
    """A SIGKILLed driver takes its engine with it; an engine that dies fails the job; both
    resume to the uninterrupted run's weights, which HF replays from the history."""
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["engine"] = {"sudoku": "vllm", "vllm": {"gpu_memory_utilization": 0.1, "max_model_len": 1024}}
    # sampled members and the shaped reward: rewards differ between members, so generations update
    cfg["es"].update(generations=5, tasks_per_member=8, member_decoding="sample")
    cfg["sudoku"]["reward"] = "shaped"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))

    def args(out):
        return ["train-es", "--config", config, "--horizon", 2, "--population", 4, "--seed", 1,
                "--model", qwen3_model, "--out", out]

    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "esopt.cli.main", *map(str, args(killed))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 900
    while done_generations(killed) < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "run finished before it could be killed"
    engine_procs = psutil.Process(proc.pid).children(recursive=True)
    assert engine_procs, "the run's engine has no processes of its own?"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    gone, alive = psutil.wait_procs(engine_procs, timeout=60)  # the engine dies with its driver
    assert not alive, f"engine processes outlived their killed driver: {[p.name() for p in alive]}"
    assert 2 <= done_generations(killed) < 5 and not (killed / "model").exists()
    esopt(*args(killed))  # resumes: the history replays through the engine's workers
    fresh = tmp_path / "fresh"
    esopt(*args(fresh))

    h_killed, h_fresh = (json.loads((d / "history.json").read_text()) for d in (killed, fresh))
    assert any(g["updated"] for g in h_fresh["generations"])  # the weights moved: the comparison means something
    assert h_killed["final"]["weights_sha256"] == h_fresh["final"]["weights_sha256"]
    strip = lambda h: [{k: v for k, v in g.items() if k != "wall_s"} for g in h["generations"]]
    assert strip(h_killed) == strip(h_fresh)
    prov = json.loads((fresh / "provenance.json").read_text())
    assert prov["engine"]["name"] == "vllm" and prov["engine"]["version"]

    # the engine dies under a living driver: the job fails with the engine's error in its log,
    # and the resumed job ends where the uninterrupted one did
    dead = tmp_path / "engine_died"
    proc = subprocess.Popen([sys.executable, "-m", "esopt.cli.main", *map(str, args(dead))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 900
    while done_generations(dead) < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "run finished before its engine could be killed"
    core = [p for p in psutil.Process(proc.pid).children(recursive=True) if "EngineCore" in " ".join(p.cmdline())
            or p.name().startswith("VLLM::EngineCor")]
    assert core, [p.name() for p in psutil.Process(proc.pid).children(recursive=True)]
    core[0].kill()
    _, err = proc.communicate(timeout=600)
    assert proc.returncode != 0 and "engine process" in err, err[-2000:]
    esopt(*args(dead))
    h_dead = json.loads((dead / "history.json").read_text())
    assert h_dead["final"]["weights_sha256"] == h_fresh["final"]["weights_sha256"]

    # the HF path replays the vLLM run's history to the weights the engine ended with
    res = esopt("replay", "--base", qwen3_model, "--history", fresh / "history.json", "--out", tmp_path / "replayed")
    assert "matches the weights the run saved" in res.stdout

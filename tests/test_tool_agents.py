"""Tool agents end to end through the real commands (smoke scale, ReAct Math with the
real sandbox): data, warm-started model, the four training methods, Mean@k, and
co-evolution that uses exactly the ES rollouts and resumes exactly after a kill."""

import hashlib
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml

from esopt.cli import build_model, evaluate, prepare_data, train_agent
from esopt.runs import tool_training

ROOT = Path(__file__).resolve().parents[1]

SKILL_REPLY = "ADD [Arithmetic]: Copy every number of the question into the python call.\nREMOVE #9"


class _Analyst(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that always proposes the same edit (a real HTTP round trip)."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.path == "/v1/chat/completions" and body["messages"][-1]["role"] == "user"
        reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": SKILL_REPLY}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def analyst_url():
    server = HTTPServer(("127.0.0.1", 0), _Analyst)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


@pytest.fixture(scope="module")
def setup(tmp_path_factory, analyst_url):
    """Math-only smoke config with an HTTP analyst, its data sets and its tool model."""
    d = tmp_path_factory.mktemp("tools")
    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    ta = cfg["tool_agents"]
    del ta["benchmarks"]["docvqa"]
    ta["es"]["generations"] = 3
    ta["trace2skill"]["analyst"] = {"kind": "openai", "base_url": analyst_url, "model": "test-analyst",
                                    "max_tokens": 64}
    path = d / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    for name in ("train", "dapo"):
        assert prepare_data.main(["--config", str(path), "--benchmark", "math", "--set", name,
                                  "--out", str(d / name)]) == 0
    assert build_model.main(["--for", "tools", "--config", str(path), "--data", f"math={d / 'train'}",
                             "--out", str(d / "model")]) == 0
    return {"dir": d, "config": str(path), "model": str(d / "model"), "train": str(d / "train"), "dapo": str(d / "dapo")}


def train(s, method, out, seed=0):
    return train_agent.main(["--config", s["config"], "--method", method, "--benchmark", "math", "--seed", str(seed),
                             "--model", s["model"], "--data", s["train"], "--out", str(out)])


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_prepared_sets_and_model_carry_provenance(setup):
    d = setup["dir"]
    assert len((d / "train/tasks.jsonl").read_text().splitlines()) == 16
    prov = json.loads((d / "model/provenance.json").read_text())
    assert prov["command"] == "build-model" and prov["model"]["warmstart"]["examples"] > 0
    assert (d / "model/weights.sha256.json").exists()


@pytest.mark.parametrize("method", ["esopt", "grpo", "trace2skill"])
def test_each_method_writes_its_outputs(setup, method, tmp_path):
    out = tmp_path / method
    assert train(setup, method, out) == 0
    assert (out / "provenance.json").exists() and not (out / ".resume").exists()
    assert (out / "model").exists() == (method != "trace2skill")
    assert (out / "skill.md").exists() == (method == "trace2skill")
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == (1 if method == "grpo" else 3)
    assert json.loads((out / "provenance.json").read_text())["engine"]["name"] == "hf"  # engine.math: hf


def test_coevolution_uses_the_es_rollouts_and_no_more(setup, tmp_path, monkeypatch):
    """ESOpt + Trace2Skill calls the environment exactly as often as ESOpt alone: the
    skill is learned from the same episodes, and reaches the next generation's prompt."""
    from esopt.runs import tool_episodes

    calls = {"n": 0, "skills": []}
    real = tool_episodes.run_tool_episodes

    def counting(*a, skill="", **kw):
        calls["n"] += 1
        calls["skills"].append(skill)
        return real(*a, skill=skill, **kw)

    monkeypatch.setattr(tool_episodes, "run_tool_episodes", counting)
    assert train(setup, "esopt", tmp_path / "es") == 0
    alone = calls["n"]
    calls.update(n=0, skills=[])
    assert train(setup, "esopt_trace2skill", tmp_path / "co") == 0
    pop = yaml.safe_load(Path(setup["config"]).read_text())["tool_agents"]["es"]["population"]
    assert calls["n"] == alone == 3 * pop  # generations x population
    assert calls["skills"][:pop] == [""] * pop  # generation 0 starts without a skill
    assert all("Copy every number" in s for s in calls["skills"][pop:])
    assert "Copy every number of the question" in (tmp_path / "co/skill.md").read_text()
    lines = [json.loads(x) for x in (tmp_path / "co/skill_history.jsonl").read_text().splitlines()]
    assert [ln["generation"] for ln in lines] == [0, 1, 2]
    # each trace's analyst reply: one good ADD, one REMOVE of an item that does not exist
    assert all(ln["malformed"] == ln["traces"] for ln in lines) and lines[0]["applied"] == 1


def test_coevolution_killed_between_es_and_skill_updates_resumes_exactly(setup, tmp_path, monkeypatch):
    assert train(setup, "esopt_trace2skill", tmp_path / "whole") == 0
    real = tool_training.PromptState.update

    def dies_at_generation_1(self, t, trajs, **extra):
        if t == 1:
            raise KeyboardInterrupt("killed after the ES history of generation 1 was written")
        return real(self, t, trajs, **extra)

    monkeypatch.setattr(tool_training.PromptState, "update", dies_at_generation_1)
    with pytest.raises(KeyboardInterrupt):
        train(setup, "esopt_trace2skill", tmp_path / "killed")
    assert (tmp_path / "killed/.resume/history.json").exists()
    monkeypatch.setattr(tool_training.PromptState, "update", real)
    assert train(setup, "esopt_trace2skill", tmp_path / "killed") == 0
    for f in ("history.json", "skill.md", "skill_history.jsonl", "model/model.safetensors"):
        a, b = tmp_path / "whole" / f, tmp_path / "killed" / f
        if f == "history.json":  # wall clock differs
            strip = lambda p: [{k: v for k, v in g.items() if k != "wall_s"} for g in json.loads(p.read_text())["generations"]]
            assert strip(a) == strip(b)
        else:
            assert digest(a) == digest(b), f


def test_mean_at_k_is_the_mean_of_k_sampled_passes(setup, tmp_path):
    out = tmp_path / "ev.json"
    assert evaluate.main(["--config", setup["config"], "--benchmark", "math", "--model", setup["model"],
                          "--data", setup["dapo"], "--out", str(out),
                          "--meta", json.dumps({"method": "no_skill", "benchmark": "math", "dataset": "dapo"})]) == 0
    s = json.loads(out.read_text())
    assert s["k"] == 2 and len(s["scores"]) == 2 and s["tasks"] == 4
    assert s["mean_at_k"] == pytest.approx(sum(s["scores"]) / 2)
    trajs = out.with_suffix(".trajectories.jsonl").read_text().splitlines()
    assert len(trajs) == 2 * 4
    prov = json.loads(out.with_suffix(".provenance.json").read_text())
    assert prov["command"] == "evaluate" and prov["engine"]["name"] == "hf"


def test_audit_checks_tool_results_against_the_sections_they_depend_on(setup, tmp_path, capsys):
    from esopt.cli import audit

    out = tmp_path / "es"
    assert train(setup, "esopt", out) == 0
    assert audit.main([str(out), "--no-replay"]) == 0
    cfg_path = Path(setup["config"])
    saved = cfg_path.read_text()
    try:
        cfg = yaml.safe_load(saved)
        cfg["tool_agents"]["evaluate"]["samples"] = 8  # evaluation only: the training run still holds
        cfg_path.write_text(yaml.safe_dump(cfg))
        capsys.readouterr()
        assert audit.main([str(out), "--no-replay"]) == 0
        cfg["tool_agents"]["es"]["alpha"] = 0.5  # what the run was trained with
        cfg_path.write_text(yaml.safe_dump(cfg))
        capsys.readouterr()
        assert audit.main([str(out), "--no-replay"]) == 1
        assert "tool_agents settings on the benchmark, the episode settings, the engine when vLLM; for method esopt, benchmark math" in capsys.readouterr().out
    finally:
        cfg_path.write_text(saved)


def test_a_grpo_checkpoint_made_under_another_token_cap_is_not_resumed(setup, tmp_path, capsys):
    # The cap decides which episodes score 0, so a run continued under another one would mix two runs.
    assert train(setup, "grpo", tmp_path / "first") == 0
    ckpt = next((tmp_path / "first").rglob("checkpoint.pt"))
    cfg = yaml.safe_load(Path(setup["config"]).read_text())
    cfg["rl"]["max_total_tokens"] *= 2
    other = dict(setup, config=str(tmp_path / "cap.yaml"))
    Path(other["config"]).write_text(yaml.safe_dump(cfg))
    (tmp_path / "second" / ".resume").mkdir(parents=True)  # as if a run under the doubled cap was killed
    shutil.copy(ckpt, tmp_path / "second" / ".resume" / "checkpoint.pt")
    assert train(other, "grpo", tmp_path / "second") != 0
    assert "belongs to a different run (differs in ['max_total_tokens'])" in capsys.readouterr().err

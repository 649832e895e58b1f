"""esopt publish and published results: a grid run in pieces across sittings ends complete.

The default suite builds a tiny real result set with the real commands (the smoke base, its
evaluation, one ES run and its evaluations, as the pipeline's rules call them), publishes it,
and checks the manifest, idempotence, staleness, the audit of the published tree, and with
`snakemake -n` that the published jobs are not scheduled again. The test marked `pipeline`
(opt-in, a few minutes) runs the story with Snakemake itself: sitting 1 runs part of the DAG
and publishes, sitting 2 on a fresh copy runs only what is missing, and a third fresh copy
builds the tables from published results alone."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from esopt.config import load_config
from esopt.provenance.find import MANIFEST, PublishedTree
from esopt.provenance.published import PipelineInputs, stale, stale_settings

from conftest import ROOT

pytestmark = pytest.mark.slow

SNAKEMAKE = [sys.executable, "-m", "snakemake"]
WORKFLOW = ("Snakefile", "config", "envs", "workflow", "notebooks")
MODEL = "smoke-qwen35"
BASE = f"results/models/{MODEL}"
RUN = f"results/train/es/{MODEL}/sudoku/h2_g4_s0"
EVALS = [f"results/eval/{MODEL}/base/h2.json", f"results/eval/{MODEL}/es/h2_g4_s0/h2.json",
         f"results/eval/{MODEL}/es/h2_g4_s0/h3.json"]


def esopt(cwd, *args, check=True):
    res = subprocess.run([sys.executable, "-m", "esopt.cli.main", *map(str, args)], cwd=cwd,
                         capture_output=True, text=True)
    if check and res.returncode:
        raise AssertionError(f"esopt {' '.join(map(str, args))} failed:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
    return res


def copy_workflow(wd: Path) -> Path:
    """A fresh checkout of the workflow files (no results/, no published/): a new sitting."""
    wd.mkdir(parents=True, exist_ok=True)
    for top in WORKFLOW:
        if (ROOT / top).is_file():
            shutil.copy(ROOT / top, wd)
        else:
            shutil.copytree(ROOT / top, wd / top, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return wd


def smk(wd: Path, config: str, *args, check=True):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # esopt
    res = subprocess.run([*SNAKEMAKE, *args, "--configfile", config, "--cores", "2"], cwd=wd,
                         capture_output=True, text=True, env=env)
    if check and res.returncode:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}")
    return res


def planned(res) -> dict[str, int]:
    """Job counts of a dry run (empty when nothing is to be done)."""
    out = res.stdout + res.stderr
    if "Job stats:" not in out:
        return {}
    counts = {}
    for line in out[out.index("Job stats:"):].splitlines()[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def rule_inputs(res, rule: str) -> list[str]:
    """The input files a dry run (-n) lists for the first job of `rule`."""
    lines = (res.stdout + res.stderr).splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"rule {rule}:")
    line = next(line for line in lines[start:] if line.strip().startswith("input:"))
    return [p.strip() for p in line.split("input:", 1)[1].split(",")]


@pytest.fixture(scope="module")
def sitting(tmp_path_factory) -> Path:
    """Sitting 1: a checkout where the smoke base was built and evaluated, one ES run trained
    and evaluated at both horizons, by the real commands with the arguments the rules give
    them (paths relative to the checkout), then published."""
    wd = copy_workflow(tmp_path_factory.mktemp("sitting1") / "repo")
    cfg = ("--config", "config/smoke.yaml")
    esopt(wd, "build-model", *cfg, "--name", MODEL, "--out", BASE, "--rule", "build_model")
    esopt(wd, "evaluate", *cfg, "--model", BASE, "--benchmark", "sudoku", "--horizon", 2, "--out", EVALS[0],
          "--meta", json.dumps({"method": "base", "model": MODEL}), "--rule", "evaluate_base")
    esopt(wd, "train-es", *cfg, "--benchmark", "sudoku", "--horizon", 2, "--population", 4, "--seed", 0,
          "--model", BASE, "--out", RUN, "--rule", "train_es")
    for h, out in ((2, EVALS[1]), (3, EVALS[2])):
        meta = {"method": "esopt", "model": MODEL, "train_horizon": 2, "population": 4, "seed": 0}
        esopt(wd, "evaluate", *cfg, "--model", f"{RUN}/model", "--benchmark", "sudoku", "--horizon", h,
              "--out", out, "--meta", json.dumps(meta), "--rule", "evaluate_es")
    res = esopt(wd, "publish", *cfg)
    assert "published 18 file(s) to" in res.stdout and "model 7" in res.stdout, res.stdout
    return wd


@pytest.fixture
def fresh(sitting, tmp_path) -> Path:
    """Sitting 2: a fresh checkout (no results/) with sitting 1's published/ committed."""
    wd = copy_workflow(tmp_path / "repo")
    shutil.copytree(sitting / "published", wd / "published")
    return wd


def test_publish_copies_the_compact_outputs_with_a_manifest(sitting):
    pub = sitting / "published" / "smoke"
    files = sorted(p.relative_to(pub).as_posix() for p in pub.rglob("*") if p.is_file())
    run = RUN.removeprefix("results/")
    # 3 evaluations + their records, the ES run's history, metrics, budget and record, the base's
    # build: its record and every file it made (a tiny model, under published.model_mib)
    base = sorted(p.relative_to(sitting / "results").as_posix() for p in (sitting / BASE).iterdir())
    assert len(base) == 8 and f"models/{MODEL}/model.safetensors" in base
    assert files == sorted([MANIFEST, *(e.removeprefix("results/") for e in EVALS),
                            *(e.removeprefix("results/").replace(".json", ".provenance.json") for e in EVALS),
                            f"{run}/history.json", f"{run}/metrics.jsonl", f"{run}/budget.json",
                            f"{run}/provenance.json", *base])
    # never trained weights, checkpoints or trajectories
    assert not any("/model/" in f or "trajectories" in f or f.endswith(".pt") for f in files)
    manifest = json.loads((pub / MANIFEST).read_text())
    rec = json.loads((sitting / RUN / "provenance.json").read_text())
    entry = manifest["files"][f"{run}/history.json"]
    assert entry["kind"] == "history" and entry["record"] == f"{run}/provenance.json"
    assert entry["commit"] == rec["git"]["commit"] and entry["config_sha256"] == rec["config_sha256"]
    assert manifest["command"] == ["esopt", "publish", "--config", "config/smoke.yaml"]
    assert manifest["root"] == "../.." and manifest["results"] == "results"
    for rel, e in manifest["files"].items():
        assert (pub / rel).read_bytes() == (sitting / "results" / rel).read_bytes(), rel
        assert e["sha256"] == hashlib.sha256((pub / rel).read_bytes()).hexdigest()


def test_publishing_again_changes_nothing(sitting):
    manifest = sitting / "published" / "smoke" / MANIFEST
    before = (manifest.read_bytes(), manifest.stat().st_mtime_ns)
    res = esopt(sitting, "publish", "--config", "config/smoke.yaml")
    assert "published 0 file(s)" in res.stdout and "18 already there, unchanged" in res.stdout
    assert (manifest.read_bytes(), manifest.stat().st_mtime_ns) == before


def test_published_jobs_are_not_scheduled_again(fresh):
    res = smk(fresh, "config/smoke.yaml", "-n", "results/tables/sudoku_es.csv", "results/checks/smoke-qwen35.json")
    jobs = planned(res)
    # the base at H*=2 and the H*=2 run (trained, evaluated at both horizons) come from published/;
    # the base at H*=3 and the H*=3 run and its evaluations remain (and the base model they need)
    assert jobs == {"build_model": 1, "evaluate_base": 1, "train_es": 1, "evaluate_es": 2, "report_sudoku": 1,
                    "check_models": 1, "total": 7}
    published = [f"published/smoke/{e.removeprefix('results/')}" for e in EVALS]
    assert [p for p in rule_inputs(res, "report_sudoku") if "/eval/" in p] == [
        published[0], f"results/eval/{MODEL}/base/h3.json", *published[1:],
        f"results/eval/{MODEL}/es/h3_g4_s0/h2.json", f"results/eval/{MODEL}/es/h3_g4_s0/h3.json"]
    assert rule_inputs(res, "check_models")[1] == f"published/smoke/eval/{MODEL}/base/h2.json"


def test_a_changed_setting_makes_the_published_job_stale(fresh):
    cfg = yaml.safe_load((fresh / "config/smoke.yaml").read_text())
    cfg["es"]["alpha"] = 0.02  # train-es reads it; the base evaluation does not
    (fresh / "config/changed.yaml").write_text(yaml.safe_dump(cfg))
    jobs = planned(smk(fresh, "config/changed.yaml", "-n", "results/tables/sudoku_es.csv"))
    # both ES runs train again and every ES evaluation runs (their upstream run is stale); the base's stays
    assert jobs == {"build_model": 1, "evaluate_base": 1, "train_es": 2, "evaluate_es": 4, "report_sudoku": 1,
                    "total": 9}
    config = load_config(fresh / "config/changed.yaml")
    tree = PublishedTree.open(fresh / "published/smoke")
    run = RUN.removeprefix("results/")
    assert stale_settings(json.loads((fresh / "published/smoke" / run / "provenance.json").read_text()), config) \
        == "settings differ at es.alpha"
    assert "es.alpha" in stale(tree, EVALS[1].removeprefix("results/").replace(".json", ".provenance.json"), config)
    assert stale(tree, EVALS[0].removeprefix("results/").replace(".json", ".provenance.json"), config) is None
    inputs = PipelineInputs(config, fresh)
    assert [inputs(e) for e in EVALS] == [f"published/smoke/{EVALS[0].removeprefix('results/')}", *EVALS[1:]]
    # use: false ignores published results
    off = load_config(fresh / "config/smoke.yaml") | {"published": {"dir": "published", "use": False}}
    assert PipelineInputs(off, fresh)(EVALS[0]) == EVALS[0]


def test_an_evaluation_of_another_run_of_its_training_job_is_stale(fresh):
    """A published evaluation whose training run was replaced by another run (other weights) is
    not used, even though every settings section still matches."""
    run = fresh / "published/smoke" / RUN.removeprefix("results/") / "provenance.json"
    rec = json.loads(run.read_text())
    weights = next(k for k in rec["outputs"] if k.endswith("model/model.safetensors"))
    rec["outputs"][weights] = "0" * 64  # the run now names other weights than the evaluation read
    run.write_text(json.dumps(rec))
    config = load_config(fresh / "config/smoke.yaml")
    tree = PublishedTree.open(fresh / "published/smoke")
    why = stale(tree, EVALS[1].removeprefix("results/").replace(".json", ".provenance.json"), config)
    assert why == f"made from another run of {RUN}/provenance.json than the published one"
    inputs = PipelineInputs(config, fresh)
    assert inputs(EVALS[1]) == EVALS[1] and inputs(EVALS[0]) == f"published/smoke/{EVALS[0].removeprefix('results/')}"


def test_an_edited_published_file_is_not_used_and_fails_the_audit(fresh, capsys, monkeypatch):
    from esopt.cli import audit as audit_cli

    ev = fresh / "published/smoke" / EVALS[0].removeprefix("results/")
    summary = json.loads(ev.read_text())
    summary["success_rate"] = 1.0
    ev.write_text(json.dumps(summary))
    assert PipelineInputs(load_config(fresh / "config/smoke.yaml"), fresh)(EVALS[0]) == EVALS[0]
    monkeypatch.chdir(fresh)
    rc = audit_cli.main(["published/smoke", "-q"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "manifest      published/smoke: 1 of 18 listed file(s) differ from MANIFEST.json" in out
    assert f"✗ output        {EVALS[0]}: sha256 recorded" in out


def test_audit_of_the_published_tree(sitting, fresh, capsys, monkeypatch):
    from esopt.cli import audit as audit_cli

    # a fresh checkout: the base model is published with the tree, so the history replays onto it
    # bit for bit; RL-free, so every weight note is ES's
    monkeypatch.chdir(fresh)
    rc = audit_cli.main(["published/smoke", "--json", "audit.json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    checks = json.loads((fresh / "audit.json").read_text())["checks"]
    by = lambda name: [c for c in checks if c["name"] == name]
    assert [c["status"] for c in by("manifest")] == ["ok"] and [c["status"] for c in by("commit")] == ["ok"]
    assert {c["status"] for c in by("config-file")} <= {"ok", "note"}
    assert [c["status"] for c in by("replay")] == ["ok"], by("replay")
    assert {c["status"] for c in by("model-weights") + by("base-weights")} == {"ok"}
    saved = by("saved-weights")
    assert len(saved) == 1 and saved[0]["status"] == "note" and "not published" in saved[0]["detail"]
    assert {c["status"] for c in by("history") + by("updates") + by("metrics") + by("budget")} == {"ok"}
    # in sitting 1's checkout the base model is there: the history replays onto it, bit for bit
    monkeypatch.chdir(sitting)
    rc = audit_cli.main(["published/smoke", "--json", "audit.json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    replay = [c for c in json.loads((sitting / "audit.json").read_text())["checks"] if c["name"] == "replay"]
    assert [c["status"] for c in replay] == ["ok"], replay
    (sitting / "audit.json").unlink()


def test_a_fresh_checkout_restores_the_published_base(sitting, fresh):
    """build-model on a fresh clone (another sitting, maybe another CPU type, whose warm start
    would make another base) restores the published build byte for byte, its record with it."""
    res = esopt(fresh, "build-model", "--config", "config/smoke.yaml", "--name", MODEL, "--out", BASE,
                "--rule", "build_model")
    assert "from its published build" in res.stderr, res.stderr[-2000:]
    built = sorted(p.name for p in (sitting / BASE).iterdir())
    assert sorted(p.name for p in (fresh / BASE).iterdir()) == built
    for name in built:
        assert (fresh / BASE / name).read_bytes() == (sitting / BASE / name).read_bytes(), name
    # nothing of it is published again; a stale build (another setting) is built, not restored
    assert "published 0 file(s)" in esopt(fresh, "publish", "--config", "config/smoke.yaml").stdout
    cfg = yaml.safe_load((fresh / "config/smoke.yaml").read_text())
    cfg["model"]["warmstart"]["steps"] += 1
    (fresh / "config/changed.yaml").write_text(yaml.safe_dump(cfg))
    from esopt.provenance.published import restore_model
    assert restore_model(load_config(fresh / "config/changed.yaml"), BASE, fresh) is None


def test_a_model_build_over_the_size_limit_publishes_its_record_only(sitting, tmp_path, capsys, monkeypatch):
    from esopt.cli import audit as audit_cli

    wd = copy_workflow(tmp_path / "repo")
    shutil.copytree(sitting / "results", wd / "results")
    cfg = yaml.safe_load((wd / "config/smoke.yaml").read_text())
    cfg["published"] = {"model_mib": 0}  # not a setting of any job: the records stay fresh
    (wd / "config/smoke.yaml").write_text(yaml.safe_dump(cfg))
    res = esopt(wd, "publish", "--config", "config/smoke.yaml")
    assert "published 11 file(s)" in res.stdout and "the record only of 1 model build(s)" in res.stdout, res.stdout
    shutil.rmtree(wd / "results")  # a fresh checkout: no base to replay onto, said so
    monkeypatch.chdir(wd)
    assert audit_cli.main(["published/smoke", "--json", "audit.json"]) == 0, capsys.readouterr().out
    replay = [c for c in json.loads((wd / "audit.json").read_text())["checks"] if c["name"] == "replay"]
    assert len(replay) == 1 and replay[0]["status"] == "skip" and "base model not present" in replay[0]["detail"]


def test_an_unfinished_es_run_is_continued_in_the_next_sitting(sitting, tmp_path):
    """A sitting stopped an ES run after its first generation: `esopt publish` keeps the run's
    resume history under partial/; train-es in the next sitting, on a fresh copy, continues
    it to the history and weights of the uninterrupted run; publishing the finished run
    removes the partial one. The base is copied, not rebuilt: build_model makes the same."""
    from esopt.es.history import History

    train = ("train-es", "--config", "config/smoke.yaml", "--benchmark", "sudoku", "--horizon", 2,
             "--population", 4, "--seed", 0, "--model", BASE, "--out", RUN, "--rule", "train_es")
    run = RUN.removeprefix("results/")
    whole = History.load(sitting / RUN / "history.json")

    one = copy_workflow(tmp_path / "one")
    shutil.copytree(sitting / BASE, one / BASE)
    # what the trainer leaves in .resume/ once generation 0 is done (it saves after each one)
    History(whole.run, whole.generations[:1]).save(one / RUN / ".resume" / "history.json")
    res = esopt(one, "publish", "--config", "config/smoke.yaml")
    assert "published 1 unfinished run(s) as partial runs" in res.stdout and f"{run} (1 generations)" in res.stdout
    pub = one / "published/smoke"
    manifest = json.loads((pub / MANIFEST).read_text())
    assert manifest["partial"][run]["generations"] == 1
    assert (pub / "partial" / run / "history.json").read_bytes() == (one / RUN / ".resume/history.json").read_bytes()
    before = (pub / MANIFEST).read_bytes()
    res = esopt(one, "publish", "--config", "config/smoke.yaml")  # again: nothing changes, the partial run stays
    assert "published 0 file(s)" in res.stdout and "partial" not in res.stdout and (pub / MANIFEST).read_bytes() == before
    audit = esopt(one, "audit", "published/smoke")
    assert audit.returncode == 0 and "1 unfinished run(s) published as partial runs" in audit.stdout, audit.stdout
    bare = tmp_path / "bare"  # a first sitting that finished nothing: partial runs, no record
    shutil.copytree(pub / "partial", bare / "published/smoke/partial")
    (bare / "published/smoke" / MANIFEST).write_text(json.dumps({**manifest, "files": {}}))
    audit = esopt(bare, "audit", "published/smoke", check=False)
    assert audit.returncode == 0 and f"{run} (1 generations)" in audit.stdout, audit.stdout + audit.stderr
    assert "every file is a record or an output one lists" in audit.stdout
    (bare / "published/smoke/partial" / run / "history.json").write_text("{}")
    assert esopt(bare, "audit", "published/smoke", check=False).returncode == 1

    two = copy_workflow(tmp_path / "two")
    shutil.copytree(pub, two / "published/smoke")
    shutil.copytree(sitting / BASE, two / BASE)
    res = esopt(two, *train)
    assert "continued from" in res.stderr and "after 1 generations" in res.stderr, res.stderr[-3000:]
    rec = json.loads((two / RUN / "provenance.json").read_text())
    assert rec["continued_from"] == {"history": f"published/smoke/partial/{run}/history.json",
                                     "sha256": manifest["partial"][run]["sha256"], "generations": 1}
    done = History.load(two / RUN / "history.json")
    assert done.final == whole.final
    strip = lambda h: [{k: v for k, v in asdict(g).items() if k != "wall_s"} for g in h.generations]
    assert strip(done) == strip(whole)

    res = esopt(two, "publish", "--config", "config/smoke.yaml")
    assert f"removed 1 partial run(s) whose finished run is published: {run}" in res.stdout, res.stdout
    manifest = json.loads((two / "published/smoke" / MANIFEST).read_text())
    assert "partial" not in manifest and f"{run}/history.json" in manifest["files"]
    assert not (two / "published/smoke/partial" / run).exists()
    assert esopt(two, "audit", "published/smoke", "-q").returncode == 0


def test_an_unfinished_rl_run_is_continued_in_the_next_sitting(sitting, tmp_path):
    """A sitting was killed during an RL run (an RL run cannot be replayed, so its resume
    checkpoint is what a later sitting needs): `esopt publish` keeps the checkpoint under
    partial/; train-rl in the next sitting, on a fresh copy, continues it to the weights and
    metrics of the uninterrupted run; publishing the finished run removes the partial one."""
    import signal
    import time

    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    cfg["rl"]["steps"] = 3  # a kill after the first or second step leaves a step to continue
    run_dir = f"results/train/ppo/{MODEL}/sudoku/h2_s0"
    run = run_dir.removeprefix("results/")
    train = [sys.executable, "-m", "esopt.cli.main", "train-rl", "--config", "config/smoke.yaml", "--algo", "ppo",
             "--benchmark", "sudoku", "--horizon", "2", "--seed", "0", "--model", BASE, "--out", run_dir,
             "--rule", "train_rl"]

    def checkout(name: str) -> Path:
        wd = copy_workflow(tmp_path / name)
        (wd / "config/smoke.yaml").write_text(yaml.safe_dump(cfg))
        shutil.copytree(sitting / BASE, wd / BASE)
        return wd

    whole = checkout("whole")
    esopt(whole, *train[3:])
    straight = json.loads((whole / run_dir / "provenance.json").read_text())

    one = checkout("one")  # the sitting that was stopped: killed once a step is checkpointed
    ckpt = one / run_dir / ".resume/checkpoint.pt"
    proc = subprocess.Popen(train, cwd=one, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    steps = torch_load(ckpt)["step"]
    assert 1 <= steps < 3 and not (one / run_dir / "provenance.json").exists()
    res = esopt(one, "publish", "--config", "config/smoke.yaml")
    assert f"{run} ({steps} steps)" in res.stdout and "published 1 unfinished run(s) as partial runs" in res.stdout, res.stdout
    pub = one / "published/smoke"
    manifest = json.loads((pub / MANIFEST).read_text())
    assert manifest["partial"][run]["file"] == "checkpoint.pt" and manifest["partial"][run]["steps"] == steps
    assert (pub / "partial" / run / "checkpoint.pt").read_bytes() == ckpt.read_bytes()
    audit = esopt(one, "audit", "published/smoke")
    assert f"{run} ({steps} steps)" in audit.stdout, audit.stdout
    over = dict(cfg, published={"checkpoint_mib": 0})  # a checkpoint over the limit stays where it is
    (one / "config/over.yaml").write_text(yaml.safe_dump(over))
    res = esopt(one, "publish", "--config", "config/over.yaml", "--to", tmp_path / "over")
    assert "over published.checkpoint_mib" in res.stdout and not (tmp_path / "over/partial").exists(), res.stdout

    two = checkout("two")
    shutil.copytree(pub, two / "published/smoke")
    res = esopt(two, *train[3:])
    assert f"continued from published/smoke/partial/{run}/checkpoint.pt after {steps} steps" in res.stderr, res.stderr[-3000:]
    rec = json.loads((two / run_dir / "provenance.json").read_text())
    assert rec["continued_from"] == {"checkpoint": f"published/smoke/partial/{run}/checkpoint.pt",
                                     "sha256": manifest["partial"][run]["sha256"], "steps": steps}
    assert rec["final_weights_sha256"] == straight["final_weights_sha256"]
    metrics = lambda wd: [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")}
                          for line in (wd / run_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics(two) == metrics(whole) and len(metrics(two)) == 3
    res = esopt(two, "publish", "--config", "config/smoke.yaml")
    assert f"removed 1 partial run(s) whose finished run is published: {run}" in res.stdout, res.stdout
    manifest = json.loads((two / "published/smoke" / MANIFEST).read_text())
    assert "partial" not in manifest and f"{run}/metrics.jsonl" in manifest["files"]
    assert not (two / "published/smoke/partial").exists()
    audit = esopt(two, "audit", "published/smoke")
    assert f"continued after {steps} steps of an earlier sitting" in audit.stdout, audit.stdout


def torch_load(path):
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.mark.pipeline
def test_a_grid_run_in_pieces_ends_complete(tmp_path):
    """Sitting 1 runs part of a small grid and publishes; sitting 2, on a fresh copy with the
    published results, runs only what is missing, builds every table, publishes; a third
    fresh copy has nothing to train: only the reports (and the base's check) run."""
    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    cfg["sudoku"]["horizons"] = [2]
    cfg["es"]["variants"] = {"vanilla": {"horizons": None, "sigma": {"schedule": "constant"}}}
    cfg["rl"]["methods"] = ["grpo"]
    for block in ("population_study", "memory", "tool_agents", "web", "ahd"):
        cfg.pop(block, None)
    config = "config/pieces.yaml"

    one = copy_workflow(tmp_path / "one")
    (one / config).write_text(yaml.safe_dump(cfg))
    smk(one, config, f"results/eval/{MODEL}/base/h2.json", f"results/eval/{MODEL}/es/h2_g4_s0/h2.json")
    assert "published 16 file(s)" in esopt(one, "publish", "--config", config).stdout  # 7 of them the base's

    two = copy_workflow(tmp_path / "two")
    (two / config).write_text(yaml.safe_dump(cfg))
    shutil.copytree(one / "published", two / "published")
    jobs = planned(smk(two, config, "-n"))
    assert "evaluate_base" not in jobs and jobs["train_es"] == 1 and jobs["evaluate_es"] == 1  # vanilla's only
    smk(two, config)
    # the base was restored, not built again: the same bytes whatever CPU sitting two runs on
    assert "from its published build" in (two / f"results/logs/build_model/{MODEL}.log").read_text()
    assert (two / BASE / "model.safetensors").read_bytes() == (one / BASE / "model.safetensors").read_bytes()
    tables = json.loads((two / "results/tables/sudoku_es.provenance.json").read_text())["inputs"]
    assert f"published/smoke/eval/{MODEL}/es/h2_g4_s0/h2.json" in tables  # the notebook read the published copy
    esopt(two, "publish", "--config", config)
    assert esopt(two, "audit", "published/smoke", "-q").returncode == 0
    assert esopt(two, "audit", "results/tables", "--upstream", "-q").returncode == 0

    three = copy_workflow(tmp_path / "three")
    (three / config).write_text(yaml.safe_dump(cfg))
    shutil.copytree(two / "published", three / "published")
    jobs = planned(smk(three, config, "-n"))
    assert not {"build_model", "train_es", "train_rl", "evaluate_base", "evaluate_es", "evaluate_rl"} & set(jobs), jobs
    smk(three, config)
    assert (three / "results/tables/sudoku_methods.csv").stat().st_size > 0


def test_a_recorded_absolute_path_from_a_checkout_that_is_gone_is_read_under_the_root(tmp_path):
    # Snakemake records --configfile absolute: a record published from an earlier sitting's
    # worktree names a config file that is gone on a fresh clone, which has it at the same tail
    from esopt.provenance.find import FORMAT

    root = tmp_path / "repo"
    (root / "published/grid").mkdir(parents=True)
    (root / "published/grid" / MANIFEST).write_text(json.dumps({"format": FORMAT, "files": {}}))
    (root / "config").mkdir()
    (root / "config/grid.yaml").write_text("name: grid\n")
    tree = PublishedTree.open(root / "published/grid")
    assert tree.local("/gone/wt/sitting3/config/grid.yaml") == root / "config/grid.yaml"
    assert tree.local(root / "config/grid.yaml") == root / "config/grid.yaml"  # still there: itself
    assert tree.local("/gone/wt/sitting3/config/other.yaml") == Path("/gone/wt/sitting3/config/other.yaml")

"""esopt audit recomputes what can be recomputed: a value forged together with every hash
that records it (in every record, so the hash checks pass) still fails, naming what was
forged; a deleted record or output is flagged; a record made from another tree says which
files differ."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from esopt.cli import audit as audit_cli
from esopt.config import config_sha256
from esopt.es.history import GenerationRecord, History
from esopt.provenance.code_state import Checkout
from esopt.provenance.derived import trajectories_of
from esopt.provenance.record import git_state
from esopt.report.notebook import write_provenance
from esopt.runs.episodes import summarize

from conftest import SMOKE

pytestmark = pytest.mark.slow

RUN = "results/train/es/run"
RL = "results/train/grpo/run"
BASE = "results/models/smoke"
EVAL = "results/eval/run/h2.json"
EVAL_TRAJ = "results/eval/run/h2.trajectories.jsonl"


def esopt(cwd, *args):
    return subprocess.run([sys.executable, "-m", "esopt.cli.main", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, check=True)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """A base model, an ES run (3 generations, one of which moves the weights), an RL run and
    an evaluation of the ES model, made by the real commands (as tests/test_audit.py's)."""
    wd = tmp_path_factory.mktemp("forgery") / "work"
    wd.mkdir()
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["model"]["warmstart"]["steps"] = 150
    cfg["sudoku"]["reward"] = "shaped"
    cfg["es"]["antithetic"] = False
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg))
    one = ("--config", "config.yaml", "--threads", 1)
    esopt(wd, "build-model", *one, "--out", BASE)
    esopt(wd, "train-es", *one, "--horizon", 2, "--population", 4, "--seed", 1, "--model", BASE, "--out", RUN)
    esopt(wd, "train-rl", *one, "--algo", "grpo", "--horizon", 2, "--seed", 0, "--model", BASE, "--out", RL)
    esopt(wd, "evaluate", *one, "--model", f"{RUN}/model", "--horizon", 2, "--out", EVAL)
    return wd


@pytest.fixture
def work(pipeline, tmp_path) -> Path:
    return Path(shutil.copytree(pipeline, tmp_path / "w"))


def audit(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    rc = audit_cli.main([str(a) for a in args])
    return rc, capsys.readouterr().out


def failed_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("audit: FAILED:"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fix_hashes(wd: Path) -> None:
    """What a forger who knows the formats does after editing results: every sha256 that any
    record holds (inputs, outputs, a model build's weights_sha256, config_sha256) and every
    weights.sha256.json made that of the file now, entries of deleted files dropped, over and
    over until nothing changes (a record's own hash is an input of the records after it)."""
    for ws in wd.rglob("weights.sha256.json"):
        hashes = json.loads(ws.read_text())
        if hashes != (now := {f: sha256(ws.parent / f) for f in hashes}):
            ws.write_text(json.dumps(now))
    records = [p for p in wd.rglob("*provenance.json") if ".resume" not in p.parts]
    changed = True
    while changed:
        changed = False
        for p in records:
            rec = json.loads(p.read_text())
            before = json.dumps(rec, sort_keys=True)
            for key in ("inputs", "outputs"):
                rec[key] = {f: sha256(wd / f) for f in rec[key] if (wd / f).is_file()}
            if isinstance(rec.get("weights_sha256"), dict):
                out = wd / rec["argv"][rec["argv"].index("--out") + 1]
                rec["weights_sha256"] = {f: sha256(out / f) for f in rec["weights_sha256"] if (out / f).is_file()}
            rec["config_sha256"] = config_sha256(rec["config"])
            if json.dumps(rec, sort_keys=True) != before:
                p.write_text(json.dumps(rec, indent=1))
                changed = True


def assert_hashes_pass(out: str) -> None:
    """The forgery got past every hash check: what fails is a recomputation."""
    for name in ("input", "output", "chain", "config-hash", "model-weights"):
        assert f"✗ {name} " not in out, out


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def forge_history(wd: Path, edit, renormalize: bool) -> History:
    """Edit the ES run's history, then make what derives from it agree: each generation's
    metrics line, and with `renormalize` its normalized rewards and update flag too."""
    h = History.load(wd / RUN / "history.json")
    edit(h)
    if renormalize:
        for g in h.generations:
            up = h.update_of(g)
            g.normalized, g.updated = up.normalized, up.updated
    h.save(wd / RUN / "history.json")
    write_jsonl(wd / RUN / "metrics.jsonl", [g.metrics() for g in h.generations])
    return h


def test_honest_runs_pass_every_recomputation(work, capsys, tmp_path):
    rc, out = audit(capsys, work / "results", "--json", tmp_path / "r.json")
    assert rc == 0, out
    ok = {c["name"] for c in json.loads((tmp_path / "r.json").read_text())["checks"] if c["status"] == "ok"}
    assert {"outputs", "es-settings", "updates", "rewards", "episodes", "metrics", "budget", "summary", "replay",
            "coverage"} <= ok


def test_a_forged_raw_reward_fails_naming_the_generation(work, capsys):
    # a member of a generation that did not move the weights "did better"; metrics agree, hashes fixed
    def edit(h):
        h.generations[1].rewards[2] += 0.5
    forge_history(work, edit, renormalize=False)
    fix_hashes(work)
    rc, out = audit(capsys, work / RUN)
    assert rc == 1
    assert_hashes_pass(out)
    line = failed_line(out)
    assert line.startswith(f"audit: FAILED: updates {RUN}/history.json: generation 1: normalized rewards ")
    assert "recorded, zscore of the raw rewards" in line
    assert "✗ replay " in out  # the replay makes its updates from the raw rewards: it moves the weights elsewhere


def test_a_forged_reward_normalized_consistently_fails_the_replay(work, capsys):
    def edit(h):
        h.generations[1].rewards[2] += 0.5
    forge_history(work, edit, renormalize=True)
    fix_hashes(work)
    rc, out = audit(capsys, work / RUN)
    assert rc == 1
    assert_hashes_pass(out)
    assert "✓ updates " in out and "✓ metrics " in out
    assert failed_line(out).startswith(f"audit: FAILED: replay {RUN}/history.json: 3 generations on cpu")
    assert "the run saved" in failed_line(out)


def test_a_forged_member_reward_fails_against_its_trajectories_without_a_replay(work, capsys):
    real = History.load(work / RUN / "history.json").generations[0].rewards[0]

    def edit(h):
        h.generations[0].rewards[0] = real + 0.5
    forge_history(work, edit, renormalize=True)
    fix_hashes(work)
    rc, out = audit(capsys, work / RUN, "--no-replay")
    assert rc == 1
    assert_hashes_pass(out)
    assert failed_line(out).startswith(f"audit: FAILED: rewards {RUN}/trajectories/gen0000.jsonl: generation 0: "
                                       f"member 0's reward {json.dumps(real + 0.5)} in the history, its episodes give "
                                       f"{json.dumps(real)}")


def test_forged_episodes_fail_in_the_environment(work, capsys):
    # member 0's first episode of generation 0 made a success, and everything after it agrees:
    # its reward, the history's reward and normalization, the metrics, every hash
    traj = work / RUN / "trajectories" / "gen0000.jsonl"
    rows = jsonl(traj)
    j = next((i for i, r in enumerate(rows) if not r["info"]["success"]), None)
    if j is None:
        pytest.skip("member 0 solved every puzzle of generation 0: nothing to forge")
    rows[j]["turns"][-1]["reward"] = 1.0
    rows[j]["reward"] = sum(t["reward"] for t in rows[j]["turns"])
    rows[j]["info"] |= {"success": True, "blanks_left": 0}
    write_jsonl(traj, rows)
    s = summarize(trajectories_of(rows))

    def edit(h):
        h.generations[0].rewards[0] = s["mean_reward"]
        h.generations[0].member_info[0]["success"] = s["success"]
    forge_history(work, edit, renormalize=True)
    fix_hashes(work)
    rc, out = audit(capsys, work / RUN, "--no-replay")
    assert rc == 1
    assert_hashes_pass(out)
    assert "✓ rewards       results/train/es/run/trajectories/gen0000.jsonl" in out
    assert failed_line(out).startswith(f"audit: FAILED: episodes {RUN}/trajectories/gen0000.jsonl: generation 0: "
                                       f"episode {j} turn {len(rows[j]['turns'])}: recorded")
    assert "the environment answers" in failed_line(out)


def test_forged_es_settings_fail_naming_the_key(work, capsys):
    # a run made with another step size, passed off as the config's (history and metrics agree)
    def edit(h):
        h.run["es"]["alpha"] = 0.02
        for g in h.generations:
            g.alpha = 0.02
    forge_history(work, edit, renormalize=False)
    fix_hashes(work)
    rc, out = audit(capsys, work / RUN, "--no-replay")
    assert rc == 1
    assert_hashes_pass(out)
    assert failed_line(out).startswith(f"audit: FAILED: es-settings {RUN}/history.json: the run's settings are not "
                                       "the record's: alpha 0.02 in the history's es, the record's config gives 0.01")


@pytest.mark.parametrize("forge", ["metrics", "budget"])
def test_forged_metrics_and_budget_fail_against_the_history(work, capsys, forge):
    if forge == "metrics":
        rows = jsonl(work / RUN / "metrics.jsonl")
        real = rows[-1]["mean_reward"]
        rows[-1]["mean_reward"] = real + 0.5
        write_jsonl(work / RUN / "metrics.jsonl", rows)
        want = (f"metrics {RUN}/metrics.jsonl: line {len(rows)}: mean_reward {json.dumps(real + 0.5)} in metrics.jsonl, "
                f"history.json's generations {json.dumps(real)}")
    else:
        b = json.loads((work / RUN / "budget.json").read_text())
        real = b["episodes"]
        b["episodes"] *= 2
        (work / RUN / "budget.json").write_text(json.dumps(b))
        want = f"budget {RUN}/budget.json: episodes {2 * real} in budget.json, the history gives {real}"
    fix_hashes(work)
    rc, out = audit(capsys, work / RUN, "--no-replay")
    assert rc == 1
    assert_hashes_pass(out)
    assert failed_line(out).startswith(f"audit: FAILED: {want}")


def test_a_forged_rl_budget_fails_against_its_metrics(work, capsys):
    b = json.loads((work / RL / "budget.json").read_text())
    b["train_tokens"] //= 2
    (work / RL / "budget.json").write_text(json.dumps(b))
    rec = json.loads((work / RL / "provenance.json").read_text())
    rec["budget"] = b  # the record holds the budget too
    (work / RL / "provenance.json").write_text(json.dumps(rec))
    fix_hashes(work)
    rc, out = audit(capsys, work / RL)
    assert rc == 1
    assert_hashes_pass(out)
    assert failed_line(out).startswith(f"audit: FAILED: budget {RL}/budget.json: train_tokens {b['train_tokens']} in "
                                       "budget.json, metrics.jsonl gives")


def test_a_forged_evaluation_summary_fails_against_its_trajectories(work, capsys):
    s = json.loads((work / EVAL).read_text())
    real = s["success"]
    s["success"] = real + 0.25
    (work / EVAL).write_text(json.dumps(s))
    fix_hashes(work)
    rc, out = audit(capsys, work / EVAL)
    assert rc == 1
    assert_hashes_pass(out)
    assert failed_line(out).startswith(f"audit: FAILED: summary {EVAL}: success {json.dumps(real + 0.25)} in the "
                                       f"summary, the trajectories and record give {json.dumps(real)}")


def test_forged_evaluation_episodes_and_summary_fail_in_the_environment(work, capsys):
    rows = jsonl(work / EVAL_TRAJ)
    j = next(i for i, r in enumerate(rows) if not r["info"]["success"])
    rows[j]["turns"][-1]["reward"] = 1.0
    rows[j]["reward"] = 1.0
    rows[j]["info"] |= {"success": True, "blanks_left": 0}
    write_jsonl(work / EVAL_TRAJ, rows)
    s = json.loads((work / EVAL).read_text())
    s.update(summarize(trajectories_of(rows)))  # the summary made to agree with the forged episodes
    (work / EVAL).write_text(json.dumps(s))
    fix_hashes(work)
    rc, out = audit(capsys, work / EVAL)
    assert rc == 1
    assert_hashes_pass(out)
    assert "✓ summary " in out
    assert failed_line(out).startswith(f"audit: FAILED: episodes {EVAL_TRAJ}: episode {j} turn")


def test_deleted_trajectories_fail_even_with_the_record_fixed(work, capsys):
    kept = sorted(p.name for p in (work / RUN / "trajectories").iterdir())
    shutil.rmtree(work / RUN / "trajectories")
    rc, out = audit(capsys, work / RUN, "--no-replay")
    assert rc == 1 and failed_line(out).startswith(f"audit: FAILED: output {RUN}/trajectories/gen0000.jsonl: missing")
    fix_hashes(work)  # the record no longer lists them; the evaluation's hash of it fixed too
    rc, out = audit(capsys, work / "results", "--no-replay")
    assert rc == 1
    assert_hashes_pass(out)
    assert failed_line(out).startswith(f"audit: FAILED: outputs {work / RUN / 'provenance.json'}: train-es keeps "
                                       f"{len(kept)} trajectory file(s) ({', '.join(kept[:3])}")
    assert failed_line(out).split(" [")[0].endswith("the record lists none of them")


def test_a_result_whose_record_was_deleted_is_flagged(work, capsys, monkeypatch):
    # a report that read the evaluation, then the evaluation's record deleted
    monkeypatch.chdir(work)
    table = Path("results/tables/t.csv")
    table.parent.mkdir(parents=True)
    table.write_text("method,success\nesopt,0.06\n")
    write_provenance([EVAL], [table], {}, name="t")
    (work / "results/eval/run/h2.provenance.json").unlink()
    rc, out = audit(capsys, work / "results", "--no-replay")
    assert rc == 0, out  # a warning ...
    line = next(ln for ln in out.splitlines() if "coverage" in ln)
    assert line.startswith("  ! coverage      ") and "2 file(s) no record lists as an output: eval/run/h2.json, "\
        "eval/run/h2.trajectories.jsonl" in line
    rc, out = audit(capsys, work / "results", "--strict")  # ... a failure under --strict
    assert rc == 1 and "a warning, failed under --strict" in failed_line(out)
    # (the first warning: this one, unless the checkout's code changed since the fixture ran)
    assert failed_line(out).startswith(("audit: FAILED: coverage ", "audit: FAILED: code ")), out
    rc, out = audit(capsys, work / "results/tables/t.provenance.json", "--upstream", "--no-replay")
    assert rc == 0 and f"! upstream      {EVAL}: 1 input(s) that no record lists as produced" in out, out
    assert audit_cli.main([str(work / EVAL)]) == 2  # the number alone: nothing records it


def test_a_file_added_to_a_run_is_flagged(work, capsys):
    (work / RUN / "model" / "added.json").write_text("{}")
    rc, out = audit(capsys, work / RUN, "--no-replay")
    assert rc == 0 and "! coverage" in out and "model/added.json" in out, out


def test_a_record_from_another_tree_names_the_files_that_differ(work, capsys):
    p = work / "results/eval/run/h2.provenance.json"
    rec = json.loads(p.read_text())
    assert rec["record_version"] == 2 and "changes" in rec["git"]
    # the evaluation was made with a changed environment that this checkout does not have
    rec["git"]["dirty"] = True
    rec["git"]["changes"] = rec["git"]["changes"] | {"workflow/esopt/envs/sudoku.py": "0" * 40}
    p.write_text(json.dumps(rec))
    fix_hashes(work)
    rc, out = audit(capsys, p)
    assert rc == 0, out
    line = next(ln for ln in out.splitlines() if ln.startswith("  ! code"))
    assert line.startswith("  ! code          git: made by ") and "of the code it runs differ from the record's tree: " in line
    assert "workflow/esopt/envs/sudoku.py" in line
    rc, out = audit(capsys, p, "--strict")
    assert rc == 1 and failed_line(out).startswith("audit: FAILED: code git: a warning, failed under --strict: made by")
    assert "workflow/esopt/envs/sudoku.py" in failed_line(out)
    # an older record: a dirty tree whose files it does not list cannot be told apart
    rec = json.loads(p.read_text())
    rec["git"] = {"commit": rec["git"]["commit"], "dirty": True}
    p.write_text(json.dumps(rec))
    rc, out = audit(capsys, p)
    assert rc == 0 and "does not list (an older record)" in out, out


def test_tree_differences_file_by_file(tmp_path):
    git = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True, text=True)
    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (tmp_path / "a.py").write_text("a = 1\n")
    (tmp_path / "doc.md").write_text("doc\n")
    git("add", ".")
    git("commit", "-qm", "one")
    clean = git_state(tmp_path)
    assert clean["dirty"] is False and clean["changes"] == {}
    (tmp_path / "a.py").write_text("a = 2\n")
    (tmp_path / "b.py").write_text("b = 1\n")
    (tmp_path / "doc.md").unlink()
    dirty = git_state(tmp_path)
    assert dirty["dirty"] and set(dirty["changes"]) == {"a.py", "b.py", "doc.md"} and dirty["changes"]["doc.md"] is None
    co = Checkout(tmp_path)
    assert co.differences(dirty).files == []  # the tree as the record saw it
    assert co.differences(clean).files == ["a.py", "b.py", "doc.md"]  # the commit, clean
    git("add", "-A")
    git("commit", "-qm", "two")  # the same content, committed: nothing differs from the dirty record
    co = Checkout(tmp_path)
    assert co.differences(dirty).files == [] and co.differences(git_state(tmp_path)).files == []
    (tmp_path / "a.py").write_text("a = 3\n")
    assert Checkout(tmp_path).differences(dirty).files == ["a.py"]
    assert Checkout(tmp_path).differences({"commit": "0" * 40, "changes": {}}).unknown.startswith(
        "this checkout does not have commit")


def test_replay_command_rejects_a_history_whose_updates_are_not_its_rewards(work, capsys):
    def edit(h):
        h.generations[1].rewards[2] += 0.5
    forge_history(work, edit, renormalize=False)
    res = subprocess.run([sys.executable, "-m", "esopt.cli.main", "replay", "--base", work / BASE, "--history",
                          work / RUN / "history.json"], capture_output=True, text=True, check=False)
    assert res.returncode == 1 and "RECORDED VALUE NOT RECOMPUTED: generation 1: normalized rewards" in res.stdout


def test_history_check_names_each_recorded_value_it_recomputes():
    from esopt.es import ESConfig, SigmaSchedule
    from esopt.es.settings import member_seeds, task_seed

    cfg = ESConfig(population=4, generations=2, alpha=0.01, sigma=SigmaSchedule("cosine", 0.1, 0.01, 2), seed=3)
    h = History(run={"es": cfg.as_record()})
    for t, rewards in enumerate([[0.0, 1.0, 0.0, 0.5], [1.0, 1.0, 1.0, 1.0]]):
        seeds, signs = member_seeds(cfg, t)
        g = GenerationRecord(t, cfg.sigma(t), cfg.alpha, task_seed(cfg, t), seeds, signs, rewards, [], "zscore", False, 0.0)
        up = h.update_of(g)
        g.normalized, g.updated = up.normalized, up.updated
        h.generations.append(g)
    assert h.check() == []
    h.generations[0].sigma = 0.2
    h.generations[0].seeds[1] += 1
    h.generations[1].updated = True
    h.generations[1].alpha = 0.5
    assert h.check() == ["generation 0: member seeds or signs are not those of run seed 3",
                         "generation 0: sigma 0.2 recorded, the schedule gives 0.1",
                         "generation 1: updated True recorded, the raw rewards give False",
                         "generation 1: alpha 0.5 recorded, the run's es.alpha is 0.01"]


def test_a_record_holds_the_code_as_its_command_started(monkeypatch, tmp_path):
    # A commit made while a long job runs is not the code the job ran: the record keeps the
    # state read when the command started, not when it wrote its record.
    from esopt.provenance import record

    states = iter([{"commit": "a" * 40, "dirty": False, "changes": {}}, {"commit": "b" * 40, "dirty": False, "changes": {}}])
    monkeypatch.setattr(record, "git_state", lambda *_: next(states))
    prov = record.Provenance("evaluate", {"k": 1})
    assert prov.record()["git"]["commit"] == "a" * 40
    assert next(states)["commit"] == "b" * 40  # git was read once, at the start

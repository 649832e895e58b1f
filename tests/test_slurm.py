"""The smoke pipeline's rules through SLURM with `--profile slurm` (+ profiles/slurm-local).

Every rule runs at least once, each job in its own SLURM job: the targets are the first
planned job of each rule (and what it needs), 40 of the smoke DAG's 100 jobs; the report
rules are represented by report_memory (a notebook, the others are alike). The whole DAG
runs locally in tests/test_pipeline.py.

Opt-in: needs a running SLURM controller and node (`.ci/slurm-setup` makes a one-node
cluster on this machine, as root) and snakemake-executor-plugin-slurm. Run with

    .ci/slurm-setup && python -m pytest -m slurm tests/test_slurm.py

A plain `python -m pytest` skips it (it takes minutes). ESOPT_SLURM_REQUIRED=1 (.ci/run)
turns a missing cluster into a failure instead of a skip.
"""

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

# the command users type (`--profile slurm`: the profile found by name from the repository
# root), with the one-node test cluster's overrides layered on top
PROFILES = ["--profile", "slurm", "--profile", "profiles/slurm-local"]
# rules the profile gives a GPU; train_es and train_rl ask for their own (distributed.ranks
# and rl.ranks x gpus_per_rank, none in the smoke config) and the profile must not override that
SELF_SIZED = {"train_es", "train_rl"}
GPU_RULES = {"evaluate_base", "evaluate_es", "evaluate_rl", "memory", "train_agent", "evaluate_agent_base",
             "evaluate_agent", "search_heuristics", "train_web", "evaluate_web_base", "evaluate_web"}
TIMEOUT_S = 1800  # ~9 min alone on 2 cores, more beside the pipeline and vLLM tests (.ci/run)
# the parts of the checkout the workflow needs are everything but these
NOT_COPIED = (".git", ".venv", "results", ".snakemake", "tests", "docs", "benchmarks", "__pycache__",
              "*.egg-info", ".pytest_cache", ".ruff_cache", "build", "logs")


def _unavailable(reason: str):
    if os.environ.get("ESOPT_SLURM_REQUIRED") == "1":
        pytest.fail(f"{reason} (ESOPT_SLURM_REQUIRED=1)")
    pytest.skip(reason)


def _cmd(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def cluster(request):
    """Skip unless asked for (-m slurm) and a SLURM controller with an idle node answers."""
    expr = request.config.getoption("markexpr") or ""
    if "slurm" not in expr or "not slurm" in expr:
        pytest.skip("SLURM integration test is opt-in: .ci/slurm-setup, then python -m pytest -m slurm")
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        _unavailable("no SLURM client tools (sinfo, sbatch); run .ci/slurm-setup")
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        _unavailable('snakemake-executor-plugin-slurm not installed: pip install -e ".[slurm]"')
    ping = _cmd("scontrol", "ping")
    if ping.returncode or "UP" not in ping.stdout:
        _unavailable(f"no SLURM controller responds: {ping.stdout.strip()} {ping.stderr.strip()}")
    nodes = _cmd("sinfo", "-h", "-p", "debug", "-o", "%t")
    if nodes.returncode or not any(s.startswith(("idle", "mix", "alloc")) for s in nodes.stdout.split()):
        _unavailable(f"partition 'debug' has no usable node: {nodes.stdout.strip()} {nodes.stderr.strip()}")


@pytest.fixture(scope="module")
def workdir(cluster, tmp_path_factory):
    """A copy of the workflow and the profiles; slurmd runs jobs on this machine, so /tmp is shared."""
    wd = tmp_path_factory.mktemp("wf-slurm") / "wf"
    shutil.copytree(ROOT, wd, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)
    return wd


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
    # jobs inherit this environment (sbatch --export=ALL): make `esopt` resolve to this venv
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


REPORT_RULE = "report_memory"  # the one report rule run (4 small memory probes upstream)


@pytest.fixture(scope="module")
def targets(workdir) -> list[str]:
    """The outputs of each rule's first planned job in the smoke DAG (report rules: REPORT_RULE)."""
    res = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "config/smoke.yaml"],
                         cwd=workdir, env=_env(), capture_output=True, text=True, check=True)
    first: dict[str, list[str]] = {}
    rule = None
    for line in (res.stdout + res.stderr).splitlines():
        m = re.match(r"^(?:local)?rule (\w+):\s*$", line)
        if m:
            rule = m.group(1)
        elif rule and line.startswith("    output: "):
            first.setdefault(rule, [o.strip() for o in line[len("    output: "):].split(",")])
            rule = None
    assert GPU_RULES | SELF_SIZED | {"build_model", REPORT_RULE} <= set(first), sorted(first)
    return [o for r, outs in first.items() if r != "all" and (not r.startswith("report_") or r == REPORT_RULE)
            for o in outs]


@pytest.fixture(scope="module")
def run(workdir, targets):
    """One job of every rule through SLURM; returns (returncode, output, seconds)."""
    cmd = [sys.executable, "-m", "snakemake", *targets, *PROFILES, "--configfile", "config/smoke.yaml"]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=workdir, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # Snakemake scancels its jobs on interrupt
        out, _ = proc.communicate(timeout=120)
        pytest.fail(f"snakemake through SLURM took over {TIMEOUT_S} s:\n{out[-5000:]}")
    elapsed = time.monotonic() - start
    print(f"\nsmoke pipeline through SLURM: {elapsed:.0f} s wall clock")
    return proc.returncode, out, elapsed


def _show_job(job_id: str) -> dict[str, str]:
    res = _cmd("scontrol", "show", "job", "-o", job_id)
    if res.returncode:
        return {}
    return dict(tok.split("=", 1) for tok in res.stdout.split() if "=" in tok)


def test_every_rule_runs_through_slurm(workdir, run, targets):
    rc, out, elapsed = run
    assert rc == 0, f"snakemake through SLURM failed after {elapsed:.0f} s:\n{out[-8000:]}"
    assert "SLURM run ID" in out  # the slurm executor, not local execution
    # the onstart preflight planned the jobs and found nothing missing before the first submission
    assert "planned jobs:" in out and "GPU-h" in out
    assert out.index("preflight: everything the run needs is in place.") < out.index("has been submitted")
    assert len(pd.read_csv(workdir / "results/tables/memory.csv")) > 0
    assert "Nothing to be done" in subprocess.run(
        [sys.executable, "-m", "snakemake", *targets, *PROFILES, "--configfile", "config/smoke.yaml", "-n"],
        cwd=workdir, env=_env(), capture_output=True, text=True).stdout


def test_every_job_ran_in_its_own_slurm_job(workdir, run):
    assert run[0] == 0, "the pipeline failed (see the previous test)"
    records = [json.loads(p.read_text()) for p in sorted((workdir / "results").rglob("*provenance.json"))]
    by_rule: dict[str, list[str]] = {}
    for rec in records:
        by_rule.setdefault(rec["rule"], []).append(rec["device"]["slurm_job_id"])
    assert {"build_model", "train_es", "train_rl", "evaluate_base", "evaluate_es"} <= set(by_rule), by_rule
    ids = [i for ids in by_rule.values() for i in ids]
    assert all(ids), f"some jobs ran outside SLURM (no SLURM_JOB_ID): {by_rule}"
    assert len(set(ids)) == len(ids), f"jobs shared a SLURM job: {by_rule}"
    # sbatch output of each job, kept by slurm-keep-successful-logs
    logs = workdir / ".snakemake/slurm_logs"
    for rule in ("train_es", "evaluate_es"):
        assert list((logs / f"rule_{rule}").rglob("*.log")), f"no SLURM log for {rule} under {logs}"


def test_gpu_rules_asked_slurm_for_a_gpu(workdir, run):
    """slurmctld keeps finished jobs for MinJobAge (.ci/slurm-setup: 1 h): check what each asked for."""
    assert run[0] == 0, "the pipeline failed (see the previous test)"
    seen = {}
    for p in sorted((workdir / "results").rglob("*provenance.json")):
        rec = json.loads(p.read_text())
        job = _show_job(rec["device"]["slurm_job_id"])
        if job:
            seen[rec["rule"]] = job
            assert job["JobState"] == "COMPLETED" and job["Partition"] == "debug", (p, job)
            asked_gpu = "gpu" in job.get("TresPerJob", "") + job.get("TresPerNode", "")
            assert asked_gpu == (rec["rule"] in GPU_RULES), (rec["rule"], job.get("TresPerJob"), job.get("TresPerNode"))
    assert GPU_RULES | SELF_SIZED <= set(seen), f"jobs no longer known to slurmctld; saw {sorted(seen)}"


def test_a_failing_preflight_stops_the_run_before_any_job(workdir, run, tmp_path):
    """The rest of the DAG with a profile asking for a partition the cluster does not have (the
    rules without an entry of their own, report_verdicts among them, get it): no job is submitted."""
    bad = tmp_path / "bad-profile"
    bad.mkdir()
    (bad / "config.v9+.yaml").write_text("default-resources:\n  slurm_partition: nosuchpartition\n  runtime: 5\n")
    before = _cmd("squeue", "-h", "-o", "%i").stdout.split()
    res = subprocess.run([sys.executable, "-m", "snakemake", *PROFILES, "--profile", str(bad), "--configfile",
                          "config/smoke.yaml"], cwd=workdir, env=_env(), capture_output=True, text=True, timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "partition 'nosuchpartition'" in out and "sinfo lists debug" in out and "no job was submitted" in out
    assert "has been submitted" not in out
    assert _cmd("squeue", "-h", "-o", "%i").stdout.split() == before

"""Long jobs and one slow rank: the process group's timeout from the config, the ranks'
wait that names the slow one, and the per-member deadline (docs/es_core.md#timeouts).

The multi-rank tests run tests/slow_rank_job.py (ES on a linear layer) under a real
2-rank gloo torchrun with timeouts of a few seconds."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from esopt.config import load_config
from esopt.es import ESConfig, ESTrainer, SigmaSchedule
from esopt.es.deadline import MemberDeadlineError
from esopt.es.distributed import Collective, describe_status, from_config

JOB = Path(__file__).with_name("slow_rank_job.py")
ROOT = Path(__file__).resolve().parents[1]


def launch(*args, ranks=2, timeout=120):
    """Run the job (torchrun with `ranks` > 1); returns (completed process, wall seconds)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, *(["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
                             if ranks > 1 else []), str(JOB), *map(str, args)]
    start = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return res, time.monotonic() - start


@pytest.mark.slow
def test_rank_slower_than_the_warning_finishes_and_the_log_names_it(tmp_path):
    res, _ = launch("--timeout", 5, "--warn", 0.5, "--sleep", 1.5, "--out", tmp_path / "h.json")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    # rank 0 waited for rank 1, which was running its member 1 of generation 1, then saw it arrive
    assert re.search(r"rank 0: waiting \d+\.\d s at all_gather #1 for rank 1 \(generation 1, members \[1, 3\]: "
                     r"running member 1 for \d+\.\d s; last seen", out), out[-4000:]
    assert re.search(r"rank 1 reached all_gather #1 \d+\.\d s after rank 0", out)
    assert len(json.loads((tmp_path / "h.json").read_text())["generations"]) == 3
    weights = re.findall(r"rank \d: 3 generations, weight (.*)", out)
    assert len(weights) == 2 and weights[0] == weights[1]  # the replicas agree as ever


@pytest.mark.slow
def test_rank_slower_than_the_timeout_stops_the_job_naming_it(tmp_path):
    res, wall = launch("--timeout", 2, "--warn", 1, "--sleep", 60, "--out", tmp_path / "h.json")
    out = res.stdout + res.stderr
    assert res.returncode != 0
    m = re.search(r"SlowRankError: rank 0 waited (\d+\.\d) s at all_gather #1 for rank 1 \(generation 1, "
                  r"members \[1, 3\]: running member 1 for [\d.]+ s; last seen [\d.]+ s ago\), past "
                  r"distributed.timeout_s = 2 s", out)
    assert m, out[-4000:]
    assert 2.0 <= float(m.group(1)) < 3.0
    assert wall < 60  # stopped at the timeout, not when the slow rank woke up
    assert len(json.loads((tmp_path / "h.json").read_text())["generations"]) == 1  # a rerun resumes there


@pytest.mark.slow
def test_process_group_timeout_is_the_configured_one_for_collectives_outside_the_wait():
    res, _ = launch("--raw", "--timeout", 2, "--sleep", 8)
    out = res.stdout + res.stderr
    m = re.search(r"rank 0: raw barrier failed after (\d+\.\d) s: .*[Tt]imed out", out)
    assert m, out[-4000:]
    assert float(m.group(1)) < 4.0  # gloo's own timeout: the config's 2 s, not torch's 30 min


@pytest.mark.slow
def test_member_past_its_deadline_stops_the_run_naming_member_generation_and_rank(tmp_path):
    res, _ = launch("--timeout", 30, "--deadline", 1, "--sleep", 1.5, "--out", tmp_path / "h.json")
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert re.search(r"MemberDeadlineError: member 1 of generation 1 \(rank 1 of 2\) took 1\.\d s, past "
                     r"distributed.member_deadline_s = 1 s: stopping without scoring it", out), out[-4000:]
    assert len(json.loads((tmp_path / "h.json").read_text())["generations"]) == 1


@pytest.mark.slow
def test_member_that_never_returns_is_ended_by_the_watchdog_with_its_stack(tmp_path):
    res, wall = launch("--timeout", 30, "--deadline", 1, "--sleep", 120, "--out", tmp_path / "h.json", ranks=1)
    assert res.returncode == 124, res.stderr[-4000:]
    assert re.search(r"esopt: error: member 1 of generation 1 \(rank 0 of 1\) has run 2\.\d s without returning, "
                     r"past distributed.member_deadline_s = 1 s", res.stderr)
    assert re.search(r'File ".*slow_rank_job.py", line \d+ in fitness', res.stderr)  # where it was stuck
    assert wall < 120


def test_member_deadline_checked_when_a_member_returns_late():
    model = torch.nn.Linear(2, 1)
    cfg = ESConfig(population=2, generations=1, alpha=0.1, sigma=SigmaSchedule("constant", 0.01, total=1))

    def fitness(member):  # 0.2 s: past the 0.1 s deadline, well before the watchdog (1 s later)
        time.sleep(0.2 if member.index == 1 else 0.0)
        return 0.0, {}

    before = [p.detach().clone() for p in model.parameters()]
    trainer = ESTrainer(model, cfg, fitness, progress=False, collective=Collective(member_deadline_s=0.1))
    with pytest.raises(MemberDeadlineError, match=r"member 1 of generation 0 \(rank 0 of 1\) took 0\.\d s"):
        trainer.step(0)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # reverted, no update
    ESTrainer(model, cfg, fitness, progress=False, member_deadline_s=1.0).step(0)  # within it: fine


def test_config_sets_the_timeouts_and_a_single_process_keeps_the_deadline():
    cfg = load_config(ROOT / "config" / "tiny.yaml")
    d = cfg["distributed"]
    assert (d["timeout_s"], d["warn_after_s"], d["member_deadline_s"]) == (3600, 300, None)  # schema defaults
    cfg["distributed"]["member_deadline_s"] = 90
    c = from_config(cfg)
    assert type(c) is Collective and c.member_deadline_s == 90


def test_status_in_words():
    s = {"generation": 3, "members": [1, 3], "done": {"1": 2.14}, "running": 3, "running_since": 94.0, "t": 94.0}
    assert describe_status(s, 100.0) == ("generation 3, members [1, 3]: done 1 (2.1 s); running member 3 for "
                                         "6.0 s; last seen 6.0 s ago")
    assert describe_status({"stage": "publishing the outputs", "t": 99.0}, 100.0) == (
        "publishing the outputs; last seen 1.0 s ago")
    assert describe_status(None, 0.0) == "no progress reported yet"

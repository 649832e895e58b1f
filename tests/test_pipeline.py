"""The Snakemake DAG on the smoke config: plan, run, nothing left to do, targeted reruns."""

import shutil
import subprocess
import sys

import pandas as pd
import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A copy of the workflow (not the package: that is installed) to run in isolation."""
    wd = tmp_path_factory.mktemp("wf")
    shutil.copy(ROOT / "Snakefile", wd)
    shutil.copytree(ROOT / "config", wd / "config")
    shutil.copytree(ROOT / "envs", wd / "envs")
    shutil.copytree(ROOT / "workflow", wd / "workflow", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return wd


def smk(wd, *args, check=True):
    res = subprocess.run([*SNAKEMAKE, "--configfile", "config/smoke.yaml", "--cores", "2", *args],
                         cwd=wd, capture_output=True, text=True)
    if check and res.returncode:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}")
    return res


def planned_jobs(res) -> dict[str, int]:
    out = res.stdout + res.stderr
    start = out.index("Job stats:")
    counts = {}
    for line in out[start:].splitlines()[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def test_dry_run_plans_the_grid(workdir):
    jobs = planned_jobs(smk(workdir, "-n"))
    # smoke grid: 2 horizons x 1 population x 1 seed, ES evaluated at every horizon;
    # GRPO and PPO at 2 horizons x 1 seed, evaluated at their own; 4 memory probes
    assert jobs == {"all": 1, "build_model": 1, "evaluate_base": 2, "evaluate_es": 4, "report_sudoku": 1, "train_es": 2,
                    "train_rl": 4, "evaluate_rl": 4, "build_probe_model": 1, "memory": 4, "report_memory": 1,
                    "report_methods": 1, "total": 26}


def test_pipeline_runs_then_has_nothing_to_do(workdir):
    smk(workdir)
    table = pd.read_csv(workdir / "results/tables/sudoku_es.csv")
    assert set(table.method) == {"base", "esopt"} and len(table) == 6
    assert (workdir / "results/figures/sudoku_horizon.png").stat().st_size > 10_000
    summary = pd.read_csv(workdir / "results/tables/sudoku_es_summary.csv")
    assert {"gain", "gain_se", "base_success", "success_mean"} <= set(summary.columns)
    methods = pd.read_csv(workdir / "results/tables/sudoku_methods.csv")
    assert set(methods.method) == {"base", "esopt", "grpo", "ppo"} and len(methods) == 8
    rl = methods[methods.method.isin(["grpo", "ppo"])]
    assert (rl.steps == 2).all() and (rl.episodes == 8).all() and (rl.train_tokens > 0).all()
    es = methods[methods.method == "esopt"]  # 3 generations x 4 members x 4 tasks, forward only
    assert (es.episodes == 48).all() and (es.train_tokens == 0).all() and (es.flops_per_step > 0).all()
    memory = pd.read_csv(workdir / "results/tables/memory.csv")
    assert list(memory.method) == ["inference", "es", "grpo", "ppo"] and (memory.peak_bytes > memory.model_state_bytes).all()
    assert (workdir / "results/figures/horizon_crossover.png").stat().st_size > 10_000
    assert "Nothing to be done" in (r := smk(workdir, "-n")).stdout + r.stderr


def test_editing_a_module_reruns_only_the_rules_that_use_it(workdir):
    smk(workdir)  # up to date (no-op when the previous test ran)
    edit = lambda path: path.write_text(path.read_text() + "\n# an edit\n")  # Snakemake compares checksums, not only mtimes
    edit(workdir / "workflow/esopt/report/sudoku.py")  # the methods and memory reports build on it
    assert planned_jobs(smk(workdir, "-n")) == {"all": 1, "report_sudoku": 1, "report_methods": 1, "report_memory": 1, "total": 4}
    edit(workdir / "workflow/esopt/rl/losses.py")
    assert planned_jobs(smk(workdir, "-n")) == {
        "all": 1, "train_rl": 4, "evaluate_rl": 4, "memory": 4, "report_sudoku": 1, "report_methods": 1,
        "report_memory": 1, "total": 16}
    smk(workdir)
    edit(workdir / "workflow/esopt/es/perturb.py")
    jobs = planned_jobs(smk(workdir, "-n"))
    assert jobs == {"all": 1, "evaluate_es": 4, "report_sudoku": 1, "train_es": 2, "memory": 4, "report_methods": 1,
                    "report_memory": 1, "total": 14}


def test_a_config_edit_reruns_only_the_rules_whose_section_changed(workdir):
    smk(workdir)
    cfg = workdir / "config/smoke.yaml"
    cfg.write_text(cfg.read_text().replace("  lr: 1.0e-4\n", "  lr: 2.0e-4\n"))  # rl.lr
    assert planned_jobs(smk(workdir, "-n")) == {
        "all": 1, "train_rl": 4, "evaluate_rl": 4, "memory": 4, "report_methods": 1, "report_memory": 1, "total": 15}

"""The Snakemake DAG on the smoke config: plan, run, nothing left to do, targeted reruns.

The plans are part of the default suite; the tests that run the smoke pipeline (marked
`pipeline`, about 15 minutes on 2 cores) are opt-in: `python -m pytest -m pipeline`.
With ESOPT_SMOKE_RUN=DIR they read a run that already happened instead of repeating it:
.ci/run points it at README's first command on the smoke config (see `workdir`)."""

import ast
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pandas as pd
import psutil
import pytest

from esopt.config import load_config
from esopt.provenance import jobs
from esopt.provenance.imports import all_modules, module_file

from conftest import ROOT, require_web

pytestmark = pytest.mark.slow

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


WORKFLOW = ("Snakefile", "config", "envs", "workflow", "notebooks")  # what a run of the pipeline reads
NOT_WORKFLOW = ("__pycache__", "*.egg-info")


def workflow_differences(a: Path, b: Path) -> list[str]:
    """The workflow files (under WORKFLOW; relative paths) that differ between checkouts a and b,
    or that only one of them has."""
    def files(root):
        out = {}
        for top in WORKFLOW:
            for f in [root / top] if (root / top).is_file() else sorted((root / top).rglob("*")):
                rel = f.relative_to(root)
                if f.is_file() and not any(p == "__pycache__" or p.endswith(".egg-info") for p in rel.parts):
                    out[str(rel)] = f
        return out

    fa, fb = files(a), files(b)
    return sorted(r for r in fa.keys() | fb.keys()
                  if r not in fa or r not in fb or fa[r].read_bytes() != fb[r].read_bytes())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A copy of the workflow (not the package: that is installed) to run in isolation.

    With ESOPT_SMOKE_RUN=DIR: DIR instead, a checkout of this same workflow where
    `snakemake --configfile config/smoke.yaml` already ran to the end with
    ESOPT_IMPORT_LOG=DIR/imports.jsonl (.ci/run: README's first command in a fresh
    environment). The tests then check that run (their `smk(workdir)` has nothing left to
    do) instead of spending the same jobs again; what they change (a module, the config, the
    report) they undo or write beside it."""
    given = os.environ.get("ESOPT_SMOKE_RUN")
    if given:
        wd = Path(given).resolve()
        lacking = [p for p in ("results", ".snakemake/metadata", "imports.jsonl") if not (wd / p).exists()]
        if lacking:
            pytest.fail(f"ESOPT_SMOKE_RUN={given} is not a finished smoke run: it has no {', '.join(lacking)} "
                        "(expected: snakemake --configfile config/smoke.yaml run there with "
                        "ESOPT_IMPORT_LOG=DIR/imports.jsonl)", pytrace=False)
        changed = workflow_differences(ROOT, wd)
        if changed:
            pytest.fail(f"ESOPT_SMOKE_RUN={given} ran another workflow than {ROOT}: {', '.join(changed[:10])} "
                        f"differ{f' (and {len(changed) - 10} more)' if len(changed) > 10 else ''}", pytrace=False)
        return wd
    wd = tmp_path_factory.mktemp("wf")
    shutil.copy(ROOT / "Snakefile", wd)
    for top in WORKFLOW[1:]:
        shutil.copytree(ROOT / top, wd / top, ignore=shutil.ignore_patterns(*NOT_WORKFLOW))
    return wd


def smk(wd, *args, check=True):
    if "-n" not in args:  # the smoke DAG's web stage needs the browser (a dry run does not)
        require_web()
    # every command run appends the esopt modules it loaded (esopt.cli.common.log_imports)
    env = {**os.environ, "ESOPT_IMPORT_LOG": str(wd / "imports.jsonl")}
    res = subprocess.run([*SNAKEMAKE, "--configfile", "config/smoke.yaml", "--cores", "2", *args],
                         cwd=wd, capture_output=True, text=True, env=env)
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


REPORTS = {f"report_{r}": 1 for r in ("sudoku", "methods", "verdicts", "training_curves", "population",
                                      "sigma_ablation", "wall_clock", "memory", "tool_agents", "webarena", "ahd")}
# tool agents: math (train, dapo, aime) and docvqa (train, docvqa) sets, the tiny tool model,
# 4 trained methods x 2 benchmarks x 1 seed, No Skill and every run on the 3 evaluation sets
# and the tool model's check (tool_agents.model.expect)
TOOL_JOBS = {"prepare_data": 5, "build_tool_model": 1, "train_agent": 8, "evaluate_agent_base": 3, "evaluate_agent": 12,
             "check_tool_model": 1}
# web: the train and lite sets, the tiny web model, 3 trained methods x 1 seed, No Skill and every
# run on the lite set, and the web model's check (web.model.expect)
WEB_JOBS = {"prepare_web_data": 2, "build_web_model": 1, "train_web": 3, "evaluate_web_base": 1, "evaluate_web": 3,
            "check_web_model": 1}
# heuristic design: the tiny writer, construct_tsp x (EoH, Sample) x 1 budget x (base, ESOpt) x 1 repetition,
# and the writer's check (ahd.model.expect)
AHD_JOBS = {"build_ahd_model": 1, "search_heuristics": 4, "check_ahd_model": 1}


def test_dry_run_plans_the_grid(workdir):
    jobs = planned_jobs(smk(workdir, "-n"))
    # smoke grid: 2 horizons x 1 population x 1 seed, ESOpt evaluated at every horizon;
    # Vanilla ES at both horizons and sigma_T = 0 at H*=3, at their own horizon;
    # population study at H*=3, G 2 and 4, two model sizes (main model G=4 is the main run);
    # GRPO (T 0.7 and T 1) and PPO at 2 horizons x 1 seed; 4 memory probes; the main base's check
    assert jobs == {"all": 1, "build_model": 2, "build_probe_model": 1, "evaluate_base": 3, "train_es": 8,
                    "evaluate_es": 10, "train_rl": 6, "evaluate_rl": 6, "memory": 4, "check_models": 1,
                    **TOOL_JOBS, **WEB_JOBS, **AHD_JOBS, **REPORTS, "total": 100}


def test_paper_config_plans_the_papers_grid(workdir):
    res = subprocess.run([*SNAKEMAKE, "-n", "-p", "--configfile", "config/paper.yaml", "--cores", "1"],
                         cwd=workdir, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = planned_jobs(res)
    # Qwen3.5-4B at H* 5/10/15, 3 seeds: ESOpt (G=32, evaluated at every H*) 9 runs,
    # Vanilla ES 9, sigma_T = 0 at H*=15 3; population study at H*=15: 4B at G 8/16
    # (G=32 is the main run) 6, 9B at G 8/16/32 9 -> 36 ES runs; 54 ES evaluations
    # (27 + 9 + 3 + 15); base 4B at 3 H*, 9B at H*=15; GRPO, GRPO T=1, PPO 27 runs.
    # Tool agents on the 4B: 5 data sets, 4 methods x 2 benchmarks x 3 seeds, 3 + 36 evaluations.
    # WebArena-Lite on the 27B (staged): the train and Lite sets, 3 methods x 1 seed, 1 + 3 evaluations.
    # Heuristic design: the 8B writer, 6 tasks x 2 searches x 2 budgets x (base, ESOpt) x 3 repetitions.
    assert jobs == {"all": 1, "build_model": 2, "evaluate_base": 4, "train_es": 36, "evaluate_es": 54,
                    "train_rl": 27, "evaluate_rl": 27, "memory": 4, "prepare_data": 5, "train_agent": 24,
                    "evaluate_agent_base": 3, "evaluate_agent": 36, "prepare_web_data": 2, "build_web_model": 1,
                    "train_web": 3, "evaluate_web_base": 1, "evaluate_web": 3, "build_ahd_model": 1,
                    "search_heuristics": 144, **REPORTS, "total": 389}
    assert "--nproc-per-node 4" in res.stdout  # train_es runs under torchrun, 4 ranks (config distributed)


def test_horizons_config_plans_the_papers_sudoku_grid_at_tiny_scale(workdir):
    res = subprocess.run([*SNAKEMAKE, "-n", "--configfile", "config/horizons.yaml", "--cores", "1"],
                         cwd=workdir, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    # 6x6 at H* 5/10/15, 3 seeds: ESOpt 9 runs (each evaluated at every H*: 27), Vanilla ES 9,
    # sigma_T = 0 at H*=15 3, population study at H*=15 G 4 and 8 (G=16 is the main run) 6
    # -> 27 ES runs, 27 + 9 + 3 + 6 = 45 ES evaluations; GRPO, GRPO T=1, PPO 27 runs
    sudoku_reports = {k: v for k, v in REPORTS.items()
                      if k not in ("report_memory", "report_tool_agents", "report_webarena", "report_ahd")}
    assert planned_jobs(res) == {"all": 1, "build_model": 1, "evaluate_base": 3, "train_es": 27, "evaluate_es": 45,
                                 "train_rl": 27, "evaluate_rl": 27, "check_models": 1, **sudoku_reports, "total": 139}


def test_ladder_config_plans_three_widths_at_one_horizon(workdir):
    res = subprocess.run([*SNAKEMAKE, "-n", "--configfile", "config/ladder.yaml", "--cores", "1"],
                         cwd=workdir, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    # 6x6 at H* 5, G 16, 3 seeds on 3 widths: 9 ES runs, each evaluated at H* 5; 3 bases,
    # each built, evaluated and checked against model.expect; no RL, no ablation
    reports = {k: 1 for k in ("report_sudoku", "report_methods", "report_verdicts", "report_training_curves",
                              "report_wall_clock", "report_population")}
    assert planned_jobs(res) == {"all": 1, "build_model": 3, "evaluate_base": 3, "train_es": 9, "evaluate_es": 9,
                                 "check_models": 3, **reports, "total": 34}


@pytest.mark.pipeline
def test_pipeline_runs_then_has_nothing_to_do(workdir):
    smk(workdir)
    table = pd.read_csv(workdir / "results/tables/sudoku_es.csv")
    assert set(table.method) == {"base", "esopt"} and len(table) == 6
    assert (workdir / "results/figures/sudoku_horizon.png").stat().st_size > 10_000
    summary = pd.read_csv(workdir / "results/tables/sudoku_es_summary.csv")
    assert {"gain", "gain_se", "base_success", "success_mean"} <= set(summary.columns)
    methods = pd.read_csv(workdir / "results/tables/sudoku_methods.csv")
    assert methods.groupby("method").size().to_dict() == {
        "base": 2, "esopt": 2, "es_vanilla": 2, "es_sigmaT0": 1, "grpo": 2, "grpo_t1": 2, "ppo": 2}
    rl = methods[methods.method.isin(["grpo", "grpo_t1", "ppo"])]
    assert (rl.steps == 2).all() and (rl.episodes == 8).all() and (rl.train_tokens > 0).all()
    es = methods[methods.method == "esopt"]  # generations x members x tasks per member, forward only
    c = load_config(workdir / "config/smoke.yaml")["es"]
    assert c["generations"] * max(c["populations"]) * c["tasks_per_member"] == 192
    assert (es.episodes == 192).all() and (es.train_tokens == 0).all() and (es.flops_per_step > 0).all()
    memory = pd.read_csv(workdir / "results/tables/memory.csv")
    assert list(memory.method) == ["inference", "es", "grpo", "ppo"] and (memory.peak_bytes > memory.model_state_bytes).all()
    for name in ("horizon_crossover", "training_curves", "population", "sigma_ablation", "wall_clock", "memory"):
        assert (workdir / f"results/figures/{name}.png").stat().st_size > 10_000, name
        assert len(pd.read_csv(workdir / f"results/tables/{name if name != 'horizon_crossover' else 'sudoku_methods'}.csv"))
    # each figure's notebook, executed, kept as the log of its rule
    executed = sorted(p.stem for p in (workdir / "results/notebooks").glob("*.ipynb"))
    assert executed == sorted(["sudoku_horizon", "horizon_crossover", "verdicts", "training_curves", "population",
                               "sigma_ablation", "wall_clock", "memory", "tool_agents", "webarena", "ahd"])
    verdicts = pd.read_csv(workdir / "results/tables/verdicts.csv")  # one seed each: no interval, no verdict yet
    assert verdicts.claim.unique().tolist() == ["horizon crossover", "sigma_T = 0 drop", "population sensitivity"]
    assert (verdicts.verdict == "undecided").all() and verdicts.ci_low.isna().all()
    tools = pd.read_csv(workdir / "results/tables/tool_agents.csv")
    assert tools.label.tolist() == ["No Skill", "Agentic GRPO", "Agentic ESOpt", "Trace2Skill", "ESOpt + Trace2Skill"]
    assert {"DAPO", "AIME", "DocVQA", "DAPO Δ", "average Δ"} <= set(tools.columns)
    assert (tools[[f"{c} seeds" for c in ("DAPO", "AIME", "DocVQA")]] == 1).all().all()
    web = pd.read_csv(workdir / "results/tables/webarena.csv")
    assert web.label.tolist() == ["No Skill", "Agentic ESOpt", "Trace2Skill", "ESOpt + Trace2Skill"]
    assert {"all", "all mean", "Δ all", "seeds"} <= set(web.columns) and (web.seeds == 1).all()
    assert {"shopping", "reddit", "gitlab"} <= set(web.columns)  # one task per template: every site
    assert (workdir / "results/figures/webarena.png").stat().st_size > 10_000
    population = pd.read_csv(workdir / "results/tables/population.csv")
    assert set(population.model) == {"smoke-qwen35", "smoke-qwen35-wide"}
    assert population.groupby("method").population.apply(lambda g: sorted(g.dropna())).to_dict() == {
        "base": [], "esopt": [2, 2, 4, 4]}
    ahd = pd.read_csv(workdir / "results/tables/ahd.csv")
    assert list(zip(ahd.task, ahd.search, ahd.budget)) == [("construct_tsp", "EoH", 16), ("construct_tsp", "Sample", 16)]
    assert (ahd.reps == 1).all() and ahd.win.dtype == bool
    for run in (workdir / "results/ahd/smoke-qwen35-ahd/construct_tsp").glob("*/r0"):
        result = json.loads((run / "result.json").read_text())
        assert result["samples"] == 16 and len((run / "samples.jsonl").read_text().splitlines()) == 16
        assert (run / "history.json").exists() == run.parent.name.endswith("_esopt")
    assert "Nothing to be done" in (r := smk(workdir, "-n")).stdout + r.stderr


@pytest.mark.pipeline
def test_every_es_run_moves_the_weights_and_replays_to_them(workdir):
    """The smoke grid exercises real ES updates: every ES run (Sudoku, tool agents, heuristic
    writer) ends at other weights than its base, and audit's replay of each history onto
    its base model lands on the saved weights bit for bit."""
    smk(workdir)
    histories = sorted((workdir / "results").glob("train/*/*/*/*/history.json")) + sorted(
        (workdir / "results").glob("ahd/*/*/*_esopt/r*/history.json"))
    # 8 Sudoku ES runs, 4 ES tool-agent runs (esopt, esopt_trace2skill x 2 benchmarks), 2 web runs,
    # 2 heuristic writers
    assert len(histories) == 8 + 4 + 2 + 2, histories
    for h in histories:
        hist = json.loads(h.read_text())
        base, final = hist["run"]["base_weights_sha256"], hist["final"]["weights_sha256"]
        assert final != base, f"{h.parent}: no update (rewards {[g['rewards'] for g in hist['generations']]})"
        assert any(len(set(g["rewards"])) > 1 for g in hist["generations"]), h.parent
    report = workdir / "audit.json"
    res = subprocess.run([sys.executable, "-m", "esopt.cli.main", "audit", "results", "--replay", "always",
                          "--json", str(report)], cwd=workdir, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    checks = json.loads(report.read_text())["checks"]
    replayed = {c["record"] for c in checks if c["name"] == "replay" and c["status"] == "ok"}
    assert len(replayed) == len(histories), sorted(replayed)
    assert not [c for c in checks if c["name"] == "replay" and c["status"] in ("fail", "skip")]  # RL runs: a note


@pytest.mark.pipeline
def test_report_bundles_figures_captions_and_provenance(workdir):
    smk(workdir)
    smk(workdir, "--report", "results/report.zip")
    with zipfile.ZipFile(workdir / "results/report.zip") as z:
        names = z.namelist()
    for name in ("horizon_crossover", "training_curves", "population", "sigma_ablation", "wall_clock", "memory",
                 "tool_agents", "webarena", "ahd"):
        assert any(n.endswith(f"{name}.png") for n in names), name
    assert sum(n.endswith(".provenance.json") for n in names) == 11  # each table's record, as a report item


def job_metadata(wd) -> dict[str, dict]:
    """Snakemake's record of every job that ran (.snakemake/metadata), by its shell command:
    rule, inputs, outputs, params."""
    out: dict[str, dict] = {}
    for f in (wd / ".snakemake/metadata").iterdir():
        meta = json.loads(f.read_text())
        job = out.setdefault(meta["shellcmd"], {**meta, "outputs": []})
        job["outputs"].append(base64.b64decode(f.name).decode())
    return out


def command_of(shellcmd: str, wd) -> str:
    """`esopt NAME ...` -> NAME (torchrun: `-m esopt.cli.main NAME`); a notebook -> its path."""
    words = shellcmd.split()
    if words[0] == "papermill":
        return str(wd / "notebooks" / os.path.basename(words[1]))
    return words[words.index("esopt.cli.main") + 1] if "esopt.cli.main" in words else words[words.index("esopt") + 1]


def benchmarks_of(shellcmd: str) -> tuple[str, ...]:
    """The agent benchmarks a job runs, whose packages its code input lists: --benchmark B, or
    build-model's --data B=DIR (esopt.provenance.jobs.code_files)."""
    from esopt.envs.benchmarks import BENCHMARKS

    words = shellcmd.split()
    values = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--benchmark", "--data")]
    return tuple(b for b in (v.split("=")[0] for v in values) if b in BENCHMARKS)


def package_files(paths, root) -> set[str]:
    """The files of the package (checked out under root/workflow/esopt) among paths, relative to it."""
    pkg = root / "workflow" / "esopt"
    return {os.path.relpath(p, pkg) for p in paths if os.path.abspath(p).startswith(str(pkg) + os.sep)}


@pytest.mark.pipeline
def test_every_job_lists_exactly_the_code_its_command_imports(workdir):
    smk(workdir)
    ran = job_metadata(workdir)
    assert {m["rule"] for m in ran.values()} == set(REPORTS) | {"build_model", "build_probe_model", "evaluate_base",
        "train_es", "evaluate_es", "train_rl", "evaluate_rl", "memory", "check_models", *TOOL_JOBS, *WEB_JOBS, *AHD_JOBS}
    job_code = {c: (command_of(c, workdir), benchmarks_of(c)) for c in ran}
    imported = {key: package_files(jobs.code_files(*key), ROOT) for key in set(job_code.values())}
    listed = {c: package_files(m["input"], workdir) for c, m in ran.items()}
    for shellcmd, files in listed.items():
        assert files == imported[job_code[shellcmd]], (ran[shellcmd]["rule"], files ^ imported[job_code[shellcmd]])
    # for every module of the package: the jobs that list it are the jobs whose command imports it
    for module in all_modules():
        rel = os.path.relpath(module_file(module), ROOT / "workflow" / "esopt")
        assert {c for c, f in listed.items() if rel in f} == {c for c in ran if rel in imported[job_code[c]]}
    # and what each command really loaded when it ran is among the files its jobs list
    for line in (workdir / "imports.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["command"] in ("audit", "replay"):
            continue
        loaded = {os.path.relpath(module_file(m), ROOT / "workflow" / "esopt") for m in rec["modules"] if module_file(m)}
        # the log names the command, not its benchmark: the code of any of the command's jobs
        code = set().union(*(files for (cmd, _), files in imported.items() if cmd == rec["command"]))
        assert loaded <= code, (rec["command"], loaded - code)


@pytest.mark.pipeline
def test_the_audit_reads_the_settings_the_rule_passed(workdir):
    """esopt audit's view of a job (from its provenance record) equals the `settings`
    param Snakemake recorded for that job: one map (esopt.provenance.jobs), both sides."""
    smk(workdir)
    checked = set()
    for meta in job_metadata(workdir).values():
        if meta["rule"] in REPORTS:  # a report's settings are its notebook's parameters, not the config
            continue
        # the record: an output itself, inside a directory output, or beside a file output (FILE.provenance.json)
        candidates = [c for o in meta["outputs"]
                      for c in (o, f"{o}/provenance.json", str(Path(o).with_suffix(".provenance.json")))]
        prov = next(c for c in candidates if c.endswith("provenance.json") and (workdir / c).is_file())
        rec = json.loads((workdir / prov).read_text())
        view = jobs.record_settings(rec, load_config(workdir / rec["config_path"]))
        assert view in [ast.literal_eval(p) for p in meta["params"]], (meta["rule"], prov)
        checked.add(meta["rule"])
    assert checked == {"build_model", "build_probe_model", "evaluate_base", "train_es", "evaluate_es", "train_rl",
                       "evaluate_rl", "memory", "check_models", *TOOL_JOBS, *WEB_JOBS, *AHD_JOBS}


def downstream(ran: dict[str, dict], start: set[str]) -> set[str]:
    """The jobs that consume, transitively, what the `start` jobs produce."""
    todo, out = list(start), set(start)
    while todo:
        made = set(ran[todo.pop()]["outputs"])
        for c, m in ran.items():
            if c not in out and made & set(m["input"]):
                out.add(c)
                todo.append(c)
    return out


@pytest.mark.pipeline
@pytest.mark.parametrize("module", ["esopt/envs/hub_data.py", "esopt/report/files.py", "esopt/rl/losses.py",
                                    "esopt/es/perturb.py", "esopt/ahd/tasks/construct.py", "esopt/provenance/record.py"])
def test_editing_a_module_reruns_the_jobs_that_import_it(workdir, module):
    """The plan after an edit: every job whose command imports the module, and what consumes
    their outputs; nothing else (Snakemake compares checksums, so the edit is undone after)."""
    smk(workdir)
    ran = job_metadata(workdir)
    path = workdir / "workflow" / module
    rel = os.path.relpath(path, workdir / "workflow" / "esopt")
    importing = {c for c, m in ran.items() if rel in package_files(m["input"], workdir)}
    assert importing, f"no job imports {module}"
    expected: dict[str, int] = {}
    for c in downstream(ran, importing):
        expected[ran[c]["rule"]] = expected.get(ran[c]["rule"], 0) + 1
    text = path.read_text()
    try:
        path.write_text(text + "\n# an edit\n")
        planned = planned_jobs(smk(workdir, "-n"))
    finally:
        path.write_text(text)
    assert {k: v for k, v in planned.items() if k not in ("all", "total")} == expected


@pytest.mark.pipeline
def test_a_config_edit_reruns_only_the_rules_whose_section_changed(workdir):
    smk(workdir)
    cfg = workdir / "config/smoke.yaml"
    text = cfg.read_text()
    try:
        cfg.write_text(text.replace("  lr: 1.0e-4\n", "  lr: 2.0e-4\n"))  # rl.lr
        planned = planned_jobs(smk(workdir, "-n"))
    finally:
        cfg.write_text(text)
    assert planned == {
        "all": 1, "train_rl": 6, "evaluate_rl": 6, "memory": 4, "report_methods": 1, "report_verdicts": 1,
        "report_wall_clock": 1, "report_memory": 1, "total": 21}


# Files that record time (wall clock, dates, peak memory) and so differ between any two runs
# (and every FILE.provenance.json).
TIMED = {"provenance.json", "budget.json", "metrics.jsonl", "history.json"}


def result_hashes(wd):
    """sha256 of every result file that holds no timing; history.json without its wall_s."""
    out = {}
    for f in sorted((wd / "results").rglob("*")):
        rel = f.relative_to(wd / "results")
        if not f.is_file() or rel.parts[0] in ("logs", "notebooks") or ".resume" in rel.parts:  # logs carry times
            continue
        if f.name == "history.json":
            h = json.loads(f.read_text())
            data = json.dumps([{k: v for k, v in g.items() if k != "wall_s"} for g in h["generations"]] + [h["final"]])
            out[str(rel)] = hashlib.sha256(data.encode()).hexdigest()
        elif f.name not in TIMED and not f.name.endswith(".provenance.json"):
            out[str(rel)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


@pytest.mark.pipeline
def test_killed_pipeline_resumes_to_the_same_results(tmp_path_factory):
    """Kill snakemake (and its jobs) during ES training; `--unlock` then `--rerun-incomplete`
    finishes with the same result files as an uninterrupted run."""
    target = ["results/tables/sudoku_es.csv"]  # base model, ES runs, their evaluations
    runs = {}
    for name in ("killed", "uninterrupted"):
        wd = tmp_path_factory.mktemp(name)
        for f in ("Snakefile",):
            shutil.copy(ROOT / f, wd)
        shutil.copytree(ROOT / "envs", wd / "envs")
        shutil.copytree(ROOT / "workflow", wd / "workflow", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        shutil.copytree(ROOT / "notebooks", wd / "notebooks")
        (wd / "config").mkdir()
        cfg = (ROOT / "config/smoke.yaml").read_text().replace("  generations: 3\n", "  generations: 30\n")
        (wd / "config/smoke.yaml").write_text(cfg)
        runs[name] = wd
    wd = runs["killed"]
    proc = subprocess.Popen([*SNAKEMAKE, "--configfile", "config/smoke.yaml", "--cores", "2", *target], cwd=wd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    in_training = lambda: any(json.loads(p.read_text() or "{}").get("generations")
                              for p in wd.glob("results/train/es/*/sudoku/*/.resume/history.json"))
    while proc.poll() is None and time.time() < deadline:
        try:
            if in_training():
                break
        except json.JSONDecodeError:
            pass
        time.sleep(0.05)
    assert proc.poll() is None, "the pipeline ended before it could be killed"
    tree = [proc, *psutil.Process(proc.pid).children(recursive=True)]
    for p in tree:  # snakemake and every job it started, as when a node dies
        p.kill()
    psutil.wait_procs([psutil.Process(p.pid) for p in tree if psutil.pid_exists(p.pid)], timeout=30)
    assert not (wd / "results/tables/sudoku_es.csv").exists()

    subprocess.run([*SNAKEMAKE, "--configfile", "config/smoke.yaml", "--unlock"], cwd=wd, check=True, capture_output=True)
    res = subprocess.run([*SNAKEMAKE, "--configfile", "config/smoke.yaml", "--cores", "2", "--rerun-incomplete", *target],
                         cwd=wd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    subprocess.run([*SNAKEMAKE, "--configfile", "config/smoke.yaml", "--cores", "2", *target], cwd=runs["uninterrupted"],
                   check=True, capture_output=True)
    killed, fresh = result_hashes(wd), result_hashes(runs["uninterrupted"])
    assert any("/model/model.safetensors" in k for k in fresh) and any(k.startswith("eval/") for k in fresh)
    assert killed == fresh

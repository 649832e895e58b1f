"""The report notebooks (notebooks/*.ipynb) and the library functions they call, on a
synthetic results tree shaped like the pipeline's (eval summaries, training runs'
metrics.jsonl / budget.json / provenance.json, memory files)."""

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from esopt.report.ablation import ablation_table, parse_flat_reference, plot_ablation
from esopt.report.ahd import ahd_comparisons, load_ahd_runs, win_summary
from esopt.report.curves import curves_table, load_runs, plot_curves
from esopt.report.methods import LABELS, STYLES, load_budgets, methods_table
from esopt.report.notebook import chdir_to_inputs, expand_paths, run_files
from esopt.report.population import (
    load_population_evals,
    model_of,
    plot_population,
    population_table,
)
from esopt.report.sudoku import load_evals
from esopt.report.wallclock import parse_hours, plot_wallclock, wall_table

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

# The parameters each notebook takes: the contract with workflow/rules/report.smk.
PARAMETERS = {
    "sudoku_horizon": ["evals", "table", "summary", "figure", "title"],
    "horizon_crossover": ["evals", "budgets", "population", "reference", "table", "figure", "title"],
    "memory": ["memory", "paper", "table", "figure", "title"],
    "training_curves": ["runs", "table", "figure", "title"],
    "population": ["evals", "reference", "table", "figure", "models", "size_horizon", "size_population", "size_table",
                   "title"],
    "sigma_ablation": ["evals", "horizon", "reference", "table", "figure", "title"],
    "wall_clock": ["budgets", "reference", "table", "figure", "title"],
    "tool_agents": ["evals", "columns", "reference", "table", "figure", "title"],
    "webarena": ["evals", "eval_set", "reference", "table", "figure", "title"],
    "ahd": ["runs", "reference", "table", "figure", "title"],
}
TOOL_COLUMNS = {"math_dapo": "DAPO", "math_aime": "AIME", "docvqa_docvqa": "DocVQA"}


# ---------------------------------------------------------------- synthetic inputs


def write_json(path: Path, obj) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1))
    return path


def write_eval(root, model, method, run, horizon, success, train_horizon=None, population=None, seed=None,
               meta_model=True, episodes=512, turns=6.0):
    """An `esopt evaluate` summary at ROOT/results/eval/MODEL/METHOD[/RUN]/hH.json."""
    meta = {"method": method}
    if train_horizon is not None:
        meta["train_horizon"] = train_horizon
    if population is not None:
        meta["population"] = population
    if seed is not None:
        meta["seed"] = seed
    if meta_model:
        meta["model"] = model
    d = root / "results" / "eval" / model / method.replace("esopt", "es")
    if run:
        d = d / run
    write_json(d / f"h{horizon}.provenance.json", {"command": "evaluate"})  # globs must skip these
    return write_json(d / f"h{horizon}.json", {
        "benchmark": "sudoku", "model": f"results/train/es/{model}/sudoku/{run}/model", "horizon": horizon,
        "meta": meta, "decoding": "sample", "seed": 20260829, "episodes": episodes, "success": success,
        "success_se": math.sqrt(success * (1 - success) / episodes), "mean_reward": success, "mean_turns": 7.5,
        "mean_turns_solved": turns, "invalid_per_episode": 0.0, "illegal_per_episode": 5.0,
    })


def write_run(root, model, algo, method, horizon, seed, rewards, sigmas=None, population=None, wall_s=360.0,
              steps=None, episodes_per_step=512, with_model_in_provenance=True):
    """A finished training run: metrics.jsonl (one line per generation/step),
    budget.json and provenance.json, like train-es / train-rl write them."""
    name = f"h{horizon}_g{population}_s{seed}" if population else f"h{horizon}_s{seed}"
    run = root / "results" / "train" / algo / model / "sudoku" / (name if method in ("esopt", "grpo", "ppo")
                                                                 else f"{method}_{name}")
    run.mkdir(parents=True)
    lines = []
    for t, r in enumerate(rewards):
        if algo == "es":
            lines.append({"generation": t, "sigma": sigmas[t], "alpha": 0.003, "mean_reward": r, "max_reward": r,
                          "min_reward": 0.0, "std_reward": 0.05, "success_rate": r, "mean_turns": 10.5,
                          "updated": True, "wall_s": 4.5})
        else:
            lines.append({"step": t, "episodes": 128, "mean_reward": r, "success_rate": r, "mean_turns": 8.0,
                          "wall_s": 9.0})
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    steps = steps or len(rewards)
    write_json(run / "budget.json", {
        "method": method, "algo": algo, "horizon": horizon, "seed": seed, "population": population,
        "planned": {"steps": steps, "episodes_per_step": episodes_per_step}, "steps": steps,
        "episodes": steps * episodes_per_step, "generated_tokens": 20 * steps * episodes_per_step,
        "rollout_tokens": 170 * steps * episodes_per_step, "train_tokens": 0 if algo == "es" else 1000,
        "flops": 1.6e11 * steps, "flops_per_step": 1.6e11, "wall_s": wall_s, "wall_s_per_step": wall_s / steps,
        "params": 895616,
    })
    config = {"name": "tiny", "model": {"name": model}} if with_model_in_provenance else {"name": "tiny"}
    write_json(run / "provenance.json", {"command": f"train-{algo}", "rule": "train", "config": config})
    return run


def write_memory(root, model, method, state, above, wall=2.0):
    return write_json(root / "results" / "memory" / model / f"{method}.json", {
        "method": method, "model": model, "params": state // 2, "dtype": "bfloat16", "device": "cpu",
        "measure": "rss", "model_state_bytes": state, "peak_above_load_bytes": above,
        "peak_bytes": state + above, "step_wall_s": wall, "episodes": 8,
    })


def write_tool_eval(root, method, benchmark, dataset, mean_at_k, seed=None, scores=None):
    """An `esopt evaluate --benchmark B` summary under ROOT/results/eval/tiny-qwen35-tools/tools/."""
    name = f"{benchmark}_{dataset}" + ("" if seed is None else f"_s{seed}")
    meta = {"method": method, "benchmark": benchmark, "dataset": dataset} | ({} if seed is None else {"seed": seed})
    scores = scores or [mean_at_k] * 4
    return write_json(root / "results/eval/tiny-qwen35-tools/tools" / method / f"{name}.json", {
        "benchmark": benchmark, "meta": meta, "k": len(scores), "mean_at_k": mean_at_k, "scores": scores,
        "sample_std": float(pd.Series(scores).std(ddof=0)), "tasks": 64})


def write_web_eval(root, method, success: dict, seed=None):
    """An `esopt evaluate --benchmark web` summary under ROOT/results/eval/tiny-qwen35-web/web/."""
    name = "lite" + ("" if seed is None else f"_s{seed}")
    meta = {"method": method, "benchmark": "web", "dataset": "lite"} | ({} if seed is None else {"seed": seed})
    return write_json(root / "results/eval/tiny-qwen35-web/web" / method / f"{name}.json", {
        "benchmark": "web", "meta": meta, "k": 2, "mean_at_k": success["all"], "tasks": 59,
        "by_site": {s: {"episodes": 40, "success": v} for s, v in success.items()}})


def cosine(s0, s1, n):
    return [s1 + (s0 - s1) * (1 + math.cos(math.pi * t / (n - 1))) / 2 for t in range(n)]


def make_tree(root: Path) -> Path:
    """A small pipeline-shaped results tree under root (paths relative to root)."""
    m = "tiny-qwen35"
    for h, s in [(2, 0.70), (4, 0.20)]:
        write_eval(root, m, "base", "", h, s, meta_model=False)
    n = 6
    for h in (2, 4):
        for seed in (0, 1):
            for g in (8, 16):
                run = f"h{h}_g{g}_s{seed}"
                write_eval(root, m, "esopt", run, h, 0.25 + 0.05 * h + 0.01 * g + 0.02 * seed, h, g, seed,
                           meta_model=(seed == 0))
                write_eval(root, m, "esopt", run, 6 - h, 0.1, h, g, seed)  # off the diagonal
                write_run(root, m, "es", "esopt", h, seed, [0.1 + 0.02 * t + 0.01 * seed for t in range(n)],
                          cosine(6e-3, 1.5e-3, n), g, wall_s=300 + 30 * h + 10 * seed + g)
            write_eval(root, m, "grpo", f"h{h}_s{seed}", h, 0.3 + 0.05 * seed, h, None, seed)
            write_run(root, m, "grpo", "grpo", h, seed, [0.2 + 0.01 * t for t in range(4)],
                      wall_s=400 + 40 * h + seed, episodes_per_step=128)
    for seed in (0, 1):  # the σ_T ablation at H*=4
        for method, sig, base in [("es_vanilla", [4e-3] * n, 0.30), ("es_sigmaT0", cosine(6e-3, 0.0, n), 0.35)]:
            write_eval(root, m, method, f"h4_g16_s{seed}", 4, base + 0.04 * seed, 4, 16, seed)
            write_run(root, m, "es", method, 4, seed, [0.05 + 0.01 * t for t in range(n)], sig, 16, wall_s=330)
    # a second, larger model at H*=4 for the population figure
    for seed in (0, 1):
        for g in (8, 16, 32):
            write_eval(root, "small-qwen35", "esopt", f"h4_g{g}_s{seed}", 4, 0.4 + 0.01 * seed, 4, g, seed,
                       meta_model=False)
    # tool agents: No Skill once, trained methods over two seeds
    for (b, d), base in zip([("math", "dapo"), ("math", "aime"), ("docvqa", "docvqa")], (0.30, 0.10, 0.50)):
        write_tool_eval(root, "no_skill", b, d, base, scores=[base - 0.02, base + 0.02, base, base])
        for i, method in enumerate(["grpo", "esopt", "trace2skill", "esopt_trace2skill"]):
            for seed in (0, 1):
                write_tool_eval(root, method, b, d, base + 0.02 * (i + 1) + 0.01 * seed, seed)
    # web: No Skill once, trained methods over two seeds, success per site
    write_web_eval(root, "no_skill", {"all": 0.2, "shopping": 0.3, "reddit": 0.1})
    for i, method in enumerate(["esopt", "trace2skill", "esopt_trace2skill"]):
        for seed in (0, 1):
            write_web_eval(root, method, {"all": 0.25 + 0.02 * i + 0.01 * seed, "shopping": 0.35, "reddit": 0.15}, seed)
    for method, above in [("inference", 10 << 20), ("es", 11 << 20), ("grpo", 200 << 20), ("ppo", 400 << 20)]:
        write_memory(root, "tiny-qwen35-probe", method, 200 << 20, above)
    # heuristic design: 2 tasks x 2 searches x 1 budget x (base, esopt) x 2 repetitions
    for task, ref in (("construct_tsp", 20.0), ("aco_bpp", 1.5)):
        for search in ("eoh", "sample"):
            for es in (False, True):
                for rep in (0, 1):
                    obj = ref / 2 + rep - (0.5 if es and search == "eoh" else 0.0)
                    write_ahd_run(root, task, search, 100, es, rep, obj, ref)
    return root


def write_ahd_run(root, task, search, budget, es, rep, test_objective, reference):
    """A `esopt search-heuristics` result.json at ROOT/results/ahd/MODEL/TASK/SEARCH_bB_VARIANT/rREP."""
    run = root / f"results/ahd/tiny-qwen35-ahd/{task}/{search}_b{budget}_{'esopt' if es else 'base'}/r{rep}"
    return write_json(run / "result.json", {
        "task": task, "search": search, "budget": budget, "es": es, "seed": rep, "metric": "objective",
        "test_objective": test_objective, "search_objective": None if test_objective is None else test_objective - 0.1,
        "reference_test_objective": reference, "valid_rate": 0.5, "samples": budget, "es_generations": 3 if es else 0})


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return make_tree(tmp_path_factory.mktemp("pipeline"))


def rel(root: Path, pattern: str) -> list[Path]:
    return [root / p for p in expand_paths(str(root / pattern))]


# ---------------------------------------------------------------- helpers and labels


def test_expand_paths_globs_and_skips_provenance(tree):
    got = expand_paths([str(tree / "results/eval/tiny-qwen35/base/h*.json"), "kept/as/is.json"])
    assert [Path(p).name for p in got] == ["h2.json", "h4.json", "is.json"]
    assert expand_paths(None) == [] and expand_paths("a.json") == ["a.json"]


def test_run_files_lists_what_a_notebook_reads_of_a_run(tree):
    runs = str(tree / "results/train/grpo/tiny-qwen35/sudoku/*")
    got = run_files([runs, str(tree / "results/train/grpo/tiny-qwen35/sudoku/h2_s0/metrics.jsonl")], ["budget.json"])
    assert [Path(p).relative_to(tree / "results/train/grpo/tiny-qwen35/sudoku").as_posix() for p in got] == [
        "h2_s0/budget.json", "h2_s1/budget.json", "h4_s0/budget.json", "h4_s1/budget.json", "h2_s0/budget.json"]


def test_chdir_to_inputs_finds_the_pipeline_root(tree, monkeypatch):
    nb_dir = tree / "notebooks"
    nb_dir.mkdir(exist_ok=True)
    monkeypatch.chdir(nb_dir)  # as Jupyter starts a kernel: in the notebook's folder
    assert chdir_to_inputs(["results/eval/tiny-qwen35/base/h*.json"]) == tree
    assert Path.cwd() == tree
    assert chdir_to_inputs(["results/eval/tiny-qwen35/base/h2.json"]) == tree  # found here: stays


def test_new_methods_have_labels_and_styles(tree):
    for m in ("es_vanilla", "es_sigmaT0", "grpo_t1"):
        assert m in LABELS and m in STYLES
    assert LABELS["es_vanilla"] == "Vanilla ES (constant σ)" and LABELS["es_sigmaT0"] == "ESOpt, σ_T = 0"
    evals = load_evals(rel(tree, "results/eval/tiny-qwen35/*/*/h4.json"))
    t = methods_table(evals, population=16)
    assert t.method.tolist() == ["grpo", "es_vanilla", "es_sigmaT0", "esopt"]


# ---------------------------------------------------------------- tool agents


def test_tool_agents_table_means_over_seeds_and_deltas_over_no_skill(tree, tmp_path):
    from esopt.report.tool_agents import load_tool_evals, plot_tool_agents, tool_agents_table

    ev = load_tool_evals(rel(tree, "results/eval/tiny-qwen35-tools/tools/*/*.json"))
    assert len(ev) == 3 + 4 * 3 * 2
    t = tool_agents_table(ev, TOOL_COLUMNS, {"DAPO": 13.8})
    assert t.label.tolist() == ["No Skill", "Agentic GRPO", "Agentic ESOpt", "Trace2Skill", "ESOpt + Trace2Skill"]
    es = t.set_index("method").loc["esopt"]
    # seeds 0 and 1: 0.30 + 0.04 + {0, 0.01} -> 34.5 ± 0.707 points; No Skill 30.0
    assert es["DAPO mean"] == pytest.approx(34.5) and es["DAPO std"] == pytest.approx(0.70711, abs=1e-4)
    assert es["DAPO"] == "34.5 ± 0.7" and es["DAPO seeds"] == 2
    assert es["DAPO Δ"] == pytest.approx(4.5) and es["DocVQA Δ"] == pytest.approx(4.5)
    assert es["DAPO paper Δ"] == 13.8 and math.isnan(t.set_index("method").loc["grpo", "DAPO paper Δ"])
    ns = t.set_index("method").loc["no_skill"]
    assert ns["AIME"] == "10.0" and ns["AIME Δ"] == 0.0 and ns["AIME seeds"] == 1
    assert es["average Δ"] == pytest.approx(4.5)
    plot_tool_agents(t, TOOL_COLUMNS, tmp_path / "t.png", title="t")
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def test_tool_agents_refuses_two_evaluations_of_one_run(tree, tmp_path):
    from esopt.report.tool_agents import load_tool_evals

    one = rel(tree, "results/eval/tiny-qwen35-tools/tools/esopt/math_dapo_s0.json")
    with pytest.raises(ValueError, match="two evaluations of the same run"):
        load_tool_evals(one + one)


# ---------------------------------------------------------------- training curves


def test_training_curves_mean_and_std_over_seeds(tree):
    runs = rel(tree, "results/train/es/tiny-qwen35/sudoku/h2_g16_s*")
    df = load_runs(runs)
    assert len(df) == 12 and set(df.seed) == {0, 1} and set(df.model) == {"tiny-qwen35"}
    t = curves_table(df)
    assert len(t) == 6 and (t.seeds == 2).all() and t.method.unique().tolist() == ["esopt"]
    r = t[t.generation == 3].iloc[0]
    a, b = 0.1 + 0.06, 0.1 + 0.06 + 0.01  # the two seeds' reward at generation 3
    assert r.mean_reward_mean == pytest.approx((a + b) / 2)
    assert r.mean_reward_std == pytest.approx(pd.Series([a, b]).std(ddof=1))
    assert r.success_mean == pytest.approx((a + b) / 2)
    assert r.sigma == pytest.approx(cosine(6e-3, 1.5e-3, 6)[3])
    assert t.sigma.iloc[0] == pytest.approx(6e-3) and t.sigma.iloc[-1] == pytest.approx(1.5e-3)


def test_training_curves_methods_models_and_rl(tree, tmp_path):
    runs = rel(tree, "results/train/*/tiny-qwen35/sudoku/*")
    df = load_runs([*runs, runs[0] / "metrics.jsonl"][1:])  # a file in a run stands for the run
    t = curves_table(df)
    keys = t.drop_duplicates(["method", "horizon", "population"])
    assert set(zip(keys.method, keys.horizon)) == {("grpo", 2), ("grpo", 4), ("esopt", 2), ("esopt", 4),
                                                  ("es_vanilla", 4), ("es_sigmaT0", 4)}
    grpo = t[t.method == "grpo"]
    assert grpo.sigma.isna().all() and grpo.generation.tolist() == [0, 1, 2, 3] * 2  # RL: step as generation
    sig0 = t[t.method == "es_sigmaT0"]
    assert sig0.sigma.iloc[-1] == pytest.approx(0.0)
    assert (t[t.method == "es_vanilla"].sigma == 4e-3).all()
    # the model name from the pipeline path when the budget has none
    run = write_run(tmp_path, "other-model", "es", "esopt", 2, 0, [0.1, 0.2], [1e-3, 1e-3], 16,
                    with_model_in_provenance=False)
    assert load_runs([run]).model.unique().tolist() == ["other-model"]
    with pytest.raises(ValueError, match="more than one run"):
        load_runs([runs[0], runs[0]])
    out = tmp_path / "curves.png"
    plot_curves(t, out, title="t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- population


def test_population_table(tree):
    evals = load_population_evals([*rel(tree, "results/eval/*/es/*/h*.json"),
                                   *rel(tree, "results/eval/tiny-qwen35/base/h*.json")])
    # meta.model where present, else the MODEL of results/eval/MODEL/...
    assert set(evals.model) == {"tiny-qwen35", "small-qwen35"}
    ref = {"Tiny-Qwen35": {8: 2.95, "16": 22.92}}
    t = population_table(evals, ref)
    es = t[t.method == "esopt"].set_index(["model", "horizon", "population"])
    assert len(es) == 2 * 2 + 3  # tiny: H* 2, 4 x G 8, 16; small: H* 4 x G 8, 16, 32 (off-diagonal left out)
    r = es.loc[("tiny-qwen35", 4, 16)]
    a, b = 0.25 + 0.2 + 0.16, 0.25 + 0.2 + 0.16 + 0.02
    assert r.seeds == 2 and r.success_mean == pytest.approx((a + b) / 2)
    assert r.success_std == pytest.approx(pd.Series([a, b]).std(ddof=1))
    assert r.paper_success == pytest.approx(0.2292)  # names match case-insensitively
    assert es.loc[("tiny-qwen35", 2, 8)].paper_success == pytest.approx(0.0295)
    assert math.isnan(es.loc[("small-qwen35", 4, 32)].paper_success)
    base = t[t.method == "base"]
    assert base.population.isna().all() and base.success_mean.tolist() == pytest.approx([0.7, 0.2])


def test_size_table_gains_and_their_growth(tmp_path):
    from esopt.report.population import size_table
    from esopt.report.verdicts import t975

    for model, base, es in (("s", 0.40, [0.41, 0.42, 0.40]), ("m", 0.40, [0.46, 0.47, 0.45]), ("l", 0.5, [0.6])):
        write_eval(tmp_path, model, "base", "", 4, base)
        for seed, x in enumerate(es):
            write_eval(tmp_path, model, "esopt", f"h4_g16_s{seed}", 4, x, train_horizon=4, population=16, seed=seed)
    evals = load_population_evals(rel(tmp_path, "results/eval/*/*/h4.json") + rel(tmp_path, "results/eval/*/*/*/h4.json"))
    t = size_table(evals, ["s", "m"], 4, 16).set_index("model")
    assert t.loc["s"].gain == pytest.approx(0.01) and t.loc["m"].gain == pytest.approx(0.06)
    seed, binomial = pd.Series([0.46, 0.47, 0.45]).var(ddof=1) / 3, sum(x * (1 - x) / 512 for x in (0.46, 0.47, 0.45)) / 9
    var = seed + binomial + 0.4 * 0.6 / 512  # the base's own binomial variance too
    df = var ** 2 / (seed ** 2 / 2 + binomial ** 2 / 511 + (0.4 * 0.6 / 512) ** 2 / 511)  # Welch-Satterthwaite
    assert 2 < df < 511  # between the seeds' n - 1 and the evaluations' episodes - 1
    assert t.loc["m"].ci_high - t.loc["m"].gain == pytest.approx(t975(df) * math.sqrt(var))
    growth = t.loc["m - s"]
    assert growth.comparison == "gain growth" and growth.gain == pytest.approx(0.05) and growth.seeds == "3/3"
    xs = (0.41, 0.42, 0.40)
    terms = [(seed, 2), (binomial, 511), (0.24 / 512, 511), (pd.Series(xs).var(ddof=1) / 3, 2),
             (sum(x * (1 - x) / 512 for x in xs) / 9, 511), (0.24 / 512, 511)]  # m's terms, then s's
    v = sum(t for t, _ in terms)
    half = t975(v ** 2 / sum(t * t / d for t, d in terms)) * math.sqrt(v)
    assert (growth.ci_low, growth.ci_high) == pytest.approx((0.05 - half, 0.05 + half))
    # 5 points of growth, seeds 1 point apart, but the two bases' binomial variances (2.2 points each) span more
    assert growth.ci_low < 0 < growth.ci_high and growth.verdict == "undecided"
    one = size_table(evals, ["s", "l"], 4, 16).set_index("model")  # one seed: no interval
    assert math.isnan(one.loc["l"].ci_low) and one.loc["l - s"].verdict == "undecided"
    assert size_table(evals, ["absent"], 4, 16).empty


def test_model_of_falls_back_to_the_model_path(tmp_path):
    rec = {"meta": {"method": "esopt"}, "model": "results/train/es/m9b/sudoku/h4_g8_s0/model"}
    assert model_of(tmp_path / "x.json", rec) == "m9b"
    assert model_of(tmp_path / "results/eval/m4b/es/r/h4.json", rec) == "m4b"
    assert model_of(tmp_path / "x.json", {"meta": {"model": "named"}}) == "named"
    assert model_of(tmp_path / "x.json", {"meta": {}, "model": "results/models/base-m"}) == "base-m"


def test_plot_population(tree, tmp_path):
    evals = load_population_evals(rel(tree, "results/eval/*/es/*/h4.json"))
    ref = {"tiny-qwen35": {8: 2.95, 16: 22.92}, "absent": {8: 30.21}}
    t = population_table(evals, ref)
    out = tmp_path / "pop.png"
    plot_population(t, out, reference=ref, title="t")
    assert out.stat().st_size > 1000
    plot_population(t.iloc[0:0], tmp_path / "empty.png")
    assert (tmp_path / "empty.png").stat().st_size > 0


# ---------------------------------------------------------------- σ_T ablation


def test_sigma_ablation_table(tree, tmp_path):
    evals = load_evals(rel(tree, "results/eval/tiny-qwen35/*/*/h*.json"))
    ref = {"esopt": {15: 53.13, 4: 50.0}, "es_sigmaT0": 28.13}
    t = ablation_table(evals, 4, ref)
    t16 = t[t.population.isna() | (t.population == 16)].set_index("method")
    assert t.method.tolist() == ["grpo", "es_vanilla", "es_sigmaT0", "esopt", "esopt"]  # esopt at G 8 and 16
    es = t16.loc["esopt"]
    a, b = 0.25 + 0.2 + 0.16, 0.25 + 0.2 + 0.16 + 0.02
    assert es.seeds == 2 and es.success_mean == pytest.approx((a + b) / 2)
    assert es.success_min == pytest.approx(a) and es.success_max == pytest.approx(b)
    v = t16.loc["es_vanilla"]
    assert v.success_mean == pytest.approx(0.32) and v.success_std == pytest.approx(pd.Series([0.3, 0.34]).std())
    assert v.delta_vs_esopt == pytest.approx(0.32 - (a + b) / 2)
    s0 = t16.loc["es_sigmaT0"]
    assert s0.paper_success == pytest.approx(0.2813) and s0.paper_delta_vs_esopt == pytest.approx(0.2813 - 0.5)
    assert es.paper_success == pytest.approx(0.5)  # {H*: %}: the value at the ablation's H*
    assert math.isnan(t16.loc["grpo"].delta_vs_esopt)  # no population: which ESOpt is ambiguous
    assert parse_flat_reference({"esopt": {15: 53.13}}, 4) == {}
    out = tmp_path / "abl.png"
    plot_ablation(t, evals, out, reference=ref, title="t")
    assert out.stat().st_size > 1000


# ---------------------------------------------------------------- wall clock


def test_wall_clock_table(tree, tmp_path):
    budgets = load_budgets(rel(tree, "results/train/*/tiny-qwen35/sudoku/*/budget.json"))
    t = wall_table(budgets, {"esopt": 9.4, "grpo": {4: 19.0}})
    r = t.set_index(["method", "horizon", "population"])
    es = r.loc[("esopt", 4, 16)]
    w = [300 + 120 + 0 + 16, 300 + 120 + 10 + 16]  # the two seeds' wall_s
    assert es.seeds == 2 and es.wall_h_mean == pytest.approx(sum(w) / 2 / 3600)
    assert es.wall_h_std == pytest.approx(pd.Series(w).std() / 3600)
    assert es.wall_s_per_step_mean == pytest.approx(sum(w) / 2 / 6)
    assert es.episodes_per_step == 512 and es.steps == 6 and es.wall_ratio_to_esopt == pytest.approx(1.0)
    grpo = t[(t.method == "grpo") & (t.horizon == 4)].iloc[0]
    assert grpo.wall_h_mean == pytest.approx(560.5 / 3600) and grpo.episodes_per_step == 128
    assert grpo.wall_ratio_to_esopt == pytest.approx(560.5 / (sum(w) / 2))  # over ESOpt's largest G
    assert grpo.paper_wall_h == 19.0 and grpo.paper_ratio_to_esopt == pytest.approx(19.0 / 9.4)
    g2 = t[(t.method == "grpo") & (t.horizon == 2)].iloc[0]
    assert math.isnan(g2.paper_wall_h)  # the reference names H*=4 only
    assert r.loc[("esopt", 2, 8)].paper_wall_h == 9.4  # a plain number: every H*
    assert set(t.method) == {"grpo", "es_vanilla", "es_sigmaT0", "esopt"}
    assert parse_hours(parse_hours({"esopt": 9.4})) == {"esopt": {None: 9.4}}  # idempotent
    out = tmp_path / "wall.png"
    plot_wallclock(t, out, reference={"esopt": 9.4, "grpo": 19.0}, title="t")
    assert out.stat().st_size > 1000
    plot_wallclock(wall_table(budgets[budgets.method == "grpo"]), tmp_path / "rl_only.png")  # no ratio panel
    assert (tmp_path / "rl_only.png").stat().st_size > 1000


def test_ahd_table_matches_each_setting_and_counts_wins(tree):
    runs = load_ahd_runs(rel(tree, "results/ahd/*/*/*/r*/result.json"))
    assert len(runs) == 16
    tab = ahd_comparisons(runs)
    assert list(zip(tab.task, tab.search)) == [("construct_tsp", "EoH"), ("construct_tsp", "Sample"),
                                               ("aco_bpp", "EoH"), ("aco_bpp", "Sample")]  # the paper's task order
    eoh = tab.iloc[0]  # ESOpt 0.5 lower in both repetitions: a win, 2 of 2 pairs
    assert (eoh.baseline, eoh.esopt, eoh.difference, eoh.win, eoh["pair wins"]) == (10.5, 10.0, -0.5, True, 2)
    assert eoh.reference == 20.0 and eoh["baseline std"] == pytest.approx(0.7071, abs=1e-4)
    sample = tab.iloc[1]  # a tie is not a win
    assert (sample.difference, sample.win, sample["pair wins"]) == (0.0, False, 0)
    assert win_summary(tab) == "ESOpt improves its baseline in 2 of 4 settings (4 of 8 matched pairs)"
    assert win_summary(tab, {"wins": 28, "comparisons": 36}).endswith("paper: 28 of 36")


def test_ahd_run_without_a_valid_heuristic_counts_as_worst(tree, tmp_path):
    write_ahd_run(tmp_path, "aco_tsp", "eoh", 100, False, 0, 5.0, 6.0)
    write_ahd_run(tmp_path, "aco_tsp", "eoh", 100, True, 0, None, 6.0)
    tab = ahd_comparisons(load_ahd_runs(rel(tmp_path, "results/ahd/*/*/*/r*/result.json")))
    assert tab.iloc[0].esopt == math.inf and not tab.iloc[0].win and math.isnan(tab.iloc[0].difference)
    with pytest.raises(ValueError, match="two runs of the same setting"):
        load_ahd_runs([tmp_path / "results/ahd/tiny-qwen35-ahd/aco_tsp/eoh_b100_base/r0"] * 2)


# ---------------------------------------------------------------- the notebooks


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_notebook_is_clean_and_takes_the_documented_parameters(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "store notebooks without outputs"
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1
    names = [t.id for node in ast.parse(params[0].source).body for t in node.targets]
    assert names == PARAMETERS[name]
    assert any(c.cell_type == "markdown" for c in nb.cells[nb.cells.index(params[0]):])
    # the last cell writes the report's provenance record beside its table
    assert code[-1].id == "provenance" and "write_provenance(" in code[-1].source


def notebook_params(root: Path, out: Path) -> dict[str, dict]:
    """What the rules pass: relative paths (to the workdir), YAML lists and maps."""
    ev = lambda pattern: [str(p.relative_to(root)) for p in rel(root, pattern)]
    common = lambda n: {"table": f"{out}/{n}.csv", "figure": f"{out}/{n}.png", "title": f"test: {n}"}
    return {
        "sudoku_horizon": {"evals": ev("results/eval/tiny-qwen35/base/h*.json") + ev("results/eval/tiny-qwen35/es/*/h*.json"),
                           "summary": f"{out}/sudoku_horizon_summary.csv", **common("sudoku_horizon")},
        "horizon_crossover": {"evals": ev("results/eval/tiny-qwen35/*/*/h*.json") + ev("results/eval/tiny-qwen35/base/h*.json"),
                              "budgets": ev("results/train/*/tiny-qwen35/sudoku/*/budget.json"), "population": 16,
                              "reference": {"esopt": {2: 60.0, 4: 53.13}, "grpo": {4: 40.63}},
                              **common("horizon_crossover")},
        "memory": {"memory": ev("results/memory/tiny-qwen35-probe/*.json"), **common("memory")},
        "training_curves": {"runs": [str(p.relative_to(root)) for p in
                                     sorted((root / "results/train").glob("*/tiny-qwen35/sudoku/*"))],
                            **common("training_curves")},
        "population": {"evals": ev("results/eval/*/es/*/h4.json") + ev("results/eval/*/base/h4.json"),
                       "reference": {"tiny-qwen35": {8: 2.95, 16: 22.92}}, "models": ["tiny-qwen35", "small-qwen35"],
                       "size_horizon": 4, "size_population": 16, "size_table": f"{out}/model_size.csv",
                       **common("population")},
        "sigma_ablation": {"evals": ev("results/eval/tiny-qwen35/es*/*/h4.json"), "horizon": 4,
                           "reference": {"esopt": 53.13, "es_sigmaT0": 28.13}, **common("sigma_ablation")},
        "wall_clock": {"budgets": ev("results/train/*/tiny-qwen35/sudoku/*/budget.json"),
                       "reference": {"esopt": 9.4, "grpo": 19.0}, **common("wall_clock")},
        "tool_agents": {"evals": ev("results/eval/tiny-qwen35-tools/tools/*/*.json"), "columns": [list(kv) for kv in TOOL_COLUMNS.items()],
                        "reference": {"DAPO": 13.8, "AIME": 15.0, "DocVQA": 12.3}, **common("tool_agents")},
        "webarena": {"evals": ev("results/eval/tiny-qwen35-web/web/*/*.json"), "eval_set": "lite",
                     "reference": {"no_skill": 29.47, "esopt": 36.16, "trace2skill": 33.94, "esopt_trace2skill": 36.36},
                     **common("webarena")},
        "ahd": {"runs": ev("results/ahd/*/*/*/r*/result.json"), "reference": {"wins": 28, "comparisons": 36},
                **common("ahd")},
    }


@pytest.mark.slow
def test_notebooks_run_under_papermill(tree, tmp_path):
    """Each notebook, run as the rule runs it (papermill CLI, YAML parameters, --cwd the
    pipeline root): no error output, a PNG figure and a CSV table with rows."""
    import yaml

    out = tmp_path / "out"
    params = notebook_params(tree, out)
    assert set(params) == set(PARAMETERS)
    for name, p in params.items():
        assert set(p) <= set(PARAMETERS[name])
        executed = out / "notebooks" / f"{name}.ipynb"
        executed.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "papermill", str(NOTEBOOKS / f"{name}.ipynb"), str(executed),
                               "-k", "python3", "-y", yaml.safe_dump(p), "--cwd", str(tree)],
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, f"{name}:\n{proc.stderr[-3000:]}"
        nb = nbformat.read(executed, as_version=4)
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if o.output_type == "error"]
        assert not errors, f"{name}: {errors}"
        assert Path(p["figure"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert len(pd.read_csv(p["table"])) > 0, name
        # the provenance record beside the table lists the notebook's inputs and its table(s) and figure
        prov = json.loads(Path(p["table"]).with_suffix(".provenance.json").read_text())
        assert prov["command"] == f"notebook:{name}" and prov["config"] == {}, name
        assert p["figure"] in prov["outputs"] and p["table"] in prov["outputs"], (name, prov["outputs"])
        assert prov["inputs"] and all(not f.endswith((".provenance.json", ".safetensors")) for f in prov["inputs"]), name
        assert prov["params"]["title"] == p["title"], name
        # the figure is shown in the executed notebook, the log of the run
        assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", [])), name
    assert len(pd.read_csv(out / "sudoku_horizon_summary.csv")) > 0
    prov = json.loads((out / "sudoku_horizon.provenance.json").read_text())
    assert str(out / "sudoku_horizon_summary.csv") in prov["outputs"]
    runs = json.loads((out / "training_curves.provenance.json").read_text())["inputs"]
    assert {Path(f).name for f in runs} == {"metrics.jsonl", "budget.json"}  # not the run directories' models

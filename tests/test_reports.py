"""The ES-vs-RL method table and crossover figure, and the memory report, on synthetic inputs."""

import json
import math

import pandas as pd
import pytest

from esopt.report.memory import load_memory, memory_table, plot_memory
from esopt.report.methods import load_budgets, methods_table, plot_crossover
from esopt.report.sudoku import load_evals

REFERENCE = {"esopt": {"5": 89.58, "10": 62.5, "15": 53.13}, "grpo": {"10": 67.71, "15": 40.63},
             "ppo": {"5": 90.63, "15": 0.0}}


def write_eval(d, name, horizon, success, method, train_horizon=None, seed=None, population=None, turns=3.0):
    path = d / f"{name}.json"
    path.write_text(json.dumps({
        "benchmark": "sudoku", "horizon": horizon, "episodes": 100, "success": success,
        "success_se": math.sqrt(success * (1 - success) / 100), "mean_turns": 5.0, "mean_turns_solved": turns,
        "invalid_per_episode": 0.0, "illegal_per_episode": 1.0,
        "meta": {"method": method, "train_horizon": train_horizon, "seed": seed, "population": population},
    }))
    return path


def write_budget(d, method, algo, horizon, seed, population=None, steps=10, episodes=1000, wall_s=100.0):
    run = d / f"{method}_h{horizon}_s{seed}"
    run.mkdir(parents=True)
    (run / "budget.json").write_text(json.dumps({
        "method": method, "algo": algo, "horizon": horizon, "seed": seed, "population": population,
        "planned": {"steps": steps, "episodes_per_step": episodes // steps}, "steps": steps, "episodes": episodes,
        "generated_tokens": 10 * episodes, "rollout_tokens": 30 * episodes,
        "train_tokens": 0 if algo == "es" else 30 * episodes, "flops": 1e12, "flops_per_step": 1e12 / steps,
        "wall_s": wall_s, "wall_s_per_step": wall_s / steps, "params": 1000,
    }))
    return run / "budget.json"


@pytest.fixture
def inputs(tmp_path):
    ev, bu = tmp_path / "eval", tmp_path / "train"
    ev.mkdir()
    evals = [write_eval(ev, f"base_h{h}", h, s, "base") for h, s in [(2, 0.5), (3, 0.3)]]
    # ES at H*=2: two seeds, plus an off-diagonal evaluation that must be left out
    evals += [write_eval(ev, "es_h2_s0_e2", 2, 0.6, "esopt", 2, 0, 16, turns=2.0),
              write_eval(ev, "es_h2_s1_e2", 2, 0.7, "esopt", 2, 1, 16, turns=4.0),
              write_eval(ev, "es_h2_s0_e3", 3, 0.9, "esopt", 2, 0, 16)]
    # GRPO at H*=3: one seed
    evals += [write_eval(ev, "grpo_h3_s0", 3, 0.4, "grpo", 3, 0)]
    budgets = [write_budget(bu, "esopt", "es", 2, 0, 16, steps=10, episodes=1000, wall_s=100.0),
               write_budget(bu, "esopt", "es", 2, 1, 16, steps=20, episodes=3000, wall_s=300.0),
               write_budget(bu, "grpo", "grpo", 3, 0, steps=8, episodes=800, wall_s=80.0)]
    return evals, budgets


def test_methods_table_rows_and_values(inputs):
    evals, budgets = inputs
    bud = load_budgets(budgets)
    assert len(bud) == 3 and set(bud.method) == {"esopt", "grpo"}
    t = methods_table(load_evals(evals), bud, json.dumps(REFERENCE))
    assert list(zip(t.method, t.horizon)) == [("base", 2), ("base", 3), ("grpo", 3), ("esopt", 2)]
    es = t[t.method == "esopt"].iloc[0]
    assert es.seeds == 2
    assert es.success_mean == pytest.approx(0.65)
    assert es.success_std == pytest.approx(pd.Series([0.6, 0.7]).std(ddof=1))
    se = [math.sqrt(p * (1 - p) / 100) for p in (0.6, 0.7)]
    assert es.success_se_mean == pytest.approx(sum(se) / 2)
    assert es.mean_turns_solved == pytest.approx(3.0)
    assert es.steps == pytest.approx(15) and es.episodes == pytest.approx(2000) and es.wall_s == pytest.approx(200)
    assert es.train_tokens == 0 and es.rollout_tokens == pytest.approx(60000)
    assert es.wall_s_per_step == pytest.approx((10 + 15) / 2) and es.flops_per_step == pytest.approx((1e11 + 5e10) / 2)
    grpo = t[t.method == "grpo"].iloc[0]
    assert grpo.seeds == 1 and math.isnan(grpo.success_std) and grpo.success_mean == pytest.approx(0.4)
    assert grpo.episodes == 800 and grpo.train_tokens == 24000
    base = t[t.method == "base"]
    assert base.steps.isna().all() and base.success_mean.tolist() == pytest.approx([0.5, 0.3])
    # our horizons are not the reference's: no paper value
    assert t.paper_success.isna().all()


def test_methods_table_paper_column(inputs):
    evals, budgets = inputs
    t = methods_table(load_evals(evals), load_budgets(budgets), {"esopt": {"2": 80.0}, "grpo": {3: 40.63}})
    got = dict(zip(zip(t.method, t.horizon), t.paper_success))
    assert got[("esopt", 2)] == pytest.approx(0.8) and got[("grpo", 3)] == pytest.approx(0.4063)
    assert math.isnan(got[("base", 2)])


def test_methods_table_without_budgets_or_reference(inputs):
    evals, _ = inputs
    for ref in (None, "", "{}"):
        t = methods_table(load_evals(evals), None, ref)
        assert len(t) == 4 and t.steps.isna().all() and t.paper_success.isna().all()


def test_methods_table_several_populations(tmp_path, inputs):
    evals, budgets = inputs
    evals = evals + [write_eval(tmp_path / "eval", "es_h2_g8", 2, 0.1, "esopt", 2, 0, 8)]
    with pytest.raises(ValueError, match="population"):
        methods_table(load_evals(evals), load_budgets(budgets))
    t = methods_table(load_evals(evals), load_budgets(budgets), population=8)
    es = t[t.method == "esopt"].iloc[0]
    assert es.seeds == 1 and es.success_mean == pytest.approx(0.1)
    assert math.isnan(es.steps)  # no budget for the G=8 run
    assert len(t[t.method == "base"]) == 2 and len(t[t.method == "grpo"]) == 1


def test_plot_crossover(tmp_path, inputs):
    evals, budgets = inputs
    t = methods_table(load_evals(evals), load_budgets(budgets))
    for ref in (REFERENCE, None):
        out = tmp_path / f"fig_{ref is None}.png"
        plot_crossover(t, out, reference=ref, title="t")
        assert out.stat().st_size > 1000
    # only an off-diagonal evaluation: an empty table, still a figure
    empty = methods_table(load_evals(evals[4:5]), None)
    assert len(empty) == 0
    plot_crossover(empty, tmp_path / "empty.png", reference=REFERENCE)
    assert (tmp_path / "empty.png").stat().st_size > 0


def write_memory(d, method, state, above, peak=True, measure="rss"):
    rec = {"method": method, "model": "tiny", "params": state // 2, "dtype": "bfloat16", "device": "cpu",
           "measure": measure, "model_state_bytes": state, "peak_above_load_bytes": above, "step_wall_s": 1.5,
           "breakdown": {"weights": state}}
    if peak:
        rec["peak_bytes"] = state + above
    path = d / f"{method}.json"
    path.write_text(json.dumps(rec))
    return path


def test_memory_table_ratios(tmp_path):
    files = [write_memory(tmp_path, "grpo", 200, 1200), write_memory(tmp_path, "inference", 200, 0),
             write_memory(tmp_path, "es", 200, 20, peak=False), write_memory(tmp_path, "ppo", 200, 1600)]
    t = memory_table(load_memory(files))
    assert t.method.tolist() == ["inference", "es", "grpo", "ppo"]
    r = t.set_index("method")
    assert r.loc["es", "peak_bytes"] == 220  # filled in from state + above load
    assert r.loc["inference", "ratio_to_inference"] == pytest.approx(1.0)
    assert r.loc["es", "ratio_to_inference"] == pytest.approx(1.1)
    assert r.loc["grpo", "ratio_to_es"] == pytest.approx(1400 / 220)
    assert r.loc["ppo", "ratio_to_inference"] == pytest.approx(9.0)
    assert r.loc["grpo", "peak_gib"] == pytest.approx(1400 / 2 ** 30)
    out = tmp_path / "mem.png"
    plot_memory(t, out, paper={"es_gb": 8.41, "grpo_gb": 58.88}, title="t")
    assert out.stat().st_size > 1000


def test_memory_missing_methods(tmp_path):
    t = memory_table(load_memory([write_memory(tmp_path, "es", 2 ** 30, 2 ** 29)]))
    assert len(t) == 1 and math.isnan(t.ratio_to_inference[0]) and t.ratio_to_es[0] == pytest.approx(1.0)
    out = tmp_path / "mem.png"
    plot_memory(t, out)
    assert out.stat().st_size > 1000
    with pytest.raises(ValueError, match="more than one"):
        load_memory([tmp_path / "es.json", tmp_path / "es.json"])

"""ES vs RL on Sudoku: one row per (method, H*) with success and training budget, and
the horizon-crossover figure (success vs H*, one line per method, paper values beside)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from esopt.report.files import save_figure

# Drawing order, legend labels and styles; methods not listed here are drawn after, in
# matplotlib's colour cycle, under their own name.
METHODS = ["base", "ppo", "grpo", "grpo_t1", "es_vanilla", "es_sigmaT0", "esopt"]
LABELS = {
    "base": "base", "ppo": "Agentic PPO", "grpo": "Agentic GRPO (T 0.7)", "grpo_t1": "Agentic GRPO (T 1)",
    "es_vanilla": "Vanilla ES (constant σ)", "es_sigmaT0": "ESOpt, σ_T = 0", "esopt": "Agentic ESOpt",
}
STYLES = {
    "base": ("0.45", "o"), "ppo": ("tab:orange", "^"), "grpo": ("tab:green", "D"), "grpo_t1": ("tab:olive", "v"),
    "es_vanilla": ("tab:purple", "P"), "es_sigmaT0": ("tab:cyan", "X"), "esopt": ("tab:blue", "s"),
}
# a budget file without a "method" names its algorithm only
ALGO_METHOD = {"es": "esopt", "grpo": "grpo", "ppo": "ppo"}

BUDGET_COLUMNS = ["steps", "episodes", "generated_tokens", "rollout_tokens", "train_tokens", "flops_per_step",
                  "wall_s_per_step", "wall_s"]
BUDGET_FILE_COLUMNS = ["method", "algo", "horizon", "seed", "population", "planned_steps", "planned_episodes_per_step",
                       *BUDGET_COLUMNS, "flops", "params", "source"]
TABLE_COLUMNS = ["method", "horizon", "seeds", "success_mean", "success_std", "success_se_mean", "mean_turns_solved",
                 *BUDGET_COLUMNS, "paper_success"]


def _opt_int(v: Any) -> int | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)


def load_budgets(paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Training budget files (DIR/budget.json; a directory stands for its budget.json),
    one row per training run."""
    rows = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            p = p / "budget.json"
        rec = json.loads(p.read_text())
        method = rec.get("method") or ALGO_METHOD.get(rec.get("algo"))
        if not method:
            raise ValueError(f"{p}: budget file names neither a method nor a known algo")
        if rec.get("horizon") is None:
            raise ValueError(f"{p}: budget file has no horizon")
        planned = rec.get("planned") or {}
        rows.append({
            "method": method, "algo": rec.get("algo"), "horizon": int(rec["horizon"]), "seed": _opt_int(rec.get("seed")),
            "population": _opt_int(rec.get("population")), "planned_steps": planned.get("steps"),
            "planned_episodes_per_step": planned.get("episodes_per_step"),
            **{k: rec.get(k) for k in [*BUDGET_COLUMNS, "flops", "params"]}, "source": str(p),
        })
    df = pd.DataFrame(rows, columns=BUDGET_FILE_COLUMNS)
    for c in ["horizon", "seed", "population"]:
        df[c] = df[c].astype("Int64")
    for c in [*BUDGET_COLUMNS, "flops", "params"]:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    return df.sort_values(["method", "horizon", "population", "seed"], na_position="first").reset_index(drop=True)


def parse_reference(text: str | Mapping | None) -> dict[str, dict[int, float]]:
    """`{"esopt": {"5": 89.58, ...}, ...}` (success %, by method then H*) -> {method: {H*: %}};
    empty for None, "" or "{}". Null values are dropped."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}
    ref = json.loads(text) if isinstance(text, str) else text
    if not isinstance(ref, Mapping):
        raise ValueError("--reference must be a JSON object {method: {H*: success %}}")  # noqa: TRY004 (a user error: one clear line)
    out: dict[str, dict[int, float]] = {}
    for method, by_h in ref.items():
        if not isinstance(by_h, Mapping):
            raise ValueError(f"--reference[{method!r}] must be an object {{H*: success %}}")  # noqa: TRY004
        vals = {int(h): float(v) for h, v in by_h.items() if v is not None}
        if vals:
            out[str(method)] = vals
    return out


def _method_order(methods) -> list[str]:
    methods = list(dict.fromkeys(methods))
    return [m for m in METHODS if m in methods] + sorted(m for m in methods if m not in METHODS)


def method_order(methods) -> list[str]:
    """The methods given, once each, in drawing order (METHODS first, then by name)."""
    return _method_order(methods)


def series_colors(methods: Sequence[str]) -> list[Any]:
    """A colour per series, given each series' method in drawing order: the method's
    colour (STYLES; unlisted methods take the colour cycle), lighter for its earlier
    series when a method has several (e.g. smaller populations), the last at full
    strength."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb

    cycle = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"][::-1])
    base = {m: STYLES[m][0] if m in STYLES else next(cycle, "k") for m in dict.fromkeys(methods)}
    count = {m: list(methods).count(m) for m in base}
    seen: dict[str, int] = {}
    out = []
    for m in methods:
        k = seen.get(m, 0)
        seen[m] = k + 1
        n = count[m]
        white = 0.6 * (n - 1 - k) / (n - 1) if n > 1 else 0.0
        out.append(tuple(c + (1 - c) * white for c in to_rgb(base[m])))
    return out


def series_label(method: str, population: Any = None, model: Any = None) -> str:
    """Legend label of one line: the method's label, then "G=…" and the model where given."""
    label = LABELS.get(method, method)
    if population is not None and not pd.isna(population):
        label += f", G={int(population)}"
    if model is not None and not pd.isna(model):
        label += f" ({model})"
    return label


def methods_table(evals: pd.DataFrame, budgets: pd.DataFrame | None = None,
                  reference: Mapping[str, Mapping[int, float]] | str | None = None,
                  population: int | None = None) -> pd.DataFrame:
    """One row per (method, H*) from evaluations at the training horizon (the base model:
    every evaluated horizon). `evals` is `esopt.report.sudoku.load_evals`'s frame.

    success_mean/_std are over seeds (std NaN for one seed), success_se_mean the mean
    binomial SE of the evaluations; budget columns are averaged over the training runs
    of that (method, H*) (NaN for the base model); paper_success is the reference value
    as a fraction, like success_mean (NaN when none).

    ES runs at several population sizes would mix in one row: pass `population` to keep
    one (training runs with no population, RL and base, are kept); otherwise that raises."""
    reference = parse_reference(reference)
    ev = evals.copy()
    ev["horizon"] = ev["train_horizon"].where(ev.method != "base", ev["eval_horizon"])
    ev = ev[(ev.method == "base") | (pd.to_numeric(ev.train_horizon, errors="coerce") == ev.eval_horizon)]
    bud = budgets.copy() if budgets is not None else pd.DataFrame(columns=BUDGET_FILE_COLUMNS)
    if population is not None:
        ev = ev[ev.population.isna() | (pd.to_numeric(ev.population, errors="coerce") == population)]
        bud = bud[bud.population.isna() | (pd.to_numeric(bud.population, errors="coerce") == population)]
    ev = ev.astype({"horizon": int}) if len(ev) else ev
    rows = []
    for (method, h), grp in ev.groupby(["method", "horizon"], sort=False):
        pops = sorted({int(p) for p in grp.population.dropna()})
        if len(pops) > 1:
            raise ValueError(f"{method} at H*={h} has evaluations at populations {pops}; choose one with --population")
        seeds = grp.seed.fillna(-1)
        if seeds.duplicated().any():
            dup = grp.source[seeds.duplicated(keep=False)].tolist()
            raise ValueError(f"{method} at H*={h}: more than one evaluation of the same run: {dup}")
        n = len(grp)
        b = bud[(bud.method == method) & (bud.horizon == h)]
        ref = reference.get(method, {}).get(int(h))
        rows.append({
            "method": method, "horizon": int(h), "seeds": n,
            "success_mean": grp.success.astype(float).mean(),
            "success_std": grp.success.astype(float).std(ddof=1) if n > 1 else float("nan"),
            "success_se_mean": grp.success_se.astype(float).mean(),
            "mean_turns_solved": pd.to_numeric(grp.mean_turns_solved, errors="coerce").mean(),
            **{c: (b[c].astype(float).mean() if len(b) else float("nan")) for c in BUDGET_COLUMNS},
            "paper_success": ref / 100 if ref is not None else float("nan"),
        })
    df = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    if len(df):
        order = {m: i for i, m in enumerate(_method_order(df.method))}
        df = df.sort_values(["method", "horizon"], key=lambda s: s.map(order) if s.name == "method" else s)
    return df.reset_index(drop=True)


def plot_crossover(table: pd.DataFrame, path: str | os.PathLike,
                   reference: Mapping[str, Mapping[int, float]] | str | None = None, title: str = "") -> None:
    """Success (%) vs H*, one line per method in `table` (methods_table's frame); error
    bars one std over seeds, or one binomial SE where a point has a single seed. Paper
    values (reference, success %) as hollow markers of the method's colour, for the
    methods drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    reference = parse_reference(reference)
    fig, ax = plt.subplots(figsize=(7.6, 4.2))
    cycle = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"][::-1])
    horizons: set[int] = set()
    top = 0.0
    drawn_ref = False
    for method in _method_order(table.method):
        grp = table[table.method == method].sort_values("horizon")
        color, marker = STYLES.get(method) or (next(cycle, "k"), "o")
        err = [100 * (r.success_std if r.seeds > 1 else r.success_se_mean) for r in grp.itertuples()]
        ax.errorbar(grp.horizon, 100 * grp.success_mean, yerr=err, marker=marker, color=color, capsize=3,
                    lw=1.2 if method == "base" else 1.6, label=LABELS.get(method, method))
        horizons |= {int(h) for h in grp.horizon}
        top = max([top, *(100 * grp.success_mean + pd.Series(err, index=grp.index).fillna(0)).dropna()])
        ref = reference.get(method, {})
        if ref:
            hs = sorted(ref)
            ax.plot(hs, [ref[h] for h in hs], ls="none", marker=marker, markersize=9, markerfacecolor="none",
                    markeredgecolor=color, markeredgewidth=1.5)
            horizons |= set(hs)
            top = max(top, *ref.values())
            drawn_ref = True
    handles, labels = ax.get_legend_handles_labels()
    if drawn_ref:
        handles.append(Line2D([], [], ls="none", marker="o", markersize=9, markerfacecolor="none",
                              markeredgecolor="0.2", markeredgewidth=1.5))
        labels.append("paper (Qwen3.5-4B)")
    if not len(table):
        ax.text(0.5, 0.5, "no evaluations at the training horizon", transform=ax.transAxes, ha="center", va="center")
    ax.set_xlabel("minimum success horizon H* (blanks)")
    ax.set_ylabel("success rate (%)")
    if horizons:
        ax.set_xticks(sorted(horizons))
    ax.set_ylim(-2, min(102, top * 1.15 + 5))  # below 0 so that points at 0 are not cut
    ax.grid(alpha=0.3)
    if handles:
        ax.legend(handles, labels, fontsize=8, title="error bars: ±1 std over seeds\n(±1 SE if one seed)",
                  title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=130, tight=False)

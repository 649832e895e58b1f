"""Population sensitivity: final held-out success of ESOpt against the population size
G, one line per model, beside the paper's
(config key reference.population)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from esopt.report.files import save_figure
from esopt.report.methods import STYLES, method_order, parse_reference
from esopt.report.sudoku import load_evals

TABLE_COLUMNS = ["model", "method", "population", "horizon", "seeds", "success_mean", "success_std",
                 "success_se_mean", "mean_turns_solved", "paper_success"]


def model_of(path: str | os.PathLike, rec: Mapping[str, Any] | None = None) -> str | None:
    """The model an evaluation is of: meta.model, else MODEL in .../eval/MODEL/...,
    else the model directory it names (.../train/ALGO/MODEL/... or .../models/MODEL)."""
    if rec is None:
        rec = json.loads(Path(path).read_text())
    name = (rec.get("meta") or {}).get("model")
    if name:
        return str(name)
    parts = Path(path).parts
    for i, part in enumerate(parts[:-2]):
        if part == "eval":
            return parts[i + 1]
    mparts = Path(str(rec.get("model") or "")).parts
    for i, part in enumerate(mparts):
        if part == "train" and i + 2 < len(mparts):
            return mparts[i + 2]
        if part == "models" and i + 1 < len(mparts):
            return mparts[i + 1]
    return None


def load_population_evals(paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """esopt.report.sudoku.load_evals' frame with a model column."""
    df = load_evals(paths)
    df.insert(0, "model", [model_of(p) for p in df.source])
    return df


def _ref_for(reference: Mapping[str, Mapping[int, float]], model: Any) -> Mapping[int, float]:
    if model in reference:
        return reference[model]
    low = {str(k).lower(): v for k, v in reference.items()}
    return low.get(str(model).lower(), {})


def population_table(evals: pd.DataFrame, reference: Mapping | str | None = None) -> pd.DataFrame:
    """load_population_evals' frame -> one row per (model, method, G, H*): success mean
    and std over seeds (ddof 1; NaN for one seed) and the mean binomial SE, of the
    evaluations at the training horizon (others are left out). A base model (no G) is
    a row with population <NA>. paper_success: reference[model][G] / 100 for ESOpt rows
    (reference: model name -> {G: success %}; names match case-insensitively)."""
    reference = parse_reference(reference)
    ev = evals[evals.train_horizon.isna()
               | (pd.to_numeric(evals.train_horizon, errors="coerce") == evals.eval_horizon)].copy()
    ev["population"] = pd.to_numeric(ev.population, errors="coerce").astype("Int64")
    rows = []
    for (model, method, g, h), grp in ev.groupby(["model", "method", "population", "eval_horizon"], dropna=False,
                                                 sort=False):
        seeds = grp.seed.fillna(-1)
        if seeds.duplicated().any():
            raise ValueError(f"{model} {method} G={g} H*={h}: more than one evaluation of the same run: "
                             f"{grp.source[seeds.duplicated(keep=False)].tolist()}")
        n = len(grp)
        ref = _ref_for(reference, model).get(int(g)) if method == "esopt" and not pd.isna(g) else None
        rows.append({
            "model": model, "method": method, "population": g, "horizon": int(h), "seeds": n,
            "success_mean": grp.success.astype(float).mean(),
            "success_std": grp.success.astype(float).std(ddof=1) if n > 1 else float("nan"),
            "success_se_mean": grp.success_se.astype(float).mean(),
            "mean_turns_solved": pd.to_numeric(grp.mean_turns_solved, errors="coerce").mean(),
            "paper_success": ref / 100 if ref is not None else float("nan"),
        })
    df = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    df["population"] = df.population.astype("Int64")
    order = {m: i for i, m in enumerate(method_order(df.method))}
    return df.sort_values(["model", "method", "horizon", "population"], na_position="first",
                          key=lambda s: s.map(order) if s.name == "method" else s).reset_index(drop=True)


def plot_population(table: pd.DataFrame, path: str | os.PathLike, reference: Mapping | str | None = None,
                    title: str = "") -> None:
    """Final success (%) vs G on a log2 axis: one line per model (and method and H*
    where several), error bars one std over seeds (one binomial SE for a single seed),
    the base model as a dotted horizontal line of the model's colour, the paper's
    values (reference) as hollow markers for the models drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, NullLocator

    reference = parse_reference(reference)
    fig, ax = plt.subplots(figsize=(7.4, 4.2))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    models = list(dict.fromkeys(table.model))
    es = table[table.population.notna()]
    base = table[table.population.isna()]
    several_h = table.horizon.nunique() > 1
    # one colour per model, or per (model, H*) when there are several H*
    ckeys = list(dict.fromkeys(zip(table.model, table.horizon if several_h else [None] * len(table))))
    colors = {k: cycle[i % len(cycle)] for i, k in enumerate(ckeys)}

    def color(model, h):
        return colors[(model, h if several_h else None)]

    several_methods = es.method.nunique() > 1
    xs: set[int] = set()
    top = 0.0
    drawn_ref = False
    for (model, method, h), grp in es.groupby(["model", "method", "horizon"], sort=False):
        grp = grp.sort_values("population")
        err = [100 * (r.success_std if r.seeds > 1 else r.success_se_mean) for r in grp.itertuples()]
        label = str(model) + (f", {method}" if several_methods else "") + (f", H*={h}" if several_h else "")
        marker = STYLES.get(method, (None, "o"))[1]
        ax.errorbar(grp.population.astype(int), 100 * grp.success_mean, yerr=err, marker=marker, capsize=3,
                    color=color(model, h), lw=1.6, label=label)
        xs |= {int(g) for g in grp.population}
        top = max([top, *(100 * grp.success_mean + pd.Series(err, index=grp.index).fillna(0)).dropna()])
    for model in models:
        for r in base[base.model == model].itertuples():
            ax.axhline(100 * r.success_mean, color=color(model, r.horizon), ls=":", lw=1.2,
                       label=f"{model} base" + (f", H*={r.horizon}" if several_h else ""))
            top = max(top, 100 * r.success_mean)
        ref = _ref_for(reference, model)
        if ref and model in set(es.model):
            gs = sorted(ref)
            ax.plot(gs, [ref[g] for g in gs], ls="none", marker="o", markersize=10, markerfacecolor="none",
                    markeredgecolor=color(model, es[es.model == model].horizon.iloc[0]), markeredgewidth=1.5)
            xs |= set(gs)
            top = max(top, *ref.values())
            drawn_ref = True
    handles, labels = ax.get_legend_handles_labels()
    pairs = sorted(zip(handles, labels), key=lambda hl: " base" in hl[1])  # ES lines first, then the base
    handles, labels = [h for h, _ in pairs], [lab for _, lab in pairs]
    if drawn_ref:
        handles.append(Line2D([], [], ls="none", marker="o", markersize=10, markerfacecolor="none",
                              markeredgecolor="0.2", markeredgewidth=1.5))
        labels.append("paper (final test success)")
    ax.set_xscale("log", base=2)
    if xs:
        ax.xaxis.set_major_locator(FixedLocator(sorted(xs)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([str(g) for g in sorted(xs)])
        ax.set_xlim(min(xs) / 2 ** 0.4, max(xs) * 2 ** 0.4)
    else:
        ax.text(0.5, 0.5, "no ES evaluations with a population size", transform=ax.transAxes, ha="center",
                va="center")
    ax.set_xlabel("population size G (log scale)")
    ax.set_ylabel("success rate at the training H* (%)")
    ax.set_ylim(-2, min(102, top * 1.15 + 5))
    ax.grid(alpha=0.3)
    if handles:
        ax.legend(handles, labels, fontsize=8, title="error bars: ±1 std over seeds\n(±1 SE if one seed)",
                  title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


SIZE_COLUMNS = ["comparison", "model", "horizon", "population", "seeds", "base", "esopt", "gain", "ci_low", "ci_high",
                "verdict"]


def _gain(evals: pd.DataFrame, model: str, horizon: int, population: int) -> dict[str, Any] | None:
    """ESOpt's held-out gain over its base at H*: mean over seeds minus the base's success,
    with Var = seed variance / n + mean binomial variance / n + the base's binomial variance
    (one base model per size: its warm start is not repeated) as (variance, degrees of
    freedom) terms, for Welch-Satterthwaite degrees of freedom (esopt.report.verdicts)."""
    from esopt.report.sudoku import binomial_term, seed_mean_terms

    ev = evals[(evals.model == model) & (pd.to_numeric(evals.eval_horizon) == horizon)]
    es = ev[(ev.method == "esopt") & (pd.to_numeric(ev.population, errors="coerce") == population)
            & (pd.to_numeric(ev.train_horizon, errors="coerce") == horizon)]
    base = ev[ev.method == "base"]
    if not len(es) or len(base) != 1:
        return None
    b = base.iloc[0]
    return {"model": model, "n": len(es), "base": float(b.success), "esopt": es.success.astype(float).mean(),
            "gain": es.success.astype(float).mean() - float(b.success),
            "terms": seed_mean_terms(es) + [binomial_term(b)]}


def size_table(evals: pd.DataFrame, models: Sequence[str], horizon: int, population: int) -> pd.DataFrame:
    """The model-size ladder: ESOpt's gain over its base at H* and G for each model (in
    `models` order, smallest first) with its 95% Student t interval (Welch-Satterthwaite
    degrees of freedom, as the verdicts), then the growth of the gain from the first model
    to the last. Verdicts as esopt.report.verdicts: growth
    reproduced when its interval lies above 0 (the paper argues sampled directions get more
    useful as models grow), not reproduced below 0, undecided otherwise or with one seed."""
    from esopt.report.verdicts import t_half_width, verdict

    gains = [g for g in (_gain(evals, m, horizon, population) for m in models) if g is not None]
    rows = []
    for g in gains:
        half = t_half_width(g["terms"]) if g["n"] > 1 else float("nan")
        rows.append({"comparison": "esopt - base", "model": g["model"], "horizon": horizon, "population": population,
                     "seeds": g["n"], "base": g["base"], "esopt": g["esopt"], "gain": g["gain"],
                     "ci_low": g["gain"] - half, "ci_high": g["gain"] + half,
                     "verdict": verdict(g["gain"] - half, g["gain"] + half, None)})
    if len(gains) > 1:
        small, large = gains[0], gains[-1]
        diff = large["gain"] - small["gain"]
        half = t_half_width(large["terms"] + small["terms"]) if min(large["n"], small["n"]) > 1 else float("nan")
        rows.append({"comparison": "gain growth", "model": f"{large['model']} - {small['model']}", "horizon": horizon,
                     "population": population, "seeds": f"{large['n']}/{small['n']}", "base": float("nan"),
                     "esopt": float("nan"), "gain": diff, "ci_low": diff - half, "ci_high": diff + half,
                     "verdict": verdict(diff - half, diff + half, None)})
    return pd.DataFrame(rows, columns=SIZE_COLUMNS)

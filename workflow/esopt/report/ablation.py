"""The σ_T ablation: held-out success at one H* of ESOpt (cosine σ to σ_T > 0), ESOpt
with σ_T = 0 and Vanilla ES (constant σ), beside the paper's
(config key reference.sigma_ablation)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import numpy as np
import pandas as pd

from esopt.report.files import save_figure
from esopt.report.methods import LABELS, STYLES, method_order

TABLE_COLUMNS = ["method", "label", "population", "horizon", "seeds", "success_mean", "success_std",
                 "success_se_mean", "success_min", "success_max", "mean_turns_solved", "delta_vs_esopt",
                 "paper_success", "paper_delta_vs_esopt"]


def parse_flat_reference(text: str | Mapping | None, horizon: int | None = None) -> dict[str, float]:
    """{method: success %} -> dict; a value may also be {H*: %} (the crossover's
    reference), of which the value at `horizon` is taken. None, "" -> {}."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}
    ref = json.loads(text) if isinstance(text, str) else text
    if not isinstance(ref, Mapping):
        raise ValueError("reference must be an object {method: success %}")  # noqa: TRY004 (a user error)
    out = {}
    for method, v in ref.items():
        if isinstance(v, Mapping):
            v = {int(h): x for h, x in v.items()}.get(int(horizon)) if horizon is not None else None
        if v is not None:
            out[str(method)] = float(v)
    return out


def ablation_evals(evals: pd.DataFrame, horizon: int) -> pd.DataFrame:
    """The evaluations at `horizon` of models trained at it (the base model: at it);
    esopt.report.sudoku.load_evals' frame in, the same out."""
    th = pd.to_numeric(evals.train_horizon, errors="coerce")
    keep = (evals.eval_horizon == int(horizon)) & (th.isna() | (th == int(horizon)))
    return evals[keep].reset_index(drop=True)


def ablation_table(evals: pd.DataFrame, horizon: int, reference: Mapping | str | None = None) -> pd.DataFrame:
    """One row per (method, population) of the evaluations at `horizon`: success mean,
    std (ddof 1; NaN for one seed), min and max over seeds, mean binomial SE, the
    difference to ESOpt's mean (at the same population, else ESOpt's only one), and the
    paper's success and difference as fractions (reference: method -> success %)."""
    reference = parse_flat_reference(reference, horizon)
    ev = ablation_evals(evals, horizon)
    ev = ev.assign(population=pd.to_numeric(ev.population, errors="coerce").astype("Int64"))
    rows = []
    for (method, g), grp in ev.groupby(["method", "population"], dropna=False, sort=False):
        seeds = grp.seed.fillna(-1)
        if seeds.duplicated().any():
            raise ValueError(f"{method} G={g} at H*={horizon}: more than one evaluation of the same run: "
                             f"{grp.source[seeds.duplicated(keep=False)].tolist()}")
        s = grp.success.astype(float)
        n = len(grp)
        ref = reference.get(method)
        rows.append({
            "method": method, "label": LABELS.get(method, method), "population": g, "horizon": int(horizon),
            "seeds": n, "success_mean": s.mean(), "success_std": s.std(ddof=1) if n > 1 else float("nan"),
            "success_se_mean": grp.success_se.astype(float).mean(), "success_min": s.min(), "success_max": s.max(),
            "mean_turns_solved": pd.to_numeric(grp.mean_turns_solved, errors="coerce").mean(),
            "paper_success": ref / 100 if ref is not None else float("nan"),
        })
    df = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    df["population"] = df.population.astype("Int64")
    es = df[df.method == "esopt"]
    for i, r in df.iterrows():
        same = es[es.population == r.population] if not pd.isna(r.population) else es.iloc[0:0]
        ref_row = same if len(same) == 1 else (es if len(es) == 1 else None)
        df.loc[i, "delta_vs_esopt"] = (r.success_mean - float(ref_row.success_mean.iloc[0])
                                       if ref_row is not None else float("nan"))
    paper_es = reference.get("esopt")
    df["paper_delta_vs_esopt"] = (df.paper_success - paper_es / 100) if paper_es is not None else float("nan")
    df["delta_vs_esopt"] = df.delta_vs_esopt.astype(float)
    order = {m: i for i, m in enumerate(method_order(df.method))}
    return df.sort_values(["method", "population"], na_position="first",
                          key=lambda s: s.map(order) if s.name == "method" else s).reset_index(drop=True)


def plot_ablation(table: pd.DataFrame, evals: pd.DataFrame, path: str | os.PathLike,
                  reference: Mapping | str | None = None, title: str = "") -> None:
    """A bar per row of ablation_table (mean over seeds, ±1 std), each seed's success as
    a dot, the paper's value (reference) as a black bar-wide line with a diamond."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    horizon = int(table.horizon.iloc[0]) if len(table) else None
    reference = parse_flat_reference(reference, horizon)
    ev = ablation_evals(evals, horizon) if horizon is not None else evals.iloc[0:0]
    several_g = table.population.nunique() > 1
    fig, ax = plt.subplots(figsize=(2.8 + 1.35 * max(len(table), 2), 4.2))
    rng = np.random.default_rng(0)  # dot jitter only
    top = 0.0
    drawn_ref = False
    labels = []
    for i, r in enumerate(table.itertuples()):
        color = STYLES.get(r.method, ("0.5", "o"))[0]
        err = 100 * (r.success_std if r.seeds > 1 else r.success_se_mean)
        ax.bar(i, 100 * r.success_mean, width=0.65, color=color, alpha=0.55, edgecolor=color,
               yerr=err, capsize=4, error_kw={"lw": 1.2})
        pts = ev[(ev.method == r.method)
                 & ((pd.to_numeric(ev.population, errors="coerce") == r.population) if not pd.isna(r.population)
                    else ev.population.isna())]
        xs = i + rng.uniform(-0.12, 0.12, len(pts))
        ax.scatter(xs, 100 * pts.success.astype(float), s=22, color=color, edgecolor="k", lw=0.6, zorder=3)
        ax.annotate(f"{100 * r.success_mean:.1f}", (i, 100 * r.success_mean + (0 if np.isnan(err) else err)),
                    xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=8)
        top = max(top, 100 * r.success_max, 100 * r.success_mean + (0 if np.isnan(err) else err))
        ref = reference.get(r.method)
        if ref is not None:
            ax.plot([i - 0.36, i + 0.36], [ref, ref], color="k", lw=1.6)
            ax.plot([i], [ref], marker="D", color="k", markerfacecolor="white", markersize=6)
            top = max(top, ref)
            drawn_ref = True
        lab = r.label.replace(" (", "\n(")
        lab += f"\nG={int(r.population)}" if several_g and not pd.isna(r.population) else ""
        labels.append(lab + f"\n({r.seeds} seed{'s' if r.seeds > 1 else ''})")
    ax.set_xticks(range(len(table)), labels, fontsize=8)
    if not len(table):
        ax.text(0.5, 0.5, "no evaluations at this horizon", transform=ax.transAxes, ha="center", va="center")
    ax.set_ylabel(f"success rate at H* = {horizon} (%)" if horizon is not None else "success rate (%)")
    ax.set_ylim(0, min(105, top * 1.2 + 5))
    ax.set_xlim(-0.6, max(len(table), 1) - 0.4)
    ax.grid(axis="y", alpha=0.3)
    handles = [Line2D([], [], ls="none", marker="o", color="0.6", markeredgecolor="k", label="one seed"),
               Line2D([], [], color="0.3", lw=1.2, marker="_", markersize=10, label="±1 std over seeds (1 SE if one)")]
    if drawn_ref:
        handles.append(Line2D([], [], color="k", lw=1.6, marker="D", markerfacecolor="white",
                              label="paper (Qwen3.5-4B)"))
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)

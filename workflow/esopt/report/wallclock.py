"""Wall clock of the training runs (DIR/budget.json of every ES and RL run): total
hours and seconds per step by method and H*, and the time relative to ESOpt beside the
paper's (config key reference.wall_clock_h)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping

import numpy as np
import pandas as pd

from esopt.report.files import save_figure
from esopt.report.methods import (
    LABELS,
    STYLES,
    method_order,
    series_colors,
    series_label,
)

KEYS = ["method", "horizon", "population"]
TABLE_COLUMNS = [*KEYS, "label", "seeds", "wall_h_mean", "wall_h_std", "wall_s_per_step_mean",
                 "wall_s_per_step_std", "steps", "episodes", "episodes_per_step", "generated_tokens", "flops",
                 "flops_per_step", "wall_ratio_to_esopt", "paper_wall_h", "paper_ratio_to_esopt"]


def parse_hours(text: str | Mapping | None) -> dict[str, dict[int | None, float]]:
    """The paper's wall clock in hours: {method: hours} (at the paper's own H*) or
    {method: {H*: hours}} -> {method: {H* or None: hours}}. None, "" -> {}."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}
    ref = json.loads(text) if isinstance(text, str) else text
    if not isinstance(ref, Mapping):
        raise ValueError("reference must be an object {method: hours} or {method: {H*: hours}}")  # noqa: TRY004
    out: dict[str, dict[int | None, float]] = {}
    for method, v in ref.items():
        vals = ({(None if h is None else int(h)): float(x) for h, x in v.items() if x is not None}
                if isinstance(v, Mapping)
                else ({None: float(v)} if v is not None else {}))
        if vals:
            out[str(method)] = vals
    return out


def _ref_at(ref: Mapping[int | None, float], horizon: int) -> float | None:
    return ref.get(horizon, ref.get(None))


def wall_table(budgets: pd.DataFrame, reference: Mapping | str | None = None) -> pd.DataFrame:
    """esopt.report.methods.load_budgets' frame -> one row per (method, H*, population):
    wall clock per run in hours (mean and std over seeds, ddof 1; NaN for one seed),
    seconds per step likewise, and the means of steps, episodes, tokens and FLOPs.

    wall_ratio_to_esopt: wall_h_mean over ESOpt's at the same H* (its largest
    population when it has several). paper_wall_h: the reference for that method (and
    H*, when the reference gives one); paper_ratio_to_esopt likewise."""
    ref = parse_hours(reference)
    b = budgets.copy()
    b["wall_h"] = b.wall_s.astype(float) / 3600
    rows = []
    for (method, h, g), grp in b.groupby(KEYS, dropna=False, sort=False):
        n = len(grp)
        mean = grp[["wall_h", "wall_s_per_step", "steps", "episodes", "generated_tokens", "flops",
                    "flops_per_step"]].astype(float).mean()
        std = grp[["wall_h", "wall_s_per_step"]].astype(float).std(ddof=1) if n > 1 else None
        rows.append({
            "method": method, "horizon": h, "population": g, "label": LABELS.get(method, method), "seeds": n,
            "wall_h_mean": mean.wall_h, "wall_h_std": std.wall_h if std is not None else float("nan"),
            "wall_s_per_step_mean": mean.wall_s_per_step,
            "wall_s_per_step_std": std.wall_s_per_step if std is not None else float("nan"),
            "steps": mean.steps, "episodes": mean.episodes,
            "episodes_per_step": mean.episodes / mean.steps if mean.steps else float("nan"),
            "generated_tokens": mean.generated_tokens, "flops": mean.flops, "flops_per_step": mean.flops_per_step,
        })
    df = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    for c in ["horizon", "population"]:
        df[c] = df[c].astype("Int64")
    ratios, paper, paper_ratio = [], [], []
    for r in df.itertuples():
        es = df[(df.method == "esopt") & (df.horizon == r.horizon)]
        es_h = float(es.sort_values("population").wall_h_mean.iloc[-1]) if len(es) else float("nan")
        ratios.append(r.wall_h_mean / es_h if es_h else float("nan"))
        mine = _ref_at(ref.get(r.method, {}), int(r.horizon))
        theirs = _ref_at(ref.get("esopt", {}), int(r.horizon))
        paper.append(mine if mine is not None else float("nan"))
        paper_ratio.append(mine / theirs if mine is not None and theirs else float("nan"))
    df["wall_ratio_to_esopt"] = pd.Series(ratios, index=df.index, dtype=float)
    df["paper_wall_h"] = pd.Series(paper, index=df.index, dtype=float)
    df["paper_ratio_to_esopt"] = pd.Series(paper_ratio, index=df.index, dtype=float)
    order = {m: i for i, m in enumerate(method_order(df.method))}
    return df.sort_values(["method", "horizon", "population"], na_position="first",
                          key=lambda s: s.map(order) if s.name == "method" else s).reset_index(drop=True)


def _series(table: pd.DataFrame) -> list[tuple[tuple, str, str]]:
    """((method, population), label, colour) per bar series, in the method's colour
    (lighter for its smaller populations)."""
    keys = list(dict.fromkeys(zip(table.method, table.population)))
    pops = table.groupby("method", sort=False).population.nunique()
    return [((method, g), series_label(method, g if pops.get(method, 0) > 1 else None), color)
            for (method, g), color in zip(keys, series_colors([k[0] for k in keys]))]


def _rows(table: pd.DataFrame, method: str, g) -> pd.DataFrame:
    return table[(table.method == method) & (table.population.isna() if pd.isna(g) else table.population == g)]


def plot_wallclock(table: pd.DataFrame, path: str | os.PathLike, reference: Mapping | str | None = None,
                   title: str = "") -> None:
    """Grouped bars by H*, one bar per method (and population where several): total
    wall clock per run (hours, or minutes when every run is under an hour), seconds per
    step, and the wall clock relative to ESOpt's at the same H*, with the paper's
    ratios (reference) as a hatched group of their own. Error bars: ±1 std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = parse_hours(reference)
    series = _series(table)
    horizons = sorted(int(h) for h in table.horizon.dropna().unique())
    paper_es = ref.get("esopt", {})
    paper_keys = sorted({k for k in paper_es}, key=lambda k: -1 if k is None else k)
    has_ratio = (table.method == "esopt").any() or bool(paper_es)
    n = 3 if has_ratio else 2
    fig, axes = plt.subplots(1, n, figsize=(1.0 + n * min(4.6, max(3.2, 0.9 + 0.4 * len(horizons) * max(len(series), 1))), 4.4))
    w = 0.8 / max(len(series), 1)
    hours = table.wall_h_mean.max() >= 1 if len(table) else True
    scale, unit = (1.0, "h") if hours else (60.0, "min")
    panels = [("wall_h", scale, f"wall clock per run ({unit})", "total training time"),
              ("wall_s_per_step", 1.0, "seconds per step (generation)", "time per step")]
    for ax, (col, k, ylabel, head) in zip(axes, panels):
        for j, ((method, g), label, color) in enumerate(series):
            rows = _rows(table, method, g)
            xs = [horizons.index(int(h)) + (j - (len(series) - 1) / 2) * w for h in rows.horizon]
            ax.bar(xs, k * rows[f"{col}_mean"], width=w, color=color, label=label,
                   yerr=k * rows[f"{col}_std"].fillna(0), capsize=3, error_kw={"lw": 1})
        ax.set_xticks(range(len(horizons)), [f"H* = {h}" for h in horizons])
        ax.set_ylabel(ylabel)
        ax.set_title(head, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    if has_ratio:
        bx = axes[2]
        groups = [f"H* = {h}" for h in horizons] + [("paper" if k is None else f"paper\nH* = {k}") for k in paper_keys]
        for j, ((method, g), _label, color) in enumerate(series):
            off = (j - (len(series) - 1) / 2) * w
            rows = _rows(table, method, g)
            bx.bar([horizons.index(int(h)) + off for h in rows.horizon], rows.wall_ratio_to_esopt, width=w,
                   color=color)
        # the paper's ratios: one bar per method it reports, hatched
        methods = [m for m in method_order(ref) if m in ref]
        pw = 0.8 / max(len(methods), 1)
        for i, key in enumerate(paper_keys):
            x0 = len(horizons) + i
            for j, m in enumerate(methods):
                mine, theirs = ref[m].get(key), paper_es.get(key)
                if mine is None or not theirs:
                    continue
                color = next((c for (mm, _g), _l, c in reversed(series) if mm == m), STYLES.get(m, ("0.5",))[0])
                x = x0 + (j - (len(methods) - 1) / 2) * pw
                bx.bar(x, mine / theirs, width=pw, color=color, alpha=0.45, hatch="//", edgecolor="k", lw=0.5)
                bx.annotate(f"{mine:g} h", (x, mine / theirs), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=7)
        bx.axhline(1, color="k", lw=0.8, ls=":")
        bx.set_xticks(range(len(groups)), groups)
        bx.set_ylabel("wall clock / ESOpt's at the same H*")
        bx.set_title("relative to ESOpt (hatched: paper, 4 GPUs)", fontsize=9)
        bx.grid(axis="y", alpha=0.3)
        finite = [v for v in [*table.wall_ratio_to_esopt, *table.paper_ratio_to_esopt] if not math.isnan(v)]
        paper_r = [ref[m][k] / paper_es[k] for m in ref for k in paper_keys if ref[m].get(k) and paper_es.get(k)]
        bx.set_ylim(0, max([1.0, *finite, *paper_r]) * 1.2)
    if not len(table):
        axes[0].text(0.5, 0.5, "no training runs", transform=axes[0].transAxes, ha="center", va="center")
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    nrows = int(np.ceil(len(labels) / min(len(labels), 6))) if labels else 0
    fig.tight_layout(rect=(0, 0.02 + 0.05 * nrows, 1, 1))
    save_figure(fig, path)

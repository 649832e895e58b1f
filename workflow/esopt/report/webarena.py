"""The WebArena-Lite table (files from `esopt evaluate --benchmark web`): success
rate by method, overall and per site, mean ± std over training seeds, with the paper's
overall number beside it (config reference.webarena, under paper.yaml)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from esopt.report.files import save_figure
from esopt.report.tool_agents import grouped_bars

METHODS = ["no_skill", "esopt", "trace2skill", "esopt_trace2skill"]
LABELS = {"no_skill": "No Skill", "esopt": "Agentic ESOpt", "trace2skill": "Trace2Skill",
          "esopt_trace2skill": "ESOpt + Trace2Skill"}
COLORS = {"no_skill": "0.6", "esopt": "tab:blue", "trace2skill": "tab:purple", "esopt_trace2skill": "tab:red"}


def load_web_evals(paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """One row per evaluation and site ("all" = every episode): method, set, seed (None
    for No Skill), site, success in %, episodes."""
    rows = []
    for p in paths:
        d = json.loads(Path(p).read_text())
        meta = d.get("meta", {})
        if "by_site" not in d:
            raise ValueError(f"{p}: no by_site: not a web evaluation (esopt evaluate --benchmark web)")
        for site, v in d["by_site"].items():
            rows.append({"method": meta["method"], "set": meta["dataset"], "seed": meta.get("seed"), "site": site,
                         "success": 100 * v["success"], "episodes": v["episodes"], "k": d["k"], "source": str(p)})
    df = pd.DataFrame(rows)
    if len(df):
        dup = df.duplicated(["method", "set", "seed", "site"], keep=False)
        if dup.any():
            raise ValueError(f"two evaluations of the same run: {sorted(set(df[dup].source))}")
    return df


def _cell(v: pd.Series) -> str:
    if not len(v):
        return ""
    return f"{v.mean():.1f} ± {v.std(ddof=1):.1f}" if len(v) > 1 else f"{v.mean():.1f}"


def webarena_table(evals: pd.DataFrame, eval_set: str, reference: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Rows: methods in the paper's order, on one evaluation set. Columns: `all` and each
    site ("mean ± std" over seeds; `SITE mean`, `SITE std`), `seeds`, `Δ all` (over No
    Skill) and, with a reference, `paper` (the paper's success %) and `paper Δ`."""
    reference = reference or {}
    ev = evals[evals.set == eval_set]
    sites = ["all"] + sorted(set(ev.site) - {"all"})
    methods = [m for m in METHODS if m in set(ev.method)] + sorted(set(ev.method) - set(METHODS))
    base = ev[(ev.method == "no_skill") & (ev.site == "all")].success.mean()
    out = []
    for m in methods:
        row: dict[str, object] = {"method": m, "label": LABELS.get(m, m)}
        for site in sites:
            v = ev[(ev.method == m) & (ev.site == site)].success
            row[site] = _cell(v)
            row[f"{site} mean"] = v.mean() if len(v) else float("nan")
            row[f"{site} std"] = v.std(ddof=1) if len(v) > 1 else float("nan")
        row["seeds"] = int((ev[(ev.method == m) & (ev.site == "all")]).shape[0])
        row["Δ all"] = row["all mean"] - base
        if reference:
            row["paper"] = reference.get(m, float("nan"))
            row["paper Δ"] = reference.get(m, float("nan")) - reference.get("no_skill", float("nan"))
        out.append(row)
    return pd.DataFrame(out)


def plot_webarena(tab: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """Grouped bars: success per site and overall, one bar per method (error bars: std over
    seeds); the paper's overall numbers as black ticks on the `all` group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sites = [c[: -len(" mean")] for c in tab.columns if c.endswith(" mean")]
    fig, ax = plt.subplots(figsize=(1.6 + 1.5 * len(sites), 3.4))
    positions, width = grouped_bars(ax, tab, sites, COLORS)
    for i, xs in enumerate(positions):
        paper = tab.iloc[i].get("paper", float("nan"))
        if not pd.isna(paper):
            ax.plot([xs[0] - width / 2, xs[0] + width / 2], [paper] * 2, color="k", lw=2,
                    label="paper" if i == 0 else None)
    ax.set_ylabel("success (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7, ncol=2, frameon=False)
    ax.set_title(title, fontsize=9)
    save_figure(fig, path)

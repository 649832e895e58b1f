"""Training curves: reward and success per generation of each training run
(DIR/metrics.jsonl), averaged over seeds, with the σ schedule on a second axis."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from esopt.report.files import save_figure
from esopt.report.methods import ALGO_METHOD, method_order, series_colors, series_label

RUN_COLUMNS = ["model", "method", "horizon", "population", "seed", "generation", "sigma", "mean_reward",
               "success_rate", "source"]
KEYS = ["model", "method", "horizon", "population"]
TABLE_COLUMNS = [*KEYS, "generation", "seeds", "mean_reward_mean", "mean_reward_std", "success_mean", "success_std",
                 "sigma"]


def _model_name(run: Path, budget: dict[str, Any]) -> str | None:
    """budget.json's model, else MODEL of the pipeline's path .../train/ALGO/MODEL/BENCH/RUN,
    else the config's model name in provenance.json."""
    if budget.get("model"):
        return str(budget["model"])
    parts = run.resolve().parts
    for i in range(len(parts) - 4, -1, -1):
        if parts[i] == "train":
            return parts[i + 2]
    prov = run / "provenance.json"
    if prov.exists():
        name = (json.loads(prov.read_text()).get("config") or {}).get("model", {}).get("name")
        if name:
            return str(name)
    return None


def load_runs(paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Training runs (a directory, or any file in it) -> one row per run and generation.

    Method, H*, population and seed come from the run's budget.json; the curve from its
    metrics.jsonl (ES: "generation" and "sigma"; an RL run's "step" counts as the
    generation and its sigma is NaN)."""
    frames = []
    for p in paths:
        run = Path(p)
        if run.is_file():
            run = run.parent
        budget_path = run / "budget.json"
        if not budget_path.exists():
            raise FileNotFoundError(f"{run}: no budget.json (is this a finished training run?)")
        budget = json.loads(budget_path.read_text())
        method = budget.get("method") or ALGO_METHOD.get(budget.get("algo"))
        if not method:
            raise ValueError(f"{budget_path}: names neither a method nor a known algo")
        lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        rows = [{
            "generation": rec.get("generation", rec.get("step", i)), "sigma": rec.get("sigma"),
            "mean_reward": rec.get("mean_reward"), "success_rate": rec.get("success_rate"),
        } for i, rec in enumerate(lines)]
        f = pd.DataFrame(rows, columns=["generation", "sigma", "mean_reward", "success_rate"])
        f.insert(0, "model", _model_name(run, budget))
        f.insert(1, "method", method)
        f.insert(2, "horizon", budget.get("horizon"))
        f.insert(3, "population", budget.get("population"))
        f.insert(4, "seed", budget.get("seed"))
        f["source"] = str(run)
        frames.append(f)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=RUN_COLUMNS)
    df = df[RUN_COLUMNS]
    for c in ["horizon", "population", "seed", "generation"]:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
    for c in ["sigma", "mean_reward", "success_rate"]:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    dup = df[df.duplicated([*KEYS, "seed", "generation"], keep=False)]
    if len(dup):
        raise ValueError(f"more than one run of the same method, H*, population and seed: "
                         f"{sorted(dup.source.unique())}")
    return _sorted(df, [*KEYS, "seed", "generation"])


def _sorted(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    order = {m: i for i, m in enumerate(method_order(df.method))}
    return df.sort_values(by, key=lambda s: s.map(order) if s.name == "method" else s,
                          na_position="first").reset_index(drop=True)


def curves_table(runs: pd.DataFrame) -> pd.DataFrame:
    """load_runs' frame -> one row per (model, method, H*, population, generation): the
    mean and std over seeds (ddof 1, NaN for one seed) of the generation's mean reward
    and success rate, and σ_t (the mean over seeds; the schedule is the same for all)."""
    rows = []
    for key, grp in runs.groupby([*KEYS, "generation"], dropna=False, sort=False):
        n = len(grp)
        rows.append({
            **dict(zip([*KEYS, "generation"], key)), "seeds": n,
            "mean_reward_mean": grp.mean_reward.mean(),
            "mean_reward_std": grp.mean_reward.std(ddof=1) if n > 1 else float("nan"),
            "success_mean": grp.success_rate.mean(),
            "success_std": grp.success_rate.std(ddof=1) if n > 1 else float("nan"),
            "sigma": grp.sigma.mean(),
        })
    df = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    for c in ["horizon", "population", "generation"]:
        df[c] = df[c].astype("Int64")
    return _sorted(df, [*KEYS, "generation"])


def _lines(table: pd.DataFrame) -> list[tuple[tuple, str, str]]:
    """(key, label, colour) of each line: one per (model, method, population), in the
    method's colour (lighter for a method's smaller populations)."""
    keys = list(dict.fromkeys(zip(table.model, table.method, table.population)))
    order = {m: i for i, m in enumerate(method_order(table.method))}
    keys.sort(key=lambda k: (order[k[1]], str(k[0]), -1 if pd.isna(k[2]) else int(k[2])))
    many_models = table.model.nunique(dropna=False) > 1
    pops = table.groupby("method", sort=False).population.nunique()
    colors = series_colors([k[1] for k in keys])
    return [((model, method, pop),
             series_label(method, pop if pops.get(method, 0) > 1 else None, model if many_models else None), color)
            for (model, method, pop), color in zip(keys, colors)]


def _same(a: pd.Series, b: pd.Series) -> bool:
    both = a.notna() & b.notna()
    return bool(((a[both] - b[both]).abs() < 1e-12).all())


def plot_curves(table: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """One panel per training H*: per line (method, and population/model where several),
    the mean reward per generation, mean over seeds with a ±1 std band, the success
    rate dotted (left out where it equals the reward, as in Sudoku), and σ_t dashed on
    the right axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    horizons = sorted(int(h) for h in table.horizon.dropna().unique())
    n = max(1, len(horizons))
    fig, axes = plt.subplots(1, n, figsize=(0.5 + 4.2 * n, 4.3), squeeze=False)
    axes = axes[0]
    same = _same(table.mean_reward_mean, table.success_mean)
    has_sigma = table.sigma.notna().any()
    lines = _lines(table)
    rl = table[table.sigma.isna()].method.unique().tolist()
    twins = []
    for ax, h in zip(axes, horizons):
        tw = ax.twinx() if has_sigma else None
        for (model, method, pop), _label, color in lines:
            g = table[(table.horizon == h) & (table.method == method)
                      & (table.model.isna() if pd.isna(model) else table.model == model)
                      & (table.population.isna() if pd.isna(pop) else table.population == pop)]
            if not len(g):
                continue
            x = g.generation.astype(float)
            y = g.mean_reward_mean
            ax.plot(x, y, color=color, lw=1.5)
            sd = g.mean_reward_std.fillna(0)
            if (sd > 0).any():
                ax.fill_between(x, y - sd, y + sd, color=color, alpha=0.18, lw=0)
            if not same:
                ax.plot(x, g.success_mean, color=color, lw=1.0, ls=":")
            if tw is not None and g.sigma.notna().any():
                tw.plot(x, g.sigma, color=color, lw=1.0, ls="--", alpha=0.8)
        seeds = table[table.horizon == h].seeds
        ax.set_title(f"trained at H* = {h} ({_seeds_text(seeds)})", fontsize=9)
        ax.set_xlabel("generation" if not rl else ("step" if len(rl) == table.method.nunique() else "generation / step"))
        ax.grid(alpha=0.3)
        if tw is not None:
            tw.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
            tw.yaxis.get_offset_text().set_fontsize(7)
            tw.tick_params(axis="y", labelsize=8)
            tw.set_ylim(bottom=0)
            twins.append(tw)
        ax.set_ylim(bottom=0)
    if twins:  # one σ scale for all panels
        top = max(t.get_ylim()[1] for t in twins)
        for t in twins:
            t.set_ylim(0, top)
        twins[-1].set_ylabel("σ_t (dashed)")
    axes[0].set_ylabel("mean reward (= success rate)" if same else "mean reward (solid), success rate (dotted)")
    if not horizons:
        axes[0].text(0.5, 0.5, "no training runs", transform=axes[0].transAxes, ha="center", va="center")
    handles = [Line2D([], [], color=c, lw=2) for _k, _l, c in lines]
    labels = [lab for _k, lab, _c in lines]
    handles.append(Line2D([], [], color="0.3", lw=6, alpha=0.25))
    labels.append("±1 std over seeds")
    if not same:
        handles.append(Line2D([], [], color="0.3", ls=":"))
        labels.append("success rate")
    if has_sigma:
        handles.append(Line2D([], [], color="0.3", ls="--"))
        labels.append("σ_t (right axis)")
    ncol = min(len(labels), 2 * n)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    rows = math.ceil(len(labels) / ncol)
    fig.tight_layout(rect=(0, 0.04 + 0.045 * rows, 1, 1))
    save_figure(fig, path)


def _seeds_text(seeds: pd.Series) -> str:
    lo, hi = int(seeds.min()), int(seeds.max())
    n = f"{lo}" if lo == hi else f"{lo}–{hi}"
    return f"{n} seed{'s' if hi > 1 else ''}"

"""Sudoku results: the long table, the base-vs-ESOpt summary, and the horizon figure."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from esopt.report.files import save_figure

COLUMNS = ["method", "train_horizon", "population", "seed", "eval_horizon", "episodes", "success", "success_se",
           "mean_turns", "mean_turns_solved", "invalid_per_episode", "illegal_per_episode", "source"]


def load_evals(paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    rows = []
    for p in paths:
        rec = json.loads(Path(p).read_text())
        meta = rec.get("meta", {})
        rows.append({
            "method": meta.get("method", "unknown"), "train_horizon": meta.get("train_horizon"),
            "population": meta.get("population"), "seed": meta.get("seed"), "eval_horizon": rec["horizon"],
            **{k: rec.get(k) for k in COLUMNS[5:-1]}, "source": str(p),
        })
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.sort_values(["method", "train_horizon", "population", "seed", "eval_horizon"], na_position="first").reset_index(drop=True)


def seed_mean_terms(grp: pd.DataFrame) -> list[tuple[float, float]]:
    """The variance of the mean success over a group of seeds' evaluations as (variance,
    degrees of freedom) terms: seed variance / n with n - 1 (0 for one seed), and mean
    binomial variance / n with the fewest recorded episodes - 1 (infinite where none is)."""
    n = len(grp)
    seed_var = grp.success.astype(float).var(ddof=1) if n > 1 else 0.0
    return [(seed_var / n, n - 1), ((grp.success_se.astype(float) ** 2).mean() / n, _binomial_df(grp))]


def binomial_term(ev: pd.Series) -> tuple[float, float]:
    """One evaluation's binomial variance as a (variance, degrees of freedom) term."""
    return float(ev.success_se) ** 2, _binomial_df(pd.DataFrame([ev]))


def _binomial_df(grp: pd.DataFrame) -> float:
    episodes = pd.to_numeric(grp.get("episodes", pd.Series(dtype=float)), errors="coerce").dropna()
    return float(episodes.min()) - 1 if len(episodes) else math.inf


def seed_mean_variance(grp: pd.DataFrame) -> float:
    """Variance of the mean success over a group of seeds' evaluations: seed variance / n
    (0 for one seed) + mean binomial variance / n."""
    return sum(v for v, _ in seed_mean_terms(grp))


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """ESOpt vs base per (train horizon, population, eval horizon): mean and std over
    seeds, the gain, and a conservative standard error of the gain:
    Var(ES mean) = seed variance / n + mean binomial variance / n (the evaluation
    puzzles are shared by all seeds, so their noise is not in the seed spread),
    plus the base model's binomial variance; no credit taken for pairing."""
    base = df[df.method == "base"].set_index("eval_horizon")
    rows = []
    for (th, g, eh), grp in df[df.method != "base"].groupby(["train_horizon", "population", "eval_horizon"]):
        b = base.loc[eh]
        n = len(grp)
        mean = grp.success.mean()
        se = math.sqrt(seed_mean_variance(grp) + float(b.success_se) ** 2)
        gain = mean - float(b.success)
        rows.append({
            "method": grp.method.iloc[0], "train_horizon": th, "population": g, "eval_horizon": eh, "seeds": n,
            "episodes_per_eval": int(grp.episodes.iloc[0]), "base_success": float(b.success),
            "success_mean": mean, "success_std": grp.success.std(ddof=1) if n > 1 else float("nan"),
            "gain": gain, "gain_se": se, "gain_z": gain / se if se > 0 else float("nan"),
            "mean_turns_solved": grp.mean_turns_solved.mean(),
        })
    return pd.DataFrame(rows)


def plot_horizon(df: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """Success vs H*: base, ESOpt trained at the evaluated H* (the diagonal), and faint
    lines for what each trained model carries over to other horizons."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    base = df[df.method == "base"].sort_values("eval_horizon")
    ax.errorbar(base.eval_horizon, 100 * base.success, yerr=100 * base.success_se, marker="o", capsize=3,
                color="0.35", label="base (±1 SE, episodes)")
    es = df[df.method != "base"]
    agg = es.groupby(["train_horizon", "eval_horizon"]).success.agg(["mean", "std", "count"]).reset_index()
    for _, grp in agg.groupby("train_horizon"):
        ax.plot(grp.eval_horizon, 100 * grp["mean"], ls=":", color="tab:blue", alpha=0.45, lw=1)
    diag = agg[agg.train_horizon == agg.eval_horizon].sort_values("eval_horizon")
    if len(diag):
        many = (diag["count"] > 1).all()
        if many:
            err = 100 * diag["std"]
        else:  # a single seed: binomial SE of its evaluation
            err = [100 * float(es[(es.train_horizon == r.train_horizon) & (es.eval_horizon == r.eval_horizon)].success_se.iloc[0]) for r in diag.itertuples()]
        ax.errorbar(diag.eval_horizon, 100 * diag["mean"], yerr=err, marker="s", capsize=3, color="tab:blue",
                    label=f"Agentic ESOpt, trained at H* (±1 {'std over seeds' if many else 'SE'})")
    ax.plot([], [], ls=":", color="tab:blue", alpha=0.45, label="ESOpt trained at one H*, evaluated at others")
    ax.set_xlabel("minimum success horizon H* (blanks)")
    ax.set_ylabel("success rate (%)")
    ax.set_xticks(sorted(df.eval_horizon.unique()))
    ax.set_ylim(0, min(100, 100 * df.success.max() * 1.3 + 5))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=130, tight=False)

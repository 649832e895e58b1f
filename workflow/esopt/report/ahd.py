"""The heuristic-design table (runs of `esopt search-heuristics`): every matched
comparison of a search with online ES (Agentic ESOpt) against the same search on the
fixed model, and the win count.

A setting is (task, search, budget). Its baseline and ESOpt runs share everything but
the weight updates: seeds, instances, number of samples and evaluations. The number
compared is the test objective of the best heuristic the run found (held-out
instances; minimized). A run that found no valid heuristic counts as worst. A setting
is a win when ESOpt's mean over repetitions is strictly lower than the baseline's;
each repetition is also a matched pair, counted separately.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from esopt.report.files import save_figure

TASK_ORDER = ["construct_tsp", "construct_kp", "construct_asp", "aco_tsp", "aco_cvrp", "aco_bpp"]
SEARCH_LABELS = {"eoh": "EoH", "sample": "Sample"}


def load_ahd_runs(paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """One row per run (result.json of a run directory, or the directory itself)."""
    rows = []
    for p in paths:
        p = os.fspath(p)
        f = os.path.join(p, "result.json") if os.path.isdir(p) else p
        d = json.loads(Path(f).read_text())
        obj = d.get("test_objective")
        rows.append({"task": d["task"], "search": d["search"], "budget": int(d["budget"]), "es": bool(d["es"]),
                     "rep": int(d["seed"]), "test_objective": math.inf if obj is None else float(obj),
                     "found": obj is not None, "search_objective": d.get("search_objective"),
                     "reference": d.get("reference_test_objective"), "metric": d.get("metric", ""),
                     "valid_rate": d.get("valid_rate"), "samples": d.get("samples"),
                     "es_generations": d.get("es_generations"), "source": f})
    df = pd.DataFrame(rows)
    if len(df):
        dup = df.duplicated(["task", "search", "budget", "es", "rep"], keep=False)
        if dup.any():
            raise ValueError(f"two runs of the same setting and repetition: {df[dup].source.tolist()}")
    return df


def _order(df: pd.DataFrame) -> list[tuple[str, str, int]]:
    keys = {(r.task, r.search, r.budget) for r in df.itertuples()}
    rank = {t: i for i, t in enumerate(TASK_ORDER)}
    return sorted(keys, key=lambda k: (rank.get(k[0], 99), k[0], k[1], k[2]))


def _mean_std(v: pd.Series) -> tuple[float, float]:
    if len(v) == 0:
        return math.nan, math.nan
    if not all(map(math.isfinite, v)):
        return math.inf, math.nan
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else math.nan


def ahd_comparisons(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per setting: baseline and ESOpt test objective (mean, std over repetitions),
    the reference heuristic's, the difference, the setting's win and the matched pairs' wins."""
    out = []
    for task, search, budget in _order(runs):
        s = runs[(runs.task == task) & (runs.search == search) & (runs.budget == budget)]
        base, es = s[~s.es].set_index("rep"), s[s.es].set_index("rep")
        bm, bs = _mean_std(base.test_objective)
        em, esd = _mean_std(es.test_objective)
        pairs = sorted(set(base.index) & set(es.index))
        pair_wins = sum(es.test_objective[r] < base.test_objective[r] for r in pairs)
        complete = len(base) > 0 and len(es) > 0
        ref = s.reference.dropna()
        out.append({"task": task, "search": SEARCH_LABELS.get(search, search), "budget": budget,
                    "metric": s.metric.iloc[0], "reference": float(ref.iloc[0]) if len(ref) else math.nan,
                    "baseline": bm, "baseline std": bs, "esopt": em, "esopt std": esd,
                    "difference": em - bm if complete and math.isfinite(em) and math.isfinite(bm) else math.nan,
                    "win": bool(complete and em < bm), "reps": len(pairs), "pair wins": int(pair_wins),
                    "baseline valid rate": float(base.valid_rate.mean()) if len(base) else math.nan,
                    "esopt valid rate": float(es.valid_rate.mean()) if len(es) else math.nan,
                    "complete": complete})
    return pd.DataFrame(out)


def win_summary(tab: pd.DataFrame, reference: Mapping[str, int] | None = None) -> str:
    """'ESOpt improves its baseline in k of N settings (p of P matched pairs)'."""
    done = tab[tab.complete]
    text = (f"ESOpt improves its baseline in {int(done.win.sum())} of {len(done)} settings "
            f"({int(done['pair wins'].sum())} of {int(done.reps.sum())} matched pairs)")
    if reference and "wins" in reference:
        text += f"; paper: {reference['wins']} of {reference.get('comparisons', '?')}"
    return text


def plot_ahd(tab: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """One panel per task: test objective (lower is better) on the fixed model and with
    ESOpt per search and budget (mean ± std over repetitions; points, so that small
    differences show), the reference heuristic dashed; a won setting is marked in its label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in TASK_ORDER if t in set(tab.task)] + sorted(set(tab.task) - set(TASK_ORDER))
    cols = min(3, max(len(tasks), 1))
    rows = math.ceil(len(tasks) / cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(3.7 * cols, 2.9 * rows + 0.5), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        t = tab[tab.task == task].reset_index(drop=True)
        for j, (col, style, name) in enumerate([("baseline", dict(color="0.45", marker="o"), "fixed model"),
                                                ("esopt", dict(color="tab:blue", marker="s"), "+ online ESOpt")]):
            xs = [i + (j - 0.5) * 0.25 for i in range(len(t))]
            ys = [v if math.isfinite(v) else math.nan for v in t[col]]
            errs = [0.0 if pd.isna(v) else v for v in t[f"{col} std"]]
            ax.errorbar(xs, ys, yerr=errs, ls="none", capsize=2, ms=5, label=name, **style)
        if len(t) and math.isfinite(t.reference.iloc[0]):
            ax.axhline(t.reference.iloc[0], color="k", ls="--", lw=0.8, label="reference heuristic")
        labels = [f"{r.search} {r.budget}" + ("\n✓ ESOpt" if r.win else "") for r in t.itertuples()]
        ax.set_xticks(range(len(t)), labels, fontsize=7)
        ax.set_xlim(-0.6, len(t) - 0.4)
        ax.set_title(task, fontsize=9)
        ax.set_ylabel(t.metric.iloc[0] if len(t) else "", fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    if tasks:
        handles, names = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.suptitle(f"{title}\n{win_summary(tab)}" if title else win_summary(tab), fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save_figure(fig, path)

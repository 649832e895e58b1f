"""The paper's three Sudoku claims as differences with 95% confidence intervals, and a
verdict for each: the horizon crossover (ESOpt's lead over each RL baseline is positive
at the longest horizon and grows with H*), the σ_T = 0 drop, and the population
sensitivity (more members, higher final success).

A difference of means over training seeds gets the variance
  Var(mean) = seed variance / n + mean binomial variance / n
per arm (esopt.report.sudoku.seed_mean_terms, as the base-vs-ESOpt summary; the arms' evaluations share their puzzles,
no credit is taken for pairing), and a Student t interval whose degrees of freedom are
the Welch-Satterthwaite combination of its terms' (welch_df): a seed variance has n - 1,
a binomial variance the evaluation's episodes - 1, so a difference the seeds' spread
dominates gets about a pooled t's, one that evaluation noise dominates nearly the normal's.
Verdicts:
  reproduced      the interval lies above 0;
  not reproduced  it lies below the paper's effect and does not lie above 0 (an effect
                  as large as the paper's is excluded; without a paper value: below 0);
  undecided       otherwise, or with fewer than 2 seeds in an arm (no seed variance).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from esopt.report.methods import parse_reference
from esopt.report.sudoku import seed_mean_terms

# two-sided 95% Student t quantiles by degrees of freedom 1..30
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
RL_METHODS = ("grpo", "grpo_t1", "ppo")
TABLE_COLUMNS = ["claim", "comparison", "horizon", "difference", "ci_low", "ci_high", "seeds", "paper_difference",
                 "verdict"]


def t975(df: float) -> float:
    """The 97.5% Student t quantile: from the table at whole df (a fractional df rounds
    down, the wider interval); beyond 30 by the Cornish-Fisher expansion around the normal's
    1.95996 (within 1e-5 of the exact quantile there)."""
    if df < 1:
        raise ValueError(f"a t quantile needs at least 1 degree of freedom, not {df}")
    if df <= len(T975):
        return T975[int(df) - 1]
    z = 1.959964
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def welch_df(terms: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of independent variance estimates,
    each (variance, its degrees of freedom): (sum v)^2 / sum(v^2 / df), never fewer than
    its fewest-df term's (which rounding could otherwise undercut). Infinite when every
    term is 0 or exactly known (infinite df)."""
    estimated = [(v, df) for v, df in terms if v > 0 and not math.isinf(df)]
    if any(df < 1 for _, df in estimated):
        raise ValueError(f"a variance term needs at least 1 degree of freedom: {terms}")
    den = sum(v * v / df for v, df in estimated)
    if den == 0:
        return math.inf
    return max(sum(v for v, _ in terms) ** 2 / den, min(df for _, df in estimated))


def t_half_width(terms: Sequence[tuple[float, float]]) -> float:
    """Half the 95% interval of an estimate whose variance is the sum of `terms`."""
    return t975(welch_df(terms)) * math.sqrt(sum(v for v, _ in terms))


def arm(evals: pd.DataFrame, method: str, horizon: int, population: int | None = None) -> pd.DataFrame:
    """Evaluations at `horizon` of `method` trained at it (at `population` when given)."""
    ev = evals[(evals.method == method) & (pd.to_numeric(evals.eval_horizon) == horizon)
               & (pd.to_numeric(evals.train_horizon, errors="coerce") == horizon)]
    if population is not None:
        ev = ev[pd.to_numeric(ev.population, errors="coerce") == population]
    return ev


def _moments(a: pd.DataFrame) -> tuple[float, list[tuple[float, float]], int]:
    n = len(a)
    return (a.success.astype(float).mean() if n else float("nan")), (seed_mean_terms(a) if n else []), n


def contrast(plus: Sequence[pd.DataFrame], minus: Sequence[pd.DataFrame]) -> dict[str, Any]:
    """sum of the `plus` arms' means minus the `minus` arms', with its 95% interval."""
    arms = [(1, *_moments(a)) for a in plus] + [(-1, *_moments(a)) for a in minus]
    diff = sum(sign * mean for sign, mean, _, _ in arms)
    ns = [n for *_, n in arms]
    seeds = "/".join(str(n) for n in ns)
    if min(ns) < 2:
        return {"difference": diff, "ci_low": float("nan"), "ci_high": float("nan"), "seeds": seeds}
    half = t_half_width([t for _, _, terms, _ in arms for t in terms])
    return {"difference": diff, "ci_low": diff - half, "ci_high": diff + half, "seeds": seeds}


def verdict(lo: float, hi: float, paper: float | None) -> str:
    if math.isnan(lo) or math.isnan(hi):
        return "undecided"
    if lo > 0:
        return "reproduced"
    if hi < (paper if paper is not None and paper > 0 else 0.0):
        return "not reproduced"
    return "undecided"


def _row(claim: str, comparison: str, horizon: str, c: dict[str, Any], paper: float | None) -> dict[str, Any]:
    return {"claim": claim, "comparison": comparison, "horizon": horizon, **c,
            "paper_difference": float("nan") if paper is None else paper,
            "verdict": verdict(c["ci_low"], c["ci_high"], paper)}


def verdicts_table(evals: pd.DataFrame, horizons: Sequence[int], population: int,
                   ablation_horizon: int | None = None, study: Mapping[str, Any] | None = None,
                   reference: Mapping | None = None) -> pd.DataFrame:
    """One row per tested difference (fractions, like success). `evals` is
    esopt.report.sudoku.load_evals' frame of the main model's evaluations; `population`
    the main grid's G; `study` {horizon, populations} of the population study;
    `reference` the paper's {sudoku, sigma_ablation, population} (success %)."""
    reference = reference or {}
    paper = parse_reference(reference.get("sudoku"))
    sig_ref = reference.get("sigma_ablation") or {}
    pop_ref = next(iter((reference.get("population") or {}).values()), {})
    lo_h, hi_h = min(horizons), max(horizons)
    rows = []

    def es(h: int, g: int = population) -> pd.DataFrame:
        return arm(evals, "esopt", h, g)

    def pdiff(a: Mapping[int, float], b: Mapping[int, float], h: int) -> float | None:
        return (a[h] - b[h]) / 100 if h in a and h in b else None

    for m in RL_METHODS:
        if not len(evals[evals.method == m]):
            continue
        ref_e, ref_m = paper.get("esopt", {}), paper.get(m, {})
        rows.append(_row("horizon crossover", f"esopt - {m}", str(hi_h),
                         contrast([es(hi_h)], [arm(evals, m, hi_h)]), pdiff(ref_e, ref_m, hi_h)))
        shared = sorted(set(ref_e) & set(ref_m))
        paper_growth = (pdiff(ref_e, ref_m, shared[-1]) - pdiff(ref_e, ref_m, shared[0])) if len(shared) > 1 else None
        rows.append(_row("horizon crossover", f"(esopt - {m}) growth", f"{lo_h} to {hi_h}",
                         contrast([es(hi_h), arm(evals, m, lo_h)], [arm(evals, m, hi_h), es(lo_h)]), paper_growth))
    if ablation_horizon is not None and len(evals[evals.method == "es_sigmaT0"]):
        h = ablation_horizon
        p = (sig_ref["esopt"] - sig_ref["es_sigmaT0"]) / 100 if {"esopt", "es_sigmaT0"} <= set(sig_ref) else None
        rows.append(_row("sigma_T = 0 drop", "esopt - es_sigmaT0", str(h),
                         contrast([es(h)], [arm(evals, "es_sigmaT0", h)]), p))
    if study and len(study.get("populations") or []) > 1:
        h, gs = study["horizon"], sorted(study["populations"])
        ref = {int(g): v for g, v in pop_ref.items()}
        p = (ref[max(ref)] - ref[min(ref)]) / 100 if len(ref) > 1 else None
        rows.append(_row("population sensitivity", f"esopt G{gs[-1]} - G{gs[0]}", str(h),
                         contrast([es(h, gs[-1])], [es(h, gs[0])]), p))
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)

"""How often the report's 95% intervals cover the truth, by simulation: the pooled degrees
of freedom the verdicts used until the twelfth horizons sitting against the
Welch-Satterthwaite ones they use now (esopt.report.verdicts.welch_df), side by side on
the same simulated evaluations.

The model is the statistics' own: each training seed's true success is the arm's plus a
Normal seed effect (sd in points), and its evaluation is Binomial(episodes, that) / episodes,
independent across seeds and arms (the real evaluations share their puzzles, which
correlates them; the intervals take no credit for that). Two shapes, as the report uses them:

  gain      ESOpt's seed mean minus one base evaluation (the ladder's size table); old
            rule t(n - 1)
  contrast  one arm's seed mean minus another's (the verdicts); old rule t(n_a + n_b - 2)

    python benchmarks/interval_coverage.py [--reps 5000] [--seeds 3] [--episodes 512]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from esopt.report.sudoku import binomial_term, seed_mean_terms  # noqa: E402
from esopt.report.verdicts import t975, t_half_width  # noqa: E402


def evaluations(rng: np.random.Generator, p: float, sd: float, n: int, episodes: int) -> pd.DataFrame:
    true = np.clip(p + rng.normal(0, sd, n), 0.0, 1.0)
    success = rng.binomial(episodes, true) / episodes
    return pd.DataFrame({"success": success, "success_se": np.sqrt(success * (1 - success) / episodes),
                         "episodes": episodes})


def coverage(shape: str, sds: tuple[float, float], args: argparse.Namespace, rng: np.random.Generator) -> tuple[float, float, float]:
    """(old rule's coverage, new rule's, mean new half-width / old) over args.reps replicates."""
    p_a, p_b, n = 0.52, 0.46, args.seeds
    hit_old = hit_new = 0
    ratio = 0.0
    for _ in range(args.reps):
        a = evaluations(rng, p_a, sds[0], n, args.episodes)
        if shape == "gain":
            b = evaluations(rng, p_b, 0.0, 1, args.episodes).iloc[0]
            terms, old_df, est_b = seed_mean_terms(a) + [binomial_term(b)], n - 1, float(b.success)
        else:
            b = evaluations(rng, p_b, sds[1], n, args.episodes)
            terms, old_df, est_b = seed_mean_terms(a) + seed_mean_terms(b), 2 * n - 2, b.success.mean()
        diff = a.success.mean() - est_b
        old = t975(old_df) * math.sqrt(sum(v for v, _ in terms))
        new = t_half_width(terms)
        hit_old += abs(diff - (p_a - p_b)) <= old
        hit_new += abs(diff - (p_a - p_b)) <= new
        ratio += new / old if old > 0 else 1.0
    return hit_old / args.reps, hit_new / args.reps, ratio / args.reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--episodes", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    se = 1.96 * math.sqrt(0.05 * 0.95 / args.reps)
    print(f"{args.reps} replicates a row, {args.seeds} seeds an arm, {args.episodes} episodes an evaluation; "
          f"a coverage is within ±{se:.3f} of its true value (95%)")
    print(f"{'shape':9} {'seed sd (points)':>17} {'old rule':>9} {'Welch-S.':>9} {'width new/old':>14}")
    cases = [("gain", (s, 0.0)) for s in (0.0, 1.0, 3.0, 8.0)] + \
            [("contrast", s) for s in ((0.0, 0.0), (1.0, 1.0), (3.0, 3.0), (8.0, 8.0), (8.0, 1.0))]
    for shape, sds in cases:
        old, new, ratio = coverage(shape, (sds[0] / 100, sds[1] / 100), args, rng)
        label = f"{sds[0]:g}" if shape == "gain" else f"{sds[0]:g} / {sds[1]:g}"
        print(f"{shape:9} {label:>17} {old:9.3f} {new:9.3f} {ratio:14.2f}")


if __name__ == "__main__":
    main()

"""Held-out success of trained models against their base, episode by episode.

`esopt evaluate` with one evaluation seed plays the same puzzles in the same order for
every model, so a run's episodes pair with the base's. Prints, per run, both success
rates and the mean paired difference in points with its 95% interval (t on the paired
differences); refuses files whose puzzles differ.

    python benchmarks/paired_eval.py BASE.trajectories.jsonl RUN.trajectories.jsonl [RUN2 ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from esopt.report.verdicts import t975  # noqa: E402


def successes(path: Path) -> tuple[list[str], list[float]]:
    """(task ids, 0/1 success) of an evaluation's trajectories, in episode order."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["task_id"] for r in rows], [float(bool(r["info"]["success"])) for r in rows]


def paired(base: Path, run: Path) -> dict[str, float | int]:
    base_ids, b = successes(base)
    run_ids, r = successes(run)
    if run_ids != base_ids:
        raise SystemExit(f"{run}: not the puzzles of {base} (another evaluation seed or episode count?)")
    d = [x - y for x, y in zip(r, b)]
    n = len(d)
    mean = statistics.fmean(d)
    half = t975(n - 1) * statistics.stdev(d) / math.sqrt(n)
    return {"episodes": n, "base": statistics.fmean(b), "run": statistics.fmean(r),
            "difference_points": 100 * mean, "ci95_points": [100 * (mean - half), 100 * (mean + half)]}


def shown(p: dict) -> str:
    """A paired difference as printed: "+1.2 [-0.4, +2.8] points"."""
    lo, hi = p["ci95_points"]
    return f"{p['difference_points']:+.1f} [{lo:+.1f}, {hi:+.1f}] points"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", type=Path, help="the base model's trajectories.jsonl")
    ap.add_argument("runs", type=Path, nargs="+", help="trained models' trajectories.jsonl, same evaluation")
    args = ap.parse_args(argv)
    for run in args.runs:
        p = paired(args.base, run)
        print(f"{run}: {p['episodes']} episodes, base {p['base']:.3f}, run {p['run']:.3f}, difference {shown(p)}")


if __name__ == "__main__":
    main()

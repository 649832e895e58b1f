"""esopt report-sudoku: results/tables/sudoku_es.csv (+ _summary.csv) and results/figures/sudoku_horizon.png."""

from __future__ import annotations

import argparse
import logging

from esopt.cli.common import run_main, setup

log = logging.getLogger("esopt.report")


def main_fn(args: argparse.Namespace) -> int:
    setup()
    from esopt.report.sudoku import load_evals, plot_horizon, summarize, write_csv

    df = load_evals(args.evals)
    summary = summarize(df)
    write_csv(df, args.table)
    write_csv(summary, args.summary)
    plot_horizon(df, args.figure, title=args.title)
    if len(summary):
        log.info("\n%s", summary[["train_horizon", "population", "eval_horizon", "base_success", "success_mean", "gain", "gain_se"]].to_string(index=False))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt report-sudoku", description=__doc__)
    p.add_argument("evals", nargs="+", help="evaluation summaries (FILE.json from `esopt evaluate`)")
    p.add_argument("--table", required=True)
    p.add_argument("--summary", required=True)
    p.add_argument("--figure", required=True)
    p.add_argument("--title", default="")
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())

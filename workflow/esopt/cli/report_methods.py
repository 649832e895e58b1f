"""esopt report-methods: results/tables/sudoku_methods.csv and results/figures/horizon_crossover.png
(base, Agentic PPO, GRPO and ESOpt on Sudoku, each evaluated at its training horizon H*)."""

from __future__ import annotations

import argparse
import logging

from esopt.cli.common import run_main, setup

log = logging.getLogger("esopt.report")


def main_fn(args: argparse.Namespace) -> int:
    setup()
    from esopt.report.methods import (
        load_budgets,
        methods_table,
        parse_reference,
        plot_crossover,
    )
    from esopt.report.sudoku import load_evals, write_csv

    reference = parse_reference(args.reference)
    evals = load_evals(args.evals)
    budgets = load_budgets(args.budgets)
    table = methods_table(evals, budgets, reference, population=args.population)
    write_csv(table, args.table)
    plot_crossover(table, args.figure, reference=reference, title=args.title)
    if len(table):
        cols = ["method", "horizon", "seeds", "success_mean", "success_std", "success_se_mean", "episodes",
                "wall_s", "paper_success"]
        log.info("\n%s", table[cols].to_string(index=False))
    else:
        log.warning("no evaluation at its training horizon (nor of the base model): empty table")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt report-methods", description=__doc__)
    p.add_argument("evals", nargs="+", help="evaluation summaries (FILE.json from `esopt evaluate`)")
    p.add_argument("--budgets", nargs="*", default=[],
                   help="training budget files (DIR/budget.json, or DIR), one per training run")
    p.add_argument("--reference", default="",
                   help='paper success %% as JSON by method then H*, e.g. \'{"esopt": {"5": 89.58}}\' (default: none)')
    p.add_argument("--population", type=int, default=None,
                   help="keep ES runs of this population only (needed when the inputs hold several)")
    p.add_argument("--table", required=True)
    p.add_argument("--figure", required=True)
    p.add_argument("--title", default="")
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""esopt report-memory: results/tables/memory.csv and results/figures/memory.png
(peak memory of inference, ES and RL steps, and our ratios beside the paper's)."""

from __future__ import annotations

import argparse
import json
import logging

from esopt.cli.common import run_main, setup

log = logging.getLogger("esopt.report")


def main_fn(args: argparse.Namespace) -> int:
    setup()
    from esopt.report.memory import (
        load_memory,
        memory_table,
        our_ratios,
        paper_ratios,
        parse_paper,
        plot_memory,
    )
    from esopt.report.sudoku import write_csv

    paper = parse_paper(args.paper)
    table = memory_table(load_memory(args.memory))
    write_csv(table, args.table)
    plot_memory(table, args.figure, paper=paper, title=args.title)
    log.info("\n%s", table[["method", "device", "measure", "peak_gib", "ratio_to_inference", "ratio_to_es",
                            "step_wall_s"]].to_string(index=False))
    log.info("ratios, ours: %s; paper: %s", our_ratios(table), paper_ratios(paper))
    return 0


def parser() -> argparse.ArgumentParser:
    from esopt.report.memory import PAPER

    p = argparse.ArgumentParser(prog="esopt report-memory", description=__doc__)
    p.add_argument("memory", nargs="+", help="memory measurements (JSON from `esopt memory`), one per method")
    p.add_argument("--paper", default=json.dumps(PAPER),
                   help="the paper's peaks in GB as JSON (optionally with inference_gb, default es_gb) "
                        "(default: %(default)s)")
    p.add_argument("--table", required=True)
    p.add_argument("--figure", required=True)
    p.add_argument("--title", default="")
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())

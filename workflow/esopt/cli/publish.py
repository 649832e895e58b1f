"""esopt publish: keep a config's finished results in the repository, across sittings.

Copies the compact outputs of every finished job of the config from --results (results/)
into --to (default published/NAME/, config `published.dir` and `name`), at the paths
they had under results/: provenance records, evaluations, ES histories, metrics,
budgets, check and memory results, report tables. Trained weights, finished runs' optimizer
checkpoints, trajectories, figures and notebooks are never published (an ES run's weights
replay from its base model and history.json: `esopt replay`). An unfinished run (a sitting
stopped it) is published as what continues it on a fresh clone: an ES run's resume history,
--to/partial/RUN/history.json (train-es), an RL run's resume checkpoint,
--to/partial/RUN/checkpoint.pt (train-rl; up to published.checkpoint_mib, since weights and
optimizer state are what an RL run cannot rebuild); publishing the finished run removes it. A job is published when its record is
complete, its outputs hash as recorded, its settings are what the config asks for (the
rerun map, esopt.provenance.jobs) and its upstream records are published. Writes are
atomic and the command is idempotent: it adds and updates, deletes only a partial run whose
finished run is published, and writes
published/NAME/MANIFEST.json (each file's sha256, the commit and config hash it came
from, the command line). Commit the directory; the pipeline then reads those jobs'
published outputs instead of running them (docs/pipeline.md#running-a-grid-in-pieces-published-results).
"""

from __future__ import annotations

import argparse

from esopt.cli.common import run_main, setup


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config)
    from esopt.provenance.published import publish

    argv = ["esopt", "publish", "--config", args.config] + (["--results", args.results] if args.results != "results" else []) \
        + (["--to", args.to] if args.to else [])
    report = publish(cfg, args.config, results=args.results, to=args.to, argv=argv)
    for line in report.lines():
        print(line)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt publish", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="the config whose jobs are published (its name names the directory)")
    p.add_argument("--results", default="results", help="the results tree the pipeline wrote (default: results)")
    p.add_argument("--to", default=None, help="published directory (default: published/NAME, config published.dir)")
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())

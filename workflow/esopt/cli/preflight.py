"""esopt preflight: before a cluster run, is everything it needs in place, and what will it cost?

Run it on the login node, from the repository root, with the profile and config of the run:

    esopt preflight --config config/paper.yaml --profile slurm

It plans the run as Snakemake will (`snakemake --dry-run` with the same profiles and
config), prints the planned jobs per rule with the GPUs and runtime each asks for and the
total GPU-hours, the memory per GPU of ES, GRPO and PPO for Qwen3.5-4B/9B/27B under the
config's settings (esopt.cluster.memory: parameters counted on the meta device), then
checks every model, data set, extra, SLURM partition / account / GPU type and the disk
space the run needs (esopt.cluster.preflight), and prints one list of what is missing with
how to fix each. Exit 0: nothing missing; 1: something is.
A cluster run (any executor but local) runs the same checks in its onstart hook and stops
before submitting a job while one fails.
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys

from esopt.cli.common import run_main, setup
from esopt.io import write_json_atomic

log = logging.getLogger("esopt.preflight")


def dry_run(config: str, profiles: list[str], snakefile: str | None) -> str:
    """`snakemake --dry-run` of the run as the given profiles and config plan it."""
    cmd = [sys.executable, "-m", "snakemake", "--dry-run", "--configfile", config]
    for p in profiles:
        cmd += ["--profile", p]
    if snakefile:
        cmd += ["--snakefile", snakefile]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise ValueError(missing_executor(res.stderr) or
                         f"snakemake --dry-run failed (exit {res.returncode}):\n{(res.stdout + res.stderr)[-3000:]}")
    return res.stdout + res.stderr


def missing_executor(stderr: str) -> str | None:
    """The line to print when a profile names an executor whose plugin is not installed: snakemake
    then rejects the profile's executor before planning anything."""
    m = re.search(r"argument --executor/-e: invalid choice: '([\w-]+)'", stderr)
    if not m:
        return None
    name = m.group(1)
    extra = ' (pip install -e ".[slurm]")' if name == "slurm" else ""
    return (f"the profile runs on the {name} executor, whose plugin is not installed here: "
            f"pip install snakemake-executor-plugin-{name}{extra}, then run the preflight again")


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config)
    from esopt.cluster.plan import cost_rows, format_cost, measured_runtimes, parse_dry_run
    from esopt.cluster.preflight import preflight, report

    jobs = parse_dry_run(dry_run(args.config, args.profile, args.snakefile))
    rows = cost_rows(jobs, measured_runtimes(args.results))
    print(f"planned jobs of {args.config}" + (f" with --profile {' --profile '.join(args.profile)}" if args.profile else "")
          + ":\n" + format_cost(rows) + "\n")
    from esopt.cluster.memory import qwen35_table
    from esopt.spec.sudoku import EsRun, RlRun

    memory = qwen35_table(EsRun.from_config(cfg), RlRun.from_config(cfg) if "rl" in cfg else None, args.memory_tokens)
    print(f"memory per GPU (estimate, docs/rl_baselines.md#memory-per-gpu):\n{memory}\n")
    problems = preflight(cfg, jobs, args.results, hashes=not args.skip_hashes)
    print(report(problems))
    if args.json:
        write_json_atomic(args.json, {"config": args.config, "profiles": args.profile,
                                      "plan": [vars(r) for r in rows], "memory": memory.splitlines(),
                                      "problems": [vars(p) for p in problems]})
    return 1 if problems else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt preflight", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="the run's config (config/paper.yaml)")
    p.add_argument("--profile", action="append", default=[],
                   help="a Snakemake profile of the run, by name or path (repeatable, in order): slurm")
    p.add_argument("--snakefile", default=None, help="default: Snakefile in the working directory")
    p.add_argument("--results", default="results", help="the results directory (disk space, measured runtimes)")
    p.add_argument("--skip-hashes", action="store_true",
                   help="do not recompute the weight files' sha256 (minutes for a 27B model)")
    p.add_argument("--memory-tokens", type=int, default=None,
                   help="tokens per sequence in the memory estimate (default: rl.max_total_tokens, the cap)")
    p.add_argument("--json", default=None, help="also write the plan and the problems to this JSON file")
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())

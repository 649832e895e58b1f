"""esopt search-heuristics: one automatic-heuristic-design run (test time).

An external search (--search eoh | sample) asks the writer model for heuristics for
one task (--task, esopt.ahd), evaluates every reply in the sandbox on the
task's search instances, and keeps the best, for exactly --budget samples. With
--es the writer's weights also move online (Agentic ESOpt, σ → 0; see
esopt.ahd.run, esopt.ahd.experiment); without it the model is fixed (the matched baseline).
The best heuristic is then scored on held-out test instances, as is the task's
reference heuristic.

DIR/result.json     test and search objectives of the best heuristic, the reference's,
                    sample accounting, the best-so-far curve
DIR/samples.jsonl   every sample: operator, reply, code, objective or error
DIR/history.json    --es: the ES generations (replayable onto the base model)
DIR/provenance.json
A killed run resumes from DIR/.resume/ and ends where an uninterrupted run would.
"""

from __future__ import annotations

import argparse
import logging

from esopt.ahd.experiment import SEARCHES
from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.provenance.record import Provenance
from esopt.provenance.run_dir import RunDir

log = logging.getLogger("esopt.search_heuristics")


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    if "ahd" not in cfg:
        raise ValueError(f"{args.config} has no ahd block")
    from esopt.ahd.experiment import check_run, design_heuristics
    from esopt.models.load import load_model_and_tokenizer

    check_run(cfg, args.task, args.budget)  # before the writer loads
    run = RunDir(args.out)
    prov = Provenance("search-heuristics", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"search": args.seed}, inputs=[args.config, args.model])
    model, tok = load_model_and_tokenizer(args.model)
    d = design_heuristics(cfg, args.task, args.search, args.budget, args.es, args.seed, model, tok, run.resume)

    # Publish atomically; provenance last.
    if d.history is not None:
        d.history.save(run.add("history.json"))
    run.write_jsonl("samples.jsonl", d.samples)
    run.write_json("result.json", d.result)
    from esopt.ahd.evaluate import sandbox_provenance

    run.finish(prov, extra={**d.extra, "sandbox": sandbox_provenance(cfg)})
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt search-heuristics", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--task", required=True, help="a task of the config's ahd.tasks")
    p.add_argument("--search", required=True, choices=SEARCHES)
    p.add_argument("--budget", type=int, required=True, help="samples (one of ahd.budgets)")
    p.add_argument("--es", action="store_true", help="online ES on the writer (Agentic ESOpt)")
    p.add_argument("--seed", type=int, required=True, help="repetition")
    p.add_argument("--model", required=True, help="the writer model directory")
    p.add_argument("--out", required=True, help="run directory to create")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())

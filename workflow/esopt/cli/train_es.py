"""esopt train-es: Agentic ESOpt on one benchmark, horizon, population size and seed.

DIR/model/          trained weights (save_pretrained) + tokenizer
DIR/history.json    seeds, raw rewards, σ, α, normalization per generation (replayable)
DIR/metrics.jsonl   one line per generation
DIR/budget.json     what the run used: episodes, tokens, FLOPs, wall clock
DIR/trajectories/   sampled episodes (member 0) of the first, every 10th and last generation
DIR/provenance.json
A killed run leaves its progress in DIR/.resume/ and continues from there when rerun. A run
an earlier sitting published unfinished (esopt publish: published/NAME/partial/) continues
from that history when DIR/.resume/ has none, if it is this run's (settings, base weights);
not with es.eval_every (its periodic evaluations stayed in the earlier sitting).

--variant NAME runs an ablation of config es.variants (e.g. vanilla: constant σ).
Under torchrun (WORLD_SIZE > 1) the population is sharded across ranks, one model
replica each (esopt.es.distributed); rank 0 writes the outputs, and the run stops
with an error if the replicas' final weights differ. Config `distributed` sets the process
group's timeout, when ranks waiting for a slow one warn, and the per-member deadline
(docs/es_core.md#timeouts); a run stopped by them exits 1 (the watchdog of a member that
never returns: 124) and resumes when rerun.
"""

from __future__ import annotations

import argparse
import logging
import sys

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.provenance.record import Provenance
from esopt.provenance.run_dir import RunDir

log = logging.getLogger("esopt.train_es")

BENCHMARKS = ("sudoku",)


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    if args.benchmark not in BENCHMARKS:
        raise ValueError(f"--benchmark {args.benchmark!r}: expected one of {BENCHMARKS}")
    if args.horizon not in cfg["sudoku"]["horizons"]:
        log.warning("horizon %d is not in the config's sudoku.horizons %s", args.horizon, cfg["sudoku"]["horizons"])
    from esopt.config import engine_settings
    from esopt.es.deadline import MemberDeadlineError
    from esopt.es.distributed import SlowRankError, from_config
    from esopt.provenance.published import partial_run
    from esopt.runs.sudoku_training import train_es
    from esopt.spec.sudoku import EsRun, SudokuEpisodes, SudokuEvaluation

    es = EsRun.from_config(cfg, args.horizon, args.variant)
    episodes, evaluation = SudokuEpisodes.from_config(cfg), SudokuEvaluation.from_config(cfg)
    collective = from_config(cfg, args.backend)  # the process group's timeouts and the member deadline
    try:
        run = RunDir(args.out, create=collective.is_main)
        collective.barrier()
        prov = Provenance("train-es", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                          seeds={"es": args.seed}, inputs=[args.config, args.model])
        # a partial run of an earlier sitting; not with es.eval_every (its evaluations stay there)
        earlier = None if es.eval_every else partial_run(cfg, args.out, "history.json")
        result = train_es(es, episodes, evaluation, engine_settings(cfg, "sudoku"), args.model, args.population,
                          args.seed, run.resume, run.trajectories, collective, continue_from=earlier)
        if not collective.is_main:
            collective.barrier()  # rank 0 publishes
            return 0
        collective.progress(stage="publishing the outputs")  # what the others' wait messages show
        # Publish: every file is written atomically; history.json last-but-one, provenance last.
        run.save_model(result.model, result.tokenizer)
        run.publish_trajectories()
        run.write_jsonl("metrics.jsonl", result.metrics)
        run.write_json("budget.json", result.budget)
        result.history.save(run.add("history.json"))
        run.finish(prov, extra=result.extra)
        collective.barrier()
        log.info("done: %s", run.out)
        return 0
    except (SlowRankError, MemberDeadlineError) as e:  # the message names the rank, member and generation
        log.debug("details", exc_info=True)
        print(f"esopt: error: {e}", file=sys.stderr)
        return 1
    finally:
        collective.close()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt train-es", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--benchmark", default="sudoku", help="benchmark to train on (sudoku)")
    p.add_argument("--horizon", type=int, required=True, help="H*: blanks per puzzle")
    p.add_argument("--population", type=int, required=True, help="G: members per generation")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--model", required=True, help="base model directory (from `esopt build-model`)")
    p.add_argument("--out", required=True, help="training directory to create")
    p.add_argument("--variant", default=None, help="an ablation of es.variants (default: Agentic ESOpt as configured)")
    p.add_argument("--backend", default=None, choices=["auto", "gloo", "nccl"],
                   help="torch.distributed backend under torchrun (default: the config's distributed.backend, auto: "
                        "nccl with GPUs, else gloo)")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())

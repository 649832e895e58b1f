"""esopt train-rl: Agentic GRPO or Agentic PPO on one benchmark, horizon and seed.

DIR/model/          trained policy (save_pretrained, in model.dtype) + tokenizer
DIR/checkpoint.pt   policy, optimizer, critic and counters in training precision
DIR/metrics.jsonl   one line per step (reward, success, losses, clip fraction, tokens, time)
DIR/budget.json     what the run used: steps, episodes, tokens, FLOPs, wall clock
DIR/trajectories/   token-level episodes of the first, every 10th and last step
DIR/provenance.json
A killed run leaves its checkpoint in DIR/.resume/ and continues from there when rerun; a run
an earlier sitting published unfinished (esopt publish: published/NAME/partial/) continues
from its published checkpoint when DIR/.resume/ has none.

Under torchrun (rl.ranks > 1 in the pipeline) the policy, critic and reference are sharded
over the ranks (FSDP2) and each rank rolls out its share of the episodes; rank 0 publishes:
    torchrun --standalone --nproc-per-node 4 -m esopt.cli.main train-rl ...
"""

from __future__ import annotations

import argparse
import logging

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.provenance.record import Provenance
from esopt.provenance.run_dir import RunDir

log = logging.getLogger("esopt.train_rl")


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    if args.benchmark != "sudoku":
        raise ValueError(f"--benchmark {args.benchmark!r}: expected 'sudoku'")
    if args.algo not in ("grpo", "ppo"):
        raise ValueError(f"--algo {args.algo!r}: expected grpo or ppo")
    from esopt.rl.trainer import SAMPLING_PROFILES
    from esopt.runs.sudoku_training import train_rl

    if args.sampling not in SAMPLING_PROFILES:
        raise ValueError(f"--sampling {args.sampling!r}: expected one of {sorted(SAMPLING_PROFILES)}")
    if "rl" not in cfg:
        raise ValueError(f"{args.config} has no `rl` block")
    from esopt.config import rl_engine_settings
    from esopt.es.distributed import from_config
    from esopt.provenance.published import partial_run
    from esopt.spec.sudoku import RlRun, SudokuEpisodes

    rl, episodes = RlRun.from_config(cfg), SudokuEpisodes.from_config(cfg)

    collective = from_config(cfg)  # one process, or the torchrun ranks (distributed.backend, timeouts)
    try:
        run = RunDir(args.out, create=collective.is_main)
        collective.barrier()
        prov = Provenance("train-rl", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                          seeds={"rl": args.seed}, inputs=[args.config, args.model])
        result = train_rl(rl, episodes, cfg["model"]["dtype"], args.model, args.algo, args.sampling, args.horizon,
                          args.seed, run.resume, run.trajectories, collective, engine=rl_engine_settings(cfg),
                          continue_from=partial_run(cfg, args.out, "checkpoint.pt"))
        if collective.is_main:
            # Publish atomically; provenance last.
            run.save_model(result.model, result.tokenizer)
            run.publish_trajectories()
            run.write_jsonl("metrics.jsonl", result.metrics)
            run.write_json("budget.json", result.budget)
            (run.resume / "checkpoint.pt").replace(run.add("checkpoint.pt"))
            run.finish(prov, extra=result.extra)
            log.info("done: %s", run.out)
        collective.barrier()  # the others wait for rank 0's outputs
        return 0
    finally:
        collective.close()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt train-rl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--algo", required=True, help="grpo | ppo")
    p.add_argument("--sampling", default="default", help="sampling profile: default (agent.sampling) | t1 (T 1, top-p 1)")
    p.add_argument("--benchmark", default="sudoku")
    p.add_argument("--horizon", type=int, required=True, help="H*: blanks per puzzle")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--model", required=True, help="base model directory (from `esopt build-model`)")
    p.add_argument("--out", required=True, help="training directory to create")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""esopt evaluate: success of a model on held-out puzzles at one horizon H*.

Writes FILE.json (summary with binomial standard error), FILE.trajectories.jsonl
(every episode, repeat by repeat) and FILE.provenance.json. The eval puzzles come from the
'eval' split, which is disjoint from every training batch by construction; with
evaluate.repeats > 1 each is played that many times (the authors' protocol: 32 x 3).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from esopt.cli.common import add_provenance_args, add_threads_arg, json_object, parse_wildcards, run_main, setup
from esopt.io import write_json_atomic
from esopt.provenance.record import Provenance

log = logging.getLogger("esopt.evaluate")

BENCHMARKS = ("sudoku",)  # the tool benchmarks have esopt evaluate-agent


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    from esopt.agent.engines import hf_model_device, open_engine
    from esopt.agent.rollout import write_trajectories
    from esopt.config import engine_settings
    from esopt.envs.sudoku import generate_puzzles
    from esopt.models.load import load_model_and_tokenizer
    from esopt.runs.episodes import EpisodeSpec, combine_repeats, repeat_seed, run_episodes, summarize

    out = Path(args.out)
    if out.suffix != ".json" or out.is_dir():
        raise ValueError(f"--out {out}: expected a .json file")
    ev = cfg["evaluate"]
    seed = ev["seed"] if args.seed is None else args.seed
    engine = engine_settings(cfg, "sudoku")
    model, tok = load_model_and_tokenizer(args.model, device=hf_model_device(engine))  # with vLLM: on the host
    spec = EpisodeSpec.from_config(cfg, args.horizon, ev["decoding"], batch_size=ev["batch_size"])
    prov = Provenance("evaluate", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"evaluate": seed}, inputs=[args.config, args.model])
    upstream = Path(args.model).parent / "provenance.json"  # the training run that made the model
    if upstream.exists():
        prov.inputs.append(str(upstream))
    policy, engine_record = open_engine(engine, model, tok, args.model, seed=seed)
    repeats = ev.get("repeats", 1)
    try:
        if repeats == 1:
            runs = [run_episodes(policy, tok, spec, ev["episodes"], seed=seed, split="eval")]
        else:  # the same puzzles, each repeat sampled from its own seed
            tasks = generate_puzzles(spec.size, spec.horizon, ev["episodes"], seed=seed, split="eval")
            runs = [run_episodes(policy, tok, spec, len(tasks), seed, "eval", tasks=tasks, sampling_seed=repeat_seed(seed, k))
                    for k in range(repeats)]
    finally:
        if policy is not model:
            policy.close()
    trajs = [t for run in runs for t in run]  # repeat by repeat
    summary = {"benchmark": args.benchmark, "model": str(args.model), "horizon": args.horizon,
               "meta": json_object(args.meta, "--meta"), "decoding": ev["decoding"], "seed": seed,
               **(summarize(trajs) if repeats == 1 else combine_repeats([summarize(run) for run in runs]))}
    traj_path = out.with_suffix(".trajectories.jsonl")
    write_trajectories(traj_path, trajs, horizon=args.horizon)
    write_json_atomic(out, summary)
    prov.write(out.with_suffix(".provenance.json"), outputs=[out, traj_path], extra={"model_device": str(model.device), "engine": engine_record})
    log.info("H*=%d: success %.3f ± %.3f over %d episodes", args.horizon, summary["success"], summary["success_se"], len(trajs))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--model", required=True, help="model directory (base or DIR/model of a training run)")
    p.add_argument("--benchmark", default="sudoku", choices=BENCHMARKS)
    p.add_argument("--horizon", type=int, required=True, help="H*: blanks per puzzle")
    p.add_argument("--seed", type=int, default=None, help="evaluation seed (default: evaluate.seed of the config)")
    p.add_argument("--out", required=True, help="summary FILE.json")
    p.add_argument("--meta", default="{}", help="JSON object copied into the summary (method, train_horizon, population, seed)")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""esopt evaluate: a model on held-out tasks of one benchmark (--benchmark; Sudoku by default).

sudoku: success on held-out puzzles at one horizon H* (--horizon), with its binomial
        standard error. The puzzles come from the 'eval' split, disjoint from every
        training batch by construction; with evaluate.repeats > 1 each is played that
        many times (the authors' protocol: 32 x 3).
an agent benchmark (esopt.envs.benchmarks: math, docvqa, web): Mean@k on an evaluation
        set (--data, from esopt prepare-data). Every task is answered k times
        (tool_agents.evaluate.samples or web.evaluate.samples, sampled decoding with k
        seeds); Mean@k is the mean score over all k x tasks episodes (the benchmark's
        metric: success for math and web, ANLS for DocVQA), plus the benchmark's own
        summary keys (web: success by site, `by_site`). On the real web sites, `web.reset`
        runs before every round (sample), as VisualAgentBench's README requires, its
        times in the summary's `resets`; a fuzzy-match judge failure stops the round and
        the job (never scored 0). --skill adds a Trace2Skill document to the system
        prompt. The episodes run on the benchmark's engine (engine.B: HF generate or
        vLLM, docs/engine.md); with vLLM the HF model is only read on the host.
Writes FILE.json (the summary), FILE.trajectories.jsonl (every episode, repeat by repeat
or sample by sample) and FILE.provenance.json.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from esopt.cli.common import add_provenance_args, add_threads_arg, json_object, parse_wildcards, run_main, setup
from esopt.envs.benchmarks import BENCHMARKS
from esopt.io import write_json_atomic
from esopt.provenance.record import Provenance

log = logging.getLogger("esopt.evaluate")

SUDOKU = "sudoku"  # the default benchmark, with its own settings blocks (sudoku, evaluate) and horizons


def sudoku(args: argparse.Namespace, cfg: dict, out: Path) -> None:
    """Success at H* = --horizon on held-out puzzles."""
    from esopt.agent.engines import hf_model_device, open_engine
    from esopt.agent.rollout import write_trajectories
    from esopt.config import engine_settings
    from esopt.envs.sudoku import generate_puzzles
    from esopt.models.load import load_model_and_tokenizer
    from esopt.runs.episodes import EpisodeSpec, combine_repeats, repeat_seed, run_episodes, summarize

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


def agent(args: argparse.Namespace, cfg: dict, out: Path) -> None:
    """Mean@k of an agent benchmark on the evaluation set --data (esopt.runs.tool_episodes.evaluate_agent)."""
    from esopt.agent.rollout import write_trajectories
    from esopt.config import engine_settings
    from esopt.runs.tool_episodes import evaluate_agent
    from esopt.spec.agents import AgentEvaluation, agent_episodes, block_name

    if block_name(args.benchmark) not in cfg:
        raise ValueError(f"{args.config} has no {block_name(args.benchmark)} block")
    ev = AgentEvaluation.from_config(cfg, args.benchmark)
    seed = ev.seed if args.seed is None else args.seed
    inputs = [args.config, args.model, args.data] + ([args.skill] if args.skill else [])
    runs = [Path(args.model).parent] + ([Path(args.skill).parent] if args.skill else [])
    for run in dict.fromkeys(runs):  # the training run that made the model or the skill, once, in order
        if (run / "provenance.json").exists():
            inputs.append(str(run / "provenance.json"))
    prov = Provenance("evaluate", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"evaluate": seed}, inputs=inputs)
    result = evaluate_agent(agent_episodes(cfg, args.benchmark), ev, engine_settings(cfg, args.benchmark),
                            args.benchmark, args.model, args.data, seed, args.skill, parse_wildcards(args.meta))
    traj_path = out.with_suffix(".trajectories.jsonl")
    write_trajectories(traj_path, result.trajectories)
    write_json_atomic(out, result.summary)
    prov.write(out.with_suffix(".provenance.json"), outputs=[out, traj_path], extra=result.extra)


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    out = Path(args.out)
    if out.suffix != ".json" or out.is_dir():
        raise ValueError(f"--out {out}: expected a .json file")
    if args.benchmark == SUDOKU:
        if args.horizon is None:
            raise ValueError("--benchmark sudoku needs --horizon H* (blanks per puzzle)")
        if args.data or args.skill:
            raise ValueError("--data and --skill are for the agent benchmarks, not sudoku")
        sudoku(args, cfg, out)
    else:
        if not args.data:
            raise ValueError(f"--benchmark {args.benchmark} needs --data DIR (an evaluation set from esopt prepare-data)")
        if args.horizon is not None:
            raise ValueError(f"--horizon is for sudoku, not {args.benchmark}")
        agent(args, cfg, out)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--model", required=True, help="model directory (base or DIR/model of a training run)")
    p.add_argument("--benchmark", default=SUDOKU, choices=(SUDOKU, *BENCHMARKS))
    p.add_argument("--horizon", type=int, default=None, help="sudoku: H*, blanks per puzzle")
    p.add_argument("--data", default=None, help="an agent benchmark's evaluation set directory (from esopt prepare-data)")
    p.add_argument("--skill", default=None, help="an agent benchmark: skill document for the system prompt "
                                                 "(DIR/skill.md of a Trace2Skill run)")
    p.add_argument("--seed", type=int, default=None,
                   help="evaluation seed (default: evaluate.seed of the config; the agent block's evaluate.seed)")
    p.add_argument("--out", required=True, help="summary FILE.json")
    p.add_argument("--meta", default="{}", help="JSON copied into the summary (sudoku: method, train_horizon, "
                                                "population, seed; agents: method, seed, eval set)")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())

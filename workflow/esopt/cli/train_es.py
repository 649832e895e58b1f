"""esopt train-es: Agentic ESOpt on one benchmark, horizon, population size and seed.

DIR/model/          trained weights (save_pretrained) + tokenizer
DIR/history.json    seeds, raw rewards, σ, α, normalization per generation (replayable)
DIR/metrics.jsonl   one line per generation
DIR/budget.json     what the run used: episodes, tokens, FLOPs, wall clock
DIR/trajectories/   sampled episodes (member 0) of the first, every 10th and last generation
DIR/provenance.json
A killed run leaves its progress in DIR/.resume/ and continues from there when rerun.

--variant NAME runs an ablation of config es.variants (e.g. vanilla: constant σ).
Under torchrun (WORLD_SIZE > 1) the population is sharded across ranks, one model
replica each (esopt.es.distributed); rank 0 writes the outputs, and the run stops
with an error if the replicas' final weights differ.
"""

from __future__ import annotations

import argparse
import logging

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.provenance.record import Provenance
from esopt.provenance.run_dir import RunDir

log = logging.getLogger("esopt.train_es")

BENCHMARKS = ("sudoku",)


def es_config(cfg: dict, population: int, seed: int, horizon: int, variant: str | None = None):
    from esopt.config import es_settings
    from esopt.es import ESConfig

    return ESConfig.from_settings(es_settings(cfg, horizon, variant), population, seed)


def method_name(variant: str | None) -> str:
    """The method a run reports as: esopt, or es_VARIANT for an ablation."""
    return f"es_{variant}" if variant else "esopt"


def es_budget(history, params: int, population: int, n_tasks: int, horizon: int, seed: int,
              method: str = "esopt") -> dict:
    """What the run used, from its history: episodes, tokens, model FLOPs (2N per token
    processed, forward only; the perturbation and update are O(N) per member, not per
    token, and left out), wall clock."""
    gens = history.generations
    tokens = {k: sum(i.get(k, 0) for g in gens for i in g.member_info) for k in ("generated_tokens", "rollout_tokens")}
    wall = sum(g.wall_s for g in gens)
    flops = 2.0 * params * tokens["rollout_tokens"]
    n = max(len(gens), 1)
    return {
        "method": method, "algo": "es", "horizon": horizon, "seed": seed, "population": population,
        "planned": {"steps": history.run["es"]["generations"], "episodes_per_step": population * n_tasks},
        "steps": len(gens), "episodes": sum(len(g.rewards) for g in gens) * n_tasks, **tokens, "train_tokens": 0,
        "flops": flops, "flops_per_step": flops / n, "wall_s": wall, "wall_s_per_step": wall / n, "params": params,
    }


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    if args.benchmark not in BENCHMARKS:
        raise ValueError(f"--benchmark {args.benchmark!r}: expected one of {BENCHMARKS}")
    if args.horizon not in cfg["sudoku"]["horizons"]:
        log.warning("horizon %d is not in the config's sudoku.horizons %s", args.horizon, cfg["sudoku"]["horizons"])
    from esopt.es.distributed import from_env

    collective = from_env(args.backend or (cfg.get("distributed") or {}).get("backend", "auto"))
    try:
        return train(args, cfg, collective)
    finally:
        collective.close()


def train(args: argparse.Namespace, cfg: dict, collective) -> int:
    from esopt.agent.rollout import kept_steps, write_trajectories
    from esopt.es import ESTrainer
    from esopt.es.history import weights_sha256
    from esopt.eval.episodes import EpisodeSpec, run_episodes, summarize
    from esopt.models.load import load_model_and_tokenizer

    run = RunDir(args.out, create=collective.is_main)
    collective.barrier()
    model, tok = load_model_and_tokenizer(args.model)
    base_hash = weights_sha256(model)
    es_cfg = es_config(cfg, args.population, args.seed, args.horizon, args.variant)
    method = method_name(args.variant)
    spec = EpisodeSpec.from_config(cfg, args.horizon, cfg["es"]["member_decoding"])
    n_tasks = cfg["es"]["tasks_per_member"]
    prov = Provenance("train-es", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"es": args.seed}, inputs=[args.config, args.model])
    keep = kept_steps(es_cfg.generations)

    def fitness(member):
        # Every member sees the same task batch and the same sampling seed (common random numbers).
        counters: dict[str, int] = {}
        trajs = run_episodes(model, tok, spec, n_tasks, seed=member.task_seed, split="train", counters=counters)
        if member.index == 0 and member.generation in keep:
            write_trajectories(run.trajectories / f"gen{member.generation:04d}.jsonl", trajs,
                               generation=member.generation, member=0, sigma=member.sigma)
        s = summarize(trajs)
        return s["mean_reward"], {"success": s["success"], "mean_turns": s["mean_turns"],
                                  "generated_tokens": counters.get("generated_tokens", 0),
                                  "rollout_tokens": counters.get("prompt_tokens", 0) + counters.get("generated_tokens", 0)}

    def on_generation(rec):
        m = rec.metrics()
        log.info("gen %d: sigma %.3g mean R %.3f max %.3f success %.3f (%.1fs)",
                 rec.generation, rec.sigma, m["mean_reward"], m["max_reward"], m["success_rate"], rec.wall_s)

    trainer = ESTrainer(
        model, es_cfg, fitness, history_path=run.resume / "history.json",
        run_info={"benchmark": args.benchmark, "horizon": args.horizon, "method": method, "base_weights_sha256": base_hash,
                  "episode": {k: v for k, v in vars(spec).items() if k != "sampling"} | {"sampling": vars(spec.sampling)},
                  "tasks_per_member": n_tasks},
        on_generation=on_generation, collective=collective,
    )
    history = trainer.run()
    history.final = {"weights_sha256": weights_sha256(model)}
    replicas = collective.all_gather(history.final["weights_sha256"])
    if len(set(replicas)) != 1:
        raise RuntimeError(f"ES replicas diverged: final weight hashes by rank {replicas}")
    if not collective.is_main:
        collective.barrier()  # rank 0 publishes
        return 0

    # Publish: every file is written atomically; history.json last-but-one, provenance last.
    run.save_model(model, tok)
    run.publish_trajectories()
    run.write_jsonl("metrics.jsonl", (r.metrics() for r in history.generations))
    budget = es_budget(history, sum(p.numel() for p in model.parameters()), args.population, n_tasks, args.horizon, args.seed,
                       method)
    budget["ranks"] = collective.world_size
    run.write_json("budget.json", budget)
    history.save(run.add("history.json"))
    run.finish(prov, extra={"base_weights_sha256": base_hash, "final_weights_sha256": history.final["weights_sha256"],
                            "model_device": str(model.device),
                            "ranks": {"world_size": collective.world_size, "replica_weights_sha256": replicas}})
    collective.barrier()
    log.info("done: %s", run.out)
    return 0


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

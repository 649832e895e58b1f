"""esopt train-rl: Agentic GRPO or Agentic PPO on one benchmark, horizon and seed.

DIR/model/          trained policy (save_pretrained, in model.dtype) + tokenizer
DIR/checkpoint.pt   policy, optimizer, critic and counters in training precision
DIR/metrics.jsonl   one line per step (reward, success, losses, clip fraction, tokens, time)
DIR/budget.json     what the run used: steps, episodes, tokens, FLOPs, wall clock
DIR/trajectories/   token-level episodes of the first, every 10th and last step
DIR/provenance.json
A killed run leaves its checkpoint in DIR/.resume/ and continues from there when rerun.
"""

from __future__ import annotations

import argparse
import logging

import torch

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

    if args.sampling not in SAMPLING_PROFILES:
        raise ValueError(f"--sampling {args.sampling!r}: expected one of {sorted(SAMPLING_PROFILES)}")
    if "rl" not in cfg:
        raise ValueError(f"{args.config} has no `rl` block")
    from esopt.agent.rollout import Sampling, kept_steps, write_trajectories
    from esopt.es.history import weights_sha256
    from esopt.eval.episodes import sudoku_rl_rollouts
    from esopt.models.load import load_model_and_tokenizer
    from esopt.rl.critic import build_critic
    from esopt.rl.trainer import SAMPLING_PROFILES, RLConfig, RLTrainer, method_name, rl_flops

    run = RunDir(args.out)
    r = cfg["rl"]
    # Training keeps master weights in rl.dtype (fp32: AdamW on bf16 weights loses small
    # updates to rounding); the saved model is cast back to model.dtype for evaluation.
    policy, tok = load_model_and_tokenizer(args.model, dtype=r["dtype"])
    base_hash = weights_sha256(policy)
    prof = {**cfg["agent"]["sampling"], **(SAMPLING_PROFILES[args.sampling] or {})}
    sampling = Sampling.from_profile(prof, cfg["agent"]["max_new_tokens"])
    rcfg = RLConfig.from_settings(cfg["rl"], args.algo, prof, args.seed)
    critic = build_critic(policy, args.model, rcfg.critic).to(policy.device) if args.algo == "ppo" else None
    method = method_name(args.algo, args.sampling)
    prov = Provenance("train-rl", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"rl": args.seed}, inputs=[args.config, args.model])
    keep = kept_steps(rcfg.steps)
    inner = sudoku_rl_rollouts(cfg, tok, args.horizon, sampling)
    step_of = {"t": 0}

    def rollout_fn(policy_, task_seed, sampling_seed, group, counters):
        trajs = inner(policy_, task_seed, sampling_seed, group, counters)
        t = step_of["t"]
        if t in keep:
            write_trajectories(run.trajectories / f"step{t:04d}.jsonl", trajs[: 4 * group], step=t)
        return trajs

    def on_step(rec):
        step_of["t"] = rec["step"] + 1
        log.info("step %d: R %.3f success %.3f turns %.1f pg %.4f clip %.3f tokens %d (%.1fs, rollout %.1fs)",
                 rec["step"], rec["mean_reward"], rec["success_rate"], rec["mean_turns"], rec.get("pg_loss", 0.0),
                 rec.get("clip_frac", 0.0), rec["generated_tokens"], rec["wall_s"], rec["rollout_s"])

    trainer = RLTrainer(
        policy, rcfg, rollout_fn, pad_id=tok.pad_token_id, critic=critic, checkpoint_path=run.resume / "checkpoint.pt",
        run_info={"benchmark": args.benchmark, "horizon": args.horizon, "method": method, "sampling": prof,
                  "base_weights_sha256": base_hash},
        on_step=on_step,
    )
    step_of["t"] = trainer.resume()
    metrics = trainer.run()

    params = sum(p.numel() for p in policy.parameters())
    critic_params = sum(p.numel() for p in critic.parameters()) if critic is not None and rcfg.critic == "separate" else 0
    totals = trainer.totals
    flops = rl_flops(params, critic_params, totals, rcfg)
    budget = {
        "method": method, "algo": args.algo, "horizon": args.horizon, "seed": args.seed, "population": None,
        "planned": {"steps": rcfg.steps, "episodes_per_step": rcfg.episodes_per_step},
        "steps": len(metrics), **{k: totals[k] for k in ("episodes", "generated_tokens", "rollout_tokens", "train_tokens")},
        "flops": flops, "flops_per_step": flops / max(len(metrics), 1),
        "wall_s": totals["wall_s"], "wall_s_per_step": totals["wall_s"] / max(len(metrics), 1),
        "params": params, "critic_params": critic_params,
    }

    # Publish atomically; provenance last.
    final = policy.to(getattr(torch, cfg["model"]["dtype"]))
    run.save_model(final, tok)
    run.publish_trajectories()
    run.write_jsonl("metrics.jsonl", metrics)
    run.write_json("budget.json", budget)
    (run.resume / "checkpoint.pt").replace(run.add("checkpoint.pt"))
    run.finish(prov, extra={"base_weights_sha256": base_hash, "final_weights_sha256": weights_sha256(final), "budget": budget,
                            "model_device": str(policy.device), "base_weights_dtype": r["dtype"]})
    log.info("done: %s (%d steps, %d episodes, %.3g FLOPs)", run.out, len(metrics), totals["episodes"], flops)
    return 0


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

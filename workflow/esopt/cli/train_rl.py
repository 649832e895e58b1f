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
import json
import logging
import shutil
from pathlib import Path

import torch

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.io import atomic_path, write_json_atomic, write_text_atomic
from esopt.report.provenance import Provenance

log = logging.getLogger("esopt.train_rl")

# The paper's two sampling profiles: `default` is agent.sampling (T 0.7, top-p 0.8, top-k 20).
PROFILES = {"default": None, "t1": {"temperature": 1.0, "top_p": 1.0, "top_k": 0}}


def method_name(algo: str, sampling: str) -> str:
    return algo if sampling == "default" else f"{algo}_{sampling}"


def rl_config(cfg: dict, algo: str, sampling: dict, seed: int):
    from esopt.rl.trainer import RLConfig

    r = cfg["rl"]
    per = r[algo]
    return RLConfig(
        algo=algo, steps=r["steps"], tasks_per_step=per["tasks_per_step"], group_size=per.get("group_size", 1),
        lr=r["lr"], weight_decay=r["weight_decay"], epochs=r["epochs"], minibatches=r["minibatches"],
        micro_batch=r["micro_batch"], loss_agg=r["loss_agg"],
        clip_low=r["clip_low"], clip_high=r["clip_high"], kl_coef=r["kl_coef"], max_grad_norm=r["max_grad_norm"],
        temperature=sampling["temperature"], gamma=per.get("gamma", 1.0), lam=per.get("lam", 1.0),
        critic=per.get("critic", "separate"), critic_lr=per.get("critic_lr", r["lr"]), vf_clip=per.get("vf_clip", 0.2),
        vf_coef=per.get("vf_coef", 0.5), seed=seed,
    )


def rl_flops(params: int, critic_params: int, totals: dict, cfg) -> float:
    """Model FLOPs from tokens processed, 2N per token forward and 4N backward
    (attention's sequence-length term left out): rollouts forward; training forward +
    backward; the reference model forward; PPO's critic forward for the old values
    and forward + backward when it learns."""
    f = 2 * params * totals["rollout_tokens"] + 6 * params * totals["train_tokens"]
    epochs = max(cfg.epochs, 1)
    if cfg.kl_coef > 0:
        f += 2 * params * totals["train_tokens"] / epochs
    if critic_params:
        f += 2 * critic_params * totals["train_tokens"] / epochs + 6 * critic_params * totals["train_tokens"]
    return float(f)


def build_rollout_fn(cfg: dict, tok, horizon: int, sampling):
    """rollout_fn for RLTrainer: a step's Sudoku tasks, each repeated `group` times."""
    from esopt.agent.tokens import token_rollout
    from esopt.envs.sudoku import SudokuEnv, generate_puzzles, instructions

    s, r = cfg["sudoku"], cfg["rl"]
    system = instructions(s["size"], s["prompt"])
    def rollout_fn(policy, task_seed, sampling_seed, group, counters):
        n_tasks = r["ppo" if group == 1 else "grpo"]["tasks_per_step"]
        tasks = [t for t in generate_puzzles(s["size"], horizon, n_tasks, seed=task_seed, split="train") for _ in range(group)]
        return token_rollout(
            policy, tok, lambda: SudokuEnv(s["max_turns"], s["reward"]), tasks, system=system, sampling=sampling,
            seed=sampling_seed, max_turns=s["max_turns"], history_turns=cfg["agent"]["history_turns"],
            max_total_tokens=r["max_total_tokens"], batch_size=r["batch_size"], counters=counters,
        )

    return rollout_fn


def main_fn(args: argparse.Namespace) -> int:
    cfg = setup(args.config, args.threads)
    if args.benchmark != "sudoku":
        raise ValueError(f"--benchmark {args.benchmark!r}: expected 'sudoku'")
    if args.algo not in ("grpo", "ppo"):
        raise ValueError(f"--algo {args.algo!r}: expected grpo or ppo")
    if args.sampling not in PROFILES:
        raise ValueError(f"--sampling {args.sampling!r}: expected one of {sorted(PROFILES)}")
    if "rl" not in cfg:
        raise ValueError(f"{args.config} has no `rl` block")
    from esopt.agent.rollout import Sampling, write_trajectories
    from esopt.es.history import weights_sha256
    from esopt.models.load import load_model_and_tokenizer
    from esopt.rl.critic import build_critic
    from esopt.rl.trainer import RLTrainer

    out = Path(args.out)
    resume_dir = out / ".resume"
    resume_dir.mkdir(parents=True, exist_ok=True)
    r = cfg["rl"]
    # Training keeps master weights in rl.dtype (fp32: AdamW on bf16 weights loses small
    # updates to rounding); the saved model is cast back to model.dtype for evaluation.
    policy, tok = load_model_and_tokenizer(args.model, dtype=r["dtype"])
    base_hash = weights_sha256(policy)
    prof = {**cfg["agent"]["sampling"], **(PROFILES[args.sampling] or {})}
    sampling = Sampling(do_sample=True, temperature=prof["temperature"], top_p=prof["top_p"], top_k=prof["top_k"],
                        max_new_tokens=cfg["agent"]["max_new_tokens"])
    rcfg = rl_config(cfg, args.algo, prof, args.seed)
    critic = build_critic(policy, args.model, rcfg.critic).to(policy.device) if args.algo == "ppo" else None
    method = method_name(args.algo, args.sampling)
    prov = Provenance("train-rl", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"rl": args.seed}, inputs=[args.config, args.model])
    traj_dir = resume_dir / "trajectories"
    keep = {0, rcfg.steps - 1} | set(range(0, rcfg.steps, 10))
    inner = build_rollout_fn(cfg, tok, args.horizon, sampling)
    step_of = {"t": 0}

    def rollout_fn(policy_, task_seed, sampling_seed, group, counters):
        trajs = inner(policy_, task_seed, sampling_seed, group, counters)
        t = step_of["t"]
        if t in keep:
            write_trajectories(traj_dir / f"step{t:04d}.jsonl", trajs[: 4 * group], step=t)
        return trajs

    def on_step(rec):
        step_of["t"] = rec["step"] + 1
        log.info("step %d: R %.3f success %.3f turns %.1f pg %.4f clip %.3f tokens %d (%.1fs, rollout %.1fs)",
                 rec["step"], rec["mean_reward"], rec["success_rate"], rec["mean_turns"], rec.get("pg_loss", 0.0),
                 rec.get("clip_frac", 0.0), rec["generated_tokens"], rec["wall_s"], rec["rollout_s"])

    trainer = RLTrainer(
        policy, rcfg, rollout_fn, pad_id=tok.pad_token_id, critic=critic, checkpoint_path=resume_dir / "checkpoint.pt",
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
    with atomic_path(out / "model") as tmp:
        tmp.unlink()
        final.save_pretrained(tmp)
        tok.save_pretrained(tmp)
    if (out / "trajectories").exists():
        shutil.rmtree(out / "trajectories")
    if traj_dir.exists():
        shutil.copytree(traj_dir, out / "trajectories")
    write_text_atomic(out / "metrics.jsonl", "".join(json.dumps(m) + "\n" for m in metrics))
    write_json_atomic(out / "budget.json", budget)
    (resume_dir / "checkpoint.pt").replace(out / "checkpoint.pt")
    prov.write(out / "provenance.json", outputs=[out / "model", out / "metrics.jsonl", out / "budget.json", out / "checkpoint.pt"],
               extra={"base_weights_sha256": base_hash, "final_weights_sha256": weights_sha256(final), "budget": budget,
                      "model_device": str(policy.device), "base_weights_dtype": r["dtype"]})
    shutil.rmtree(resume_dir)
    log.info("done: %s (%d steps, %d episodes, %.3g FLOPs)", out, len(metrics), totals["episodes"], flops)
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

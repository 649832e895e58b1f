"""esopt memory: peak memory of one real training step, measured in a fresh process.

--method inference  one rollout batch (memory.episodes Sudoku episodes), as an ES member runs it
--method es         one ES generation: memory.population members on that batch, then the update
--method grpo|ppo   one Agentic GRPO / PPO step on the same number of episodes, in rl.dtype

Reported: model-state bytes (parameters and buffers of every model the method
holds: policy, critic, reference) and the peak above the level reached after
imports and model load (CUDA: max_memory_allocated; CPU: resident-memory
high-water mark), so ratios between methods are not drowned by the interpreter.
Writes FILE.json and FILE.provenance.json.

GRPO / PPO as they train over rl.ranks > 1 (the pipeline launches this command as it
launches train-rl): under torchrun the step runs sharded (FSDP2, esopt.rl.sharding),
each rank measures its own process and device, and rank 0 writes every rank's peak
(`per_rank`) with the largest as the summary's peak (memory per GPU):
    torchrun --standalone --nproc-per-node 4 -m esopt.cli.main memory --method grpo ...
inference and es run in one process: ES memory per GPU is that of one replica.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import time
from dataclasses import replace
from pathlib import Path

import torch

from esopt.cli.common import add_provenance_args, add_threads_arg, parse_wildcards, run_main, setup
from esopt.io import write_json_atomic
from esopt.provenance.record import Provenance
from esopt.spec.sudoku import EsRun, RlRun, SudokuEpisodes

log = logging.getLogger("esopt.memory")

METHODS = ("inference", "es", "grpo", "ppo")


def step_specs(cfg: dict) -> tuple[SudokuEpisodes, EsRun, RlRun | None]:
    """The settings of the measured step: memory.* sizes over the training settings (the es
    block as it is, without H* overrides; RL: None without an rl block)."""
    m = cfg["memory"]
    episodes = replace(SudokuEpisodes.from_config(cfg), max_turns=m["max_turns"], turns_per_blank=None)
    rl = None
    if "rl" in cfg:
        rl = RlRun.from_config(cfg)
        group = min(rl.grpo.group_size, m["episodes"])
        rl = replace(rl, steps=1, grpo=replace(rl.grpo, tasks_per_step=max(1, m["episodes"] // group), group_size=group),
                     ppo=replace(rl.ppo, tasks_per_step=m["episodes"]))
    return episodes, EsRun.from_config(cfg), rl


def main_fn(args: argparse.Namespace) -> int:
    from esopt.runs.memory import exact_allocator

    exact = exact_allocator()  # before anything large is allocated
    cfg = setup(args.config, args.threads)
    if args.method not in METHODS:
        raise ValueError(f"--method {args.method!r}: expected one of {METHODS}")
    if "memory" not in cfg:
        raise ValueError(f"{args.config} has no `memory` block")
    rl = args.method in ("grpo", "ppo")
    if rl and "rl" not in cfg:
        raise ValueError(f"{args.config} has no `rl` block for --method {args.method}")
    from esopt.es.distributed import from_config, launched_world_size

    world = launched_world_size()
    if world > 1 and not rl:
        raise ValueError(f"--method {args.method} runs in one process (its memory per GPU is one replica's), "
                         f"but it was launched as {world} ranks: run it without torchrun")
    collective = from_config(cfg)  # one process, or the torchrun ranks of a sharded RL step
    try:
        return _measure(args, cfg, exact, collective)
    finally:
        collective.close()


def _measure(args: argparse.Namespace, cfg: dict, exact: bool, collective) -> int:
    """Load, build the method's step, warm up, then measure the step (every rank); rank 0 writes."""
    # Every import happens before the baseline is taken.
    from esopt.agent.rollout import Sampling
    from esopt.es import ESConfig, ESRun
    from esopt.models.load import default_device, load_model_and_tokenizer
    from esopt.rl.critic import build_critic
    from esopt.rl.sharding import full_params
    from esopt.rl.trainer import RLConfig, RLTrainer
    from esopt.runs.episodes import EpisodeSpec, run_episodes, sudoku_rl_rollouts, summarize
    from esopt.runs.memory import PeakMemory, max_over_ranks, module_state_bytes, rank_peaks

    world = collective.world_size
    if args.model is None:  # where the pipeline puts it
        name = cfg["model"]["name"] + ("-probe" if cfg["memory"]["probe"] else "")
        args.model = f"results/models/{name}"
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if world > 1 and device == "cuda":
        device = default_device()  # cuda:LOCAL_RANK: one GPU per rank
    episodes, es, rl_run = step_specs(cfg)
    m = cfg["memory"]
    prov = Provenance("memory", cfg, args.config, args.rule, parse_wildcards(args.wildcards),
                      seeds={"memory": m["seed"]}, inputs=[args.config, args.model])
    rl = args.method in ("grpo", "ppo")
    if rl and rl_run.ranks != world:
        log.warning("rl.ranks is %d, but this step runs on %d rank(s) and measures those", rl_run.ranks, world)
    dtype = rl_run.dtype if rl else None
    model, tok = load_model_and_tokenizer(args.model, dtype=dtype, device=device)
    params = sum(p.numel() for p in model.parameters())  # before any sharding
    model_dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    spec = EpisodeSpec.from_specs(episodes, m["horizon"], es.member_decoding)
    breakdown: dict[str, int | float] = {}
    held = [model]

    if args.method == "inference":
        def run():
            return summarize(run_episodes(model, tok, spec, m["episodes"], seed=m["seed"], split="train"))
    elif args.method == "es":
        # one generation at a constant sigma: memory.sigma, else es.sigma.sigma0
        sigma = {"schedule": "constant", "sigma0": m["sigma"] or es.sigma.sigma0}
        es_cfg = ESConfig.from_settings({**es.settings(), "generations": 1, "sigma": sigma}, m["population"], m["seed"])

        def fitness(member):
            s = summarize(run_episodes(model, tok, spec, m["episodes"], seed=member.task_seed, split="train"))
            breakdown["fixup_fraction_max"] = max(breakdown.get("fixup_fraction_max", 0.0), trainer.perturber.fixup_fraction())
            # es.revert snapshot: a host copy of the weights while a member runs (on a CPU, inside the peak)
            breakdown["revert_snapshot_host_bytes"] = trainer.perturber.snapshot_bytes
            return s["mean_reward"], {}

        trainer = ESRun(model, es_cfg.update_rounding, es.revert, hash_base=False).trainer(es_cfg, fitness, progress=False)
        # es.update_rounding fp32_master keeps an fp32 copy on the host, outside the device peak
        breakdown["fp32_master_host_bytes"] = trainer.perturber.master_bytes

        def run():
            rec = trainer.step(0)
            return {"rewards": rec.rewards}
    else:
        prof = episodes.agent.sampling.settings()
        sampling = Sampling.from_profile(prof, episodes.agent.max_new_tokens)
        rcfg = RLConfig.from_settings(rl_run.settings(), args.method, prof, m["seed"])
        critic = build_critic(model, args.model, rcfg.critic).to(device) if args.method == "ppo" else None
        # over several ranks RLTrainer shards policy, critic and reference (FSDP2) as train-rl does
        trainer = RLTrainer(model, rcfg, sudoku_rl_rollouts(episodes, rl_run, tok, m["horizon"], sampling), pad_id=tok.pad_token_id,
                            critic=critic, progress=False, collective=collective)
        held += [critic, trainer.reference]

        def run():
            rec = trainer.step(0)
            return {k: rec[k] for k in ("episodes", "train_tokens", "generated_tokens", "optimizer_steps")}

    # One-time lazy initialisation (kernel caches, the chat template's compilation)
    # happens in a 1-token warm-up call, so the peak below is the step's own memory.
    # Sharded, the policy generates with its parameters gathered, as in the step's rollouts.
    with torch.no_grad(), full_params(trainer.scorer) if world > 1 else contextlib.nullcontext():
        ids = tok("warm up", return_tensors="pt").to(device)
        model.generate(**ids, max_new_tokens=1, do_sample=False, pad_token_id=tok.pad_token_id)
        tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True)
    state = module_state_bytes(*held)  # this rank's: its shards when sharded
    with PeakMemory(device) as pm:
        t0 = time.perf_counter()
        result = run()
        wall = time.perf_counter() - t0
    mine = rank_peaks(collective.rank, device, state, pm, wall)
    log.info("%s rank %d: model state %.1f MiB + peak above load %.1f MiB = %.1f MiB (%s, %.1fs)", args.method,
             collective.rank, state / 2**20, pm.peak_above_start / 2**20, mine["peak_bytes"] / 2**20, pm.measure, wall)
    gathered = collective.all_gather(mine)
    if not collective.is_main:
        return 0
    peaks = max_over_ranks(gathered)
    rec = {
        "method": args.method, "model": Path(args.model).name, "params": params, "dtype": model_dtype, "device": device,
        "measure": pm.measure, **{k: peaks[k] for k in ("model_state_bytes", "peak_above_load_bytes", "peak_bytes")},
        "step_wall_s": max(r["step_wall_s"] for r in gathered), "episodes": m["episodes"], "breakdown": breakdown, "step": result,
        "allocator": "mmap_threshold_64KiB" if exact else "default",
        **{k: peaks[k] for k in ("ranks", "peak_rank", "per_rank")},
    }
    write_json_atomic(args.out, rec)
    prov.write(Path(args.out).with_suffix(".provenance.json"), outputs=[args.out])
    if world > 1:
        log.info("%s: the largest peak of %d ranks, rank %d's: %.1f MiB", args.method, world, peaks["peak_rank"],
                 peaks["peak_bytes"] / 2**20)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esopt memory", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", required=True, help="inference | es | grpo | ppo")
    p.add_argument("--config", required=True)
    p.add_argument("--model", default=None,
                   help="model directory (default: results/models/NAME-probe with memory.probe, else results/models/NAME)")
    p.add_argument("--out", required=True, help="FILE.json")
    p.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    add_threads_arg(p)
    add_provenance_args(p)
    return p


def main(argv=None) -> int:
    return run_main(main_fn, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""Training on Sudoku at one horizon H*: Agentic ESOpt (`train_es`, `esopt train-es`) and the
Agentic GRPO / PPO baselines (`train_rl`, `esopt train-rl`), on the same model, environment,
prompts and turn budget.

Each works in a resume directory (esopt.provenance.run_dir) and returns what the command
publishes: the trained model, one metrics line per generation or step, the budget (what
the run used: episodes, tokens, FLOPs, wall clock) and what the record adds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esopt.spec.sudoku import EsRun, RlRun, SudokuEpisodes, SudokuEvaluation

log = logging.getLogger(__name__)


@dataclass
class SudokuTraining:
    model: Any  # trained, in model.dtype
    tokenizer: Any
    metrics: list[dict[str, Any]]
    budget: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)  # what the provenance record adds
    history: Any = None  # ES: the replayable history


def es_budget(history, params: int, population: int, n_tasks: int, horizon: int, seed: int,
              method: str = "esopt") -> dict[str, Any]:
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


def train_es(es: EsRun, episodes: SudokuEpisodes, evaluation: SudokuEvaluation, engine: dict[str, Any], model_dir: str,
             population: int, seed: int, resume_dir: Path, traj_dir: Path, collective,
             continue_from: Path | None = None) -> SudokuTraining:
    """Agentic ESOpt (or its es.variants ablation) at es.horizon from the model in `model_dir`,
    on the `engine` (esopt.config.engine_settings). Every member sees the same task batch and
    sampling seed (common random numbers); the population is sharded over the collective's
    ranks, which must end at the same weights. `continue_from`: this run's history from an
    earlier sitting (a published partial run), continued when resume_dir has none."""
    from esopt.agent.engines import hf_model_device, open_engine
    from esopt.agent.rollout import kept_steps, write_trajectories
    from esopt.es import ESConfig, ESRun, ESTrainer
    from esopt.es.settings import resolve_units
    from esopt.models.load import load_model_and_tokenizer
    from esopt.runs.episodes import EpisodeSpec, run_episodes, summarize, train_tasks
    from esopt.runs.periodic import EVALS, EvaluatingESTrainer, PeriodicEval, read_evals, with_evals

    horizon = es.horizon
    # with vLLM: the host copy the result is saved from, off the GPU the engine needs
    model, tok = load_model_and_tokenizer(model_dir, device=hf_model_device(engine))
    settings, weight_scale = resolve_units(es.settings(), model)  # es.units: weight_scale needs the base
    es_cfg = ESConfig.from_settings(settings, population, seed)
    policy, engine_record = open_engine(engine, model, tok, model_dir, seed=seed,
                                        slots=len(collective.members(population)),
                                        rank=es_cfg.rank if es_cfg.perturbation == "lowrank" else None)
    weights = ESRun(model, es_cfg.update_rounding, es.revert, policy=policy, perturbation=es_cfg.perturbation,
                    rank=es_cfg.rank)
    spec = EpisodeSpec.from_specs(episodes, horizon, es.member_decoding)
    n_tasks = es.tasks_per_member
    keep = kept_steps(es_cfg.generations)

    def score(member, trajs, counters):
        if member.index == 0 and member.generation in keep:
            write_trajectories(traj_dir / f"gen{member.generation:04d}.jsonl", trajs,
                               generation=member.generation, member=0, sigma=member.sigma)
        s = summarize(trajs)
        return s["mean_reward"], {"success": s["success"], "mean_turns": s["mean_turns"],
                                  "generated_tokens": counters.get("generated_tokens", 0),
                                  "rollout_tokens": counters.get("prompt_tokens", 0) + counters.get("generated_tokens", 0)}

    def fitness(member):
        counters: dict[str, int] = {}
        trajs = run_episodes(policy, tok, spec, n_tasks, seed=member.task_seed, split="train", counters=counters,
                             tasks=train_tasks(episodes, horizon, n_tasks, member.task_seed))
        return score(member, trajs, counters)

    class Batched:  # the population engine: every member's episodes in one rollout
        capture = getattr(policy, "capture", None)
        capture_lowrank = getattr(policy, "capture_lowrank", None)

        @staticmethod
        def evaluate(members):
            seed_ = members[0].task_seed
            tasks = train_tasks(episodes, horizon, n_tasks, seed_)
            counters: dict[int, dict[str, int]] = {}
            trajs = run_episodes(policy, tok, spec, n_tasks, seed=seed_, split="train", counters=counters,
                                 tasks=tasks * len(members), members=[k for k in range(len(members)) for _ in tasks])
            return [score(m, trajs[k * n_tasks:(k + 1) * n_tasks], counters.get(k, {})) for k, m in enumerate(members)]

    def on_generation(rec):
        m = rec.metrics()
        log.info("gen %d: sigma %.3g mean R %.3f max %.3f success %.3f (%.1fs)",
                 rec.generation, rec.sigma, m["mean_reward"], m["max_reward"], m["success_rate"], rec.wall_s)

    # es.eval_every: evaluate on every rank after the due generations (esopt.runs.periodic)
    pool = {"train_pool": episodes.train_pool, "train_pool_seed": episodes.train_pool_seed} if episodes.train_pool else {}
    evaluate = PeriodicEval(episodes, evaluation, es, policy, tok, collective, resume_dir / EVALS) if es.eval_every else None
    trainer = weights.trainer(
        es_cfg, fitness, history_path=resume_dir / "history.json", continue_from=continue_from, trainer_cls=EvaluatingESTrainer if evaluate else ESTrainer,
        run_info={"benchmark": "sudoku", "horizon": horizon, "method": es.method,
                  "base_weights_sha256": weights.base_weights_sha256, "episode": spec.record(),
                  "tasks_per_member": n_tasks} | pool | ({"weight_scale": weight_scale} if weight_scale else {}),
        on_generation=on_generation, collective=collective, **({"evaluate": evaluate} if evaluate else {}),
        batched=Batched() if engine["name"] == "population" else None,
    )
    try:
        history = trainer.run()
        weights.finish(history)
    finally:
        if weights.in_engine:
            policy.close()
    replicas = collective.all_gather(history.final["weights_sha256"])
    if len(set(replicas)) != 1:
        raise RuntimeError(f"ES replicas diverged: final weight hashes by rank {replicas}")
    budget = es_budget(history, sum(p.numel() for p in model.parameters()), population, n_tasks, horizon, seed, es.method)
    budget["ranks"] = collective.world_size
    extra = {"base_weights_sha256": weights.base_weights_sha256, "final_weights_sha256": history.final["weights_sha256"],
             "model_device": str(model.device), "engine": engine_record,
             "ranks": {"world_size": collective.world_size, "replica_weights_sha256": replicas}}
    if trainer.continued:  # an earlier sitting's generations: their trajectories stayed there
        extra["continued_from"] = trainer.continued
    metrics = with_evals([r.metrics() for r in history.generations], read_evals(resume_dir / EVALS))
    return SudokuTraining(model, tok, metrics, budget, extra, history)


def train_rl(rl: RlRun, episodes: SudokuEpisodes, model_dtype: str, model_dir: str, algo: str, sampling_profile: str,
             horizon: int, seed: int, resume_dir: Path, traj_dir: Path, collective=None,
             engine: dict[str, Any] | None = None, continue_from: Path | None = None) -> SudokuTraining:
    """Agentic GRPO or PPO (`algo`) under a sampling profile (rl.trainer.SAMPLING_PROFILES)
    from the model in `model_dir`, saved in `model_dtype` (model.dtype); the optimizer
    checkpoint is resume_dir/checkpoint.pt. `engine` (esopt.config.rl_engine_settings): the
    rollouts' engine, HF generate or, on one rank, the population engine over the policy's
    own weights (it reads them as the optimizer leaves them). `continue_from`: this run's
    checkpoint from an earlier sitting (a published partial run), continued when resume_dir has none.
    Over a collective of several ranks the models are sharded and each rank rolls out its
    share of the episodes (esopt.rl.sharding); rank 0 returns the trained model, the others None."""
    import torch

    from esopt.agent.rollout import Sampling, kept_steps, write_trajectories
    from esopt.hashing import weights_sha256
    from esopt.models.load import load_model_and_tokenizer
    from esopt.rl.critic import build_critic
    from esopt.rl.trainer import SAMPLING_PROFILES, RLConfig, RLTrainer, method_name, rl_flops
    from esopt.runs.episodes import sudoku_rl_rollouts

    # Training keeps master weights in rl.dtype (fp32: AdamW on bf16 weights loses small
    # updates to rounding); the saved model is cast back to model.dtype for evaluation.
    policy, tok = load_model_and_tokenizer(model_dir, dtype=rl.dtype)
    base_hash = weights_sha256(policy)
    prof = {**episodes.agent.sampling.settings(), **(SAMPLING_PROFILES[sampling_profile] or {})}
    sampling = Sampling.from_profile(prof, episodes.agent.max_new_tokens)
    rcfg = RLConfig.from_settings(rl.settings(), algo, prof, seed)
    critic = build_critic(policy, model_dir, rcfg.critic).to(policy.device) if algo == "ppo" else None
    method = method_name(algo, sampling_profile)
    keep = kept_steps(rcfg.steps)
    inner = sudoku_rl_rollouts(episodes, rl, tok, horizon, sampling)
    step_of = {"t": 0}
    single = collective is None or collective.world_size == 1  # sharded policies roll out through HF
    fast = None
    if single and (engine or {}).get("name") == "population":
        from esopt.agent.population import PopulationEngine

        fast = PopulationEngine(policy, tok, slots=1, context=engine["context"])

    def rollout_fn(policy_, task_seed, sampling_seed, group, counters, shard=(0, 1)):
        trajs = inner(fast or policy_, task_seed, sampling_seed, group, counters, shard=shard)
        t = step_of["t"]
        if t in keep and shard[0] == 0:  # over several ranks: samples of rank 0's share
            write_trajectories(traj_dir / f"step{t:04d}.jsonl", trajs[: 4 * group], step=t)
        return trajs

    def on_step(rec):
        step_of["t"] = rec["step"] + 1
        log.info("step %d: R %.3f success %.3f turns %.1f cut %.2f pg %.4f clip %.3f tokens %d (%.1fs, rollout %.1fs)",
                 rec["step"], rec["mean_reward"], rec["success_rate"], rec["mean_turns"], rec["truncated"], rec.get("pg_loss", 0.0),
                 rec.get("clip_frac", 0.0), rec["generated_tokens"], rec["wall_s"], rec["rollout_s"])

    trainer = RLTrainer(
        policy, rcfg, rollout_fn, pad_id=tok.pad_token_id, critic=critic, checkpoint_path=resume_dir / "checkpoint.pt",
        # the episodes' limits too: a checkpoint made under another token cap is another run
        run_info={"benchmark": "sudoku", "horizon": horizon, "method": method, "sampling": prof,
                  "base_weights_sha256": base_hash, "max_turns": episodes.turn_budget(horizon),
                  "max_total_tokens": rl.max_total_tokens},
        on_step=on_step, collective=collective, continue_from=continue_from,
    )
    step_of["t"] = trainer.resume()
    metrics = trainer.run()
    ranks = trainer.world

    params = sum(p.numel() for p in policy.parameters())
    critic_params = sum(p.numel() for p in critic.parameters()) if critic is not None and rcfg.critic == "separate" else 0
    totals = trainer.totals
    flops = rl_flops(params, critic_params, totals, rcfg)
    budget = {
        "method": method, "algo": algo, "horizon": horizon, "seed": seed, "population": None,
        "planned": {"steps": rcfg.steps, "episodes_per_step": rcfg.episodes_per_step},
        "steps": len(metrics), **{k: totals[k] for k in ("episodes", "generated_tokens", "rollout_tokens", "train_tokens")},
        "flops": flops, "flops_per_step": flops / max(len(metrics), 1),
        "wall_s": totals["wall_s"], "wall_s_per_step": totals["wall_s"] / max(len(metrics), 1),
        "params": params, "critic_params": critic_params, "ranks": ranks,
    }
    device = str(policy.device)
    if ranks > 1:  # the shards gathered into a plain model on rank 0's CPU (a collective)
        from esopt.rl.sharding import full_state_dict

        weights = full_state_dict(policy)
        if trainer.rank != 0:  # rank 0 publishes
            return SudokuTraining(None, tok, metrics, budget)
        final, _ = load_model_and_tokenizer(model_dir, dtype=model_dtype, device="cpu")
        final.load_state_dict(weights)
    else:
        final = policy.to(getattr(torch, model_dtype))
    extra = {"base_weights_sha256": base_hash, "final_weights_sha256": weights_sha256(final), "budget": budget,
             "model_device": device, "base_weights_dtype": rl.dtype, "ranks": ranks,
             "rollout_engine": {"name": "population", "context": fast.context} if fast else {"name": "hf"}}
    if trainer.continued:  # an earlier sitting's steps: their trajectories stayed there
        extra["continued_from"] = trainer.continued
    log.info("%d steps, %d episodes, %.3g FLOPs", len(metrics), totals["episodes"], flops)
    return SudokuTraining(final, tok, metrics, budget, extra)

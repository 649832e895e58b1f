"""Training a tool agent (ReAct Math, DocVQA) by one method and seed (`esopt train-agent`).

esopt              Agentic ESOpt on the weights (tool_agents.es)
esopt_trace2skill  co-evolution: each generation's rollouts (all members, the SAME
                   episodes the ES update uses) also feed Trace2Skill, whose skill
                   document is in the system prompt of the next generation; no extra
                   environment calls
trace2skill        Trace2Skill alone on the frozen base model: each generation rolls out
                   tool_agents.trace2skill.rollouts_per_generation episodes (ES's G x
                   tasks_per_member) on the same task batches
grpo               Agentic GRPO (tool_agents.grpo over rl); observations are outside the
                   loss mask

The episodes of ES and Trace2Skill run on the benchmark's engine (engine.B: HF generate,
or vLLM with ES inside the engine, as esopt train-es runs Sudoku; docs/engine.md); with
vLLM the HF model is loaded on the host and receives the final weights for saving. GRPO
rolls out in HF whatever the engine (it needs log-probs vLLM does not give).

A run works in a resume directory (esopt.provenance.run_dir): a killed run resumes
from it and ends where an uninterrupted run would.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esopt.io import write_json_atomic
from esopt.spec.agents import METHODS, AgentTraining

log = logging.getLogger("esopt.train_agent")


@dataclass
class ToolTraining:
    """What a run produced: the model to save (None: the weights did not move), its
    tokenizer, one metrics line per generation or step, the ES history, the prompt
    optimizer's state, the RL checkpoint, and what the record adds."""

    model: Any
    tokenizer: Any
    metrics: list[dict[str, Any]]
    history: Any = None
    prompt: PromptState | None = None
    checkpoint: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- prompt optimizer state
def make_prompt_optimizer(job: AgentTraining, seed: int, model_dir: str, base=None):
    """Trace2Skill with the job's analyst. A policy analyst is a frozen copy of
    the base model, so its proposals do not depend on where ES has moved the weights
    (and a resumed run proposes exactly what an uninterrupted one did). `base`: an
    (HF model, tokenizer) that holds the base weights for the whole run and may serve as
    that copy (with a vLLM engine, the host model: ES moves the engine's weights, not its);
    None: a copy is loaded from model_dir."""
    from esopt.prompt.analyst import make_analyst
    from esopt.prompt.trace2skill import Trace2Skill
    from esopt.runs.tool_episodes import task_instructions

    t = job.trace2skill
    spec = t["analyst"]
    model = tok = None
    if spec.get("kind", "policy") == "policy":
        from esopt.models.load import load_model_and_tokenizer

        model, tok = base if base is not None else load_model_and_tokenizer(model_dir)
    analyst = make_analyst(spec, model=model, tokenizer=tok)
    return Trace2Skill(analyst, success_traces=t["success_traces"], failure_traces=t["failure_traces"],
                       max_edits_per_trace=t["max_edits_per_trace"], max_items=t["max_items"], seed=seed,
                       task_description=task_instructions(job.benchmark, job.episodes))


class PromptState:
    """The prompt optimizer's state after each generation, kept in DIR/.resume/prompt/,
    and the rollouts of the generation in progress (so an update lost to a kill is redone
    from the same episodes)."""

    def __init__(self, opt, resume_dir: Path):
        self.opt, self.dir = opt, resume_dir / "prompt"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.lines: list[dict[str, Any]] = []

    def _state(self, t: int) -> Path:
        return self.dir / f"gen{t:04d}.json"

    def save_rollouts(self, t: int, member: int, trajs) -> None:
        from esopt.agent.rollout import write_trajectories

        write_trajectories(self.dir / f"rollouts{t:04d}_{member:04d}.jsonl", trajs)

    def load_rollouts(self, t: int):
        from esopt.agent.rollout import Trajectory, Turn

        trajs = []
        for f in sorted(self.dir.glob(f"rollouts{t:04d}_*.jsonl")):
            for line in f.read_text().splitlines():
                d = json.loads(line)
                d = {k: v for k, v in d.items() if k in Trajectory.__dataclass_fields__}
                d["turns"] = [Turn(**x) for x in d["turns"]]
                trajs.append(Trajectory(**d))
        return trajs

    def update(self, t: int, trajs, **extra: Any) -> dict[str, Any]:
        stats = self.opt.update(trajs, t)
        line = {"generation": t, **extra, **stats, "skill": self.opt.context()}
        write_json_atomic(self._state(t), {"generation": t, "state": self.opt.state_dict(), "lines": self.lines + [line]})
        self.lines.append(line)
        for f in self.dir.glob(f"rollouts{t:04d}_*.jsonl"):
            f.unlink()
        log.info("gen %d skill update: %s", t, stats)
        return stats

    def load(self) -> int:
        """Restore the latest saved state; returns the generations it has seen."""
        saved = sorted(self.dir.glob("gen*.json"))
        if not saved:
            return 0
        last = json.loads(saved[-1].read_text())
        self.opt.load_state_dict(last["state"])
        self.lines = last["lines"]
        return last["generation"] + 1

    def catch_up(self, done: int) -> None:
        """Bring the optimizer to its state after ES generation done-1."""
        have = self.load()
        if have == done - 1:  # killed between the ES history and the prompt update
            self.update(done - 1, self.load_rollouts(done - 1))
        elif have != done:
            raise RuntimeError(f"{self.dir}: prompt state after {have} generations, ES history after {done}")


# ---------------------------------------------------------------- methods
def run_es(job: AgentTraining, seed: int, model, policy, tok, tools, train, spec, resume_dir: Path, traj_dir: Path,
           prompt: PromptState | None, site_reset=None):
    """Agentic ESOpt with the episodes on `policy`: the HF `model` itself (perturbed in
    place), or an engine (rollout_policy) whose perturber runs ES inside it; the engine's
    final weights are then copied into `model`, which is what the run saves."""
    from esopt.agent.rollout import kept_steps, write_trajectories
    from esopt.es import ESConfig, ESRun
    from esopt.es.history import History
    from esopt.runs.tool_episodes import generation_reset, run_tool_episodes, sample_batch, summarize_tool

    e = job.es
    es_cfg = ESConfig.from_settings(e.settings(), e.population, seed)
    es_run = ESRun(model, es_cfg.update_rounding, e.revert, policy=policy)
    keep = kept_steps(es_cfg.generations)
    history_path = resume_dir / "history.json"
    if prompt is not None:
        prompt.catch_up(len(History.load(history_path).generations) if history_path.exists() else 0)

    reset_sites = generation_reset(job.episodes, site_reset)

    def fitness(member):
        if reset_sites is not None and member.index == 0:  # real sites, fresh for every generation
            reset_sites(member.generation)
        counters: dict[str, int] = {}
        batch = sample_batch(train, e.tasks_per_member, member.task_seed)
        skill = prompt.opt.context() if prompt else ""
        trajs = run_tool_episodes(policy, tok, spec, tools, batch, seed=member.task_seed, skill=skill, counters=counters)
        if prompt is not None:
            prompt.save_rollouts(member.generation, member.index, trajs)
        if member.index == 0 and member.generation in keep:
            write_trajectories(traj_dir / f"gen{member.generation:04d}.jsonl", trajs, generation=member.generation,
                               member=0, sigma=member.sigma)
        r = summarize_tool(trajs)
        return r["score"], {"success": r["success"], "mean_turns": r["mean_turns"],
                            "tool_calls": r["tool_calls_per_episode"],
                            "generated_tokens": counters.get("generated_tokens", 0),
                            "rollout_tokens": counters.get("prompt_tokens", 0) + counters.get("generated_tokens", 0)}

    def on_generation(rec):
        m = rec.metrics()
        log.info("gen %d: sigma %.3g mean R %.3f max %.3f (%.1fs)", rec.generation, rec.sigma, m["mean_reward"],
                 m["max_reward"], rec.wall_s)
        if prompt is not None:
            prompt.update(rec.generation, prompt.load_rollouts(rec.generation))

    trainer = es_run.trainer(es_cfg, fitness, history_path=history_path,
                             run_info={"benchmark": job.benchmark, "method": job.method,
                                       "base_weights_sha256": es_run.base_weights_sha256,
                                       "tasks_per_member": e.tasks_per_member,
                                       "episode": {"max_turns": spec.max_turns, "max_tool_calls": spec.max_tool_calls,
                                                   "sampling": vars(spec.sampling)}},
                             on_generation=on_generation, member_deadline_s=job.member_deadline_s)
    history = trainer.run()
    es_run.finish(history)
    return history, [r.metrics() for r in history.generations]


def run_trace2skill(job: AgentTraining, seed: int, policy, tok, tools, train, spec, traj_dir: Path,
                    prompt: PromptState, site_reset=None):
    """Trace2Skill alone: the base model's episodes (on `policy`: the HF model or an engine)
    of each generation feed the skill, on the task batches an ES run of this seed sees."""
    from types import SimpleNamespace

    from tqdm.auto import tqdm

    from esopt.agent.rollout import kept_steps, write_trajectories
    from esopt.es.settings import task_seed
    from esopt.runs.tool_episodes import generation_reset, run_tool_episodes, sample_batch, summarize_tool

    generations = job.es.generations
    n = job.trace2skill["rollouts_per_generation"]
    keep = kept_steps(generations)
    same_batches = SimpleNamespace(seed=seed)  # the task batches an ES run of this seed sees
    done = prompt.load()
    reset_sites = generation_reset(job.episodes, site_reset)
    for t in tqdm(range(done, generations), initial=done, total=generations, desc="Trace2Skill generations"):
        if reset_sites is not None:
            reset_sites(t)
        tseed = task_seed(same_batches, t)
        trajs = run_tool_episodes(policy, tok, spec, tools, sample_batch(train, n, tseed), seed=tseed,
                                  skill=prompt.opt.context())
        if t in keep:
            write_trajectories(traj_dir / f"gen{t:04d}.jsonl", trajs, generation=t)
        r = summarize_tool(trajs)
        prompt.update(t, trajs, metrics={"generation": t, "mean_reward": r["score"], "success_rate": r["success"],
                                         "mean_turns": r["mean_turns"]})
    return [ln["metrics"] for ln in prompt.lines]


def run_grpo(job: AgentTraining, seed: int, tok, model_dir, tools, train, resume_dir: Path, traj_dir: Path):
    """Agentic GRPO on HF token rollouts of the tool episodes (observations outside the loss mask)."""
    from esopt.agent.react import make_react_env
    from esopt.agent.rollout import Sampling, kept_steps, write_trajectories
    from esopt.agent.tokens import token_rollout
    from esopt.models.load import load_model_and_tokenizer
    from esopt.rl.trainer import RLConfig, RLTrainer
    from esopt.runs.tool_episodes import sample_batch, system_prompt

    benchmark, episodes = job.benchmark, job.episodes
    rl = job.grpo.settings()
    sampling = Sampling.from_profile(episodes.sampling, episodes.caps(benchmark)[0])
    rcfg = RLConfig.from_settings(rl, "grpo", episodes.sampling, seed)
    policy, _ = load_model_and_tokenizer(model_dir, dtype=rl["dtype"])
    system = system_prompt(benchmark, tools)
    keep = kept_steps(rcfg.steps)
    step_of = {"t": 0}

    def rollout_fn(policy_, task_seed, sampling_seed, group, counters):
        tasks = [t for t in sample_batch(train, rcfg.tasks_per_step, task_seed) for _ in range(group)]
        trajs = token_rollout(policy_, tok, lambda: make_react_env(benchmark, tools, episodes.max_tool_calls), tasks,
                              system=system, sampling=sampling, seed=sampling_seed, max_turns=episodes.max_turns,
                              history_turns=episodes.history_turns, max_total_tokens=rl["max_total_tokens"],
                              batch_size=rl["batch_size"], counters=counters)
        if step_of["t"] in keep:
            write_trajectories(traj_dir / f"step{step_of['t']:04d}.jsonl", trajs[: 4 * group], step=step_of["t"])
        return trajs

    def on_step(rec):
        step_of["t"] = rec["step"] + 1
        log.info("step %d: R %.3f success %.3f (%.1fs)", rec["step"], rec["mean_reward"], rec["success_rate"], rec["wall_s"])

    trainer = RLTrainer(policy, rcfg, rollout_fn, pad_id=tok.pad_token_id, checkpoint_path=resume_dir / "checkpoint.pt",
                        # the episodes' limits too: a checkpoint made under another token cap is another run
                        run_info={"benchmark": benchmark, "method": "grpo", "max_turns": episodes.max_turns,
                                  "max_tool_calls": episodes.max_tool_calls, "history_turns": episodes.history_turns,
                                  "max_total_tokens": rl["max_total_tokens"]}, on_step=on_step)
    step_of["t"] = trainer.resume()
    return policy, trainer.run()


def train_tool_agent(job: AgentTraining, seed: int, model_dir: str, data_dir: str, resume_dir: Path,
                     traj_dir: Path) -> ToolTraining:
    """One run of `job.method` with `seed` from the base model in `model_dir` on the training
    set in `data_dir`; progress in `resume_dir`, sampled episodes in `traj_dir`."""
    import torch
    import transformers

    from esopt.envs.benchmarks import get
    from esopt.hashing import weights_sha256
    from esopt.models.load import load_model_and_tokenizer, load_tokenizer
    from esopt.runs.tool_episodes import (
        ToolEpisodeSpec,
        episode_envs,
        host_device,
        load_tasks,
        make_tools,
        rollout_policy,
        site_reset,
    )

    if job.method not in METHODS:
        raise ValueError(f"--method {job.method!r}: expected one of {METHODS}")
    if job.method == "grpo" and get(job.benchmark).section != "tool_agents":
        raise ValueError(f"--method grpo: the {job.benchmark} benchmark runs esopt, trace2skill and esopt_trace2skill "
                         "(GRPO trains the tool agents)")
    train = load_tasks(data_dir, job.benchmark)
    tools = make_tools(job.episodes, job.benchmark, data_dir)
    extra: dict[str, Any] = {"method": job.method, "benchmark": job.benchmark}
    if job.method == "grpo":  # HF whatever engine.B says: the RL loss needs HF's log-probs
        tok = load_tokenizer(model_dir)
        model, metrics = run_grpo(job, seed, tok, model_dir, tools, train, resume_dir, traj_dir)
        model = model.to(getattr(torch, job.grpo.dtype))
        extra["engine"] = {"name": "hf", "version": transformers.__version__}
        return ToolTraining(model, tok, metrics, checkpoint=resume_dir / "checkpoint.pt", extra=extra)
    device = host_device(job.engine)  # cpu beside a vLLM engine
    model, tok = load_model_and_tokenizer(model_dir, device=device)
    extra["base_weights_sha256"] = weights_sha256(model)
    prompt = None
    if "trace2skill" in job.method:
        # beside a vLLM engine the host model keeps the base weights until the run ends: the analyst's copy
        base = (model, tok) if device == "cpu" else None
        prompt = PromptState(make_prompt_optimizer(job, seed, model_dir, base=base), resume_dir)
    reset = site_reset(job.episodes, train)  # real sites: web.reset, timed into the record
    if reset is not None:
        extra["resets"] = reset.records
    with episode_envs(job.episodes, job.benchmark, tools, tasks=train, reset=reset) as make_env, \
            rollout_policy(job.engine, model, tok, model_dir, seed) as (policy, engine_record):
        extra.update(engine=engine_record, model_device=str(model.device))
        spec = ToolEpisodeSpec.from_episodes(job.episodes, job.benchmark, job.es.member_decoding, job.batch_size,
                                             make_env=make_env)
        if job.method == "trace2skill":
            metrics = run_trace2skill(job, seed, policy, tok, tools, train, spec, traj_dir, prompt, reset)
            return ToolTraining(None, tok, metrics, prompt=prompt, extra=extra)  # the weights did not move
        history, metrics = run_es(job, seed, model, policy, tok, tools, train, spec, resume_dir, traj_dir, prompt,
                                  reset)
    extra["final_weights_sha256"] = history.final["weights_sha256"]
    return ToolTraining(model, tok, metrics, history=history, prompt=prompt, extra=extra)

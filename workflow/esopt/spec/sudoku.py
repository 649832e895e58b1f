"""The Sudoku jobs' settings: the episodes (the sudoku and agent blocks), their evaluation,
one ES run at H* (and its es.variants ablation), one RL run.

Each spec's `settings()` is the part of esopt.provenance.jobs's settings it stands for:
what reruns a job when it changes, and what the audit compares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from esopt.config import ConfigError, es_block

Config = dict[str, Any]


@dataclass(frozen=True)
class SamplingProfile:
    """A sampling profile of generate (the schema's `sampling`)."""

    temperature: float
    top_p: float
    top_k: int
    presence_penalty: float

    @classmethod
    def from_block(cls, s: dict[str, Any]) -> SamplingProfile:
        return cls(temperature=s["temperature"], top_p=s["top_p"], top_k=s["top_k"],
                   presence_penalty=s["presence_penalty"])

    def settings(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "presence_penalty": self.presence_penalty}


@dataclass(frozen=True)
class SudokuAgent:
    """The Sudoku agent's prompts and decoding (the agent block)."""

    history_turns: int | None
    thinking: bool
    history_thinking: str
    max_new_tokens: int
    sampling: SamplingProfile

    @classmethod
    def from_config(cls, config: Config) -> SudokuAgent:
        a = config["agent"]
        return cls(history_turns=a["history_turns"], thinking=a["thinking"], history_thinking=a["history_thinking"],
                   max_new_tokens=a["max_new_tokens"], sampling=SamplingProfile.from_block(a["sampling"]))

    def settings(self) -> dict[str, Any]:
        return {"history_turns": self.history_turns, "thinking": self.thinking,
                "history_thinking": self.history_thinking, "max_new_tokens": self.max_new_tokens,
                "sampling": self.sampling.settings()}


@dataclass(frozen=True)
class SudokuEpisodes:
    """What every Sudoku episode depends on but its horizon: the board, turn budget, reward,
    prompt, observation and training pool (the sudoku block without its grid of horizons),
    and the agent that plays it."""

    size: int
    max_turns: int | None
    turns_per_blank: int | None
    reward: str
    prompt: str
    train_pool: int | None
    train_pool_seed: int
    observation: str
    agent: SudokuAgent

    @classmethod
    def from_config(cls, config: Config) -> SudokuEpisodes:
        s = config["sudoku"]
        return cls(size=s["size"], max_turns=s["max_turns"], turns_per_blank=s["turns_per_blank"], reward=s["reward"],
                   prompt=s["prompt"], train_pool=s["train_pool"], train_pool_seed=s["train_pool_seed"],
                   observation=s["observation"], agent=SudokuAgent.from_config(config))

    def turn_budget(self, horizon: int) -> int:
        """The turn budget of an episode at H*: sudoku.max_turns, or turns_per_blank x H*."""
        return self.max_turns if self.max_turns else self.turns_per_blank * int(horizon)

    def settings(self) -> dict[str, Any]:
        """The sudoku block without horizons (the agent's: agent.settings())."""
        return {"size": self.size, "max_turns": self.max_turns, "turns_per_blank": self.turns_per_blank,
                "reward": self.reward, "prompt": self.prompt, "train_pool": self.train_pool,
                "train_pool_seed": self.train_pool_seed, "observation": self.observation}


@dataclass(frozen=True)
class SudokuEvaluation:
    """How a model is scored on Sudoku (the evaluate block): at the run's H*, `episodes`
    fixed puzzles of the eval split from `seed`, played `repeats` times."""

    episodes: int
    repeats: int
    decoding: str
    seed: int
    batch_size: int

    @classmethod
    def from_config(cls, config: Config) -> SudokuEvaluation:
        e = config["evaluate"]
        return cls(episodes=e["episodes"], repeats=e["repeats"], decoding=e["decoding"], seed=e["seed"],
                   batch_size=e["batch_size"])

    def settings(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "repeats": self.repeats, "decoding": self.decoding, "seed": self.seed,
                "batch_size": self.batch_size}


@dataclass(frozen=True)
class Sigma:
    """The σ schedule: cosine from sigma0 to sigmaT over the run, or constant sigma0."""

    schedule: str
    sigma0: float
    sigmaT: float | None  # None: not set (the constant schedule needs none)

    @classmethod
    def from_block(cls, s: dict[str, Any]) -> Sigma:
        return cls(schedule=s["schedule"], sigma0=s["sigma0"], sigmaT=s.get("sigmaT"))  # sigmaT: optional, no default

    def settings(self) -> dict[str, Any]:
        return {"schedule": self.schedule, "sigma0": self.sigma0} | (
            {} if self.sigmaT is None else {"sigmaT": self.sigmaT})


@dataclass(frozen=True)
class EsRun:
    """One Sudoku ES run's settings: es, then es.by_horizon[H*], then es.variants[variant],
    then that variant's by_horizon[H*] (horizon None: the es block itself)."""

    horizon: int | None
    variant: str | None
    generations: int
    tasks_per_member: int
    alpha: float
    sigma: Sigma
    antithetic: bool
    normalization: str
    member_decoding: str
    update_rounding: str
    eval_every: int | None
    eval_train: bool
    revert: str
    perturbation: str  # full (the paper's) or lowrank (EGGROLL)
    rank: int  # of lowrank perturbations
    units: str  # absolute, or weight_scale (alpha and sigma as multiples of the base's mean |θ|)

    @classmethod
    def from_config(cls, config: Config, horizon: int | None = None, variant: str | None = None) -> EsRun:
        e = es_block(config, horizon, variant or None)
        return cls(horizon=None if horizon is None else int(horizon), variant=variant or None,
                   generations=e["generations"], tasks_per_member=e["tasks_per_member"], alpha=e["alpha"],
                   sigma=Sigma.from_block(e["sigma"]), antithetic=e["antithetic"], normalization=e["normalization"],
                   member_decoding=e["member_decoding"], update_rounding=e["update_rounding"],
                   eval_every=e["eval_every"], eval_train=e["eval_train"], revert=e["revert"],
                   perturbation=e["perturbation"], rank=e["rank"], units=e["units"])

    @property
    def method(self) -> str:
        """What the run reports as: esopt, or es_VARIANT for an ablation."""
        return f"es_{self.variant}" if self.variant else "esopt"

    def settings(self) -> dict[str, Any]:
        """The run's es settings (the grid of populations, seeds, horizons and variants left out)."""
        return {"generations": self.generations, "tasks_per_member": self.tasks_per_member, "alpha": self.alpha,
                "sigma": self.sigma.settings(), "antithetic": self.antithetic, "normalization": self.normalization,
                "member_decoding": self.member_decoding, "update_rounding": self.update_rounding,
                "eval_every": self.eval_every, "eval_train": self.eval_train, "revert": self.revert,
                **self.optional_settings()}

    def optional_settings(self) -> dict[str, Any]:
        """The settings added since the first records, only where they are not their defaults
        (so the paper's runs read as before): {perturbation: lowrank, rank: r}, {units: weight_scale}."""
        out: dict[str, Any] = {}
        if self.perturbation != "full":
            out |= {"perturbation": self.perturbation, "rank": self.rank}
        if self.units != "absolute":
            out["units"] = self.units
        return out


@dataclass(frozen=True)
class Grpo:
    tasks_per_step: int
    group_size: int

    def settings(self) -> dict[str, Any]:
        return {"tasks_per_step": self.tasks_per_step, "group_size": self.group_size}


@dataclass(frozen=True)
class Ppo:
    tasks_per_step: int
    critic: str
    critic_lr: float
    gamma: float
    lam: float
    vf_clip: float | None
    vf_coef: float

    def settings(self) -> dict[str, Any]:
        return {"tasks_per_step": self.tasks_per_step, "critic": self.critic, "critic_lr": self.critic_lr,
                "gamma": self.gamma, "lam": self.lam, "vf_clip": self.vf_clip, "vf_coef": self.vf_coef}


@dataclass(frozen=True)
class RlRun:
    """One Agentic GRPO / PPO run's settings: the rl block without its grid (methods, seeds)."""

    steps: int
    dtype: str
    max_total_tokens: int
    batch_size: int
    lr: float
    weight_decay: float
    epochs: int
    minibatches: int
    micro_batch: int
    loss_agg: str
    clip_low: float
    clip_high: float | None
    kl_coef: float
    max_grad_norm: float
    ranks: int
    gpus_per_rank: int
    gradient_checkpointing: bool
    logits_chunk: int | None
    grpo: Grpo
    ppo: Ppo

    @classmethod
    def from_config(cls, config: Config) -> RlRun:
        if "rl" not in config:
            raise ConfigError("the config has no `rl` block")
        r = config["rl"]
        g, p = r["grpo"], r["ppo"]
        return cls(
            steps=r["steps"], dtype=r["dtype"], max_total_tokens=r["max_total_tokens"], batch_size=r["batch_size"],
            lr=r["lr"], weight_decay=r["weight_decay"], epochs=r["epochs"], minibatches=r["minibatches"],
            micro_batch=r["micro_batch"], loss_agg=r["loss_agg"], clip_low=r["clip_low"], clip_high=r["clip_high"],
            kl_coef=r["kl_coef"], max_grad_norm=r["max_grad_norm"], ranks=r["ranks"], gpus_per_rank=r["gpus_per_rank"],
            gradient_checkpointing=r["gradient_checkpointing"], logits_chunk=r["logits_chunk"],
            grpo=Grpo(tasks_per_step=g["tasks_per_step"], group_size=g["group_size"]),
            ppo=Ppo(tasks_per_step=p["tasks_per_step"], critic=p["critic"], critic_lr=p["critic_lr"], gamma=p["gamma"],
                    lam=p["lam"], vf_clip=p["vf_clip"], vf_coef=p["vf_coef"]),
        )

    def settings(self) -> dict[str, Any]:
        return {"steps": self.steps, "dtype": self.dtype, "max_total_tokens": self.max_total_tokens,
                "batch_size": self.batch_size, "lr": self.lr, "weight_decay": self.weight_decay, "epochs": self.epochs,
                "minibatches": self.minibatches, "micro_batch": self.micro_batch, "loss_agg": self.loss_agg,
                "clip_low": self.clip_low, "clip_high": self.clip_high, "kl_coef": self.kl_coef,
                "max_grad_norm": self.max_grad_norm, "ranks": self.ranks, "gpus_per_rank": self.gpus_per_rank,
                "gradient_checkpointing": self.gradient_checkpointing, "logits_chunk": self.logits_chunk,
                "grpo": self.grpo.settings(), "ppo": self.ppo.settings()}

    def tasks_per_step(self, group: int) -> int:
        """Tasks of one step: PPO's (group 1, each task rolled out once) or GRPO's."""
        return (self.ppo if group == 1 else self.grpo).tasks_per_step

"""The settings of the agent jobs: tool episodes (Math, DocVQA), web episodes, and an agent's
training run (Agentic ESOpt, Trace2Skill, Agentic GRPO).

A tool benchmark's settings live in the tool_agents block (each benchmark's own tools, token
caps and ES overrides under tool_agents.benchmarks.B); web's in the web block. `settings()`
of each spec is the part of the rerun map (esopt.provenance.jobs) the spec is: its keys and
their order are what the pipeline's Snakemake params compare, so they stay as they are.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields, replace
from typing import Any

from esopt.config import deep_merge, engine_settings, rl_settings, section

Config = dict[str, Any]


def block_name(benchmark: str | None) -> str:
    """The config block of an agent benchmark: web for web, tool_agents for the others."""
    return "web" if benchmark == "web" else "tool_agents"


def _shallow(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict, nested config mappings copied."""
    return {f.name: copy.deepcopy(getattr(obj, f.name)) for f in fields(obj)}


@dataclass(frozen=True)
class ToolEpisodes:
    """What every tool episode depends on (tool_agents): turn and token budgets, sampling,
    the sandbox's and OCR's settings (None: the block sets none), each benchmark's tools,
    and the token caps a benchmark sets itself (benchmarks.B.max_new_tokens,
    max_episode_tokens; benchmarks without any are left out)."""

    max_turns: int
    max_tool_calls: int | None
    max_new_tokens: int
    history_turns: int | None
    sampling: dict[str, Any]
    sandbox: dict[str, Any] | None
    ocr: dict[str, Any] | None
    tools: dict[str, list[str]]
    token_caps: dict[str, dict[str, int | None]]

    @classmethod
    def from_config(cls, config: Config) -> ToolEpisodes:
        ta = section(config, "tool_agents")
        blocks = ta["benchmarks"]
        caps = {b: {k: spec[k] for k in ("max_new_tokens", "max_episode_tokens") if k in spec} for b, spec in blocks.items()}
        return cls(max_turns=ta["max_turns"], max_tool_calls=ta["max_tool_calls"], max_new_tokens=ta["max_new_tokens"],
                   history_turns=ta["history_turns"], sampling=ta["sampling"], sandbox=ta.get("sandbox"),
                   ocr=ta.get("ocr"), tools={b: list(spec["tools"]) for b, spec in blocks.items()},
                   token_caps={b: v for b, v in caps.items() if v})

    episodes_in_flight = None  # every episode of a batch at once

    def caps(self, benchmark: str) -> tuple[int, int | None]:
        """(tokens per reply, tokens per episode or None: no cap) of a benchmark's episodes:
        its own where it sets them, else the block's max_new_tokens and no episode cap."""
        own = self.token_caps.get(benchmark, {})
        return own.get("max_new_tokens", self.max_new_tokens), own.get("max_episode_tokens")

    def settings(self) -> dict[str, Any]:
        s = _shallow(self)
        out = {k: s[k] for k in ("max_turns", "max_tool_calls", "max_new_tokens", "history_turns", "sampling")}
        out |= {k: s[k] for k in ("sandbox", "ocr") if s[k] is not None}  # absent from the block: absent here
        return out | {"tools": s["tools"]} | ({"token_caps": s["token_caps"]} if s["token_caps"] else {})


@dataclass(frozen=True)
class WebEpisodes:
    """The keyword arguments of esopt.envs.web.WebEnv, as the web block gives them: adding a
    web setting is one schema key, one field here and the WebEnv argument of that name."""

    max_turns: int
    observation: str
    max_obs_chars: int | None
    judge: dict[str, Any] | None
    crash_retries: int
    prompt_style: str
    restate_objective: bool
    settle_s: float
    early_stop_parse_failures: int | None
    early_stop_repeats: int | None
    stop_answers: str
    login: str
    action_syntax: str

    @classmethod
    def from_config(cls, config: Config) -> WebEpisodes:
        w = config["web"]
        return cls(**{f.name: w[f.name] for f in fields(cls)})

    def env_kwargs(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class WebSites:
    """The sites a web job runs on (web.sites: local, the project's sites seeded by site_seed; or
    the real sites' URLs, reset by the `reset` command at the job's start, and with reset_every
    generation before every training generation) and the browsers of its WebRuntime. Browsers,
    hang_s and the timeouts say how many browsers and how long a slow call may take, not what a
    page that answers in time shows: no result depends on them (RUNTIME_ONLY)."""

    sites: str | dict[str, str]
    site_seed: int
    reset: str | None
    reset_every: str
    browsers: int
    hang_s: float
    action_timeout_s: float
    navigation_timeout_s: float
    start_timeout_s: float | None

    RUNTIME_ONLY = ("browsers", "hang_s", "action_timeout_s", "navigation_timeout_s", "start_timeout_s")

    @classmethod
    def from_config(cls, config: Config) -> WebSites:
        w = config["web"]
        return cls(**{f.name: w[f.name] for f in fields(cls)})

    @property
    def local(self) -> bool:
        return self.sites == "local"

    def runtime_kwargs(self) -> dict[str, Any]:
        """esopt.envs.web.WebRuntime's keyword arguments other than the sites."""
        return {"seed": self.site_seed, **{k: getattr(self, k) for k in self.RUNTIME_ONLY}}


# The order of the web episode settings in the rerun map (Snakemake compares them as written);
# a key not listed comes after these.
_WEB_SETTINGS_ORDER = ("sites", "site_seed", "reset", "reset_every", "observation", "max_obs_chars",
                       "restate_objective", "prompt_style", "action_syntax", "max_turns", "max_new_tokens",
                       "history_turns", "sampling", "crash_retries", "judge", "episodes_in_flight", "settle_s",
                       "early_stop_parse_failures", "early_stop_repeats", "stop_answers", "login")


@dataclass(frozen=True)
class WebJob:
    """What every episode of a web job depends on: the environment's arguments, the sites and
    browsers, and the rollout's token budget, history, sampling and episodes run at once."""

    episodes: WebEpisodes
    sites: WebSites
    max_new_tokens: int
    history_turns: int | None
    sampling: dict[str, Any]
    episodes_in_flight: int

    @classmethod
    def from_config(cls, config: Config) -> WebJob:
        w = config["web"]
        return cls(episodes=WebEpisodes.from_config(config), sites=WebSites.from_config(config),
                   max_new_tokens=w["max_new_tokens"], history_turns=w["history_turns"], sampling=w["sampling"],
                   episodes_in_flight=w["episodes_in_flight"])

    # what a tool episode has and a web episode has not: tools, tool-call limits, an episode's token cap
    tools = {"web": []}
    sandbox = ocr = max_tool_calls = None

    @property
    def max_turns(self) -> int:
        return self.episodes.max_turns

    def caps(self, benchmark: str = "web") -> tuple[int, None]:
        """(tokens per reply, None: no cap on an episode's tokens)."""
        return self.max_new_tokens, None

    def on_site_seed(self, site_seed: int) -> WebJob:
        """The same episodes on the local sites seeded with `site_seed` (the web model's
        demonstrations on other copies of the sites)."""
        return replace(self, sites=replace(self.sites, site_seed=site_seed))

    def settings(self) -> dict[str, Any]:
        """Every setting but the runtime-only ones (WebSites.RUNTIME_ONLY)."""
        s = {k: v for k, v in _shallow(self.sites).items() if k not in WebSites.RUNTIME_ONLY}
        s |= _shallow(self.episodes) | {k: v for k, v in _shallow(self).items() if k not in ("episodes", "sites")}
        return {k: s[k] for k in _WEB_SETTINGS_ORDER if k in s} | {k: v for k, v in s.items() if k not in _WEB_SETTINGS_ORDER}


def agent_episodes(config: Config, benchmark: str | None = None) -> ToolEpisodes | WebJob:
    """The episode settings of a benchmark: WebJob for web, ToolEpisodes for the others."""
    return WebJob.from_config(config) if benchmark == "web" else ToolEpisodes.from_config(config)


def vllm_engine(config: Config, benchmark: str) -> dict[str, Any]:
    """{"engine": the benchmark's engine} when it is vLLM (sampled replies differ between
    engines), else {}: the rerun map's engine of an agent job."""
    e = engine_settings(config, benchmark)
    return {} if e["name"] == "hf" else {"engine": e}


@dataclass(frozen=True)
class AgentES:
    """Agentic ESOpt of one benchmark: tool_agents.es with the benchmark's own overrides
    (tool_agents.benchmarks.B.es) merged over it; web.es."""

    population: int
    generations: int
    tasks_per_member: int
    alpha: float
    sigma: dict[str, Any]
    antithetic: bool
    normalization: str
    member_decoding: str
    update_rounding: str
    revert: str

    @classmethod
    def from_config(cls, config: Config, benchmark: str) -> AgentES:
        block = section(config, block_name(benchmark))
        es = block["es"]
        if benchmark != "web":
            es = deep_merge(es, ((block.get("benchmarks") or {}).get(benchmark) or {}).get("es") or {})
        return cls(**{f.name: es[f.name] for f in fields(cls)})

    def settings(self) -> dict[str, Any]:
        """As esopt.es.ESConfig.from_settings reads them."""
        return _shallow(self)


@dataclass(frozen=True)
class AgentGRPO:
    """Agentic GRPO of a tool agent: the rl block (esopt.config.rl_settings) with
    tool_agents.grpo's steps, lr, tasks_per_step and group_size over it; `dtype`: the
    precision its trained weights are saved in (tool_agents.model's, else model's)."""

    rl: dict[str, Any]
    steps: int
    lr: float
    tasks_per_step: int
    group_size: int
    dtype: str

    @classmethod
    def from_config(cls, config: Config) -> AgentGRPO:
        ta = section(config, "tool_agents")
        g = ta["grpo"]
        model = ta.get("model") or config["model"]
        return cls(rl=rl_settings(config), steps=g["steps"], lr=g["lr"], tasks_per_step=g["tasks_per_step"],
                   group_size=g["group_size"], dtype=model["dtype"])

    def settings(self) -> dict[str, Any]:
        """As esopt.rl.trainer.RLConfig.from_settings reads them (algo grpo)."""
        return deep_merge(self.rl, {"steps": self.steps, "lr": self.lr,
                                    "grpo": {"tasks_per_step": self.tasks_per_step, "group_size": self.group_size}})


@dataclass(frozen=True)
class AgentEvaluation:
    """Mean@k of an agent (tool_agents.evaluate, web.evaluate): k samples, their decoding and
    seed, and the episodes per generate call (evaluation and the training episodes alike)."""

    samples: int
    decoding: str
    seed: int
    batch_size: int

    @classmethod
    def from_config(cls, config: Config, benchmark: str | None = None) -> AgentEvaluation:
        ev = section(config, block_name(benchmark))["evaluate"]
        return cls(**{f.name: ev[f.name] for f in fields(cls)})


METHODS = ("esopt", "esopt_trace2skill", "trace2skill", "grpo")


@dataclass(frozen=True)
class AgentTraining:
    """One agent training job (`esopt train-agent --method M --benchmark B`): its episodes
    (GRPO: the tool episodes), ES settings (the ES methods and trace2skill, whose generations
    and task batches are ES's) or GRPO's, the Trace2Skill block, the episodes per generate call,
    the engine of its rollouts and how long one ES member may take (no result depends on it)."""

    method: str
    benchmark: str
    episodes: ToolEpisodes | WebJob
    es: AgentES | None
    grpo: AgentGRPO | None
    trace2skill: dict[str, Any] | None
    batch_size: int
    engine: dict[str, Any]
    member_deadline_s: float | None

    @classmethod
    def from_config(cls, config: Config, method: str, benchmark: str) -> AgentTraining:
        block = section(config, block_name(benchmark))
        if method == "grpo":  # the tool episodes: web has no GRPO
            grpo, es, episodes = AgentGRPO.from_config(config), None, ToolEpisodes.from_config(config)
        else:
            grpo, es = None, AgentES.from_config(config, benchmark)
            episodes = agent_episodes(config, benchmark)
        return cls(method=method, benchmark=benchmark, episodes=episodes, es=es, grpo=grpo,
                   trace2skill=block.get("trace2skill") if "trace2skill" in method else None,
                   batch_size=block["evaluate"]["batch_size"], engine=engine_settings(config, benchmark),
                   member_deadline_s=config["distributed"]["member_deadline_s"])

    def settings(self) -> dict[str, Any]:
        """The rerun map's train-agent entry: es.revert is left out (either revert restores
        the weights bit for bit) and GRPO's ppo block; the engine only when it is vLLM."""
        if self.grpo is not None:
            rl = self.grpo.settings()
            rl.pop("ppo", None)
            return {"rl": rl, "episode": self.episodes.settings()}
        es = self.es.settings()
        es.pop("revert")
        out = {"es": es, "episode": self.episodes.settings()}
        out |= {} if self.engine["name"] == "hf" else {"engine": copy.deepcopy(self.engine)}  # as vllm_engine
        if "trace2skill" in self.method:
            out["trace2skill"] = copy.deepcopy(self.trace2skill)
        return out

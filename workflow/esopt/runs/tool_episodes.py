"""Agent episodes (ReAct Math with Python, DocVQA with OCR, web tasks in a browser): tasks,
tools, environments, rollouts, Mean@k.

A benchmark's tasks live in a data directory written by `esopt prepare-data`
(tasks.jsonl, plus the document images for DocVQA). A tool episode is a ReAct
conversation (esopt.agent.react) over the whole history: question, tool calls and
their outputs, final answer; its score is its reward: 1/0 for a correct math answer,
ANLS for DocVQA. A web episode is one task in a real browser (esopt.envs.web) on a
runtime the whole job shares (`episode_envs`), scored 1/0 by WebArena's evaluators.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from esopt.agent.react import make_react_env, tool_instructions
from esopt.agent.rollout import Sampling, Trajectory, rollout
from esopt.agent.tools import Tool
from esopt.envs.benchmarks import check, instructions, task_class
from esopt.io import write_text_atomic
from esopt.spec.agents import AgentEvaluation, ToolEpisodes, WebJob, WebSites

Episodes = ToolEpisodes | WebJob  # a benchmark's episode settings (esopt.spec.agents.agent_episodes)

TASKS_FILE = "tasks.jsonl"

log = logging.getLogger(__name__)


def write_tasks(data_dir: str | os.PathLike, tasks: Sequence[Any]) -> Path:
    """tasks.jsonl in data_dir, image paths relative to it (the directory can move)."""
    data_dir = Path(data_dir)
    rows = []
    for t in tasks:
        row = asdict(t)
        if "image" in row:
            row["image"] = os.path.relpath(row["image"], data_dir)
        rows.append(json.dumps(row, ensure_ascii=False) + "\n")
    path = data_dir / TASKS_FILE
    write_text_atomic(path, "".join(rows))
    return path


def load_tasks(data_dir: str | os.PathLike, benchmark: str) -> list[Any]:
    """The tasks of a data directory written by `esopt prepare-data`."""
    data_dir = Path(data_dir)
    path = data_dir / TASKS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run `esopt prepare-data` for this data set first")
    cls = task_class(benchmark)
    names = {f.name for f in fields(cls)}
    tasks = []
    for line in path.read_text().splitlines():
        row = {k: v for k, v in json.loads(line).items() if k in names}
        if "image" in row:
            row["image"] = str(data_dir / row["image"])
        if "answers" in row:
            row["answers"] = tuple(row["answers"])
        tasks.append(cls(**row))
    return tasks


def sample_batch(tasks: Sequence[Any], n: int, seed: int) -> list[Any]:
    """n tasks drawn without replacement (with, if n exceeds the pool) by `seed`."""
    rng = random.Random(seed)
    if n <= len(tasks):
        return rng.sample(list(tasks), n)
    return [rng.choice(tasks) for _ in range(n)]


OCR_CACHE = "ocr_cache"


def make_tools(episodes: Episodes, benchmark: str, data_dir: str | os.PathLike | None = None) -> list[Tool]:
    """The tools `episodes` give a benchmark (tool_agents.benchmarks.B.tools; web has none).
    OCR reads its results from DATA_DIR/ocr_cache, which `esopt prepare-data` fills for
    every image (OCR is deterministic: each image is read once per data set, not once per job)."""
    tools: list[Tool] = []
    for name in episodes.tools[benchmark]:
        if name == "python":
            from esopt.agent.tools.python_sandbox import PythonSandbox

            box = PythonSandbox(**(episodes.sandbox or {}))  # require_all_layers: raises here, at the job's start
            box.log_layers()  # which layers are active, once per run
            tools.append(box)
        elif name == "ocr":
            from esopt.agent.tools.ocr import OCRTool

            cache = Path(data_dir) / OCR_CACHE if data_dir is not None else None
            tools.append(OCRTool(**(episodes.ocr or {}), cache_dir=cache))
        else:
            raise ValueError(f"tool {name!r}: expected python or ocr")
    return tools


def sandbox_provenance(episodes: Episodes, benchmark: str) -> dict[str, Any]:
    """{"sandbox": the layers active here, ...} for a provenance record if the benchmark
    uses the Python sandbox, else {}."""
    if "python" not in episodes.tools[benchmark]:
        return {}
    from esopt.agent.tools.python_sandbox import PythonSandbox

    return {"sandbox": PythonSandbox(**(episodes.sandbox or {})).provenance()}


def web_provenance(episodes: Episodes) -> dict[str, Any]:
    """{"web": the browser's and libraries' versions and the sites} for a web job's
    record, else {} (the task files are the job's inputs, hashed in the record)."""
    if not isinstance(episodes, WebJob):
        return {}
    from esopt.envs.web.deps import versions

    return {"web": {**versions(), "sites": episodes.sites.sites, "site_seed": episodes.sites.site_seed,
                    "observation": episodes.episodes.observation}}


def _instructions_config(episodes: Episodes | None) -> dict[str, Any] | None:
    """What a benchmark's instructions read of the config (esopt.envs.benchmarks.instructions):
    web's prompt style and observation."""
    if not isinstance(episodes, WebJob):
        return None
    return {"web": {"prompt_style": episodes.episodes.prompt_style, "observation": episodes.episodes.observation}}


def task_instructions(benchmark: str, episodes: Episodes | None = None) -> str:
    """The benchmark's task instructions (web's in the prompt style of `episodes`)."""
    return instructions(benchmark, _instructions_config(episodes))


def system_prompt(benchmark: str, tools: Sequence[Tool], skill: str = "", episodes: Episodes | None = None) -> str:
    """Task instructions (web's in the prompt style of `episodes`), tool documentation (if any
    tools), then the skill document (if any)."""
    parts = [task_instructions(benchmark, episodes)] + ([tool_instructions(tools)] if tools else [])
    if skill.strip():
        parts.append(skill.strip())
    return "\n\n".join(parts)


class SiteReset:
    """The real sites' reset: `web.reset`, the user's command (VisualAgentBench's
    refresh_website_dockers.sh, or WebArena's reset steps), then a wait until every site the
    tasks use answers again (GitLab takes minutes). Each call runs it once, logs its wall time
    and keeps it in `records` ([{"when", "seconds", "command_seconds"}]), which the job writes
    to its output record. A failing or hanging command raises webarena.SiteResetError."""

    def __init__(self, command: str, urls: dict[str, str], timeout_s: float = 3600.0, wait_s: float = 900.0):
        self.command, self.urls, self.timeout_s, self.wait_s = command, dict(urls), timeout_s, wait_s
        self.records: list[dict[str, Any]] = []

    def __call__(self, when: str) -> float:
        from esopt.envs.web import webarena

        t0 = time.monotonic()
        command_s = webarena.reset_sites(self.command, self.timeout_s, urls=self.urls, wait_s=self.wait_s)
        seconds = time.monotonic() - t0
        self.records.append({"when": when, "seconds": round(seconds, 3), "command_seconds": round(command_s, 3)})
        log.info("sites reset (%s) in %.1f s (the command %.1f s, then every site answered)", when, seconds, command_s)
        return seconds


def web_site_urls(sites: WebSites, tasks: Sequence[Any] | None = None) -> dict[str, str] | None:
    """The real sites a web job needs: `web.sites` narrowed to the sites `tasks` use (all of
    them without tasks); None on the local sites. A site a task uses that `web.sites` lacks
    raises ValueError naming it and its tasks (esopt.envs.web.webarena.needed_site_urls)."""
    if sites.local:
        return None
    from esopt.envs.web import webarena

    return webarena.needed_site_urls(sites.sites, tasks) if tasks is not None else webarena.site_urls(sites.sites)


def site_reset(episodes: Episodes, tasks: Sequence[Any] | None = None) -> SiteReset | None:
    """The job's SiteReset (web.reset on real sites, waiting for the sites `tasks` use), else None."""
    if not isinstance(episodes, WebJob) or not episodes.sites.reset or episodes.sites.local:
        return None
    return SiteReset(episodes.sites.reset, web_site_urls(episodes.sites, tasks))


@contextlib.contextmanager
def episode_envs(episodes: Episodes, benchmark: str, tools: Sequence[Tool], tasks: Sequence[Any] | None = None,
                 reset: SiteReset | None = None) -> Iterator[Callable[[], Any]]:
    """A factory of fresh environments for the episodes of one job. Tool benchmarks: a
    ReAct environment over the tools. Web: environments on one WebRuntime (the sites and
    `web.browsers` browsers) opened here for the whole job and closed on the way out, so
    no browser or site server outlives it. Real sites are reset first (`reset`, default
    site_reset(episodes, tasks): web.reset, "job start") and must answer: only the
    sites `tasks` use (all of `web.sites` without tasks; esopt.envs.web.webarena.check_sites)."""
    if not isinstance(episodes, WebJob):
        yield lambda: make_react_env(benchmark, tools, episodes.max_tool_calls)
        return
    from esopt.envs.web import WebEnv, WebRuntime

    s = episodes.sites
    sites: Any = "local"
    if not s.local:
        from esopt.envs.web import webarena

        needed = web_site_urls(s, tasks)  # a site a task uses and web.sites lacks: one error names it
        reset = reset if reset is not None else site_reset(episodes, tasks)
        if reset is not None:
            reset("job start")
        sites = webarena.make_fixed_sites(s.sites, require=needed)  # those sites must answer, or one error names them
    env_kwargs = episodes.episodes.env_kwargs()
    with WebRuntime(sites, **s.runtime_kwargs()) as rt:
        yield lambda: WebEnv(rt, **env_kwargs)


def generation_reset(episodes: Episodes, reset: SiteReset | None = None) -> Callable[[], Any] | None:
    """The real sites' reset before every training generation (web.reset_every: generation):
    fn(generation=None) calling `reset` (default: site_reset(episodes)) with "generation
    N"; else None."""
    if not isinstance(episodes, WebJob) or not episodes.sites.reset or episodes.sites.reset_every != "generation":
        return None
    reset = reset if reset is not None else site_reset(episodes)
    if reset is None:
        return None
    return lambda generation=None: reset("generation" if generation is None else f"generation {generation}")


def host_device(engine: dict[str, Any]) -> str | None:
    """Where a job loads the HF model for a benchmark's `engine` (esopt.config.engine_settings;
    esopt.agent.engines.hf_model_device): the host (cpu) beside a vLLM engine, which needs the
    accelerator's memory for itself (the host copy receives the final weights, or serves the
    Trace2Skill analyst); else None, the default device."""
    from esopt.agent.engines import hf_model_device

    return hf_model_device(engine)


@contextlib.contextmanager
def rollout_policy(engine: dict[str, Any], model, tokenizer, model_dir: str | os.PathLike,
                   seed: int) -> Iterator[tuple[Any, dict[str, Any]]]:
    """The policy a benchmark's episodes run on (its `engine`, engine.B, docs/engine.md): the HF
    model itself, or a vLLM engine over model_dir, closed on the way out. Yields (policy, the
    engine's provenance record)."""
    from esopt.agent.engines import open_engine

    policy, record = open_engine(engine, model, tokenizer, model_dir, seed=seed)
    try:
        yield policy, record
    finally:
        if policy is not model:
            policy.close()


@dataclass(frozen=True)
class ToolEpisodeSpec:
    """Everything about a batch of agent episodes except the model, tasks and seed.
    `make_env` comes from `episode_envs` (default: the tool benchmarks' ReAct environment);
    `in_flight` bounds the episodes run at once (web: browser contexts; None: all);
    `max_episode_tokens` caps an episode's replies and observations (esopt.agent.rollout.rollout;
    None: no cap); `episodes`: the settings it was made from (web's prompt style)."""

    benchmark: str
    max_turns: int
    max_tool_calls: int | None
    history_turns: int | None
    sampling: Sampling
    batch_size: int | None = None
    episodes: Episodes | None = field(default=None, compare=False, repr=False)
    make_env: Callable[[], Any] | None = field(default=None, compare=False, repr=False)
    in_flight: int | None = None
    max_episode_tokens: int | None = None

    @classmethod
    def from_episodes(cls, episodes: Episodes, benchmark: str, decoding: str, batch_size: int | None = None,
                      make_env: Callable[[], Any] | None = None) -> ToolEpisodeSpec:
        """A batch of `benchmark`'s episodes under `episodes`, decoded greedily or sampled."""
        check(benchmark)
        max_new_tokens, max_episode_tokens = episodes.caps(benchmark)  # a tool benchmark's own over the shared ones
        sampling = Sampling.from_profile(episodes.sampling, max_new_tokens, do_sample=decoding == "sample")
        return cls(benchmark=benchmark, max_turns=episodes.max_turns, max_tool_calls=episodes.max_tool_calls,
                   history_turns=episodes.history_turns, sampling=sampling, batch_size=batch_size, episodes=episodes,
                   make_env=make_env, in_flight=episodes.episodes_in_flight, max_episode_tokens=max_episode_tokens)

    def env_factory(self, tools: Sequence[Tool]) -> Callable[[], Any]:
        if self.make_env is not None:
            return self.make_env
        if isinstance(self.episodes, WebJob):
            raise ValueError("web episodes need the environments of esopt.runs.tool_episodes.episode_envs")
        return lambda: make_react_env(self.benchmark, tools, self.max_tool_calls)


class JudgeFailureError(RuntimeError):
    """The fuzzy-match judge failed on some episodes of an evaluation round (no answer, no
    verdict, no judge): the round stops and is not scored, as the authors' harness aborts such
    a repeat (scripts/webarena/replay_es_history_and_eval.py:226, 266-270) rather than counting
    a 0. `failures`: (task id, error) of each such episode."""

    def __init__(self, failures: Sequence[tuple[str, str]], where: str = ""):
        self.failures = list(failures)
        shown = "; ".join(f"task {tid}: {err}" for tid, err in self.failures[:5])
        more = f" (and {len(self.failures) - 5} more)" if len(self.failures) > 5 else ""
        super().__init__(f"the judge failed on {len(self.failures)} episode(s){' of ' + where if where else ''}, "
                         f"which therefore stops unscored (a judge failure is never scored 0): {shown}{more}")


def judge_failures(trajs: Sequence[Trajectory]) -> list[tuple[str, str]]:
    """(task id, error) of the episodes whose evaluation failed in the judge."""
    from esopt.envs.web.evaluators import is_judge_failure

    return [(str(t.task_id), str(t.info.get("error"))) for t in trajs if is_judge_failure(t.info.get("error"))]


def run_tool_episodes(model, tokenizer, spec: ToolEpisodeSpec, tools: Sequence[Tool], tasks: Sequence[Any],
                      seed: int, skill: str = "", counters: dict[str, int] | None = None,
                      stop_on_judge_failure: str | None = None) -> list[Trajectory]:
    """One episode per task with the model (an HF model or an engine: `rollout_policy`) as
    it is now; `seed` fixes sampling. With
    `spec.in_flight`, tasks run in consecutive chunks of that many (chunk c with seed
    derive_seed(seed, "chunk", c) from the second chunk on). `stop_on_judge_failure` (a name
    for the round, e.g. "evaluation sample 2"): web episodes whose judge failed end the run
    after their chunk with JudgeFailureError (logged), no later chunk started."""
    from esopt.seeding import derive_seed

    step = spec.in_flight or max(len(tasks), 1)
    out: list[Trajectory] = []
    for c, lo in enumerate(range(0, len(tasks), step)):
        chunk = rollout(
            model, tokenizer, spec.env_factory(tools), tasks[lo:lo + step],
            system=system_prompt(spec.benchmark, tools, skill, spec.episodes), sampling=spec.sampling,
            seed=seed if c == 0 else derive_seed(seed, "chunk", c), max_turns=spec.max_turns,
            history_turns=spec.history_turns, batch_size=spec.batch_size, counters=counters,
            max_episode_tokens=spec.max_episode_tokens,
        )
        out += chunk
        judged = isinstance(spec.episodes, WebJob)  # a web task may need the fuzzy-match judge
        failed = judge_failures(chunk) if stop_on_judge_failure is not None and judged else []
        if failed:
            err = JudgeFailureError(failed, f"{stop_on_judge_failure} ({len(out)} of {len(tasks)} episodes run)")
            log.error("%s", err)
            raise err
    return out


def evaluation_rounds(policy, tokenizer, spec: ToolEpisodeSpec, tools: Sequence[Tool], tasks: Sequence[Any],
                      samples: int, seed: int, skill: str = "", reset: SiteReset | None = None) -> list[list[Trajectory]]:
    """Mean@k's k rounds (samples): every task once per round, round k with seed
    derive_seed("mean-at-k", seed, k). On real sites `reset` runs before every round after the
    first (the first's is the job's, in episode_envs), as VisualAgentBench's README requires
    before each round of testing. A judge failure stops its round and the evaluation
    (JudgeFailureError): an unscored round is never averaged."""
    from esopt.seeding import derive_seed

    rounds: list[list[Trajectory]] = []
    for k in range(samples):
        if k and reset is not None:
            reset(f"evaluation sample {k + 1}")
        trajs = run_tool_episodes(policy, tokenizer, spec, tools, tasks, seed=derive_seed("mean-at-k", seed, k),
                                  skill=skill, stop_on_judge_failure=f"evaluation sample {k + 1}")
        rounds.append(trajs)
        log.info("sample %d/%d: score %.3f", k + 1, samples, summarize_tool(trajs)["score"])
    return rounds


@dataclass
class AgentEvaluationRun:
    """What `evaluate_agent` produced: the summary (FILE.json), every episode, and what the
    provenance record adds (where the model was, the engine, the sandbox's layers, the web versions)."""

    summary: dict[str, Any]
    trajectories: list[Trajectory]
    extra: dict[str, Any]


def evaluate_agent(episodes: Episodes, evaluation: AgentEvaluation, engine: dict[str, Any], benchmark: str,
                   model_dir: str, data_dir: str, seed: int, skill: str | None = None,
                   meta: Any = None) -> AgentEvaluationRun:
    """Mean@k of the model in `model_dir` on the evaluation set in `data_dir` (`esopt evaluate
    --benchmark B`): evaluation.samples rounds (evaluation_rounds) with the skill document at
    path `skill` (if any) in the system prompt, on `engine` (esopt.config.engine_settings).
    The summary names the benchmark, model, skill and `meta` as given; real sites are reset
    before every round, their times in the summary's `resets`."""
    from esopt.envs.benchmarks import get
    from esopt.models.load import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(model_dir, device=host_device(engine))
    tasks = load_tasks(data_dir, benchmark)
    tools = make_tools(episodes, benchmark, data_dir)
    skill_text = Path(skill).read_text() if skill else ""
    samples, every = [], []
    reset = site_reset(episodes, tasks)  # real sites: web.reset before every round, timed
    with episode_envs(episodes, benchmark, tools, tasks=tasks, reset=reset) as make_env, \
            rollout_policy(engine, model, tok, model_dir, seed) as (policy, engine_record):
        spec = ToolEpisodeSpec.from_episodes(episodes, benchmark, evaluation.decoding,
                                             batch_size=evaluation.batch_size, make_env=make_env)
        for trajs in evaluation_rounds(policy, tok, spec, tools, tasks, evaluation.samples, seed, skill_text, reset):
            samples.append(summarize_tool(trajs))
            every += trajs
    scores = [x["score"] for x in samples]
    summary = {"benchmark": benchmark, "model": str(model_dir), "skill": skill, "meta": meta,
               "k": evaluation.samples, "mean_at_k": statistics.fmean(scores), "sample_std": statistics.pstdev(scores),
               "scores": scores, "tasks": len(tasks), "decoding": evaluation.decoding, "seed": seed,
               **{f"all_{k}": v for k, v in summarize_tool(every).items()}}
    bench = get(benchmark)
    if bench.summary is not None:
        summary |= bench.summary(tasks, every)
    if reset is not None:
        summary["resets"] = reset.records
    extra = {"model_device": str(model.device), "engine": engine_record, **sandbox_provenance(episodes, benchmark),
             **web_provenance(episodes)}
    log.info("%s Mean@%d %.3f (samples %s)", benchmark, evaluation.samples, summary["mean_at_k"],
             ", ".join(f"{x:.3f}" for x in scores))
    return AgentEvaluationRun(summary, every, extra)


def summarize_tool(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Mean score (reward: success or ANLS) with its standard error, and how episodes went."""
    n = len(trajs)
    scores = [t.reward for t in trajs]
    mean = statistics.fmean(scores)
    return {
        "episodes": n,
        "score": mean,
        "score_se": statistics.pstdev(scores) / math.sqrt(n) if n > 1 else 0.0,
        "success": statistics.fmean(bool(t.info.get("success")) for t in trajs),
        "mean_reward": mean,
        "answered": statistics.fmean("answer" in t.info for t in trajs),
        "mean_turns": statistics.fmean(t.num_turns for t in trajs),
        "tool_calls_per_episode": statistics.fmean(t.info.get("tool_calls", 0) for t in trajs),
        "malformed_calls_per_episode": statistics.fmean(t.info.get("malformed_calls", 0) for t in trajs),
    }

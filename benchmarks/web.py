"""The web benchmark's throughput, side by side: episodes per second per browser, the model's
share of a rollout, and the web stage's share of a pipeline run.

1. Browsers. The scripted expert plays the same tasks (`--tasks-per-template` of each of the
   21 templates) with `--browsers` Chromium processes and `--in-flight` episodes at once,
   stepped interleaved from one thread as esopt.agent.rollout steps them; prints episodes/s,
   actions/s and episodes/s per browser for each setting, and the ratio to one browser with
   one episode at a time.
2. Model vs browser (`--model DIR`, e.g. results/models/tiny-qwen35-web). The real rollout
   (esopt.agent.rollout, sampled decoding, the config's web settings) of the same tasks, with
   the time inside the environments' steps (the browser and the sites) measured apart from
   the rest (the model's generate calls): from the two, how many browsers one core feeds
   before the model is the bottleneck (model actions/s per core divided by one browser's
   actions/s).
3. Pipeline share (`--workdir DIR`): the wall time of each finished job from Snakemake's
   records (DIR/.snakemake/metadata), summed for the web rules and for everything else.

    python benchmarks/web.py --browsers 1 2 --in-flight 1 4 8 --model results/models/tiny-qwen35-web \\
        --workdir . --out /tmp/web_bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
WEB_RULES = ("prepare_web_data", "build_web_model", "train_web", "evaluate_web_base", "evaluate_web",
             "check_web_model", "report_webarena")


def sample_tasks(per_template: int, split: str = "train"):
    from esopt.envs.web import generate_tasks

    return generate_tasks(0, split, per_template=per_template)


def expert_run(tasks, browsers: int, in_flight: int, max_turns: int = 10) -> dict:
    """The expert's episodes of `tasks`, `in_flight` at a time on `browsers` browsers."""
    from esopt.envs.web import ScriptedExpert, WebEnv, WebRuntime

    actions = episodes = successes = 0
    with WebRuntime(seed=0, browsers=browsers) as rt:
        t0 = time.perf_counter()
        for lo in range(0, len(tasks), in_flight):
            envs = [WebEnv(rt, max_turns=max_turns, max_obs_chars=4000) for _ in tasks[lo:lo + in_flight]]
            obs = [env.reset(t) for env, t in zip(envs, tasks[lo:lo + in_flight])]
            experts = [ScriptedExpert.for_task(t, env.site_urls) for env, t in zip(envs, tasks[lo:lo + in_flight])]
            live = list(range(len(envs)))
            while live:
                for i in list(live):
                    obs[i], _, done, info = envs[i].step(experts[i].act(obs[i]))
                    actions += 1
                    if done:
                        live.remove(i)
                        episodes += 1
                        successes += bool(info["success"])
        wall = time.perf_counter() - t0
    return {"browsers": browsers, "in_flight": in_flight, "episodes": episodes, "actions": actions,
            "success": successes / episodes, "wall_s": wall, "episodes_per_s": episodes / wall,
            "actions_per_s": actions / wall, "episodes_per_s_per_browser": episodes / wall / browsers}


class TimedEnv:
    """A WebEnv whose reset and step times add up in `clock` (the browser's and the sites' share)."""

    def __init__(self, env, clock: dict):
        self.env, self.clock = env, clock

    def reset(self, task):
        t0 = time.perf_counter()
        try:
            return self.env.reset(task)
        finally:
            self.clock["env_s"] += time.perf_counter() - t0

    def step(self, action):
        t0 = time.perf_counter()
        try:
            out = self.env.step(action)
            self.clock["env_steps"] += 1
            return out
        finally:
            self.clock["env_s"] += time.perf_counter() - t0


def model_run(model_dir: str, config: str, tasks, in_flight: int, threads: int) -> dict:
    """The real rollout of `tasks` by the model, environment time apart from model time."""
    import torch

    from esopt.config import load_config
    from esopt.models.load import load_model_and_tokenizer
    from esopt.runs.tool_episodes import ToolEpisodeSpec, episode_envs, run_tool_episodes
    from esopt.spec.agents import WebJob

    torch.set_num_threads(threads)
    cfg = load_config(config)
    cfg["web"]["episodes_in_flight"] = in_flight
    job = WebJob.from_config(cfg)
    model, tok = load_model_and_tokenizer(model_dir)
    clock = {"env_s": 0.0, "env_steps": 0}
    counters: dict[str, int] = {}
    with episode_envs(job, "web", []) as make_env:
        spec = ToolEpisodeSpec.from_episodes(job, "web", "sample", batch_size=in_flight,
                                             make_env=lambda: TimedEnv(make_env(), clock))
        t0 = time.perf_counter()
        trajs = run_tool_episodes(model, tok, spec, [], tasks, seed=0, counters=counters)
        wall = time.perf_counter() - t0
    model_s = wall - clock["env_s"]
    actions = sum(t.num_turns for t in trajs)
    browser_rate = clock["env_steps"] / clock["env_s"]  # actions one browser (one thread) runs per second
    model_rate = actions / model_s / threads  # actions the model writes per second per core
    return {"model": model_dir, "threads": threads, "in_flight": in_flight, "episodes": len(trajs), "actions": actions,
            "success": sum(bool(t.info.get("success")) for t in trajs) / len(trajs), "wall_s": wall,
            "env_s": clock["env_s"], "model_s": model_s, "env_share": clock["env_s"] / wall,
            "browser_actions_per_s": browser_rate, "model_actions_per_s_per_core": model_rate,
            "browsers_per_core": model_rate / browser_rate, "generated_tokens": counters.get("generated_tokens", 0),
            "prompt_tokens": counters.get("prompt_tokens", 0)}


def pipeline_share(workdir: Path) -> dict:
    """Wall time of every finished job by rule, from Snakemake's metadata: the web rules' share."""
    by_rule: dict[str, float] = defaultdict(float)
    seen = set()
    for f in (workdir / ".snakemake" / "metadata").iterdir():
        meta = json.loads(f.read_text())
        key = (meta.get("rule"), meta.get("starttime"), meta.get("endtime"))
        if not meta.get("starttime") or not meta.get("endtime") or key in seen:
            continue  # a job with several outputs has one record per output
        seen.add(key)
        by_rule[meta["rule"]] += meta["endtime"] - meta["starttime"]
    web = sum(v for r, v in by_rule.items() if r in WEB_RULES)
    total = sum(by_rule.values())
    return {"workdir": str(workdir), "job_s": total, "web_job_s": web, "web_share": web / total if total else None,
            "by_rule_s": dict(sorted(by_rule.items(), key=lambda kv: -kv[1]))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks-per-template", type=int, default=2)
    p.add_argument("--browsers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--in-flight", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument("--model", default=None, help="a web model directory: the model-vs-browser measurement")
    p.add_argument("--config", default=str(ROOT / "config/tiny.yaml"), help="the web settings of the model run")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the model run")
    p.add_argument("--workdir", default=None, help="a pipeline directory whose finished jobs to sum")
    p.add_argument("--out", default=None)
    args = p.parse_args()

    out: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "load_average": os.getloadavg()}}
    from esopt.envs.web.deps import versions

    out["versions"] = versions()
    tasks = sample_tasks(args.tasks_per_template)
    print(f"{len(tasks)} tasks ({args.tasks_per_template} per template), expert episodes")
    rows = []
    for b in args.browsers:
        for k in args.in_flight:
            r = expert_run(tasks, b, k)
            rows.append(r)
    base = rows[0]["episodes_per_s"]
    print(f"{'browsers':>8} {'in flight':>9} {'episodes/s':>10} {'actions/s':>9} {'per browser':>11} {'x (1, 1)':>8}")
    for r in rows:
        print(f"{r['browsers']:>8} {r['in_flight']:>9} {r['episodes_per_s']:>10.2f} {r['actions_per_s']:>9.2f} "
              f"{r['episodes_per_s_per_browser']:>11.2f} {r['episodes_per_s'] / base:>8.2f}")
    out["expert"] = rows
    if args.model:
        m = model_run(args.model, args.config, tasks, max(args.in_flight), args.threads)
        out["model_run"] = m
        print(f"\nmodel rollout ({m['episodes']} episodes, {m['actions']} actions, {m['in_flight']} in flight, "
              f"{m['threads']} thread): wall {m['wall_s']:.1f} s, environment {m['env_s']:.1f} s "
              f"({100 * m['env_share']:.0f}%), model {m['model_s']:.1f} s; success {m['success']:.3f}")
        print(f"one browser: {m['browser_actions_per_s']:.2f} actions/s; the model: "
              f"{m['model_actions_per_s_per_core']:.2f} actions/s per core -> {m['browsers_per_core']:.2f} "
              "browsers per core before the model is the bottleneck")
    if args.workdir:
        s = pipeline_share(Path(args.workdir))
        out["pipeline"] = s
        print(f"\npipeline jobs in {s['workdir']}: {s['job_s'] / 60:.1f} job-minutes, web "
              f"{s['web_job_s'] / 60:.1f} ({100 * (s['web_share'] or 0):.0f}%)")
        for rule, v in list(s["by_rule_s"].items())[:12]:
            print(f"  {rule:<24} {v / 60:8.1f} min")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

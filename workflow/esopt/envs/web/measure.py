"""Latency and throughput of the web benchmark: `python -m esopt.envs.web.measure [--out FILE.json]`.

Measures, on this machine: starting the local sites, launching one browser, a reset, one
step (the expert's non-final actions), one full expert episode per template, evaluation
(the final stop), pages per second for one browser (goto + observation, one context),
and steps per second for several episodes interleaved over a pool. docs/web.md quotes
its output with the command and the machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time


def _stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"n": len(xs), "mean_s": round(statistics.fmean(xs), 4), "median_s": round(statistics.median(xs), 4),
            "p90_s": round(xs[int(0.9 * (len(xs) - 1))], 4), "max_s": round(xs[-1], 4)}


def measure(seed: int = 0, page_seconds: float = 10.0, concurrent: int = 4, browsers: int = 2) -> dict:
    from esopt.envs.web.browser import BrowserPool
    from esopt.envs.web.env import WebEnv, WebRuntime
    from esopt.envs.web.expert import ScriptedExpert
    from esopt.envs.web.sites.server import LocalSites
    from esopt.envs.web.templates import TEMPLATES, generate_tasks

    out: dict = {"machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version(),
                             "platform": platform.platform()}}
    t = time.perf_counter()
    sites = LocalSites(seed=seed)
    out["sites_start_s"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    pool = BrowserPool(1)
    out["browser_launch_s"] = round(time.perf_counter() - t, 3)
    pool.close()
    rt = WebRuntime(sites, browsers=browsers)
    try:
        env = WebEnv(rt)
        resets, steps, stops, episodes = [], [], [], {}
        for tid in sorted(TEMPLATES):
            task = generate_tasks(seed, "train", 1, templates=[tid])[0]
            t0 = time.perf_counter()
            obs = env.reset(task)
            resets.append(time.perf_counter() - t0)
            expert = ScriptedExpert.for_task(task, env.site_urls)
            done = False
            while not done:
                action = expert.act(obs)
                t = time.perf_counter()
                obs, reward, done, info = env.step(action)
                (stops if done else steps).append(time.perf_counter() - t)
            if reward != 1.0:
                raise RuntimeError(f"the expert failed template {tid}: {info}")
            episodes[TEMPLATES[tid][0]] = round(time.perf_counter() - t0, 3)
        out["reset"] = _stats(resets)
        out["step"] = _stats(steps)
        out["stop_and_evaluate"] = _stats(stops)
        out["expert_episode"] = {**_stats(list(episodes.values())), "per_template_s": episodes}

        # pages per second, one browser: goto + observation over the sites' pages
        task = generate_tasks(seed, "train", 1, templates=[101])[0]
        env.reset(task)
        u = env.site_urls
        pages = [u["shopping"] + "/", u["shopping"] + "/category/kitchen", u["shopping"] + "/search?q=lamp",
                 u["reddit"] + "/", u["reddit"] + "/f/books", u["gitlab"] + "/", u["gitlab"] + "/search?q=add"]
        n, t = 0, time.perf_counter()
        while time.perf_counter() - t < page_seconds:
            env._page.goto(pages[n % len(pages)])
            env._observe("(measure)")
            n += 1
        out["pages_per_second_one_browser"] = round(n / (time.perf_counter() - t), 2)
        env.close()

        # several episodes interleaved, as a rollout steps them
        tasks = generate_tasks(seed, "train", concurrent, templates=[105])[:concurrent]
        envs = [WebEnv(rt) for _ in tasks]
        t = time.perf_counter()
        obs = [e.reset(task) for e, task in zip(envs, tasks)]
        experts = [ScriptedExpert.for_task(task, e.site_urls) for e, task in zip(envs, tasks)]
        done, n_steps = [False] * len(envs), 0
        while not all(done):
            for i, e in enumerate(envs):
                if not done[i]:
                    obs[i], _, done[i], _ = e.step(experts[i].act(obs[i]))
                    n_steps += 1
        wall = time.perf_counter() - t
        out["interleaved"] = {"episodes": len(envs), "browsers": browsers, "steps": n_steps, "wall_s": round(wall, 3),
                              "steps_per_second": round(n_steps / wall, 2)}
    finally:
        rt.close()
        sites.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--page-seconds", type=float, default=10.0, help="how long to load pages for pages/s")
    ap.add_argument("--concurrent", type=int, default=4, help="episodes interleaved for steps/s")
    ap.add_argument("--browsers", type=int, default=2, help="browsers in the pool")
    ap.add_argument("--out", help="write the numbers to this JSON file too")
    args = ap.parse_args(argv)
    res = measure(args.seed, args.page_seconds, args.concurrent, args.browsers)
    text = json.dumps(res, indent=1)
    print(text)
    if args.out:
        from esopt.io import write_json_atomic

        write_json_atomic(args.out, res)


if __name__ == "__main__":
    main()

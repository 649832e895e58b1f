"""WebArena-Lite as a registered benchmark (esopt.envs.benchmarks): its task sets, its
instructions in the config's prompt style and its summary by site. Its expert plays in
the browser (esopt.envs.web.expert, esopt.models.demonstrations.web)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esopt.envs.benchmarks import Benchmark, Config
from esopt.envs.web.env import WebEnv
from esopt.envs.web.prompts import instructions
from esopt.envs.web.tasks import WebTask


def site_seed(cfg: Config) -> int:
    """web.site_seed: the seed of the local sites' data, which the generated tasks are made from."""
    return (cfg.get("web") or {}).get("site_seed", 0)


def load_set(name: str, spec: Mapping[str, Any], out: Path, cfg: Config) -> list[WebTask]:
    """source generated (the templates over the local sites of web.site_seed, `per_template`
    at most of each) or webarena_lite / webarena_train (the real suite from `path`)."""
    src, n = spec["source"], spec.get("n")
    if src == "generated":
        from esopt.envs.web.templates import generate_tasks

        tasks = generate_tasks(site_seed(cfg), split="train" if name == "train" else "eval",
                               per_template=spec.get("per_template"))
        return tasks[:n]
    if src in ("webarena_lite", "webarena_train"):
        from esopt.envs.web.webarena import load_suite

        return load_suite(spec.get("path"), subset=src.removeprefix("webarena_"))[:n]
    raise ValueError(f"web set {name!r}: source {src!r} is not one this benchmark knows "
                     "(generated, webarena_lite, webarena_train)")


def web_instructions(cfg: Config | None) -> str:
    """The instructions in web.prompt_style for web.observation."""
    w = (cfg or {}).get("web") or {}
    return instructions(w.get("prompt_style", "full"), w.get("observation", "axtree"))


def by_site(tasks: Sequence[WebTask], trajs: Sequence[Any]) -> dict[str, Any]:
    """{"by_site": {site: {episodes, success}}} over the episodes of tasks on that site (a task
    on several sites counts for each; "all" = every episode)."""
    sites = {t.id: (t.sites or ["(none)"]) for t in tasks}
    groups: dict[str, list[bool]] = {}
    for tr in trajs:
        ok = bool(tr.info.get("success"))
        for s in [*sites.get(tr.task_id, ["(none)"]), "all"]:
            groups.setdefault(s, []).append(ok)
    return {"by_site": {s: {"episodes": len(v), "success": statistics.fmean(v)} for s, v in sorted(groups.items())}}


BENCHMARK = Benchmark(
    name="web", block="web", task_class=WebTask, env_class=WebEnv, instructions=web_instructions,
    load_set=load_set, data_seed=lambda cfg, spec: site_seed(cfg),
    metric="success: 1 when WebArena's evaluators pass the episode, else 0", summary=by_site)

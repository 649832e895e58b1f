"""Expert web demonstrations: the scripted expert's episodes of the training tasks, played in
the real browser on the real sites (the tiny web model's warm start, esopt.models.sft).

Each turn of an expert episode becomes one transcript: the prompt the agent would see
(esopt.agent.rollout.build_messages, so the warm start matches the rollouts) and the
expert's action. With `mistake_prob`, an action is preceded by a wrong one (an id the
page does not have, or an unreadable reply) and the feedback it gets, so the model has
seen the recovery (only where the rest of the plan still fits the turn budget). Episodes
the expert does not finish with success (a plan longer than max_turns) are dropped.

With `name_swaps` K, every kept episode is also given K times with the names of its task
(the template's values: a product, a post title, a project, ...) replaced everywhere in
its prompts and actions by names recombined word by word from a `NamePool`: the page and
the objective then agree on a name no site has, so a model can only get the action right
by copying it, not by recalling one of the few names it saw (`swap_names`).
"""

from __future__ import annotations

import logging
import random
import re
import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tqdm.auto import tqdm

from esopt.agent.rollout import Trajectory, Turn, build_messages
from esopt.envs.benchmarks import module
from esopt.seeding import derive_seed

log = logging.getLogger(__name__)


def wrong_action(rng: random.Random) -> str:
    """A reply the environment refuses with an explanation: a missing id, or no action at all."""
    return rng.choice([f"click [{rng.randint(900, 999)}]", "click", "type [7]", "I will look at the page."])


class NamePool:
    """Words of the templates' values by key (e.g. every product name of some tasks), from
    which `draw` recombines a new value of the same key and word count."""

    def __init__(self, tasks: Sequence[Any]):
        self.words: dict[tuple[str, int], list[list[str]]] = defaultdict(list)
        for task in tasks:
            for key, value in names_of(task).items():
                self.words[(key, len(value.split()))].append(value.split())

    def draw(self, key: str, value: str, rng: random.Random) -> str | None:
        pool = self.words.get((key, len(value.split())))
        if not pool:
            return None
        return " ".join(rng.choice(pool)[i] for i in range(len(value.split())))


# Values that name the sites' structure (a forum, a category, which list): another one
# is already on the page, and the plan's clicks depend on which it is.
STRUCTURAL_KEYS = frozenset({"kind", "list", "forum", "category"})


def names_of(task: Any) -> dict[str, str]:
    """The template's free-text values that the intent names: products, titles, people,
    projects, search terms, comments (not numbers, prices or STRUCTURAL_KEYS)."""
    values = task.config.get("instantiation_dict") or {}
    return {k: v for k, v in values.items() if k not in STRUCTURAL_KEYS
            and isinstance(v, str) and re.search(r"[A-Za-z]", v) and v in task.intent}


def swap_names(transcript: list[dict[str, str]], mapping: Mapping[str, str]) -> list[dict[str, str]]:
    """The transcript with every name of `mapping` (and its URL-encoded forms) replaced, the
    longest first, in every message but the system prompt."""
    forms = {}
    for old, new in mapping.items():
        forms |= {old: new, urllib.parse.quote_plus(old): urllib.parse.quote_plus(new),
                  urllib.parse.quote(old): urllib.parse.quote(new)}
    pattern = re.compile("|".join(re.escape(k) for k in sorted(forms, key=len, reverse=True)))
    return [m if m["role"] == "system" else {**m, "content": pattern.sub(lambda x: forms[x.group(0)], m["content"])}
            for m in transcript]


def draw_mapping(task: Any, names: Mapping[str, str], pool: NamePool, rng: random.Random, text: str = "",
                 tries: int = 8) -> dict[str, str]:
    """New names for the task's, none of them already in `text` (the episode's pages), such
    that the swapped intent is a training intent too: a held-out intent is never
    demonstrated, even with another site's answer."""
    split_of = module("web").split_of
    for _ in range(tries):
        mapping = {old: pool.draw(key, old, rng) for key, old in names.items()}
        mapping = {old: new for old, new in mapping.items() if new and new != old and new not in text}
        if mapping and split_of(swap_names([{"role": "user", "content": task.intent}], mapping)[0]["content"]) == "train":
            return mapping
    return {}


def name_pool(cfg: Mapping[str, Any], site_seeds: Sequence[int] = range(8)) -> NamePool:
    """The names of the templates' training tasks on the local sites seeded 0-7."""
    if (cfg.get("web") or {}).get("sites", "local") != "local":
        raise ValueError("web.model.warmstart.name_swaps needs web.sites: local (it draws names from the local sites)")
    return NamePool([t for s in site_seeds for t in module("web").generate_tasks(seed=s, split="train")])


def demonstration_sets(cfg: Mapping[str, Any], tasks: list) -> list[tuple[int, list, int]]:
    """(site seed, training tasks, demonstration seed) for each copy of the sites the expert
    plays: the job's training tasks on web.site_seed, and with warmstart.site_seeds the same
    templates' training tasks on differently seeded sites (other product names, prices, posts
    and issues), so that a model can only solve them by reading the objective and the page,
    not by recalling one site's content. A template's split depends on the intent alone,
    so no held-out intent is demonstrated on any seed."""
    w = cfg["web"]
    ws = w["model"]["warmstart"]
    main_seed, demo_seed = w.get("site_seed", 0), ws.get("seed", 0)
    sets = [(main_seed, tasks, demo_seed)]
    for s in ws.get("site_seeds") or []:
        if s == main_seed:
            continue
        if w.get("sites", "local") != "local":
            raise ValueError("web.model.warmstart.site_seeds needs web.sites: local (it reseeds the local sites)")
        extra = module("web").generate_tasks(seed=s, split="train")[: ws.get("tasks") or None]
        sets.append((s, extra, derive_seed("web-demos-site-seed", demo_seed, s)))
    return sets


def demonstrations(tasks: Sequence[Any], make_env: Callable[[], Any], system: str, mistake_prob: float, seed: int,
                   history_turns: int | None = 0, progress: bool = True, name_swaps: int = 0,
                   pool: NamePool | None = None) -> Iterator[list[dict[str, str]]]:
    """Chat transcripts ending in an expert action, along the expert's successful episodes,
    each episode also `name_swaps` times with its names swapped for ones drawn from `pool`."""
    web = module("web")
    ExpertError, ScriptedExpert = web.ExpertError, web.ScriptedExpert
    if name_swaps and pool is None:
        raise ValueError("name_swaps needs a NamePool to draw names from")
    rng = random.Random(derive_seed("web-demos", seed))
    kept = 0
    for task in tqdm(tasks, desc="web demonstrations", disable=not progress):
        env = make_env()
        try:
            obs = env.reset(task)
            traj = Trajectory(task.id, system, obs)
            expert = ScriptedExpert.for_task(task, env.site_urls)
            transcripts, info, done = [], {}, False
            while not done and not expert.done:
                left = env.max_turns - len(traj.turns) - (len(expert.plan) - expert.k)
                if left > 0 and rng.random() < mistake_prob:  # only where the plan still fits the turn budget
                    bad = wrong_action(rng)
                    obs, _, done, info = env.step(bad)
                    traj.turns.append(Turn(bad, obs, 0.0))
                    if done:
                        break
                action = expert.act(obs)
                transcripts.append(build_messages(traj, history_turns) + [{"role": "assistant", "content": action}])
                obs, _, done, info = env.step(action)
                traj.turns.append(Turn(action, obs, 0.0))
        except ExpertError as e:
            log.warning("task %s: the expert's plan does not fit the page (%s); dropped", task.id, str(e).splitlines()[0])
            continue
        finally:
            env.close()
        if not info.get("success"):
            log.warning("task %s: the expert's episode failed (%s); dropped", task.id, info.get("error") or info.get("eval"))
            continue
        kept += 1
        yield from transcripts
        names = names_of(task)
        pages = "\n".join(m["content"] for t in transcripts for m in t) if name_swaps and names else ""
        for _ in range(name_swaps if names else 0):
            mapping = draw_mapping(task, names, pool, rng, pages)
            if mapping:
                yield from (swap_names(t, mapping) for t in transcripts)
    log.info("web: %d of %d expert episodes kept", kept, len(tasks))

"""Does a tiny base land where its config block says it should, on this machine?

A tiny warm start is chaotic: another CPU's float rounding, like another seed, can
send it to another basin (docs/tiny_recipe.md). Each tiny model's config block states
the quality to expect of it on any machine (`expect`, intervals from several warm-start
seeds: docs/tiny_recipe.md); these checks compare the pipeline's own measurement of the
base against it, so a user whose base fell outside learns it before reading any figure
built on that base.

What is measured depends on what the model is the base of (`MEASURES`):

- sudoku (`model`, population_study.models): held-out success of `esopt evaluate`,
  by H* (results/eval/MODEL/base/hH.json);
- tools (tool_agents.model): Mean@k of `esopt evaluate --benchmark B` with no skill, by
  evaluation set BENCHMARK/SET (results/eval/MODEL/tools/no_skill/B_SET.json);
- web (web.model): success of `esopt evaluate --benchmark web` with no skill, by
  evaluation set web/SET (results/eval/MODEL/web/no_skill/SET.json);
- ahd (ahd.model): the valid rate of the base writer's samples in the Sample searches
  without ES (the fraction of its heuristics that pass the sandbox and the task's
  checks), by task, averaged over the repetitions
  (results/ahd/MODEL/TASK/sample_bB_base/rR/result.json).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

BANNER = "!" * 78


@dataclass(frozen=True)
class Measure:
    """What a summary of one kind of base says, and which `expect` key it belongs to."""

    metric: str  # the summary field compared with the interval
    label: str  # the key's name in the rows (horizon, set, task)
    where: Callable[[dict[str, Any]], Any]  # a summary -> its key
    count: Callable[[dict[str, Any]], int | None]  # episodes or samples behind the value
    shown: str  # how a message names the key
    of_base: Callable[[dict[str, Any]], bool] = lambda s: True  # is the summary one of the base?


MEASURES: dict[str, Measure] = {
    "sudoku": Measure("success", "horizon", lambda s: s["horizon"], lambda s: s.get("episodes"), "H* {}"),
    "tools": Measure("mean_at_k", "set", lambda s: f"{s['benchmark']}/{s['meta']['dataset']}",
                     lambda s: s["k"] * s["tasks"] if "k" in s and "tasks" in s else None, "set {}",
                     lambda s: s["meta"].get("method") == "no_skill" and not s.get("skill")),
    "ahd": Measure("valid_rate", "task", lambda s: s["task"], lambda s: s.get("samples"), "task {}",
                   lambda s: s.get("search") == "sample" and not s.get("es")),
}
MEASURES["web"] = MEASURES["tools"]  # the same agent evaluation summaries, keyed web/SET


def check_rows(summaries: Iterable[dict[str, Any]], expect: dict[Any, list[float]], model: str,
               kind: str = "sudoku") -> list[dict[str, Any]]:
    """One row per `expect` key that has summaries: the mean of their metric (one summary
    per key, except the writer's repetitions) against the key's interval."""
    m = MEASURES[kind]
    want = {str(k): v for k, v in (expect or {}).items()}
    groups: dict[str, list[dict[str, Any]]] = {}
    for s in summaries:
        if str(m.where(s)) in want:
            groups.setdefault(str(m.where(s)), []).append(s)
    rows = []
    for key, group in groups.items():
        lo, hi = want[key]
        value = statistics.fmean(float(s[m.metric]) for s in group)
        counts = [m.count(s) for s in group]
        rows.append({"model": model, m.label: m.where(group[0]), "where": m.shown.format(key), "metric": m.metric,
                     "value": value, "expected": [lo, hi], "summaries": len(group),
                     "episodes": None if None in counts else sum(counts), "within": lo <= value <= hi})
    return rows


def check_model(kind: str, spec: dict[str, Any], summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The check of one base (a model block of `kind`) on the pipeline's summaries of it."""
    expect = spec.get("expect") or {}
    not_base = [s for s in summaries if not MEASURES[kind].of_base(s)]
    if not_base:  # a trained model's or ES run's result would check the wrong thing
        raise ValueError(f"model {spec['name']}: {len(not_base)} of the summaries are not of the base "
                         f"({'no skill' if kind == 'tools' else 'Sample without ES'})")
    rows = check_rows(summaries, expect, spec["name"], kind)
    missing = sorted(set(map(str, expect)) - {str(r[MEASURES[kind].label]) for r in rows})
    if missing:
        raise ValueError(f"model {spec['name']}: expect has {MEASURES[kind].shown.format(missing)} "
                         "but no summary of them was given")
    return {"model": spec["name"], "kind": kind, "metric": MEASURES[kind].metric,
            "all_within": all(r["within"] for r in rows), "rows": rows}


def outside_message(row: dict[str, Any], source: str) -> str:
    """The banner for a row outside its interval (the check's log and the end of the run)."""
    return (f"\n{BANNER}\nWARNING: base model {row['model']} scored {row['metric']} {row['value']:.3f} at {row['where']}, "
            f"outside the expected [{row['expected'][0]:.3f}, {row['expected'][1]:.3f}] ({source}).\n"
            "Results built on this base are not comparable with the documented ones: see docs/tiny_recipe.md\n"
            f"(Is the base reproducible?) before reading them.\n{BANNER}")


def warn_outside(rows: list[dict[str, Any]], source: str) -> bool:
    """Log every row outside its interval in a banner; True when all are within."""
    bad = [r for r in rows if not r["within"]]
    for r in bad:
        log.warning("%s", outside_message(r, source))
    return not bad

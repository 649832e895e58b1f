"""Does a tiny base land where README says it should, on this machine?

A tiny warm start is chaotic: another CPU's float rounding, like another seed, can
send it to another basin (docs/tiny_recipe.md). Each tiny model's config block states
the held-out quality to expect on any machine (`expect`, the interval README gives,
from several warm-start seeds); these checks compare the pipeline's own evaluation of
the base against it, so a user whose base fell outside learns it before reading any
figure built on that base.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

log = logging.getLogger(__name__)

BANNER = "!" * 78


def check_rows(summaries: Iterable[dict[str, Any]], expect: dict[Any, list[float]], model: str,
               metric: str = "success", key: str = "horizon") -> list[dict[str, Any]]:
    """One row per summary whose `key` (H*, benchmark, ...) has an expected interval."""
    want = {str(k): v for k, v in (expect or {}).items()}
    rows = []
    for s in summaries:
        where = str(s[key])
        if where not in want:
            continue
        lo, hi = want[where]
        value = float(s[metric])
        rows.append({"model": model, key: s[key], "metric": metric, "value": value, "expected": [lo, hi],
                     "episodes": s.get("episodes"), "within": lo <= value <= hi})
    return rows


def warn_outside(rows: list[dict[str, Any]], source: str) -> bool:
    """Log every row outside its interval in a banner; True when all are within."""
    bad = [r for r in rows if not r["within"]]
    for r in bad:
        where = ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("model", "metric", "value", "expected", "episodes", "within"))
        log.warning("\n%s\n%s: base model %s scored %s %.3f at %s, outside the expected [%.3f, %.3f] (%s).\n"
                    "Results built on this base are not comparable with README's: see docs/tiny_recipe.md\n"
                    "(Is the base reproducible?) before reading them.\n%s",
                    BANNER, "WARNING", r["model"], r["metric"], r["value"], where, *r["expected"], source, BANNER)
    return not bad

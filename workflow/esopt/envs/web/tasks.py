"""Web tasks in WebArena's JSON format, and the loader for task files.

A task is WebArena's config dict, kept as it is:

    {"task_id": 3, "sites": ["shopping"], "start_url": "__SHOPPING__", "require_login": true,
     "intent": "What is the price of the Rustic Kettle?", "intent_template": "What is the price of the {{product}}?",
     "intent_template_id": 101, "instantiation_dict": {"product": "Rustic Kettle"},
     "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["17.99"]},
              "reference_url": "", "program_html": [], "string_note": "", "url_note": "GOLD in PRED"}}

`start_url`, `reference_url` and program_html urls may hold site placeholders
(__SHOPPING__, __SHOPPING_ADMIN__, __REDDIT__, __GITLAB__, ... : `placeholder(site)`),
replaced by the episode's site URLs when it starts (`resolve`). Generated tasks add
"expert" (the scripted expert's plan, esopt.envs.web.expert) and "split".

A `start_url` may join several URLs with " |AND| " (`start_urls`): the episode opens one tab
each. `storage_state` names WebArena's cookie file, "./.auth/<site>[.<site>]_state.json", whose
name says which sites it signs in to (`storage_state_sites`).

`load_tasks` reads WebArena task files: one task per file (WebArena's config_files/N.json),
a list of tasks in one file (test.raw.json), a folder of .json files, or dicts; with
`site_urls` ({"shopping": "http://host:7770", ...}) the placeholders are filled in at load.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVAL_TYPES = ("string_match", "url_match", "program_html")
ANSWER_KINDS = ("exact_match", "must_include", "must_exclude", "one_of", "fuzzy_match")
_PLACEHOLDER_RE = re.compile(r"__([A-Z][A-Z0-9_]*?)__")


class TaskFormatError(ValueError):
    """A task dict that is not in WebArena's format; the message names the task and the field."""


START_URL_SEPARATOR = " |AND| "  # WebArena: several start URLs, one tab each (VAB new/envs.py:195)


def start_urls(start_url: str) -> list[str]:
    """The URLs of a task's `start_url`, in order: one tab each (WebArena splits on " |AND| ")."""
    return [u.strip() for u in str(start_url).split(START_URL_SEPARATOR) if u.strip()]


def storage_state_sites(storage_state: str) -> list[str]:
    """The sites a WebArena storage_state file signs in to, read from its name as WebArena's
    auto_login.get_site_comb_from_filepath does: "./.auth/gitlab.reddit_state.json" ->
    ["gitlab", "reddit"], "./.auth/shopping_admin_state.json" -> ["shopping_admin"]."""
    name = os.path.basename(str(storage_state))
    return [s for s in name.rsplit("_", 1)[0].split(".") if s]


def placeholder(site: str) -> str:
    return f"__{site.upper()}__"


def resolve_urls(value: Any, urls: Mapping[str, str]) -> Any:
    """`value` (a str, list or dict, recursively) with every __SITE__ placeholder whose site
    is in `urls` replaced by that URL (without a trailing slash)."""
    if isinstance(value, str):
        return _PLACEHOLDER_RE.sub(lambda m: urls[m.group(1).lower()].rstrip("/") if m.group(1).lower() in urls
                                   else m.group(0), value)
    if isinstance(value, list):
        return [resolve_urls(v, urls) for v in value]
    if isinstance(value, dict):
        return {k: resolve_urls(v, urls) for k, v in value.items()}
    return value


def unresolved(value: Any) -> list[str]:
    """Placeholders left in `value` (e.g. a site no URL was given for)."""
    text = json.dumps(value)
    return sorted(set(_PLACEHOLDER_RE.findall(text)))


def validate(config: Mapping[str, Any]) -> None:
    """Raise TaskFormatError unless `config` has WebArena's task fields with known evaluator kinds."""
    tid = config.get("task_id", "?")
    for key in ("task_id", "intent", "start_url", "eval"):
        if key not in config:
            raise TaskFormatError(f"task {tid}: missing field {key!r}")
    ev = config["eval"]
    if not isinstance(ev, Mapping) or not isinstance(ev.get("eval_types"), list) or not ev["eval_types"]:
        raise TaskFormatError(f"task {tid}: eval.eval_types must be a non-empty list")
    for kind in ev["eval_types"]:
        if kind not in EVAL_TYPES:
            raise TaskFormatError(f"task {tid}: eval type {kind!r}: expected one of {EVAL_TYPES}")
    if "string_match" in ev["eval_types"]:
        ref = ev.get("reference_answers")
        if not isinstance(ref, Mapping) or not ref:
            raise TaskFormatError(f"task {tid}: string_match needs eval.reference_answers")
        for k in ref:
            if k not in ANSWER_KINDS:
                raise TaskFormatError(f"task {tid}: reference_answers.{k}: expected one of {ANSWER_KINDS}")
    if "url_match" in ev["eval_types"] and not ev.get("reference_url"):
        raise TaskFormatError(f"task {tid}: url_match needs eval.reference_url")
    if "program_html" in ev["eval_types"]:
        targets = ev.get("program_html")
        if not isinstance(targets, list) or not targets:
            raise TaskFormatError(f"task {tid}: program_html needs a non-empty eval.program_html list")
        for t in targets:
            if not isinstance(t, Mapping) or "url" not in t or "locator" not in t or "required_contents" not in t:
                raise TaskFormatError(f"task {tid}: every program_html entry needs url, locator, required_contents")


@dataclass(frozen=True, eq=False)
class WebTask:
    """One task: WebArena's config dict (`config`), placeholders not yet filled in."""

    config: dict

    def __post_init__(self) -> None:
        validate(self.config)

    @property
    def id(self) -> str:
        return str(self.config["task_id"])

    @property
    def intent(self) -> str:
        return self.config["intent"]

    @property
    def sites(self) -> list[str]:
        return list(self.config.get("sites", []))

    @property
    def require_login(self) -> bool:
        return bool(self.config.get("require_login", False))

    @property
    def storage_state(self) -> str | None:
        """WebArena's storage_state file name (None: the task names none)."""
        state = self.config.get("storage_state")
        return state if isinstance(state, str) and state else None

    @property
    def template_id(self) -> int | None:
        return self.config.get("intent_template_id")

    @property
    def eval_types(self) -> list[str]:
        return list(self.config["eval"]["eval_types"])

    @property
    def expert(self) -> list[dict] | None:
        return self.config.get("expert")

    def resolve(self, urls: Mapping[str, str]) -> dict:
        """A copy of the config with the site placeholders filled in from `urls`."""
        return resolve_urls(copy.deepcopy(self.config), urls)

    def to_json(self) -> str:
        return json.dumps(self.config, sort_keys=False)


def _configs(source: Any) -> Iterable[dict]:
    if isinstance(source, Mapping):
        yield dict(source)
        return
    if isinstance(source, (str, os.PathLike)):
        p = Path(source).expanduser()
        if p.is_dir():
            files = sorted(p.glob("*.json"), key=lambda f: (not f.stem.isdigit(), int(f.stem) if f.stem.isdigit() else 0, f.name))
            if not files:
                raise FileNotFoundError(f"no .json task files in {p}")
            for f in files:
                yield from _configs(f)
            return
        if not p.is_file():
            raise FileNotFoundError(f"no such task file or folder: {p}")
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise TaskFormatError(f"{p}: not JSON ({e})") from e
        if isinstance(data, list):
            for i, d in enumerate(data):
                if not isinstance(d, dict):
                    raise TaskFormatError(f"{p}: entry {i} is not a task object")
                yield d
        elif isinstance(data, dict):
            yield data
        else:
            raise TaskFormatError(f"{p}: expected a task object or a list of them")
        return
    for item in source:  # an iterable of paths or dicts
        yield from _configs(item)


def load_tasks(source: Any, site_urls: Mapping[str, str] | None = None) -> list[WebTask]:
    """WebTasks from WebArena task files (see the module docstring). With `site_urls`, the
    placeholders of those sites are filled in now (the real sites' fixed URLs); the rest
    are filled in per episode from the episode's sites."""
    tasks, seen = [], set()
    for cfg in _configs(source):
        if site_urls:
            cfg = resolve_urls(cfg, site_urls)
        task = WebTask(cfg)
        if task.id in seen:
            raise TaskFormatError(f"task id {task.id} appears twice")
        seen.add(task.id)
        tasks.append(task)
    return tasks


def write_tasks(path: str | os.PathLike, tasks: Iterable[WebTask]) -> None:
    """All tasks in one JSON list file (WebArena's test.raw.json layout), atomically."""
    from esopt.io import write_json_atomic

    write_json_atomic(path, [t.config for t in tasks])

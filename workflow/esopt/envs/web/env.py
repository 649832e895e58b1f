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
stop [answer] or after `max_turns` actions (then it is evaluated with an empty answer,
as WebArena does); the reward is the task's evaluator score (0 or 1), info["success"]
is score == 1 with no evaluation error. Set max_turns no higher than the rollout's, so
the environment, not the rollout, ends every episode.

Failures: a browser that crashes or hangs is restarted, and the episode is replayed on
fresh site state (same URLs) up to the point it had reached, then goes on; after
`crash_retries` restarts it ends, failed, with info["failure"] = "browser" and the
reason in info["error"]; an episode that cannot start (the sites refuse the login) ends
with failure "sites" at its first step. A judge or evaluation error ends it with failure "evaluation"
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
import re
import urllib.parse
import weakref
from collections.abc import Mapping
from typing import Any

from esopt.envs.web.actions import Action, ActionError, parse_action
from esopt.envs.web.browser import BrowserCrash, BrowserPool
from esopt.envs.web.evaluators import SEMANTICS_FIELD, EvalResult, Judge, evaluate, make_judge
from esopt.envs.web.observe import HTML_JS, MODES, aria_selector, format_aria, html_locator_selector
from esopt.envs.web.prompts import format_observation, instructions
from esopt.envs.web.sites.server import Episode, FixedSites, LocalSites
from esopt.envs.web.tasks import WebTask, unresolved

log = logging.getLogger(__name__)

DEFAULT_MAX_TURNS = 15
DEFAULT_MAX_OBS_CHARS = 4000
SCROLL_PX = 600


class WebRuntime:
    """The sites and browsers that many WebEnvs share. `sites`: "local" (LocalSites with `seed`),
    or a LocalSites/FixedSites; a mapping {site: url} makes FixedSites."""

    def __init__(self, sites: Any = "local", seed: int = 0, browsers: int = 1, headless: bool = True,
                 block_external: bool | None = None, hang_s: float = 30.0, action_timeout_s: float = 5.0,
                 navigation_timeout_s: float = 15.0):
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
        ctx.set_default_timeout(self.action_timeout_ms)
        ctx.set_default_navigation_timeout(self.navigation_timeout_ms)
        self._contexts.append((weakref.ref(owner), slot, gen, ctx))
        return slot, gen, ctx

    def release(self, slot, gen: int, ctx) -> None:
        self._contexts = [c for c in self._contexts if c[3] is not ctx]
        self.pool.release(slot, gen, ctx)

    def sweep(self) -> None:
        """Close the contexts of environments that were dropped without close()."""
        for ref, slot, gen, ctx in [c for c in self._contexts if c[0]() is None]:
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
                 prompt_style: str = "full", restate_objective: bool = False):
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        if observation not in MODES:
            raise ValueError(f"observation must be one of {MODES}, got {observation!r}")
        if not isinstance(max_obs_chars, int) or max_obs_chars < 200:
            raise ValueError(f"max_obs_chars must be an int >= 200, got {max_obs_chars!r}")
        instructions(prompt_style)
        self.runtime, self.max_turns, self.observation = runtime, max_turns, observation
        self.max_obs_chars, self.crash_retries, self.prompt_style = max_obs_chars, int(crash_retries), prompt_style
        self.restate_objective = bool(restate_objective)
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
        return dict(self._episode.urls) if self._episode else {}

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
        return instructions(self.prompt_style)

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
        self._history: list[Action] = []
        self._done = False
        self._pending_final = None
        self._last_url = self._config["start_url"]
        try:
            self._open_browser()
            obs = self._observe("(start)")
        except (BrowserCrash, _playwright_error()) as e:
            obs = self._recover(e, None)
        except RuntimeError as e:  # the sites refused the login, or their server is gone
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
        parsed = parse_action(action if isinstance(action, str) else str(action))
        if isinstance(parsed, ActionError):
            self._invalid += 1
            return self._after(self._observe_safe(f"invalid action: {parsed.message}"))
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

    def close(self) -> None:
        self._release()
        self._done = True

    # --- episode plumbing ------------------------------------------------------------

    def _open_browser(self) -> None:
        storage = self._config.get("storage_state")
        storage = storage if isinstance(storage, str) and storage else None
        self._slot, self._gen, self._ctx = self.runtime.new_context(self, storage)
        with self.runtime.pool.guard(self._slot):
            if self._task.require_login and storage is None:
                for site in self._task.sites:
                    self.runtime.sites.login(self._ctx, site, self._episode)
            self._page = self._ctx.new_page()
            self._page.goto(self._config["start_url"])

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
        return self._page.locator(html_locator_selector(element))

    def _goto_allowed(self, url: str) -> str | None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https"):
            return f"goto [{url[:80]}]: only http:// and https:// addresses can be opened"
        hosts = {urllib.parse.urlparse(u).netloc for u in self._episode.urls.values()}
        if parsed.netloc not in hosts:
            return f"goto [{url[:80]}]: only the task's sites can be opened: " + ", ".join(sorted(set(self._episode.urls.values())))
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
            refused = self._goto_allowed(a.text)
            if refused:
                self._failed += 1
                return refused
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
                    page.goto(a.text)
                elif a.kind == "go_back":
                    page.go_back()
                elif a.kind == "go_forward":
                    page.go_forward()
                elif a.kind == "wait":
                    page.wait_for_timeout(1000)
                with contextlib.suppress(_playwright_error()):
                    page.wait_for_load_state("load")
        except BrowserCrash:
            raise
        except _playwright_error() as e:
            self._check_browser(e)
            self._failed += 1
            return f"{a.render()} failed: {_first_line(e)}"
        self._history.append(a)
        return f"{a.render()} done"

    def _observe(self, feedback: str) -> str:
        page = self._page
        with self.runtime.pool.guard(self._slot):
            try:
                if self.observation == "axtree":
                    tree, self._ids = format_aria(page.locator("body").aria_snapshot(mode="ai"))
                else:
                    tree = page.evaluate(HTML_JS)
                    self._ids = {i: i for i in re.findall(r' id="(\d+)"', tree)}
                title = page.title()
            except _playwright_error() as e:
                self._check_browser(e)
                tree, self._ids, title = f"(the page could not be read: {_first_line(e)})", {}, ""
        self._last_url = page.url
        return format_observation(intent=self._task.intent, url=page.url, feedback=feedback,
                                  turns_left=self.max_turns - self._turns, title=title, page=tree,
                                  max_chars=self.max_obs_chars, restate_objective=self.restate_objective)

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
                    fb = self._act(a)
                    if not fb.endswith(" done"):
                        raise BrowserCrash(f"replay diverged at {a.render()}: {fb}")
                if pending is not None:
                    self._observe("(replay)")  # the ids `pending` was written against
                    return self._observe(self._act(pending))
                return self._observe("(restarted after a browser failure)")
            except (BrowserCrash, _playwright_error()) as e:
                reason = _first_line(e)

    def _info(self, **extra) -> dict:
        return {"turns": self._turns, "invalid_actions": self._invalid, "failed_actions": self._failed,
                "browser_restarts": self._restarts, "url": self._last_url, "task_id": self._task.id, **extra}

    def _after(self, obs: str) -> tuple[str, float, bool, dict]:
        if self._turns >= self.max_turns:
            return self._finish("", "turns")
        return obs, 0.0, False, self._info(success=False)

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
                result = evaluate(self._config, answer, final_url, probe, self._episode.helpers, self.judge)
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

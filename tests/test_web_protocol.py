"""The episode loop against VisualAgentBench's harness, on stand-in pages in real Chromium:
timeouts that fail one page call (never the browser under its neighbours), the settle wait,
the early stops and their forced answers, tabs, and which sites a task is signed in to.
Needs the web extra and Debian's chromium (skipped without, unless ESOPT_WEB_REQUIRED)."""

import http.server
import threading
import time
import urllib.parse

import pytest

from conftest import require_web

require_web()

from esopt.envs.web import WebEnv, WebRuntime, WebTask
from esopt.envs.web.actions import Action, parse_action
from esopt.envs.web.sites.server import FixedSites
from esopt.envs.web.tasks import start_urls, storage_state_sites

SLOW_S = 6.0  # the stand-in's slow pages and logins; the runtime's timeouts are 2 s (a loaded 2-core machine)
PREFIX = {"shop": "shopping", "forum": "reddit", "code": "gitlab"}  # path prefix -> site
LOGIN_PATH = {"shopping": "/login", "reddit": "/login", "gitlab": "/users/sign_in"}  # as sites.LOGINS has them

PAGES = {
    "/": "<title>Home</title><h1>Home</h1><a href='/shop/second' target='_blank'>Open second in a new tab</a>"
         "<button onclick=\"window.open('/shop/third')\">Pop up third</button><a href='/shop/later'>Later</a>",
    "/second": "<title>Second</title><h1>Second page</h1>",
    "/third": "<title>Third</title><h1>Third page</h1>",
    "/a": "<title>Tab A</title><h1>Page A</h1>",
    "/b": "<title>Tab B</title><h1>Page B</h1>",
    "/c": "<title>Tab C</title><h1>Page C</h1>",
    "/later": "<title>Later</title><p id='s'>still loading</p>"
              "<script>setTimeout(() => document.getElementById('s').textContent = 'rendered late', 1500)</script>",
}


class StandIn(http.server.ThreadingHTTPServer):
    """Three sites under path prefixes (/shop, /forum, /code) of one server; records logins;
    `slow` holds the paths (site-relative, e.g. "/slow", "/login") that answer after SLOW_S."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.logins: list[str] = []
        self.slow: set[tuple[str, str]] = {(p, "/slow") for p in PREFIX}

    def handle_error(self, request, client_address):
        pass  # a client that gave up on a slow page (its timeout) closed the connection: expected

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def urls(self) -> dict[str, str]:
        return {site: f"{self.base}/{prefix}" for prefix, site in PREFIX.items()}


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _route(self) -> tuple[str, str]:
        path = urllib.parse.urlparse(self.path).path
        parts = path.split("/", 2)
        prefix = parts[1] if len(parts) > 1 else ""
        return prefix, "/" + (parts[2] if len(parts) > 2 else "")

    def _send(self, status: int, body: str = "", headers: dict | None = None):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        prefix, page = self._route()
        if (prefix, page) in self.server.slow:
            time.sleep(SLOW_S)
            return self._send(200, "<title>Slow</title><h1>Slow page</h1>")
        if prefix not in PREFIX or page not in PAGES:
            return self._send(404, "<title>Not found</title>")
        self._send(200, PAGES[page].replace("/shop/", f"/{prefix}/"))

    def do_POST(self):
        prefix, page = self._route()
        site = PREFIX.get(prefix)
        if site is None or LOGIN_PATH[site] != page:
            return self._send(404)
        if (prefix, "/login") in self.server.slow or (prefix, page) in self.server.slow:
            time.sleep(SLOW_S)
        self.server.logins.append(site)
        self._send(302, headers={"Location": f"/{prefix}/", "Set-Cookie": f"signed_{prefix}=1; Path=/"})


@pytest.fixture(scope="module")
def standin():
    srv = StandIn()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def runtime(standin):
    rt = WebRuntime(FixedSites(standin.urls()), browsers=1, action_timeout_s=2, navigation_timeout_s=2,
                    start_timeout_s=2, hang_s=10)
    yield rt
    rt.close()


def task(start="__SHOPPING__/", tid=1, sites=("shopping",), login=False, storage_state=None, answer="x"):
    return WebTask({"task_id": tid, "sites": list(sites), "start_url": start, "require_login": login,
                    "storage_state": storage_state, "intent": "Stand-in check",
                    "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": [answer]},
                             "reference_url": "", "program_html": []}})


def page_text(env) -> str:
    return env.page.evaluate("document.body.innerText")


# --- timeouts: a slow page fails its episode, not the browser -------------------------------------


def test_timeouts_must_stay_under_the_watchdog():
    with pytest.raises(ValueError, match=r"hang_s \(120 s\) must exceed every page timeout \(navigation_timeout_s"):
        WebRuntime({"shopping": "http://127.0.0.1:9"}, navigation_timeout_s=120, hang_s=120)
    with pytest.raises(ValueError, match="start_timeout_s must be a positive number"):
        WebRuntime({"shopping": "http://127.0.0.1:9"}, start_timeout_s=0)


def test_a_slow_start_page_fails_one_episode_and_its_neighbour_goes_on(runtime):
    neighbour = WebEnv(runtime)
    neighbour.reset(task())
    gen, restarts = runtime.pool.slots[0].generation, runtime.pool.restarts
    slow = WebEnv(runtime)
    t = time.monotonic()
    slow.reset(task("__SHOPPING__/slow", tid=2))
    assert time.monotonic() - t < SLOW_S  # the 2 s start timeout, not the page, ended it
    assert slow.browser_index == neighbour.browser_index == 0  # the same browser
    obs, reward, done, info = slow.step("click [1]")
    assert done and reward == 0.0 and info["failure"] == "sites" and info["ended_by"] == "error"
    assert "start page" in info["error"] and "/shop/slow" in info["error"] and "Timeout 2000ms" in info["error"]
    assert (runtime.pool.slots[0].generation, runtime.pool.restarts) == (gen, restarts)  # nobody was killed
    obs, _, done, info = neighbour.step(f"goto [{neighbour.site_urls['reddit']}/a]")
    assert not done and info["failed_actions"] == 0 and "Page A" in page_text(neighbour), obs
    neighbour.close()


def test_a_slow_login_fails_one_episode_and_its_neighbour_goes_on(runtime, standin):
    neighbour = WebEnv(runtime)
    neighbour.reset(task())
    restarts = runtime.pool.restarts
    standin.slow.add(("forum", "/login"))
    try:
        slow = WebEnv(runtime)
        slow.reset(task(tid=3, sites=("reddit",), login=True))
        _, _, done, info = slow.step("stop [x]")
    finally:
        standin.slow.discard(("forum", "/login"))
    assert done and info["failure"] == "sites" and "login to reddit failed" in info["error"], info
    assert runtime.pool.restarts == restarts
    _, _, done, info = neighbour.step("click [1]")
    assert not done and info["failed_actions"] == 0
    _, reward, done, info = neighbour.step("stop [x]")
    assert done and reward == 1.0
    # the same episode with the login answering in time starts
    env = WebEnv(runtime)
    env.reset(task(tid=3, sites=("reddit",), login=True))
    assert not env.done and "Home" in page_text(env)
    env.close()


def test_a_slow_page_after_the_start_fails_the_action_not_the_episode(runtime):
    env = WebEnv(runtime)
    env.reset(task())
    restarts = runtime.pool.restarts
    obs, _, done, info = env.step(f"goto [{env.site_urls['shopping']}/slow]")
    assert not done and info["failed_actions"] == 1 and "Timeout 2000ms" in obs
    assert runtime.pool.restarts == restarts
    env.close()


def test_the_start_timeout_covers_the_start_only(standin):
    with WebRuntime(FixedSites(standin.urls()), browsers=1, action_timeout_s=2, navigation_timeout_s=2,
                    start_timeout_s=SLOW_S + 4, hang_s=SLOW_S + 10) as rt:
        env = WebEnv(rt)
        env.reset(task("__SHOPPING__/slow"))
        assert not env.done and "Slow page" in page_text(env)
        _, _, done, info = env.step(f"goto [{env.site_urls['reddit']}/slow]")
        assert not done and info["failed_actions"] == 1  # actions run under the 2 s navigation timeout
        env.close()


# --- the settle wait ------------------------------------------------------------------------------


def test_settle_waits_before_the_page_is_read_at_the_start_and_after_actions(runtime):
    quick, settled = WebEnv(runtime), WebEnv(runtime, settle_s=2.0)
    quick.reset(task("__SHOPPING__/later"))
    assert "still loading" in page_text(quick)
    t = time.monotonic()
    settled.reset(task("__SHOPPING__/later"))
    assert "rendered late" in page_text(settled) and time.monotonic() - t >= 2.0
    settled.step(f"goto [{settled.site_urls['shopping']}/]")
    t = time.monotonic()
    settled.step("go_back")
    assert "rendered late" in page_text(settled) and time.monotonic() - t >= 2.0
    quick.close()
    settled.close()


# --- early stops ----------------------------------------------------------------------------------


def test_unreadable_replies_in_a_row_end_the_episode_with_the_harness_answer(runtime):
    env = WebEnv(runtime, early_stop_parse_failures=3, stop_answers="harness")
    env.reset(task(answer="Early stop"))
    for reply in ("I am thinking", "still thinking", "scroll [down]", "hmm", "hmm?"):  # a readable one resets the count
        _, _, done, _ = env.step(reply)
        assert not done
    _, reward, done, info = env.step("no action here either")
    assert done and info["ended_by"] == "parse_failures" and info["turns"] == 6
    assert info["answer"] == "Early stop: Failed to parse actions for 3 times" and reward == 1.0
    assert info["invalid_actions"] == 5


def test_identical_replies_in_a_row_end_the_episode(runtime):
    env = WebEnv(runtime, early_stop_repeats=3, stop_answers="harness")
    env.reset(task())
    for reply in ("scroll [down]", "scroll [down]", "scroll [up]", "scroll [down]", "scroll [down]"):
        _, _, done, _ = env.step(reply)
        assert not done
    _, _, done, info = env.step("scroll [down]")
    assert done and info["ended_by"] == "repeated_action" and info["answer"] == "Early stop: Same action for 3 times"
    # the reply as written counts, unreadable ones too; "empty" answers are ""
    env = WebEnv(runtime, early_stop_repeats=2)
    env.reset(task())
    assert not env.step("do(action='Nope')")[2]
    _, _, done, info = env.step("do(action='Nope')")
    assert done and info["ended_by"] == "repeated_action" and info["answer"] == ""


def test_early_stops_are_off_by_default_and_the_turn_limit_answer_follows_stop_answers(runtime):
    env = WebEnv(runtime, max_turns=4)
    env.reset(task())
    for _ in range(3):
        assert not env.step("nothing readable")[2]
    _, _, done, info = env.step("nothing readable")
    assert done and info["ended_by"] == "turns" and info["answer"] == ""
    env = WebEnv(runtime, max_turns=2, stop_answers="harness")
    env.reset(task())
    env.step("scroll [down]")
    _, _, done, info = env.step("scroll [down]")
    assert done and info["ended_by"] == "turns" and info["answer"] == "Early stop: Reach max steps 2"


@pytest.mark.parametrize("kw, match", [({"early_stop_repeats": -1}, "early_stop_repeats must be an int"),
                                       ({"stop_answers": "none"}, "stop_answers must be one of"),
                                       ({"login": "all"}, "login must be one of"),
                                       ({"settle_s": -1}, "settle_s must be")])
def test_bad_settings_are_refused_naming_them(runtime, kw, match):
    with pytest.raises(ValueError, match=match):
        WebEnv(runtime, **kw)


# --- tabs -----------------------------------------------------------------------------------------


def test_a_joined_start_url_opens_one_tab_each_the_first_current(runtime):
    start = " |AND| ".join(f"__SHOPPING__/{p}" for p in "abc")  # Lite task 103's form
    assert start_urls(start) == ["__SHOPPING__/a", "__SHOPPING__/b", "__SHOPPING__/c"]
    env = WebEnv(runtime)
    obs = env.reset(task(start))
    pages = env.page.context.pages
    assert [p.url.rsplit("/", 1)[1] for p in pages] == ["a", "b", "c"]
    assert env.page is pages[0] and "Page A" in obs
    env.close()


def test_a_link_or_popup_that_opens_a_tab_moves_the_agent_there(runtime):
    # a tab opens asynchronously after the click: the settle wait (the harness's 3 s) is what sees it
    env = WebEnv(runtime, settle_s=0.5)
    obs = env.reset(task())
    link = next(line for line in obs.splitlines() if "Open second" in line)
    obs, _, done, info = env.step(f"click [{link.split('[')[1].split(']')[0]}]")
    assert env.page.url.endswith("/second") and len(env.page.context.pages) == 2
    assert "Second page" in obs and "new tab" in obs
    obs, _, _, info = env.step("go_back")  # a new tab has no history: nothing happens, as in the harness
    assert env.page.url.endswith("/second") and info["failed_actions"] == 0
    obs = env.step(f"goto [{env.site_urls['shopping']}/]")[0]
    button = next(line for line in obs.splitlines() if "Pop up third" in line)
    obs, *_ = env.step(f"click [{button.split('[')[1].split(']')[0]}]")
    assert env.page.url.endswith("/third") and len(env.page.context.pages) == 3 and "Third page" in obs
    env.close()


def test_webarenas_tab_actions_focus_open_and_close_tabs(runtime):
    env = WebEnv(runtime)
    env.reset(task(" |AND| ".join(f"__SHOPPING__/{p}" for p in "ab")))
    assert parse_action("tab_focus [1]") == Action("tab_focus", text="1")
    assert "Page B" in env.step("tab_focus [1]")[0]
    assert "tab_focus [5] failed: there are 2 tab(s)" in env.step("tab_focus [5]")[0]
    env.step("new_tab")
    assert env.page.url == "about:blank" and len(env.page.context.pages) == 3
    env.step("close_tab")
    assert env.page.url.endswith("/b") and len(env.page.context.pages) == 2
    env.close()


# --- which sites a task is signed in to -------------------------------------------------------------


@pytest.mark.parametrize("state, sites", [("./.auth/shopping_admin_state.json", ["shopping_admin"]),
                                          ("./.auth/gitlab.reddit_state.json", ["gitlab", "reddit"]),
                                          ("/tmp/auth/reddit_state.json", ["reddit"])])
def test_storage_state_names_its_sites_as_webarenas_auto_login_reads_them(state, sites):
    assert storage_state_sites(state) == sites


def _logins(runtime, standin, env, t):
    standin.logins.clear()
    env.reset(t)
    assert not env.done, env.step("x")[3].get("error")
    cookies = sorted(c["name"] for c in env.page.context.cookies())
    env.close()
    return sorted(standin.logins), cookies


def test_storage_state_login_signs_in_afresh_to_the_files_sites_only(runtime, standin):
    env = WebEnv(runtime, login="storage_state")
    # Lite task 144: sites shopping and reddit, storage_state reddit's: reddit only
    t144 = task(tid=144, sites=("shopping", "reddit"), login=True, storage_state="./.auth/reddit_state.json")
    assert _logins(runtime, standin, env, t144) == (["reddit"], ["signed_forum"])
    assert _logins(runtime, standin, env, t144) == (["reddit"], ["signed_forum"])  # renewed for every task
    pair = task(tid=4, sites=("gitlab", "reddit"), login=True, storage_state="./.auth/gitlab.reddit_state.json")
    assert _logins(runtime, standin, env, pair)[0] == ["gitlab", "reddit"]
    # Lite task 158: require_login but no storage_state: nobody is signed in
    t158 = task(tid=158, sites=("shopping", "reddit"), login=True)
    assert _logins(runtime, standin, env, t158) == ([], [])


def test_sites_login_signs_in_to_every_site_of_the_task(runtime, standin):
    env = WebEnv(runtime)  # the default, the local sites' behaviour; a storage_state file that does not exist is ignored
    t144 = task(tid=144, sites=("shopping", "reddit"), login=True, storage_state="./.auth/reddit_state.json")
    assert _logins(runtime, standin, env, t144)[0] == ["reddit", "shopping"]
    assert _logins(runtime, standin, env, task(tid=5, sites=("shopping", "reddit")))[0] == []  # require_login false


# --- the config reaches the environment -------------------------------------------------------------


def test_the_web_block_reaches_the_runtime_and_every_environment():
    from esopt.config import load_config
    from esopt.runs.tool_episodes import episode_envs
    from esopt.spec.agents import WebJob

    cfg = load_config("config/tiny_full.yaml")
    assert {k: cfg["web"][k] for k in ("settle_s", "early_stop_parse_failures", "early_stop_repeats", "stop_answers",
                                       "login", "start_timeout_s")} == {
        "settle_s": 0, "early_stop_parse_failures": None, "early_stop_repeats": None, "stop_answers": "empty",
        "login": "sites", "start_timeout_s": None}  # the schema's defaults: today's behaviour
    cfg["web"].update(settle_s=0.5, early_stop_parse_failures=5, early_stop_repeats=4, stop_answers="harness",
                      login="storage_state", action_timeout_s=7, navigation_timeout_s=9, start_timeout_s=11, hang_s=60)
    job = WebJob.from_config(cfg)
    settings = job.settings()
    assert {"settle_s", "early_stop_parse_failures", "early_stop_repeats", "stop_answers", "login",
            "action_syntax"} <= set(settings)
    assert not {"hang_s", "action_timeout_s", "navigation_timeout_s", "start_timeout_s", "browsers"} & set(settings)
    with episode_envs(job, "web", []) as make:
        env = make()
        rt = env.runtime
        assert (rt.action_timeout_ms, rt.navigation_timeout_ms, rt.start_timeout_ms, rt.pool.hang_s) == (7000, 9000, 11000, 60)
        assert (env.settle_s, env.early_stop_parse_failures, env.early_stop_repeats, env.stop_answers, env.login,
                env.action_syntax) == (0.5, 5, 4, "harness", "storage_state", cfg["web"]["action_syntax"])

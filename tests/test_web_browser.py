"""The web environment in a real browser: evaluators on hand-made tasks, isolation of concurrent
episodes, explanatory observations for bad actions, browser crashes and hangs, and no
process left behind. Needs the web extra and Debian's chromium; skipped without them
unless ESOPT_WEB_REQUIRED is set (CI sets it), then missing pieces fail the run."""

import http.cookiejar
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

from conftest import require_web

require_web()

import psutil

from esopt.envs.web import ScriptedExpert, WebEnv, WebRuntime, WebTask, generate_tasks
from esopt.envs.web.expert import find_element
from esopt.envs.web.sites.data import FORUM_USER, money, shop_data


@pytest.fixture(scope="module")
def runtime():
    rt = WebRuntime(seed=0, browsers=2)
    yield rt
    rt.close()


PRODUCT = shop_data(0).products[0]


def hand_task(eval_block, start="__SHOPPING__", tid=900001, login=False, intent="Hand-made check"):
    base = {"reference_answers": None, "reference_url": "", "program_html": [], "string_note": "", "url_note": "GOLD in PRED"}
    return WebTask({"task_id": tid, "sites": ["shopping"], "start_url": start, "require_login": login,
                    "intent": intent, "eval": {**base, **eval_block}})


def html_check(url, locator, required):
    return {"eval_types": ["program_html"], "program_html": [{"url": url, "locator": locator, "required_contents": required}]}


def final_reward(env, task, action="stop []"):
    env.reset(task)
    _, reward, done, info = env.step(action)
    assert done
    return reward, info


def gone(pid):
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids, seconds=15):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(gone(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if not gone(p)]


# --- evaluators against real pages ---------------------------------------------------------

PRICE = "document.querySelector('#price').innerText"


@pytest.mark.parametrize("name, block, action, expected", [
    ("program_html exact_match passes", html_check(f"__SHOPPING__/product/{PRODUCT.sku}", PRICE,
                                                   {"exact_match": money(PRODUCT.price_cents)}), "stop []", 1.0),
    ("program_html exact_match fails", html_check(f"__SHOPPING__/product/{PRODUCT.sku}", PRICE,
                                                  {"exact_match": "$0.01"}), "stop []", 0.0),
    ("program_html must_include with |OR|", html_check("last", "document.querySelector('main').innerText",
                                                       {"must_include": ["no such text |OR| categories", "kitchen"]}), "stop []", 1.0),
    ("program_html must_include fails", html_check("last", "document.querySelector('main').innerText",
                                                   {"must_include": ["kitchen", "bicycles"]}), "stop []", 0.0),
    ("program_html must_exclude", html_check("last", "", {"must_exclude": ["bicycles"]}), "stop []", 1.0),
    ("program_html must_exclude fails", html_check("last", "", {"must_exclude": ["kitchen"]}), "stop []", 0.0),
    ("program_html a script error selects nothing", html_check("last", "document.querySelector('#none').innerText",
                                                               {"must_include": ["x"]}), "stop []", 0.0),
    ("program_html helper url", html_check("func:shopping_get_latest_order_url()",
                                           "document.querySelector('#order-status').innerText",
                                           {"must_include": ["complete |OR| pending |OR| canceled"]}), "stop []", 1.0),
    ("url_match passes", {"eval_types": ["url_match"], "reference_url": "__SHOPPING__"}, "stop []", 1.0),
    ("url_match fails", {"eval_types": ["url_match"], "reference_url": "__SHOPPING__/cart"}, "stop []", 0.0),
    ("string_match passes", {"eval_types": ["string_match"], "reference_answers": {"must_include": ["kitchen"]}},
     "stop [Kitchen]", 1.0),
    ("string_match fails", {"eval_types": ["string_match"], "reference_answers": {"exact_match": "kitchen"}},
     "stop [Garden]", 0.0),
])
def test_evaluators_on_hand_made_tasks_in_the_browser(runtime, name, block, action, expected):
    env = WebEnv(runtime)
    reward, info = final_reward(env, hand_task(block, login="helper" in name), action)
    assert reward == expected and info["error"] is None, (name, info)


def test_a_failing_judge_fails_the_episode_loudly(runtime, caplog):
    def judge(**kw):
        raise TimeoutError("judge endpoint timed out")

    env = WebEnv(runtime, judge=judge)
    reward, info = final_reward(env, hand_task({"eval_types": ["string_match"],
                                                "reference_answers": {"fuzzy_match": ["the kitchen category"]}}),
                                "stop [Kitchen]")
    assert reward == 0.0 and not info["success"]
    assert info["failure"] == "evaluation" and "judge endpoint timed out" in info["error"]
    assert any("evaluation failed" in r.getMessage() for r in caplog.records)
    env2 = WebEnv(runtime, judge=lambda **kw: "correct")
    assert final_reward(env2, hand_task({"eval_types": ["string_match"], "reference_answers": {
        "fuzzy_match": ["the kitchen category"]}}), "stop [Kitchen]")[0] == 1.0


# --- isolation --------------------------------------------------------------------------------


def test_concurrent_episodes_never_see_each_others_changes(runtime):
    """Two episodes add different quantities of the same product, steps interleaved; each cart
    holds only its own, and the seeded template is untouched for the next episode."""
    task_a, _ = [t for t in generate_tasks(0, "train", templates=[105])
                      if t.config["instantiation_dict"]["product"] == PRODUCT.name][:1] * 2
    qty_a, qty_b = 2, 5
    envs = [WebEnv(runtime), WebEnv(runtime)]
    obs = [e.reset(task_a) for e in envs]
    assert envs[0].episode.urls["shopping"] != envs[1].episode.urls["shopping"]
    # ... behind the same shown URLs: neither the port nor the token reaches the prompt
    assert envs[0].site_urls == envs[1].site_urls and envs[0].site_urls["shopping"] == "http://localhost:7770"
    assert all("URL: http://localhost:7770" in o and e.episode.token not in o for e, o in zip(envs, obs))
    assert {e.browser_index for e in envs} == {0, 1}  # spread over the pool
    experts = []
    for e, q in zip(envs, (qty_a, qty_b)):
        plan = [dict(s, text=str(q)) if s.get("role") == "spinbutton" else s for s in e.task.expert][:-1]
        experts.append(ScriptedExpert(plan + [{"do": "stop", "answer": ""}], e.site_urls))
    for _ in range(len(experts[0].plan) - 1):  # everything but stop, interleaved
        for i, e in enumerate(envs):
            obs[i] = e.step(experts[i].act(obs[i]))[0]
    carts = [e.episode.query("shopping", "SELECT sku, qty FROM cart_items") for e in envs]
    assert carts == [[(PRODUCT.sku, qty_a)], [(PRODUCT.sku, qty_b)]]
    for e in envs:
        e.close()
    fresh = runtime.sites.open_episode()
    assert fresh.query("shopping", "SELECT COUNT(*) FROM cart_items") == [(0,)]
    fresh.close()


def test_the_server_keeps_episodes_apart_under_concurrent_requests(runtime):
    """Eight episodes, each from its own thread: log in, post a comment, read it back."""
    sites = runtime.sites
    episodes = [sites.open_episode() for _ in range(8)]
    errors = []

    def work(k, ep):
        try:
            jar = http.cookiejar.CookieJar()
            opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
            base = ep.urls["reddit"]
            data = urllib.parse.urlencode({"username": FORUM_USER[0], "password": FORUM_USER[1]}).encode()
            opener.open(base + "/login", data, timeout=20).read()
            body = urllib.parse.urlencode({"body": f"comment from episode {k}"}).encode()
            opener.open(base + "/f/books/1/comment", body, timeout=20).read()
            page = opener.open(base + "/f/books/1", timeout=20).read().decode()
            assert f"comment from episode {k}" in page
            assert not any(f"comment from episode {j}" in page for j in range(8) if j != k)
        except Exception as e:  # noqa: BLE001
            errors.append((k, repr(e)))

    threads = [threading.Thread(target=work, args=(k, ep)) for k, ep in enumerate(episodes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for k, ep in enumerate(episodes):
        assert ep.query("reddit", "SELECT body FROM comments WHERE body LIKE 'comment from episode %'") == [
            (f"comment from episode {k}",)]
        ep.close()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(episodes[0].urls["reddit"] + "/", timeout=10)
    assert e.value.code == 404  # a closed episode is gone


# --- actions -----------------------------------------------------------------------------


def test_malformed_and_impossible_actions_get_explanatory_observations(runtime):
    env = WebEnv(runtime, max_turns=30)
    obs = env.reset(hand_task({"eval_types": ["url_match"], "reference_url": "__SHOPPING__"}))
    heading = find_element(obs, "heading", "Welcome")
    link = find_element(obs, "link", "Kitchen")
    cases = [
        ("I would like to buy a kettle", "invalid action: No action found"),
        ("click [the kettle]", "element id must be the number"),
        ("click [999]", "no element [999] on this page"),
        (f"type [{heading}] [hello]", "failed:"),
        (f"select [{link}] [x]", "failed:"),
        ("press [NoSuchKey]", "failed:"),
        ("goto [http://10.1.2.3/]", "only the task's sites can be opened"),
        ("goto [file:///etc/passwd]", "only http:// and https://"),
        ("tab_focus [7]", "there are 1 tab(s)"),
        ('do(action="Fly")', "unknown action"),
        ("goto [http://localhost:7770/category/kitchen]", "/category/kitchen] done"),  # a shown URL opens its site
    ]
    for action, says in cases:
        obs, reward, done, info = env.step(action)
        assert not done and reward == 0.0
        assert says in obs, (action, obs[:400])
        assert obs.startswith("Objective: Hand-made check\nURL: ")
    assert info["invalid_actions"] == 3 and info["failed_actions"] == 7
    assert obs.startswith("Objective: Hand-made check\nURL: http://localhost:7770/category/kitchen\n")
    assert info["url"] == env.episode.urls["shopping"] + "/category/kitchen"
    obs, _, done, info = env.step(f"click [{find_element(obs, 'link', 'Kitchen')}]")  # still works afterwards
    assert not done and "/category/kitchen" in info["url"]
    env.close()


def test_the_turn_budget_ends_the_episode_and_evaluates_it(runtime):
    env = WebEnv(runtime, max_turns=2)
    env.reset(hand_task({"eval_types": ["url_match"], "reference_url": "__SHOPPING__"}))
    assert not env.step("scroll [down]")[2]
    _, reward, done, info = env.step("scroll [up]")
    assert done and info["ended_by"] == "turns" and reward == 1.0  # WebArena: evaluated with an empty answer


def test_observations_are_bounded_and_the_html_mode_acts_by_its_ids(runtime):
    env = WebEnv(runtime, max_obs_chars=300)
    obs = env.reset(hand_task({"eval_types": ["url_match"], "reference_url": "__SHOPPING__/category/kitchen"}))
    assert len(obs) < 400 and "[... observation truncated:" in obs
    env.close()
    env = WebEnv(runtime, observation="html", prompt_style="short")
    obs = env.reset(hand_task({"eval_types": ["url_match"], "reference_url": "__SHOPPING__/category/kitchen"}))
    import re

    kitchen = re.search(r'<a id="(\d+)"> Kitchen </a>', obs).group(1)
    obs, _, _, info = env.step(f'do(action="Click", element="{kitchen}")')
    assert info["url"].endswith("/category/kitchen") and "<table>" in obs
    assert env.step("stop []")[1] == 1.0


def test_restate_objective_ends_every_observation_with_the_objective_within_the_budget(runtime):
    task = hand_task({"eval_types": ["url_match"], "reference_url": "__SHOPPING__/category/kitchen"},
                     intent="Open the Kitchen category")
    env = WebEnv(runtime, max_obs_chars=300, restate_objective=True)
    obs = env.reset(task)  # the page is cut, not the objective
    assert "[... observation truncated:" in obs and obs.endswith("\nObjective: Open the Kitchen category")
    assert len(obs) < 300 + 150  # the truncation marker, at most, past the budget
    env.close()
    env = WebEnv(runtime, restate_objective=True)
    obs = env.reset(task)
    assert obs.startswith("Objective: Open the Kitchen category\nURL: ")
    obs, _, _, _ = env.step(f"click [{find_element(obs, 'link', 'Kitchen')}]")
    assert obs.endswith("\nObjective: Open the Kitchen category") and "/category/kitchen" in obs
    assert env.step("stop []")[1] == 1.0
    assert not WebEnv(runtime).reset(task).endswith("Objective: Open the Kitchen category")  # off by default


def test_an_episode_the_sites_refuse_to_log_in_fails_with_its_reason(runtime, monkeypatch):
    from esopt.envs.web.sites import LOGINS

    monkeypatch.setitem(LOGINS, "shopping", ("/login", {"email": "nobody@example.com", "password": "x"}))
    env = WebEnv(runtime)
    obs = env.reset(hand_task({"eval_types": ["url_match"], "reference_url": "__SHOPPING__"}, login=True))
    assert "could not start" in obs and "login to shopping" in obs
    obs, reward, done, info = env.step("click [1]")  # the rollout's first step gets the failure
    assert done and reward == 0.0 and info["failure"] == "sites"
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("click [1]")


# --- failures of the browser ------------------------------------------------------------------


def order_task():
    return generate_tasks(0, "train", 1, templates=[106])[0]  # search, open, add to cart, place order, stop


def test_a_browser_killed_mid_episode_is_restarted_and_the_episode_replayed(runtime):
    env = WebEnv(runtime)
    task = order_task()
    obs = env.reset(task)
    expert = ScriptedExpert.for_task(task, env.site_urls)
    for _ in range(3):  # up to and including "Add to cart": a state change the replay must not double
        obs, _, _, info = env.step(expert.act(obs))
    assert env.episode.query("shopping", "SELECT COUNT(*) FROM cart_items") == [(1,)]
    victim = runtime.pool.browser_pid(env.browser_index)
    os.kill(victim, signal.SIGKILL)
    assert not wait_gone([victim], 5)
    orders_before = env.episode.query("shopping", "SELECT COUNT(*) FROM orders")[0][0]
    obs, _, done, info = env.step(expert.act(obs))  # "Place order" on a dead browser
    assert not done and info["browser_restarts"] == 1 and "Thank you! Your order" in obs
    assert env.episode.query("shopping", "SELECT COUNT(*) FROM orders")[0][0] == orders_before + 1
    assert env.episode.query("shopping", "SELECT qty FROM order_items WHERE order_id = (SELECT MAX(id) FROM orders)") == [(1,)]
    _, reward, done, info = env.step(expert.act(obs))
    assert done and reward == 1.0 and info["success"] and info["browser_restarts"] == 1
    assert runtime.pool.browser_pid(0) and runtime.pool.browser_pid(1)  # the pool is whole again


def test_a_browser_that_dies_again_fails_the_episode_with_its_reason_and_the_run_goes_on(runtime):
    env = WebEnv(runtime, crash_retries=0)
    task = order_task()
    obs = env.reset(task)
    os.kill(runtime.pool.browser_pid(env.browser_index), signal.SIGKILL)
    obs, reward, done, info = env.step("click [1]")
    assert done and reward == 0.0 and not info["success"]
    assert info["failure"] == "browser" and "browser failure" in info["error"]
    assert "The episode ended" in obs
    reward, info, _ = _solve(WebEnv(runtime), task)  # the next episode runs on a restarted browser
    assert reward == 1.0


def _solve(env, task):
    obs = env.reset(task)
    expert = ScriptedExpert.for_task(task, env.site_urls)
    done = False
    while not done:
        obs, reward, done, info = env.step(expert.act(obs))
    return reward, info, obs


def test_a_hung_browser_is_killed_by_the_watchdog_and_restarted(runtime):
    env = WebEnv(runtime)
    task = generate_tasks(0, "train", 1, templates=[101])[0]
    obs = env.reset(task)
    expert = ScriptedExpert.for_task(task, env.site_urls)
    obs = env.step(expert.act(obs))[0]
    old_hang, runtime.pool.hang_s = runtime.pool.hang_s, 2.0
    victim = runtime.pool.browser_pid(env.browser_index)
    os.kill(victim, signal.SIGSTOP)  # the browser stops answering
    try:
        t = time.monotonic()
        obs, _, done, info = env.step(expert.act(obs))
        assert time.monotonic() - t < 20
    finally:
        runtime.pool.hang_s = old_hang
        if not gone(victim):
            os.kill(victim, signal.SIGKILL)
    assert not done and info["browser_restarts"] == 1, obs
    _, reward, done, info = env.step(expert.act(obs))
    assert done and reward == 1.0


# --- processes ----------------------------------------------------------------------------------


CLOSE = """
import json, time, psutil
from esopt.envs.web import WebEnv, WebRuntime, generate_tasks
rt = WebRuntime(seed=0, browsers=2)
env = WebEnv(rt)
env.reset(generate_tasks(0, "train", 1, templates=[101])[0])
pids = [p.pid for p in psutil.Process().children(recursive=True)]
root = rt.sites.root
rt.close()
time.sleep(1)
left = [p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
print(json.dumps({"pids": pids, "left": left, "root_exists": root.exists()}), flush=True)
"""


def test_no_browser_or_server_process_is_left_after_close():
    out = subprocess.run([sys.executable, "-c", CLOSE], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(info["pids"]) > 8  # the server, the driver, two browsers and their helpers
    assert info["left"] == [] and not info["root_exists"]
    assert not wait_gone(info["pids"], 10)


CHILD = """
import json, sys, time
from esopt.envs.web import WebEnv, WebRuntime, generate_tasks
rt = WebRuntime(seed=0, browsers=1)
env = WebEnv(rt)
env.reset(generate_tasks(0, "train", 1, templates=[101])[0])
import psutil
print(json.dumps({"pids": rt.pool.pids() + [rt.sites.pid] + [p.pid for p in psutil.Process().children() if "node" in p.name()],
                  "root": str(rt.sites.root)}), flush=True)
time.sleep(120)
"""


def test_a_killed_process_leaves_no_browser_or_server_behind():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        info = json.loads(line)
        assert len(info["pids"]) > 3
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert not wait_gone(info["pids"], 15), "processes outlived their parent"
        deadline = time.monotonic() + 10
        while os.path.exists(info["root"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not os.path.exists(info["root"]), "the episodes' databases outlived the server"
    finally:
        if proc.poll() is None:
            proc.kill()

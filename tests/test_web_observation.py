"""What the web agent sees and is told: the harness's simplified HTML (observation "webrl") in a
real Chromium, acting on its ids, the authors' system prompt and turn layout (prompt_style
"webrl"), no cut with max_obs_chars None, the prompt/observation pairing check, and today's
default layout kept byte for byte. Needs the web extra and Debian's chromium (see
tests/test_web_browser.py)."""

import copy
import hashlib
import re
from pathlib import Path

import pytest
import yaml

from conftest import require_web

require_web()

from esopt.config import ConfigError, validate_config
from esopt.envs.web import WebEnv, WebRuntime, WebTask
from esopt.envs.web.observe import WEBRL_JS, webrl_selector
from esopt.envs.web.prompts import WEBRL_INTRO, check_prompt, format_observation, instructions

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def runtime():
    rt = WebRuntime(seed=0, browsers=1)
    yield rt
    rt.close()


@pytest.fixture
def page(runtime):
    """A bare page in the harness's viewport (1280x720), for pages set by hand."""
    _, _, ctx = runtime.pool.new_context(viewport={"width": 1280, "height": 720})
    yield ctx.new_page()
    ctx.close()


def shop_task(intent="Open the Kitchen category", reference="__SHOPPING__/category/kitchen"):
    return WebTask({"task_id": 900101, "sites": ["shopping"], "start_url": "__SHOPPING__", "require_login": False,
                    "intent": intent, "eval": {"eval_types": ["url_match"], "reference_answers": None,
                                               "reference_url": reference, "program_html": [], "string_note": "",
                                               "url_note": "GOLD in PRED"}})


PAGE = """<!doctype html><html><head><title>T</title><style>p {}</style></head><body>
<nav><a href="/a">Home</a> <a href="/b"><span>Cart</span></a></nav>
<h1>Rustic   Kettle</h1><!-- a comment --><p>Price: <b>$17.99</b> each</p>
<div style="display:none"><a href="/h">Hidden</a></div>
<div aria-hidden="true">Muted</div>
<form><input type="text" name="q" placeholder="Search products">
<input type="hidden" name="tok" value="s3cret"><input type="checkbox" checked>
<select name="s"><option value="1">One</option><option value="2" selected>Two</option></select>
<button type="submit">Search</button></form>
<div style="margin-top:3000px"><a href="/far">Far away</a></div>
<script>var secret = 1;</script>
</body></html>"""

# What the harness's html_tools print for PAGE (boxes, which depend on fonts, as *): ids on the
# innermost clickable elements in view (the span inside the link: it inherits cursor: pointer);
# no hidden, aria-hidden, type=hidden, off-view, script or comment content; own text before the
# first child element (" each" only in data-text); a select's value, chosen text and options.
EXPECTED = (
    '<html data-bbox=*> <body data-bbox=*> <nav data-bbox=*> <a id="0" data-text="Home" data-bbox=*> Home </a> '
    '<span id="1" data-text="Cart" data-bbox=*> Cart </span> </nav> '
    '<h1 data-text="Rustic Kettle" data-bbox=*> Rustic Kettle </h1> '
    '<p data-text="Price:,each" data-bbox=*> Price: <b data-text="$17.99" data-bbox=*> $17.99 </b> </p> '
    '<form data-bbox=*> <input id="2" type="text" placeholder="Search products" data-bbox=*> </input> '
    '<input id="3" type="checkbox" data-value="on" data-bbox=* data-status="checked"> </input> '
    '<select id="4" data-value="2" data-text="Two" data-bbox=*> <option value="1" data-text="One"> One </option> '
    '<option value="2" data-text="Two" data-status="selected"> Two </option> </select> '
    '<button id="5" type="submit" data-text="Search" data-bbox=*> Search </button> </form> </body> </html>'
)


def boxes_as_stars(html: str) -> str:
    return re.sub(r'data-bbox="-?\d+,-?\d+,\d+,\d+"', "data-bbox=*", html)


def test_webrl_observation_prints_the_view_as_the_harness_does(page):
    page.set_content(PAGE)
    html, ids = page.evaluate(WEBRL_JS)
    assert boxes_as_stars(html) == EXPECTED
    assert ids == ["0", "1", "2", "3", "4", "5"]
    assert page.locator(webrl_selector("0")).inner_text() == "Home"  # the id is on the element
    assert page.locator(webrl_selector("4")).evaluate("e => e.tagName") == "SELECT"


def test_webrl_observation_follows_the_scroll_and_renumbers(page):
    page.set_content(PAGE)
    page.evaluate(WEBRL_JS)
    page.mouse.wheel(0, 3000)
    page.wait_for_function("window.scrollY > 0")
    html, ids = page.evaluate(WEBRL_JS)
    assert ids == ["0"] and '<a id="0" data-text="Far away"' in html and "Home" not in html
    assert page.locator("[data-label-id]").count() == 1  # the earlier marks are gone


def test_webrl_values_typed_into_the_page_show_as_data_value(page):
    page.set_content(PAGE)
    page.evaluate(WEBRL_JS)
    page.locator(webrl_selector("2")).fill("blue kettle")
    page.locator(webrl_selector("4")).select_option("1")
    html, _ = page.evaluate(WEBRL_JS)
    assert 'placeholder="Search products" data-value="blue kettle"' in html
    assert '<select id="4" data-value="1" data-text="One"' in html


def test_the_paper_layout_acts_by_its_ids_in_the_browser(runtime):
    env = WebEnv(runtime, observation="webrl", prompt_style="webrl", max_obs_chars=None)
    obs = env.reset(shop_task("Search the shop for kettle", "__SHOPPING__/search?q=kettle"))
    assert obs.startswith("Task Instruction: Search the shop for kettle\n\nRound 0\n\n<html data-bbox=")
    box = re.search(r'<input id="(\d+)" placeholder="Search products"', obs).group(1)
    reply = f'# Element: the search box\ndo(action="Search", argument="kettle", element="{box}")'
    obs, _, done, info = env.step(reply)
    assert not done and "/search?q=kettle" in info["url"]
    # the turn: the task, each earlier reply as written by round, then only the current page
    assert obs.startswith(f"Task Instruction: Search the shop for kettle\n\nRound 0\n{reply}\n\nRound 1\n\n<html ")
    assert obs.count("<html ") == 1 and "URL:" not in obs
    link = re.search(r'<a id="(\d+)" data-text="([^"]*Kettle[^"]*)"', obs)
    obs, _, _, info = env.step(f'do(action="Click", element="{link.group(1)}")')
    assert "/product/" in info["url"] and f"> {link.group(2)} </h1>" in obs
    assert env.step('exit(message="")')[1] == 0.0  # the URL is no longer the search page
    env.close()


def test_clicking_an_id_of_the_webrl_observation_opens_the_link(runtime):
    env = WebEnv(runtime, observation="webrl", prompt_style="webrl", max_obs_chars=None)
    obs = env.reset(shop_task())
    kitchen = re.search(r'<a id="(\d+)" data-text="Kitchen"', obs).group(1)
    _, _, _, info = env.step(f'do(action="Click", element="{kitchen}")')
    assert info["url"].endswith("/category/kitchen")
    assert env.step('exit(message="")')[1] == 1.0
    env.close()


def test_null_max_obs_chars_never_cuts_and_a_number_does():
    page = "<p> " + "x" * 50_000 + " </p>"
    kw = {"intent": "t", "url": "u", "feedback": "f", "turns_left": 3, "title": "T", "page": page}
    for style in ("full", "webrl"):
        whole = format_observation(**kw, max_chars=None, style=style)
        assert whole.endswith(page) and "observation truncated" not in whole
        cut = format_observation(**kw, max_chars=4000, style=style)
        assert len(cut) < 4100 and "[... observation truncated:" in cut


def test_webenv_takes_none_as_no_cut_and_refuses_other_non_numbers(runtime):
    assert WebEnv(runtime, max_obs_chars=None).max_obs_chars is None
    for bad in (100, "4000", True):
        with pytest.raises(ValueError, match="max_obs_chars"):
            WebEnv(runtime, max_obs_chars=bad)


def test_the_webrl_prompt_is_the_authors_file_character_for_character():
    # zz1358m/Agentic-ESOpt @ 8c08393, webarena-train-time/vab_extensions/p_webrl_chat_qwen_action.json: "intro"
    text = instructions("webrl")
    assert text is WEBRL_INTRO and len(text) == 2757
    assert hashlib.sha256(text.encode()).hexdigest() == "80e6b739ba78eb6551c8932158bf25ada276d15e196160e648c4934008868738"
    assert text.startswith("# Setup\nYou are a professional web browsing agent. Given the user's task and the "
                           "simplified HTML of the current webpage, choose exactly one next browser action.")
    assert text.endswith('do(action="Scroll Down")\nexit(message="Quest Lumaflex Band")')


def test_the_webrl_turn_layout():
    obs = format_observation(intent="Find X", url="u", feedback="f", turns_left=3, title="T", page="<html> </html>",
                             max_chars=None, style="webrl", previous_actions=["do(action=\"Scroll Down\")", "bad"])
    assert obs == ('Task Instruction: Find X\n\nRound 0\ndo(action="Scroll Down")\n\nRound 1\nbad\n\n'
                   "Round 2\n\n<html> </html>")


def test_the_default_prompts_and_layout_are_unchanged_byte_for_byte():
    # the system prompts and observations of commit 948f56b (the tiny and smoke results depend on them)
    digest = {"full": "9501b23816e45f91d98ee98b2b724d65c12280b022f832b3694da75f010025c6",
              "short": "e07604bebb45dded380af6c300f4364743bb241fb965e80598d1cfd50a099159"}
    for style, want in digest.items():
        assert hashlib.sha256(instructions(style).encode()).hexdigest() == want
    page = "\n".join(f"[{i}] link 'Item {i}'" for i in range(40))
    kw = {"intent": "Find the kettle", "url": "http://x/1", "title": "Shop"}
    cut = format_observation(**kw, feedback="click [3] done", turns_left=7, page=page, max_chars=400)
    restated = format_observation(**kw, feedback="(start)", turns_left=15, page=page, max_chars=300, restate_objective=True)
    assert hashlib.sha256(cut.encode()).hexdigest() == "9289ece0fdf8938b7f8bc93823bf5576a7261e6c8689bc8e1ee5feb89b13c55a"
    assert hashlib.sha256(restated.encode()).hexdigest() == "230cbe74ea454ce8dd10037cb0351ef7dbdd4ef19e25412ffd9679cfa4237103"
    short = format_observation(**kw, feedback="(start)", turns_left=15, page="[1] link 'Home'", max_chars=4000,
                               restate_objective=True)
    assert short == ("Objective: Find the kettle\nURL: http://x/1\nPrevious action: (start)\nTurns left: 15\n"
                     "Page: Shop\n[1] link 'Home'\nObjective: Find the kettle")


def test_a_prompt_must_describe_the_observation_given():
    with pytest.raises(ValueError, match=r"describes the observation as axtree, not 'webrl'.*'short' or 'webrl'"):
        check_prompt("full", "webrl")
    with pytest.raises(ValueError, match="not 'axtree'"):
        instructions("webrl", "axtree")
    with pytest.raises(ValueError, match="expected one of"):
        check_prompt("long", "axtree")
    for style, observation in (("full", "axtree"), ("short", "html"), ("webrl", "webrl"), ("webrl", "html")):
        check_prompt(style, observation)
    # and a config that pairs them otherwise is refused at load
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    for observation, style in (("webrl", "full"), ("html", None), ("axtree", "webrl")):
        bad = copy.deepcopy(paper)
        bad["web"]["observation"] = observation
        if style is None:
            del bad["web"]["prompt_style"]  # the default, full
        else:
            bad["web"]["prompt_style"] = style
        with pytest.raises(ConfigError, match="web.observation"):
            validate_config(bad, "bad")


def test_the_paper_config_runs_the_harness_observation_and_prompt():
    web = validate_config(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()), "paper")["web"]
    assert (web["observation"], web["prompt_style"], web["max_obs_chars"], web["history_turns"]) == (
        "webrl", "webrl", None, 0)

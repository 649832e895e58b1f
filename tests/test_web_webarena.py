"""The real WebArena suite's adapter (esopt.envs.web.webarena), offline: small task files in
WebArena's format (the 812-task list, VAB's Lite list with old_task_id, config_files/N.json),
the 165 Lite ids and the 582/65 training split, site URLs and placeholders, the program_html
helpers against a fake Magento REST API, the reachability check and the site reset. The
browser tests (logins through the sites' forms, storage_state files, whole episodes on fake
sites with the real sites' form fields) skip without the web extra or chromium unless
ESOPT_WEB_REQUIRED is set. With the real task files (ESOPT_WEBARENA_FILES: a folder holding
test.raw.json or test_webarena.raw.json and test_webarena_lite.raw.json) the released split's
fingerprints are checked too."""

import contextlib
import http.server
import json
import os
import random
import socket
import sys
import time
import urllib.parse
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from esopt.envs.web import webarena as wa
from esopt.envs.web.evaluators import SEMANTICS_FIELD, CallableJudge, EvaluationError, call_helper, evaluate
from esopt.envs.web.sites.server import Episode, FixedSites
from esopt.envs.web.tasks import TaskFormatError, WebTask, load_tasks, placeholder, resolve_urls, unresolved, validate

from conftest import Server

ROOT = Path(__file__).resolve().parents[1]

# --- task files in WebArena's format ----------------------------------------------------

SITE_COMBOS = [["shopping"], ["shopping_admin"], ["reddit"], ["gitlab"], ["map"], ["wikipedia", "map"],
               ["gitlab", "reddit"], ["shopping", "reddit"], ["map", "shopping_admin"]]
STATES = {"shopping": "./.auth/shopping_state.json", "shopping_admin": "./.auth/shopping_admin_state.json",
          "reddit": "./.auth/reddit_state.json", "gitlab": "./.auth/gitlab_state.json"}


def eval_block(kind, i):
    """WebArena's eval dict for one evaluator kind, with its full set of keys."""
    base = {"eval_types": [], "reference_answers": None, "reference_url": "", "program_html": [], "string_note": "",
            "reference_answer_raw_annotation": ""}
    if kind == "string_match":
        return {**base, "eval_types": ["string_match"], "reference_answers": {"must_include": [f"answer {i}"]},
                "reference_answer_raw_annotation": f"answer {i}"}
    if kind == "fuzzy":
        return {**base, "eval_types": ["string_match"], "reference_answers": {"fuzzy_match": "N/A"},
                "string_note": "There is no such order"}
    if kind == "url_match":
        return {**base, "eval_types": ["url_match"], "reference_url": f"__GITLAB__/byteblaze/p{i}/-/issues?label_name=bug",
                "url_note": "GOLD in PRED"}
    if kind == "order":
        return {**base, "eval_types": ["program_html"], "program_html": [
            {"url": "func:shopping_get_latest_order_url()",
             "locator": "document.querySelector(\".order-details-items.ordered\").outerText",
             "required_contents": {"must_include": ["B0SKU" + str(i)]}}]}
    if kind == "post":
        return {**base, "eval_types": ["program_html"], "program_html": [
            {"url": "func:reddit_get_post_url('__last_url__')",
             "locator": "document.querySelector('.submission__inner').outerText",
             "required_contents": {"must_include": [f"post {i}"]}}]}
    if kind == "member":
        return {**base, "eval_types": ["url_match", "program_html"], "reference_url": "__GITLAB__/byteblaze/dotfiles",
                "url_note": "GOLD in PRED", "program_html": [
                    {"url": "__GITLAB__/byteblaze/dotfiles/-/project_members",
                     "locator": "func:gitlab_get_project_memeber_role(__page__, 'vinta')",
                     "required_contents": {"must_include": ["Maintainer"]}}]}
    if kind == "review":
        return {**base, "eval_types": ["program_html"], "program_html": [
            {"url": "last", "locator": "func:shopping_get_sku_latest_review_author('B0X')",
             "required_contents": {"must_include": ["Emma Lopez"]}},
            {"url": "last", "locator": "func:shopping_get_sku_latest_review_rating('B0X')",
             "required_contents": {"must_include": ["100"]}}]}
    raise ValueError(kind)


KINDS = ["string_match", "url_match", "order", "post", "member", "review", "fuzzy"]
START = {"shopping": "__SHOPPING__", "shopping_admin": "__SHOPPING_ADMIN__", "reddit": "__REDDIT__",
         "gitlab": "__GITLAB__", "map": "__MAP__", "wikipedia": "__MAP__"}


def webarena_task(i, sites=None, kind=None):
    sites = sites or SITE_COMBOS[i % len(SITE_COMBOS)]
    state = ("./.auth/gitlab.reddit_state.json" if set(sites) == {"gitlab", "reddit"}
             else STATES.get(sites[-1]) if "map" not in sites else None)
    return {"sites": sites, "task_id": i, "require_login": True, "storage_state": state,
            "start_url": START[sites[0]], "geolocation": None, "intent_template": "Do thing {{n}}",
            "instantiation_dict": {"n": i}, "intent": f"Do thing {i}", "require_reset": False,
            "eval": eval_block(kind or KINDS[i % len(KINDS)], i), "intent_template_id": i % 50}


def full_file(tmp_path, n=812):
    p = tmp_path / "test.raw.json"
    p.write_text(json.dumps([webarena_task(i) for i in range(n)]))
    return p


def lite_file(tmp_path, ids=wa.LITE_TASK_IDS):
    tasks = []
    for new, old in enumerate(ids):
        t = webarena_task(old)
        t["task_id"], t["old_task_id"] = new, old
        tasks.append(t)
    p = tmp_path / "test_webarena_lite.raw.json"
    p.write_text(json.dumps(tasks))
    return p


# --- the Lite ids, the split --------------------------------------------------------------


def test_the_embedded_lite_ids_are_165_unique_webarena_ids_with_the_released_fingerprint():
    ids = wa.LITE_TASK_IDS
    assert len(ids) == 165 == len(set(ids)) == wa.RELEASED_COUNTS["lite"]
    assert list(ids) == sorted(ids) and 0 <= min(ids) and max(ids) <= 811
    assert wa.ids_sha256(ids) == wa.RELEASED_SHA256["lite_old_task_ids"]


def test_the_nonlite_split_removes_the_lite_old_ids_and_gives_582_and_65(tmp_path):
    rng = random.Random(3)
    tasks = [(i, rng.choice(SITE_COMBOS)) for i in range(812)]
    train, val = wa.split_nonlite(tasks)
    assert (len(train), len(val)) == (582, 65)
    assert not set(train) & set(val)
    assert set(train) | set(val) == set(range(812)) - set(wa.LITE_TASK_IDS)  # old ids removed, not 0..164
    assert 0 in set(train) | set(val) and 4 not in set(train) | set(val)
    assert wa.split_nonlite(tasks) == (train, val)  # seeded: the same every time
    assert wa.split_nonlite(tasks, seed=1) != (train, val)
    assert wa.split_nonlite(reversed(tasks)) == (train, val)  # input order does not matter
    # stratified: the first round takes one task of every stratum
    strata = {i: "|".join(s) for i, s in tasks}
    order = val + train
    n = len({strata[i] for i in order})
    assert len({strata[i] for i in order[:n]}) == n


def test_the_split_on_tiny_synthetic_ids():
    tasks = [(i, ["a"] if i % 2 else ["b", "c"]) for i in range(20)]
    train, val = wa.split_nonlite(tasks, lite_ids=[0, 1, 2, 3], val_ratio=0.25)
    assert (len(train), len(val)) == (12, 4) and set(train + val) == set(range(4, 20))
    assert wa.split_nonlite(tasks, lite_ids=[0, 1, 2, 3], val_ratio=0.0)[1] == []
    with pytest.raises(ValueError):
        wa.split_nonlite(tasks, val_ratio=1.0)


def test_read_lite_ids_from_a_vab_lite_file_a_folder_and_a_list(tmp_path):
    p = lite_file(tmp_path, ids=[20, 4, 7])  # new ids 0, 1, 2 in that order
    assert wa.read_lite_ids(p) == [20, 4, 7]
    folder = tmp_path / "test_webarena_lite"
    folder.mkdir()
    for t in json.loads(p.read_text()):
        (folder / f"{t['task_id']}.json").write_text(json.dumps(t))
    assert wa.read_lite_ids(folder) == [20, 4, 7]
    (tmp_path / "ids.json").write_text("[5, 6]")
    assert wa.read_lite_ids(tmp_path / "ids.json") == [5, 6] and wa.read_lite_ids([1, 2]) == [1, 2]
    with pytest.raises(TaskFormatError, match="repeat"):
        wa.read_lite_ids([1, 1])
    with pytest.raises(wa.SuiteNotFoundError):
        wa.read_lite_ids(tmp_path / "nope.json")


# --- load_suite ------------------------------------------------------------------------


def test_load_suite_lite_from_the_vab_file_and_from_the_812(tmp_path, caplog):
    lite = wa.load_suite(lite_file(tmp_path), "lite")
    assert len(lite) == 165 and [t.id for t in lite[:3]] == ["0", "1", "2"]
    assert [t.config["old_task_id"] for t in lite] == list(wa.LITE_TASK_IDS)
    for t in lite:
        validate(t.config)
    caplog.clear()
    from_full = wa.load_suite(full_file(tmp_path), "lite")
    assert [int(t.id) for t in from_full] == list(wa.LITE_TASK_IDS)
    assert "revised" in caplog.text  # the original configs, said so
    # the evaluator configs stay WebArena's (only storage_state is adapted)
    original = webarena_task(4)["eval"]
    assert from_full[0].config["eval"] == original


def test_load_suite_marks_the_evaluator_semantics(tmp_path):
    lite = wa.load_suite(lite_file(tmp_path, ids=[4, 7]), "lite", lite_ids=[4, 7])
    assert [t.config[SEMANTICS_FIELD] for t in lite] == ["vab", "vab"]  # VAB's Lite file: VAB's evaluator
    src = full_file(tmp_path, 30)
    assert {t.config[SEMANTICS_FIELD] for t in wa.load_suite(src, "lite", lite_ids=[4, 7])} == {"webarena"}
    assert {t.config[SEMANTICS_FIELD] for t in wa.load_suite(src, "lite", lite_ids=[4], semantics="vab")} == {"vab"}
    full = full_file(tmp_path)
    train = wa.load_suite(full, "train", verify_release=False)  # the authors trained through VAB's run.py
    assert {t.config[SEMANTICS_FIELD] for t in train} == {"vab"}
    assert {t.config[SEMANTICS_FIELD] for t in wa.load_suite(full, "val", verify_release=False,
                                                             semantics="webarena")} == {"webarena"}
    with pytest.raises(ValueError, match="semantics"):
        wa.load_suite(src, "lite", lite_ids=[4], semantics="VAB")


def test_load_suite_train_and_val_from_the_812_list_and_from_config_files(tmp_path):
    src = full_file(tmp_path)
    train = wa.load_suite(src, "train", verify_release=False)
    val = wa.load_suite(src, "val", verify_release=False)
    assert (len(train), len(val)) == (582, 65)
    expect_train, expect_val = wa.split_nonlite([(i, webarena_task(i)["sites"]) for i in range(812)])
    assert [int(t.id) for t in train] == expect_train and [int(t.id) for t in val] == expect_val
    # the same from WebArena's config_files/N.json folder (test.raw.json beside them is ignored)
    folder = tmp_path / "config_files"
    folder.mkdir()
    (folder / "test.raw.json").write_text(src.read_text())
    for i in range(812):
        (folder / f"{i}.json").write_text(json.dumps(webarena_task(i)))
    assert [t.id for t in wa.load_suite(folder, "train", verify_release=False)] == [t.id for t in train]
    # the synthetic sites are not WebArena's: the released fingerprints catch that
    with pytest.raises(TaskFormatError, match="released"):
        wa.load_suite(src, "train")
    with pytest.raises(TaskFormatError, match="Lite configs"):
        wa.load_suite(lite_file(tmp_path), "train")
    with pytest.raises(ValueError, match="subset"):
        wa.load_suite(src, "test")


def test_placeholders_are_filled_from_site_urls_and_agree_with_the_task_loader(tmp_path):
    urls = wa.site_urls("10.0.0.5")
    assert set(urls) == set(wa.WEBARENA_SITES) == {"shopping", "shopping_admin", "reddit", "gitlab", "map",
                                                    "wikipedia", "homepage"}
    assert urls["shopping"] == "http://10.0.0.5:7770" and urls["shopping_admin"] == "http://10.0.0.5:7780/admin"
    assert urls["wikipedia"].startswith("http://10.0.0.5:8888/wikipedia_en_all_maxi_2022-05/")
    assert {placeholder(s) for s in urls} == {"__SHOPPING__", "__SHOPPING_ADMIN__", "__REDDIT__", "__GITLAB__",
                                              "__MAP__", "__WIKIPEDIA__", "__HOMEPAGE__"} == set(wa.PLACEHOLDERS.values())
    assert resolve_urls("__SHOPPING_ADMIN__/sales/order/ and __SHOPPING__/x", urls) == \
        "http://10.0.0.5:7780/admin/sales/order/ and http://10.0.0.5:7770/x"
    tasks = wa.load_suite(full_file(tmp_path, 30), "lite", site_urls="10.0.0.5", lite_ids=[1, 4, 2, 3])
    assert [t.config["start_url"] for t in tasks] == [urls["shopping_admin"], urls["map"], urls["reddit"], urls["gitlab"]]
    assert [unresolved(t.config) for t in tasks] == [[]] * 4
    assert tasks[1].config["eval"]["program_html"][0]["url"] == urls["gitlab"] + "/byteblaze/dotfiles/-/project_members"
    later = wa.load_suite(full_file(tmp_path, 30), "lite", lite_ids=[1])
    assert later[0].config["start_url"] == "__SHOPPING_ADMIN__"  # filled per episode instead


def test_site_urls_from_mappings_and_environment_variables():
    assert wa.site_urls({"GITLAB": "http://g:1/", "__MAP__": "https://m", "wa_reddit": "http://r"}) == \
        {"gitlab": "http://g:1", "map": "https://m", "reddit": "http://r"}
    assert wa.site_urls("https://h")["gitlab"] == "https://h:8023"
    env = {"SHOPPING": "h:7770", "WA_SHOPPING": "http://w:1", "GITLAB": "http://g:8023", "PATH": "/bin"}
    assert wa.site_urls_from_env(env) == {"shopping": "http://w:1", "gitlab": "http://g:8023"}
    with pytest.raises(ValueError, match="unknown WebArena site"):
        wa.site_urls({"classifieds": "http://c"})
    with pytest.raises(ValueError, match="http"):
        wa.site_urls({"gitlab": "ftp://g"})
    with pytest.raises(ValueError, match="bare host"):
        wa.site_urls("h:8000")


def test_missing_files_say_where_to_get_them(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError) as e:
        wa.load_suite(tmp_path / "test.raw.json", "train")
    assert isinstance(e.value, wa.SuiteNotFoundError)
    assert "test.raw.json" in str(e.value) and "web-arena-x/webarena" in str(e.value) and "libwebarena" in str(e.value)
    with pytest.raises(wa.SuiteNotFoundError, match="browsergym-webarenalite"):
        wa.load_suite(tmp_path / "test_webarena_lite.raw.json", "lite")
    monkeypatch.setattr(wa, "_installed", lambda subset: None)  # neither wheel installed
    with pytest.raises(wa.SuiteNotFoundError, match="none installed"):
        wa.load_suite(None, "train")
    monkeypatch.setattr(wa, "_installed", lambda subset: full_file(tmp_path, 812) if subset == "train" else None)
    assert len(wa.load_suite(None, "lite")) == 165  # from the installed 812 when the Lite wheel is not there
    (tmp_path / "empty").mkdir()
    with pytest.raises(wa.SuiteNotFoundError, match="N.json"):
        wa.load_suite(tmp_path / "empty", "lite")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TaskFormatError, match="not JSON"):
        wa.load_suite(bad, "lite")


def test_storage_states_are_kept_as_named_or_pointed_at_auth_dir(tmp_path):
    src = full_file(tmp_path, 30)
    ids = [0, 1, 6, 4]  # shopping, shopping_admin, gitlab|reddit, map
    named = wa.load_suite(src, "lite", lite_ids=ids)
    # without auth_dir the names stay: they say which sites login="storage_state" signs in to
    assert [t.config["storage_state"] for t in named] == [
        "./.auth/shopping_state.json", "./.auth/shopping_admin_state.json", "./.auth/gitlab.reddit_state.json", None]
    assert [t.storage_state for t in named][:3] == [t.config["storage_state"] for t in named][:3]
    assert all(t.require_login for t in named)  # login="sites" signs in through the logins
    auth = tmp_path / "auth"
    with pytest.raises(wa.SuiteNotFoundError, match="write_storage_states") as e:
        wa.load_suite(src, "lite", lite_ids=ids, auth_dir=auth)
    assert "gitlab.reddit_state.json" in str(e.value)
    auth.mkdir()
    for name in wa.STORAGE_STATE_FILES:
        (auth / name).write_text('{"cookies": [], "origins": []}')
    states = [t.config["storage_state"] for t in wa.load_suite(src, "lite", lite_ids=ids, auth_dir=auth)]
    assert states == [str(auth.resolve() / "shopping_state.json"), str(auth.resolve() / "shopping_admin_state.json"),
                      str(auth.resolve() / "gitlab.reddit_state.json"), None]


def test_helper_names_and_the_page_helper_rewrite(tmp_path):
    tasks = wa.load_suite(full_file(tmp_path, 40), "lite", lite_ids=range(40))
    assert wa.helper_names(tasks) == set(wa.HELPER_NAMES)
    member = next(t for t in tasks if "gitlab_get_project" in json.dumps(t.config))
    inlined = wa.load_suite(full_file(tmp_path, 40), "lite", lite_ids=[int(member.id)], inline_helpers=True)[0]
    loc = inlined.config["eval"]["program_html"][0]["locator"]
    assert loc.startswith("[...document.") and '"@vinta"' in loc and "func:" not in loc
    assert inlined.config["eval"]["program_html"][0]["url"] == member.config["eval"]["program_html"][0]["url"]
    assert member.config["eval"]["program_html"][0]["locator"].startswith("func:")  # the default keeps it


# --- helpers -----------------------------------------------------------------------------


class Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, code, body, ctype="text/html; charset=utf-8", headers=()):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


class FakeMagentoAPI(Quiet):
    """The few REST endpoints the shopping helpers call, with admin tokens that can be revoked."""

    tokens: ClassVar[set] = set()
    issued: ClassVar[list] = [0]
    requests: ClassVar[list] = []

    def _json(self, code, obj):
        self.send(code, json.dumps(obj), "application/json")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/rest/default/V1/integration/admin/token":
            if body == {"username": "admin", "password": "admin1234"}:
                self.issued[0] += 1
                tok = f"tok{self.issued[0]}"
                self.tokens.add(tok)
                return self._json(200, tok)
            return self._json(401, {"message": "The account sign-in was incorrect"})
        self._json(404, {"message": "no route"})

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        self.requests.append(self.path)
        if self.headers.get("Authorization", "").removeprefix("Bearer ") not in self.tokens:
            return self._json(401, {"message": "The consumer isn't authorized"})
        q = urllib.parse.parse_qs(url.query)
        if url.path == "/rest/V1/orders":
            assert q["searchCriteria[sortOrders][0][field]"] == ["created_at"]
            assert q["searchCriteria[sortOrders][0][direction]"] == ["DESC"]
            return self._json(200, {"items": [{"increment_id": "000000190", "entity_id": 190}], "total_count": 1})
        reviews = {"B0X": [{"nickname": "Old Reviewer", "ratings": [{"rating_name": "Rating", "percent": 60}]},
                           {"nickname": "Emma Lopez", "ratings": [{"rating_name": "Rating", "percent": 100}]}],
                   "B0EMPTY": []}
        parts = url.path.split("/")
        if url.path.startswith("/rest/V1/products/") and parts[-1] == "reviews":
            sku = urllib.parse.unquote(parts[-2])
            if sku in reviews:
                return self._json(200, reviews[sku])
        self._json(404, {"message": "not found"})


@pytest.fixture()
def magento():
    FakeMagentoAPI.tokens, FakeMagentoAPI.requests = set(), []
    s = Server(FakeMagentoAPI)
    yield s
    s.close()


class FakeProbe:
    def __init__(self, pages):
        self.pages, self.asked = pages, []

    def text(self, url, js, prep_actions=None):
        self.asked.append(url)
        return self.pages.get(url, "")


class PagedProbe(FakeProbe):
    """A probe that also opens pages for __page__ helpers: a fake page whose scripts give `roles[url]`."""

    def __init__(self, roles):
        super().__init__({})
        self.roles, self.opened = roles, []

    @contextlib.contextmanager
    def page(self, url):
        self.opened.append(url)
        role = self.roles.get(url)

        class Page:
            def evaluate(self, js):
                return role

        yield Page()


def test_shopping_helpers_use_the_rest_api_with_the_admin_token(magento):
    h = wa.make_helpers({"shopping": magento.url})
    assert h["shopping_get_latest_order_url"]() == f"{magento.url}/sales/order/view/order_id/190/"
    assert call_helper("shopping_get_sku_latest_review_author('B0X')", h, "") == "Emma Lopez"
    assert call_helper("shopping_get_sku_latest_review_rating('B0X')", h, "") == "100"
    assert h["shopping_get_sku_latest_review_author"]("B0EMPTY") == "" == h["shopping_get_sku_latest_review_rating"]("B0EMPTY")
    assert FakeMagentoAPI.issued[0] >= 1 and len(FakeMagentoAPI.tokens) == 1  # one token for all calls
    FakeMagentoAPI.tokens.clear()  # the site was reset: the token is gone, the helper signs in again
    assert h["shopping_get_sku_latest_review_author"]("B0X") == "Emma Lopez"
    with pytest.raises(EvaluationError, match="HTTP 404"):
        h["shopping_get_sku_latest_review_author"]("NO-SUCH")
    with pytest.raises(EvaluationError, match="no admin token|HTTP 401"):
        wa.make_helpers({"shopping": magento.url}, admin={"username": "admin", "password": "wrong"})[
            "shopping_get_latest_order_url"]()


def test_program_html_with_the_real_helpers_through_evaluate(magento):
    h = wa.make_helpers({"shopping": magento.url, "reddit": "http://127.0.0.1:9"})
    order = resolve_urls(webarena_task(2, ["shopping"], "order"), {"shopping": magento.url})
    page = f"{magento.url}/sales/order/view/order_id/190/"
    probe = FakeProbe({page: "Items Ordered B0SKU2 Qty 1"})
    result = evaluate(order, "", "http://x/last", probe, h)
    assert result.error is None and result.score == 1.0 and probe.asked == [page]
    review = webarena_task(5, ["shopping"], "review")
    assert evaluate(review, "", "http://x/last", FakeProbe({}), h).score == 1.0
    post = webarena_task(3, ["reddit"], "post")
    last = "http://127.0.0.1:9/f/books/12/-/comment/55"
    probe = FakeProbe({"http://127.0.0.1:9/f/books/12/": "post 3 by someone"})
    assert evaluate(post, "", last, probe, h).score == 1.0
    # the page helper reads the page the probe opens at the target's URL (__page__)
    member = resolve_urls(webarena_task(4, ["gitlab"], "member"), {"gitlab": "http://g"})
    members_page = "http://g/byteblaze/dotfiles/-/project_members"
    probe = PagedProbe({members_page: "Maintainer"})
    result = evaluate(member, "", "http://g/byteblaze/dotfiles", probe, h)
    assert result.error is None and result.score == 1.0 and probe.opened == [members_page]
    assert evaluate(member, "", "http://g/byteblaze/dotfiles", PagedProbe({members_page: "Guest"}), h).score == 0.0
    # a probe that opens no pages: a clear evaluation error, not a 0
    result = evaluate(member, "", "http://g/byteblaze/dotfiles", FakeProbe({}), h)
    assert result.score == 0.0 and "opens none" in result.error
    # a shop that does not answer: an evaluation error naming the API
    down = wa.make_helpers({"shopping": "http://127.0.0.1:9"}, timeout_s=2)
    result = evaluate(order, "", "http://x/last", FakeProbe({}), down)
    assert result.score == 0.0 and "shop REST API" in result.error


def test_reddit_get_post_url_cuts_to_the_post():
    f = wa.make_helpers({"reddit": "http://r:9999"})["reddit_get_post_url"]
    assert f("http://r:9999/f/books/12/some-title") == "http://r:9999/f/books/12/"
    assert f("http://r:9999/f/books/12/-/comment/7") == "http://r:9999/f/books/12/"
    assert f("http://r:9999/f/books") == "http://r:9999/f/books"  # not a post: as it is
    assert f("http://r:9999/user/someone") == "http://r:9999/user/someone"
    prefixed = wa.make_helpers({"reddit": "http://proxy/forum"})["reddit_get_post_url"]
    assert prefixed("http://proxy/forum/f/books/12/x") == "http://proxy/forum/f/books/12/"


def test_the_member_role_helper_reads_the_page_it_is_given():
    class Page:
        def __init__(self, value=None, fail=False):
            self.value, self.fail, self.js = value, fail, None

        def evaluate(self, js):
            self.js = js
            if self.fail:
                raise RuntimeError("page gone")
            return self.value

    f = wa.make_helpers({"gitlab": "http://g"})["gitlab_get_project_memeber_role"]
    page = Page("Maintainer")
    assert f(page, "vinta") == "Maintainer" and '"@vinta"' in page.js
    assert f(Page(None), "x") == "" and f(Page(fail=True), "x") == ""
    with pytest.raises(EvaluationError, match="a Playwright page"):
        f("http://g/p/-/project_members", "vinta")


# --- reachability and reset --------------------------------------------------------------


def closed_port_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


class Up(Quiet):
    def do_GET(self):
        if self.path.startswith("/broken"):
            return self.send(502, "GitLab is not responding")
        self.send(404 if self.path.startswith("/missing") else 200, "<p>ok</p>")


@pytest.fixture()
def up():
    s = Server(Up)
    yield s
    s.close()


def test_check_sites_names_every_unreachable_site(up):
    dead = closed_port_url()
    assert wa.check_sites({"shopping": up.url, "reddit": up.url + "/missing"}, 5) == {"shopping": 200, "reddit": 404}
    with pytest.raises(wa.SitesUnreachableError) as e:
        wa.check_sites({"shopping": up.url, "gitlab": up.url + "/broken", "map": dead, "reddit": dead + "/x"}, 5)
    text = str(e.value)
    assert "3 of 4" in text and "shopping at" not in text
    assert f"gitlab at {up.url}/broken: HTTP 502" in text and f"map at {dead}" in text and f"reddit at {dead}/x" in text
    assert "docker" in text and "environment_docker/README.md" in text


def test_reset_sites_runs_the_command_and_reports_failures(up, tmp_path):
    assert wa.reset_sites("echo resetting") >= 0.0
    assert wa.reset_sites([sys.executable, "-c", "print('ok')"], urls={"shopping": up.url}, wait_s=5) >= 0.0
    with pytest.raises(wa.SiteResetError) as e:
        wa.reset_sites("echo fine; echo 'docker: no such container gitlab' >&2; exit 3")
    assert "exited with 3" in str(e.value) and "no such container gitlab" in str(e.value)
    marker = tmp_path / "still-running"
    t0 = time.monotonic()
    with pytest.raises(wa.SiteResetError, match="did not finish within"):
        wa.reset_sites(f"echo started >&2; sleep 5; touch {marker}", timeout_s=0.5)
    assert time.monotonic() - t0 < 4
    time.sleep(0.2)
    assert not marker.exists()  # its process group was killed
    with pytest.raises(wa.SitesUnreachableError):
        wa.reset_sites("true", urls={"map": closed_port_url()}, wait_s=0.1)


def test_make_fixed_sites_wires_urls_logins_and_helpers(up):
    sites = wa.make_fixed_sites("10.9.9.9", check=False)
    assert isinstance(sites, FixedSites)
    ep = sites.open_episode()
    assert ep.urls == wa.site_urls("10.9.9.9") and set(ep.helpers) == set(wa.HELPER_NAMES)
    assert set(sites._logins) == set(wa.WEBARENA_SITES)
    sites.login(None, "map", ep)  # the sites without accounts need no login (and no browser)
    with pytest.raises(wa.SitesUnreachableError):
        wa.make_fixed_sites({"shopping": closed_port_url()}, timeout_s=2)
    assert wa.make_fixed_sites({"shopping": up.url}).open_episode().urls == {"shopping": up.url}


def test_a_run_requires_only_the_sites_its_tasks_use(up):
    tasks = [WebTask(webarena_task(i, sites)) for i, sites in enumerate([["shopping"], ["gitlab", "reddit"]])]
    tasks.append(WebTask({**webarena_task(7, ["shopping"]), "start_url": "__MAP__"}))  # a placeholder counts
    assert wa.sites_used(tasks) == {"shopping": ["0", "7"], "gitlab": ["1"], "reddit": ["1"], "map": ["7"]}
    dead = closed_port_url()
    urls = {"shopping": up.url, "gitlab": up.url, "reddit": up.url, "map": up.url, "homepage": dead, "wikipedia": dead}
    needed = wa.needed_site_urls(urls, tasks)
    assert needed == {s: up.url for s in ("shopping", "gitlab", "reddit", "map")}  # no homepage, no wikipedia
    sites = wa.make_fixed_sites(urls, require=needed, timeout_s=2)  # the dead homepage is not asked
    assert sites.open_episode().urls == urls  # every configured URL still fills placeholders
    with pytest.raises(wa.SitesUnreachableError, match="homepage"):
        wa.make_fixed_sites(urls, timeout_s=2)  # without `require`: every configured site, as before
    with pytest.raises(ValueError) as e:
        wa.needed_site_urls({"shopping": up.url}, tasks)
    text = str(e.value)
    assert "gitlab (tasks 1; 1 in all)" in text and "map (tasks 7; 1 in all)" in text and "reddit" in text
    assert "It has ['shopping']" in text and "shopping (" not in text


def test_no_real_task_uses_the_homepage_site():
    files = [f for f in (real_file("test_webarena_lite.raw.json") or wa._installed("lite"),
                         real_file("test_webarena.raw.json", "test.raw.json") or wa._installed("train")) if f]
    if not files:
        pytest.skip("WebArena's task files are not here (set ESOPT_WEBARENA_FILES to their folder)")
    for f in files:
        used = wa.sites_used(load_tasks(f))
        assert "homepage" not in used and {"shopping", "gitlab", "map"} <= set(used), f


# --- the real task files, when they are here ----------------------------------------------


def real_file(*names):
    folder = os.environ.get("ESOPT_WEBARENA_FILES")
    for name in names:
        if folder and (Path(folder) / name).is_file():
            return Path(folder) / name
    return None


def test_the_released_split_on_the_real_files():
    full = real_file("test_webarena.raw.json", "test.raw.json") or wa._installed("train")
    lite = real_file("test_webarena_lite.raw.json") or wa._installed("lite")
    if full is None or lite is None:
        pytest.skip("WebArena's task files are not here (set ESOPT_WEBARENA_FILES to their folder)")
    assert wa.read_lite_ids(lite) == list(wa.LITE_TASK_IDS)
    train = wa.load_suite(full, "train")  # verify_release: the authors' fingerprints
    assert len(train) == 582 and len(wa.load_suite(full, "val")) == 65
    assert [int(t.id) for t in train[:8]] == [267, 223, 515, 602, 428, 487, 669, 565]  # their generation 0 batch
    tasks = wa.load_suite(lite, "lite") + train
    assert len(tasks) == 747 and wa.helper_names(tasks) <= set(wa.HELPER_NAMES)


def test_every_real_lite_task_can_be_scored():
    """Each of the 165 real Lite configs runs through the vab evaluator (fake pages, helpers and
    judge) without an evaluation error: every evaluator kind, locator and helper they use is known.
    Except task 81, whose must_include is a string: an error in VAB's harness too (its assert)."""
    lite = real_file("test_webarena_lite.raw.json") or wa._installed("lite")
    if lite is None:
        pytest.skip("WebArena-Lite's task file is not here (set ESOPT_WEBARENA_FILES to its folder)")
    tasks = wa.load_suite(lite, "lite", site_urls="127.0.0.1")
    helpers = {name: (lambda *a, **kw: "http://127.0.0.1:7770/x") for name in wa.HELPER_NAMES}
    asked = []
    judge = CallableJudge(lambda **kw: asked.append(kw["kind"]) or False)
    for t in tasks:
        assert t.config[SEMANTICS_FIELD] == "vab"
        result = evaluate(t.config, "", "http://127.0.0.1:7770/x", PagedProbe({}), helpers, judge)
        if t.id == "81":
            assert result.score == 0.0 and "must_include is str 'yjlou'" in result.error
            continue
        assert result.error is None and result.score in (0.0, 1.0), (t.id, result)
    assert len(asked) >= 40  # the 36 + 4 fuzzy_match tasks asked the judge


# --- in the browser: logins, storage states, whole episodes -----------------------------------

FORM = """<html><head><title>{title}</title></head><body>{extra}
<form method="post" action="{action}" id="{form_id}">{fields}<button type="submit" class="action">{button}</button></form>
</body></html>"""
SHOP_FIELDS = ('<label for="email">Email</label><input name="login[username]" id="email" type="email">'
               '<label for="pass">Password</label><input name="login[password]" id="pass" type="password">')
ADMIN_FIELDS = ('<input name="login[username]" id="username" placeholder="user name">'
                '<input name="login[password]" id="login" type="password" placeholder="password">')
FORUM_FIELDS = ('<label for="login-username">Username</label><input name="_username" id="login-username">'
                '<label for="login-password">Password</label><input name="_password" id="login-password" type="password">')
GITLAB_FIELDS = ('<input name="user[login]" id="user_login" data-testid="username-field">'
                 '<input name="user[password]" id="user_password" type="password" data-testid="password-field">')
MEMBERS = """<html><body><table>
<tr><td data-label="Account"><span class="gl-avatar-labeled-sublabel">@byteblaze</span></td>
    <td class="col-max-role"><span>Owner</span></td></tr>
<tr><td data-label="Account"><span class="gl-avatar-labeled-sublabel">@vinta</span></td>
    <td class="col-max-role"><span>Maintainer</span></td></tr></table></body></html>"""

LATE = """<html><body><div id="members"></div><script>
setTimeout(() => { document.querySelector("#members").textContent = "@vinta Maintainer"; }, 700);
</script></body></html>"""


def fake_site(site):
    """A handler with the real site's login page (path, field names, button) and a page that shows
    whether the request is signed in; one cookie name per site (cookies do not keep to ports)."""
    cookie = f"{site}_session"
    user = wa.ACCOUNTS.get(site, {"username": "", "password": ""})

    class Handler(Quiet):
        def signed_in(self):
            return f"{cookie}=yes" in (self.headers.get("Cookie") or "")

        def form(self, action, fields, button, error=""):
            self.send(200, FORM.format(title=f"{site} login", action=action, fields=fields, button=button,
                                       form_id="login-form", extra=f'<div class="message-error">{error}</div>' if error else ""))

        def page(self, text):
            self.send(200, f"<html><body><h1>{text}</h1></body></html>")

        def do_GET(self):
            path = urllib.parse.urlparse(self.path).path
            failed = "failed" in self.path
            if site == "shopping":
                if path == "/customer/account/login/":
                    return self.form("/customer/account/loginPost/", SHOP_FIELDS, "Sign In",
                                     "Invalid login or password." if failed else "")
                return self.page("Welcome, Emma Lopez!" if self.signed_in() else "Default welcome msg!")
            if site == "shopping_admin":
                if not self.signed_in():
                    return self.form("/admin", ADMIN_FIELDS, "Sign in")
                return self.page("Dashboard")
            if site == "reddit":
                if path == "/login":
                    return self.form("/login_check", FORUM_FIELDS, "Log in")
                m = path.split("/")
                if len(m) >= 4 and m[1] == "f":
                    return self.send(200, f'<div class="submission__inner">post {m[3]} in {m[2]}</div>')
                return self.page(user["username"] if self.signed_in() else "Log in")
            if site == "gitlab":
                if path == "/users/sign_in":
                    if self.signed_in():
                        return self.redirect("/")
                    return self.form("/users/sign_in", GITLAB_FIELDS, "Sign in")
                if path.endswith("/-/project_members"):
                    return self.send(200, MEMBERS)
                if path.endswith("/-/late"):  # a page its script fills in after the load event
                    return self.send(200, LATE)
                return self.page(f"@{user['username']}" if self.signed_in() else "Sign in")
            self.page(site)

        def redirect(self, to, set_cookie=False):
            headers = [("Location", to)] + ([("Set-Cookie", f"{cookie}=yes; Path=/")] if set_cookie else [])
            self.send(302, "", headers=headers)

        def do_POST(self):
            form = urllib.parse.parse_qs(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
            got = [v[0] for k, v in sorted(form.items())]
            ok = sorted(got) == sorted([user["username"], user["password"]])
            back = {"shopping": "/customer/account/login/?failed=1", "shopping_admin": "/admin",
                    "reddit": "/login", "gitlab": "/users/sign_in"}[site]
            home = {"shopping": "/customer/account/", "shopping_admin": "/admin/admin/dashboard/",
                    "reddit": "/", "gitlab": "/"}[site]
            self.redirect(home if ok else back, set_cookie=ok)

    return Handler


@pytest.fixture(scope="module")
def web():
    from conftest import require_web

    require_web()
    from esopt.envs.web import WebEnv, WebRuntime

    servers = {s: Server(fake_site(s)) for s in ("shopping", "shopping_admin", "reddit", "gitlab", "map")}
    urls = {s: srv.url for s, srv in servers.items()}
    urls["shopping_admin"] += "/admin"
    urls["wikipedia"] = urls["homepage"] = servers["map"].url
    rt = WebRuntime(sites=wa.make_fixed_sites(urls), browsers=1)
    try:
        yield rt, WebEnv(rt, max_turns=3), urls
    finally:
        rt.close()
        for srv in servers.values():
            srv.close()


def episode(env, task, action="stop []"):
    env.reset(task if isinstance(task, WebTask) else WebTask(task))
    _, reward, done, info = env.step(action)
    assert done
    return reward, info


def signed_in_task(tid, sites, start, text):
    t = webarena_task(tid, sites, "string_match")
    t["start_url"], t["storage_state"] = start, None
    t["eval"] = {**t["eval"], "eval_types": ["program_html"], "program_html": [
        {"url": "last", "locator": "document.querySelector('h1').outerText", "required_contents": {"must_include": [text]}}]}
    return t


def test_episodes_sign_in_through_each_sites_login_form(web):
    _, env, _ = web
    # (reddit's and gitlab's forms are used by the storage_state and refused-login tests)
    cases = [(["shopping"], "__SHOPPING__/customer/account/", "Welcome, Emma Lopez"),
             (["map", "shopping_admin"], "__SHOPPING_ADMIN__", "Dashboard")]
    for i, (sites, start, text) in enumerate(cases):
        reward, info = episode(env, signed_in_task(9000 + i, sites, start, text))
        assert reward == 1.0 and info["error"] is None, (sites, info)


class Owner:
    """What a runtime context belongs to (WebRuntime keeps a weak reference)."""


def test_a_refused_login_is_a_login_error(web):
    rt, _, urls = web
    owner = Owner()
    slot, gen, ctx = rt.new_context(owner)
    try:
        with pytest.raises(wa.LoginError, match="Invalid login or password"):
            wa.login(ctx, "shopping", urls["shopping"], {"username": "emma.lopez@gmail.com", "password": "wrong"})
        with pytest.raises(wa.LoginError, match="no login form"):
            wa.login(ctx, "reddit", urls["map"], None)  # not a login page
        assert isinstance(wa.LoginError("x"), RuntimeError)  # the environment ends such an episode as "sites"
        wa.login(ctx, "gitlab", urls["gitlab"])
        wa.login(ctx, "gitlab", urls["gitlab"])  # signed in already: redirected, nothing to do
    finally:
        rt.release(slot, gen, ctx)


def test_storage_state_files_sign_episodes_in_without_a_login(web, tmp_path):
    rt, env, urls = web
    written = wa.write_storage_states(urls, tmp_path / "auth", names=["shopping_state.json", "gitlab.reddit_state.json"],
                                      pool=rt.pool)
    assert [p.name for p in written] == ["shopping_state.json", "gitlab.reddit_state.json"]
    cookies = {c["name"] for c in json.loads(written[1].read_text())["cookies"]}
    assert cookies == {"gitlab_session", "reddit_session"}
    src = tmp_path / "test.raw.json"
    t = signed_in_task(9100, ["gitlab", "reddit"], "__REDDIT__/", "MarvelsGrantMan136")
    t["storage_state"] = "./.auth/gitlab.reddit_state.json"
    src.write_text(json.dumps([t]))
    task = wa.load_suite(src, "lite", lite_ids=[9100], auth_dir=tmp_path / "auth")[0]
    assert task.config["storage_state"] == str((tmp_path / "auth" / "gitlab.reddit_state.json").resolve())
    reward, info = episode(env, task)
    assert reward == 1.0, info
    # make_logins with auth_dir takes a site's cookies from <site>_state.json
    logins = wa.make_logins(auth_dir=tmp_path / "auth")
    owner = Owner()
    slot, gen, ctx = rt.new_context(owner)
    try:
        logins["shopping"](ctx, Episode(token="t", urls=urls))
        assert {c["name"] for c in ctx.cookies()} == {"shopping_session"}
    finally:
        rt.release(slot, gen, ctx)


def test_webarena_helpers_in_whole_episodes(web, tmp_path):
    _, env, _ = web
    post = webarena_task(12, ["reddit"], "post")
    post["start_url"] = "__REDDIT__/f/books/12/-/comment/3"
    member = webarena_task(4, ["gitlab"], "member")
    member["start_url"] = "__GITLAB__/byteblaze/dotfiles"
    post["require_login"] = member["require_login"] = False  # the logins are tested above
    nobody = json.loads(json.dumps(member).replace("'vinta'", "'nobody'"))
    nobody["task_id"] = 5
    src = tmp_path / "test.raw.json"
    src.write_text(json.dumps([post, member, nobody]))
    post_task, member_task = wa.load_suite(src, "lite", lite_ids=[12, 4])
    reward, info = episode(env, post_task)  # reddit_get_post_url('__last_url__') -> the post's page
    assert reward == 1.0, info
    reward, info = episode(env, member_task)  # __page__: a live page at the members URL
    assert reward == 1.0 and info["error"] is None, info
    nobody_task = wa.load_suite(src, "lite", lite_ids=[5])[0]
    reward, info = episode(env, nobody_task)
    assert reward == 0.0 and info["error"] is None, info
    at_last = json.loads(json.dumps(member))  # url "last": the helper gets the final page itself
    at_last["eval"]["program_html"][0]["url"] = "last"
    at_last["start_url"], at_last["storage_state"] = "__GITLAB__/byteblaze/dotfiles/-/project_members", None
    reward, info = episode(env, WebTask(at_last))
    assert reward == 1.0 and info["error"] is None, info
    inlined, inlined_nobody = wa.load_suite(src, "lite", lite_ids=[4, 5], inline_helpers=True)
    reward, info = episode(env, inlined)  # the same check as a JavaScript locator on the members page
    assert reward == 1.0 and info["error"] is None, info
    reward, info = episode(env, inlined_nobody)
    assert reward == 0.0 and info["error"] is None


def test_vab_semantics_read_pages_as_vab_does(web, monkeypatch):
    """VAB waits after opening a check's URL (3 s; 1.5 here) and reads a script's null as "None"."""
    from esopt.envs.web import env as env_module

    _, env, _ = web
    monkeypatch.setattr(env_module, "VAB_SETTLE_S", 1.5)
    t = webarena_task(7, ["gitlab"], "member")
    t["require_login"], t["storage_state"], t["start_url"] = False, None, "__GITLAB__/byteblaze/dotfiles"
    t["eval"] = {**t["eval"], "eval_types": ["program_html"], "program_html": [
        {"url": "__GITLAB__/byteblaze/dotfiles/-/late", "locator": "document.querySelector('#members').outerText",
         "required_contents": {"must_include": ["Maintainer"]}},
        {"url": "last", "locator": "document.body.getAttribute('data-none')", "required_contents": {"exact_match": "None"}}]}
    reward, info = episode(env, WebTask(t))  # webarena: read at once (empty yet), null is ""
    assert reward == 0.0 and info["error"] is None and info["eval"]["program_html"]["targets"] == [0.0, 0.0], info
    reward, info = episode(env, WebTask({**t, SEMANTICS_FIELD: "vab"}))
    assert reward == 1.0 and info["error"] is None and info["eval"]["program_html"]["targets"] == [1.0, 1.0], info


# --- the evaluation loop on stand-in sites: a reset before every round, judge failures ----------


class ExitEngine:
    """An engine that answers every prompt with `exit(message="yjlou")`: each episode ends on its
    first turn with that answer. `episodes` counts the prompts it answered."""

    def __init__(self, tok):
        self.tok, self.episodes = tok, 0

    def generate(self, prompts, sampling, seed, *, keys=None, logprobs=False, counters=None):
        from esopt.agent.engine import Completion

        self.episodes += len(prompts)
        text = 'exit(message="yjlou")'
        return [Completion(self.tok(text, add_special_tokens=False)["input_ids"], text) for _ in prompts]


@pytest.fixture(scope="module")
def loop_tok():
    from esopt.models.tokenizer import qwen35_chat_template, train_tokenizer

    tok = train_tokenizer(['exit(message="yjlou") Who has access to the repo? <html><body>ok</body></html>'] * 20,
                          vocab_size=300)
    tok.chat_template = qwen35_chat_template()
    return tok


def fuzzy_task(i):
    """A WebArena-Lite-like fuzzy_match task on the gitlab stand-in, scored with VAB's semantics."""
    t = webarena_task(i, ["gitlab"], "string_match")
    t.update(start_url="__GITLAB__", storage_state=None, require_login=False, **{SEMANTICS_FIELD: "vab"})
    t["eval"] = {**t["eval"], "reference_answers": {"fuzzy_match": ["yjlou"]}}
    return WebTask(t)


def web_job(**web):
    """The web episode settings of a web block with `web` set and the schema's defaults for the
    rest (config/smoke.yaml's block stripped to the keys the schema and its methods require)."""
    from dataclasses import replace

    from esopt.config import validate_config
    from esopt.spec.agents import WebJob

    raw = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    required = ("max_turns", "max_new_tokens", "sampling", "seeds", "methods", "es", "trace2skill", "evaluate")
    sets = {k: raw["web"][k] for k in ("train", "eval")}
    if web.get("sites", "local") != "local":  # the real sites take WebArena's tasks
        real = {"source": "webarena_lite", "path": "test.raw.json"}
        sets = {"train": real, "eval": {"lite": real}}
    judge = web.pop("judge", None)  # a Python callable here: no config value
    raw["web"] = {k: raw["web"][k] for k in required} | sets | web
    job = WebJob.from_config(validate_config(raw))
    return replace(job, episodes=replace(job.episodes, judge=judge))


def evaluate_on_stand_ins(tmp_path, tok, judge, samples, tasks):
    """evaluation_rounds as `esopt evaluate --benchmark web` runs them (episode_envs, site_reset), on a
    gitlab stand-in, with a reset script that logs each run and takes 0.3 s; web.sites also
    names a homepage no task uses, and nothing serves it. Returns (rounds or the error, the
    resets, the engine, the reset script's log)."""
    from conftest import require_web

    require_web()
    from esopt.agent.rollout import Sampling
    from esopt.runs import tool_episodes as te

    resets_log = tmp_path / "resets.log"
    site = Server(Up)
    job = web_job(sites={"gitlab": site.url, "homepage": closed_port_url()}, max_turns=2, judge=judge,
                  reset=f"echo reset >> {resets_log}; sleep 0.3", browsers=1)
    engine = ExitEngine(tok)
    reset = te.site_reset(job, tasks)
    try:
        with te.episode_envs(job, "web", [], tasks=tasks, reset=reset) as make_env:
            spec = te.ToolEpisodeSpec(benchmark="web", max_turns=2, max_tool_calls=None, history_turns=0,
                                      sampling=Sampling(do_sample=False, max_new_tokens=16), episodes=job,
                                      make_env=make_env, in_flight=2)
            try:
                out = te.evaluation_rounds(engine, tok, spec, [], tasks, samples, seed=0, reset=reset)
            except te.JudgeFailureError as e:
                out = e
    finally:
        site.close()
    return out, reset, engine, resets_log


def test_the_sites_are_reset_before_every_evaluation_round_and_timed(tmp_path, loop_tok):
    from esopt.runs import tool_episodes as te

    assert te.site_reset(web_job(sites="local", reset="true")) is None  # local sites: no reset
    tasks = [fuzzy_task(i) for i in range(2)]
    rounds, reset, engine, resets_log = evaluate_on_stand_ins(tmp_path, loop_tok, lambda **kw: True, 3, tasks)
    assert [len(r) for r in rounds] == [2, 2, 2] and all(t.info["success"] for r in rounds for t in r)
    assert resets_log.read_text().split() == ["reset"] * 3  # one run before each of the 3 rounds
    assert [r["when"] for r in reset.records] == ["job start", "evaluation sample 2", "evaluation sample 3"]
    assert all(0.3 <= r["command_seconds"] <= r["seconds"] < 10 for r in reset.records)
    assert set(reset.urls) == {"gitlab"}  # the unserved homepage is neither checked nor waited for


def test_a_judge_failure_stops_the_evaluation_round_instead_of_scoring_zero(tmp_path, loop_tok, caplog):
    from esopt.runs import tool_episodes as te

    asked = []

    def judge(**kw):  # answers the first round's 3 questions, then its endpoint is down
        asked.append(kw)
        if len(asked) > 3:
            raise ConnectionError("judge endpoint down")
        return "correct"

    tasks = [fuzzy_task(i) for i in range(3)]
    err, reset, engine, _ = evaluate_on_stand_ins(tmp_path, loop_tok, judge, 3, tasks)
    assert isinstance(err, te.JudgeFailureError)
    assert [tid for tid, _ in err.failures] == ["0", "1"]  # the second round's first chunk (2 in flight)
    assert all("JudgeError" in why and "judge endpoint down" in why for _, why in err.failures)
    assert "evaluation sample 2 (2 of 3 episodes run)" in str(err) and "never scored 0" in str(err)
    assert engine.episodes == 3 + 2  # the round stopped: its third task never ran, and no third round
    assert [r["when"] for r in reset.records] == ["job start", "evaluation sample 2"]
    assert "judge endpoint down" in caplog.text


def test_local_episodes_show_webarenas_addresses_and_take_them_back():
    """What the agent reads and writes: an episode's URLs (a free port and a random token, new
    every run) as WebArena's addresses on localhost, and back; longest site first, whole words
    only; sites without a shown URL (FixedSites) pass through."""
    from esopt.envs.web.sites import SHOWN_URLS

    real = {"shopping": "http://127.0.0.1:41234/ab12", "shopping_admin": "http://127.0.0.1:41234/ab12/admin",
            "reddit": "http://127.0.0.1:41235/ab12"}
    ep = Episode(token="ab12", urls=real, shown={s: SHOWN_URLS[s] for s in real})
    wa_urls = wa.site_urls("localhost")
    assert SHOWN_URLS["shopping"] == wa_urls["shopping"] and SHOWN_URLS["reddit"] == wa_urls["reddit"]
    assert SHOWN_URLS["gitlab"] == wa_urls["gitlab"]
    assert ep.show("URL: http://127.0.0.1:41234/ab12/admin/orders?x=1") == "URL: http://localhost:7770/admin/orders?x=1"
    assert ep.show("at http://127.0.0.1:41235/ab12/f/1 and http://127.0.0.1:41234/ab12") == (
        "at http://localhost:9999/f/1 and http://localhost:7770")
    assert ep.unshow("http://localhost:7770/admin") == real["shopping_admin"]
    assert ep.unshow("http://localhost:9999/f/1#c") == real["reddit"] + "/f/1#c"
    assert ep.unshow("http://localhost:77701/x") == "http://localhost:77701/x"  # not a shown site
    assert ep.unshow(ep.show(real["shopping"] + "/cart")) == real["shopping"] + "/cart"
    assert ep.shown_urls == {"shopping": "http://localhost:7770", "shopping_admin": "http://localhost:7770/admin",
                             "reddit": "http://localhost:9999"}
    fixed = FixedSites({"shopping": "http://shop.example:7770"}).open_episode()
    assert fixed.show("http://shop.example:7770/x") == "http://shop.example:7770/x" == fixed.unshow("http://shop.example:7770/x")
    assert fixed.shown_urls == {"shopping": "http://shop.example:7770"}


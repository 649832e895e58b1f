"""Replay of recorded WebArena-Lite episodes, scored as VisualAgentBench's harness scores them.

Eleven real Lite tasks (tests/data/web_replay/tasks.json, copied from VAB-WebArena-Lite/new/
test_webarena_lite.raw.json of THUDM/VisualAgentBench @ 9055fc2) and 24 episodes written by
hand for them (episodes.json: the agent's replies in the harness's do()/exit() syntax, the
final answer, and the score the harness gives, each derived in its "why" from the harness's
evaluators.py). They run in a real WebEnv in real Chromium against stand-in sites: small
stdlib HTTP servers serving, at the real sites' URL paths, pages with the elements the
episodes use (tests/data/web_replay/pages/) and the state changes program_html reads (a
posted comment, an edited bio, a placed order, the shop's REST API for
shopping_get_latest_order_url). The tasks load through webarena.load_suite with the
stand-ins' URLs and storage_state files that write_storage_states made through the
stand-ins' login forms, as the harness signs in from storage_state. Each episode must end by
its exit call with the recorded answer, no refused action, and the harness's score.

The episodes run as the paper config runs them (the harness's observation "webrl", the
authors' prompt, the harness's reply parser, one tab per " |AND| " start URL). Skipped
without the web extra or chromium unless ESOPT_WEB_REQUIRED is set."""

import http.server
import json
import re
import string
import urllib.parse
from pathlib import Path

import pytest

from conftest import Server, require_web

require_web()

from esopt.envs.web import WebEnv, WebRuntime
from esopt.envs.web import env as env_module
from esopt.envs.web import webarena as wa
from esopt.envs.web.evaluators import SEMANTICS_FIELD, evaluate
from esopt.envs.web.expert import find_element
from esopt.envs.web.observe import MODES
from esopt.envs.web.tasks import resolve_urls

DATA = Path(__file__).parent / "data" / "web_replay"
PAGES = DATA / "pages"
SITES = json.loads((DATA / "sites.json").read_text())
RECORD = json.loads((DATA / "episodes.json").read_text())
EPISODES = {e["name"]: e for e in RECORD["episodes"]}
ACCOUNTS = wa.ACCOUNTS


# --- the stand-in sites ------------------------------------------------------------------


class State:
    """What the stand-in sites hold that episodes change; reset before every episode, as the
    harness resets the real sites between runs."""

    def __init__(self):
        self.reset()

    def reset(self):
        shop, forum = SITES["shopping"], SITES["reddit"]
        self.cart: list[str] = []
        self.orders = [dict(o) for o in shop["orders"]]
        self.posts = [dict(p, comments=[]) for p in forum["posts"]]
        self.bio = ""
        self.tokens: set[str] = set()


STATE = State()
PRODUCTS = {p["slug"]: p for p in SITES["shopping"]["products"]}
BY_SKU = {p["sku"]: p for p in SITES["shopping"]["products"]}


def render(site: str, template: str, **values) -> str:
    return string.Template((PAGES / site / f"{template}.html").read_text()).substitute(values)


def esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


class Handler(http.server.BaseHTTPRequestHandler):
    """Common plumbing: quiet, send a page or a redirect, read a form, the site's session cookie
    (one name per site: cookies do not keep to ports)."""

    site = ""

    def log_message(self, *args):
        pass

    def send(self, code, body, ctype="text/html; charset=utf-8", headers=()):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def redirect(self, to, sign_in=False):
        cookie = [("Set-Cookie", f"{self.site}_session=signed-in; Path=/")] if sign_in else []
        self.send(302, "", headers=[("Location", to), *cookie])

    def signed_in(self) -> bool:
        return f"{self.site}_session=signed-in" in (self.headers.get("Cookie") or "")

    def form(self) -> dict[str, str]:
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        return {k: v[0] for k, v in urllib.parse.parse_qs(raw, keep_blank_values=True).items()}

    def url(self):
        u = urllib.parse.urlparse(self.path)
        return u.path, {k: v[0] for k, v in urllib.parse.parse_qs(u.query).items()}

    def page(self, title, body, **layout):
        self.send(200, render(self.site, "layout", title=title, body=body, **layout))

    def not_found(self):
        self.send(404, "<html><body><h1>404 Not Found</h1></body></html>")


def product_item(p):
    return f'<li class="product-item"><a href="/{p["slug"]}.html">{esc(p["name"])}</a> {p["price"]} ({p["rating"]}%)</li>'


class Shop(Handler):
    """Magento's storefront paths: /catalogsearch/result/?q=, category pages with price filters and a
    price sort, /<product>.html, /checkout/cart/, /checkout/, /sales/order/history/,
    /sales/order/view/order_id/N/, the customer login, and the REST endpoints the
    shopping_get_latest_order_url helper calls."""

    site = "shopping"

    def page(self, title, body):
        greeting = "Welcome, Emma Lopez!" if self.signed_in() else '<a href="/customer/account/login/">Sign In</a>'
        super().page(title, body, greeting=greeting)

    def do_GET(self):
        path, q = self.url()
        if path.startswith("/rest/"):
            return self.rest_get(path)
        if path == "/":
            return self.page("Home Page", render("shopping", "home", products="".join(
                product_item(p) for p in list(PRODUCTS.values())[:3])))
        if path == "/contact/":
            return self.page("Contact Us", render("shopping", "contact"))
        if path == "/customer/account/login/":
            return self.page("Customer Login", render("shopping", "login", error=""))
        if path == "/catalogsearch/result/":
            words = q.get("q", "").lower().split()
            hits = [p for p in PRODUCTS.values() if words and all(w in (p["name"] + " " + p["keywords"]).lower() for w in words)]
            return self.page(f"Search results for: '{q.get('q', '')}'", render(
                "shopping", "listing", heading=f"Search results for: '{esc(q.get('q', ''))}'", toolbar="", filters="",
                products="".join(product_item(p) for p in hits) or "<li>Your search returned no results.</li>"))
        if path.endswith(".html") and path[1:-5] in SITES["shopping"]["categories"]:
            return self.category(path, q)
        if path.endswith(".html") and path[1:-5] in PRODUCTS:
            p = PRODUCTS[path[1:-5]]
            added = q.get("added") == p["sku"]
            message = (f'You added {esc(p["name"])} to your <a href="/checkout/cart/">shopping cart</a>.' if added else "")
            return self.page(p["name"], render("shopping", "product", message=message, name=esc(p["name"]), price=p["price"],
                                               rating=p["rating"], sku=p["sku"], description=esc(p.get("description", ""))))
        if path.rstrip("/") == "/checkout/cart":
            rows = "".join(f'<tr><td class="item">{esc(BY_SKU[s]["name"])}</td><td>{BY_SKU[s]["price"]}</td></tr>' for s in STATE.cart)
            return self.page("Shopping Cart", render("shopping", "cart", items=rows,
                                                     empty="" if rows else "You have no items in your shopping cart."))
        if not self.signed_in() and path.startswith(("/customer/account", "/sales/", "/checkout")):
            return self.redirect("/customer/account/login/")
        if path == "/customer/account/":
            return self.page("My Account", render("shopping", "account"))
        if path == "/checkout/":
            rows = "".join(f'<tr><td>{esc(BY_SKU[s]["name"])}</td><td>{BY_SKU[s]["price"]}</td></tr>' for s in STATE.cart)
            return self.page("Checkout", render("shopping", "checkout", items=rows))
        if path == "/checkout/onepage/success/":
            n = STATE.orders[-1]["id"]
            return self.page("Success Page", render("shopping", "success", id=n, number=f"{n:09d}"))
        if path == "/sales/order/history/":
            rows = "".join(f'<tr><td>{o["id"]:09d}</td><td>{o["date"]}</td><td>{o["total"]}</td><td>{o["status"]}</td>'
                           f'<td><a href="/sales/order/view/order_id/{o["id"]}/">View Order</a></td></tr>'
                           for o in reversed(STATE.orders))
            return self.page("My Orders", render("shopping", "orders", rows=rows))
        m = re.fullmatch(r"/sales/order/view/order_id/(\d+)/?", path)
        order = next((o for o in STATE.orders if m and o["id"] == int(m.group(1))), None)
        if order:
            items = "".join(f'<tr><td>{esc(BY_SKU[s]["name"])}</td><td>SKU: {s}</td></tr>' for s in order["skus"])
            return self.page(f"Order # {order['id']:09d}", render("shopping", "order", number=f"{order['id']:09d}",
                                                                  status=order["status"], items=items))
        self.not_found()

    def category(self, path, q):
        heading, kind = SITES["shopping"]["categories"][path[1:-5]]
        items = [p for p in PRODUCTS.values() if p["category"] == kind]
        band = q.get("price")
        if band:
            lo, hi = (float(x) for x in band.split("-"))
            items = [p for p in items if lo <= float(p["price"][1:]) < hi]
        if q.get("product_list_order") == "price":
            items.sort(key=lambda p: float(p["price"][1:]))

        def link(**extra):  # Magento keeps the parameters already set and appends the new one
            return path + "?" + urllib.parse.urlencode({**q, **extra})

        toolbar = f'Sort By <a href="{esc(link(product_list_order="price"))}">Price</a>'
        filters = "Price " + " ".join(f'<a href="{esc(link(price=v))}">{esc(label)}</a>'
                                      for v, label in SITES["shopping"]["price_filters"])
        self.page(heading, render("shopping", "listing", heading=esc(heading), toolbar=toolbar, filters=filters,
                                  products="".join(product_item(p) for p in items)))

    def do_POST(self):
        path, _ = self.url()
        if path == "/rest/default/V1/integration/admin/token":
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            admin = ACCOUNTS["shopping_site_admin"]
            if body != {"username": admin["username"], "password": admin["password"]}:
                return self.send(401, json.dumps({"message": "The account sign-in was incorrect"}), "application/json")
            STATE.tokens.add(token := f"token{len(STATE.tokens)}")
            return self.send(200, json.dumps(token), "application/json")
        form = self.form()
        if path == "/customer/account/loginPost/":
            ok = (form.get("login[username]"), form.get("login[password]")) == tuple(ACCOUNTS["shopping"].values())
            return self.redirect("/customer/account/" if ok else "/customer/account/login/", sign_in=ok)
        if path == "/checkout/cart/add/":
            sku = form.get("sku", "")
            if sku in BY_SKU:
                STATE.cart.append(sku)
                return self.redirect(f"/{BY_SKU[sku]['slug']}.html?added={sku}")
        if path == "/checkout/place/" and self.signed_in() and STATE.cart:
            STATE.orders.append({"id": STATE.orders[-1]["id"] + 1, "date": "6/12/23", "total": "", "status": "Pending",
                                 "skus": list(STATE.cart)})
            STATE.cart.clear()
            return self.redirect("/checkout/onepage/success/")
        self.not_found()

    def rest_get(self, path):
        if self.headers.get("Authorization", "").removeprefix("Bearer ") not in STATE.tokens:
            return self.send(401, json.dumps({"message": "The consumer isn't authorized"}), "application/json")
        if path == "/rest/V1/orders":  # newest first, as the helper's searchCriteria asks
            latest = max(STATE.orders, key=lambda o: o["id"])
            return self.send(200, json.dumps({"items": [{"increment_id": f"{latest['id']:09d}"}], "total_count": 1}),
                             "application/json")
        self.send(404, json.dumps({"message": "not found"}), "application/json")


class Forum(Handler):
    """Postmill's paths: /, /forums, /f/<forum>, /submit/<forum>, /f/<forum>/<id>[/<slug>] with its
    comment form, /user/<name> with /edit_biography, /login and /login_check."""

    site = "reddit"

    def page(self, title, body):
        user = SITES["reddit"]["user"]
        account = f'<a href="/user/{user}">{user}</a>' if self.signed_in() else '<a href="/login">Log in</a>'
        super().page(title, body, account=account)

    def post_url(self, p):
        return f"/f/{p['forum']}/{p['id']}/{p['slug']}"

    def do_GET(self):
        path, _ = self.url()
        parts = [x for x in path.split("/") if x]
        user = SITES["reddit"]["user"]
        if path in ("/", "/forums"):
            forums = "".join(f'<li><a href="/f/{f}">{f}</a></li>' for f in SITES["reddit"]["forums"])
            posts = "".join(f'<li><a href="{self.post_url(p)}">{esc(p["title"])}</a></li>' for p in STATE.posts)
            return self.page("Postmill", render("reddit", "front", forums=forums, posts=posts))
        if path == "/login":
            return self.page("Log in", render("reddit", "login"))
        if len(parts) == 2 and parts[0] == "f" and parts[1] in SITES["reddit"]["forums"]:
            posts = "".join(f'<li><a href="{self.post_url(p)}">{esc(p["title"])}</a></li>'
                            for p in STATE.posts if p["forum"] == parts[1])
            return self.page(f"/f/{parts[1]}", render("reddit", "forum", forum=parts[1], posts=posts))
        if len(parts) >= 3 and parts[0] == "f":
            p = next((p for p in STATE.posts if str(p["id"]) == parts[2] and p["forum"] == parts[1]), None)
            if p is not None:
                comments = "".join(f'<div class="comment"><div class="comment__body">{esc(c)}</div></div>' for c in p["comments"])
                return self.page(p["title"], render(
                    "reddit", "post", title_text=esc(p["title"]), author=p["author"], forum=p["forum"],
                    body_text=esc(p["body"]), count=len(p["comments"]), comments=comments,
                    action=f"/f/{p['forum']}/{p['id']}/-/comment"))
        if not self.signed_in() and (parts[:1] == ["submit"] or path.endswith("/edit_biography")):
            return self.redirect("/login")
        if len(parts) == 2 and parts[0] == "submit":
            return self.page("Create submission", render("reddit", "submit", forum=parts[1]))
        if parts == ["user", user]:
            bio = f'<div class="user-bio__biography">{esc(STATE.bio)}</div>' if STATE.bio else ""
            edit = f'<a href="/user/{user}/edit_biography">Edit biography</a>' if self.signed_in() else ""
            return self.page(user, render("reddit", "user", user=user, bio=bio, edit=edit))
        if parts == ["user", user, "edit_biography"]:
            return self.page("Edit biography", render("reddit", "edit_bio", user=user, bio=esc(STATE.bio)))
        self.not_found()

    def do_POST(self):
        path, _ = self.url()
        parts = [x for x in path.split("/") if x]
        form = self.form()
        if path == "/login_check":
            ok = (form.get("_username"), form.get("_password")) == tuple(ACCOUNTS["reddit"].values())
            return self.redirect("/" if ok else "/login", sign_in=ok)
        if not self.signed_in():
            return self.redirect("/login")
        if len(parts) == 2 and parts[0] == "submit" and parts[1] in SITES["reddit"]["forums"]:
            title = form.get("submission[title]", "").strip()
            slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
            p = {"id": max(p["id"] for p in STATE.posts) + 1, "forum": parts[1], "slug": slug, "title": title,
                 "body": form.get("submission[body]", ""), "author": SITES["reddit"]["user"], "comments": []}
            STATE.posts.append(p)
            return self.redirect(self.post_url(p))
        if parts[:1] == ["f"] and path.endswith("/-/comment"):
            p = next((p for p in STATE.posts if str(p["id"]) == parts[2]), None)
            if p is not None:
                p["comments"].insert(0, form.get("reply_to_submission[comment]", ""))
                return self.redirect(self.post_url(p))
        if path == f"/user/{SITES['reddit']['user']}/edit_biography":
            STATE.bio = form.get("user_biography[biography]", "")
            return self.redirect(f"/user/{SITES['reddit']['user']}")
        self.not_found()


class CodeHost(Handler):
    """GitLab's paths: the dashboard, /a11yproject/a11yproject.com, its /-/issues?state= lists and
    /-/issues/<iid>, /users/sign_in."""

    site = "gitlab"
    project = "/a11yproject/a11yproject.com"

    def do_GET(self):
        path, q = self.url()
        if path == "/users/sign_in":
            return self.redirect("/") if self.signed_in() else self.page("Sign in", render("gitlab", "login"))
        if not self.signed_in():
            return self.redirect("/users/sign_in")
        issues = SITES["gitlab"]["issues"]
        if path == "/":
            return self.page("Projects - Dashboard", render("gitlab", "dashboard"))
        if path == self.project:
            return self.page("a11yproject.com", render("gitlab", "project"))
        if path == self.project + "/-/issues":
            state = {"opened": "Open", "closed": "Closed"}.get(q.get("state", "opened"))  # "all": None
            shown = [i for i in issues if state is None or i["state"] == state]
            rows = "".join(f'<li><a href="{self.project}/-/issues/{i["iid"]}">{esc(i["title"])}</a> #{i["iid"]} '
                           f'created {i["created"]}</li>' for i in sorted(shown, key=lambda i: i["created"], reverse=True))
            return self.page("Issues", render("gitlab", "issues", issues=rows))
        m = re.fullmatch(re.escape(self.project) + r"/-/issues/(\d+)", path)
        issue = next((i for i in issues if m and i["iid"] == int(m.group(1))), None)
        if issue:
            return self.page(issue["title"], render("gitlab", "issue", state=issue["state"], issue_title=esc(issue["title"]),
                                                    iid=issue["iid"], created=issue["created"], author=issue["author"]))
        self.not_found()

    def do_POST(self):
        form = self.form()
        ok = (form.get("user[login]"), form.get("user[password]")) == tuple(ACCOUNTS["gitlab"].values())
        self.redirect("/" if ok else "/users/sign_in", sign_in=ok)


# --- the replay ---------------------------------------------------------------------------


def judge(*, intent, reference, answer, kind):
    """The stand-in for fuzzy_match's LLM judge: the answer means the reference when it holds the
    words episodes.json lists for the task (deterministic)."""
    task = next(t for t in RECORD["judge"] if t != "_about" and TASKS_BY_INTENT.get(intent) == t)
    JUDGED.append({"reference": reference, "answer": answer, "kind": kind})
    return "correct" if all(w in answer.lower() for w in RECORD["judge"][task]) else "incorrect"


TASKS_BY_INTENT = {t["intent"]: str(t["task_id"]) for t in json.loads((DATA / "tasks.json").read_text())}
JUDGED: list[dict] = []


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """The stand-in sites, one WebRuntime on them, the tasks loaded as the real suite is (site URLs
    filled in, storage_state files written through the sites' login forms)."""
    servers = {"shopping": Server(Shop), "reddit": Server(Forum), "gitlab": Server(CodeHost)}
    urls = {site: s.url for site, s in servers.items()}
    auth = tmp_path_factory.mktemp("auth")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(env_module, "VAB_SETTLE_S", 0.0)  # the harness sleeps 3 s after opening a check's URL
        rt = WebRuntime(sites=wa.make_fixed_sites(urls), browsers=1)
        try:
            wa.write_storage_states(urls, auth, names=["shopping_state.json", "reddit_state.json", "gitlab_state.json"],
                                    pool=rt.pool)
            tasks = {int(t.id): t for t in wa.load_suite(DATA / "tasks.json", "lite", site_urls=urls, auth_dir=auth)}
            yield rt, tasks, urls
        finally:
            rt.close()
            for s in servers.values():
                s.close()


ROLE_TAGS = {"link": "a", "button": "button", "textbox": "input|textarea"}  # the HTML observations' tags


def element_id(observation: str, role: str, name: str) -> str | None:
    """The id the observation shows for the element `role` `name`: an accessibility-tree line
    ("[12] link 'Contact Us'"), else an HTML tag of the role's kind with id="12" right after a
    <label> `name`, or whose text or an attribute starts with `name`."""
    found = find_element(observation, role, name)
    if found is not None:
        return found
    kinds = ROLE_TAGS.get(role, r"\w+")
    labelled = re.search(r"<label[^>]*>\s*" + re.escape(name) + rf'\s*</label>\s*<(?:{kinds}) id="(\d+)"', observation)
    if labelled:  # a form field is named by its label
        return labelled.group(1)
    tags = [(m.group(1), [m.group(3).strip(), *re.findall(r'[\w-]+="([^"]*)"', m.group(2))])
            for m in re.finditer(rf'<(?:{kinds}) id="(\d+)"([^>]*)>([^<]*)', observation)]
    for match in (str.__eq__, str.startswith):  # the exact name first, then a prefix
        for tag_id, texts in tags:
            if any(match(t, name) for t in texts if t):
                return tag_id
    return None


def fill(reply: str, observation: str, where: str) -> str:
    """The reply with each {{role:name}} replaced by that element's id in `observation`."""
    def one(m):
        role, name = m.group(1), m.group(2)
        found = element_id(observation, role, name)
        if found is None:
            pytest.fail(f"{where}: no {role} '{name}' in the observation:\n{observation}", pytrace=False)
        return found

    return re.sub(r"\{\{(\w+):([^}]*)\}\}", one, reply)


def make_env(rt, observation="webrl") -> WebEnv:
    """The paper config's episode (the harness's observation, the authors' prompt and the
    harness's parser: the last do()/exit() call of a reply); on the accessibility tree, whose
    prompt asks for WebArena's syntax, the tolerant parser (it reads do() calls too)."""
    harness = observation != "axtree"
    return WebEnv(rt, max_turns=15, judge=judge, observation=observation,
                  prompt_style="webrl" if harness else "full", action_syntax="vab" if harness else "tolerant")


def run_episode(env, task, ep):
    """Reset on `task`, step every recorded reply (ids filled in from the observation the agent saw);
    the final (reward, info)."""
    obs = env.reset(task)
    first = task.config["start_url"].split(" |AND| ")
    assert len(env.page.context.pages) == len(first), "one tab per ' |AND| ' start URL (envs.py:194-208)"
    assert env.page.url.rstrip("/") == first[0].rstrip("/"), "the agent starts on the first start URL (envs.py:207)"
    replies = ep["replies"]
    for i, reply in enumerate(replies):
        obs, reward, done, info = env.step(fill(reply, obs, f"{ep['name']} reply {i + 1}"))
        if done:
            assert i == len(replies) - 1, f"{ep['name']} ended at reply {i + 1} of {len(replies)}: {obs}\n{info}"
            return reward, info
    pytest.fail(f"{ep['name']}: the episode did not end at its exit call")


@pytest.mark.parametrize("name", list(EPISODES))
def test_recorded_episode_gets_the_harness_score(replay, name):
    rt, tasks, urls = replay
    ep = EPISODES[name]
    task = tasks[ep["task_id"]]
    if not ep["start_url"].startswith("("):  # the recorded start URL is the task's
        assert task.config["start_url"] == resolve_urls(ep["start_url"], urls)
    STATE.reset()
    JUDGED.clear()
    env = make_env(rt)
    reward, info = run_episode(env, task, ep)
    assert info["ended_by"] == "stop" and info["answer"] == ep["answer"], info
    assert info["error"] is None and info["invalid_actions"] == 0 and info["failed_actions"] == 0, info
    assert reward == ep["harness_score"] and info["success"] == (ep["harness_score"] == 1), (ep["why"], info)
    if "string_match" in task.config["eval"]["eval_types"] and "fuzzy_match" in task.config["eval"]["reference_answers"]:
        refs = task.config["eval"]["reference_answers"]["fuzzy_match"]  # one question, the references joined
        assert JUDGED == [{"reference": ", ".join(refs), "answer": ep["answer"].lower(), "kind": "fuzzy"}]
    if "webarena_score" in ep:  # what WebArena's own evaluator says of the same answer and final URL
        other = evaluate({**task.config, SEMANTICS_FIELD: "webarena"}, info["answer"], info["url"], None)
        assert other.error is None and other.score == ep["webarena_score"], other


@pytest.mark.parametrize("mode", [m for m in MODES if m != "webrl"])
@pytest.mark.parametrize("name", ["117-helper-order-correct", "141-html-last-correct"])
def test_a_replay_finds_its_elements_in_the_html_observations_too(replay, mode, name):
    """The recorded replies name elements, not ids: the same episode replays on the simplified-HTML
    observations (ids numbered differently; "webrl" the harness's, where the environment has it)
    with the same score."""
    rt, tasks, _ = replay
    ep = EPISODES[name]
    STATE.reset()
    reward, info = run_episode(make_env(rt, mode), tasks[ep["task_id"]], ep)
    assert reward == ep["harness_score"] and info["failed_actions"] == 0 and info["error"] is None, info


def test_the_replays_cover_every_evaluator_kind_and_both_outcomes():
    """The episode file's coverage: each evaluator kind and program_html's target forms appear, each
    task has a correct episode (score 1) and a near miss the harness scores 0."""
    tasks = {t["task_id"]: t for t in json.loads((DATA / "tasks.json").read_text())}
    kinds = set()
    for t in tasks.values():
        ev = t["eval"]
        kinds.update(ev["eval_types"])
        kinds.update(ev.get("reference_answers") or {})
        for target in ev.get("program_html") or []:
            kinds.add("html:" + ("last" if target["url"] == "last" else "func" if target["url"].startswith("func:") else "url"))
        if " |AND| " in t["start_url"]:
            kinds.add("tabs")
        if t.get("storage_state"):
            kinds.add("storage_state")
    assert {"exact_match", "must_include", "fuzzy_match", "url_match", "program_html", "html:last", "html:url",
            "html:func", "tabs", "storage_state"} <= kinds
    by_task: dict[int, set] = {}
    for ep in RECORD["episodes"]:
        assert ep["task_id"] in tasks and ep["harness_score"] in (0, 1) and ".py:" in ep["why"], ep["name"]
        by_task.setdefault(ep["task_id"], set()).add(ep["harness_score"])
    assert all(scores == {0, 1} for scores in by_task.values()), by_task
    assert set(by_task) == set(tasks)

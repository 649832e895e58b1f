"""Task templates over the seeded sites: WebArena-format tasks, each with a scripted expert plan.

A template turns the seeded records (esopt.envs.web.sites.data) into every task it can
phrase: the intent, WebArena's eval block, and the expert's plan (esopt.envs.web.expert),
which solves the task through the agent's own action interface. Three kinds, as in
WebArena: information seeking (answered with stop [answer], string_match), navigation
(url_match on the final page) and state changing (program_html on the site afterwards).

Splits: a task is 'eval' iff the first 8 hex digits of sha256(intent) are divisible by
4 (`split_of`), else 'train'; `generate_tasks` keeps one split, so the two are disjoint
by construction. Same seed, same sites, same tasks: the site content is seeded with
`seed` (the environment checks that its sites use the same seed: "site_seed") and the
order within a template is an rng keyed on (seed, template id).

Adding a template: write a function `(seed) -> list[Instance]` below, register it in
TEMPLATES with a new id (1xx shop, 2xx forum, 3xx code host), and run
tests/test_web_expert.py, which has the expert solve a sample of every template.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from esopt.envs.web.sites.data import (
    COMMENT_TEXTS,
    FORUM_USER,
    SHOP_CATEGORIES,
    code_data,
    forum_data,
    money,
    shop_data,
)
from esopt.envs.web.tasks import WebTask
from esopt.io import sha256_text
from esopt.seeding import derive_seed

SPLITS = ("train", "eval")


def split_of(intent: str) -> str:
    return "eval" if int(sha256_text(intent)[:8], 16) % 4 == 0 else "train"


@dataclass
class Instance:
    """One task of a template, before it gets its id."""

    intent: str
    params: dict
    eval: dict
    expert: list[dict]
    sites: list[str]
    start_url: str
    require_login: bool = True
    extra: dict = field(default_factory=dict)


def _info(**refs) -> dict:
    return {"eval_types": ["string_match"], "reference_answers": refs, "reference_url": "", "program_html": [],
            "string_note": "", "url_note": "GOLD in PRED"}


def _nav(url: str) -> dict:
    return {"eval_types": ["url_match"], "reference_answers": None, "reference_url": url, "program_html": [],
            "string_note": "", "url_note": "GOLD in PRED"}


def _html(*targets: tuple[str, str, dict]) -> dict:
    return {"eval_types": ["program_html"], "reference_answers": None, "reference_url": "",
            "program_html": [{"url": u, "locator": loc, "required_contents": req} for u, loc, req in targets],
            "string_note": "", "url_note": "GOLD in PRED"}


def click(role: str, name: str) -> dict:
    return {"do": "click", "role": role, "name": name}


def type_(role: str, name: str, text: str, enter: bool = True) -> dict:
    return {"do": "type", "role": role, "name": name, "text": text, "enter": enter}


def stop(answer: str = "") -> dict:
    return {"do": "stop", "answer": answer}


def _js_str(s: str) -> str:
    return s.replace("\\", "\\\\").replace("'", "\\'")


# --- shop ---------------------------------------------------------------------------

SHOP = "__SHOPPING__"
ADMIN = "__SHOPPING_ADMIN__"


def _find_product(name: str) -> list[dict]:
    return [type_("textbox", "Search products", name), click("link", name)]


def t_shop_price(seed: int) -> list[Instance]:
    return [Instance(f"What is the price of the {p.name}?", {"product": p.name},
                     _info(must_include=[money(p.price_cents)[1:]]),
                     _find_product(p.name) + [stop(money(p.price_cents))], ["shopping"], SHOP, False)
            for p in shop_data(seed).products]


def t_shop_cheap(seed: int) -> list[Instance]:
    d, out = shop_data(seed), []
    for slug, (title, _) in SHOP_CATEGORIES.items():
        ps = sorted((p for p in d.products if p.category == slug), key=lambda p: p.price_cents)
        for k in (1, 2, 3):
            limit = ps[k - 1].price_cents // 100 + 1  # whole dollars above the k-th cheapest
            if ps[k].price_cents < limit * 100:
                continue
            names = [p.name for p in ps if p.price_cents < limit * 100]
            out.append(Instance(f"Name one product from the {title} category that costs less than ${limit}.",
                                {"category": title, "limit": limit}, _info(one_of=names),
                                [click("link", title), stop(names[0])], ["shopping"], SHOP, False))
    return out


def t_shop_product_page(seed: int) -> list[Instance]:
    return [Instance(f"Open the product page of the {p.name}.", {"product": p.name}, _nav(f"{SHOP}/product/{p.sku}"),
                     _find_product(p.name) + [stop()], ["shopping"], SHOP, False)
            for p in shop_data(seed).products]


def t_shop_search(seed: int) -> list[Instance]:
    nouns = sorted({n.lower() for _, ns in SHOP_CATEGORIES.values() for n in ns})
    return [Instance(f'Search the shop for "{n}".', {"term": n}, _nav(f"{SHOP}/search?q={n.replace(' ', '+')}"),
                     [type_("textbox", "Search products", n), stop()], ["shopping"], SHOP, False) for n in nouns]


def t_shop_add_to_cart(seed: int) -> list[Instance]:
    rng = random.Random(derive_seed("web-template", 105, seed))
    out = []
    for p in shop_data(seed).products:
        qty = rng.randint(2, 5)
        loc = f"document.querySelector('#cart tr[data-sku=\"{p.sku}\"] .qty').innerText"
        out.append(Instance(f"Add {qty} of the {p.name} to my shopping cart.", {"quantity": qty, "product": p.name},
                            _html((f"{SHOP}/cart", loc, {"exact_match": str(qty)})),
                            _find_product(p.name) + [type_("spinbutton", "Quantity", str(qty), enter=False),
                                                     click("button", "Add to cart"), stop()], ["shopping"], SHOP))
    return out


def t_shop_order(seed: int) -> list[Instance]:
    d = shop_data(seed)
    latest = max((o for o in d.orders if o.customer_id == 1), key=lambda o: o.id)
    in_latest = {s for s, _ in latest.items}
    loc = "document.querySelector('.order-items').innerText"
    return [Instance(f"Buy one {p.name}: put it in the cart and place the order.", {"product": p.name},
                     _html(("func:shopping_get_latest_order_url()", loc, {"must_include": [p.name]})),
                     _find_product(p.name) + [click("button", "Add to cart"), click("button", "Place order"), stop()],
                     ["shopping"], SHOP)
            for p in d.products if p.sku not in in_latest]


def t_admin_order_count(seed: int) -> list[Instance]:
    d = shop_data(seed)
    return [Instance(f"How many orders has the customer {c.name} placed?", {"customer": c.name},
                     _info(exact_match=str(sum(o.customer_id == c.id for o in d.orders))),
                     [click("link", "Customers"), click("link", c.name),
                      stop(str(sum(o.customer_id == c.id for o in d.orders)))], ["shopping_admin"], ADMIN)
            for c in d.customers]


def t_admin_set_price(seed: int) -> list[Instance]:
    rng = random.Random(derive_seed("web-template", 108, seed))
    out = []
    for p in shop_data(seed).products:
        cents = max(100, p.price_cents + rng.choice((-1, 1)) * rng.randint(1, 20) * 100)
        new = f"{cents // 100}.{cents % 100:02d}"
        out.append(Instance(f"Change the price of the {p.name} to ${new}.", {"product": p.name, "price": new},
                            _html((f"{SHOP}/product/{p.sku}", "document.querySelector('#price').innerText",
                                   {"exact_match": money(cents)})),
                            [click("link", "Products"), click("link", f"Edit {p.name}"),
                             type_("textbox", "Price in dollars", new, enter=False), click("button", "Save product"), stop()],
                            ["shopping_admin", "shopping"], ADMIN))
    return out


# --- forum --------------------------------------------------------------------------

FORUM = "__REDDIT__"
NEW_COMMENTS = ("Following this thread with interest.", "Great question, I wondered the same.",
                "Thanks, this was really helpful.", "I would love to see photos of this.")
NEW_POSTS = ("Weekly discussion thread", "Beginner questions welcome here", "Share your favourite tips",
             "What surprised you this year?")
assert not set(NEW_COMMENTS) & set(COMMENT_TEXTS)


def _find_post(title: str) -> list[dict]:
    return [type_("textbox", "Search posts", title), click("link", title)]


def t_post_author(seed: int) -> list[Instance]:
    d = forum_data(seed)
    return [Instance(f'Who is the author of the post "{p.title}"?', {"title": p.title},
                     _info(must_include=[d.user(p.author_id).username]),
                     _find_post(p.title) + [stop(d.user(p.author_id).username)], ["reddit"], FORUM, False)
            for p in d.posts]


def t_comment_count(seed: int) -> list[Instance]:
    d = forum_data(seed)
    return [Instance(f'How many comments does the post "{p.title}" have?', {"title": p.title},
                     _info(exact_match=str(sum(c.post_id == p.id for c in d.comments))),
                     _find_post(p.title) + [stop(str(sum(c.post_id == p.id for c in d.comments)))], ["reddit"], FORUM, False)
            for p in d.posts]


def t_author_profile(seed: int) -> list[Instance]:
    d = forum_data(seed)
    return [Instance(f'Open the profile page of the author of the post "{p.title}".', {"title": p.title},
                     _nav(f"{FORUM}/u/{d.user(p.author_id).username}"),
                     _find_post(p.title) + [click("link", d.user(p.author_id).username), stop()], ["reddit"], FORUM, False)
            for p in d.posts]


def t_upvote(seed: int) -> list[Instance]:
    return [Instance(f'Upvote the post "{p.title}".', {"title": p.title},
                     _html((f"{FORUM}/f/{p.forum}/{p.id}", "document.querySelector('#post').dataset.myVote",
                            {"exact_match": "1"})),
                     _find_post(p.title) + [click("button", "Upvote"), stop()], ["reddit"], FORUM)
            for p in forum_data(seed).posts]


def t_comment(seed: int) -> list[Instance]:
    rng = random.Random(derive_seed("web-template", 205, seed))
    loc = "[...document.querySelectorAll('.comment')].map(c => c.innerText).join('\\n')"
    out = []
    for p in forum_data(seed).posts:
        text = rng.choice(NEW_COMMENTS)
        out.append(Instance(f'Reply to the post "{p.title}" with the comment "{text}"', {"title": p.title, "comment": text},
                            _html((f"{FORUM}/f/{p.forum}/{p.id}", loc, {"must_include": [f"{FORUM_USER[0]}: {text}"]})),
                            _find_post(p.title) + [type_("textbox", "Your comment", text, enter=False),
                                                   click("button", "Post comment"), stop()], ["reddit"], FORUM))
    return out


def t_new_post(seed: int) -> list[Instance]:
    from esopt.envs.web.sites.data import FORUMS

    return [Instance(f'Create a post in the {f} forum with the title "{t}".', {"forum": f, "title": t},
                     _html((f"{FORUM}/f/{f}", "document.querySelector('#posts').innerText", {"must_include": [t]})),
                     [click("link", f"f/{f}"), click("link", "Submit a new post"), type_("textbox", "Title", t, enter=False),
                      click("button", "Create post"), stop()], ["reddit"], FORUM)
            for f in FORUMS for t in NEW_POSTS]


# --- code host ------------------------------------------------------------------------

CODE = "__GITLAB__"
NEW_ISSUES = ("Add a changelog", "Crash when the config is empty", "Support Python 3.12", "Typo in the help text")


def t_open_count(seed: int) -> list[Instance]:
    d = code_data(seed)
    out = []
    for r in d.repos:
        for kind, rows in (("issues", d.issues), ("merge requests", d.merge_requests)):
            n = str(sum(x.repo_id == r.id and x.state == "opened" for x in rows))
            out.append(Instance(f"How many open {kind} does the project {r.path} have?", {"kind": kind, "project": r.path},
                                _info(exact_match=n), [click("link", r.path), stop(n)], ["gitlab"], CODE, False))
    return out


def t_mr_author(seed: int) -> list[Instance]:
    d = code_data(seed)
    out = []
    for m in d.merge_requests:
        r = d.repo(m.repo_id)
        out.append(Instance(f'Who opened the merge request "{m.title}" in {r.path}?', {"title": m.title, "project": r.path},
                            _info(must_include=[m.author]),
                            [click("link", r.path), click("link", "Merge requests"), click("link", "All"),
                             click("link", f"!{m.iid} {m.title}"), stop(m.author)], ["gitlab"], CODE, False))
    return out


def t_issue_state(seed: int) -> list[Instance]:
    d = code_data(seed)
    out = []
    for i in d.issues:
        r = d.repo(i.repo_id)
        state, other = ("open", "closed") if i.state == "opened" else ("closed", "open")
        out.append(Instance(f'Is the issue "{i.title}" in {r.path} open or closed?', {"title": i.title, "project": r.path},
                            _info(must_include=[state], must_exclude=[other]),
                            [click("link", r.path), click("link", "Issues"), click("link", "All"),
                             click("link", f"#{i.iid} {i.title}"), stop(state)], ["gitlab"], CODE, False))
    return out


def t_list_view(seed: int) -> list[Instance]:
    out = []
    for r in code_data(seed).repos:
        for kind, path, state, tab, link in (("closed issues", "issues", "closed", "Closed", "Issues"),
                                             ("merged merge requests", "merge_requests", "merged", "Merged", "Merge requests")):
            out.append(Instance(f"Show me the {kind} of {r.path}.", {"list": kind, "project": r.path},
                                _nav(f"{CODE}/{r.path}/-/{path}?state={state}"),
                                [click("link", r.path), click("link", link), click("link", tab), stop()], ["gitlab"], CODE, False))
    return out


def t_new_issue(seed: int) -> list[Instance]:
    return [Instance(f'Open an issue in {r.path} with the title "{t}".', {"project": r.path, "title": t},
                     _html((f"{CODE}/{r.path}/-/issues", "document.querySelector('#issues').innerText", {"must_include": [t]})),
                     [click("link", r.path), click("link", "Issues"), click("link", "New issue"),
                      type_("textbox", "Title", t, enter=False), click("button", "Create issue"), stop()], ["gitlab"], CODE)
            for r in code_data(seed).repos for t in NEW_ISSUES]


def t_star(seed: int) -> list[Instance]:
    return [Instance(f"Star the project {r.path}.", {"project": r.path},
                     _html((f"{CODE}/{r.path}", "document.querySelector('#star-button').innerText", {"exact_match": "Unstar"})),
                     [click("link", r.path), click("button", "Star"), stop()], ["gitlab"], CODE)
            for r in code_data(seed).repos]


def t_close_issue(seed: int) -> list[Instance]:
    d = code_data(seed)
    out = []
    for i in d.issues:
        if i.state != "opened":
            continue
        r = d.repo(i.repo_id)
        out.append(Instance(f'Close the issue "{i.title}" in {r.path}.', {"title": i.title, "project": r.path},
                            _html((f"{CODE}/{r.path}/-/issues/{i.iid}", "document.querySelector('#issue-state').innerText",
                                   {"exact_match": "closed"})),
                            [click("link", r.path), click("link", "Issues"), click("link", f"#{i.iid} {i.title}"),
                             click("button", "Close issue"), stop()], ["gitlab"], CODE))
    return out


# id -> (name, intent template in WebArena's {{...}} form, the function)
TEMPLATES: dict[int, tuple[str, str, Callable[[int], list[Instance]]]] = {
    101: ("shop_price", "What is the price of the {{product}}?", t_shop_price),
    102: ("shop_cheap_in_category", "Name one product from the {{category}} category that costs less than ${{limit}}.", t_shop_cheap),
    103: ("shop_product_page", "Open the product page of the {{product}}.", t_shop_product_page),
    104: ("shop_search", 'Search the shop for "{{term}}".', t_shop_search),
    105: ("shop_add_to_cart", "Add {{quantity}} of the {{product}} to my shopping cart.", t_shop_add_to_cart),
    106: ("shop_order", "Buy one {{product}}: put it in the cart and place the order.", t_shop_order),
    107: ("admin_order_count", "How many orders has the customer {{customer}} placed?", t_admin_order_count),
    108: ("admin_set_price", "Change the price of the {{product}} to ${{price}}.", t_admin_set_price),
    201: ("forum_post_author", 'Who is the author of the post "{{title}}"?', t_post_author),
    202: ("forum_comment_count", 'How many comments does the post "{{title}}" have?', t_comment_count),
    203: ("forum_author_profile", 'Open the profile page of the author of the post "{{title}}".', t_author_profile),
    204: ("forum_upvote", 'Upvote the post "{{title}}".', t_upvote),
    205: ("forum_comment", 'Reply to the post "{{title}}" with the comment "{{comment}}"', t_comment),
    206: ("forum_new_post", 'Create a post in the {{forum}} forum with the title "{{title}}".', t_new_post),
    301: ("code_open_count", "How many open {{kind}} does the project {{project}} have?", t_open_count),
    302: ("code_mr_author", 'Who opened the merge request "{{title}}" in {{project}}?', t_mr_author),
    303: ("code_issue_state", 'Is the issue "{{title}}" in {{project}} open or closed?', t_issue_state),
    304: ("code_list_view", "Show me the {{list}} of {{project}}.", t_list_view),
    305: ("code_new_issue", 'Open an issue in {{project}} with the title "{{title}}".', t_new_issue),
    306: ("code_star", "Star the project {{project}}.", t_star),
    307: ("code_close_issue", 'Close the issue "{{title}}" in {{project}}.', t_close_issue),
}


def _config(tid: int, k: int, inst: Instance, seed: int) -> dict:
    name, template, _ = TEMPLATES[tid]
    return {"task_id": tid * 1000 + k, "sites": inst.sites, "start_url": inst.start_url,
            "require_login": inst.require_login, "storage_state": None, "geolocation": None,
            "intent_template": template, "instantiation_dict": inst.params, "intent": inst.intent,
            "intent_template_id": tid, "eval": inst.eval,
            # esopt's additions: the template's name, the split, the sites' seed, the expert's plan
            "template": name, "split": split_of(inst.intent), "site_seed": seed, "expert": inst.expert, **inst.extra}


def template_tasks(tid: int, seed: int) -> list[WebTask]:
    """Every task of template `tid` (both splits), in the template's seeded order."""
    if tid not in TEMPLATES:
        raise ValueError(f"template {tid}: expected one of {sorted(TEMPLATES)}")
    instances = TEMPLATES[tid][2](seed)
    order = list(range(len(instances)))
    random.Random(derive_seed("web-template-order", tid, seed)).shuffle(order)
    intents = [i.intent for i in instances]
    if len(set(intents)) != len(intents):
        raise AssertionError(f"template {tid} phrases two tasks alike")
    return [WebTask(_config(tid, k, instances[j], seed)) for k, j in enumerate(order)]


def generate_tasks(seed: int = 0, split: str = "train", per_template: int | None = None,
                   templates: list[int] | None = None) -> list[WebTask]:
    """The tasks of `split` ('train' or 'eval'), up to `per_template` of each template (None:
    all), template by template. A smaller per_template gives a prefix of each template's tasks."""
    if split == "test":
        split = "eval"
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if per_template is not None and per_template < 0:
        raise ValueError(f"per_template must be >= 0 or None, got {per_template}")
    out = []
    for tid in templates or sorted(TEMPLATES):
        tasks = [t for t in template_tasks(tid, seed) if t.config["split"] == split]
        out.extend(tasks if per_template is None else tasks[:per_template])
    return out

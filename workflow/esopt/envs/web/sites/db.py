"""SQLite schemas of the local sites and their seeded template databases.

`build_template(site, seed, path)` writes one site's seeded data (esopt.envs.web.sites.data)
into a fresh database; every episode then works on its own copy of that file
(esopt.envs.web.sites.server), so no episode ever sees another's changes.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from esopt.envs.web.sites.data import (
    CODE_USER,
    FORUMS,
    SHOP_ADMIN,
    SHOP_CATEGORIES,
    TODAY,
    code_data,
    forum_data,
    shop_data,
)

SCHEMAS = {
    "shopping": """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE categories (slug TEXT PRIMARY KEY, title TEXT NOT NULL);
        CREATE TABLE products (sku TEXT PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL,
            price_cents INTEGER NOT NULL, stock INTEGER NOT NULL, rating INTEGER NOT NULL, description TEXT);
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, email TEXT UNIQUE, password TEXT);
        CREATE TABLE admins (username TEXT PRIMARY KEY, password TEXT);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, date TEXT, status TEXT);
        CREATE TABLE order_items (order_id INTEGER, sku TEXT, qty INTEGER, price_cents INTEGER);
        CREATE TABLE cart_items (customer_id INTEGER, sku TEXT, qty INTEGER, PRIMARY KEY (customer_id, sku));
        CREATE TABLE reviews (id INTEGER PRIMARY KEY, sku TEXT, customer_id INTEGER, rating INTEGER, text TEXT);
    """,
    "reddit": """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE forums (name TEXT PRIMARY KEY, description TEXT);
        CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT UNIQUE, password TEXT);
        CREATE TABLE posts (id INTEGER PRIMARY KEY, forum TEXT, title TEXT, body TEXT, author_id INTEGER,
            base_score INTEGER, date TEXT);
        CREATE TABLE comments (id INTEGER PRIMARY KEY, post_id INTEGER, author_id INTEGER, body TEXT, date TEXT);
        CREATE TABLE votes (user_id INTEGER, post_id INTEGER, value INTEGER, PRIMARY KEY (user_id, post_id));
    """,
    "gitlab": """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE users (username TEXT PRIMARY KEY, password TEXT);
        CREATE TABLE repos (id INTEGER PRIMARY KEY, owner TEXT, name TEXT, description TEXT, language TEXT,
            base_stars INTEGER);
        CREATE TABLE stars (username TEXT, repo_id INTEGER, PRIMARY KEY (username, repo_id));
        CREATE TABLE issues (repo_id INTEGER, iid INTEGER, title TEXT, description TEXT, state TEXT, label TEXT,
            author TEXT, date TEXT, PRIMARY KEY (repo_id, iid));
        CREATE TABLE merge_requests (repo_id INTEGER, iid INTEGER, title TEXT, state TEXT, author TEXT,
            source_branch TEXT, PRIMARY KEY (repo_id, iid));
    """,
}
SITE_NAMES = tuple(SCHEMAS)


def _fill_shopping(db: sqlite3.Connection, seed: int) -> None:
    d = shop_data(seed)
    db.executemany("INSERT INTO categories VALUES (?, ?)", [(s, t) for s, (t, _) in SHOP_CATEGORIES.items()])
    db.executemany("INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?)",
                   [(p.sku, p.name, p.category, p.price_cents, p.stock, p.rating, p.description) for p in d.products])
    db.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)", [(c.id, c.name, c.email, c.password) for c in d.customers])
    db.execute("INSERT INTO admins VALUES (?, ?)", SHOP_ADMIN)
    for o in d.orders:
        db.execute("INSERT INTO orders VALUES (?, ?, ?, ?)", (o.id, o.customer_id, o.date, o.status))
        db.executemany("INSERT INTO order_items VALUES (?, ?, ?, ?)",
                       [(o.id, s, q, d.product(s).price_cents) for s, q in o.items])
    db.executemany("INSERT INTO reviews (sku, customer_id, rating, text) VALUES (?, ?, ?, ?)",
                   [(r.sku, r.customer_id, r.rating, r.text) for r in d.reviews])


def _fill_reddit(db: sqlite3.Connection, seed: int) -> None:
    d = forum_data(seed)
    db.executemany("INSERT INTO forums VALUES (?, ?)", [(n, desc) for n, (desc, _) in FORUMS.items()])
    db.executemany("INSERT INTO users VALUES (?, ?, ?)", [(u.id, u.username, u.password) for u in d.users])
    db.executemany("INSERT INTO posts VALUES (?, ?, ?, ?, ?, ?, ?)",
                   [(p.id, p.forum, p.title, p.body, p.author_id, p.score, p.date) for p in d.posts])
    db.executemany("INSERT INTO comments VALUES (?, ?, ?, ?, ?)",
                   [(c.id, c.post_id, c.author_id, c.body, c.date) for c in d.comments])


def _fill_gitlab(db: sqlite3.Connection, seed: int) -> None:
    d = code_data(seed)
    from esopt.envs.web.sites.data import CODE_USERS

    db.executemany("INSERT INTO users VALUES (?, ?)",
                   [(u, CODE_USER[1] if u == CODE_USER[0] else f"pw-{u}") for u in CODE_USERS])
    db.executemany("INSERT INTO repos VALUES (?, ?, ?, ?, ?, ?)",
                   [(r.id, r.owner, r.name, r.description, r.language, r.stars) for r in d.repos])
    db.executemany("INSERT INTO issues VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   [(i.repo_id, i.iid, i.title, f"{i.title}.", i.state, i.label, i.author, "2024-05-10")
                    for i in d.issues])
    db.executemany("INSERT INTO merge_requests VALUES (?, ?, ?, ?, ?, ?)",
                   [(m.repo_id, m.iid, m.title, m.state, m.author, m.source_branch) for m in d.merge_requests])


_FILL = {"shopping": _fill_shopping, "reddit": _fill_reddit, "gitlab": _fill_gitlab}


def build_template(site: str, seed: int, path: str | os.PathLike) -> Path:
    """Write the seeded database of `site` to `path` (atomically: a temp file, then rename)."""
    if site not in SCHEMAS:
        raise ValueError(f"site {site!r}: expected one of {SITE_NAMES}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    try:
        db.executescript(SCHEMAS[site])
        db.executemany("INSERT INTO meta VALUES (?, ?)", [("site", site), ("seed", str(seed)), ("today", TODAY)])
        _FILL[site](db, seed)
        db.commit()
    finally:
        db.close()
    os.replace(tmp, path)
    return path

"""What the three site apps share: the episode dispatch, the database handle, the page layout.

Episode isolation lives in `EpisodeDispatch`, a WSGI middleware in front of each site's
Flask app: a request for `/<token>/rest` is served from the database file
`<root>/episodes/<token>/<site>.sqlite` with `/<token>` moved into SCRIPT_NAME, so every
link Flask builds (url_for, redirects) stays inside the episode. An unknown or closed
episode gets a 404. The token is an 8-32 character lowercase hex string
(esopt.envs.web.sites.server makes them).
"""

from __future__ import annotations

import re
import sqlite3
from functools import wraps
from pathlib import Path

from esopt.envs.web.deps import require_flask

TOKEN_RE = re.compile(r"^/([0-9a-f]{8,32})(/.*)?$")
DB_KEY = "esopt.db"

LAYOUT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }} - {{ site_title }}</title>
<style>body{font-family:sans-serif;max-width:60em;margin:1em auto}nav a,nav form{margin-right:1em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}nav form{display:inline}</style>
</head><body>
<header><nav aria-label="Main">{% block nav %}{% endblock %}</nav></header>
{% with msgs = get_flashed_messages() %}{% if msgs %}<div role="status">{% for m in msgs %}<p>{{ m }}</p>{% endfor %}</div>{% endif %}{% endwith %}
<main><h1>{{ title }}</h1>
{% block main %}{% endblock %}
</main></body></html>
"""


class EpisodeDispatch:
    """WSGI middleware: route `/<token>/...` to the app with that episode's database."""

    def __init__(self, app, root: str | Path, site: str):
        self.app, self.root, self.site = app, Path(root), site

    def _plain(self, start_response, status: str, text: str):
        body = text.encode()
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]

    def __call__(self, environ, start_response):
        m = TOKEN_RE.match(environ.get("PATH_INFO", ""))
        if m is None:
            return self._plain(start_response, "404 Not Found",
                               f"esopt local site '{self.site}': pages live under /<episode token>/")
        db = self.root / "episodes" / m.group(1) / f"{self.site}.sqlite"
        if not db.is_file():
            return self._plain(start_response, "404 Not Found", f"no such episode: {m.group(1)} (closed?)")
        environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "").rstrip("/") + "/" + m.group(1)
        environ["PATH_INFO"] = m.group(2) or "/"
        environ[DB_KEY] = str(db)
        return self.app(environ, start_response)


def make_app(name: str, site_title: str, templates: dict[str, str], secret: bytes):
    """A Flask app whose templates extend LAYOUT and whose `db()` is the episode's database."""
    flask = require_flask()
    from jinja2 import DictLoader

    app = flask.Flask(name)
    app.jinja_loader = DictLoader({"layout.html": LAYOUT, **templates})
    # Sites on different ports of one host share cookies: one session cookie name per site.
    app.config.update(SECRET_KEY=secret, SESSION_COOKIE_NAME=f"{name}_session", SESSION_COOKIE_SAMESITE="Lax")

    @app.context_processor
    def _site():
        return {"site_title": site_title}

    @app.teardown_appcontext
    def _close(exc):
        conn = flask.g.pop("db", None)
        if conn is not None:
            conn.close()

    return app


def db() -> sqlite3.Connection:
    """The current request's episode database (one connection per request)."""
    flask = require_flask()
    if "db" not in flask.g:
        conn = sqlite3.connect(flask.request.environ[DB_KEY], timeout=10)
        conn.row_factory = sqlite3.Row
        flask.g.db = conn
    return flask.g.db


def today() -> str:
    return db().execute("SELECT value FROM meta WHERE key = 'today'").fetchone()[0]


def requires_login(session_key: str, login_endpoint: str, message: str | None = None, keep_next: bool = False):
    """A view decorator: without `session_key` in the session, redirect to `login_endpoint`
    (flashing `message`; with keep_next, a GET comes back to its page after signing in)."""
    def decorate(view):
        @wraps(view)
        def wrapped(*a, **kw):
            flask = require_flask()
            if not flask.session.get(session_key):
                if message:
                    flask.flash(message)
                req = flask.request
                target = req.script_root + req.full_path.rstrip("?") if keep_next and req.method == "GET" else None
                args = {"next": target} if keep_next else {}
                return flask.redirect(flask.url_for(login_endpoint, **args))
            return view(*a, **kw)
        return wrapped
    return decorate

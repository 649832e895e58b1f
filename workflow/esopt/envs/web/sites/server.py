"""Where an episode's sites live: `LocalSites` (the project's own, isolated per episode) or
`FixedSites` (given URLs, e.g. the real WebArena sites).

Isolation design of `LocalSites`: one server process for all local sites
(esopt.envs.web.sites.serve), one port per site; a seeded template database per site,
built once; `open_episode()` copies the templates into `<root>/episodes/<token>/`, and
the episode's site URLs are `http://127.0.0.1:<port>/<token>`. The server picks the
database by that prefix, so concurrent episodes never see each other's changes; the
agent sees SHOWN_URLS instead (`Episode.show`/`unshow`), the same in every episode and run;
`Episode.close()` deletes the copies (later requests under the prefix get a 404).
The server process exits when `close()` is called, when the object is collected, at
interpreter exit, and when this process dies (it watches its stdin pipe).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import secrets
import selectors
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esopt.envs.web.sites import APP_MODULES, LOGINS, SHOWN_URLS, SITES
from esopt.envs.web.sites.db import build_template

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # the server process prints its ports well within this (it starts in under a second)


@dataclass
class Episode:
    """One episode's sites: their URLs, and (local sites) the databases behind them.
    `shown`: site -> the URL the agent sees in its place (none: the real one). Local sites'
    URLs hold a free port and a random token; an observation that showed them would differ
    from run to run, and so would a sampled policy's next action."""

    token: str
    urls: dict[str, str]
    db_paths: dict[str, Path] = field(default_factory=dict)
    shown: dict[str, str] = field(default_factory=dict)
    helpers: dict[str, Callable[..., Any]] = field(default_factory=dict)  # program_html "func:" helpers
    _close: Callable[[], None] | None = None
    _reset: Callable[[], None] | None = None

    def show(self, text: str) -> str:
        """`text` (a URL, an error message) as the agent sees it: every site URL replaced by its
        shown one, and the episode's token taken out of site paths (a login redirect's ?next=/<token>/cart)."""
        swaps = {self.urls[s]: u for s, u in self.shown.items() if s in self.urls}
        if swaps:
            swaps["/" + self.token] = ""
        return _swap(text, swaps)

    def unshow(self, text: str) -> str:
        """The inverse of `show`: what the agent wrote (a goto's URL, an answer) in the sites' real URLs."""
        return _swap(text, {u: self.urls[s] for s, u in self.shown.items() if s in self.urls})

    @property
    def shown_urls(self) -> dict[str, str]:
        """site -> the URL the agent uses for it."""
        return {s: self.shown.get(s, u) for s, u in self.urls.items()}

    def reset(self) -> bool:
        """Put the sites back to their seeded state under the same URLs; False if they cannot be."""
        if self._reset is None:
            return False
        self._reset()
        return True

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None

    def query(self, site: str, sql: str, params: tuple = ()) -> list[tuple]:
        """Rows of a read-only query on the episode's database of `site` (local sites only)."""
        if site not in self.db_paths:
            raise KeyError(f"episode {self.token} has no database for site {site!r}")
        conn = sqlite3.connect(f"file:{self.db_paths[site]}?mode=ro", uri=True, timeout=10)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()


def _swap(text: str, prefixes: Mapping[str, str]) -> str:
    """`text` with each key of `prefixes` replaced by its value where it ends a word (so the
    shown http://localhost:7770 is not taken out of http://localhost:77701), longest key first."""
    if not prefixes or not text:
        return text
    keys = sorted(prefixes, key=len, reverse=True)
    pattern = re.compile("(?:" + "|".join(re.escape(k) for k in keys) + r")(?!\w)")
    return pattern.sub(lambda m: prefixes[m.group(0)], text)


def login_with_form(context, site: str, urls: Mapping[str, str]) -> None:
    """Sign the browser context in to `site` with the account LOGINS names, by POSTing the
    site's login form through the context's request API (it shares the context's cookies)."""
    if site not in LOGINS:
        raise ValueError(f"no login known for site {site!r}: expected one of {SITES}")
    if site not in urls:
        raise ValueError(f"no URL for site {site!r} (have {sorted(urls)})")
    path, form = LOGINS[site]
    r = context.request.post(urls[site].rstrip("/") + path, form=form, max_redirects=0)
    if r.status not in (302, 303):  # a successful login redirects; a failed one renders the form again
        raise RuntimeError(f"login to {site} as {next(iter(form.values()))!r} failed: HTTP {r.status}")


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        proc.stdin.close()  # the server exits on EOF
    except Exception:
        pass
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def _shutdown(proc: subprocess.Popen, root: Path, log_file) -> None:
    _kill(proc)
    try:
        log_file.close()
    except Exception:
        pass
    shutil.rmtree(root, ignore_errors=True)


class LocalSites:
    """The project's sites on localhost, one isolated copy of every database per episode.

    `seed` fixes the seeded content (same seed, same products, posts, issues);
    `sites` the servers to start (shopping_admin comes with shopping)."""

    def __init__(self, seed: int = 0, sites: tuple[str, ...] = tuple(APP_MODULES), root: str | os.PathLike | None = None):
        from esopt.envs.web.deps import require_flask

        require_flask()
        unknown = [s for s in sites if s not in APP_MODULES]
        if unknown:
            raise ValueError(f"unknown local sites {unknown}: expected some of {sorted(APP_MODULES)}")
        self.seed, self.sites = seed, tuple(sites)
        self.root = Path(tempfile.mkdtemp(prefix="esopt-web-", dir=root))
        self._templates = {s: build_template(s, seed, self.root / "templates" / f"{s}.sqlite") for s in self.sites}
        (self.root / "episodes").mkdir()
        self._log_path = self.root / "server.log"
        log_file = open(self._log_path, "wb")  # noqa: SIM115 (closed by the finalizer, with the server)
        pkg_root = str(Path(__file__).resolve().parents[4])  # the folder holding esopt/
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [pkg_root, os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "esopt.envs.web.sites.serve", "--root", str(self.root), "--sites", ",".join(self.sites)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, env=env)
        self._finalizer = weakref.finalize(self, _shutdown, self.proc, self.root, log_file)
        atexit.register(self._finalizer)
        self.ports = self._read_ports()
        self._episodes: dict[str, Episode] = {}
        log.info("local sites %s on ports %s (root %s)", ",".join(self.sites), self.ports, self.root)

    def _read_ports(self) -> dict[str, int]:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_TIMEOUT_S
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(timeout=left):
                self.close()
                raise RuntimeError(f"the local site server did not start within {START_TIMEOUT_S:.0f} s")
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                err = self._log_path.read_text(errors="replace")[-2000:]
                self.close()
                raise RuntimeError(f"the local site server exited at start:\n{err}")
            line += chunk
        sel.close()
        return {k: int(v) for k, v in json.loads(line).items()}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def urls(self, token: str) -> dict[str, str]:
        out = {s: f"http://127.0.0.1:{p}/{token}" for s, p in self.ports.items()}
        if "shopping" in out:
            out["shopping_admin"] = out["shopping"] + "/admin"
        return out

    def open_episode(self) -> Episode:
        """Fresh copies of every site's seeded database under a new URL prefix."""
        if not self.alive():
            raise RuntimeError(f"the local site server has exited (code {self.proc.returncode}); "
                               f"its log: {self._log_path}")
        token = secrets.token_hex(8)
        folder = self.root / "episodes" / token
        folder.mkdir()
        dbs = {site: folder / f"{site}.sqlite" for site in self._templates}

        def fill():
            for site, template in self._templates.items():
                tmp = folder / f".{site}.sqlite.tmp"
                shutil.copyfile(template, tmp)
                os.replace(tmp, dbs[site])  # a request never sees half a file

        fill()
        urls = self.urls(token)
        ep = Episode(token=token, urls=urls, db_paths=dbs, _reset=fill,
                     shown={s: SHOWN_URLS[s] for s in urls if s in SHOWN_URLS})
        ep.helpers = _local_helpers(ep)

        def close():
            self._episodes.pop(token, None)
            shutil.rmtree(folder, ignore_errors=True)

        ep._close = close
        self._episodes[token] = ep
        return ep

    def login(self, context, site: str, episode: Episode) -> None:
        login_with_form(context, site, episode.urls)

    def close(self) -> None:
        for ep in list(self._episodes.values()):
            ep.close()
        self._finalizer()

    def __enter__(self) -> LocalSites:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class FixedSites:
    """Sites at given URLs ({"shopping": "http://host:7770", ...}), shared by every episode:
    no isolation (reset them between runs as WebArena does). `login(context, site, episode)`
    uses `logins[site](context, episode)` when given, else the local sites' login form;
    `helpers` are the program_html "func:" functions available to evaluators."""

    def __init__(self, urls: Mapping[str, str], logins: Mapping[str, Callable] | None = None,
                 helpers: Mapping[str, Callable[..., Any]] | None = None):
        bad = [k for k, v in urls.items() if not re.match(r"^https?://", str(v))]
        if bad:
            raise ValueError(f"site URLs must start with http:// or https://: {bad}")
        self._urls = {k: str(v).rstrip("/") for k, v in urls.items()}
        self._logins = dict(logins or {})
        self._helpers = dict(helpers or {})

    def open_episode(self) -> Episode:
        return Episode(token="fixed", urls=dict(self._urls), helpers=dict(self._helpers))

    def login(self, context, site: str, episode: Episode) -> None:
        if site in self._logins:
            self._logins[site](context, episode)
        else:
            login_with_form(context, site, episode.urls)

    def close(self) -> None:
        pass


def _local_helpers(ep: Episode) -> dict[str, Callable[..., Any]]:
    """WebArena-style helper functions for program_html ("func:name(args)") on the local sites."""

    def shopping_get_latest_order_url() -> str:
        rows = ep.query("shopping", "SELECT o.id FROM orders o JOIN customers c ON c.id = o.customer_id "
                                    "WHERE c.email = ? ORDER BY o.id DESC LIMIT 1", (LOGINS["shopping"][1]["email"],))
        return f"{ep.urls['shopping']}/orders/{rows[0][0]}" if rows else f"{ep.urls['shopping']}/orders"

    def reddit_get_post_url(url: str) -> str:
        m = re.match(r"^(.*/f/[^/]+/\d+)", url)
        return m.group(1) if m else url

    return {"shopping_get_latest_order_url": shopping_get_latest_order_url, "reddit_get_post_url": reddit_get_post_url}

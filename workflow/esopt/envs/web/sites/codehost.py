"""The code host (WebArena's "gitlab"): projects, stars, issues and merge requests.

Pages: / (projects, search), /<owner>/<repo> (star button, counts), /<owner>/<repo>/-/issues
(?state=opened|closed|all), /-/issues/new, /-/issues/<iid> (close/reopen),
/-/merge_requests (?state=opened|merged|closed|all), /-/merge_requests/<iid>, /search?q=,
/users/sign_in, /users/sign_out. Starring, opening and closing issues need a login.
"""

from __future__ import annotations

from esopt.envs.web.deps import require_flask
from esopt.envs.web.sites.common import db, make_app, requires_login, today

NAV = """{% block nav %}<a href="{{ url_for('home') }}">Projects</a>
{% if session.get('username') %}<span>Signed in as {{ session.get('username') }}</span>
<a href="{{ url_for('logout') }}">Sign out</a>{% else %}<a href="{{ url_for('login') }}">Sign in</a>{% endif %}
<form role="search" action="{{ url_for('search') }}" method="get"><input name="q" aria-label="Search projects and issues"
 placeholder="Search" value="{{ q or '' }}"><button type="submit">Search</button></form>{% endblock %}"""

REPO_NAV = """<p><a href="{{ url_for('repo', owner=r.owner, name=r.name) }}">{{ r.owner }}/{{ r.name }}</a>
<a href="{{ url_for('issues', owner=r.owner, name=r.name) }}">Issues</a>
<a href="{{ url_for('merge_requests', owner=r.owner, name=r.name) }}">Merge requests</a></p>"""

STATE_TABS = """<p>{% for s, label in tabs %}{% if s == state %}<b>{{ label }}</b>{% else %}<a href="{{ url_for(view, owner=r.owner,
 name=r.name, state=s) }}">{{ label }}</a>{% endif %} {% endfor %}</p>"""

TEMPLATES = {
    "home.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}<ul id="projects">{% for r in repos %}
<li><a href="{{ url_for('repo', owner=r.owner, name=r.name) }}">{{ r.owner }}/{{ r.name }}</a>: {{ r.description }}
({{ r.stars }} stars)</li>{% endfor %}</ul>{% endblock %}""",
    "repo.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}""" + REPO_NAV + """
<p>{{ r.description }}</p><p>Language: {{ r.language }}</p><p>Stars: <span id="stars">{{ r.stars }}</span></p>
<form method="post" action="{{ url_for('star', owner=r.owner, name=r.name) }}"><button id="star-button" type="submit">
{{ 'Unstar' if starred else 'Star' }}</button></form>
<p><a href="{{ url_for('issues', owner=r.owner, name=r.name) }}">Open issues: {{ n_issues }}</a></p>
<p><a href="{{ url_for('merge_requests', owner=r.owner, name=r.name) }}">Open merge requests: {{ n_mrs }}</a></p>{% endblock %}""",
    "issues.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}""" + REPO_NAV + STATE_TABS + """
<p><a href="{{ url_for('new_issue', owner=r.owner, name=r.name) }}">New issue</a></p>
<ul id="issues">{% for i in items %}<li><a href="{{ url_for('issue', owner=r.owner, name=r.name, iid=i.iid) }}">#{{ i.iid }} {{ i.title }}</a>
[{{ i.label }}] {{ 'open' if i.state == 'opened' else 'closed' }}, opened by {{ i.author }}</li>{% else %}<li>No issues.</li>{% endfor %}</ul>
{% endblock %}""",
    "issue.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}""" + REPO_NAV + """
<p>Status: <span id="issue-state">{{ 'open' if i.state == 'opened' else 'closed' }}</span></p>
<p>Opened by {{ i.author }} on {{ i.date }}. Label: {{ i.label }}</p><p>{{ i.description }}</p>
<form method="post" action="{{ url_for('issue_state', owner=r.owner, name=r.name, iid=i.iid) }}">
{% if i.state == 'opened' %}<button name="to" value="closed" type="submit">Close issue</button>{% else %}
<button name="to" value="opened" type="submit">Reopen issue</button>{% endif %}</form>{% endblock %}""",
    "new_issue.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}""" + REPO_NAV + """
<form method="post" action="{{ url_for('issues', owner=r.owner, name=r.name) }}"><label>Title <input name="title"></label>
<label>Description <textarea name="description" rows="4"></textarea></label>
<label>Label <select name="label">{% for l in labels %}<option>{{ l }}</option>{% endfor %}</select></label>
<button type="submit">Create issue</button></form>{% endblock %}""",
    "mrs.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}""" + REPO_NAV + STATE_TABS + """
<ul id="merge-requests">{% for m in items %}<li><a href="{{ url_for('merge_request', owner=r.owner, name=r.name, iid=m.iid) }}">!{{ m.iid }} {{ m.title }}</a>
({{ m.state }}) by {{ m.author }}</li>{% else %}<li>No merge requests.</li>{% endfor %}</ul>{% endblock %}""",
    "mr.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}""" + REPO_NAV + """
<p>Status: <span id="mr-state">{{ m.state }}</span></p><p>Opened by <span id="mr-author">{{ m.author }}</span></p>
<p>Wants to merge {{ m.source_branch }} into main</p>{% endblock %}""",
    "search.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}<h2>Projects</h2><ul>{% for r in repos %}
<li><a href="{{ url_for('repo', owner=r.owner, name=r.name) }}">{{ r.owner }}/{{ r.name }}</a></li>{% else %}<li>None.</li>{% endfor %}</ul>
<h2>Issues</h2><ul>{% for i in issues %}<li><a href="{{ url_for('issue', owner=i.owner, name=i.name, iid=i.iid) }}">{{ i.owner }}/{{ i.name }}#{{ i.iid }}
{{ i.title }}</a></li>{% else %}<li>None.</li>{% endfor %}</ul>{% endblock %}""",
    "login.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}
{% if error %}<p role="alert">{{ error }}</p>{% endif %}<form method="post"><label>Username <input name="username" autocomplete="username"></label>
<label>Password <input name="password" type="password"></label><button type="submit">Sign in</button></form>{% endblock %}""",
}

_REPOS = """SELECT r.*, r.base_stars + (SELECT COUNT(*) FROM stars s WHERE s.repo_id = r.id) AS stars FROM repos r"""
ISSUE_TABS = (("opened", "Open"), ("closed", "Closed"), ("all", "All"))
MR_TABS = (("opened", "Open"), ("merged", "Merged"), ("closed", "Closed"), ("all", "All"))


def create_app(secret: bytes):
    flask = require_flask()
    from flask import abort, flash, redirect, render_template, request, session, url_for

    app = make_app("gitlab", "GitLab", TEMPLATES, secret)

    login_required = requires_login("username", "login", "Sign in to do that.")

    def _repo(owner, name):
        r = db().execute(_REPOS + " WHERE r.owner = ? AND r.name = ?", (owner, name)).fetchone()
        if r is None:
            abort(404)
        return r

    def _state(allowed):
        s = request.args.get("state", "opened")
        return s if s in {k for k, _ in allowed} else "opened"

    @app.get("/")
    def home():
        return render_template("home.html", title="Projects", repos=db().execute(_REPOS + " ORDER BY r.owner, r.name").fetchall())

    @app.get("/<owner>/<name>")
    def repo(owner, name):
        r = _repo(owner, name)
        count = lambda t: db().execute(f"SELECT COUNT(*) FROM {t} WHERE repo_id = ? AND state = 'opened'", (r["id"],)).fetchone()[0]
        starred = db().execute("SELECT 1 FROM stars WHERE username = ? AND repo_id = ?",
                               (session.get("username"), r["id"])).fetchone() is not None
        return render_template("repo.html", title=f"{owner}/{name}", r=r, starred=starred,
                               n_issues=count("issues"), n_mrs=count("merge_requests"))

    @app.post("/<owner>/<name>/star")
    @login_required
    def star(owner, name):
        r = _repo(owner, name)
        conn = db()
        if conn.execute("SELECT 1 FROM stars WHERE username = ? AND repo_id = ?", (session["username"], r["id"])).fetchone():
            conn.execute("DELETE FROM stars WHERE username = ? AND repo_id = ?", (session["username"], r["id"]))
        else:
            conn.execute("INSERT INTO stars VALUES (?, ?)", (session["username"], r["id"]))
        conn.commit()
        return redirect(url_for("repo", owner=owner, name=name))

    @app.route("/<owner>/<name>/-/issues", methods=["GET", "POST"])
    def issues(owner, name):
        r = _repo(owner, name)
        if request.method == "POST":
            if not session.get("username"):
                flash("Sign in to do that.")
                return redirect(url_for("login"))
            title = request.form.get("title", "").strip()
            if not title:
                flash("An issue needs a title.")
                return redirect(url_for("new_issue", owner=owner, name=name))
            iid = db().execute("SELECT COALESCE(MAX(iid), 0) + 1 FROM issues WHERE repo_id = ?", (r["id"],)).fetchone()[0]
            label = request.form.get("label", "bug")
            db().execute("INSERT INTO issues VALUES (?, ?, ?, ?, 'opened', ?, ?, ?)",
                         (r["id"], iid, title[:300], request.form.get("description", "")[:5000],
                          label if label in ("bug", "feature", "docs") else "bug", session["username"], today()))
            db().commit()
            return redirect(url_for("issue", owner=owner, name=name, iid=iid))
        state = _state(ISSUE_TABS)
        where = "" if state == "all" else " AND state = ?"
        items = db().execute("SELECT * FROM issues WHERE repo_id = ?" + where + " ORDER BY iid",
                             (r["id"],) if state == "all" else (r["id"], state)).fetchall()
        return render_template("issues.html", title=f"Issues of {owner}/{name}", r=r, items=items, state=state,
                               tabs=ISSUE_TABS, view="issues")

    @app.get("/<owner>/<name>/-/issues/new")
    @login_required
    def new_issue(owner, name):
        return render_template("new_issue.html", title="New issue", r=_repo(owner, name), labels=("bug", "feature", "docs"))

    @app.get("/<owner>/<name>/-/issues/<int:iid>")
    def issue(owner, name, iid):
        r = _repo(owner, name)
        i = db().execute("SELECT * FROM issues WHERE repo_id = ? AND iid = ?", (r["id"], iid)).fetchone()
        if i is None:
            abort(404)
        return render_template("issue.html", title=f"#{iid} {i['title']}", r=r, i=i)

    @app.post("/<owner>/<name>/-/issues/<int:iid>/state")
    @login_required
    def issue_state(owner, name, iid):
        r = _repo(owner, name)
        to = request.form.get("to")
        if to in ("opened", "closed"):
            db().execute("UPDATE issues SET state = ? WHERE repo_id = ? AND iid = ?", (to, r["id"], iid))
            db().commit()
        return redirect(url_for("issue", owner=owner, name=name, iid=iid))

    @app.get("/<owner>/<name>/-/merge_requests")
    def merge_requests(owner, name):
        r = _repo(owner, name)
        state = _state(MR_TABS)
        where = "" if state == "all" else " AND state = ?"
        items = db().execute("SELECT * FROM merge_requests WHERE repo_id = ?" + where + " ORDER BY iid",
                             (r["id"],) if state == "all" else (r["id"], state)).fetchall()
        return render_template("mrs.html", title=f"Merge requests of {owner}/{name}", r=r, items=items, state=state,
                               tabs=MR_TABS, view="merge_requests")

    @app.get("/<owner>/<name>/-/merge_requests/<int:iid>")
    def merge_request(owner, name, iid):
        r = _repo(owner, name)
        m = db().execute("SELECT * FROM merge_requests WHERE repo_id = ? AND iid = ?", (r["id"], iid)).fetchone()
        if m is None:
            abort(404)
        return render_template("mr.html", title=f"!{iid} {m['title']}", r=r, m=m)

    @app.get("/search")
    def search():
        q = request.args.get("q", "").strip()
        like = f"%{q}%"
        repos = db().execute(_REPOS + " WHERE r.name LIKE ? OR r.description LIKE ? ORDER BY r.owner, r.name",
                             (like, like)).fetchall() if q else []
        found = db().execute("SELECT i.*, r.owner, r.name FROM issues i JOIN repos r ON r.id = i.repo_id "
                             "WHERE i.title LIKE ? ORDER BY r.owner, r.name, i.iid", (like,)).fetchall() if q else []
        return render_template("search.html", title=f"Search results for '{q}'", repos=repos, issues=found, q=q)

    @app.route("/users/sign_in", methods=["GET", "POST"])
    def login():
        error = None
        if request.method == "POST":
            u = db().execute("SELECT * FROM users WHERE username = ? AND password = ?",
                             (request.form.get("username", "").strip(), request.form.get("password", ""))).fetchone()
            if u is not None:
                session["username"] = u["username"]
                return redirect(url_for("home"))
            error = "Invalid username or password."
        return render_template("login.html", title="Sign in", error=error)

    @app.get("/users/sign_out")
    def logout():
        session.clear()
        return redirect(url_for("home"))

    del flask
    return app

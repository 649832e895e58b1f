"""The forum (WebArena's "reddit", after Postmill): forums, posts, comments, votes, users.

Pages: / (forums, top posts), /f/<forum> (posts; submit link), /f/<forum>/<id> (post,
votes, comments, comment form), /f/<forum>/submit (new post), /u/<username>, /search?q=,
/login, /logout. Voting, commenting and posting need a login.
"""

from __future__ import annotations

from esopt.envs.web.deps import require_flask
from esopt.envs.web.sites.common import db, make_app, requires_login, today

NAV = """{% block nav %}<a href="{{ url_for('home') }}">Forums</a>
{% if session.get('user_id') %}<a href="{{ url_for('user', username=session.get('username')) }}">{{ session.get('username') }}</a>
<a href="{{ url_for('logout') }}">Log out</a>{% else %}<a href="{{ url_for('login') }}">Log in</a>{% endif %}
<form role="search" action="{{ url_for('search') }}" method="get"><input name="q" aria-label="Search posts"
 placeholder="Search posts" value="{{ q or '' }}"><button type="submit">Search</button></form>{% endblock %}"""

POST_LIST = """<ul id="posts">{% for p in posts %}<li class="post-row"><a href="{{ url_for('post', forum=p.forum, pid=p.id) }}">{{ p.title }}</a>
in <a href="{{ url_for('forum', forum=p.forum) }}">f/{{ p.forum }}</a> by <a href="{{ url_for('user', username=p.author) }}">{{ p.author }}</a>, {{ p.score }} points,
{{ p.n_comments }} comments</li>{% else %}<li>No posts.</li>{% endfor %}</ul>"""

TEMPLATES = {
    "home.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}<h2>Forums</h2><ul id="forums">
{% for f in forums %}<li><a href="{{ url_for('forum', forum=f.name) }}">f/{{ f.name }}</a>: {{ f.description }}</li>{% endfor %}
</ul><h2>Top posts</h2>""" + POST_LIST + "{% endblock %}",
    "forum.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}<p>{{ f.description }}</p>
<p><a href="{{ url_for('submit', forum=f.name) }}">Submit a new post</a></p>""" + POST_LIST + "{% endblock %}",
    "list.html": "{% extends 'layout.html' %}" + NAV + "{% block main %}" + POST_LIST + "{% endblock %}",
    "post.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}
<article id="post" data-my-vote="{{ my_vote }}"><p>Posted by <a href="{{ url_for('user', username=p.author) }}">{{ p.author }}</a>
in <a href="{{ url_for('forum', forum=p.forum) }}">f/{{ p.forum }}</a> on {{ p.date }}</p><p>{{ p.body }}</p>
<p>Score: <span id="score">{{ p.score }}</span>{% if my_vote == 1 %} (you upvoted){% elif my_vote == -1 %} (you downvoted){% endif %}</p>
<form method="post" action="{{ url_for('vote', forum=p.forum, pid=p.id) }}"><button name="value" value="1" type="submit">Upvote</button>
<button name="value" value="-1" type="submit">Downvote</button></form></article>
<h2>{{ comments|length }} comments</h2><div id="comments">{% for c in comments %}<div class="comment"><b>{{ c.author }}</b>: {{ c.body }}</div>
{% endfor %}</div>
<form method="post" action="{{ url_for('comment', forum=p.forum, pid=p.id) }}"><label>Your comment
<textarea name="body" rows="3"></textarea></label><button type="submit">Post comment</button></form>{% endblock %}""",
    "submit.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}
<form method="post"><label>Title <input name="title"></label><label>Body <textarea name="body" rows="4"></textarea></label>
<button type="submit">Create post</button></form>{% endblock %}""",
    "user.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}<p>Posts: {{ posts|length }}</p>
<p>Comments: {{ n_comments }}</p>""" + POST_LIST + "{% endblock %}",
    "login.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}
{% if error %}<p role="alert">{{ error }}</p>{% endif %}<form method="post"><input type="hidden" name="next" value="{{ next or '' }}">
<label>Username <input name="username" autocomplete="username"></label><label>Password <input name="password" type="password"></label>
<button type="submit">Log in</button></form>{% endblock %}""",
}

_POSTS = """SELECT p.*, u.username AS author,
    p.base_score + (SELECT COALESCE(SUM(v.value), 0) FROM votes v WHERE v.post_id = p.id) AS score,
    (SELECT COUNT(*) FROM comments c WHERE c.post_id = p.id) AS n_comments
    FROM posts p JOIN users u ON u.id = p.author_id"""


def create_app(secret: bytes):
    flask = require_flask()
    from flask import abort, flash, redirect, render_template, request, session, url_for

    app = make_app("reddit", "Postmill", TEMPLATES, secret)

    login_required = requires_login("user_id", "login", "Log in to do that.")

    def _post(forum, pid):
        p = db().execute(_POSTS + " WHERE p.id = ? AND p.forum = ?", (pid, forum)).fetchone()
        if p is None:
            abort(404)
        return p

    @app.get("/")
    def home():
        return render_template("home.html", title="Postmill", forums=db().execute("SELECT * FROM forums ORDER BY name").fetchall(),
                               posts=db().execute(_POSTS + " ORDER BY score DESC, p.id LIMIT 8").fetchall())

    @app.get("/f/<forum>")
    def forum(forum):
        f = db().execute("SELECT * FROM forums WHERE name = ?", (forum,)).fetchone()
        if f is None:
            abort(404)
        posts = db().execute(_POSTS + " WHERE p.forum = ? ORDER BY p.id DESC", (forum,)).fetchall()
        return render_template("forum.html", title=f"f/{forum}", f=f, posts=posts)

    @app.get("/f/<forum>/<int:pid>")
    def post(forum, pid):
        p = _post(forum, pid)
        comments = db().execute("SELECT c.*, u.username AS author FROM comments c JOIN users u ON u.id = c.author_id "
                                "WHERE c.post_id = ? ORDER BY c.id", (pid,)).fetchall()
        my = db().execute("SELECT value FROM votes WHERE user_id = ? AND post_id = ?", (session.get("user_id"), pid)).fetchone()
        return render_template("post.html", title=p["title"], p=p, comments=comments, my_vote=my[0] if my else 0)

    @app.post("/f/<forum>/<int:pid>/vote")
    @login_required
    def vote(forum, pid):
        _post(forum, pid)
        value = 1 if request.form.get("value") == "1" else -1
        conn = db()
        old = conn.execute("SELECT value FROM votes WHERE user_id = ? AND post_id = ?", (session["user_id"], pid)).fetchone()
        if old is not None and old[0] == value:  # voting the same way again takes the vote back
            conn.execute("DELETE FROM votes WHERE user_id = ? AND post_id = ?", (session["user_id"], pid))
        else:
            conn.execute("INSERT OR REPLACE INTO votes VALUES (?, ?, ?)", (session["user_id"], pid, value))
        conn.commit()
        return redirect(url_for("post", forum=forum, pid=pid))

    @app.post("/f/<forum>/<int:pid>/comment")
    @login_required
    def comment(forum, pid):
        _post(forum, pid)
        body = request.form.get("body", "").strip()
        if not body:
            flash("A comment cannot be empty.")
        else:
            db().execute("INSERT INTO comments (post_id, author_id, body, date) VALUES (?, ?, ?, ?)",
                         (pid, session["user_id"], body[:2000], today()))
            db().commit()
        return redirect(url_for("post", forum=forum, pid=pid))

    @app.route("/f/<forum>/submit", methods=["GET", "POST"])
    @login_required
    def submit(forum):
        if db().execute("SELECT 1 FROM forums WHERE name = ?", (forum,)).fetchone() is None:
            abort(404)
        if request.method == "POST":
            title, body = request.form.get("title", "").strip(), request.form.get("body", "").strip()
            if not title:
                flash("A post needs a title.")
            else:
                cur = db().execute("INSERT INTO posts (forum, title, body, author_id, base_score, date) VALUES (?, ?, ?, ?, 0, ?)",
                                   (forum, title[:300], body[:5000], session["user_id"], today()))
                db().commit()
                return redirect(url_for("post", forum=forum, pid=cur.lastrowid))
        return render_template("submit.html", title=f"Submit to f/{forum}")

    @app.get("/u/<username>")
    def user(username):
        u = db().execute("SELECT * FROM users WHERE username = ?", (username,)).fetchone()
        if u is None:
            abort(404)
        posts = db().execute(_POSTS + " WHERE p.author_id = ? ORDER BY p.id DESC", (u["id"],)).fetchall()
        n = db().execute("SELECT COUNT(*) FROM comments WHERE author_id = ?", (u["id"],)).fetchone()[0]
        return render_template("user.html", title=f"u/{username}", posts=posts, n_comments=n)

    @app.get("/search")
    def search():
        q = request.args.get("q", "").strip()
        posts = db().execute(_POSTS + " WHERE p.title LIKE ? ORDER BY p.id", (f"%{q}%",)).fetchall() if q else []
        return render_template("list.html", title=f"Search results for '{q}'", posts=posts, q=q)

    @app.route("/login", methods=["GET", "POST"])
    def login():
        error = None
        if request.method == "POST":
            u = db().execute("SELECT * FROM users WHERE username = ? AND password = ?",
                             (request.form.get("username", "").strip(), request.form.get("password", ""))).fetchone()
            if u is not None:
                session.update(user_id=u["id"], username=u["username"])
                return redirect(url_for("home"))
            error = "Wrong username or password."
        return render_template("login.html", title="Log in", error=error)

    @app.get("/logout")
    def logout():
        session.clear()
        return redirect(url_for("home"))

    del flask
    return app

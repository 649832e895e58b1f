"""The local sites: a shop, a forum and a code host, Flask apps on SQLite, seeded deterministically.

WebArena names its sites shopping, shopping_admin, reddit and gitlab; so do we. The shop's
admin view is its own site (`shopping_admin`, the shop's URL + /admin), as in WebArena.
Each site runs as one HTTP server on a free localhost port (esopt.envs.web.sites.serve,
one child process for all of them); every episode gets fresh copies of the seeded
databases under its own URL prefix (esopt.envs.web.sites.server.LocalSites). The agent
never sees that prefix (a free port and a random token): its observations and `goto`
actions use SHOWN_URLS, WebArena's own addresses on localhost, so the same seed gives the
same prompts in every run.

Modules:
  data      the seeded records (products, customers, orders, posts, repos, issues, ...)
  db        SQLite schemas and the template databases: build_template
  common    the episode dispatch middleware, the page layout, the database handle
  shop, forum, codehost   the three Flask apps (create_app)
  serve     the server process (python -m esopt.envs.web.sites.serve)
  server    LocalSites (start, episodes, login, helper functions) and FixedSites (given URLs)
"""

from esopt.envs.web.sites.data import CODE_USER, FORUM_USER, SHOP_ADMIN, SHOP_CUSTOMER

# site -> (login path under the site's URL, form fields); what `require_login` logs in with
LOGINS = {
    "shopping": ("/login", {"email": SHOP_CUSTOMER[0], "password": SHOP_CUSTOMER[1]}),
    "shopping_admin": ("/login", {"username": SHOP_ADMIN[0], "password": SHOP_ADMIN[1]}),
    "reddit": ("/login", {"username": FORUM_USER[0], "password": FORUM_USER[1]}),
    "gitlab": ("/users/sign_in", {"username": CODE_USER[0], "password": CODE_USER[1]}),
}
SITES = tuple(LOGINS)  # the site names a task may list
APP_MODULES = {"shopping": "esopt.envs.web.sites.shop", "reddit": "esopt.envs.web.sites.forum",
               "gitlab": "esopt.envs.web.sites.codehost"}  # the servers; shopping_admin is the shop's /admin
# What the agent sees instead of an episode's URLs: WebArena's ports on localhost
# (esopt.envs.web.webarena.WEBARENA_SITES), the admin view under the shop's, as served here.
SHOWN_URLS = {"shopping": "http://localhost:7770", "shopping_admin": "http://localhost:7770/admin",
              "reddit": "http://localhost:9999", "gitlab": "http://localhost:8023"}

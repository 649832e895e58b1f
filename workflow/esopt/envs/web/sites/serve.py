"""The local sites' server process: `python -m esopt.envs.web.sites.serve --root DIR --sites a,b`.

Serves each site's Flask app (behind esopt.envs.web.sites.common.EpisodeDispatch) on a
free 127.0.0.1 port, prints one JSON line {site: port} when all are listening, and
exits, deleting --root, as soon as its standard input closes: the parent closes it on shutdown, and the
kernel closes it when the parent dies, so a server never outlives the process that
started it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import secrets
import shutil
import sys
import threading


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="the folder holding episodes/<token>/<site>.sqlite")
    ap.add_argument("--sites", required=True, help="comma-separated site names (shopping,reddit,gitlab)")
    args = ap.parse_args(argv)

    from werkzeug.serving import make_server

    from esopt.envs.web.sites import APP_MODULES
    from esopt.envs.web.sites.common import EpisodeDispatch

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    secret = secrets.token_bytes(32)
    ports = {}
    for site in args.sites.split(","):
        if site not in APP_MODULES:
            raise SystemExit(f"unknown site {site!r}: expected some of {sorted(APP_MODULES)}")
        app = importlib.import_module(APP_MODULES[site]).create_app(secret)
        server = make_server("127.0.0.1", 0, EpisodeDispatch(app, args.root, site), threaded=True)
        threading.Thread(target=server.serve_forever, name=f"serve-{site}", daemon=True).start()
        ports[site] = server.server_port
    sys.stdout.write(json.dumps(ports) + "\n")
    sys.stdout.flush()
    try:
        while sys.stdin.buffer.read(4096):  # nothing is ever sent: this returns b"" when the parent goes
            pass
    finally:
        shutil.rmtree(args.root, ignore_errors=True)  # the episodes' databases go with the server
        os._exit(0)


if __name__ == "__main__":
    main()

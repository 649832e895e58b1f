"""The optional dependencies of the web benchmark, checked with errors that say how to install them.

Flask (the local sites) and Playwright (the browser driver) come with the `web` extra
(`pip install -e ".[web]"`); the browser itself is Debian's `chromium` package
(`apt-get install chromium`): `playwright install` downloads browsers, which is not
possible everywhere, so Playwright is always pointed at the system's chromium.
"""

from __future__ import annotations

import os
import shutil

EXTRA_HINT = 'pip install -e ".[web]"'
CHROMIUM_HINT = "apt-get install chromium (Debian's package)"
CHROMIUM_NAMES = ("chromium", "chromium-browser")


class WebDependencyError(RuntimeError):
    """A dependency of the web benchmark is missing; the message says how to install it."""


def require_flask():
    try:
        import flask
    except ImportError as e:
        raise WebDependencyError(f"the web benchmark's local sites need Flask: {EXTRA_HINT} ({e})") from e
    return flask


def require_playwright():
    try:
        from playwright import sync_api
    except ImportError as e:
        raise WebDependencyError(f"the web benchmark's browser needs Playwright: {EXTRA_HINT} ({e})") from e
    return sync_api


def chromium_executable() -> str:
    """The chromium binary Playwright drives: $ESOPT_CHROMIUM when set, else `chromium` on PATH."""
    env = os.environ.get("ESOPT_CHROMIUM")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise WebDependencyError(f"ESOPT_CHROMIUM={env!r} is not an executable file")
        return env
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    raise WebDependencyError(f"no chromium on PATH (looked for {', '.join(CHROMIUM_NAMES)}): {CHROMIUM_HINT}, "
                             "or set ESOPT_CHROMIUM to a Chromium binary")


def missing() -> list[str]:
    """What the browser tests lack, as install hints (empty when everything is there)."""
    out = []
    for check in (require_flask, require_playwright, chromium_executable):
        try:
            check()
        except WebDependencyError as e:
            out.append(str(e))
    return out


def versions() -> dict[str, str | None]:
    """The browser's and the libraries' versions, for provenance (None: not installed)."""
    import importlib.metadata
    import subprocess

    out: dict[str, str | None] = {}
    for dist in ("playwright", "flask"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    try:
        exe = chromium_executable()
        run = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        out["chromium"] = run.stdout.strip() or None
        out["chromium_path"] = exe
    except (WebDependencyError, OSError, subprocess.SubprocessError):
        out["chromium"] = None
    return out

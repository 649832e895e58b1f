"""A small pool of headless Chromium browsers (Debian's chromium, driven by Playwright).

Each episode gets its own browser context (cookies, storage, pages) on the least busy
browser of the pool. A browser that crashed or hung is restarted in place
(`restart`); contexts it held are gone, and their episodes replay themselves on the new
browser (esopt.envs.web.env). Hangs are bounded by a watchdog (`guard`): a browser call
that does not return within `hang_s` gets its browser killed, which makes the call fail
at once instead of blocking the run. Killing a browser ends every context on it, so
`hang_s` sits above every page timeout (esopt.envs.web.env.WebRuntime refuses less): a
slow page fails its own call through Playwright's timeout long before the watchdog fires,
and the watchdog is left for browsers that answer nothing.

Every browser is launched with a marker flag (--esopt-browser=<id>) so its process can
be found and killed, and with a dead proxy for everything but loopback addresses
(`block_external`), so a page or a typed URL never reaches past this machine. When this
process dies, Playwright's driver sees its pipe close and takes the browsers with it;
`close()` (also run at interpreter exit) closes them on purpose.

The pool is used from the thread that made it (Playwright's sync API is bound to one
thread); a call from another thread raises.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from esopt.envs.web.deps import chromium_executable, require_playwright

log = logging.getLogger(__name__)

LAUNCH_TIMEOUT_MS = 30_000
BLOCKING_PROXY = {"server": "http://127.0.0.1:9", "bypass": "127.0.0.1,localhost,[::1]"}  # port 9: discard, closed


class BrowserCrash(RuntimeError):
    """The browser behind an episode died or hung; the message says which and how."""


@dataclass
class _Slot:
    index: int
    browser: Any = None
    marker: str = ""
    generation: int = 0  # bumps at every (re)launch
    contexts: int = 0
    hung: bool = False  # the watchdog killed it
    pids: list[int] = field(default_factory=list)


def _find_pids(marker: str) -> list[int]:
    """Pids of the browser process launched with `marker` (first) and of all its descendants
    (zygotes, renderers, GPU and utility processes: they do not carry the flag)."""
    import psutil

    for p in psutil.Process().children(recursive=True):
        try:
            if any(marker in a for a in p.cmdline()):
                return [p.pid] + [c.pid for c in p.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return []


# Playwright's sync API allows one running instance per thread: pools of a thread share it.
_PLAYWRIGHT: dict[int, list] = {}  # thread id -> [playwright, number of pools using it]
_PLAYWRIGHT_LOCK = threading.Lock()


def _acquire_playwright(sync_api):
    tid = threading.get_ident()
    with _PLAYWRIGHT_LOCK:
        entry = _PLAYWRIGHT.get(tid)
        if entry is None:
            entry = _PLAYWRIGHT[tid] = [sync_api.sync_playwright().start(), 0]
        entry[1] += 1
        return entry[0]


def _release_playwright(pw) -> None:
    with _PLAYWRIGHT_LOCK:
        for tid, entry in list(_PLAYWRIGHT.items()):
            if entry[0] is pw:
                entry[1] -= 1
                if entry[1] <= 0:
                    del _PLAYWRIGHT[tid]
                    with contextlib.suppress(Exception):
                        pw.stop()
                return


def _kill_pids(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _close_all(state: dict) -> None:
    for slot in state["slots"]:
        with contextlib.suppress(Exception):
            if slot.browser is not None:
                slot.browser.close()
        _kill_pids(_find_pids(slot.marker))  # looked up afresh: a stale pid may be someone else's by now
    if state["pw"] is not None:
        _release_playwright(state["pw"])
    state["pw"] = None


class BrowserPool:
    """`size` headless Chromium browsers; `new_context()` hands out contexts round the pool."""

    def __init__(self, size: int = 1, headless: bool = True, block_external: bool = True, hang_s: float = 30.0,
                 extra_args: tuple[str, ...] = ()):
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"browser pool size must be a positive int, got {size!r}")
        sync_api = require_playwright()
        self.executable = chromium_executable()
        self.headless, self.block_external, self.hang_s = headless, block_external, float(hang_s)
        self.extra_args = tuple(extra_args)
        self._thread = threading.get_ident()
        self._id = uuid.uuid4().hex[:12]
        self._state = {"pw": _acquire_playwright(sync_api), "slots": [_Slot(i) for i in range(size)]}
        self._finalizer = weakref.finalize(self, _close_all, self._state)
        atexit.register(self._finalizer)
        self.restarts = 0
        try:
            for slot in self._state["slots"]:
                self._launch(slot)
        except Exception:
            self.close()
            raise

    @property
    def slots(self) -> list[_Slot]:
        return self._state["slots"]

    def _check_thread(self) -> None:
        if threading.get_ident() != self._thread:
            raise RuntimeError("a BrowserPool is bound to the thread that made it (Playwright's sync API); "
                               "make one pool per thread")

    def _launch(self, slot: _Slot) -> None:
        slot.generation += 1
        slot.marker = f"--esopt-browser={self._id}-{slot.index}-{slot.generation}"
        kw = {"proxy": BLOCKING_PROXY} if self.block_external else {}
        slot.browser = self._state["pw"].chromium.launch(
            executable_path=self.executable, headless=self.headless, timeout=LAUNCH_TIMEOUT_MS,
            args=[slot.marker, "--disable-dev-shm-usage", *self.extra_args], **kw)
        slot.contexts, slot.hung = 0, False
        slot.pids = _find_pids(slot.marker)

    def pids(self) -> list[int]:
        """Pids of every chromium process of the pool (for tests and cleanup checks)."""
        return [pid for slot in self.slots for pid in _find_pids(slot.marker)]

    def browser_pid(self, index: int) -> int:
        """The browser (main) process of slot `index`."""
        pids = _find_pids(self.slots[index].marker)
        if not pids:
            raise RuntimeError(f"browser {index} has no process")
        return pids[0]

    def new_context(self, **kwargs) -> tuple[_Slot, int, Any]:
        """(slot, its generation, a new context) on the browser with the fewest contexts."""
        self._check_thread()
        slot = min(self.slots, key=lambda s: (s.contexts, s.index))
        if not self.healthy(slot):
            self.restart(slot, "found dead when a context was asked for")
        ctx = slot.browser.new_context(**kwargs)
        slot.contexts += 1
        return slot, slot.generation, ctx

    def release(self, slot: _Slot, generation: int, ctx) -> None:
        if slot.generation == generation:
            slot.contexts = max(0, slot.contexts - 1)
            with contextlib.suppress(Exception), self.guard(slot):
                ctx.close()

    def healthy(self, slot: _Slot) -> bool:
        if slot.browser is None or slot.hung:
            return False
        try:
            if not slot.browser.is_connected():
                return False
        except Exception:
            return False
        import psutil

        alive = []
        for pid in slot.pids:
            try:
                alive.append(psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD))
            except psutil.NoSuchProcess:
                alive.append(False)
        return bool(alive) and alive[0]

    def restart(self, slot: _Slot, reason: str) -> None:
        """Kill what is left of the slot's browser and launch a fresh one."""
        self._check_thread()
        log.warning("restarting browser %d (generation %d): %s", slot.index, slot.generation, reason)
        old = slot.browser
        slot.browser = None
        _kill_pids(_find_pids(slot.marker))
        with contextlib.suppress(Exception):
            old.close()
        self._launch(slot)
        self.restarts += 1

    @contextlib.contextmanager
    def guard(self, slot: _Slot, seconds: float | None = None) -> Iterator[None]:
        """Kill the slot's browser if the block takes longer than `seconds` (default hang_s):
        a hung browser then fails the blocked call instead of stalling the run."""
        limit = self.hang_s if seconds is None else seconds

        def fire():
            slot.hung = True
            log.warning("browser %d did not answer within %.0f s: killing it", slot.index, limit)
            _kill_pids(_find_pids(slot.marker))

        timer = threading.Timer(limit, fire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> BrowserPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

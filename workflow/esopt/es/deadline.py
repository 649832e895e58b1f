"""The per-member deadline (config distributed.member_deadline_s): a member whose
evaluation runs too long stops the run instead of being scored.

A member cut short would get a wrong reward (its episodes unfinished) and bias the
update, so the run stops and names it; the history holds every finished generation, and
a rerun of the same command resumes from there. Nothing interrupts torch work: the
elapsed time is checked when the member returns (MemberDeadlineError, raised through the
normal cleanup), and a watchdog thread, armed for the member, ends the process only if
it has not returned `grace` seconds after its deadline: it logs which member it is,
prints every thread's stack (faulthandler) and exits with EXIT_CODE.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

EXIT_CODE = 124  # as coreutils `timeout`: the process was stopped for running too long
KEY = "distributed.member_deadline_s"


class MemberDeadlineError(RuntimeError):
    """A member's evaluation took longer than distributed.member_deadline_s."""


def grace_s(deadline_s: float) -> float:
    """How long after the deadline the watchdog waits for a member to return: the deadline
    itself, at least 1 s and at most 60 s."""
    return min(max(deadline_s, 1.0), 60.0)


def _where(member: int, generation: int, rank: int, world_size: int) -> str:
    return f"member {member} of generation {generation} (rank {rank} of {world_size})"


@contextmanager
def member_deadline(deadline_s: float | None, member: int, generation: int, rank: int = 0,
                    world_size: int = 1) -> Iterator[None]:
    """Time one member's evaluation against `deadline_s` (None: no limit).

    Raises MemberDeadlineError when the body returns past the deadline; ends the process
    (EXIT_CODE) if it has not returned grace_s(deadline_s) later."""
    if deadline_s is None:
        yield
        return
    where = _where(member, generation, rank, world_size)
    start = time.monotonic()

    def stuck() -> None:
        elapsed = time.monotonic() - start
        msg = (f"{where} has run {elapsed:.1f} s without returning, past {KEY} = {deadline_s:g} s: "
               f"ending the process (exit {EXIT_CODE}); no reward is recorded for it, a rerun resumes from the "
               "last generation in history.json. Every thread's stack follows.")
        log.critical(msg)
        print(f"esopt: error: {msg}", file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(EXIT_CODE)

    watchdog = threading.Timer(deadline_s + grace_s(deadline_s), stuck)
    watchdog.daemon = True
    watchdog.name = f"esopt-member-deadline-{member}"
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()
    elapsed = time.monotonic() - start
    if elapsed > deadline_s:
        raise MemberDeadlineError(
            f"{where} took {elapsed:.1f} s, past {KEY} = {deadline_s:g} s: stopping without scoring it (a member "
            "cut short or late would bias the update); a rerun resumes from the last generation in history.json. "
            f"Raise {KEY} if members legitimately take this long.")

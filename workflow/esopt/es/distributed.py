"""Population sharding across processes: torch.distributed, rewards only on the wire.

Each rank holds one replica of the model and evaluates the members i with
i % world_size == rank. The ranks exchange (reward, info) of their members with one
all-gather per generation; every rank then applies the same seeded update, so the
replicas stay bit-identical without sending a single weight.

Launch with torchrun (or `accelerate launch`, which calls it):
    torchrun --standalone --nproc-per-node 2 -m esopt.cli.train_es ...
gloo on CPU, nccl on GPU (one GPU per rank: cuda:LOCAL_RANK).

Liveness (config `distributed`, `from_config`): the process group's timeout is
`timeout_s` (torch's default, 10 minutes, would kill a long generation with an opaque
watchdog error). Before each all-gather or barrier every rank writes its arrival to the
rendezvous store (the TCPStore torchrun or init_process_group already runs; plain TCP,
so the same with nccl and gloo) and waits there until every rank has arrived: after
`warn_after_s` it logs which ranks it is waiting for, with what they last reported
(`Collective.progress`: their generation, members done and running), and after
`timeout_s` it raises SlowRankError naming them. The collective itself starts only once
all ranks are there, so the backend's own timeout is a backstop for collectives outside
this class (e.g. FSDP's). torch's monitored_barrier names late ranks too, but only on
gloo, only at its timeout and leaves the group unusable after it; the store can warn
and keep waiting.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

log = logging.getLogger(__name__)


class SlowRankError(RuntimeError):
    """Ranks did not reach a collective within distributed.timeout_s."""


@dataclass
class Collective:
    """The single-process default: rank 0 of 1, gathers return their own argument.

    `member_deadline_s` (config distributed.member_deadline_s) is read by the ES trainer
    (esopt.es.deadline): it belongs to the process, like the ranks' timeouts."""

    rank: int = 0
    world_size: int = 1
    member_deadline_s: float | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def members(self, population: int) -> range:
        """The member indices this rank evaluates."""
        return range(self.rank, population, self.world_size)

    def all_gather(self, obj: Any) -> list[Any]:
        return [obj]

    def barrier(self) -> None:
        pass

    def progress(self, **fields: Any) -> None:
        """Report what this rank is doing (merged into its status; other ranks show it when
        they wait for this one). Keys the messages know: stage (words), generation, members
        (list), done ({member: wall s}), running (member), running_since (time.time())."""

    def close(self) -> None:
        pass


class TorchCollective(Collective):
    """A torch.distributed process group (initialised by the caller or by `from_env`).

    With `store` (a torch.distributed.Store every rank reaches), all_gather and barrier
    first wait for every rank in the store: warnings after warn_after_s, SlowRankError
    after timeout_s. Without it they call the collective directly."""

    def __init__(self, store: Any = None, timeout_s: float | None = None, warn_after_s: float | None = None,
                 member_deadline_s: float | None = None) -> None:
        import torch.distributed as dist

        super().__init__(rank=dist.get_rank(), world_size=dist.get_world_size(), member_deadline_s=member_deadline_s)
        self._dist = dist
        self._store = store
        self.timeout_s = timeout_s
        self.warn_after_s = warn_after_s
        self._calls = 0  # collectives so far: every rank makes the same calls in the same order
        self._status: dict[str, Any] = {}

    def all_gather(self, obj: Any) -> list[Any]:
        self._await_ranks("all_gather")
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        self._await_ranks("barrier")
        self._dist.barrier()

    def progress(self, **fields: Any) -> None:
        if self._store is None:
            return
        self._status.update(fields, t=time.time())
        self._store.set(f"status/{self.rank}", json.dumps(self._status))

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()

    def _status_of(self, rank: int) -> str:
        raw = self._store.get(f"status/{rank}") if self._store.check([f"status/{rank}"]) else None
        return describe_status(json.loads(raw) if raw else None, time.time())

    def _await_ranks(self, what: str) -> None:
        """Block until every rank has arrived at this collective (call number n)."""
        if self._store is None or self.world_size == 1:
            return
        n = self._calls
        self._calls += 1
        name = f"{what} #{n}"
        key = lambda r, k=n: f"arrive/{k}/{r}"
        arrival = time.time()
        self._store.set(key(self.rank), str(arrival))
        if n >= 2:  # every rank passed call n - 2 before any arrived at n - 1, which this rank passed
            self._store.delete_key(key(self.rank, n - 2))
        start = time.monotonic()
        missing = [r for r in range(self.world_size) if r != self.rank]
        late: set[int] = set()  # ranks named in a warning: reported when they arrive
        next_warn = self.warn_after_s
        poll = 0.005
        while True:
            arrived = [r for r in missing if self._store.check([key(r)])]
            waited = time.monotonic() - start
            for r in arrived:
                if r in late:  # by the time it wrote (hosts' clocks agree to NTP's precision)
                    log.warning("rank %d reached %s %.1f s after rank %d", r, name,
                                float(self._store.get(key(r))) - arrival, self.rank)
            missing = [r for r in missing if r not in arrived]
            if not missing:
                return
            if self.timeout_s is not None and waited >= self.timeout_s:
                whom = "; ".join(f"rank {r} ({self._status_of(r)})" for r in missing)
                raise SlowRankError(
                    f"rank {self.rank} waited {waited:.1f} s at {name} for {whom}, past distributed.timeout_s = "
                    f"{self.timeout_s:g} s: stopping (a rerun resumes from the last saved generation or step; "
                    "raise distributed.timeout_s if ranks legitimately take longer)")
            if next_warn is not None and waited >= next_warn:
                for r in missing:
                    late.add(r)
                    log.warning("rank %d: waiting %.1f s at %s for rank %d (%s)", self.rank, waited, name, r,
                                self._status_of(r))
                next_warn += self.warn_after_s
            # poll (store.wait with a timeout would log a c10d socket warning each time it expires):
            # every 10 ms at first, backing off to 1 s, never past the next warning or the timeout
            until = [x for x in (self.timeout_s, next_warn) if x is not None]
            poll = min(poll * 2, 1.0)
            time.sleep(max(min([poll, *(x - waited for x in until)]), 0.001))


def describe_status(status: dict[str, Any] | None, now: float) -> str:
    """What a rank last reported (Collective.progress), in words, e.g. 'generation 3, members
    [1, 3, 5]: done 1 (2.1 s), 3 (2.0 s); running member 5 for 6.3 s; last seen 6.3 s ago'."""
    if not status:
        return "no progress reported yet"
    parts = [status["stage"]] if status.get("stage") else []
    head = ", ".join(p for p in (f"generation {status['generation']}" if "generation" in status else "",
                                 f"members {status['members']}" if "members" in status else "") if p)
    done = status.get("done") or {}
    if done:
        parts.append("done " + ", ".join(f"{m} ({s:.1f} s)" for m, s in done.items()))
    if status.get("running") is not None:
        parts.append(f"running member {status['running']} for {now - status['running_since']:.1f} s")
    parts.append(f"last seen {now - status['t']:.1f} s ago")
    return (head + ": " if head else "") + "; ".join(parts)


def launched_world_size() -> int:
    """WORLD_SIZE as set by torchrun / accelerate launch (1 when run directly)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def from_env(backend: str = "auto", timeout_s: float | None = None, warn_after_s: float | None = None,
             member_deadline_s: float | None = None) -> Collective:
    """The collective of this process: TorchCollective under torchrun, else the local one.

    Initialises the default process group (env://) with timeout_s as its timeout (None:
    torch's default) and keeps the rendezvous store for the ranks' arrival and progress."""
    if launched_world_size() <= 1:
        return Collective(member_deadline_s=member_deadline_s)
    import torch.distributed as dist

    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = timedelta(seconds=timeout_s) if timeout_s is not None else None
    # a namespace per torchrun attempt: a restarted group starts with no stale keys
    prefix = f"esopt/{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    if dist.is_initialized():  # by the caller: its store, when torch still exposes it
        get_store = getattr(dist.distributed_c10d, "_get_default_store", None)
        base = get_store() if get_store is not None else None
        store = dist.PrefixStore(prefix, base) if base is not None else None
    else:
        base, rank, world = next(dist.rendezvous("env://"))
        store = dist.PrefixStore(prefix, base)
        # Every rank started (the store's timeout: torch's 30 min) before the group is made, whose
        # creation waits only timeout_s: a slow start is not a slow generation.
        store.set(f"started/{rank}", "1")
        store.wait([f"started/{r}" for r in range(world)])
        dist.init_process_group(backend=backend, store=dist.PrefixStore("default_pg", base), rank=rank,
                                world_size=world, **({"timeout": timeout} if timeout is not None else {}))
    c = TorchCollective(store, timeout_s, warn_after_s, member_deadline_s)
    log.info("rank %d of %d (%s, timeout %s s, warn after %s s)", c.rank, c.world_size, backend, timeout_s,
             warn_after_s)
    return c


def from_config(cfg: dict[str, Any] | None, backend: str | None = None) -> Collective:
    """`from_env` with the config's `distributed` block (schema defaults filled):
    backend (unless given), timeout_s, warn_after_s, member_deadline_s. Every command
    that starts a process group (train-es, the sharded RL baselines) starts it here."""
    d = (cfg or {}).get("distributed") or {}
    return from_env(backend or d.get("backend", "auto"), d.get("timeout_s"), d.get("warn_after_s"),
                    d.get("member_deadline_s"))

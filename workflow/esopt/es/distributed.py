"""Population sharding across processes: torch.distributed, rewards only on the wire.

Each rank holds one replica of the model and evaluates the members i with
i % world_size == rank. The ranks exchange (reward, info) of their members with one
all-gather per generation; every rank then applies the same seeded update, so the
replicas stay bit-identical without sending a single weight.

Launch with torchrun (or `accelerate launch`, which calls it):
    torchrun --standalone --nproc-per-node 2 -m esopt.cli.train_es ...
gloo on CPU, nccl on GPU (one GPU per rank: cuda:LOCAL_RANK).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger(__name__)


@dataclass
class Collective:
    """The single-process default: rank 0 of 1, gathers return their own argument."""

    rank: int = 0
    world_size: int = 1

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

    def close(self) -> None:
        pass


class TorchCollective(Collective):
    """A torch.distributed process group (initialised by the caller or by `from_env`)."""

    def __init__(self) -> None:
        import torch.distributed as dist

        super().__init__(rank=dist.get_rank(), world_size=dist.get_world_size())
        self._dist = dist

    def all_gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        self._dist.barrier()

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()


def launched_world_size() -> int:
    """WORLD_SIZE as set by torchrun / accelerate launch (1 when run directly)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def from_env(backend: str = "auto") -> Collective:
    """The collective of this process: TorchCollective under torchrun, else the local one."""
    if launched_world_size() <= 1:
        return Collective()
    import torch.distributed as dist

    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    c = TorchCollective()
    log.info("rank %d of %d (%s)", c.rank, c.world_size, backend)
    return c

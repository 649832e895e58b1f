"""A small ES run under torchrun with one deliberately slow member (tests/test_slow_rank.py).

ESTrainer on a 4x1 linear layer, reward -||w - 1||², through the collective that
esopt.es.distributed.from_config builds from a `distributed` block. The member
--slow-member of generation --slow-generation sleeps --sleep seconds first. Rank 0
writes the history to --out.

--raw: no ES; rank --slow-rank sleeps --sleep seconds while the others call
torch.distributed.barrier() directly (no store wait): the process group's own timeout.
"""

import argparse
import logging
import time

import torch

from esopt.es import ESConfig, ESTrainer, SigmaSchedule
from esopt.es.distributed import from_config


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--timeout", type=float, required=True)
    p.add_argument("--warn", type=float, default=None)
    p.add_argument("--deadline", type=float, default=None)
    p.add_argument("--slow-member", type=int, default=1)
    p.add_argument("--slow-generation", type=int, default=1)
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--raw", action="store_true")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    c = from_config({"distributed": {"backend": "gloo", "timeout_s": a.timeout, "warn_after_s": a.warn,
                                     "member_deadline_s": a.deadline}})
    try:
        if a.raw:
            if c.rank == a.slow_rank:
                time.sleep(a.sleep)
            start = time.monotonic()
            try:
                torch.distributed.barrier()
            except Exception as e:  # the timeout of the process group, in gloo's words
                print(f"rank {c.rank}: raw barrier failed after {time.monotonic() - start:.1f} s: {e}", flush=True)
                return 3
            return 0
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1, bias=False)

        def fitness(member):
            if (member.index, member.generation) == (a.slow_member, a.slow_generation):
                time.sleep(a.sleep)
            return -float(((model.weight.detach() - 1) ** 2).sum()), {}

        cfg = ESConfig(population=4, generations=3, alpha=0.1, sigma=SigmaSchedule("constant", 0.1, total=3))
        history = ESTrainer(model, cfg, fitness, history_path=a.out if c.is_main else None, progress=False,
                            collective=c).run()
        print(f"rank {c.rank}: {len(history.generations)} generations, weight {model.weight.tolist()}", flush=True)
        return 0
    finally:
        c.close()


if __name__ == "__main__":
    raise SystemExit(main())

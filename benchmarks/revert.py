"""Time outside rollouts: a member's apply + revert under es.revert exact and snapshot, side by side.

For bf16 models of several sizes (N(0, 0.02) weights, an embedding, norms and linear
maps) it prints the time of one apply + revert with the exact revert (inferred from the
weights and the regenerated noise, no copy) and with the snapshot revert (a host copy
taken at apply and copied back), a naive in-place add/subtract of the same noise (which
does not restore bf16 weights: the floor of any scheme that regenerates the noise), one
noise pass alone, one update over G seeds, and the memory each revert holds while a
member runs. Both reverts are checked to perturb alike and restore bit for bit.

    python benchmarks/revert.py --threads 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from esopt.es.noise import noise_chunks  # noqa: E402
from esopt.es.perturb import Perturber  # noqa: E402

SIZES = {  # (hidden, ffn, layers, vocab)
    "tiny": (128, 384, 4, 512),
    "25M": (512, 1536, 8, 8192),
    "130M": (1024, 4096, 8, 32000),
}


class Model(torch.nn.Module):
    def __init__(self, d: int, ff: int, layers: int, vocab: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.up = torch.nn.ModuleList(torch.nn.Linear(d, ff, bias=False) for _ in range(2 * layers))
        self.down = torch.nn.ModuleList(torch.nn.Linear(ff, d, bias=False) for _ in range(layers))
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(d, bias=False) for _ in range(2 * layers))
        torch.manual_seed(0)
        with torch.no_grad():
            for p in self.parameters():
                p.normal_(0.0, 0.02)
        self.to(torch.bfloat16)


def timed(fn, repeats: int) -> float:
    fn()  # warm: scratch buffers, the snapshot's allocation
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="*", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--sigma", type=float, default=1e-3)
    ap.add_argument("--population", type=int, default=16, help="seeds in the timed update")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"bf16, sigma {args.sigma}, {args.threads} thread(s); times per member (apply + revert) in ms\n")
    head = f"{'model':>6s} {'params':>8s} {'exact':>9s} {'snapshot':>9s} {'ex/snap':>8s} {'naive':>9s} " \
           f"{'noise':>8s} {'update G':>9s} {'held exact':>11s} {'held snap':>10s}"
    print(head)
    for size in args.sizes:
        model = Model(*SIZES[size])
        n = sum(p.numel() for p in model.parameters())
        base = {k: v.clone() for k, v in model.state_dict().items()}
        row, held, perturbed = {}, {}, {}
        for mode in ("exact", "snapshot"):
            p = Perturber(model, revert=mode)
            p.apply(1, args.sigma)
            perturbed[mode] = {k: v.clone() for k, v in model.state_dict().items()}
            held[mode] = p.held_bytes()
            p.revert()
            if any(not torch.equal(base[k], v) for k, v in model.state_dict().items()):
                raise RuntimeError(f"{mode} revert did not restore the weights")
            row[mode] = timed(lambda p=p: (p.apply(1, args.sigma), p.revert()), args.repeats)
        if any(not torch.equal(perturbed["exact"][k], perturbed["snapshot"][k]) for k in base):
            raise RuntimeError("the two reverts perturbed differently")
        params = [(name, q) for name, q in model.named_parameters()]

        def noise_pass(params=params):
            for name, q in params:
                for _ in noise_chunks(1, name, q.numel(), q.device):
                    pass

        def naive(params=params):
            for sign in (1, -1):
                for name, q in params:
                    for a, b, eps in noise_chunks(1, name, q.numel(), q.device):
                        q.data.view(-1)[a:b].add_(eps, alpha=sign * args.sigma)

        with torch.no_grad():
            row["naive"] = timed(naive, args.repeats)
            model.load_state_dict(base)
        row["noise"] = timed(noise_pass, args.repeats)
        p = Perturber(model)
        row["update"] = timed(lambda p=p: p.update(list(range(args.population)), [1e-4] * args.population), 1)
        print(f"{size:>6s} {n / 1e6:7.1f}M {row['exact'] * 1e3:9.1f} {row['snapshot'] * 1e3:9.1f} "
              f"{row['exact'] / row['snapshot']:8.2f} {row['naive'] * 1e3:9.1f} {row['noise'] * 1e3:8.1f} "
              f"{row['update'] * 1e3:9.1f} {held['exact'] / 2**20:9.2f}MB {held['snapshot'] / 2**20:8.1f}MB",
              flush=True)
    print("\nheld: bytes kept while a member runs (exact: codes and escapes; snapshot: the host copy of the weights)")


if __name__ == "__main__":
    main()

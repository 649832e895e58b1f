"""How much of the ES update and perturbation bf16 weights receive, per es.update_rounding.

For each setting it runs ES updates with z-scored random rewards (c_i = (α/G)·R̂_i, the
trainer's coefficients) and prints, per parameter group (esopt.es.fidelity) and rounding
option: the cosine between realized and intended change and the fraction of entries
changed, for one update (the numbers train-es logs per generation) and for the sum of
`--generations` updates (realized θ_K − θ_0 against the intended Σ_t; stochastic rounding
and the fp32 master pay off here, a single step cannot show it). Then the same two
numbers for one perturbation σε at σ_0 and σ_T (perturbations are rounded to nearest
under every option), the host bytes of the fp32 master and the time of one update.

Settings:
  paper  α 5e-4, G 32, σ 1e-3 / 2.5e-4 on synthetic bf16 weights: linear and embedding
         N(0, 0.02), norm gains N(1, 0.02) (as in Llama-style RMSNorm; Qwen3.5's norms
         are zero-centred, w ≈ 0, see the tiny model)
  tiny   config/tiny.yaml's α, G, σ on a model directory (the tiny Qwen3.5 model that
         `esopt build-model --config config/tiny.yaml` builds)

    python benchmarks/update_fidelity.py --tiny-model results/tiny/models/tiny-qwen35
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from esopt.config import load_config
from esopt.es.fidelity import GROUPS, Fidelity
from esopt.es.noise import noise_chunks
from esopt.es.normalize import normalize_rewards
from esopt.es.perturb import Perturber
from esopt.es.rounding import ROUNDINGS
from esopt.seeding import derive_seed


class Synthetic(torch.nn.Module):
    """Embedding, then per layer an RMSNorm-style gain and two linear maps, in bf16."""

    def __init__(self, vocab: int, d: int, ff: int, layers: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(d, bias=False) for _ in range(layers))
        self.up = torch.nn.ModuleList(torch.nn.Linear(d, ff, bias=False) for _ in range(layers))
        self.down = torch.nn.ModuleList(torch.nn.Linear(ff, d, bias=False) for _ in range(layers))
        torch.manual_seed(0)
        with torch.no_grad():
            for name, p in self.named_parameters():
                p.normal_(1.0 if name.startswith("norms") else 0.0, 0.02)
        self.to(torch.bfloat16)


def coefficient_stream(alpha: float, population: int, generation: int) -> tuple[list[int], list[float]]:
    """Member seeds and (α/G)·R̂_i for one generation, rewards drawn at random."""
    g = torch.Generator().manual_seed(derive_seed("bench-rewards", generation))
    rewards = torch.randn(population, generator=g).tolist()
    seeds = [derive_seed("bench-member", generation, i) for i in range(population)]
    return seeds, [alpha / population * z for z in normalize_rewards(rewards, "zscore")]


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().float().clone() for n, p in model.named_parameters()}


def cumulative(perturber: Perturber, start: dict, now: dict, intended: dict) -> dict[str, dict[str, float]]:
    """Fidelity of θ_K − θ_0 against Σ_t intended, per group."""
    f = Fidelity()
    for n, before in start.items():
        f.add(perturber.groups[n], before, now[n], intended[n])
    return f.summary()


def run_updates(model_fn, rounding: str, alpha: float, population: int, generations: int):
    """One-update and K-update fidelity, and the seconds of one update, for one option."""
    model = model_fn()
    p = Perturber(model, rounding=rounding)
    start = snapshot(model)
    intended = {n: torch.zeros_like(t) for n, t in start.items()}  # Σ_t of the intended steps
    first, seconds = None, 0.0
    for t in range(generations):
        seeds, coefs = coefficient_stream(alpha, population, t)
        f = Fidelity()
        t0 = time.perf_counter()
        p.update(seeds, coefs, fidelity=f)
        seconds += time.perf_counter() - t0
        if first is None:
            first = f.summary()
        for name, q in p.params:  # the intended step Σ_i c_i ε_i, dense
            for s, c in zip(seeds, coefs):
                intended[name] += c * torch.cat([e for _, _, e in noise_chunks(s, name, q.numel(), q.device)]).view(q.shape)
    return first, cumulative(p, start, snapshot(model), intended), seconds / generations, p.master_bytes


def perturbation(model_fn, sigma: float) -> dict[str, dict[str, float]]:
    p = Perturber(model_fn())
    f = Fidelity()
    p.apply(derive_seed("bench-perturb", sigma), sigma, fidelity=f)
    p.revert()
    return f.summary()


def row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def report(title: str, model_fn, alpha: float, population: int, sigmas: list[float], generations: int) -> None:
    model = model_fn()
    n = sum(p.numel() for p in model.parameters())
    groups = Perturber(model).groups
    sizes = {g: sum(p.numel() for name, p in model.named_parameters() if groups[name] == g) for g in GROUPS}
    print(f"\n### {title}: α {alpha:g}, G {population}, {n:,} parameters "
          f"({', '.join(f'{g} {sizes[g]:,}' for g in GROUPS if sizes[g])}), bf16\n")
    present = [g for g in GROUPS if sizes[g]]
    print(row(["update_rounding", "group", "1 update: cosine", "changed", f"{generations} updates: cosine", "changed"]))
    print(row(["---"] * 6))
    extra = {}
    for r in ROUNDINGS:
        one, many, sec, master = run_updates(model_fn, r, alpha, population, generations)
        extra[r] = (sec, master)
        for g in present:
            print(row([r, g, f"{one[g]['cosine']:.3f}", f"{one[g]['changed']:.1%}", f"{many[g]['cosine']:.3f}",
                       f"{many[g]['changed']:.1%}"]))
    print()
    print(row(["perturbation σ", "group", "cosine", "changed"]))
    print(row(["---"] * 4))
    for s in sigmas:
        f = perturbation(model_fn, s)
        for g in present:
            print(row([f"{s:g}", g, f"{f[g]['cosine']:.3f}", f"{f[g]['changed']:.1%}"]))
    print()
    print(row(["update_rounding", "s per update (1 thread)", "fp32 master, host bytes", "of the bf16 model's bytes"]))
    print(row(["---"] * 4))
    for r, (sec, master) in extra.items():
        print(row([r, f"{sec:.3f}", f"{master:,}", f"{master / (2 * n):.0%}"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny-model", default=None, help="model directory for the tiny setting (skipped without)")
    ap.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "config" / "tiny.yaml"))
    ap.add_argument("--generations", type=int, default=10, help="updates summed for the cumulative columns")
    ap.add_argument("--size", type=int, nargs=4, default=[4096, 256, 1024, 8], metavar=("VOCAB", "D", "FF", "LAYERS"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    vocab, d, ff, layers = args.size
    report("paper setting, synthetic weights", lambda: Synthetic(vocab, d, ff, layers), 5e-4, 32, [1e-3, 2.5e-4],
           args.generations)
    if args.tiny_model:
        from esopt.models.load import load_model_and_tokenizer

        es = load_config(args.config)["es"]
        sig = es["sigma"]
        report(f"tiny setting, {Path(args.tiny_model).name}", lambda: load_model_and_tokenizer(args.tiny_model, device="cpu")[0],
               es["alpha"], es["populations"][0], [sig["sigma0"], sig["sigmaT"]], args.generations)


if __name__ == "__main__":
    main()

"""Memory and time of Perturber.apply / revert / update on a ~100M-parameter bf16 model.

For each σ it prints the share of elements needing stored information, the bytes the
perturber holds while a perturbation is active (sum of its stored tensors' nbytes),
the peak extra resident memory of apply, revert and update (32 seeds), and the time
of apply + revert; bytes also as % of the model's bytes. Every apply/revert pair is
checked to restore the weights bit for bit.

Peak memory is measured on CPU from /proc/self/status: the high-water mark VmHWM is
reset by writing "5" to /proc/self/clear_refs, glibc is asked to return freed memory
first (malloc_trim), and "peak extra" = VmHWM after the call − VmRSS before it.
glibc keeps freed heap pages, so this includes allocator slack; with the environment
variable MALLOC_MMAP_THRESHOLD_=65536 it comes closer to the live tensors. On CUDA
(--device cuda) torch.cuda.max_memory_allocated is used instead. Timings on a shared
or virtual CPU are steadier with --threads 1.

    python benchmarks/perturb_memory.py                      # the working tree's Perturber
    git show HEAD~1:workflow/esopt/es/perturb.py > /tmp/old.py
    python benchmarks/perturb_memory.py --perturber-file /tmp/old.py   # another version
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import hashlib
import importlib.util
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from esopt.es.perturb import Perturber  # noqa: E402

_LIBC = ctypes.CDLL("libc.so.6") if sys.platform.startswith("linux") else None


def load_perturber(path: str | None):
    if path is None:
        return Perturber
    spec = importlib.util.spec_from_file_location("perturb_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod.Perturber


def build_model(layers: int, vocab: int, d: int, ff: int, dtype: torch.dtype, device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    mods: list[torch.nn.Module] = [torch.nn.Embedding(vocab, d)]
    for _ in range(layers):
        mods += [torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)]
    model = torch.nn.Sequential(*mods).to(device=device, dtype=dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    return model


def weights_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for _, p in sorted(model.named_parameters()):
        h.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def held_bytes(obj, seen=None) -> int:
    """Sum of nbytes of every tensor reachable from obj (dataclasses, dicts, sequences)."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        key = (obj.untyped_storage().data_ptr(), obj.storage_offset(), obj.nbytes)
        if key in seen:
            return 0
        seen.add(key)
        return obj.nbytes
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(held_bytes(getattr(obj, f.name), seen) for f in dataclasses.fields(obj))
    if isinstance(obj, dict):
        return sum(held_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(held_bytes(v, seen) for v in obj)
    return 0


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def measure(fn, device: str) -> tuple[int, float]:
    """(peak extra bytes, seconds) of fn()."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base, time.perf_counter() - t0
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    base = _status("VmRSS")
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return _status("VmHWM") - base, dt


def fmt(n: int, model_bytes: int) -> str:
    return f"{n / 2**20:9.2f} MiB ({100 * n / model_bytes:6.2f}%)"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--perturber-file", help="perturb.py to benchmark instead of the installed one")
    ap.add_argument("--layers", type=int, default=16, help="pairs of Linear(d, ff) / Linear(ff, d)")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--ff", type=int, default=3072)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sigmas", type=float, nargs="+", default=[1e-3, 5e-4, 2.5e-4])
    ap.add_argument("--repeats", type=int, default=3, help="apply/revert pairs per σ")
    ap.add_argument("--update-seeds", type=int, default=32)
    ap.add_argument("--chunk", type=int, default=None, help="Perturber chunk (default: its own)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    cls = load_perturber(args.perturber_file)
    dtype = getattr(torch, args.dtype)
    model = build_model(args.layers, args.vocab, args.d, args.ff, dtype, args.device)
    pert = cls(model) if args.chunk is None else cls(model, chunk=args.chunk)
    n = pert.numel
    model_bytes = sum(p.nbytes for p in model.parameters())
    largest = max(p.numel() for p in model.parameters())
    print(f"perturber: {args.perturber_file or 'esopt.es.perturb'}")
    print(f"model: {n / 1e6:.1f}M {args.dtype} parameters, {model_bytes / 2**20:.1f} MiB, largest tensor "
          f"{largest / 1e6:.1f}M elements; chunk {pert.chunk}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, device {args.device}")
    print(f"one fp32 noise chunk: {fmt(4 * min(pert.chunk, largest), model_bytes)}")
    digest = weights_digest(model)

    for sigma in args.sigmas:
        fracs, helds, peaks_a, peaks_r, times = [], [], [], [], []
        for r in range(args.repeats):
            seed, scale = 1000 + r, sigma * (-1) ** r
            pa, ta = measure(lambda seed=seed, scale=scale: pert.apply(seed, scale), args.device)
            fracs.append(pert.fixup_fraction())
            helds.append(held_bytes(pert._active))
            pr, tr = measure(pert.revert, args.device)
            peaks_a.append(pa)
            peaks_r.append(pr)
            times.append(ta + tr)
        assert weights_digest(model) == digest, "revert was not bit-exact"
        avg = lambda xs: sum(xs) / len(xs)
        print(f"\nσ = {sigma:g} (σ/std = {sigma / 0.02:g}), {args.repeats} apply/revert pairs, revert bit-exact")
        print(f"  elements with stored info : {100 * avg(fracs):.3f}%")
        print(f"  held while perturbed      : {fmt(int(avg(helds)), model_bytes)}  [{8 * avg(helds) / n:.4f} bits/param]")
        print(f"  peak extra during apply   : {fmt(max(peaks_a), model_bytes)}")
        print(f"  peak extra during revert  : {fmt(max(peaks_r), model_bytes)}")
        print(f"  apply + revert            : {avg(times):.3f} s  (min {min(times):.3f} s)")

    g = torch.Generator().manual_seed(0)
    coefs = (torch.randn(args.update_seeds, generator=g) * 1e-4).tolist()
    pu, tu = measure(lambda: pert.update(list(range(5000, 5000 + args.update_seeds)), coefs), args.device)
    print(f"\nupdate with {args.update_seeds} seeds: peak extra {fmt(pu, model_bytes)}, {tu:.3f} s")
    print(f"weights after update: sha256 {weights_digest(model)[:16]}")


if __name__ == "__main__":
    main()

"""Peak memory of a block of code, measured.

GPU: torch.cuda.max_memory_allocated of the block's device after resetting the peak (the
model is in it); max_memory_reserved beside it (what the caching allocator held).
CPU: the kernel's high-water mark of resident memory (VmHWM), reset just before the
block through /proc/self/clear_refs, minus the resident memory at that moment; the
caller adds the bytes of the model state it loaded before, so interpreter and
library overhead are not counted. Where VmHWM cannot be reset, a sampling thread
(every 2 ms) stands in and says so.

On CPU, glibc keeps freed heap memory and raises its mmap threshold after the first
large free, so resident memory also counts what the allocator retained, and the same
step's peak varies from run to run. `exact_allocator()` pins the mmap threshold at
64 KiB, so large blocks go back to the system when freed and the CPU peak counts live
memory, like CUDA's max_memory_allocated. Free memory the allocator still holds is
resident yet reusable without a page fault, so a block could allocate memory without
raising RSS; `PeakMemory` therefore trims the heap (`malloc_trim`) before it starts.
(The numbers: docs/results_tiny.md, Training memory.)
"""

from __future__ import annotations

import gc
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

STATUS = Path("/proc/self/status")


def _status_kib(key: str) -> int:
    for line in STATUS.read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def exact_allocator() -> bool:
    """Make large allocations mmap-backed (returned to the system when freed); glibc only."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, 64 * 1024))  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False


def trim_heap() -> bool:
    """Give the allocator's free pages back to the system, so reusing them shows in RSS."""
    try:
        import ctypes

        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


def rss_bytes() -> int:
    return _status_kib("VmRSS") * 1024


def module_state_bytes(*modules: torch.nn.Module | None) -> int:
    """Bytes of parameters and buffers this process holds (each tensor once, tied weights
    once); of a module sharded by FSDP2, its local shards."""
    seen, total = set(), 0
    for m in modules:
        if m is None:
            continue
        for t in list(m.parameters()) + list(m.buffers()):
            if hasattr(t, "to_local"):  # a DTensor: this rank's shard
                t = t.to_local()
            key = t.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                total += t.untyped_storage().nbytes()
    return total


@dataclass
class PeakMemory:
    """with PeakMemory(device) as pm: ...; then pm.peak_above_start (bytes) and pm.measure.
    On CUDA also pm.cuda_max_allocated and pm.cuda_max_reserved: the device's absolute
    peaks (bytes) during the block (None on CPU)."""

    device: str = "cpu"
    peak_above_start: int = 0
    measure: str = ""
    cuda_max_allocated: int | None = None
    cuda_max_reserved: int | None = None

    def __enter__(self) -> PeakMemory:
        gc.collect()
        if self.device.startswith("cuda"):
            dev = torch.device(self.device)
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            self._start = torch.cuda.memory_allocated(dev)
            self.measure = "cuda_max_allocated"
            return self
        trim_heap()
        self._start = rss_bytes()
        try:
            Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
            self.measure = "rss"
            self._sampler = None
        except OSError:
            self.measure = "rss_sampled"
            self._peak, self._stop = self._start, threading.Event()
            self._sampler = threading.Thread(target=self._sample, daemon=True)
            self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self._peak = max(self._peak, rss_bytes())

    def __exit__(self, *exc) -> None:
        if self.device.startswith("cuda"):
            dev = torch.device(self.device)
            torch.cuda.synchronize(dev)
            self.cuda_max_allocated = torch.cuda.max_memory_allocated(dev)
            self.cuda_max_reserved = torch.cuda.max_memory_reserved(dev)
            self.peak_above_start = self.cuda_max_allocated - self._start
        elif self._sampler is None:
            self.peak_above_start = _status_kib("VmHWM") * 1024 - self._start
        else:
            self._stop.set()
            self._sampler.join()
            self.peak_above_start = self._peak - self._start


def rank_peaks(rank: int, device: str, state: int, pm: PeakMemory, wall_s: float) -> dict[str, Any]:
    """One process's measurement: its device, the model state it holds (its shards when
    sharded), its peak above load, their sum, on CUDA the device's absolute peaks, and the
    block's wall time."""
    return {"rank": rank, "device": device, "model_state_bytes": state, "peak_above_load_bytes": pm.peak_above_start,
            "peak_bytes": state + pm.peak_above_start, "cuda_max_allocated_bytes": pm.cuda_max_allocated,
            "cuda_max_reserved_bytes": pm.cuda_max_reserved, "step_wall_s": wall_s}


def max_over_ranks(per_rank: list[dict]) -> dict:
    """The summary's peak fields from every rank's `rank_peaks`: those of the rank with the
    largest peak_bytes (state and peak above load from the same rank, so they still add up;
    per GPU, the number a device must hold), plus `ranks`, `per_rank` and `peak_rank`."""
    if not per_rank:
        raise ValueError("no rank measured anything")
    top = max(per_rank, key=lambda r: r["peak_bytes"])
    out = {k: top[k] for k in ("model_state_bytes", "peak_above_load_bytes", "peak_bytes")}
    return {**out, "ranks": len(per_rank), "peak_rank": top["rank"],
            "per_rank": sorted(per_rank, key=lambda r: r["rank"])}

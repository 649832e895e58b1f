"""Peak memory of a block of code, measured.

GPU: torch.cuda.max_memory_allocated after resetting the peak (the model is in it).
CPU: the kernel's high-water mark of resident memory (VmHWM), reset just before the
block through /proc/self/clear_refs, minus the resident memory at that moment; the
caller adds the bytes of the model state it loaded before, so interpreter and
library overhead are not counted. Where VmHWM cannot be reset, a sampling thread
(every 2 ms) stands in and says so.

On CPU, glibc keeps freed heap memory and raises its mmap threshold after the first
large free, so resident memory also counts what the allocator retained: measured on
the 104M probe, the same ES step peaked 61 MiB or 84 MiB above load from run to run
(inference: 51 MiB). `exact_allocator()` pins the mmap threshold at 64 KiB, so large
blocks go back to the system when freed and the CPU peak counts live memory, like
CUDA's max_memory_allocated (ES 40 MiB, inference 31 MiB above load).
Free memory the allocator still holds is resident yet reusable without a page fault,
so a block could allocate 64 MiB and raise RSS by 0 (seen in CI after earlier
tests); `PeakMemory` therefore trims the heap (`malloc_trim`) before it starts.
"""

from __future__ import annotations

import gc
import threading
from dataclasses import dataclass
from pathlib import Path

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
    """Bytes of parameters and buffers (each tensor once, tied weights once)."""
    seen, total = set(), 0
    for m in modules:
        if m is None:
            continue
        for t in list(m.parameters()) + list(m.buffers()):
            key = t.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                total += t.untyped_storage().nbytes()
    return total


@dataclass
class PeakMemory:
    """with PeakMemory(device) as pm: ...; then pm.peak_above_start (bytes) and pm.measure."""

    device: str = "cpu"
    peak_above_start: int = 0
    measure: str = ""

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._start = torch.cuda.memory_allocated()
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
            torch.cuda.synchronize()
            self.peak_above_start = torch.cuda.max_memory_allocated() - self._start
        elif self._sampler is None:
            self.peak_above_start = _status_kib("VmHWM") * 1024 - self._start
        else:
            self._stop.set()
            self._sampler.join()
            self.peak_above_start = self._peak - self._start

"""Seeded Gaussian noise over named tensors, drawn chunk by chunk.

The noise for one tensor is a pure function of (member seed, tensor name, numel,
device type): eps = randn(numel) from a torch.Generator seeded with
derive_seed(member_seed, name), drawn in fp32 chunks of CHUNK elements. Only seeds
are stored or sent; any process regenerates the same eps. Extra memory is one chunk.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from esopt.seeding import derive_seed

CHUNK = 8_388_608  # elements per fp32 noise chunk (32 MiB), as in the authors' code


def tensor_seed(member_seed: int, name: str) -> int:
    # Each tensor gets its own stream: one seed for every tensor would correlate
    # the noise of same-shaped tensors (a known bug in other ES codebases).
    return derive_seed("es-noise", member_seed, name)


def noise_chunks(
    member_seed: int, name: str, numel: int, device: torch.device, chunk: int = CHUNK
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """Yield (start, stop, eps) with eps ~ N(0, 1) in fp32, covering [0, numel)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(tensor_seed(member_seed, name))
    for start in range(0, numel, chunk):
        stop = min(start + chunk, numel)
        yield start, stop, torch.randn(stop - start, generator=gen, device=device, dtype=torch.float32)

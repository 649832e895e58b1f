"""A model's weights as one sha256: the identity the histories, records and audit compare."""

from __future__ import annotations

import hashlib

import torch


def weights_sha256(module: torch.nn.Module) -> str:
    """Hash of every parameter and buffer (name, dtype, shape, bytes), in name order."""
    h = hashlib.sha256()
    state = module.state_dict()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()

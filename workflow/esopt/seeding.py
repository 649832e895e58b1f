"""Stable seed derivation: every random stream in esopt is named, never shared."""

from __future__ import annotations

import hashlib

_MASK63 = (1 << 63) - 1


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from a tuple of names and numbers (stable across processes and
    Python versions, unlike hash())."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & _MASK63

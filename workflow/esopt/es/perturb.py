"""In-place perturbation θ ← θ + σ·s·ε(seed), exact revert, and the seed-replayed update.

Exact revert without a model copy. The perturbed value is θ' = f(θ) = round(θ + δ)
(sum in fp32, rounded to the parameter's dtype). Wherever |δ| is large against |θ|
or θ + δ lands in a coarser binade, several x share f(x) = θ', so θ' − δ does not
always round back to θ. f is monotone, so those x form an interval [lo, hi] of
consecutive representable values, which revert can compute from θ' and δ alone.
apply therefore stores only what revert cannot infer:

* for most elements c = round(θ' − δ) is the only candidate, and nothing is stored;
* *suspects* (θ' and c of other signs, θ' in a coarser binade than c or c's lower
  neighbour, and in fp32 a tie in rounding θ' − δ) get their interval [lo, hi]:
  the midpoints from θ' to its neighbours, minus δ, rounded, then f evaluated once
  at each end settles it. θ − lo is stored in ceil(log2(hi − lo + 1)) bits (none
  for a single candidate), bit-packed per piece of PIECE elements;
* apply decodes what revert will, and keeps (int32 index, original value) of every
  element where that is not θ bit for bit ("escapes": rare ties in bf16/fp16,
  non-finite values, dtypes other than fp32/bf16/fp16).

The work runs piece by piece in reused scratch buffers, so the transient memory is the
fp32 noise chunk (4 bytes × min(CHUNK, tensor size), fixed by the noise definition) plus
13 bytes per piece element (bf16). What it holds and costs: docs/es_core.md, Exact revert
(benchmarks/perturb_memory.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from esopt.es.fidelity import Fidelity, param_groups
from esopt.es.noise import CHUNK, noise_chunks
from esopt.es.rounding import COARSE, Fp32Master, check_rounding, rounding_seed, stochastic_round

REVERTS = ("exact", "snapshot", "auto")


def resolve_revert(revert: str, device: torch.device) -> str:
    """es.revert: exact (inferred from θ' and δ, no copy of the weights), snapshot (a host
    copy of the weights taken at each apply and copied back: one memcpy instead of a
    second pass over the noise; costs the weights' bytes in host memory), or auto:
    snapshot when the weights live on an accelerator (the copy is in host memory, so the
    device stays at inference level), exact on a CPU (where host memory is the device's)."""
    if revert not in REVERTS:
        raise ValueError(f"es.revert must be one of {REVERTS}, got {revert!r}")
    if revert == "auto":
        return "exact" if device.type == "cpu" else "snapshot"
    return revert


# Elements processed at once within a noise chunk, by device type. On CPU small pieces
# stay in cache and reuse their scratch buffers; on an accelerator each piece costs
# ~100 kernel launches, so pieces are larger there (a guess, not yet measured on a GPU).
PIECE = {"cpu": 1 << 18}
PIECE_ELSEWHERE = 1 << 20


def _piece_size(device: torch.device) -> int:
    return PIECE.get(device.type, PIECE_ELSEWHERE)


_SAME_SIZE_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """View a float tensor as integers of the same width, for bitwise comparison."""
    return t.view(_SAME_SIZE_INT[t.element_size()])


class _Format(NamedTuple):
    width: int  # bits of the dtype
    mantissa_mask: int
    max_key: int  # _key of the largest finite value
    key_dtype: torch.dtype  # wide enough for differences of keys


# dtypes whose revert is inferred; others keep the original of every element that needs it
_FORMATS = {
    torch.bfloat16: _Format(16, 0x7F, 0x7F7F, torch.int32),
    torch.float16: _Format(16, 0x3FF, 0x7BFF, torch.int32),
    torch.float32: _Format(32, 0x7FFFFF, 0x7F7FFFFF, torch.int64),
}


def _flip(b: torch.Tensor) -> torch.Tensor:
    """Sign-magnitude bits <-> order-preserving key: negative patterns get their magnitude
    bits inverted, so -m maps to -1 - m (-0 to -1, just below +0). Its own inverse."""
    return b ^ ((b >> (8 * b.element_size() - 1)) & ((1 << (8 * b.element_size() - 1)) - 1))


def _key(x: torch.Tensor, fmt: _Format) -> torch.Tensor:
    """Order-preserving integer key of each float's bit pattern."""
    return _flip(_bits(x)).to(fmt.key_dtype)


def _from_key(k: torch.Tensor, dtype: torch.dtype, fmt: _Format) -> torch.Tensor:
    k = k.clamp(-1 - fmt.max_key, fmt.max_key)  # stay finite
    return _flip(k.to(_SAME_SIZE_INT[fmt.width // 8])).view(dtype)


def _fp32_operand(x: torch.Tensor) -> torch.Tensor:
    """x as an operand of fp32 arithmetic: bf16/fp16 promote exactly, others are cast."""
    return x if x.dtype in _FORMATS else x.float()


def _perturbed(x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """f(x) = round(x + δ), the perturbed value."""
    return (x.float() + delta).to(x.dtype)


def _preimage(t: torch.Tensor, delta: torch.Tensor, fmt: _Format) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys lo and sizes of the intervals {x : f(x) = t} (by value), elementwise.

    f(x) = t where x + δ lies between the midpoints from t to its neighbours; those
    midpoints minus δ, rounded, are the ends of the interval or one step outside it.
    Exceptions (checked against all bf16/fp16 values in the tests): wide intervals,
    where x + δ also rounds in fp32, may be off by a few steps at an end. That costs
    nothing as long as the interval is used the same way in apply and revert; at
    worst θ falls outside it and is kept as an escape.
    """
    dtype = t.dtype
    wide = torch.float64 if fmt.width == 32 else torch.float32  # holds the midpoints exactly
    kt = _key(t, fmt)
    # the next smaller and larger values (-0 and +0, keys -1 and 0, are equal)
    below = _from_key(kt - 1 - (kt == 0).to(kt.dtype), dtype, fmt)
    above = _from_key(kt + 1 + (kt == -1).to(kt.dtype), dtype, fmt)
    tw, dw = t.to(wide), delta.to(wide)
    first = ((below.to(wide) + tw) * 0.5 - dw).to(dtype)
    last = ((tw + above.to(wide)) * 0.5 - dw).to(dtype)
    lo = _key(first, fmt) + (_perturbed(first, delta) < t).to(kt.dtype)  # f(lo) >= t
    end = _key(last, fmt) + (_perturbed(last, delta) < above).to(kt.dtype)  # f(end) > t = f(end - 1)
    return lo, end - lo


def _is_tie(t: torch.Tensor, delta: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """fp32: whether y = θ' − δ was rounded from a tie (then both neighbours may be preimages).

    err = θ' − δ − y exactly (TwoSum); a tie iff y + 2·err is a representable neighbour.
    In bf16/fp16, y holds θ' − δ to 16 more bits, so ties are rare and left to the escapes.
    """
    bv = y - t
    err = (t - (y - bv)) - (delta + bv)
    return (err != 0) & ((y + 2 * err) - y == 2 * err)


def _bit_length(n: torch.Tensor) -> torch.Tensor:
    """Bits needed to write each n >= 0 (0 for n = 0), as int64."""
    return torch.frexp(n.clamp(min=0).double())[1].long()


def _bit_layout(widths: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Total bits, and for each bit of the stream its code and its position in the code."""
    total = int(widths.sum())
    owner = torch.repeat_interleave(torch.arange(widths.numel(), device=widths.device), widths)
    pos = torch.arange(total, device=widths.device) - (widths.cumsum(0) - widths)[owner]
    return total, owner, pos


def _pack(codes: torch.Tensor, widths: torch.Tensor) -> torch.Tensor | None:
    """Concatenate codes[i] written with widths[i] bits (LSB first) into a uint8 tensor."""
    total, owner, pos = _bit_layout(widths)
    if total == 0:
        return None
    bits = torch.zeros(-(-total // 8) * 8, dtype=torch.uint8, device=codes.device)
    bits[:total] = (codes[owner] >> pos) & 1
    weights = torch.arange(8, dtype=torch.uint8, device=codes.device)
    return (bits.view(-1, 8) << weights).sum(1).to(torch.uint8)


def _unpack(packed: torch.Tensor | None, widths: torch.Tensor) -> torch.Tensor:
    total, owner, pos = _bit_layout(widths)
    if (0 if packed is None else packed.numel()) != -(-total // 8):
        raise RuntimeError("the parameters changed while perturbed; cannot revert exactly")
    codes = torch.zeros(widths.numel(), dtype=torch.long, device=widths.device)
    if total:
        bits = (packed[:, None] >> torch.arange(8, dtype=torch.uint8, device=packed.device)) & 1
        codes.index_add_(0, owner, bits.view(-1)[:total].long() << pos)
    return codes


class _Scratch:
    """Piece-sized buffers reused from piece to piece (fresh CPU allocations page-fault)."""

    def __init__(self, size: int, dtype: torch.dtype, device: torch.device):
        def buf(dt: torch.dtype) -> torch.Tensor:
            return torch.empty(size, dtype=dt, device=device)

        self.sum = buf(torch.float32)  # θ + δ, θ' − δ in fp32
        self.new, self.value = buf(dtype), buf(dtype)  # θ', c
        self.int_a, self.int_b = buf(_SAME_SIZE_INT[dtype.itemsize]), buf(_SAME_SIZE_INT[dtype.itemsize])
        self.mask = buf(torch.bool)


class _Plan(NamedTuple):
    """What revert infers from θ' and δ alone, for one piece."""

    value: torch.Tensor  # c = round(θ' − δ), to be corrected at the suspects (a scratch view)
    suspects: torch.Tensor  # indices of the elements that may have several preimages
    lo: torch.Tensor  # key of each suspect's smallest preimage
    size: torch.Tensor  # number of preimages of each suspect
    widths: torch.Tensor  # bits stored for each suspect


def _plan(t: torch.Tensor, delta: torch.Tensor, scratch: _Scratch) -> _Plan:
    n = t.numel()
    y = torch.sub(_fp32_operand(t), delta, out=scratch.sum[:n])
    c = scratch.value[:n].copy_(y)
    fmt = _FORMATS.get(t.dtype)
    if fmt is None:
        none = torch.zeros(0, dtype=torch.long, device=t.device)
        return _Plan(c, none, none, none, none)
    bt, bc = _bits(t), _bits(c)
    a, b = scratch.int_a[:n], scratch.int_b[:n]
    # P(|c|), the power of two at or above |c|, is (|c| − 1) with all mantissa bits set,
    # plus one; suspect when |θ'| >= P(|c|) or the signs differ: (P − 1 − |θ'|) | (θ' ^ c) < 0
    magnitude = (1 << (fmt.width - 1)) - 1
    torch.bitwise_and(bc, magnitude, out=a).sub_(1).bitwise_or_(fmt.mantissa_mask)
    a.sub_(torch.bitwise_and(bt, magnitude, out=b))
    a.bitwise_or_(torch.bitwise_xor(bt, bc, out=b))
    suspect = torch.lt(a, 0, out=scratch.mask[:n])
    if t.dtype == torch.float32:
        suspect |= _is_tie(t, delta, y)
    idx = suspect.nonzero().squeeze(1)
    if not idx.numel():
        return _Plan(c, idx, idx, idx, idx)
    lo, size = _preimage(t[idx], delta[idx], fmt)
    return _Plan(c, idx, lo, size, _bit_length(size - 1))


class _Piece(NamedTuple):
    codes: torch.Tensor | None  # bit-packed θ − lo of the suspects
    escape_index: torch.Tensor  # int32, within the piece
    escape_value: torch.Tensor  # original values


def _apply_piece(orig: torch.Tensor, delta: torch.Tensor, scratch: _Scratch) -> tuple[_Piece | None, int]:
    """θ ← f(θ) in place; returns what revert needs beyond θ' and δ, and for how many elements."""
    n = orig.numel()
    new = scratch.new[:n].copy_(torch.add(_fp32_operand(orig), delta, out=scratch.sum[:n]))
    plan = _plan(new, delta, scratch)
    decoded, codes, coded = plan.value, None, plan.suspects[:0]
    if plan.suspects.numel():  # decode what revert will decode
        fmt = _FORMATS[orig.dtype]
        code = _key(orig[plan.suspects], fmt) - plan.lo
        code = torch.where((code >= 0) & (code < plan.size), code, 0)
        decoded[plan.suspects] = _from_key(plan.lo + code, orig.dtype, fmt)
        codes = _pack(code, plan.widths)
        coded = plan.suspects[plan.widths > 0]
    wrong = torch.ne(_bits(decoded), _bits(orig), out=scratch.mask[:n])
    esc = wrong.nonzero().squeeze(1) if wrong.any() else plan.suspects[:0]
    piece = None
    if codes is not None or esc.numel():
        piece = _Piece(codes, esc.to(torch.int32), orig[esc].clone())
    orig.copy_(new)
    if esc.numel() and coded.numel():  # escapes that also have a code count once
        esc = esc[coded[torch.searchsorted(coded, esc).clamp_(max=coded.numel() - 1)] != esc]
    return piece, coded.numel() + esc.numel()


def _revert_piece(cur: torch.Tensor, delta: torch.Tensor, piece: _Piece | None, scratch: _Scratch) -> None:
    plan = _plan(cur, delta, scratch)
    value = plan.value
    codes = None if piece is None else piece.codes
    if plan.suspects.numel():
        fmt = _FORMATS[cur.dtype]
        value[plan.suspects] = _from_key(plan.lo + _unpack(codes, plan.widths), cur.dtype, fmt)
    elif codes is not None:
        raise RuntimeError("the parameters changed while perturbed; cannot revert exactly")
    if piece is not None and piece.escape_index.numel():
        value[piece.escape_index.long()] = piece.escape_value
    cur.copy_(value)


@dataclass
class _Active:
    seed: int
    scale: float  # σ·sign
    pieces: dict[tuple[str, int], _Piece]  # (tensor name, piece start) -> what revert needs


class Perturber:
    """Perturbs the floating-point parameters of a module in place.

    At most one perturbation is active; `update` is refused while perturbed;
    `apply` of the active perturbation and `revert` when clean are no-ops.
    `rounding` says how `update` writes its fp32 result (esopt.es.rounding); with
    fp32_master the master is taken from the module's weights now. `revert` (exact,
    snapshot, auto: resolve_revert) says how revert restores the weights; both restore
    them bit for bit and perturb them to the same values.
    """

    def __init__(self, module: torch.nn.Module, chunk: int = CHUNK, rounding: str = "nearest", revert: str = "exact"):
        # named_parameters() drops duplicates, so tied weights are perturbed once.
        params = [(name, p) for name, p in module.named_parameters() if p.is_floating_point()]
        if not params:
            raise ValueError("module has no floating-point parameters to perturb")
        self._setup(params, param_groups(module), chunk, rounding, revert)

    @classmethod
    def from_tensors(cls, params: Sequence[tuple[str, torch.Tensor]], groups: dict[str, str],
                     chunk: int = CHUNK, rounding: str = "nearest", revert: str = "exact") -> Perturber:
        """A Perturber over named tensors that are not one module's parameters, e.g. views of an
        inference engine's fused weights under Hugging Face names (esopt.agent.vllm_worker).
        The noise of a tensor depends on its name and size only, so the same names give the
        same perturbations as the module they stand for. groups: name -> linear|norm|embedding."""
        params = list(params)
        if not params:
            raise ValueError("no tensors to perturb")
        for name, t in params:
            if not t.is_contiguous():
                raise ValueError(f"tensor {name} is not contiguous: it is perturbed through a flat view")
        missing = [name for name, _ in params if name not in groups]
        if missing:
            raise ValueError(f"no parameter group for {missing[:3]}")
        perturber = cls.__new__(cls)
        perturber._setup(params, groups, chunk, rounding, revert)
        return perturber

    def _setup(self, params: list[tuple[str, torch.Tensor]], groups: dict[str, str], chunk: int, rounding: str,
               revert: str) -> None:
        self.params: list[tuple[str, torch.Tensor]] = params
        self.chunk = chunk
        self.rounding = check_rounding(rounding)
        self.revert_mode = resolve_revert(revert, params[0][1].device)
        self._snapshot: dict[str, torch.Tensor] | None = None  # host copies (revert_mode snapshot)
        self.groups = groups  # linear / norm / embedding, for the fidelity metrics
        self.master = Fp32Master(self.params) if rounding == "fp32_master" else None
        self._active: _Active | None = None
        self._stored = 0  # elements with information held for the active perturbation

    @property
    def numel(self) -> int:
        return sum(p.numel() for _, p in self.params)

    @property
    def is_perturbed(self) -> bool:
        return self._active is not None

    def fixup_fraction(self) -> float:
        """Fraction of elements with information held for the exact revert (a code or the original)."""
        return 0.0 if self._active is None else self._stored / self.numel

    def held_bytes(self) -> int:
        """Bytes of the tensors held for the revert of the active perturbation (the snapshot's
        host bytes under revert_mode snapshot)."""
        if self._active is None:
            return 0
        if self.revert_mode == "snapshot":
            return self.snapshot_bytes
        return sum(t.nbytes for piece in self._active.pieces.values() for t in piece if t is not None)

    @property
    def snapshot_bytes(self) -> int:
        """Host bytes of the snapshot buffers (0 unless revert_mode is snapshot)."""
        return 0 if self._snapshot is None else sum(t.nbytes for t in self._snapshot.values())

    def _noise(self, seed: int, name: str, p: torch.Tensor):
        """ε(seed) of one tensor as (start, stop, fp32 chunk) over its flat view: full-rank Gaussian."""
        return noise_chunks(seed, name, p.numel(), p.device, self.chunk)

    def _take_snapshot(self) -> None:
        if self._snapshot is None:  # allocated once; pinned so accelerator copies run at full speed
            pin = torch.cuda.is_available() and any(p.device.type == "cuda" for _, p in self.params)
            self._snapshot = {name: torch.empty(p.shape, dtype=p.dtype, device="cpu", pin_memory=pin)
                              for name, p in self.params}
        for name, p in self.params:
            self._snapshot[name].copy_(p.data)

    def _pieces(self, seed: int, scale: float):
        """(name, piece start, parameter piece, δ piece, scratch) over all parameters, δ = scale·ε."""
        scratch: dict[tuple[torch.dtype, torch.device], _Scratch] = {}
        for name, p in self.params:
            flat = p.data.view(-1)
            size = min(_piece_size(p.device), self.chunk, flat.numel())
            key = (p.dtype, p.device)
            if key not in scratch or scratch[key].sum.numel() < size:
                scratch[key] = _Scratch(size, p.dtype, p.device)
            for a, b, eps in self._noise(seed, name, p):
                delta = eps.mul_(scale)
                for s in range(a, b, size):
                    e = min(s + size, b)
                    yield name, s, flat[s:e], delta[s - a : e - a], scratch[key]
                del eps, delta  # before the next chunk is drawn

    @torch.no_grad()
    def apply(self, seed: int, scale: float, fidelity: Fidelity | None = None) -> None:
        """θ ← θ + scale·ε(seed), with scale = σ·sign; `fidelity` accumulates realized vs intended."""
        if self._active is not None:
            if (self._active.seed, self._active.scale) == (seed, scale):
                return
            raise RuntimeError(
                f"perturbation (seed={self._active.seed}) is still active; revert it first"
            )
        pieces: dict[tuple[str, int], _Piece] = {}
        stored = 0
        if self.revert_mode == "snapshot":
            self._take_snapshot()  # at every apply: whatever changed the weights since, revert restores them
            for name, _s, orig, delta, scratch in self._pieces(seed, scale):
                before = orig.clone() if fidelity is not None else None
                orig.copy_(torch.add(_fp32_operand(orig), delta, out=scratch.sum[: orig.numel()]))  # as _apply_piece
                if before is not None:
                    fidelity.add(self.groups[name], before, orig, delta)
                del orig, delta
            self._active = _Active(seed, scale, pieces)
            self._stored = self.numel
            return
        for name, s, orig, delta, scratch in self._pieces(seed, scale):
            before = orig.clone() if fidelity is not None else None  # one piece, not a model copy
            piece, n = _apply_piece(orig, delta, scratch)
            if before is not None:
                fidelity.add(self.groups[name], before, orig, delta)
            if piece is not None:
                pieces[name, s] = piece
            stored += n
            del orig, delta  # views of the noise chunk: free it before the next is drawn
        self._active = _Active(seed, scale, pieces)
        self._stored = stored

    @torch.no_grad()
    def revert(self) -> None:
        """Restore the parameters bit for bit."""
        if self._active is None:
            return
        act = self._active
        if self.revert_mode == "snapshot":
            for name, p in self.params:
                p.data.copy_(self._snapshot[name])
            self._active = None
            self._stored = 0
            return
        for name, s, cur, delta, scratch in self._pieces(act.seed, act.scale):
            _revert_piece(cur, delta, act.pieces.get((name, s)), scratch)
            del cur, delta  # views of the noise chunk: free it before the next is drawn
        self._active = None
        self._stored = 0

    @torch.no_grad()
    def update(self, seeds: Sequence[int], coefficients: Sequence[float], fidelity: Fidelity | None = None) -> None:
        """θ ← θ + Σ_i c_i·ε(seed_i), accumulated in fp32 and written once per chunk, rounded
        as `self.rounding` says; `fidelity` accumulates realized vs intended change.

        The ES step passes c_i = (α / G)·R̂_i·sign_i. Extra memory: two fp32 chunks (nearest,
        fp32_master; the master lives on the host), a few with stochastic (its uniforms and
        neighbours); with `fidelity` two more (the kept sum and the realized change).
        """
        if self._active is not None:
            raise RuntimeError("refusing to update while a perturbation is active; revert first")
        if len(seeds) != len(coefficients):
            raise ValueError(f"{len(seeds)} seeds but {len(coefficients)} coefficients")
        members = [(s, float(c)) for s, c in zip(seeds, coefficients) if c != 0.0]
        if not members:
            return
        for name, p in self.params:
            flat = p.data.view(-1)
            streams = [self._noise(s, name, p) for s, _ in members]
            write = self._writer(name, p, seeds)
            for a in range(0, flat.numel(), self.chunk):
                acc = None
                for stream, (_, c) in zip(streams, members):
                    _, b, eps = next(stream)
                    acc = eps.mul_(c) if acc is None else acc.add_(eps, alpha=c)
                    del eps  # before the next member's chunk is drawn
                seg = flat[a:b]
                new = write(a, seg, acc.clone() if fidelity is not None else acc)  # write may overwrite it
                if fidelity is not None:
                    fidelity.add(self.groups[name], seg, new, acc)
                seg.copy_(new)
                del acc, new

    def _writer(self, name: str, p: torch.Tensor, seeds: Sequence[int]):
        """(start, θ chunk, fp32 sum chunk) -> the chunk's new values in p's dtype, for self.rounding;
        the sum chunk may be overwritten."""
        if p.dtype not in COARSE or self.rounding == "nearest":
            # θ + acc in fp32 (a sum is commutative, bit for bit), rounded to nearest once
            return lambda a, seg, acc: acc.add_(_fp32_operand(seg)).to(p.dtype)
        if self.rounding == "fp32_master":
            return lambda a, seg, acc: self.master.add(name, a, acc).to(p.dtype)
        gen = torch.Generator(device=p.device)
        gen.manual_seed(rounding_seed(seeds, name))

        def stochastic(a: int, seg: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
            u = torch.rand(acc.numel(), generator=gen, device=acc.device)  # drawn chunk by chunk, in order
            return stochastic_round(acc.add_(seg), p.dtype, u)

        return stochastic

    @property
    def master_bytes(self) -> int:
        """Host bytes of the fp32 master (0 unless rounding is fp32_master)."""
        return 0 if self.master is None else self.master.nbytes

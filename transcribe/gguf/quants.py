"""ggml tensor formats: dequantize GGUF tensor bytes to float32 torch tensors, and quantize back.

Types (ggml type ids as stored in GGUF files):

    F32 0, F16 1, BF16 30                 plain floats (F16/BF16 are little-endian 16-bit)
    Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8 blocks of 32 elements with one fp16 scale (and an fp16 min
                                           for the _1 types); 5-bit types keep the 5th bits in a
                                           32-bit field `qh`
    Q4_K 12, Q5_K 13, Q6_K 14              super-blocks of 256 elements: an fp16 scale (and min) for the
                                           block plus 6-bit packed (Q4_K/Q5_K) or int8 (Q6_K) scales
                                           for 16 or 32-element sub-blocks

Blocks run along the last torch dimension (ggml's ne[0]). `dequantize` returns exactly (bit for bit)
what gguf-py's `gguf.quants.dequantize` returns: the same float32 operations in the same order (e.g.
Q4_K is `(d * sc) * q - (dmin * m)`, never fused). It works on chunks of rows, so a large (memory
mapped) tensor needs only its float32 output plus one chunk of temporaries.

`quantize` writes F32, F16, BF16, Q8_0 and Q4_0 bytes equal to ggml's reference quantizers
(`quantize_row_q8_0_ref`, `quantize_row_q4_0_ref`: float32 arithmetic, C `roundf` = round half away
from zero, the scale stored as fp16 rounded to nearest even; `ggml_compute_fp32_to_bf16` for BF16).

`int8_rows` turns any stored tensor into per-output-row symmetric int8 (the layout of
`transcribe.quant.Int8Linear`); `q8_0_blocks` into Q8_0 blocks as int8 values and their scales (the
layout of `transcribe.quant.Q8Linear`): a Q8_0 tensor's own bytes, split without arithmetic.
"""
from __future__ import annotations

import math
from typing import Union

import numpy as np
import torch

F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30

TYPE_NAMES: dict[int, str] = {
    F32: "F32", F16: "F16", Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1",
    Q8_0: "Q8_0", Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K", BF16: "BF16",
}

# (elements per block, bytes per block)
_BLOCKS: dict[int, tuple[int, int]] = {
    F32: (1, 4), F16: (1, 2), BF16: (1, 2),
    Q4_0: (32, 18), Q4_1: (32, 20), Q5_0: (32, 22), Q5_1: (32, 24), Q8_0: (32, 34),
    Q4_K: (256, 144), Q5_K: (256, 176), Q6_K: (256, 210),
}

# Rows are processed in chunks of about this many elements (4 MiB of float32).
_CHUNK_ELEMS = 1 << 20

Raw = Union[np.ndarray, torch.Tensor, bytes, bytearray, memoryview]


def _name(qtype: int) -> str:
    return TYPE_NAMES.get(qtype, f"unknown ggml type {qtype}")


def type_id(name: str) -> int:
    """"q8_0" / "Q8_0" / "f32" / "bf16" -> ggml type id."""
    key = str(name).strip().upper()
    for tid, tname in TYPE_NAMES.items():
        if tname == key:
            return tid
    raise ValueError(f"unknown ggml type name {name!r}; known: {', '.join(TYPE_NAMES.values())}")


def block_size(qtype: int) -> tuple[int, int]:
    """(elements per block, bytes per block) of a supported type."""
    try:
        return _BLOCKS[qtype]
    except KeyError:
        raise ValueError(f"unsupported ggml type id {qtype}; supported: "
                         f"{', '.join(f'{n} ({i})' for i, n in TYPE_NAMES.items())}") from None


def row_bytes(qtype: int, n: int) -> int:
    """Bytes of a row of n elements."""
    be, bb = block_size(qtype)
    if n % be:
        raise ValueError(f"a {_name(qtype)} row of {n} elements is not a multiple of the block size {be}")
    return n // be * bb


# ---------------------------------------------------------------------------------------------
# Block decoders: uint8 [nb, bytes per block] -> float32 [nb, elements per block]

_SHIFT4 = torch.tensor([0, 4], dtype=torch.uint8)
_SHIFT2 = torch.tensor([0, 2, 4, 6], dtype=torch.uint8)
_SHIFT1 = torch.arange(8, dtype=torch.uint8)


def _f16(b: torch.Tensor) -> torch.Tensor:
    """uint8 [nb, 2] (little-endian fp16) -> float32 [nb, 1] (exact)."""
    return b.contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor, group: int) -> torch.Tensor:
    """uint8 [nb, m] -> [nb, m // group, 2, group] of 4-bit values: within every `group` bytes, the
    low nibbles come first, then the high nibbles."""
    nb = qs.shape[0]
    return (qs.reshape(nb, -1, 1, group) >> _SHIFT4.reshape(1, 1, 2, 1)) & 0x0F


def _bits32(qh: torch.Tensor) -> torch.Tensor:
    """uint8 [nb, 4] holding a little-endian uint32 -> its 32 bits as uint8 [nb, 32] (bit j at j)."""
    nb = qh.shape[0]
    return ((qh.reshape(nb, 4, 1) >> _SHIFT1.reshape(1, 1, 8)) & 1).reshape(nb, 32)


def _dq_q4_0(b: torch.Tensor) -> torch.Tensor:
    d = _f16(b[:, 0:2])
    q = _nibbles(b[:, 2:18], 16).reshape(-1, 32).to(torch.int8) - 8
    return d * q.float()


def _dq_q4_1(b: torch.Tensor) -> torch.Tensor:
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    q = _nibbles(b[:, 4:20], 16).reshape(-1, 32)
    return d * q.float() + m


def _dq_q5_0(b: torch.Tensor) -> torch.Tensor:
    d = _f16(b[:, 0:2])
    q = _nibbles(b[:, 6:22], 16).reshape(-1, 32) | (_bits32(b[:, 2:6]) << 4)
    return d * (q.to(torch.int8) - 16).float()


def _dq_q5_1(b: torch.Tensor) -> torch.Tensor:
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    q = _nibbles(b[:, 8:24], 16).reshape(-1, 32) | (_bits32(b[:, 4:8]) << 4)
    return d * q.float() + m


def _dq_q8_0(b: torch.Tensor) -> torch.Tensor:
    d = _f16(b[:, 0:2])
    w = torch.empty(b.shape[0], 32, dtype=torch.float32)
    w.copy_(b[:, 2:34].view(torch.int8))  # int8 -> float32 in one strided pass (exact)
    return w.mul_(d)


def _scale_min_k4(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The 12 packed bytes of Q4_K/Q5_K -> 8 six-bit scales and 8 six-bit mins (get_scale_min_k4):
    bytes 0-3 hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7, bytes 4-7 the same for
    the mins, bytes 8-11 the low 4 bits of scales 4-7 (low nibble) and mins 4-7 (high nibble)."""
    s = s.reshape(-1, 3, 4)
    a, m, md = s[:, 0], s[:, 1], s[:, 2]
    sc = torch.cat([a & 0x3F, (md & 0x0F) | ((a >> 2) & 0x30)], dim=1)
    mn = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=1)
    return sc, mn


def _k_scales(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K / Q5_K blocks' header: each sub-block's scale d*sc and offset dmin*m, [nb, 8, 1]."""
    nb = b.shape[0]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = _scale_min_k4(b[:, 4:16])
    return (d * sc.float()).reshape(nb, 8, 1), (dmin * mn.float()).reshape(nb, 8, 1)


def _dq_q4_k(b: torch.Tensor) -> torch.Tensor:
    nb = b.shape[0]
    ds, dm = _k_scales(b)
    q = _nibbles(b[:, 16:144], 32).reshape(nb, 8, 32).float()
    return (ds * q - dm).reshape(nb, 256)


def _dq_q5_k(b: torch.Tensor) -> torch.Tensor:
    nb = b.shape[0]
    ds, dm = _k_scales(b)
    ql = _nibbles(b[:, 48:176], 32).reshape(nb, 8, 32)
    # sub-block s takes bit s of each of the 32 qh bytes
    qh = (b[:, 16:48].reshape(nb, 1, 32) >> _SHIFT1.reshape(1, 8, 1)) & 1
    q = (ql | (qh << 4)).float()
    return (ds * q - dm).reshape(nb, 256)


def _dq_q6_k(b: torch.Tensor) -> torch.Tensor:
    nb = b.shape[0]
    # each 128-element half h uses ql[64h:64h+64] (low nibbles -> elements 0-63, high -> 64-127)
    # and qh[32h:32h+32] (2-bit fields at shifts 0, 2, 4, 6 -> elements 0-31, 32-63, 64-95, 96-127)
    ql = _nibbles(b[:, 0:128], 64).reshape(nb, 8, 32)
    qh = (b[:, 128:192].reshape(nb, 2, 1, 32) >> _SHIFT2.reshape(1, 1, 4, 1)) & 0x03
    q = (ql | (qh.reshape(nb, 8, 32) << 4)).to(torch.int8) - 32
    scales = b[:, 192:208].contiguous().view(torch.int8).float()
    d = _f16(b[:, 208:210])
    ds = (d * scales).reshape(nb, 16, 1)
    return (ds * q.reshape(nb, 16, 16).float()).reshape(nb, 256)


_DECODERS = {
    Q4_0: _dq_q4_0, Q4_1: _dq_q4_1, Q5_0: _dq_q5_0, Q5_1: _dq_q5_1, Q8_0: _dq_q8_0,
    Q4_K: _dq_q4_k, Q5_K: _dq_q5_k, Q6_K: _dq_q6_k,
}


def _decode(chunk: torch.Tensor, qtype: int) -> torch.Tensor:
    """A contiguous uint8 chunk of whole blocks -> flat float32 values."""
    if qtype == F32:
        return chunk.view(torch.float32)
    if qtype == F16:
        return chunk.view(torch.float16).float()
    if qtype == BF16:  # the 16 bits are the top half of a float32: shift, no float arithmetic
        return (chunk.view(torch.int16).to(torch.int32) << 16).view(torch.float32)
    _, bb = _BLOCKS[qtype]
    return _DECODERS[qtype](chunk.reshape(-1, bb)).reshape(-1)


# ---------------------------------------------------------------------------------------------
# Reading raw bytes

def _flat_bytes(raw: Raw):
    """A flat uint8 view of `raw` (numpy array / memmap, torch tensor or a bytes-like object), without
    copying when it is contiguous."""
    if isinstance(raw, torch.Tensor):
        t = raw.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        return t.reshape(-1).view(torch.uint8) if t.dtype != torch.uint8 else t.reshape(-1)
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return np.frombuffer(raw, dtype=np.uint8)
    a = raw if isinstance(raw, np.ndarray) else np.asarray(raw)
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a.reshape(-1).view(np.uint8)


def _nbytes(flat) -> int:
    return int(flat.numel() if isinstance(flat, torch.Tensor) else flat.size)


def _chunk_bytes(flat, start: int, stop: int) -> torch.Tensor:
    """A fresh contiguous (hence aligned, writable) uint8 tensor of flat[start:stop]."""
    if isinstance(flat, torch.Tensor):
        return flat[start:stop].clone()
    return torch.from_numpy(np.array(flat[start:stop], dtype=np.uint8, copy=True))


def _rows_of(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, row length) of a torch shape whose last dim is the block dimension."""
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"invalid shape {shape}")
    if not shape:
        return 1, 1
    return math.prod(shape[:-1]), shape[-1]


def _check(raw: Raw, qtype: int, shape: tuple[int, ...]):
    if qtype not in _BLOCKS:
        raise ValueError(f"cannot dequantize unsupported ggml type id {qtype}; supported: "
                         f"{', '.join(f'{n} ({i})' for i, n in TYPE_NAMES.items())}")
    rows, k = _rows_of(shape)
    rb = row_bytes(qtype, k)
    flat = _flat_bytes(raw)
    if _nbytes(flat) != rows * rb:
        raise ValueError(f"{_name(qtype)} tensor of shape {tuple(shape)} needs {rows * rb} bytes "
                         f"({rows} rows x {rb}), got {_nbytes(flat)}")
    return flat, rows, k, rb


def _row_chunks(rows: int, k: int):
    step = max(1, _CHUNK_ELEMS // max(k, 1))
    for r0 in range(0, rows, step):
        yield r0, min(rows, r0 + step)


def dequantize(raw: Raw, qtype: int, shape: tuple[int, ...]) -> torch.Tensor:
    """Bytes of a stored tensor -> a new float32 tensor of the torch `shape` (last dim = ggml ne[0]).

    `raw` is read as flat bytes (numpy array / memmap view or torch tensor, any dtype). Equal bit for
    bit to gguf-py's `gguf.quants.dequantize(raw, qtype)` reshaped to `shape`."""
    flat, rows, k, rb = _check(raw, qtype, shape)
    out = torch.empty(rows, k, dtype=torch.float32)
    for r0, r1 in _row_chunks(rows, k):
        out[r0:r1].view(-1).copy_(_decode(_chunk_bytes(flat, r0 * rb, r1 * rb), qtype))
    return out.reshape(tuple(int(s) for s in shape))


# ---------------------------------------------------------------------------------------------
# Quantization (ggml reference quantizers)

def _roundf(x: torch.Tensor) -> torch.Tensor:
    """C roundf: round half away from zero, exactly (x - trunc(x) is exact for |x| < 2**23)."""
    t = torch.trunc(x)
    frac = x - t
    return t + torch.where(frac >= 0.5, 1.0, torch.where(frac <= -0.5, -1.0, 0.0))


def _inv(d: torch.Tensor) -> torch.Tensor:
    """ggml's `id = d ? 1.0f/d : 0.0f` in float32."""
    safe = torch.where(d == 0, torch.ones_like(d), d)
    return torch.where(d == 0, torch.zeros_like(d), 1.0 / safe)


def _fp16_bytes(d: torch.Tensor) -> torch.Tensor:
    """float32 [nb, 1] -> uint8 [nb, 2]: fp16 rounded to nearest even (ggml's FP32_TO_FP16)."""
    return d.to(torch.float16).contiguous().view(torch.uint8).reshape(-1, 2)


def _q_q8_0(x: torch.Tensor) -> torch.Tensor:
    amax = x.abs().amax(dim=1, keepdim=True)
    d = amax / 127.0
    q = _roundf(x * _inv(d)).to(torch.int8).view(torch.uint8)
    return torch.cat([_fp16_bytes(d), q], dim=1)


def _q_q4_0(x: torch.Tensor) -> torch.Tensor:
    # the element with the largest |x| (the first one on ties) keeps its sign: d = max / -8
    imax = x.abs().argmax(dim=1, keepdim=True)
    mx = x.gather(1, imax)
    d = mx / -8.0
    # (int8_t)(x*id + 8.5f) truncates toward zero; MIN(15, .)
    q = torch.trunc(x * _inv(d) + 8.5).clamp_(0, 15).to(torch.uint8)
    qs = q[:, :16] | (q[:, 16:] << 4)
    return torch.cat([_fp16_bytes(d), qs], dim=1)


def _bf16_bits(x: torch.Tensor) -> torch.Tensor:
    """float32 -> bf16 bit patterns as ggml_compute_fp32_to_bf16: NaN kept quiet, otherwise round
    to nearest even (integer arithmetic, so unaffected by flush-to-zero)."""
    n = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    nan = (n & 0x7FFFFFFF) > 0x7F800000
    rne = (n + (0x7FFF + ((n >> 16) & 1))) >> 16
    quiet = ((n & 0xFFFF0000) | (64 << 16)) >> 16
    return torch.where(nan, quiet, rne).to(torch.int32).to(torch.int16)


def quantize(t: torch.Tensor, qtype: int) -> torch.Tensor:
    """Float tensor (blocks along the last dim) -> uint8 [*t.shape[:-1], row_bytes(qtype, t.shape[-1])]
    for F32, F16, BF16, Q8_0, Q4_0, bytes equal to ggml's reference quantizers."""
    if qtype not in (F32, F16, BF16, Q8_0, Q4_0):
        raise ValueError(f"quantizing to {_name(qtype)} is not implemented "
                         f"(supported: F32, F16, BF16, Q8_0, Q4_0)")
    t = torch.as_tensor(t).detach()
    if t.dim() == 0:
        t = t.reshape(1)
    lead, k = tuple(t.shape[:-1]), int(t.shape[-1])
    rb = row_bytes(qtype, k)
    rows = math.prod(lead)
    x = t.reshape(rows, k)
    out = torch.empty(rows, rb, dtype=torch.uint8)
    for r0, r1 in _row_chunks(rows, k):
        c = x[r0:r1].to(device="cpu", dtype=torch.float32).contiguous()
        if qtype == F32:
            b = c.view(torch.uint8)
        elif qtype == F16:
            b = c.to(torch.float16).view(torch.uint8)
        elif qtype == BF16:
            b = _bf16_bits(c).view(torch.uint8)
        else:
            blocks = c.reshape(-1, 32)
            b = _q_q8_0(blocks) if qtype == Q8_0 else _q_q4_0(blocks)
        out[r0:r1] = b.reshape(r1 - r0, rb)
    return out.reshape(*lead, rb)


# ---------------------------------------------------------------------------------------------
# int8 rows for Int8Linear

def int8_rows(raw: Raw, qtype: int, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """A stored tensor -> per-output-row symmetric int8: (q int8 [N, K], scale float32 [N]).

    N = prod(shape[:-1]), K = shape[-1]. Each row is dequantized (exactly as `dequantize`), then
    scale = absmax(row) / 127 (absmax clamped to >= 1e-12 so an all-zero row gets a tiny positive
    scale) and q = round(w / scale) clamped to [-127, 127]: the same formula as
    `transcribe.quant.Int8Linear`, so the result equals Int8Linear built from the dequantized weight.
    Works on chunks of rows: memory beyond the int8 output is one chunk of floats."""
    flat, rows, k, rb = _check(raw, qtype, shape)
    q = torch.empty(rows, k, dtype=torch.int8)
    scale = torch.empty(rows, dtype=torch.float32)
    for r0, r1 in _row_chunks(rows, k):
        # The decoded chunk is a fresh tensor of this loop's own: the formula's steps run in place on it,
        # with the same IEEE operations (max |w| as max(-min, max), one pass).
        w = _decode(_chunk_bytes(flat, r0 * rb, r1 * rb), qtype).reshape(r1 - r0, k)
        lo, hi = torch.aminmax(w, dim=1)
        s = torch.maximum(lo.neg_(), hi).clamp_min_(1e-12).div_(127.0)
        q[r0:r1].copy_(w.div_(s[:, None]).round_().clamp_(-127, 127))
        scale[r0:r1] = s
    return q, scale


# ---------------------------------------------------------------------------------------------
# Q8_0 blocks for Q8Linear

def q8_0_blocks(raw: Raw, qtype: int, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """A stored tensor -> its Q8_0 blocks: (q int8 [N, K], scale float32 [N, K / 32]), w = q * scale.

    N = prod(shape[:-1]), K = shape[-1]. A Q8_0 tensor's bytes are split as they are (each block's fp16
    scale, exact in float32, and its 32 int8 values): the weights are the file's, bit for bit. Any other
    type is dequantized (as `dequantize`) and quantized with ggml's reference Q8_0 quantizer (as
    `quantize`), a rounding the file does not have. Works on chunks of rows."""
    flat, rows, k, rb = _check(raw, qtype, shape)
    if k % 32:
        raise ValueError(f"a row of {k} values is not a whole number of Q8_0 blocks (32)")
    q = torch.empty(rows, k, dtype=torch.int8)
    scale = torch.empty(rows, k // 32, dtype=torch.float32)
    for r0, r1 in _row_chunks(rows, k):
        b = _chunk_bytes(flat, r0 * rb, r1 * rb)
        if qtype != Q8_0:
            b = _q_q8_0(_decode(b, qtype).reshape(-1, 32))
        b = b.reshape(r1 - r0, k // 32, 34)
        scale[r0:r1] = _f16(b[:, :, 0:2].reshape(-1, 2)).reshape(r1 - r0, k // 32)
        q[r0:r1].view(r1 - r0, k // 32, 32).copy_(b[:, :, 2:34].contiguous().view(torch.int8))
    return q, scale

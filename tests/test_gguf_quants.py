"""transcribe.gguf.quants against gguf-py (dequantization) and the upstream quantizers' files
(quantization): every comparison is exact, on the float32 bit patterns."""
from __future__ import annotations

import gguf  # a dependency of the package: a broken install fails here, it is not skipped
import numpy as np
import pytest
import torch
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from transcribe.gguf import quants as Q

from .conftest import SHARED

GGUF_DIR = SHARED / "models" / "gguf"
PARAKEET = GGUF_DIR / "parakeet-cpp"
TRANSCRIBE = GGUF_DIR / "transcribe-cpp"
MODELS = ["tiny-ctc-fit", "tiny-ctc-streaming-random", "tiny-hybrid-tdt-ctc-fit", "tiny-rnnt-fit",
          "tiny-tdt-fit", "tiny-tdt-streaming-random"]

needs_files = pytest.mark.skipif(not GGUF_DIR.is_dir(), reason=f"{GGUF_DIR} not present")


def _bits(x: torch.Tensor) -> torch.Tensor:
    """float32 bit patterns: equality on these is bit for bit (-0.0 != 0.0, NaN payloads count)."""
    return x.contiguous().view(torch.int32)


def _assert_bits_equal(ours: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert ours.dtype == torch.float32 and ref.dtype == torch.float32, what
    assert ours.shape == ref.shape, f"{what}: shape {tuple(ours.shape)} != {tuple(ref.shape)}"
    assert torch.equal(_bits(ours), _bits(ref)), f"{what}: values differ"


def _ref_dequantize(data: np.ndarray, qtype: int, shape) -> torch.Tensor:
    ref = np.ascontiguousarray(gguf_dequantize(data, gguf.GGMLQuantizationType(qtype)), dtype=np.float32)
    return torch.from_numpy(ref.copy()).reshape(shape)


def _torch_shape(t) -> tuple[int, ...]:
    return tuple(reversed([int(x) for x in t.shape]))


def _tensors(path):
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


# --- 1. every tensor of every upstream file --------------------------------------------------

@needs_files
def test_dequantize_all_files_matches_gguf_py():
    paths = sorted(GGUF_DIR.glob("*/*.gguf"))
    assert len(paths) >= 40
    seen: set[str] = set()
    for path in paths:
        for t in gguf.GGUFReader(str(path)).tensors:
            qtype = int(t.tensor_type)
            shape = _torch_shape(t)
            ours = Q.dequantize(t.data, qtype, shape)
            _assert_bits_equal(ours, _ref_dequantize(t.data, qtype, shape), f"{path.name}:{t.name}")
            seen.add(Q.TYPE_NAMES[qtype])
    assert {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K"} <= seen


@needs_files
def test_dequantize_accepts_torch_bytes_and_any_raw_shape():
    t = next(t for t in _tensors(PARAKEET / "tiny-tdt-fit-q4_k.gguf").values() if t.tensor_type.name == "Q4_K")
    shape = _torch_shape(t)
    ref = Q.dequantize(t.data, int(t.tensor_type), shape)
    flat = torch.from_numpy(np.array(t.data).reshape(-1))
    _assert_bits_equal(Q.dequantize(flat, int(t.tensor_type), shape), ref, "torch bytes")
    _assert_bits_equal(Q.dequantize(np.array(t.data).reshape(-1), int(t.tensor_type), shape), ref, "flat numpy")
    _assert_bits_equal(Q.dequantize(np.array(t.data).tobytes(), int(t.tensor_type), shape), ref, "bytes")


# --- 2. random blocks of every type ----------------------------------------------------------

# byte offsets of the fp16 fields that must hold finite values; the bool says whether the format
# uses the sign (mins of Q4_1/Q5_1 are signed; K-quant d/dmin are positive in practice but any
# sign decodes the same way)
_FP16_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
}


def _random_blocks(qtype: int, rows: int, blocks_per_row: int, rng: np.random.Generator) -> np.ndarray:
    _, bb = Q.block_size(qtype)
    raw = rng.integers(0, 256, size=(rows * blocks_per_row, bb), dtype=np.uint8)
    for off in _FP16_FIELDS[qtype]:
        v = rng.uniform(1e-3, 1e-1, size=rows * blocks_per_row)
        v *= rng.choice([-1.0, 1.0], size=v.shape)
        raw[:, off:off + 2] = v.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(rows, blocks_per_row * bb)


@pytest.mark.parametrize("name", ["Q4_1", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0", "Q4_0", "Q4_K"])
def test_dequantize_random_blocks_matches_gguf_py(name):
    qtype = Q.type_id(name)
    be, _ = Q.block_size(qtype)
    rng = np.random.default_rng(qtype)
    for rows, bpr in [(1, 1), (7, 3), (33, 2)]:
        raw = _random_blocks(qtype, rows, bpr, rng)
        shape = (rows, bpr * be)
        ours = Q.dequantize(raw, qtype, shape)
        _assert_bits_equal(ours, _ref_dequantize(raw, qtype, shape), f"{name} {shape}")
    # a 3-d shape and small chunks (several chunks per tensor)
    raw = _random_blocks(qtype, 12, 2, rng)
    shape = (3, 4, 2 * be)
    old = Q._CHUNK_ELEMS
    try:
        Q._CHUNK_ELEMS = 3 * be
        ours = Q.dequantize(raw, qtype, shape)
    finally:
        Q._CHUNK_ELEMS = old
    _assert_bits_equal(ours, _ref_dequantize(raw, qtype, shape), f"{name} chunked {shape}")


def test_dequantize_plain_float_types():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((5, 6)).astype(np.float32))
    _assert_bits_equal(Q.dequantize(x.numpy(), Q.F32, (5, 6)), x, "F32")
    h = x.half()
    _assert_bits_equal(Q.dequantize(h.view(torch.uint8), Q.F16, (5, 6)), h.float(), "F16")
    b = x.bfloat16()
    _assert_bits_equal(Q.dequantize(b.view(torch.uint8).numpy(), Q.BF16, (30,)), b.float().reshape(30), "BF16")


# --- 3. quantize == the upstream quantizers' bytes -------------------------------------------

def _check_quantized_pair(src_path, dst_path, qtypes: set[str]) -> int:
    src, dst = _tensors(src_path), _tensors(dst_path)
    n = 0
    for name, tq in dst.items():
        if tq.tensor_type.name not in qtypes:
            continue
        ts = src[name]
        assert ts.tensor_type.name == "F32", name
        x = Q.dequantize(ts.data, Q.F32, _torch_shape(ts))
        ours = Q.quantize(x, int(tq.tensor_type))
        assert ours.dtype == torch.uint8
        assert tuple(ours.shape) == (*x.shape[:-1], Q.row_bytes(int(tq.tensor_type), x.shape[-1]))
        # transcribe.cpp's quantizer drops trailing size-1 dims: compare the bytes flat
        ref = torch.from_numpy(np.array(tq.data).reshape(-1).view(np.uint8))
        assert torch.equal(ours.reshape(-1), ref), f"{dst_path.name}:{name} ({tq.tensor_type.name})"
        n += 1
    return n


@needs_files
@pytest.mark.parametrize("model", MODELS)
def test_quantize_matches_parakeet_cpp(model):
    # q8_0: parakeet.cpp's Python converter; q4_0: ggml's C++ quantizer (parakeet-cli quantize)
    assert _check_quantized_pair(PARAKEET / f"{model}-f32.gguf", PARAKEET / f"{model}-q8_0.gguf", {"Q8_0"}) > 0
    assert _check_quantized_pair(PARAKEET / f"{model}-f32.gguf", PARAKEET / f"{model}-q4_0.gguf", {"Q4_0"}) > 0


@needs_files
@pytest.mark.parametrize("model", MODELS)
def test_quantize_matches_transcribe_cpp(model):
    # transcribe-quantize (ggml C++): Q8_0 / Q4_0 weights plus some tensors stored as F16
    for q in ("Q8_0", "Q4_0"):
        n = _check_quantized_pair(TRANSCRIBE / f"{model}-F32.gguf", TRANSCRIBE / f"{model}-{q}.gguf",
                                  {q, "F16"})
        assert n > 0


def _tie_blocks(rng: np.random.Generator, n: int) -> torch.Tensor:
    """Blocks whose scaled values land exactly on .5 (the rounding ties) and on equal |max| with
    both signs (the sign rule of Q4_0/Q5_0)."""
    k = rng.integers(-126, 127, size=(n, 32)).astype(np.float32)
    x = (k + rng.choice([0.0, 0.5, -0.5], size=k.shape).astype(np.float32)) / 16
    x[:, 0] = 127.0 / 16
    x[::2, 5] = -127.0 / 16  # same |x| as element 0, opposite sign: the first one wins
    x[1::4, 0] = -127.0 / 16
    return torch.from_numpy(x)


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0"])
def test_quantize_random_and_ties_match_gguf_py_reference(name):
    # gguf-py's Q8_0/Q4_0 quantizers are written to be bit-exact with ggml's *_ref quantizers
    qtype = Q.type_id(name)
    rng = np.random.default_rng(1)
    cases = [torch.from_numpy(rng.standard_normal((9, 96)).astype(np.float32) * 0.05),
             torch.zeros(2, 32), _tie_blocks(rng, 64).reshape(16, 128)]
    for x in cases:
        ref = torch.from_numpy(np.ascontiguousarray(gguf_quantize(x.numpy(), gguf.GGMLQuantizationType(qtype))))
        assert torch.equal(Q.quantize(x, qtype), ref)
        old = Q._CHUNK_ELEMS
        try:
            Q._CHUNK_ELEMS = 2 * x.shape[-1]  # several chunks of rows
            assert torch.equal(Q.quantize(x, qtype), ref)
        finally:
            Q._CHUNK_ELEMS = old


def test_quantize_q8_0_rounds_half_away_from_zero():
    # block absmax 127 -> d = 1, id = 1: the stored ints are roundf(x)
    x = torch.tensor([127.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997] + [0.0] * 24)
    q = Q.quantize(x, Q.Q8_0)
    assert q[:2].view(torch.float16).item() == 1.0
    assert q[2:10].view(torch.int8).tolist() == [127, 1, -1, 2, -2, 3, -3, 0]


def test_quantize_q4_0_keeps_sign_of_max():
    x = torch.zeros(32)
    x[3], x[7] = -8.0, 8.0  # equal |x|: the first (negative) one is `max`, d = max / -8 = 1
    q = Q.quantize(x, Q.Q4_0)
    assert q[:2].view(torch.float16).item() == 1.0
    back = Q.dequantize(q, Q.Q4_0, (32,))
    assert back[3] == -8.0 and back[7] == 7.0  # +8 clamps to nibble 15 -> 7


# --- 4. F16 / BF16 ---------------------------------------------------------------------------

def test_quantize_f16_bf16_f32_match_torch():
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.standard_normal((4, 3, 10)).astype(np.float32) * 10)
    x[0, 0, :4] = torch.tensor([1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8])  # ties
    assert torch.equal(Q.quantize(x, Q.F16), x.half().view(torch.uint8).reshape(4, 3, 20))
    assert torch.equal(Q.quantize(x, Q.BF16), x.bfloat16().view(torch.uint8).reshape(4, 3, 20))
    assert torch.equal(Q.quantize(x, Q.F32), x.view(torch.uint8).reshape(4, 3, 40))
    # BF16 bytes equal gguf-py's (ggml_compute_fp32_to_bf16)
    ref = gguf_quantize(x.numpy().reshape(12, 10), gguf.GGMLQuantizationType.BF16)
    assert np.array_equal(Q.quantize(x, Q.BF16).reshape(12, 20).numpy(), ref.reshape(12, 20))
    # round trip
    _assert_bits_equal(Q.dequantize(Q.quantize(x, Q.BF16), Q.BF16, tuple(x.shape)), x.bfloat16().float(), "bf16")


@needs_files
def test_granite_bf16_file():
    path = TRANSCRIBE / "granite-nar-tiny-BF16.gguf"
    n = 0
    for t in gguf.GGUFReader(str(path)).tensors:
        qtype, shape = int(t.tensor_type), _torch_shape(t)
        ours = Q.dequantize(t.data, qtype, shape)
        _assert_bits_equal(ours, _ref_dequantize(t.data, qtype, shape), t.name)
        if qtype == Q.BF16:
            n += 1
            # and quantizing back gives the stored bytes
            assert torch.equal(Q.quantize(ours, Q.BF16).reshape(-1),
                               torch.from_numpy(np.array(t.data).reshape(-1).view(np.uint8)))
    assert n > 0


# --- 5. names, sizes, errors -----------------------------------------------------------------

def test_names_and_sizes():
    assert Q.type_id("q8_0") == Q.type_id("Q8_0") == 8
    assert Q.type_id("f32") == 0 and Q.type_id("bf16") == 30 and Q.type_id("Q4_K") == 12
    assert Q.TYPE_NAMES[30] == "BF16" and Q.TYPE_NAMES[2] == "Q4_0"
    for tid, name in Q.TYPE_NAMES.items():
        g = gguf.GGMLQuantizationType(tid)
        assert g.name == name
        assert Q.block_size(tid) == tuple(gguf.GGML_QUANT_SIZES[g])
    assert Q.row_bytes(Q.Q4_K, 512) == 288 and Q.row_bytes(Q.F16, 3) == 6
    with pytest.raises(ValueError, match="Q8_0"):
        Q.row_bytes(Q.Q8_0, 33)
    with pytest.raises(ValueError, match="IQ9"):
        Q.type_id("IQ9")


def test_errors():
    with pytest.raises(ValueError, match="10"):
        Q.dequantize(np.zeros(84, np.uint8), 10, (256,))  # Q2_K: not supported
    with pytest.raises(ValueError, match="10"):
        Q.block_size(10)
    with pytest.raises(ValueError, match=r"Q8_0.*68.*34"):
        Q.dequantize(np.zeros(34, np.uint8), Q.Q8_0, (2, 32))
    with pytest.raises(ValueError, match="F32"):
        Q.dequantize(np.zeros(10, np.uint8), Q.F32, (3,))
    with pytest.raises(ValueError, match="block size 256"):
        Q.dequantize(np.zeros(144, np.uint8), Q.Q4_K, (128,))
    with pytest.raises(ValueError, match="quantizing to Q4_K is not implemented"):
        Q.quantize(torch.zeros(256), Q.Q4_K)
    with pytest.raises(ValueError, match="block size 32"):
        Q.quantize(torch.zeros(3, 40), Q.Q8_0)


# --- 6. int8 rows ----------------------------------------------------------------------------

@needs_files
def test_int8_rows_q8_0():
    t = next(t for t in _tensors(PARAKEET / "tiny-tdt-fit-q8_0.gguf").values()
             if t.tensor_type.name == "Q8_0" and len(t.shape) == 2)
    shape = _torch_shape(t)
    w = Q.dequantize(t.data, Q.Q8_0, shape)
    old = Q._CHUNK_ELEMS
    try:
        Q._CHUNK_ELEMS = 3 * shape[-1]  # several chunks
        q, scale = Q.int8_rows(t.data, Q.Q8_0, shape)
    finally:
        Q._CHUNK_ELEMS = old
    assert q.dtype == torch.int8 and tuple(q.shape) == shape
    assert scale.dtype == torch.float32 and tuple(scale.shape) == (shape[0],)
    assert torch.equal(scale, w.abs().amax(dim=1) / 127.0)
    assert int(q.abs().max()) <= 127
    # q = round(w / scale) with |w / scale| <= 127, so |q - w / scale| <= 1/2 and |q*scale - w| <=
    # scale/2; the float32 division and product add a relative error of a few ulp of values up to
    # 127 * scale, so allow that much on top.
    err = (q.float() * scale[:, None] - w).abs()
    slack = 127 * scale[:, None] * 4 * torch.finfo(torch.float32).eps
    assert bool((err <= scale[:, None] / 2 + slack).all())
    # the same as the Int8Linear layout built from the dequantized weight
    from transcribe.quant import Int8Linear
    lin = Int8Linear(w, None)
    assert torch.equal(lin.weight_t.t(), q) and torch.equal(lin.weight_scale, scale)


def test_int8_rows_other_type_and_zero_row():
    rng = np.random.default_rng(3)
    raw = _random_blocks(Q.Q4_K, 3, 1, rng)
    raw[1] = 0  # an all-zero row
    q, scale = Q.int8_rows(raw, Q.Q4_K, (3, 256))
    w = Q.dequantize(raw, Q.Q4_K, (3, 256))
    assert torch.equal(q[1], torch.zeros(256, dtype=torch.int8)) and scale[1] > 0
    assert torch.equal(scale[[0, 2]], w[[0, 2]].abs().amax(dim=1) / 127.0)
    assert torch.equal(q[[0, 2]], torch.round(w[[0, 2]] / scale[[0, 2], None]).clamp(-127, 127).to(torch.int8))


# --- 7. Q8_0 blocks ---------------------------------------------------------------------------

@needs_files
def test_q8_0_blocks_are_the_file_s_bytes():
    """A Q8_0 tensor's blocks split as stored: q * scale is `dequantize`'s result bit for bit, the scales
    are the fp16 values of the file, the int8 values its bytes (checked against gguf-py's own reading)."""
    t = next(t for t in _tensors(PARAKEET / "tiny-tdt-fit-q8_0.gguf").values()
             if t.tensor_type.name == "Q8_0" and len(t.shape) == 2)
    shape = _torch_shape(t)
    old = Q._CHUNK_ELEMS
    try:
        Q._CHUNK_ELEMS = 3 * shape[-1]  # several chunks
        q, scale = Q.q8_0_blocks(t.data, Q.Q8_0, shape)
    finally:
        Q._CHUNK_ELEMS = old
    n, k = shape
    assert q.dtype == torch.int8 and tuple(q.shape) == shape
    assert scale.dtype == torch.float32 and tuple(scale.shape) == (n, k // 32)
    assert torch.equal(scale.half().float(), scale)
    blocks = torch.from_numpy(np.asarray(t.data).reshape(n, k // 32, 34).copy())
    assert torch.equal(q.view(n, k // 32, 32), blocks[:, :, 2:].contiguous().view(torch.int8))
    want = torch.from_numpy(gguf_dequantize(t.data, t.tensor_type)).reshape(shape)
    assert torch.equal((q.view(n, k // 32, 32).float() * scale[:, :, None]).view(n, k), want)


def test_q8_0_blocks_of_another_type_are_ggml_s_q8_0():
    """A tensor of another type: dequantized, then quantized by ggml's reference Q8_0 rule (`quantize`)."""
    rng = np.random.default_rng(5)
    w = torch.from_numpy(rng.standard_normal((5, 64)).astype(np.float32))
    for qtype, raw in ((Q.F32, w.numpy()), (Q.F16, w.half().numpy())):
        q, scale = Q.q8_0_blocks(raw, qtype, (5, 64))
        ref = Q.quantize(Q.dequantize(raw, qtype, (5, 64)), Q.Q8_0)
        want_q, want_s = Q.q8_0_blocks(ref, Q.Q8_0, (5, 64))
        assert torch.equal(q, want_q) and torch.equal(scale, want_s)
    with pytest.raises(ValueError, match="Q8_0 blocks"):
        Q.q8_0_blocks(torch.zeros(2, 48), Q.F32, (2, 48))

"""Linear layers whose weights stay quantized: `Int8Linear` (int8 x int8 products) and `Q8Linear` (ggml
Q8_0 blocks, dequantized at each call).

`Int8Linear` holds a weight as int8 [N, K] with one float32 scale per output channel (symmetric,
absmax / 127). A call quantizes each input row with its own absmax scale, multiplies int8 x int8
with int32 accumulation (`torch._int_mm`: oneDNN's AMX/VNNI int8 kernels on a CPU), and rescales.
Every row is quantized and multiplied on its own, so a row's result does not depend on the other
rows of the call: a batch gives each input what it gets alone.

The int32 products are exact on every CPU (`int_mm`), so int8 results are the same everywhere: without
VNNI (AVX2-only CPUs such as AMD Zen 2/3, AVX-512 ones such as Intel Skylake-SP) oneDNN multiplies
pairs of u8 x s8 into an int16 that saturates (vpmaddubsw), and `torch._int_mm` is then wrong by up to
10^6 for full-range int8; there the right operand is split into halves that cannot saturate.

`quantize_linears(module)` swaps a module's `nn.Linear` children for `Int8Linear` in place (the
float weight is freed). The accuracy cost is reported by the benchmarks, never assumed; int8 is
an option (`load_model(..., dtype="int8")`), never a default.

`Q8Linear` holds a weight as a GGUF file's Q8_0 blocks hold it: int8 [N, K] and one scale per 32
values of a row [N, K / 32] (ggml's fp16 scales, kept exactly as float32), so no rounding is added to
the file's weights. Each call dequantizes the weight exactly (q * scale, float32) and multiplies in
the compute dtype (`q8_compute_dtype`): bfloat16 where the CPU multiplies bfloat16 natively (AMX,
AVX512-BF16) and on a GPU, float32 elsewhere; the activations are never quantized. It is the default
compute of a GGUF file's Q8_0 weights (Parakeet, Granite): ggml quantizes activations to Q8_0 blocks
too, so its error is the weights' blocks times the activations' blocks; here it is the weights' blocks
alone (float32) or with bfloat16's rounding of both operands (8 significant bits, finer than a block of
32 int8 values); benchmarks/README.md ("Q8_0 compute") has the measured choice. Memory at rest is the
int8 values plus 1/8 of them in scales; a call holds one layer's dequantized weight beside it.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import cpu

# torch._int_mm on a CPU takes any M; on CUDA it wants M > 16 and K, N multiples of 8: rows are
# padded up to this many there.
_CUDA_MIN_ROWS = 17


@functools.lru_cache(maxsize=None)
def int_mm_is_exact() -> bool:
    """Whether `torch._int_mm` on this CPU gives the exact int32 products of full-range int8 (a probe of
    the saturating case, once per process: rows of 127 against columns of 127 and of -127)."""
    for m in (1, 17, 64):
        a = torch.full((m, 64), 127, dtype=torch.int8)
        for v in (127, -127):
            b = torch.full((64, 32), v, dtype=torch.int8)
            if not bool((torch._int_mm(a, b) == 64 * 127 * v).all()):
                return False
    return True


def split_int8(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """b = 2 * hi + lo with hi = floor(b / 2) in [-64, 63] and lo in {0, 1}, both int8 in b's layout: with
    |right operand| <= 64 a saturating u8 x s8 pair sum stays below 2^15 (2 * 255 * 64 = 32640)."""
    return torch.bitwise_right_shift(b, 1), torch.bitwise_and(b, 1)


def int_mm(a: torch.Tensor, b: torch.Tensor, b_split: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
    """a [M, K] int8 @ b [K, N] int8 -> int32 [M, N], exact on every device and CPU: `torch._int_mm`, or,
    where it saturates (`int_mm_is_exact`), 2 * (a @ hi) + (a @ lo) of `split_int8(b)` (`b_split` when
    the caller keeps it), two products of the same int32 result."""
    if a.is_cuda or int_mm_is_exact():
        return torch._int_mm(a, b)
    hi, lo = split_int8(b) if b_split is None else b_split
    return torch._int_mm(a, hi).mul_(2).add_(torch._int_mm(a, lo))


def _int8_rows(w: torch.Tensor, round_scale) -> tuple[torch.Tensor, torch.Tensor]:
    """A float weight [N, K] -> int8 [N, K] and float32 scales [N] (symmetric per row: absmax / 127, then
    `round_scale`), computed in float32 a few rows at a time: no float32 copy of a whole (bfloat16) weight."""
    if w.dim() != 2 or not w.is_floating_point():
        raise ValueError(f"a float weight [N, K] expected, got {w.dtype} {tuple(w.shape)}")
    q = torch.empty(w.shape, dtype=torch.int8, device=w.device)
    scale = torch.empty(w.shape[0], dtype=torch.float32, device=w.device)
    rows = max(1, _DEQUANT_CHUNK // max(1, w.shape[1]))
    for r in range(0, w.shape[0], rows):
        c = w[r:r + rows].to(torch.float32)
        s = round_scale(c.abs().amax(dim=1).clamp_min(1e-12) / 127.0)
        q[r:r + rows] = torch.round(c / s[:, None]).clamp_(-127, 127).to(torch.int8)
        scale[r:r + rows] = s
    return q, scale


class QuantLinear(nn.Module):
    """A linear layer whose weight is kept quantized (Int8Linear, Q8Linear): model code runs a pointwise
    convolution or a projection through it when it is one (`forward`, `forward_transposed`)."""

    in_features: int
    out_features: int

    def forward_transposed(self, x: torch.Tensor) -> torch.Tensor:
        """(x W^T + b)^T for x [M, K]: [N, M]."""
        return self.forward(x).t()


class Int8Linear(QuantLinear):
    """y = x W^T + b with W int8 per output channel and x quantized per row (dynamic)."""

    def __init__(self, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                 quantized: Optional[tuple[torch.Tensor, torch.Tensor]] = None):
        super().__init__()
        if quantized is not None:  # int8 [N, K] and float32 [N] as they are (from_int8)
            q, scale = quantized
        else:
            q, scale = _int8_rows(weight.detach(), lambda s: s)
        self.in_features = q.shape[1]
        self.out_features = q.shape[0]
        # [K, N] column-major (the transpose of a contiguous [N, K]): the layout _int_mm reads fastest.
        self.register_buffer("weight_t", q.t())
        self.register_buffer("weight_scale", scale)
        self.register_buffer("bias", None if bias is None else bias.detach().to(torch.float32).clone())

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Int8Linear":
        return cls(linear.weight, linear.bias)

    @classmethod
    def from_int8(cls, q: torch.Tensor, scale: torch.Tensor, bias: Optional[torch.Tensor]) -> "Int8Linear":
        """A layer from weights already quantized this way: int8 [N, K], one float32 scale per row
        (a GGUF file's Q8_0 weights, `gguf/quants.int8_rows`)."""
        if q.dtype != torch.int8 or q.dim() != 2 or scale.shape != (q.shape[0],):
            raise ValueError(f"int8 weights [N, K] with N scales expected, got {q.dtype} {tuple(q.shape)} "
                             f"and scales {tuple(scale.shape)}")
        return cls(None, bias, (q, scale.to(torch.float32)))

    @staticmethod
    def _quantize_rows(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[M, K] float -> int8 [M, K] and the per-row scales [M, 1]."""
        amax = x2.abs().amax(dim=1, keepdim=True).clamp_min_(1e-12)
        # |x| * (127 / amax) <= 127 (one rounding above it still rounds to 127): no clamp needed.
        xq = torch.mul(x2, 127.0 / amax).round_().to(torch.int8)
        return xq, amax.div_(127.0)

    def forward_transposed(self, x: torch.Tensor) -> torch.Tensor:
        """(x W^T + b)^T for x [M, K]: [N, M], computed in that layout (W x^T), with x quantized
        per row as in forward, so equal to forward(x).t() up to float rounding."""
        xq, sx = self._quantize_rows(x.to(torch.float32))
        acc = int_mm(self.weight_t.t(), xq.t())
        y = acc.to(torch.float32).mul_(self.weight_scale[:, None]).mul_(sx.t())
        if self.bias is not None:
            y.add_(self.bias[:, None])
        return y.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        dtype = x.dtype
        x2 = x.reshape(-1, shape[-1]).to(torch.float32)
        m = x2.shape[0]
        xq, sx = self._quantize_rows(x2)
        if xq.is_cuda and m < _CUDA_MIN_ROWS:
            xq = torch.cat([xq, xq.new_zeros(_CUDA_MIN_ROWS - m, xq.shape[1])])
        acc = int_mm(xq, self.weight_t, self._weight_split())[:m]
        y = acc.to(torch.float32)
        # The row scales expanded to the full shape: ATen's in-place product of a [M, 1] operand is 3x
        # slower on a CPU than of an expanded one. Then y * w_scale + bias in one pass (addcmul).
        y.mul_(sx.expand_as(y))
        if self.bias is not None:
            torch.addcmul(self.bias, y, self.weight_scale, out=y)
        else:
            y.mul_(self.weight_scale)
        return y.to(dtype).reshape(*shape[:-1], self.out_features)

    def _load_from_state_dict(self, *args, **kwargs):
        self.__dict__.pop("_split", None)  # weight_t is copied in place: its halves are made again
        return super()._load_from_state_dict(*args, **kwargs)

    def _weight_split(self) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """The weight's halves (`split_int8`) where the CPU's int8 product saturates, made once (they are
        not part of the state dict); None elsewhere."""
        if self.weight_t.is_cuda or int_mm_is_exact():
            return None
        split = self.__dict__.get("_split")
        if split is None or split[0] is not self.weight_t:
            split = (self.weight_t, split_int8(self.weight_t))
            self.__dict__["_split"] = split
        return split[1]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class W8Linear(QuantLinear):
    """y = x W^T + b with W int8 per output row (symmetric, absmax / 127, the scales in bfloat16) and the
    activations in bfloat16, never quantized (weight-only int8): a decoder's per-token step reads each weight
    once for a few rows, so its time is the weights' bytes over the memory bandwidth, and int8 weights halve
    bfloat16's. Up to `W8_ROWS` rows a call multiplies the int8 weight directly (`torch._weight_int8pack_mm`,
    each row on its own: a row's result does not depend on the others); more rows (a prompt) multiply a
    bfloat16 copy of the weight made for the call, where the product's arithmetic, not the weight's reading,
    bounds the time. bfloat16 in and out; a bias is added in float32 to the bfloat16 product, then rounded again.

    For CPUs that multiply bfloat16 natively (`cpu_multiplies_bf16`): elsewhere ATen's weight-only kernel has
    no vector code (measured 10x slower) and an int8 model keeps `Int8Linear`."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor]):
        super().__init__()
        # the scales rounded to bfloat16, the ones the product uses, before the weights are divided by them
        q, scale = _int8_rows(weight.detach(), lambda s: s.to(torch.bfloat16).to(torch.float32))
        self.out_features, self.in_features = q.shape
        self.register_buffer("weight_q", q)
        self.register_buffer("weight_scale", scale.to(torch.bfloat16))
        self.register_buffer("bias", None if bias is None else bias.detach().to(torch.float32).clone())

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "W8Linear":
        return cls(linear.weight, linear.bias)

    def dequantized(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """The weight [N, K] as q * scale in `dtype`."""
        return self.weight_q.to(dtype).mul_(self.weight_scale.to(dtype)[:, None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).to(torch.bfloat16)
        if x2.shape[0] <= W8_ROWS:
            y = torch._weight_int8pack_mm(x2.contiguous(), self.weight_q, self.weight_scale)
        else:
            y = F.linear(x2, self.dequantized())
        if self.bias is not None:
            y = (y.to(torch.float32) + self.bias).to(torch.bfloat16)
        return y.to(x.dtype).reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


# Rows a W8Linear call multiplies with the int8 weight itself (more: a bfloat16 copy). Measured on an AMX Xeon, 2
# threads, [4096 x 2048]: one row 387 us against bfloat16's 879 us, but from 8 rows on the weight-only kernel falls
# behind (10x at a prompt's 619 rows). benchmarks/int8_linear_micro.py measures it on a CPU.
W8_ROWS = 4


Q8_BLOCK = 32  # values per ggml Q8_0 block (one scale each)
_DEQUANT_CHUNK = 1 << 18  # float32 values dequantized at a time for a bfloat16 weight (1 MB)


def cpu_multiplies_bf16() -> bool:
    """Whether this process's CPU multiplies bfloat16 natively (AMX or AVX512-BF16, `cpu.features`:
    elsewhere oneDNN has no bfloat16 product, or emulates it, slower than float32)."""
    f = cpu.features()
    return f["amx_bf16"] or f["avx512_bf16"]


def q8_compute_dtype(device: torch.device) -> torch.dtype:
    """The dtype a Q8Linear multiplies in by default: bfloat16 on a GPU and on a CPU that multiplies it
    natively, float32 elsewhere."""
    if device.type == "cuda" or (device.type == "cpu" and cpu_multiplies_bf16()):
        return torch.bfloat16
    return torch.float32


class FloatComputeLinear(QuantLinear):
    """A layer whose compressed weight is made float at each call (`dequantized`) and multiplied with
    float activations in `compute` (None: `default_compute`, for a Q8Linear `q8_compute_dtype`); float32
    in and out, bias in float32."""

    compute: Optional[torch.dtype]
    bias: Optional[torch.Tensor]

    def _set_compute(self, compute: Optional[torch.dtype]) -> None:
        if compute not in (None, torch.float32, torch.bfloat16):
            raise ValueError(f"a {type(self).__name__} computes in float32 or bfloat16, not {compute}")
        self.compute = compute

    @classmethod
    def _held(cls, weight: torch.Tensor, bias: Optional[torch.Tensor], compute: Optional[torch.dtype]):
        """A layer holding `weight` (its stored form) as it is, without the checking constructor."""
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self._init(weight, bias, compute)
        return self

    def _init(self, weight: torch.Tensor, bias: Optional[torch.Tensor], compute: Optional[torch.dtype]) -> None:
        """Hold the stored weight (`_store`) and the bias (float32, copied)."""
        self._set_compute(compute)
        self._store(weight)
        self.register_buffer("bias", None if bias is None else bias.detach().to(torch.float32).clone())

    def _store(self, weight: torch.Tensor) -> None:
        raise NotImplementedError

    def dequantized(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        raise NotImplementedError

    @property
    def weight(self) -> torch.Tensor:
        """The weight as float32 [N, K] (made on each access)."""
        return self.dequantized()

    def default_compute(self) -> torch.dtype:
        return q8_compute_dtype(next(self.buffers()).device)

    def compute_dtype(self) -> torch.dtype:
        return self.compute if self.compute is not None else self.default_compute()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dt = self.compute_dtype()
        y = F.linear(x.to(dt), self.dequantized(dt)).to(torch.float32)
        if self.bias is not None:
            y.add_(self.bias)
        return y.to(x.dtype)

    def forward_transposed(self, x: torch.Tensor) -> torch.Tensor:
        """(x W^T + b)^T for x [M, K]: [N, M], computed in that layout (W x^T)."""
        dt = self.compute_dtype()
        y = torch.matmul(self.dequantized(dt), x.to(dt).t()).to(torch.float32)
        if self.bias is not None:
            y.add_(self.bias[:, None])
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"compute={self.compute}")


class Q8Linear(FloatComputeLinear):
    """y = x W^T + b with W held as ggml's Q8_0 blocks: `blocks` uint8 [N, K / 32, 34], each block an fp16
    scale (2 bytes, little-endian) and 32 int8 values, w = q * scale; dequantized exactly at each call and
    multiplied in `compute`. The blocks may be a GGUF file's own bytes, mapped (`from_blocks`: nothing is
    copied or checked at load, as ggml's runtimes keep a Q8_0 file's tensors)."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, bias: Optional[torch.Tensor],
                 compute: Optional[torch.dtype] = None):
        """From int8 values q [N, K] (K a multiple of 32) and their scales [N, K / 32] (fp16 values)."""
        super().__init__()
        if q.dtype != torch.int8 or q.dim() != 2 or q.shape[1] % Q8_BLOCK:
            raise ValueError(f"int8 weights [N, K] with K a multiple of {Q8_BLOCK} expected, got {q.dtype} {tuple(q.shape)}")
        n, k = q.shape
        if tuple(scale.shape) != (n, k // Q8_BLOCK) or not scale.is_floating_point():
            raise ValueError(f"scales [{n}, {k // Q8_BLOCK}] expected for int8 weights "
                             f"{tuple(q.shape)}, got {scale.dtype} {tuple(scale.shape)}")
        half = scale.to(torch.float16)
        if not torch.equal(half.to(scale.dtype), scale):
            raise ValueError("Q8_0 scales are fp16 values (ggml's); these are not")
        blocks = torch.empty(n, k // Q8_BLOCK, Q8_BLOCK + 2, dtype=torch.uint8, device=q.device)
        blocks[:, :, :2].view(torch.float16)[..., 0] = half
        blocks[:, :, 2:].view(torch.int8).copy_(q.view(n, -1, Q8_BLOCK))
        self._init(blocks, bias, compute)

    @classmethod
    def from_blocks(cls, blocks: torch.Tensor, bias: Optional[torch.Tensor],
                    compute: Optional[torch.dtype] = None) -> "Q8Linear":
        """From Q8_0 blocks as ggml stores them: uint8 [N, K / 32, 34], held as they are (no copy)."""
        if blocks.dtype != torch.uint8 or blocks.dim() != 3 or blocks.shape[2] != Q8_BLOCK + 2 \
                or not blocks.is_contiguous():
            raise ValueError(f"Q8_0 blocks uint8 [N, K / {Q8_BLOCK}, {Q8_BLOCK + 2}] expected, got "
                             f"{blocks.dtype} {tuple(blocks.shape)}")
        return cls._held(blocks, bias, compute)

    def _store(self, blocks: torch.Tensor) -> None:
        self.out_features, self.in_features = blocks.shape[0], blocks.shape[1] * Q8_BLOCK
        self.register_buffer("blocks", blocks)

    @property
    def weight_q(self) -> torch.Tensor:
        """The int8 values [N, K / 32, 32] (a view of the blocks)."""
        return self.blocks[:, :, 2:].view(torch.int8)

    @property
    def weight_scale(self) -> torch.Tensor:
        """The fp16 scales [N, K / 32, 1] (a view of the blocks)."""
        return self.blocks[:, :, :2].view(torch.float16)

    def dequantized(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight [N, K]: q * scale in float32 (exact: an int8 times an fp16 scale), then `dtype`."""
        n, k = self.out_features, self.in_features
        q, s = self.weight_q, self.weight_scale
        if dtype == torch.float32:
            w = torch.empty(n, k // Q8_BLOCK, Q8_BLOCK, dtype=torch.float32, device=q.device)
            return w.copy_(q).mul_(s).view(n, k)
        # In chunks of rows whose float32 values stay in a core's cache (1 MB): 1.5x faster on a CPU than
        # the whole float32 weight made first, then rounded.
        out = torch.empty(n, k, dtype=dtype, device=q.device)
        rows = max(1, _DEQUANT_CHUNK // k)
        tmp = torch.empty(min(rows, n), k // Q8_BLOCK, Q8_BLOCK, dtype=torch.float32, device=q.device)
        for r in range(0, n, rows):
            t = tmp[: min(rows, n - r)]
            t.copy_(q[r:r + rows]).mul_(s[r:r + rows])
            out[r:r + rows].view(-1, k // Q8_BLOCK, Q8_BLOCK).copy_(t)
        return out


class HalfLinear(FloatComputeLinear):
    """y = x W^T + b with W held in float16 (2 bytes a weight: a GGUF file's F16 weight as it is, an F32
    one rounded to 11 significant bits), computed in float32 by default (`compute`): for the matrix
    products a Q8_0 file stores in float beside its Q8_0 weights (bfloat16 would round both operands
    and the product to 8 bits, more than the upstream runtimes' own error there: float32 / F16)."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor], compute: Optional[torch.dtype] = None):
        super().__init__()
        if weight.dim() != 2 or not weight.is_floating_point():
            raise ValueError(f"a float weight [N, K] expected, got {weight.dtype} {tuple(weight.shape)}")
        half = weight.detach().to(torch.float16)
        if not bool(torch.isfinite(half).all()):
            raise ValueError("a weight beyond float16's range (|w| > 65504)")
        self._init(half.contiguous(), bias, compute)

    @classmethod
    def from_f16(cls, weight: torch.Tensor, bias: Optional[torch.Tensor],
                 compute: Optional[torch.dtype] = None) -> "HalfLinear":
        """From a float16 weight [N, K] held as it is (no copy, no check: a GGUF file's F16 tensor, mapped)."""
        if weight.dtype != torch.float16 or weight.dim() != 2:
            raise ValueError(f"a float16 weight [N, K] expected, got {weight.dtype} {tuple(weight.shape)}")
        return cls._held(weight, bias, compute)

    def _store(self, half: torch.Tensor) -> None:
        self.out_features, self.in_features = half.shape
        self.register_buffer("weight_f16", half)

    def default_compute(self) -> torch.dtype:
        return torch.float32

    def dequantized(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.weight_f16.to(dtype)


def quantize_linears(module: nn.Module, keep: Optional[Callable[[str, nn.Linear], bool]] = None) -> int:
    """Replace every nn.Linear under `module` by an Int8Linear, in place, except those for which
    keep(qualified_name, linear) is true. Returns how many were replaced. Each float layer is
    released as soon as its int8 copy exists (only names are held), so quantizing a model needs
    about one layer's memory beyond the two models' weights."""
    targets = [(parent_name, attr)
               for parent_name, parent in module.named_modules()
               for attr, sub in parent.named_children()
               if isinstance(sub, nn.Linear)
               and not (keep is not None and keep(f"{parent_name}.{attr}" if parent_name else attr, sub))]
    for parent_name, attr in targets:
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, attr, Int8Linear.from_linear(getattr(parent, attr)))
    return len(targets)


def quantize_matching(module: nn.Module, matches) -> int:
    """Replace every nn.Linear, and every pointwise nn.Conv1d ([N, K, 1] kernels: the [N, K] matrix products
    they are), whose weight's name `matches(name)` accepts with an Int8Linear, each float weight released as its
    int8 copy is made; returns how many were replaced."""
    targets = [n for n, m in module.named_modules()
               if isinstance(m, (nn.Linear, nn.Conv1d)) and matches(n + ".weight")]
    for name in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = module.get_submodule(parent_name)
        layer = getattr(parent, attr)
        w = layer.weight.detach()
        if isinstance(layer, nn.Conv1d):
            if layer.kernel_size != (1,) or layer.groups != 1:
                raise ValueError(f"{name}: not a pointwise convolution")
            w = w[:, :, 0]
        setattr(parent, attr, Int8Linear(w, layer.bias))
    return len(targets)

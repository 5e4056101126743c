"""int8 linear layers: weights quantized once per output channel, activations per row at run time.

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
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import torch
from torch import nn

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


class Int8Linear(nn.Module):
    """y = x W^T + b with W int8 per output channel and x quantized per row (dynamic)."""

    def __init__(self, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                 quantized: Optional[tuple[torch.Tensor, torch.Tensor]] = None):
        super().__init__()
        if quantized is not None:  # int8 [N, K] and float32 [N] as they are (from_int8)
            q, scale = quantized
        else:
            w = weight.detach().to(torch.float32)
            scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127.0
            q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
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
        y = acc.to(torch.float32).mul_(sx).mul_(self.weight_scale)
        if self.bias is not None:
            y.add_(self.bias)
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

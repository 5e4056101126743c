"""int8 Whisper (`load_model(..., dtype="int8")`): int8 weights, float32 activations between layers.

- The encoder's linear layers become `transcribe.quant.Int8Linear` (weights per output channel,
  each activation row quantized on its own, `torch._int_mm`: fast for its 1500-row inputs).
- The decoder's linear layers and its logit projection (the tied token embedding, 51864 x 384 for
  tiny.en: the largest read of a decoding step) become `RowInt8Linear`: the same int8 weights per
  output channel, multiplied by fbgemm's dynamic int8 kernel (`quantized.linear_dynamic`), which
  for the decoder's 1 to 10 rows is 2-3x faster than `_int_mm` (1.1 ms against 3.1 ms for the
  logits of one row on one core) and 5x faster than the float32 projection.
- The token embedding's lookup reads a float16 copy of the table (exact for float16 checkpoints;
  the int8 rows times their scale cost 2 edits of the dev set's 737 words: WER 10.45 against 10.18).
- On a CPU with native bfloat16 (AVX512-BF16 / AMX), attention runs in bfloat16 (the encoder's
  self-attention and the decoder's cross-attention, whose keys and values are then stored in
  bfloat16: half the bytes read per decoding step).
- Beams and best-of samples compute their common forced tokens once and share those keys and
  values (`KVCache.prefix`).

fbgemm quantizes its input with one scale for the whole call, which would make a row's result
depend on the other rows of the batch (other beams, other inputs). `RowInt8Linear` therefore
divides every row by its own largest magnitude and appends one fixed row holding -1 and +1: the
call's range is then always exactly [-1, 1], every row is quantized with the same fixed grid
(255 steps over its own [-absmax, absmax], as a symmetric per-row int8), and a row's output does
not depend on the rows it is batched with (bit for bit; tests/test_whisper_int8.py).

Where fbgemm is missing (a build without it, a GPU), the decoder falls back to `Int8Linear`.
Layer norms, the convolutions and the self-attention cache stay float32.

The choices were decided by measurement (benchmarks/README.md; dev WER of greedy decoding, 737
words, float32: 10.04 %). Measured and left out: the encoder's linear layers in float32 (slower;
WER 9.91), the decoder's self-attention cache in bfloat16 too (beam 5 25 % faster, but beam WER
10.72 against 9.23), weight-only int8 decoder layers with bfloat16 activations
(`torch._weight_int8pack_mm`: greedy 5 % faster, but WER 10.45 against 10.18).
"""
from __future__ import annotations

import functools
import warnings
from typing import Optional

import torch
from torch import nn

from ..cpu import features
from ..quant import Int8Linear
from .model import MultiHeadAttention, TextDecoder


def _quantize_rows(w: torch.Tensor, block: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """float [N, K] -> (int8 [N, K], float32 scale [N]): symmetric per row, absmax / 127. Done
    `block` rows at a time, so a large table (the token embedding) needs no float32 copy whole."""
    w = w.detach()
    q = torch.empty(w.shape, dtype=torch.int8, device=w.device)
    scale = torch.empty(w.shape[0], dtype=torch.float32, device=w.device)
    for i in range(0, w.shape[0], block):
        part = w[i : i + block].to(torch.float32)
        s = part.abs().amax(dim=1).clamp_min(1e-12) / 127.0
        q[i : i + block] = torch.round(part / s[:, None]).clamp_(-127, 127).to(torch.int8)
        scale[i : i + block] = s
    return q, scale


@functools.lru_cache(maxsize=None)
def _cpu_has_vnni() -> bool:
    """Whether the CPU multiplies u8 x s8 without the int16 saturation of AVX2's vpmaddubsw
    (AVX512-VNNI or AVX-VNNI); elsewhere fbgemm is asked for 7-bit activations (reduce_range)."""
    f = features()
    return f["avx512_vnni"] or f["avx_vnni"]


@functools.lru_cache(maxsize=None)
def fbgemm_available() -> bool:
    """Whether this PyTorch has the dynamic int8 linear kernel on the CPU (and it runs)."""
    try:
        w = torch.ones(8, 8)
        layer = RowInt8Linear(w, None)
        out = layer(torch.ones(2, 8))
        return bool(torch.allclose(out, torch.full((2, 8), 8.0), rtol=0.02))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


class RowInt8Linear(nn.Module):
    """y = x W^T + b, W int8 per output channel, each row of x quantized on its own grid (see the
    module's text), through fbgemm's dynamic int8 linear. CPU only."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor], q: Optional[torch.Tensor] = None,
                 scale: Optional[torch.Tensor] = None):
        super().__init__()
        if q is None:
            q, scale = _quantize_rows(weight)
        self.out_features, self.in_features = q.shape
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's deprecation notice for quantized tensors
            qw = torch._make_per_channel_quantized_tensor(q, scale.double(), torch.zeros(q.shape[0], dtype=torch.long), 0)
            self._packed = torch.ops.quantized.linear_prepack(qw, None)
        self.register_buffer("bias", None if bias is None else bias.detach().to(torch.float32).clone())
        anchor = torch.zeros(1, self.in_features)
        anchor[0, 0], anchor[0, -1] = -1.0, 1.0
        if self.in_features == 1:
            anchor[0, 0] = 1.0  # (degenerate: the range is then [0, 1] and negative rows clip)
        self.register_buffer("anchor", anchor)
        self.reduce_range = not _cpu_has_vnni()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).to(torch.float32)
        m = x2.shape[0]
        s = x2.abs().amax(dim=1, keepdim=True).clamp_min_(1e-30)
        xs = torch.cat([x2 / s, self.anchor])
        y = torch.ops.quantized.linear_dynamic(xs, self._packed, self.reduce_range)[:m]
        y = y.mul_(s) if self.bias is None else torch.addcmul(self.bias, y, s)
        return y.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Int8Embedding(nn.Module):
    """A token table stored as int8 rows with one scale each: the lookup gives q[id] * scale[id]
    (float32), and `project(x)` the logits x @ table^T through the same int8 weights."""

    def __init__(self, weight: torch.Tensor, fast: bool, float_lookup: bool = False):
        super().__init__()
        q, scale = _quantize_rows(weight)
        self.num_embeddings, self.embedding_dim = q.shape
        self.register_buffer("q", q)
        self.register_buffer("scale", scale)
        # float_lookup: the lookup reads a float16 copy of the table instead (exact for float16
        # checkpoints; 2 bytes a value more)
        self.register_buffer("table", weight.detach().to(torch.float16).clone() if float_lookup else None)
        # The projection: fbgemm's packed copy of the table, or Int8Linear over the same rows.
        if fast:
            self.proj = RowInt8Linear(None, None, q, scale)
        else:  # Int8Linear keeps its own transposed int8 copy of the same rows
            self.proj = Int8Linear(torch.zeros(1, 1), None)
            self.proj.in_features, self.proj.out_features = self.embedding_dim, self.num_embeddings
            self.proj.weight_t, self.proj.weight_scale = q.t(), scale

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.table is not None:
            return self.table[tokens].to(torch.float32)
        return self.q[tokens].to(torch.float32) * self.scale[tokens].unsqueeze(-1)

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized table (float32; made on each access: for word alignment and tests)."""
        return self.q.to(torch.float32) * self.scale[:, None]

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def cpu_has_bf16() -> bool:
    """Whether the CPU computes bfloat16 natively (AVX512-BF16 or AMX): attention then runs in
    bfloat16 in the int8 form (2-3x faster there; elsewhere bfloat16 is emulated and slower)."""
    f = features()
    return f["avx512_bf16"] or f["amx_bf16"]


class Int8Attention(MultiHeadAttention):
    """The int8 form of an attention module (a float one's class is switched to it, its weights
    kept): `qkv`, when set, is self-attention's fused query-key-value projection (then `query`,
    `key` and `value` are gone); `compute_dtype`, when set, is the dtype attention itself runs in
    (bfloat16 where the CPU has it), keys and values from `kv` then stored in it."""

    qkv: Optional[nn.Module]
    compute_dtype: Optional[torch.dtype]

    @classmethod
    def adopt(cls, attn: MultiHeadAttention) -> "Int8Attention":
        attn.__class__ = cls
        attn.qkv = None
        attn.compute_dtype = None
        return attn

    def kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.compute_dtype is not None:  # stored contiguous: read every step (cross-attention)
            dt = self.compute_dtype
            return (self.split(self.key(x)).to(dt).contiguous(), self.split(self.value(x)).to(dt).contiguous())
        return super().kv(x)

    def project(self, x: torch.Tensor) -> tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
        if self.qkv is None:
            return super().project(x)
        b, t, c = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.n_head, c // self.n_head).permute(2, 0, 3, 1, 4)
        if self.compute_dtype is not None:  # keys and values are kept (cached) in that dtype
            qkv = qkv.to(self.compute_dtype)
        return qkv[0], qkv[1], qkv[2]

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal_from: Optional[int],
               mask: Optional[torch.Tensor] = None, q: Optional[torch.Tensor] = None) -> torch.Tensor:
        if q is None:
            q = self.split(self.query(x))
        if self.compute_dtype is not None:
            q, k, v = q.to(self.compute_dtype), k.to(self.compute_dtype), v.to(self.compute_dtype)
        return super().attend(x, k, v, causal_from, mask, q=q)


class Int8TextDecoder(TextDecoder):
    """The int8 form of the decoder (a float one's class is switched to it): the logits come from
    the `Int8Embedding`'s int8 projection, and with attention in bfloat16 the activations between
    layers stay in the position table's dtype (float32)."""

    def activation_dtype(self, cross: list) -> torch.dtype:
        if self.blocks[0].cross_attn.compute_dtype is not None:
            return self.positional_embedding.dtype
        return super().activation_dtype(cross)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.token_embedding.project(x).float()


def _fused(attn, make) -> nn.Module:
    w = torch.cat([attn.query.weight, attn.key.weight, attn.value.weight]).detach().float()
    b = torch.cat([attn.query.bias, torch.zeros_like(attn.query.bias), attn.value.bias]).detach().float()
    return make(w, b)


def quantize_whisper(model: nn.Module) -> dict:
    """Turn a float32 Whisper model into its int8 form, in place (on its device: fbgemm's kernel on
    a CPU, `Int8Linear` elsewhere): its attention modules become `Int8Attention`, its decoder an
    `Int8TextDecoder`, its linear layers int8 ones; returns what was done: {"linears": n, "fast": bool,
    "attention": dtype}."""
    cpu = model.decoder.positional_embedding.device.type == "cpu"
    fast = cpu and fbgemm_available()
    bf16 = cpu and cpu_has_bf16()
    row = RowInt8Linear if fast else Int8Linear
    model.decoder.__class__ = Int8TextDecoder
    for part in (model.encoder, model.decoder):
        for blk in part.blocks:
            for attn in (blk.attn, blk.cross_attn):
                if attn is not None:
                    Int8Attention.adopt(attn)
    # self-attention's queries, keys and values as one projection
    for part in (model.encoder, model.decoder):
        for blk in part.blocks:
            blk.attn.qkv = _fused(blk.attn, row)
            blk.attn.query = blk.attn.key = blk.attn.value = None
    n = 0
    for part in (model.encoder, model.decoder):
        for _, child in list(part.named_modules()):
            for attr, sub in list(child.named_children()):
                if isinstance(sub, nn.Linear):
                    setattr(child, attr, row(sub.weight.detach().float(), sub.bias))
                    n += 1
    if bf16:  # attention in bfloat16 where the CPU has it (the self-attention cache stays float32)
        for blk in model.encoder.blocks:
            blk.attn.compute_dtype = torch.bfloat16
        for blk in model.decoder.blocks:
            blk.cross_attn.compute_dtype = torch.bfloat16
    # beams (and samples) share the keys and values of their forced tokens
    model.decoder.shared_prefix = True
    emb = model.decoder.token_embedding
    model.decoder.token_embedding = Int8Embedding(emb.weight.detach(), fast, float_lookup=True)
    return {"linears": n, "fast": fast, "attention": torch.bfloat16 if bf16 else torch.float32}


def widen_floats(model: nn.Module) -> None:
    """Every float16 parameter and buffer to float32 (layer norms, convolutions, position tables of
    a model read in float16), except the float16 lookup table of an `Int8Embedding` (exact as it
    is, and half the bytes)."""
    for module in model.modules():
        for store in (module._parameters, module._buffers):
            for name, t in list(store.items()):
                if t is None or t.dtype != torch.float16:  # (bfloat16 scales are meant)
                    continue
                if isinstance(module, Int8Embedding) and name == "table":
                    continue
                wide = t.detach().to(torch.float32)
                store[name] = nn.Parameter(wide, requires_grad=False) if isinstance(t, nn.Parameter) else wide

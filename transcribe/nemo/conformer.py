"""FastConformer encoder (NeMo `ConformerEncoder`), inference only.

Parameter names follow NeMo's state dict so a checkpoint loads without renaming. Every
hyperparameter comes from the `encoder` section of `model_config.yaml`, parsed and checked as an
`EncoderConfig` (parakeet/config.py).

Shapes: features [B, n_mels, T] -> encoder output [B, d_model, T'] with lengths [B].
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..quant import Int8Linear, QuantLinear, quantize_linears
from .config import EncoderConfig
from .subsampling import ConvSubsampling

# `ConformerEncoder.forward`'s default: the attention the model was loaded with.
MODEL_DEFAULT = object()

# NeMo's masking constant for attention scores.
_MASK_VALUE = -10000.0


# --------------------------------------------------------------------------------------------------
# Positional encoding and attention
# --------------------------------------------------------------------------------------------------


def sinusoid_table(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """Sinusoidal encodings for the given (float32) positions, as NeMo computes them: [P, d_model]."""
    dev = positions.device
    inv = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32, device=dev) * -(math.log(10000.0) / d_model))
    pe = torch.zeros(positions.shape[0], d_model, device=dev)
    pe[:, 0::2] = torch.sin(positions[:, None] * inv)
    pe[:, 1::2] = torch.cos(positions[:, None] * inv)
    return pe


class RelPositionalEncoding(nn.Module):
    """Encodings for relative positions T-1 ... -(T-1), grown on demand and cached."""

    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__()
        self.d_model = d_model
        # The table is computed on the CPU even while a model is built on the meta device (meta
        # ops run through torch's Python decompositions and import torch._dynamo: over a second).
        with torch.device("cpu"):
            self.register_buffer("pe", torch.zeros(0, d_model), persistent=False)
            self._extend(max_len)

    def reset(self, max_len: int = 5000) -> None:
        """Recompute the table on the CPU (after a build on the meta device)."""
        self.pe = torch.zeros(0, self.d_model, device="cpu")
        self._extend(max_len)

    def _extend(self, length: int) -> None:
        if self.pe.shape[0] >= 2 * length - 1:
            return
        pos = torch.arange(length - 1, -length, -1, dtype=torch.float32)
        self.pe = sinusoid_table(pos, self.d_model).to(self.pe.device)

    def forward(self, length: int, dtype: torch.dtype) -> torch.Tensor:
        self._extend(length)
        center = self.pe.shape[0] // 2
        return self.pe[center - length + 1 : center + length].to(dtype)

    def local(self, left: int, right: int, dtype: torch.dtype) -> torch.Tensor:
        """Encodings for relative positions left ... -right (local attention)."""
        pos = torch.arange(left, -right - 1, -1, dtype=torch.float32)
        return sinusoid_table(pos, self.d_model).to(device=self.pe.device, dtype=dtype)


class RelPositionMultiHeadAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions (pos_bias_u / pos_bias_v).

    Full context, a banded context (att_context_size), or NeMo's local attention
    (`rel_pos_local_attn`) computed block by block so memory grows linearly with length.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True):
        super().__init__()
        self.h = n_heads
        self.d_k = d_model // n_heads
        self.linear_q = nn.Linear(d_model, d_model, bias=bias)
        self.linear_k = nn.Linear(d_model, d_model, bias=bias)
        self.linear_v = nn.Linear(d_model, d_model, bias=bias)
        self.linear_out = nn.Linear(d_model, d_model, bias=bias)
        self.linear_pos = nn.Linear(d_model, d_model, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(n_heads, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.zeros(n_heads, self.d_k))
        # Query rows per block in the blocked paths, and the most position scores one call holds.
        self.block = 256
        self.score_elements = 1 << 21

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.d_k).transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        pos_emb: torch.Tensor,
        pad_mask: torch.Tensor,
        att_mask: Optional[torch.Tensor] = None,
        valid: Optional[Sequence[int]] = None,
    ) -> torch.Tensor:
        """x [B, T, D]; pos_emb [2T-1, D]; pad_mask [B, T] True at padding (a tail: frames at and past
        each length); att_mask [T, T] True = blocked; valid: each item's length (from pad_mask when None).

        Each item attends over its valid frames only: a padded key's score is NeMo's -10000, whose
        exp underflows to exactly 0 in the softmax, so leaving it out is the same sum, and padded
        query rows give 0, as NeMo's masked attention weights do. So no padding mask is built, and
        the scores run in blocks of `block` query rows: memory stays linear in T."""
        b, t, _ = x.shape
        if valid is None:
            valid = (~pad_mask).sum(dim=1).tolist()
        scale = 1.0 / math.sqrt(self.d_k)
        q = self.linear_q(x).view(b, t, self.h, self.d_k)
        qu = (q + self.pos_bias_u).transpose(1, 2).contiguous()
        qv = ((q + self.pos_bias_v) * scale).transpose(1, 2).contiguous()
        k = self.linear_k(x).view(b, t, self.h, self.d_k).transpose(1, 2).contiguous()
        v = self.linear_v(x).view(b, t, self.h, self.d_k).transpose(1, 2).contiguous()
        # Position projections as [h, d_k, 2T-1] (columns: relative positions T-1 ... -(T-1)),
        # computed transposed so that no copy is needed: W_pos @ pos_emb^T.
        if isinstance(self.linear_pos, QuantLinear):
            pt = self.linear_pos.forward_transposed(pos_emb).view(self.h, self.d_k, -1)
        else:
            pt = torch.matmul(self.linear_pos.weight, pos_emb.t()).view(self.h, self.d_k, -1)
        if b == 1 and valid[0] == t:
            out = self._attend(qu[0], qv[0], k[0], v[0], pt, t, att_mask)[None]
        else:
            out = q.new_zeros(b, self.h, t, self.d_k)
            for i, n in enumerate(valid):
                if n > 0:
                    m = None if att_mask is None else att_mask[:n, :n]
                    out[i, :, :n] = self._attend(qu[i, :, :n], qv[i, :, :n], k[i, :, :n], v[i, :, :n], pt, t, m)
        return self.linear_out(out.transpose(1, 2).reshape(b, t, self.h * self.d_k))

    def _attend(self, qu, qv, k, v, pt, t_table: int, mask: Optional[torch.Tensor]) -> torch.Tensor:
        """One item's attention of its n valid frames over themselves ([h, n, d_k] each), in blocks of
        query rows; pt holds the position projections of the table for length t_table; mask
        [n, n] True = blocked (NeMo's -10000) or None. qv carries the 1/sqrt(d_k) scale, qu not."""
        n = k.shape[1]
        blk = self.block if n > 2 * self.block else n
        # Heads per call: as many as keep one block's position scores (heads x rows x (n + rows - 1))
        # within `score_elements`, so that long inputs work on cache-sized pieces.
        hp = max(1, min(self.h, self.score_elements // (blk * (n + blk - 1))))
        if blk == n and hp == self.h:
            bd = _rel_shift_block(torch.bmm(qv, pt[:, :, t_table - n : t_table + n - 1])[None], n)
            if mask is not None:
                bd = bd.masked_fill(mask, _MASK_VALUE)
            return F.scaled_dot_product_attention(qu[None], k[None], v[None], attn_mask=bd)[0]
        out = torch.empty_like(qu)
        for h0 in range(0, self.h, hp):
            hs = slice(h0, h0 + hp)
            for s in range(0, n, blk):
                e = min(n, s + blk)
                # Relative positions i - j for queries s..e-1 and keys 0..n-1 run from e-1 down to
                # s-(n-1): columns (t_table-1) - (e-1) ... (t_table-1) - (s-n+1) of the table.
                bd = _rel_shift_block(torch.bmm(qv[hs, s:e], pt[hs, :, t_table - e : t_table - s + n - 1])[None], n)
                if mask is not None:
                    bd = bd.masked_fill(mask[s:e], _MASK_VALUE)
                out[hs, s:e] = F.scaled_dot_product_attention(qu[None, hs, s:e], k[None, hs], v[None, hs],
                                                              attn_mask=bd)[0]
        return out

    def forward_local(
        self, x: torch.Tensor, pos_local: torch.Tensor, pad_mask: torch.Tensor, left: int, right: int
    ) -> torch.Tensor:
        """NeMo's `rel_pos_local_attn`: each query sees keys i-left ... i+right.

        pos_local [left+right+1, D] holds relative positions left ... -right.
        """
        b, t, _ = x.shape
        w = max(left, right)
        q = self._heads(self.linear_q(x))
        k = self._heads(self.linear_k(x))
        v = self._heads(self.linear_v(x))
        p = self.linear_pos(pos_local).view(-1, self.h, self.d_k).transpose(0, 1)  # [h, l+r+1, d_k]
        qu = q + self.pos_bias_u[None, :, None, :]
        qv = q + self.pos_bias_v[None, :, None, :]
        scale = 1.0 / math.sqrt(self.d_k)
        # Keys padded by w on each side; out-of-range keys get -inf, padded keys the mask value.
        kp = F.pad(k, (0, 0, w, w))
        vp = F.pad(v, (0, 0, w, w))
        keyflag = F.pad(pad_mask.to(torch.int8), (w, w), value=2)  # 0 valid, 1 padding, 2 outside
        offs = torch.arange(2 * w + 1, device=x.device)
        # Columns c <-> key offset c - w. NeMo adds the position term to the first `left` columns and
        # the last `right + 1` columns, and blocks columns outside [w-left, w+right].
        col_mask = (offs < w - left) | (offs > w + right)
        out = torch.empty_like(q)
        blk = self.block
        for s in range(0, t, blk):
            e = min(t, s + blk)
            n = e - s
            kb = kp[:, :, s : e + 2 * w]  # keys s-w ... e-1+w
            vb = vp[:, :, s : e + 2 * w]
            ac = torch.matmul(qu[:, :, s:e], kb.transpose(-2, -1))  # [B, h, n, n + 2w]
            idx = torch.arange(n, device=x.device)[:, None] + offs[None, :]  # [n, 2w+1]
            diag = torch.gather(ac, -1, idx.expand(b, self.h, n, 2 * w + 1))
            bd = torch.matmul(qv[:, :, s:e], p.transpose(-2, -1))  # [B, h, n, l+r+1]
            diag = diag.clone()
            if left > 0:
                diag[..., :left] += bd[..., :left]
            diag[..., 2 * w + 1 - (right + 1) :] += bd[..., left:]
            scores = diag * scale
            flags = keyflag[:, s : e + 2 * w][:, idx]  # [B, n, 2w+1]
            scores = scores.masked_fill(col_mask, _MASK_VALUE)
            scores = scores.masked_fill((flags == 1)[:, None], _MASK_VALUE)
            scores = scores.masked_fill((flags == 2)[:, None], float("-inf"))
            attn = torch.softmax(scores, dim=-1)
            full = torch.zeros(b, self.h, n, n + 2 * w, dtype=attn.dtype, device=x.device)
            full.scatter_(-1, idx.expand(b, self.h, n, 2 * w + 1), attn)
            out[:, :, s:e] = torch.matmul(full, vb)
        out = out.masked_fill(pad_mask[:, None, :, None], 0.0)
        return self.linear_out(out.transpose(1, 2).reshape(b, t, self.h * self.d_k))


def _rel_shift_block(x: torch.Tensor, t: int) -> torch.Tensor:
    """Scores [B, h, n, t+n-1] against positions (s+n-1) ... -(t-1-s), row r being query s+r, as a
    view [B, h, n, t] indexed by key j: element (r, j) is column n-1-r+j (position s+r-j)."""
    x = x.contiguous()
    b, h, n, cols = x.shape
    return x.as_strided((b, h, n, t), (h * n * cols, n * cols, cols - 1, 1), x.storage_offset() + n - 1)


# --------------------------------------------------------------------------------------------------
# Conformer layer
# --------------------------------------------------------------------------------------------------


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, bias: bool = True):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(F.silu(self.linear1(x), inplace=True))


class ConvModule(nn.Module):
    """Pointwise -> GLU -> depthwise -> BatchNorm or LayerNorm -> swish -> pointwise."""

    def __init__(
        self,
        d_model: int,
        kernel_size: int,
        norm: str = "batch_norm",
        context: Optional[Sequence[int]] = None,
        bias: bool = True,
    ):
        super().__init__()
        if context is None:
            context = ((kernel_size - 1) // 2, (kernel_size - 1) // 2)
        self.context = (int(context[0]), int(context[1]))
        self.pointwise_conv1 = nn.Conv1d(d_model, 2 * d_model, 1, bias=bias)
        self.depthwise_conv = nn.Conv1d(d_model, d_model, kernel_size, groups=d_model, bias=bias)
        if norm == "batch_norm":
            self.batch_norm: nn.Module = nn.BatchNorm1d(d_model)
        elif norm == "layer_norm":
            # NeMo stores this LayerNorm under the name `batch_norm`.
            self.batch_norm = nn.LayerNorm(d_model)
        else:
            raise ValueError(f"encoder.conv_norm_type = {norm!r} is not implemented (batch_norm, layer_norm)")
        self.norm_kind = norm
        self.pointwise_conv2 = nn.Conv1d(d_model, d_model, 1, bias=bias)

    def fold_batch_norm(self) -> None:
        """Fold an inference BatchNorm into the depthwise convolution."""
        if not isinstance(self.batch_norm, nn.BatchNorm1d):
            return
        bn = self.batch_norm
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        conv = self.depthwise_conv
        with torch.no_grad():
            conv.weight.mul_(scale[:, None, None])
            b = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
            new_b = (b - bn.running_mean) * scale + bn.bias
            if conv.bias is None:
                conv.bias = nn.Parameter(new_b)
            else:
                conv.bias.copy_(new_b)
        self.batch_norm = nn.Identity()
        self.norm_kind = "folded"

    def pointwise(self, conv: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """A pointwise convolution as a matrix product over the last dimension of x [..., D]."""
        if isinstance(conv, QuantLinear):
            return conv(x)
        w = conv.weight
        return F.linear(x, w.view(w.shape[0], w.shape[1]), conv.bias)

    def quantize_int8(self) -> None:
        """The pointwise convolutions as int8 matrix products (transcribe/quant.py)."""
        for name in ("pointwise_conv1", "pointwise_conv2"):
            conv = getattr(self, name)
            if not isinstance(conv, Int8Linear):
                w = conv.weight
                setattr(self, name, Int8Linear(w.view(w.shape[0], w.shape[1]), conv.bias))

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor, valid: Optional[Sequence[int]] = None) -> torch.Tensor:
        """x [B, T, D]. The pointwise convolutions run as matrix products in [B, T, D] layout.
        valid: each item's length, when pad_mask is the tail past it (then only the tails are zeroed)."""
        x = F.glu(self.pointwise(self.pointwise_conv1, x), dim=-1)
        if valid is not None:
            for i, n in enumerate(valid):
                if n < x.shape[1]:
                    x[i, n:] = 0.0
        elif bool(pad_mask.any()):
            x = x.masked_fill(pad_mask[:, :, None], 0.0)
        x = x.transpose(1, 2)
        left, right = self.context
        if left == right:
            x = F.conv1d(x, self.depthwise_conv.weight, self.depthwise_conv.bias, padding=left, groups=x.shape[1])
        else:
            x = self.depthwise_conv(F.pad(x, (left, right)))
        if self.norm_kind == "layer_norm":
            x = self.batch_norm(x.transpose(1, 2))
        else:
            x = self.batch_norm(x).transpose(1, 2)
        return self.pointwise(self.pointwise_conv2, F.silu(x))


class ConformerLayer(nn.Module):
    def __init__(self, d_model, d_ff, n_heads, conv_kernel, conv_norm, conv_context, bias=True):
        super().__init__()
        self.norm_feed_forward1 = nn.LayerNorm(d_model)
        self.feed_forward1 = FeedForward(d_model, d_ff, bias)
        self.norm_conv = nn.LayerNorm(d_model)
        self.conv = ConvModule(d_model, conv_kernel, conv_norm, conv_context, bias)
        self.norm_self_att = nn.LayerNorm(d_model)
        self.self_attn = RelPositionMultiHeadAttention(d_model, n_heads, bias)
        self.norm_feed_forward2 = nn.LayerNorm(d_model)
        self.feed_forward2 = FeedForward(d_model, d_ff, bias)
        self.norm_out = nn.LayerNorm(d_model)

    def forward(self, x, pos_emb, pad_mask, att_mask=None, local: Optional[tuple[int, int]] = None,
                valid: Optional[Sequence[int]] = None):
        x = torch.add(x, self.feed_forward1(self.norm_feed_forward1(x)), alpha=0.5)  # = x + 0.5 * ff, one pass
        h = self.norm_self_att(x)
        if local is None:
            x = x + self.self_attn(h, pos_emb, pad_mask, att_mask, valid)
        else:
            x = x + self.self_attn.forward_local(h, pos_emb, pad_mask, local[0], local[1])
        x = x + self.conv(self.norm_conv(x), pad_mask, valid)
        x = torch.add(x, self.feed_forward2(self.norm_feed_forward2(x)), alpha=0.5)
        return self.norm_out(x)


# --------------------------------------------------------------------------------------------------
# Encoder
# --------------------------------------------------------------------------------------------------


class ConformerEncoder(nn.Module):
    """NeMo FastConformer encoder, built from an `EncoderConfig` (the `encoder` section). Its
    `self_attention_model` selects full or local (`rel_pos_local_attn`) context."""

    def __init__(self, config: EncoderConfig):
        # `config` holds NeMo's settings, checked (nemo/config.py); settings that do not change
        # inference are dropped (`config.HARMLESS_KEYS`), any other is an
        # error there.
        super().__init__()
        self.config = config
        d_model = config.d_model
        self.d_model = d_model
        self.subsampling_factor = config.subsampling_factor
        self.xscale = math.sqrt(d_model) if config.xscaling else None
        self.pre_encode = ConvSubsampling(
            config.feat_in, d_model, config.subsampling_factor, config.conv_channels, config.subsampling,
            config.causal_downsampling,
        )
        self.pos_enc = RelPositionalEncoding(d_model, config.pos_emb_max_len)
        self.layers = nn.ModuleList(
            ConformerLayer(
                d_model, d_model * config.ff_expansion_factor, config.n_heads, config.conv_kernel_size,
                config.conv_norm_type, config.conv_context, config.use_bias,
            )
            for _ in range(config.n_layers)
        )
        # Context: a list of [left, right] pairs (multi-lookahead streaming models): the first is the
        # default, every one can be chosen per call (`att_context_size=` of forward, streaming).
        self.att_context_sizes = config.att_context_sizes
        self.att_context_size = list(self.att_context_sizes[0])
        self.causal_downsampling = bool(config.causal_downsampling)
        self.att_context_style = config.att_context_style
        self.self_attention_model = config.self_attention_model
        # Local-attention context used when self_attention_model is rel_pos_local_attn.
        self.local_context = tuple(self.att_context_size) if self.self_attention_model == "rel_pos_local_attn" else None

    def set_attention(self, mode: str, context: Sequence[int] = (128, 128)) -> None:
        """The model's own attention (a setting of the loaded model, as its config gives it): 'full'
        (rel_pos) or 'local' (rel_pos_local_attn with [left, right] context). A call chooses its own
        with `forward(..., local_context=...)` without touching this."""
        if mode == "full":
            self.local_context = None
        elif mode == "local":
            self.local_context = (int(context[0]), int(context[1]))
        else:
            raise ValueError(f"attention must be 'full' or 'local', got {mode!r}")

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        return self.pre_encode.output_lengths(lengths)

    def _att_mask(self, t: int, device, context: Optional[Sequence[int]] = None) -> Optional[torch.Tensor]:
        left, right = self.att_context_size if context is None else context
        if left < 0 and right < 0:
            return None
        i = torch.arange(t, device=device)
        if self.att_context_style == "regular":
            diff = i[None, :] - i[:, None]  # key - query
            allowed = torch.ones(t, t, dtype=torch.bool, device=device)
            if left >= 0:
                allowed &= diff >= -left
            if right >= 0:
                allowed &= diff <= right
        else:
            chunk = right + 1
            left_chunks = left // chunk if left >= 0 else 10000
            c = i // chunk
            d = c[:, None] - c[None, :]
            allowed = (d >= 0) & (d <= left_chunks)
        return ~allowed

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor, local_context=MODEL_DEFAULT,
                att_context_size: Optional[Sequence[int]] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """feats [B, n_mels, T], lengths [B] -> ([B, d_model, T'], lengths [B]).

        local_context: this call's attention: None (full), a (left, right) context (local), or the
        model's own setting (`self.local_context`) by default. A per-call argument, so calls with
        different attention can share one model. att_context_size: one of `att_context_sizes` for
        this call (a multi-lookahead model), the default (the first) when None."""
        x, lengths = self.pre_encode(feats.transpose(1, 2), lengths)
        return self.layers_forward(x, lengths, local_context, att_context_size)

    def layers_forward(self, x: torch.Tensor, lengths: torch.Tensor, local_context=MODEL_DEFAULT,
                       att_context_size: Optional[Sequence[int]] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The conformer layers on the subsampling's output x [B, T, d_model] (NeMo's `bypass_pre_encode`:
        scaled, positions, layers) -> ([B, d_model, T], lengths [B])."""
        b, t, _ = x.shape
        if self.xscale is not None:
            x = x * self.xscale
        pad_mask = torch.arange(t, device=x.device)[None, :] >= lengths[:, None]
        local = self.local_context if local_context is MODEL_DEFAULT else local_context
        if local is None:
            pos = self.pos_enc(t, x.dtype)
            att_mask = self._att_mask(t, x.device, att_context_size)
        else:
            pos = self.pos_enc.local(local[0], local[1], x.dtype)
            att_mask = None
        valid = [min(int(n), t) for n in lengths.tolist()]
        for layer in self.layers:
            x = layer(x, pos, pad_mask, att_mask, local, valid)
        return x.transpose(1, 2), lengths

    def fold_batch_norm(self) -> None:
        for layer in self.layers:
            layer.conv.fold_batch_norm()

    def quantize_int8(self) -> None:
        """Every linear layer and pointwise convolution of the conformer layers, and the
        subsampling's output projection, as int8 matrix products (transcribe/quant.py); the
        subsampling convolutions, norms and the attention's own products stay in floating point."""
        quantize_linears(self)
        for layer in self.layers:
            layer.conv.quantize_int8()

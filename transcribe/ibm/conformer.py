"""IBM Granite Speech's conformer encoder (shared by the NAR family, `granite/`, and the autoregressive one,
`granite_speech/`), its character-CTC self-conditioning and, for the NAR models, its BPE-CTC head.

Parameter names follow IBM's checkpoint (`encoder.layers.{i}.{ff1,attn,conv,ff2,post_norm}`,
`encoder.out`, `encoder.out_mid`, `encoder.out_bpe`), so its tensors load without renaming.

A block: x + ff1/2, + block-local attention, + convolution module, + ff2/2, then LayerNorm.
Attention runs within blocks of `context_size` frames (no attention across blocks) with Shaw's
relative positions: a learned vector per clamped distance, dotted with the query and added to the
scores. The convolution module: LayerNorm, pointwise up (2x) and GLU, depthwise convolution,
BatchNorm (folded into the depthwise convolution at load), SiLU, pointwise down. The pointwise
convolutions run as matrix products over the [B, T, D] layout, so an int8 model (GraniteNAR.quantize_int8)
runs them as Int8Linear like the other linear layers.

Padding is masked (IBM's code does not): a frame past an input's length is never a key of a real
frame, and it is zero where the depthwise convolution and the pooling read it, exactly as the
single input's own zero padding. So an input's result does not depend on what it is batched with.

This is not Parakeet's conformer: no subsampling, different relative positions (Shaw's table vs
Transformer-XL's), block-local attention, GLU/BatchNorm ordering and pre/post norms differ; only
the idea is shared, so the code is not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..quant import QuantLinear
from .config import EncoderConfig


def compute_dtype(layer: nn.Module) -> torch.dtype:
    """The dtype a linear layer computes in: its weight's, or float32 for a quantized one (Int8Linear,
    Q8Linear: float32 in and out, the rest of such a model is float32)."""
    if isinstance(layer, QuantLinear):
        return torch.float32
    return layer.weight.dtype


def pointwise(conv: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A pointwise convolution (nn.Conv1d [N, K, 1], or its quantized layer) as a matrix product over
    the last dimension of x [..., K]."""
    if isinstance(conv, QuantLinear):
        return conv(x)
    return F.linear(x, conv.weight[:, :, 0], conv.bias)


class FeedForward(nn.Module):
    def __init__(self, dim: int, mult: int):
        super().__init__()
        self.pre_norm = nn.LayerNorm(dim)
        self.up_proj = nn.Linear(dim, dim * mult)
        self.down_proj = nn.Linear(dim * mult, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.up_proj(self.pre_norm(x))))


class BlockAttention(nn.Module):
    """Multi-head attention within blocks of `context_size` frames, with Shaw's relative positions."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        inner = cfg.num_heads * cfg.dim_head
        self.heads, self.dim_head, self.block = cfg.num_heads, cfg.dim_head, cfg.context_size
        self.pre_norm = nn.LayerNorm(cfg.hidden_dim)
        self.to_q = nn.Linear(cfg.hidden_dim, inner, bias=False)
        self.to_kv = nn.Linear(cfg.hidden_dim, 2 * inner, bias=False)
        self.to_out = nn.Linear(inner, cfg.hidden_dim)
        self.rel_pos_emb = nn.Embedding(2 * cfg.max_pos_emb + 1, cfg.dim_head)
        c = cfg.context_size
        pos = torch.arange(c, device="cpu")
        # distance (query - key), clamped to the block, as a row of the table
        self.register_buffer("dists", (pos[:, None] - pos[None, :]).clamp(-c, c) + cfg.max_pos_emb, persistent=False)

    def forward(self, x: torch.Tensor, key_bias: Optional[torch.Tensor]) -> torch.Tensor:
        """x [B, T, D]; key_bias [B, nb, 1, 1, c] (0 or a large negative) or None (no padding)."""
        b, t, _ = x.shape
        c, h = self.block, self.heads
        x = self.pre_norm(x)
        pad = (-t) % c
        if pad:
            x = F.pad(x, (0, 0, 0, pad))
        nb = (t + pad) // c
        q = self.to_q(x).view(b, nb, c, h, self.dim_head).transpose(2, 3)  # [B, nb, H, c, d]
        k, v = self.to_kv(x).view(b, nb, c, 2, h, self.dim_head).permute(3, 0, 1, 4, 2, 5)
        scale = self.dim_head ** -0.5
        rel = self.rel_pos_emb.weight[self.dists]  # [c, c, d]: query c, key r
        # Shaw's term q_c . rel[c, r], computed as a batched matmul over the query position c.
        qc = q.permute(3, 0, 1, 2, 4).reshape(c, b * nb * h, self.dim_head)
        pos = torch.bmm(qc, rel.transpose(1, 2)).view(c, b, nb, h, c).permute(1, 2, 3, 0, 4) * scale
        if key_bias is not None:
            pos = pos + key_bias
        # blocks folded into the batch: 4-D inputs take PyTorch's fused CPU kernel (5-D ones fall back
        # to its math path, with float32 scores and copies: 145 MiB a call at 200-frame blocks)
        d = self.dim_head
        out = F.scaled_dot_product_attention(q.reshape(b * nb, h, c, d), k.reshape(b * nb, h, c, d),
                                             v.reshape(b * nb, h, c, d), attn_mask=pos.to(q.dtype).reshape(b * nb, h, c, c),
                                             scale=scale)
        out = out.view(b, nb, h, c, d).transpose(2, 3).reshape(b, nb * c, h * d)[:, :t]
        return self.to_out(out)


class ConvModule(nn.Module):
    """stride 2: the depthwise convolution keeps every other frame (Granite Speech 5's subsampling blocks;
    ceil(T / 2) frames out, the caller keeps what it needs)."""

    def __init__(self, cfg: EncoderConfig, stride: int = 1):
        super().__init__()
        inner = cfg.hidden_dim * cfg.conv_expansion_factor
        self.inner = inner
        self.stride = stride
        self.norm = nn.LayerNorm(cfg.hidden_dim)
        self.up_conv = nn.Conv1d(cfg.hidden_dim, 2 * inner, 1)
        self.depth_conv = _DepthConv(inner, cfg.conv_kernel_size, stride)
        self.batch_norm = nn.BatchNorm1d(inner)
        self.down_conv = nn.Conv1d(inner, cfg.hidden_dim, 1)
        self.folded = False

    def fold_batch_norm(self) -> None:
        """Fold the (inference) BatchNorm into the depthwise convolution: one op less per block."""
        if self.folded:
            return
        bn, conv = self.batch_norm, self.depth_conv.conv
        with torch.no_grad():
            scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
            weight = conv.weight * scale[:, None, None]
            bias = bn.bias - bn.running_mean * scale
        self.depth_conv.conv = nn.Conv1d(self.inner, self.inner, conv.kernel_size[0], groups=self.inner,
                                         padding=conv.padding[0], stride=self.stride, bias=True, device=weight.device,
                                         dtype=weight.dtype)
        self.depth_conv.conv.weight = nn.Parameter(weight, requires_grad=False)
        self.depth_conv.conv.bias = nn.Parameter(bias, requires_grad=False)
        self.batch_norm = nn.Identity()
        self.folded = True

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
        x = self.norm(x)
        x = pointwise(self.up_conv, x)
        x = F.glu(x, dim=-1)
        if valid is not None:
            x = x * valid  # padding reads as the zeros a lone input is padded with
        if self.folded:
            # On the frames-last layout as it is: a 2-D convolution over a [B, C, 1, T] view of the
            # [B, T, C] tensor reads it without the two transposed copies (same products and sums).
            conv = self.depth_conv.conv
            k = conv.kernel_size[0]
            x = F.conv2d(x.transpose(1, 2).unsqueeze(2), conv.weight.unsqueeze(2), conv.bias,
                         padding=(0, k // 2), stride=(1, self.stride), groups=self.inner).squeeze(2).transpose(1, 2)
            x = F.silu(x)
        else:
            x = self.batch_norm(self.depth_conv(x.transpose(1, 2)))
            x = F.silu(x).transpose(1, 2)
        return pointwise(self.down_conv, x)


class _DepthConv(nn.Module):
    def __init__(self, channels: int, kernel: int, stride: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel, groups=channels, padding=kernel // 2, stride=stride,
                              bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class ConformerBlock(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.ff1 = FeedForward(cfg.hidden_dim, cfg.feedforward_mult)
        self.attn = BlockAttention(cfg)
        self.conv = ConvModule(cfg)
        self.ff2 = FeedForward(cfg.hidden_dim, cfg.feedforward_mult)
        self.post_norm = nn.LayerNorm(cfg.hidden_dim)

    def forward(self, x, key_bias, valid):
        x = x + 0.5 * self.ff1(x)
        x = x + self.attn(x, key_bias)
        x = x + self.conv(x, valid)
        x = x + 0.5 * self.ff2(x)
        return self.post_norm(x)


def padding_masks(lengths: torch.Tensor, t: int, context: int, dtype: torch.dtype
                  ) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """The masks the blocks take for inputs of `lengths` frames padded to `t`: `valid` [B, T, 1] (1 on an
    input's frames, 0 past its length; None when no input is padded) and `key_bias` [B, nb, 1, 1, c] (0 on a
    real frame, a large negative on padding, the last block's included; None when nothing is padded)."""
    b = lengths.shape[0]
    neg = torch.finfo(dtype).min
    if bool((lengths < t).any()):
        frame = torch.arange(t, device=lengths.device)
        valid_b = frame[None, :] < lengths[:, None]  # [B, T]
        padded = valid_b if t % context == 0 else F.pad(valid_b, (0, (-t) % context))
        key_bias = torch.where(padded, 0.0, neg).to(dtype).view(b, -1, 1, 1, context)
        return valid_b[:, :, None].to(dtype), key_bias
    if t % context:
        # no input padded: only the zero padding of the last block is masked
        padded = torch.arange(t + (-t) % context, device=lengths.device) < t
        return None, torch.where(padded, 0.0, neg).to(dtype).view(1, -1, 1, 1, context)
    return None, None


@dataclass
class EncoderOutput:
    taps: list[torch.Tensor]  # the hidden states the projector reads, [B, T, D] each
    mid_logits: torch.Tensor  # char-CTC logits of the self-conditioning block [B, T, C]
    pooled: Optional[torch.Tensor]  # [B, ceil(T/w), D] (None without a BPE head)
    bpe_logits: Optional[torch.Tensor]  # [B, ceil(T/w), V] when asked (keep); the caller scans the head else
    blocks: Optional[list[torch.Tensor]] = None  # every block's own output (when asked)
    embedded: Optional[torch.Tensor] = None  # the input projection's output (when asked)


class GraniteEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig, tap_indices: list[int]):
        super().__init__()
        self.cfg = cfg
        self.input_linear = nn.Linear(cfg.input_dim, cfg.hidden_dim)
        self.layers = nn.ModuleList(ConformerBlock(cfg) for _ in range(cfg.num_layers))
        self.out = nn.Linear(cfg.hidden_dim, cfg.output_dim)
        self.out_mid = nn.Linear(cfg.output_dim, cfg.hidden_dim)
        self.out_bpe = nn.Linear(cfg.hidden_dim, cfg.bpe_output_dim) if cfg.bpe_output_dim else None
        n = cfg.num_layers
        self.tap_indices = [i if i >= 0 else n + 1 + i for i in tap_indices]

    def fold_batch_norm(self) -> None:
        for layer in self.layers:
            layer.conv.fold_batch_norm()

    def forward(self, features: torch.Tensor, lengths: torch.Tensor, keep: bool = False) -> EncoderOutput:
        """features [B, T, 160] (zeros past each length), lengths [B] (frames)."""
        cfg = self.cfg
        b, t, _ = features.shape
        dtype = compute_dtype(self.input_linear)
        x = self.input_linear(features.to(dtype))
        embedded = x if keep else None
        valid, key_bias = padding_masks(lengths, t, cfg.context_size, dtype)
        states = {0: x} if 0 in self.tap_indices else {}
        blocks = [] if keep else None
        mid_logits = blank_prob = None
        for i, layer in enumerate(self.layers, start=1):
            x = layer(x, key_bias, valid)
            if keep:
                blocks.append(x)
            if i == cfg.self_conditioning_layer:
                mid_logits = self.out(x)
                probs = torch.softmax(mid_logits.float(), dim=-1)
                blank_prob = probs[..., 0]
                x = x + self.out_mid(probs.to(dtype))
            if i in self.tap_indices:
                states[i] = x
        if self.out_bpe is None:
            return EncoderOutput([states[i] for i in self.tap_indices], mid_logits, None, None, blocks, embedded)
        pooled = self._pool(x.float(), 1.0 - blank_prob, lengths).to(dtype)
        return EncoderOutput([states[i] for i in self.tap_indices], mid_logits, pooled,
                             self.out_bpe(pooled) if keep else None, blocks, embedded)

    def _pool(self, hidden: torch.Tensor, importance: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Posterior-weighted pooling over windows of w frames: weights importance / (sum + 1e-8),
        importance = 1 - p(char blank); frames past a length (and the tail's padding) weigh 0."""
        w = self.cfg.bpe_pooling_window
        b, t, d = hidden.shape
        valid = torch.arange(t, device=hidden.device)[None, :] < lengths[:, None]
        importance = importance * valid
        hidden = hidden * valid[:, :, None]
        pad = (-t) % w
        if pad:
            hidden = F.pad(hidden, (0, 0, 0, pad))
            importance = F.pad(importance, (0, pad))
        hidden = hidden.view(b, -1, w, d)
        importance = importance.view(b, -1, w)
        weights = importance / (importance.sum(dim=-1, keepdim=True) + 1e-8)
        return (hidden * weights[..., None]).sum(dim=2)

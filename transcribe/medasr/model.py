"""MedASR's network (transformers' LasrForCTC): a subsampler, Conformer blocks with rotary positions and
weighted residuals, and a CTC head. Module and tensor names are the checkpoint's; its k=1 convolutions
(the conv modules' pointwise ones and the CTC head) are held as linear layers.

- Subsampler: dense n_mels -> hidden, ReLU; Conv1d(hidden, hidden, k, stride s), ReLU; Conv1d(hidden, channels,
  k, s), ReLU (both unpadded); dense channels -> hidden.
- Block: x = w0 x + w1 FF1(LN x); x = x + MHA(LN x) with rotary positions (rotate-half, `rope_theta`);
  x = c0 x + c1 Conv(LN x); x = w0 x + w1 FF2(LN x); LN. The layer norms have no bias. Conv: pointwise to 2C, GLU,
  the padded frames zeroed, depthwise with "same" padding (an even kernel pads (k-1)//2 left, k//2 right),
  batch norm (folded into the depthwise weights at load), the block's activation, pointwise.
- Encoder: the blocks, then a bias-free layer norm; the head maps hidden -> vocab logits.

A batch gives each input the result it has alone: the subsampler's convolutions are unpadded (an input's
valid frames never read past its end), attention masks padded keys and the conv module zeroes padded frames
before its depthwise convolution, as the reference does."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..modules import fused_linear
from .config import MedASRConfig


class FeedForward(nn.Module):
    def __init__(self, c: MedASRConfig):
        super().__init__()
        self.linear1 = nn.Linear(c.hidden, c.ff, bias=c.attention_bias)
        self.linear2 = nn.Linear(c.ff, c.hidden, bias=c.attention_bias)

    def forward(self, x):
        return self.linear2(F.silu(self.linear1(x)))


class Attention(nn.Module):
    def __init__(self, c: MedASRConfig):
        super().__init__()
        self.heads, self.head_dim = c.heads, c.head_dim
        inner = c.heads * c.head_dim
        self.q_proj = nn.Linear(c.hidden, inner, bias=c.attention_bias)
        self.k_proj = nn.Linear(c.hidden, inner, bias=c.attention_bias)
        self.v_proj = nn.Linear(c.hidden, inner, bias=c.attention_bias)
        self.o_proj = nn.Linear(inner, c.hidden, bias=c.attention_bias)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        qkv = fused_linear(self.__dict__.setdefault("_fused", {}), (self.q_proj, self.k_proj, self.v_proj))
        q, k, v = (p.view(b, t, self.heads, self.head_dim).transpose(1, 2) for p in qkv(x).chunk(3, dim=-1))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class ConvModule(nn.Module):
    def __init__(self, c: MedASRConfig):
        super().__init__()
        self.pointwise_conv1 = nn.Linear(c.hidden, 2 * c.hidden, bias=c.conv_bias)
        self.depthwise_conv = nn.Conv1d(c.hidden, c.hidden, c.conv_kernel, groups=c.hidden, bias=c.conv_bias)
        self.norm = nn.BatchNorm1d(c.hidden)
        self.pointwise_conv2 = nn.Linear(c.hidden, c.hidden, bias=c.conv_bias)
        self.pad = ((c.conv_kernel - 1) // 2, c.conv_kernel // 2)

    def forward(self, x, valid):
        x = F.glu(self.pointwise_conv1(x), dim=-1)
        if valid is not None:
            x = x.masked_fill(~valid[:, :, None], 0.0)
        x = self.depthwise_conv(F.pad(x.transpose(1, 2), self.pad))
        x = F.silu(self.norm(x))
        return self.pointwise_conv2(x.transpose(1, 2))

    def fold_batch_norm(self) -> None:
        bn = self.norm
        if not isinstance(bn, nn.BatchNorm1d):
            return
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        conv = self.depthwise_conv
        with torch.no_grad():
            bias = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
            conv.weight.mul_(scale[:, None, None])
            conv.bias = nn.Parameter((bias - bn.running_mean) * scale + bn.bias)
        self.norm = nn.Identity()


class Block(nn.Module):
    def __init__(self, c: MedASRConfig):
        super().__init__()
        self.feed_forward1 = FeedForward(c)
        self.self_attn = Attention(c)
        self.conv = ConvModule(c)
        self.feed_forward2 = FeedForward(c)
        for name in ("norm_feed_forward1", "norm_self_att", "norm_conv", "norm_feed_forward2", "norm_out"):
            setattr(self, name, nn.LayerNorm(c.hidden, c.eps, bias=False))
        self.ff_w, self.conv_w = c.ff_weights, c.conv_weights

    def forward(self, x, cos, sin, mask, valid):
        (f0, f1), (c0, c1) = self.ff_w, self.conv_w
        x = f0 * x + f1 * self.feed_forward1(self.norm_feed_forward1(x))
        x = x + self.self_attn(self.norm_self_att(x), cos, sin, mask)
        x = c0 * x + c1 * self.conv(self.norm_conv(x), valid)
        x = f0 * x + f1 * self.feed_forward2(self.norm_feed_forward2(x))
        return self.norm_out(x)


class Subsampler(nn.Module):
    def __init__(self, c: MedASRConfig):
        super().__init__()
        self.dense_0 = nn.Linear(c.n_mels, c.hidden)
        self.conv_0 = nn.Conv1d(c.hidden, c.hidden, c.sub_kernel, stride=c.sub_stride)
        self.conv_1 = nn.Conv1d(c.hidden, c.sub_channels, c.sub_kernel, stride=c.sub_stride)
        self.dense_1 = nn.Linear(c.sub_channels, c.hidden)

    def forward(self, x):
        x = F.relu(self.dense_0(x)).transpose(1, 2)
        x = F.relu(self.conv_1(F.relu(self.conv_0(x))))
        return self.dense_1(x.transpose(1, 2))


class Encoder(nn.Module):
    def __init__(self, c: MedASRConfig):
        super().__init__()
        self.config = c
        self.subsampler = Subsampler(c)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.out_norm = nn.LayerNorm(c.hidden, c.eps, bias=False)

    def rotary(self, t: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [t, head_dim] of positions 0..t-1 (float32, as the reference computes them)."""
        c = self.config
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.int64, device=device).float()
                                      / c.head_dim))
        freqs = torch.arange(t, device=device).float()[:, None] * inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """feats [B, T, n_mels], encoder frame counts [B] -> states [B, T', hidden] (T' the longest)."""
        x = self.subsampler(feats)
        t = x.shape[1]
        valid = torch.arange(t, device=x.device)[None, :] < lengths[:, None]
        full = bool(valid.all())
        mask = None if full else valid[:, None, None, :]
        cos, sin = self.rotary(t, x.device, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, None if full else valid)
        return self.out_norm(x), lengths

    def fold_batch_norm(self) -> None:
        for layer in self.layers:
            layer.conv.fold_batch_norm()


class MedASRModel(nn.Module):
    def __init__(self, c: MedASRConfig):
        super().__init__()
        self.config = c
        self.encoder = Encoder(c)
        self.ctc_head = nn.Linear(c.hidden, c.vocab_size)

    def forward(self, feats: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features [B, T, n_mels] and their frame counts -> CTC logits [B, T', vocab] (float32) and encoder
        frame counts [B]."""
        c = self.config
        lengths = frames
        for _ in range(2):
            lengths = torch.clamp((lengths - c.sub_kernel) // c.sub_stride + 1, min=0)
        dtype = self.ctc_head.weight.dtype if isinstance(self.ctc_head, nn.Linear) else torch.float32
        states, lengths = self.encoder(feats.to(_dtype(self.encoder)), lengths)
        return self.ctc_head(states.to(dtype)).float(), lengths

    def load_checkpoint(self, state: dict) -> None:
        """Tensors by the checkpoint's names (k=1 convolutions [out, in, 1] taken as [out, in]); a missing,
        unexpected or misshapen tensor is a KeyError naming it."""
        own = {k: v for k, v in self.state_dict().items() if not k.endswith("num_batches_tracked")}
        given = {}
        for k, v in state.items():
            if k == "encoder.rotary_emb.inv_freq" or k.endswith("num_batches_tracked"):
                continue
            if k not in own:
                raise KeyError(f"unexpected tensor {k}")
            if v.dim() == 3 and own[k].dim() == 2 and v.shape[-1] == 1:
                v = v[..., 0]
            if tuple(v.shape) != tuple(own[k].shape):
                raise KeyError(f"tensor {k} has shape {tuple(v.shape)}, the config says {tuple(own[k].shape)}")
            given[k] = v.float()
        missing = sorted(set(own) - set(given))
        if missing:
            raise KeyError(f"missing tensor {missing[0]}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
        self.load_state_dict(given, assign=True, strict=False)


def _dtype(module: nn.Module) -> torch.dtype:
    for p in module.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32

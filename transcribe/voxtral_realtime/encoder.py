"""Voxtral Realtime's audio side (transformers' `VoxtralRealtimeEncoder` and `VoxtralRealtimeMultiModalProjector`):
a causal convolution stem (kernel 3 stride 1 then kernel 3 stride 2, each padded on the left only, GELU after
each), pre-norm RMSNorm layers with rotary positions over a causal sliding window (q, v and o with biases, k
without; a SiLU-gated MLP whose down projection has a bias), a final RMSNorm, and the projector (every
`downsample` frames stacked, linear, GELU, linear).

Everything is causal, so the stem and the layers run on any cut of the input with their state carried
(`ConvState`: the last input frames of each convolution, zeros at the start, transformers' padding cache;
`cache.WindowCache`: the layers' keys and values) and give the frames the whole input gives."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..llm.model import RMSNorm, _rotate_half
from .cache import WindowCache
from .config import EncoderConfig


class CausalConv(nn.Conv1d):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1):
        super().__init__(cin, cout, kernel, stride=stride)
        self.left_pad = (kernel - 1) + 1 - stride

    def run(self, x: torch.Tensor, state: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """x [1, C, T] after `state` (the previous input's last left_pad frames; None: the start, zeros) ->
        (output, the new state)."""
        if state is None:
            state = x.new_zeros(x.shape[0], x.shape[1], self.left_pad)
        padded = torch.cat([state, x], dim=-1)
        return F.conv1d(padded, self.weight, self.bias, self.stride), padded[:, :, padded.shape[-1] - self.left_pad:]


class ConvState:
    """The stem's carried input frames (transformers' VoxtralRealtimeConv1dPaddingCache)."""

    def __init__(self):
        self.conv1: Optional[torch.Tensor] = None
        self.conv2: Optional[torch.Tensor] = None


class Embedder(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.conv1 = CausalConv(cfg.n_mels, cfg.hidden, 3)
        self.conv2 = CausalConv(cfg.hidden, cfg.hidden, 3, stride=2)

    def forward(self, mel: torch.Tensor, state: ConvState) -> torch.Tensor:
        """Mel frames [1, n_mels, T] (T even) -> encoder input frames [1, T / 2, hidden]."""
        x, state.conv1 = self.conv1.run(mel, state.conv1)
        x = F.gelu(x)
        x, state.conv2 = self.conv2.run(x, state.conv2)
        return F.gelu(x).transpose(1, 2)


class EncoderAttention(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        d, h, hd = cfg.hidden, cfg.heads, cfg.head_dim
        self.heads, self.head_dim = h, hd
        self.q_proj = nn.Linear(d, h * hd, bias=True)
        self.k_proj = nn.Linear(d, h * hd, bias=False)
        self.v_proj = nn.Linear(d, h * hd, bias=True)
        self.o_proj = nn.Linear(h * hd, d, bias=True)

    def forward(self, x, cos, sin, cache: WindowCache, layer: int, mask):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        keys, values = cache.write(layer, k, v)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.head_dim ** -0.5)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim))


class EncoderMLP(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
        self.down_proj = nn.Linear(cfg.ffn, cfg.hidden, bias=True)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.self_attn_layer_norm = RMSNorm(cfg.hidden, cfg.eps)
        self.self_attn = EncoderAttention(cfg)
        self.final_layer_norm = RMSNorm(cfg.hidden, cfg.eps)
        self.mlp = EncoderMLP(cfg)

    def forward(self, x, cos, sin, cache, layer, mask):
        x = x + self.self_attn(self.self_attn_layer_norm(x), cos, sin, cache, layer, mask)
        return x + self.mlp(self.final_layer_norm(x))


class AudioEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.embedder = Embedder(cfg)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.eps)

    def inv_freq(self, device) -> torch.Tensor:
        c = self.cfg
        exponent = torch.arange(0, c.head_dim, 2, dtype=torch.int64, device=device).to(torch.float32) / c.head_dim
        return 1.0 / (c.rope_theta ** exponent)

    @property
    def dtype(self) -> torch.dtype:
        return self.norm.weight.dtype

    def new_cache(self, device) -> WindowCache:
        c = self.cfg
        return WindowCache(c.layers, c.heads, c.head_dim, c.window, self.dtype, torch.device(device))

    def forward(self, x: torch.Tensor, cache: WindowCache) -> torch.Tensor:
        """Encoder input frames [1, n, hidden] after those the cache holds -> the final-norm frames [1, n, hidden]."""
        n = x.shape[1]
        positions = torch.arange(cache.position, cache.position + n, device=x.device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq(x.device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        cache.reserve(n)
        mask = cache.mask(n)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache, i, mask)
        cache.commit(n)
        return self.norm(x)


class Projector(nn.Module):
    def __init__(self, cfg: EncoderConfig, downsample: int, lm_hidden: int):
        super().__init__()
        self.downsample = downsample
        self.linear_1 = nn.Linear(cfg.hidden * downsample, lm_hidden, bias=False)
        self.linear_2 = nn.Linear(lm_hidden, lm_hidden, bias=False)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """Encoder frames [1, n, hidden] (n a multiple of downsample) -> audio embeddings [1, n / downsample, D]."""
        b, n, d = frames.shape
        x = frames.reshape(b, n // self.downsample, d * self.downsample)
        return self.linear_2(F.gelu(self.linear_1(x)))

"""Granite Speech's projector: a BLIP-2 Q-Former over windows of encoder frames (transformers'
`GraniteSpeechEncoderProjector` with `Blip2QFormerModel`).

The encoder's frames are cut into windows of `window_size` (15; the tail zero-padded); in every window
`num_queries` (3) learned queries, LayerNorm-ed, go through the Q-Former's layers: self-attention among the
queries, cross-attention to the window's frames (in layers i with i % cross_attention_frequency == 0), a GELU
feed-forward, each a post-norm residual (BERT's order); a linear map gives the LM's width. So T frames give
ceil(T / 15) * 3 LM embeddings.

Parameter names follow the checkpoint (`projector.query`, `projector.qformer.layernorm`,
`projector.qformer.encoder.layer.{i}.{attention,crossattention}.{attention.{query,key,value},output.{dense,
LayerNorm}}`, `...{intermediate_query.dense, output_query.{dense,LayerNorm}}`, `projector.linear`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import QFormerConfig


class _Heads(nn.Module):
    def __init__(self, cfg: QFormerConfig, kv_width: int):
        super().__init__()
        d = cfg.hidden_size
        self.heads = cfg.num_heads
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(kv_width, d)
        self.value = nn.Linear(kv_width, d)

    def forward(self, x: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        n, lq, d = x.shape
        h = self.heads
        q = self.query(x).view(n, lq, h, -1).transpose(1, 2)
        k = self.key(kv).view(kv.shape[0], kv.shape[1], h, -1).transpose(1, 2)
        v = self.value(kv).view(kv.shape[0], kv.shape[1], h, -1).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v)
        return out.transpose(1, 2).reshape(n, lq, d)


class _AddNorm(nn.Module):
    """`dense`, then LayerNorm of (it + the residual)."""

    def __init__(self, width_in: int, cfg: QFormerConfig):
        super().__init__()
        self.dense = nn.Linear(width_in, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class _Attention(nn.Module):
    def __init__(self, cfg: QFormerConfig, kv_width: int):
        super().__init__()
        self.attention = _Heads(cfg, kv_width)
        self.output = _AddNorm(cfg.hidden_size, cfg)

    def forward(self, x: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return self.output(self.attention(x, kv), x)


class _Dense(nn.Module):
    def __init__(self, cfg: QFormerConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))


class _Layer(nn.Module):
    def __init__(self, cfg: QFormerConfig, index: int):
        super().__init__()
        self.attention = _Attention(cfg, cfg.hidden_size)
        self.crossattention = (_Attention(cfg, cfg.encoder_hidden_size)
                               if index % cfg.cross_attention_frequency == 0 else None)
        self.intermediate_query = _Dense(cfg)
        self.output_query = _AddNorm(cfg.intermediate_size, cfg)

    def forward(self, x: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, x)
        if self.crossattention is not None:
            x = self.crossattention(x, frames)
        return self.output_query(self.intermediate_query(x), x)


class _Encoder(nn.Module):
    def __init__(self, cfg: QFormerConfig):
        super().__init__()
        self.layer = nn.ModuleList(_Layer(cfg, i) for i in range(cfg.num_layers))


class _QFormer(nn.Module):
    def __init__(self, cfg: QFormerConfig):
        super().__init__()
        self.layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.encoder = _Encoder(cfg)


class Projector(nn.Module):
    def __init__(self, cfg: QFormerConfig, lm_width: int):
        super().__init__()
        self.cfg = cfg
        self.query = nn.Parameter(torch.zeros(1, cfg.num_queries, cfg.hidden_size))
        self.qformer = _QFormer(cfg)
        self.linear = nn.Linear(cfg.hidden_size, lm_width)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """frames [B, T, E] (zeros past each input's length) -> [B, ceil(T / window) * queries, LM width]."""
        b, t, e = frames.shape
        w = self.cfg.window_size
        blocks = -(-t // w)
        if blocks * w != t:
            frames = F.pad(frames, (0, 0, 0, blocks * w - t))
        frames = frames.reshape(b * blocks, w, e)
        x = self.qformer.layernorm(self.query.to(frames.dtype)).expand(b * blocks, -1, -1)
        for layer in self.qformer.encoder.layer:
            x = layer(x, frames)
        return self.linear(x.reshape(b, blocks * self.cfg.num_queries, -1))

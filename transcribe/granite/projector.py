"""Granite Speech NAR's windowed Q-Former projector: encoder taps -> LM embeddings, 5x fewer.

Each tap gets a LayerNorm (affine-free: the checkpoint's affine parameters are exactly identity,
checked at load), the taps are concatenated and projected (GELU); the frames are cut into windows of
`block_size` (15; the tail zero-padded), and in each window `block_size / downsample_rate` (3)
learned queries, started from the mean of their 5 frames, attend to the window's frames (plus a
learned position per window slot) through `num_layers` layers of cross-attention and MLP (no
self-attention between the queries). A LayerNorm and a linear map give the LM's width.

Parameter names follow IBM's checkpoint (`projector.layer_projector`, `projector.query`,
`projector.window_positions`, `projector.qformer.layers.{i}.{attn_norm,cross_attention,mlp_norm,mlp}`,
`projector.out_norm`, `projector.out_linear`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import ProjectorConfig


def _layer_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], eps=eps)


class CrossAttention(nn.Module):
    def __init__(self, cfg: ProjectorConfig):
        super().__init__()
        d = cfg.hidden_size
        self.heads = cfg.num_heads
        self.q_proj = nn.Linear(d, d, bias=cfg.attn_bias)
        self.k_proj = nn.Linear(d, d, bias=cfg.attn_bias)
        self.v_proj = nn.Linear(d, d, bias=cfg.attn_bias)
        self.o_proj = nn.Linear(d, d, bias=cfg.attn_bias)

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        n, lq, d = q.shape
        lk = kv.shape[1]
        h = self.heads
        q = self.q_proj(q).view(n, lq, h, d // h).transpose(1, 2)
        k = self.k_proj(kv).view(n, lk, h, d // h).transpose(1, 2)
        v = self.v_proj(kv).view(n, lk, h, d // h).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.o_proj(out.transpose(1, 2).reshape(n, lq, d))


class QFormerLayer(nn.Module):
    def __init__(self, cfg: ProjectorConfig):
        super().__init__()
        self.eps = cfg.layernorm_eps
        self.cross_attention = CrossAttention(cfg)
        self.mlp = nn.Sequential()
        self.mlp.add_module("fc1", nn.Linear(cfg.hidden_size, cfg.mlp_hidden, bias=cfg.mlp_bias))
        self.mlp.add_module("act", nn.SiLU())
        self.mlp.add_module("fc2", nn.Linear(cfg.mlp_hidden, cfg.hidden_size, bias=cfg.mlp_bias))

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        q = q + self.cross_attention(_layer_norm(q, self.eps), kv)
        return q + self.mlp(_layer_norm(q, self.eps))


class _QFormer(nn.Module):
    def __init__(self, cfg: ProjectorConfig):
        super().__init__()
        self.layers = nn.ModuleList(QFormerLayer(cfg) for _ in range(cfg.num_layers))


class WindowedQFormer(nn.Module):
    def __init__(self, cfg: ProjectorConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        self.queries_per_window = cfg.block_size // cfg.downsample_rate
        self.layer_projector = nn.Linear(cfg.encoder_dim * cfg.num_encoder_layers, d)
        self.query = nn.Parameter(torch.empty(1, self.queries_per_window, d))
        self.window_positions = nn.Parameter(torch.empty(1, cfg.block_size, d))
        self.qformer = _QFormer(cfg)
        self.out_linear = nn.Linear(d, cfg.llm_dim)

    def forward(self, taps: list[torch.Tensor], lengths: torch.Tensor) -> torch.Tensor:
        """taps: [B, T, encoder_dim] each; lengths [B] -> [B, ceil(T/15) * 3, llm_dim]."""
        cfg = self.cfg
        eps = cfg.layernorm_eps
        x = torch.cat([_layer_norm(t, eps) for t in taps], dim=-1)
        x = F.gelu(self.layer_projector(x))
        b, t, d = x.shape
        if bool((lengths < t).any()):
            x = x * (torch.arange(t, device=x.device)[None, :, None] < lengths[:, None, None])
        w = cfg.block_size
        pad = (-t) % w
        if pad:
            x = F.pad(x, (0, 0, 0, pad))
        nb = (t + pad) // w
        windows = x.view(b * nb, w, d)
        means = windows.view(b * nb, self.queries_per_window, cfg.downsample_rate, d).mean(dim=2)
        q = self.query + means
        kv = windows + self.window_positions
        for layer in self.qformer.layers:
            q = layer(q, kv)
        q = q.view(b, nb * self.queries_per_window, d)
        return self.out_linear(_layer_norm(q, eps))

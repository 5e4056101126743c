"""The editor: a Granite LM run bidirectionally (no causal mask) over
`[audio embeddings | b, y1, b, y2, ..., b, yn, b]`, once per input (no loop over tokens).

Granite's multipliers: the input embeddings are multiplied by `embedding_multiplier`, attention
scores by `attention_multiplier` (instead of 1/sqrt(head_dim)), each residual branch by
`residual_multiplier`, and the logits divided by `logits_scaling`. RMSNorm, grouped-query attention,
RoPE (the default rotation, halves rotated), SwiGLU MLP, tied output embedding.

Parameter names follow the checkpoint's `language_model.model.*` (`embed_tokens`,
`layers.{i}.{input_layernorm,self_attn.{q,k,v,o}_proj,post_attention_layernorm,mlp.{gate,up,down}_proj}`,
`norm`).

Inputs of different lengths are batched with a key mask: an input attends to its own positions only,
so its result does not depend on the others.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..modules import embedding_weight
from .config import TextConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: TextConfig):
        super().__init__()
        d, hd = cfg.hidden_size, cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, hd
        self.scale = cfg.attention_multiplier
        self.q_proj = nn.Linear(d, self.heads * hd, bias=False)
        self.k_proj = nn.Linear(d, self.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, self.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(self.heads * hd, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale,
                                             enable_gqa=self.kv_heads != self.heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: TextConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TextConfig):
        super().__init__()
        self.residual = cfg.residual_multiplier
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask) * self.residual
        return x + self.mlp(self.post_attention_layernorm(x)) * self.residual


class GraniteLM(nn.Module):
    """The LM body (`language_model.model`): embeddings, layers, final norm."""

    def __init__(self, cfg: TextConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, _weight=embedding_weight(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def rope(self, positions: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, 1, L, head_dim] for positions [B, L] (float32, then `dtype`)."""
        hd = self.cfg.head_dim
        inv = 1.0 / (self.cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64, device=positions.device).float() / hd))
        freqs = positions[:, :, None].float() * inv[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None].to(dtype), emb.sin()[:, None].to(dtype)

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
        """embeds [B, L, D] (before the embedding multiplier), positions [B, L], lengths [B] (rows past
        a length are padding: never attended to) -> the last hidden state after the final norm."""
        x = embeds * self.cfg.embedding_multiplier
        cos, sin = self.rope(positions, x.dtype)
        mask = None
        if lengths is not None and bool((lengths < x.shape[1]).any()):
            keys = torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]
            mask = keys[:, None, None, :]  # [B, 1, 1, L]: True = attend
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x)

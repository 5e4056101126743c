"""Voxtral Realtime's language model (transformers' `VoxtralRealtimeTextModel`): a Mistral decoder (grouped-query
attention without biases, rotary positions, a SiLU-gated MLP) over a sliding window of `window` tokens, whose
every layer scales its MLP input by `1 + ada(t)`: `ada` a small linear-GELU-linear (`ada_rms_norm`) of a sinusoid of
the transcription delay `t` (`time_scales`). The delay is a per-call setting, so the scales are computed per call
(a session) and passed in, never written onto the shared modules.

It is `llm.model.DecoderLM` (its embedding, head, final norm, loading and int8 quantization) with these layers and
a sliding-window cache (`cache.WindowCache`) in place of the batched `KVCache`: one sequence at a time, as the
model decodes one token per 80 ms of audio."""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..llm.config import LMConfig
from ..llm.model import MLP, DecoderLM, RMSNorm, _rotate_half
from .cache import WindowCache
from .config import ADA_DIM, TIME_THETA


class AdaNorm(nn.Module):
    """transformers' VoxtralRealtimeTextAdaRmsNorm (no norm inside despite the name)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.linear1 = nn.Linear(hidden, ADA_DIM, bias=False)
        self.linear2 = nn.Linear(ADA_DIM, hidden, bias=False)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.linear2(F.gelu(self.linear1(t)))


class TextAttention(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        d, h, kv, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = h, kv, hd
        self.q_proj = nn.Linear(d, h * hd, bias=False)
        self.k_proj = nn.Linear(d, kv * hd, bias=False)
        self.v_proj = nn.Linear(d, kv * hd, bias=False)
        self.o_proj = nn.Linear(h * hd, d, bias=False)

    def forward(self, x, cos, sin, cache: WindowCache, layer: int, mask):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        keys, values = cache.write(layer, k, v)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.head_dim ** -0.5,
                                             enable_gqa=self.heads != self.kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim))


class TextBlock(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = TextAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)
        self.ada_rms_norm = AdaNorm(cfg.hidden_size)

    def forward(self, x, cos, sin, cache, layer, mask, scale):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, layer, mask)
        return x + self.mlp(self.post_attention_layernorm(x) * scale)


class TextModel(DecoderLM):
    def __init__(self, cfg: LMConfig, window: Optional[int] = None):
        super().__init__(cfg)
        self.layers = nn.ModuleList(TextBlock(cfg) for _ in range(cfg.num_layers))
        self.window = window

    @classmethod
    def from_tensors(cls, cfg: LMConfig, tensors, where: str, dtype=torch.float32, int8=None,
                     window: Optional[int] = None) -> "TextModel":
        with torch.device("meta"):
            lm = cls(cfg, window)
        lm.load(tensors, where, None if int8 is not None else dtype, consume=int8 is not None)
        if int8 is not None:
            lm.quantize_int8(int8)
        return lm

    def new_window_cache(self, device=None) -> WindowCache:
        c = self.cfg
        w = self.norm.weight
        return WindowCache(c.num_layers, c.num_kv_heads, c.head_dim, self.window, w.dtype,
                           torch.device(device) if device is not None else w.device)

    @torch.no_grad()
    def time_scales(self, delay_tokens: int) -> list[torch.Tensor]:
        """Each layer's MLP-input scale `1 + ada(t)` for a delay of `delay_tokens` ([hidden] each, the LM's dtype):
        t = [cos(d * f), sin(d * f)], f = exp(-ln(10000) * i / (hidden / 2)), computed in the LM's dtype as
        transformers computes it in its input embeddings' dtype."""
        dtype, device = self.dtype, self.norm.weight.device
        half = self.cfg.hidden_size // 2
        inv_freq = torch.exp(-math.log(TIME_THETA) * torch.arange(half, device=device).float() / half)
        t = torch.full((1,), float(delay_tokens), dtype=dtype, device=device) * inv_freq.to(dtype)
        t = torch.cat((t.cos(), t.sin()))
        out = []
        for block in self.layers:
            ada = block.ada_rms_norm
            a = ada(t.to(ada.linear1.weight.dtype)).to(dtype)
            out.append(1 + a)
        return out

    def run(self, x: torch.Tensor, cache: WindowCache, scales: list[torch.Tensor]) -> torch.Tensor:
        """Input rows x [1, n, D] after what the cache holds -> final-norm hidden states [1, n, D]."""
        n = x.shape[1]
        positions = torch.arange(cache.position, cache.position + n, device=x.device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq.to(x.device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        cache.reserve(n)
        mask = cache.mask(n)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache, i, mask, scales[i])
        cache.commit(n)
        return self.norm(x)

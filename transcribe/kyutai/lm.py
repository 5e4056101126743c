"""The Kyutai STT language model (transformers' `KyutaiSpeechToTextModel` + `lm_head`): one position per 80 ms frame,
its input the sum of the embeddings of the previous text token and the frame's codebook ids (each codebook's ids
offset into one table; the audio pad id is not offset), RMSNorm (eps 1e-8 published), RoPE, a gated SiLU MLP whose
first projection holds both halves, attention within a sliding window of positions (transformers' sliding-window
cache keeps the last `sliding_window - 1` keys and values, and each step attends to them and itself).

`step(text_id, codes, cache)` runs one position with a cache (`new_cache()`) whose size never passes the window."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import LMConfig
from .mimi import cached_self_attention, rope_tables


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


class Layer(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        d, hd = cfg.hidden_size, cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, hd
        self.q_proj = nn.Linear(d, cfg.heads * hd, bias=False)
        self.k_proj = nn.Linear(d, cfg.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, cfg.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.heads * hd, d, bias=False)
        self.fc1 = nn.Linear(d, cfg.ffn_dim, bias=False)
        self.fc2 = nn.Linear(cfg.ffn_dim // 2, d, bias=False)
        self.input_layernorm = RMSNorm(d, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(d, cfg.rms_norm_eps)


class KyutaiLM(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.embed_rows, cfg.hidden_size)
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)
        offsets = torch.tensor([0] + [cfg.vocab_size + k * cfg.codebook_vocab_size for k in range(cfg.num_codebooks)])
        self.register_buffer("offsets", offsets, persistent=False)

    def new_cache(self) -> dict:
        return {"pos": 0, "kv": [None] * self.cfg.layers}

    def quantize_int8(self) -> int:
        """dtype int8: every layer's matrix products (q/k/v/o, the MLP's two) and the head become `quant.Int8Linear`
        (int8 weights per output row, float32 activations quantized per row at run time); the embeddings and the
        norms stay float32. Returns how many layers were quantized."""
        from ..quant import Int8Linear

        n = 0
        for layer in self.layers:
            for name in ("q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2"):
                setattr(layer, name, Int8Linear.from_linear(getattr(layer, name)))
                n += 1
        self.lm_head = Int8Linear.from_linear(self.lm_head)
        return n + 1

    def cast(self, dtype: torch.dtype) -> "KyutaiLM":
        """The LM's weights in `dtype` (bfloat16, float16); RoPE's frequencies stay float32."""
        inv = self.inv_freq.clone()
        self.to(dtype)
        self.inv_freq = inv
        return self

    @staticmethod
    def select(cache: dict, rows: torch.Tensor) -> None:
        """Keeps the cache's `rows` (a beam's reordering)."""
        cache["kv"] = [None if kv is None else (kv[0][rows], kv[1][rows]) for kv in cache["kv"]]

    def embed_inputs(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (..., 1 + num_codebooks): the text id then the codebook ids -> summed embeddings (..., hidden)."""
        pad = self.cfg.audio_pad_token_id
        ids = torch.where(ids == pad, ids, ids + self.offsets)
        return self.embed(ids).sum(dim=-2)

    def forward(self, ids: torch.Tensor, cache: dict) -> torch.Tensor:
        """ids (rows, T, 1 + num_codebooks) at the cache's next positions -> logits (rows, T, vocab), float32."""
        cfg = self.cfg
        x = self.embed_inputs(ids)
        b, t = x.shape[0], x.shape[1]
        pos = cache["pos"]
        cos, sin = rope_tables(self.inv_freq, pos, t, x.dtype)
        for i, layer in enumerate(self.layers):
            x = x + cached_self_attention(layer, layer.input_layernorm(x), cos, sin, cache["kv"], i,
                                          cfg.sliding_window)
            h = layer.fc1(layer.post_attention_layernorm(x))
            gate, up = h.view(b, t, 2, -1).unbind(dim=2)
            x = x + layer.fc2(F.silu(gate) * up)
        cache["pos"] = pos + t
        return self.lm_head(self.norm(x)).float()

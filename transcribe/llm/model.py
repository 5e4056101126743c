"""A decoder-only Transformer LM (Llama's shape: pre-norm RMSNorm blocks, rotary positions, grouped-query
attention, a SiLU-gated MLP) with the switches the audio-LLMs use: Granite's four multipliers, Qwen3's q/k head
norms, Qwen2's q/k/v biases, tied or separate heads. Parameter names are transformers' below the LM prefix
(`embed_tokens`, `layers.{i}.self_attn.{q,k,v,o}_proj`, `layers.{i}.self_attn.{q,k}_norm`,
`layers.{i}.mlp.{gate,up,down}_proj`, `layers.{i}.{input,post_attention}_layernorm`, `norm`, `lm_head`).

The operations follow transformers' (RMSNorm in float32 cast back before the weight, the rotation's angles in
float32 from float positions, `rotate_half`, SDPA with the configured scale), so float32 results agree with
transformers' to rounding and token ids are the same.

`KVCache` holds each layer's keys and values for a batch of rows with a validity mask over its slots: rows are
left-padded to a common length, a padded slot is never a key of a real query, and each row's positions count its
own valid tokens only, so a row's result does not depend on the rows it is batched with.
"""
from __future__ import annotations

from typing import Mapping, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..modules import checked_state
from .config import LMConfig


def int8_compute(device) -> torch.dtype:
    """The dtype an int8 LM runs in on `device` (`DecoderLM.quantize_int8`): bfloat16 with weight-only int8
    (`quant.W8Linear`) on a CPU that multiplies bfloat16 natively, float32 with int8 products elsewhere."""
    from ..quant import cpu_multiplies_bf16

    return torch.bfloat16 if torch.device(device).type == "cpu" and cpu_multiplies_bf16() else torch.float32


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class KVCache:
    """Keys and values of every layer for `rows` sequences, `capacity` slots each ([rows, kv_heads, slot, dim]),
    the validity of each slot, and each row's next position."""

    def __init__(self, cfg: LMConfig, rows: int, capacity: int, dtype: torch.dtype, device: torch.device):
        shape = (rows, cfg.num_kv_heads, capacity, cfg.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)]
        self.valid = torch.zeros(rows, capacity, dtype=torch.bool, device=device)
        self.next_pos = torch.zeros(rows, dtype=torch.long, device=device)
        self.length = 0            # slots filled (the same for every row)
        self.padded = False        # whether any filled slot is padding

    @property
    def capacity(self) -> int:
        return self.valid.shape[1]

    def select(self, rows: torch.Tensor) -> None:
        """Keep the given rows, in that order (a beam's reordering; rows may repeat)."""
        rows = rows.to(self.valid.device)
        for store in (self.k, self.v):
            for i, t in enumerate(store):
                store[i] = t.index_select(0, rows)
        self.valid = self.valid.index_select(0, rows)
        self.next_pos = self.next_pos.index_select(0, rows)


class Attention(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        d, h, kv, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.heads, self.kv_heads, self.head_dim, self.scale = h, kv, hd, cfg.scale
        self.q_proj = nn.Linear(d, h * hd, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(d, kv * hd, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(d, kv * hd, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(h * hd, d, bias=cfg.o_bias)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache, layer: int,
                mask: Optional[torch.Tensor], causal: bool) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        c, s = cos[:, None], sin[:, None]
        q = q * c + _rotate_half(q) * s
        k = k * c + _rotate_half(k) * s
        start = cache.length
        cache.k[layer][:, :, start:start + n] = k
        cache.v[layer][:, :, start:start + n] = v
        keys = cache.k[layer][:, :, :start + n]
        values = cache.v[layer][:, :, :start + n]
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal and mask is None,
                                             scale=self.scale, enable_gqa=self.heads != self.kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(d, f, bias=cfg.mlp_bias)
        self.up_proj = nn.Linear(d, f, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(f, d, bias=cfg.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)
        self.residual_multiplier = cfg.residual_multiplier

    def forward(self, x, cos, sin, cache, layer, mask, causal):
        a = self.self_attn(self.input_layernorm(x), cos, sin, cache, layer, mask, causal)
        x = x + (a * self.residual_multiplier if self.residual_multiplier != 1.0 else a)
        m = self.mlp(self.post_attention_layernorm(x))
        return x + (m * self.residual_multiplier if self.residual_multiplier != 1.0 else m)


class DecoderLM(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.head_int8 = None  # a tied head's int8 copy (quantize_int8)
        exponent = torch.arange(0, cfg.head_dim, 2, dtype=torch.int64).to(torch.float32) / cfg.head_dim
        self.register_buffer("inv_freq", 1.0 / (cfg.rope_theta ** exponent), persistent=False)

    # ---- weights
    @classmethod
    def from_tensors(cls, cfg: LMConfig, tensors: Mapping[str, torch.Tensor], where: str,
                     dtype: Optional[torch.dtype] = torch.float32, int8: Optional[torch.dtype] = None) -> "DecoderLM":
        """The LM with the checkpoint's tensors (transformers' names below the LM prefix), built without a
        random initialisation and holding the tensors in `dtype` (None: as stored; no extra copy when they
        already are). `int8` (the dtype to compute in): the tensors kept as stored, taken out of `tensors` (a
        dict) and quantized (`quantize_int8`), so that each float weight is freed as its int8 copy is made
        when nothing else holds it."""
        with torch.device("meta"):
            lm = cls(cfg)
        lm.load(tensors, where, None if int8 is not None else dtype, consume=int8 is not None)
        if int8 is not None:
            lm.quantize_int8(int8)
        return lm

    def load(self, tensors: Mapping[str, torch.Tensor], where: str, dtype: Optional[torch.dtype] = torch.float32,
             consume: bool = False) -> None:
        expected = {name: p.shape for name, p in self.named_parameters()}
        state = checked_state(expected, tensors, "the language model's", where, dtype, consume=consume)
        self.load_state_dict(state, strict=False, assign=True)
        del state
        device = self.embed_tokens.weight.device
        exponent = torch.arange(0, self.cfg.head_dim, 2, dtype=torch.int64).to(torch.float32) / self.cfg.head_dim
        self.inv_freq = (1.0 / (self.cfg.rope_theta ** exponent)).to(device)

    def head_weight(self) -> torch.Tensor:
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    @torch.no_grad()
    def quantize_int8(self, compute: torch.dtype = torch.float32) -> int:
        """dtype int8: every block's matrix products (attention q/k/v/o, the MLP's gate/up/down) and the head
        become int8 layers, quantized from the weights as loaded (the checkpoint's float32 or bfloat16, no
        rounding between); the embedding and the norms are then cast to `compute`, the dtype the model runs in.
        float32: `quant.Int8Linear` (int8 weights per output row, activations quantized per row at run time);
        bfloat16: `quant.W8Linear` (int8 weights, bfloat16 activations never quantized: for CPUs that multiply
        bfloat16 natively, `int8_compute`). A tied head gets an int8 copy of the embedding for the logits (the
        lookups keep the float rows): the head is read at every step, in a quarter (float32) or half (bfloat16)
        of the time in int8. The embedding keeps the dtype it was loaded in (a bfloat16 checkpoint's rows are
        exact in float32: they are cast as they are looked up). Returns how many layers were quantized."""
        from ..quant import Int8Linear, W8Linear

        layer = {torch.float32: Int8Linear, torch.bfloat16: W8Linear}.get(compute)
        if layer is None:
            raise ValueError(f"an int8 model computes in float32 or bfloat16, not {compute}")
        n = 0
        for block in self.layers:
            for parent, names in ((block.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                                  (block.mlp, ("gate_proj", "up_proj", "down_proj"))):
                for name in names:
                    setattr(parent, name, layer.from_linear(getattr(parent, name)))
                    n += 1
        if self.lm_head is not None:
            self.lm_head = layer.from_linear(self.lm_head)
        else:
            self.head_int8 = layer(self.embed_tokens.weight, None)
        for m in self.modules():  # the norms compute in `compute`
            if isinstance(m, RMSNorm):
                m.weight = nn.Parameter(m.weight.detach().to(compute), requires_grad=False)
        return n + 1

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the model computes in (its hidden states, its cache)."""
        return self.norm.weight.dtype

    # ---- running
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The embedding rows of `ids` [B, L] (no multiplier: Granite's applies inside `forward`, to audio rows
        as well, as transformers does)."""
        return self.embed_tokens(ids).to(self.dtype)

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        w = self.norm.weight
        return KVCache(self.cfg, rows, capacity, w.dtype, w.device)

    def forward(self, x: torch.Tensor, cache: KVCache, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Run the input rows x [B, L, D] (`valid` [B, L]: False for left padding) after what the cache holds;
        append their keys and values; the final-norm hidden states [B, L, D]."""
        b, n, _ = x.shape
        start = cache.length
        if start + n > cache.capacity:
            raise ValueError(f"the key/value cache holds {cache.capacity} positions; {start + n} were needed")
        device = x.device
        if valid is None:
            valid = torch.ones(b, n, dtype=torch.bool, device=device)
        elif not bool(valid.all()):
            cache.padded = True
        counts = torch.cumsum(valid.to(torch.long), dim=1)
        positions = torch.where(valid, cache.next_pos[:, None] + counts - 1, torch.ones_like(counts))
        cache.valid[:, start:start + n] = valid
        cache.next_pos = cache.next_pos + counts[:, -1]
        mask = None
        causal = n > 1
        if cache.padded or (start > 0 and n > 1):
            keys = torch.arange(start + n, device=device)
            queries = torch.arange(start, start + n, device=device)
            allowed = (keys[None, :] <= queries[:, None])[None] & cache.valid[:, None, :start + n]
            allowed = allowed | (keys[None, :] == queries[:, None])[None]  # a padded query sees itself (no NaN)
            mask = allowed[:, None]
        freqs = positions.to(torch.float32)[:, :, None] * self.inv_freq.to(device)[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        if self.cfg.embedding_multiplier != 1.0:
            x = x * self.cfg.embedding_multiplier
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache, i, mask, causal)
        cache.length = start + n
        return self.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.lm_head is not None:
            out = self.lm_head(hidden)
        elif self.head_int8 is not None:
            out = self.head_int8(hidden)
        else:
            out = F.linear(hidden, self.embed_tokens.weight)
        if self.cfg.logits_scaling != 1.0:
            out = out / self.cfg.logits_scaling
        return out

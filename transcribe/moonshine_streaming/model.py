"""Moonshine Streaming's network (transformers' `MoonshineStreamingForConditionalGeneration`), under the
checkpoint's parameter names (`model.encoder.*`, `model.decoder.*`, `proj_out.*`).

- Front end (`model.encoder.embedder`): the waveform cut into 5 ms frames (80 samples), each frame centred and
  divided by its RMS, `asinh(exp(log_k) x)`, a linear map (no bias) and SiLU, then two causal convolutions
  (kernel 5, stride 2, left padding 4; SiLU between): one encoder frame per 20 ms.
- Encoder: pre-norm layers (LayerNorm without affine times `gamma + 1`), attention without positions, each
  layer within its sliding window (a frame sees `left - 1` frames back and `right - 1` ahead), GELU MLP.
- Adapter (in transformers' decoder): the encoder states plus a learned position per frame, then a linear map to
  the decoder's width when the widths differ.
- Decoder: pre-norm layers (LayerNorm without bias): causal self-attention with partial interleaved RoPE,
  cross-attention, SwiGLU MLP (`fc1` gives the value then the gate); final norm; the head `proj_out`.

Everything here is a pure function of its inputs: the decoder's caches are plain objects a caller owns."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..modules import fused_linear, kv_append
from .config import MoonshineStreamingConfig

_ACT = {"gelu": F.gelu, "silu": F.silu, "relu": F.relu}


class UnitNorm(nn.Module):
    """LayerNorm without affine, times `gamma + 1` (transformers' unit-offset norm)."""

    def __init__(self, dim: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], eps=1e-5) * (self.gamma + 1.0)


class CausalConv(nn.Conv1d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, ((self.kernel_size[0] - 1) * self.dilation[0], 0)))


class Comp(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_k = nn.Parameter(torch.tensor(math.log(0.75)))


class Embedder(nn.Module):
    def __init__(self, hidden: int, frame_len: int):
        super().__init__()
        self.frame_len = frame_len
        self.comp = Comp()
        self.linear = nn.Linear(frame_len, hidden, bias=False)
        self.conv1 = CausalConv(hidden, 2 * hidden, 5, stride=2)
        self.conv2 = CausalConv(2 * hidden, hidden, 5, stride=2)

    def forward(self, pcm: torch.Tensor) -> torch.Tensor:
        """pcm [B, n * frame_len] -> frames [B, ceil(ceil(n / 2) / 2), hidden] (every frame valid: a batch
        of one input, or inputs of one length)."""
        x = pcm.reshape(pcm.shape[0], -1, self.frame_len)
        x = x - x.mean(dim=-1, keepdim=True)
        x = x / (x.pow(2).mean(dim=-1, keepdim=True) + 1e-6).sqrt()
        x = torch.asinh(torch.exp(self.comp.log_k) * x)
        x = F.silu(self.linear(x)).transpose(1, 2)
        x = F.silu(self.conv1(x))
        return self.conv2(x).transpose(1, 2)


class EncoderAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, bias: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class EncoderMLP(nn.Module):
    def __init__(self, hidden: int, inter: int, act: str):
        super().__init__()
        self.fc1 = nn.Linear(hidden, inter)
        self.fc2 = nn.Linear(inter, hidden)
        self.act = _ACT[act]

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = EncoderAttention(c.hidden, c.heads, c.kv_heads, c.head_dim, c.bias)
        self.mlp = EncoderMLP(c.hidden, c.intermediate, c.act)
        self.input_layernorm = UnitNorm(c.hidden)
        self.post_attention_layernorm = UnitNorm(c.hidden)

    def forward(self, x, mask):
        x = x + self.self_attn(self.input_layernorm(x), mask)
        return x + self.mlp(self.post_attention_layernorm(x))


def window_mask(t: int, left: int, right: int, device=None) -> torch.Tensor:
    """[t, t] True where query i may attend key j: 0 <= i - j < left, or 0 < j - i < right."""
    i = torch.arange(t, device=device)[:, None]
    j = torch.arange(t, device=device)[None, :]
    d = i - j
    return ((d >= 0) & (d < left)) | ((d < 0) & (-d < right))


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.embedder = Embedder(c.hidden, c.frame_len)
        self.layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.layers))
        self.final_norm = UnitNorm(c.hidden)

    def forward(self, pcm: torch.Tensor) -> torch.Tensor:
        """pcm [B, samples] (a whole number of 5 ms frames) -> encoder states [B, T, hidden]."""
        return self.layers_forward(self.embedder(pcm))

    def layers_forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        masks = {}
        for (left, right), layer in zip(self.config.windows, self.layers):
            if (left, right) not in masks:
                masks[(left, right)] = window_mask(t, left, right, x.device)
            x = layer(x, masks[(left, right)])
        return self.final_norm(x)


def rope_tables(positions: torch.Tensor, head_dim: int, factor: float, theta: float):
    """transformers' default rotary tables of the decoder: cos, sin [L, rot] (rot = the rotated dimensions,
    each frequency twice, interleaved)."""
    dim = int(head_dim * factor)
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    f = positions.float()[:, None] * inv[None, :]
    return f.cos().repeat_interleave(2, dim=-1), f.sin().repeat_interleave(2, dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    rot = cos.shape[-1]
    xr, xp = x[..., :rot], x[..., rot:]
    x1, x2 = xr[..., 0::2], xr[..., 1::2]
    half = torch.stack((-x2, x1), dim=-1).flatten(-2)
    return torch.cat((xr * cos + half * sin, xp), dim=-1)


class DecoderAttention(nn.Module):
    def __init__(self, c, bias: bool):
        super().__init__()
        self.heads, self.head_dim = c.heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden, c.heads * c.head_dim, bias=bias)
        self.k_proj = nn.Linear(c.hidden, c.heads * c.head_dim, bias=bias)
        self.v_proj = nn.Linear(c.hidden, c.heads * c.head_dim, bias=bias)
        self.o_proj = nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The query, key and value of h [B, T, hidden], each [B, heads, T, head_dim], from one fused product
        (`modules.fused_linear`)."""
        fused = fused_linear(self.__dict__.setdefault("_fused", {}), (self.q_proj, self.k_proj, self.v_proj))
        return tuple(self.split(x) for x in fused(h).chunk(3, dim=-1))

    def kv(self, states: torch.Tensor):
        return self.split(self.k_proj(states)), self.split(self.v_proj(states))

    def out(self, o: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class DecoderMLP(nn.Module):
    def __init__(self, hidden: int, inter: int, act: str):
        super().__init__()
        self.fc1 = nn.Linear(hidden, 2 * inter)
        self.fc2 = nn.Linear(inter, hidden)
        self.act = _ACT[act]

    def forward(self, x):
        value, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(self.act(gate) * value)


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = DecoderAttention(c, c.bias)
        self.encoder_attn = DecoderAttention(c, c.bias)
        self.mlp = DecoderMLP(c.hidden, c.intermediate, c.act)
        self.input_layernorm = nn.LayerNorm(c.hidden, bias=False)
        self.post_attention_layernorm = nn.LayerNorm(c.hidden, bias=False)
        self.final_layernorm = nn.LayerNorm(c.hidden, bias=False)


@dataclass
class DecoderState:
    """One decoding's caches: per layer the cross-attention keys and values (fixed) and the self-attention
    keys and values so far (buffers grown by each step, `modules.kv_append`: the first `position` filled)."""

    cross: list
    self_kv: list = field(default_factory=list)
    position: int = 0

    def cut(self, n: int) -> None:
        """Keeps the first n fed positions (a verified draft's rejected tail is dropped; the buffers keep their
        capacity and are written over)."""
        self.position = min(self.position, n)


class Decoder(nn.Module):
    def __init__(self, config: MoonshineStreamingConfig):
        super().__init__()
        c = config.decoder
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.layers))
        self.norm = nn.LayerNorm(c.hidden, bias=False)
        self.pos_emb = nn.Embedding(c.max_positions, config.encoder.hidden)
        self.proj = (nn.Linear(config.encoder.hidden, c.hidden, bias=False)
                     if config.encoder.hidden != c.hidden else nn.Identity())

    def adapt(self, enc: torch.Tensor, first: int = 0) -> torch.Tensor:
        """Encoder states [B, T, enc_hidden] of frames first.. -> the states cross-attention reads."""
        pos = torch.arange(first, first + enc.shape[1], device=enc.device)
        return self.proj(enc + self.pos_emb(pos))

    def cross_kv(self, adapted: torch.Tensor) -> list:
        """Per layer (keys, values) [B, heads, T, head_dim] of adapted states (per frame: slices concatenate)."""
        return [layer.encoder_attn.kv(adapted) for layer in self.layers]

    def step(self, ids: torch.Tensor, state: DecoderState, every: bool = False) -> torch.Tensor:
        """ids [B, L] at the state's next positions -> the last position's hidden state [B, hidden] (`every`: every
        position's, [B, L, hidden]; the self-attention caches grow by L)."""
        c = self.config
        x = self.embed_tokens(ids)
        n = ids.shape[1]
        pos = torch.arange(state.position, state.position + n, device=ids.device)
        cos, sin = rope_tables(pos, c.head_dim, c.rotary_factor, c.rope_theta)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        causal = None
        if n > 1:
            causal = torch.ones(n, state.position + n, dtype=torch.bool, device=ids.device).tril(state.position)
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            q, k, v = a.qkv(layer.input_layernorm(x))
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            if i == len(state.self_kv):
                state.self_kv.append(None)
            state.self_kv[i], k, v = kv_append(state.self_kv[i], state.position, k, v)
            x = x + a.out(F.scaled_dot_product_attention(q, k, v, attn_mask=causal))
            e = layer.encoder_attn
            h = layer.post_attention_layernorm(x)
            ck, cv = state.cross[i]
            x = x + e.out(F.scaled_dot_product_attention(e.split(e.q_proj(h)), ck, cv))
            x = x + layer.mlp(layer.final_layernorm(x))
        state.position += n
        return self.norm(x if every else x[:, -1])


class MoonshineStreamingModel(nn.Module):
    """Encoder + adapter + decoder + head."""

    def __init__(self, config: MoonshineStreamingConfig):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config.encoder)
        self.decoder = Decoder(config)
        self.proj_out = nn.Linear(config.decoder.hidden, config.decoder.vocab_size, bias=False)
        # samples per encoder frame (two stride-2 convolutions over 5 ms frames)
        self.frame_samples = 4 * config.encoder.frame_len

    def load_checkpoint(self, sd: dict) -> None:
        """Tensors under transformers' names (`model.` prefix kept); KeyError naming what is missing,
        unexpected or of another shape."""
        own = self.state_dict()
        sd = {(k[len("model."):] if k.startswith("model.") else k): v for k, v in sd.items()}
        if self.config.tie:
            sd["proj_out.weight"] = sd.get("decoder.embed_tokens.weight", sd.get("proj_out.weight"))
        missing = sorted(set(own) - set(sd))
        extra = sorted(set(sd) - set(own))
        if missing or extra:
            raise KeyError(f"checkpoint tensors missing: {missing[:5]}, unexpected: {extra[:5]}")
        for k, v in sd.items():
            if not v.is_floating_point():
                raise KeyError(f"checkpoint tensor {k} is {v.dtype}, not floating point")
            if tuple(v.shape) != tuple(own[k].shape):
                raise KeyError(f"checkpoint tensor {k} has shape {tuple(v.shape)}, the config gives "
                               f"{tuple(own[k].shape)}")
        self.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True, assign=True)

    def logits(self, ids: torch.Tensor, state: DecoderState, every: bool = False) -> torch.Tensor:
        return self.proj_out(self.decoder.step(ids, state, every)).float()

"""Moonshine's network (transformers' `MoonshineForConditionalGeneration`): a convolution stem over the raw waveform
(kernel 127 stride 64 without bias, tanh, GroupNorm over all channels and frames; kernel 7 stride 3, GELU; kernel 3
stride 2, GELU: one frame per 384 samples), pre-LN Transformer encoder layers (bias-free LayerNorms, partial
rotary embeddings on the first `rotary_dim` dimensions of each head with transformers' interleaved pairs, a GELU
MLP), a final LayerNorm; pre-LN decoder layers (causal self-attention with the same rotary embeddings, then
cross-attention without them, then a SwiGLU MLP: fc1 to twice the width, its second half gated by the activation,
times the first), a final LayerNorm and the head (tied to the token embedding unless the config unties them).

Attention heads are zero-padded to `padded_head_dim` as transformers pads them (`pad_head_dim_to_multiple_of`),
scaled by the unpadded head size. Module and parameter names are transformers' (`model.encoder.*`,
`model.decoder.*`, `proj_out.*`), so a checkpoint loads by name.

The decoder runs with a key-value cache (`DecoderState`): the self-attention keys and values grow by a step's
tokens; the cross-attention ones are computed once from the encoder states; `select(rows)` reorders every row
(beam search)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..modules import fused_linear, kv_append
from .config import MoonshineConfig

STRIDE = 64 * 3 * 2  # samples per encoder frame


def encoder_frames(samples: int) -> int:
    """Encoder frames of an input of `samples` samples (0 when the stem's kernels do not fit)."""
    n = (samples - 127) // 64 + 1 if samples >= 127 else 0
    n = (n - 7) // 3 + 1 if n >= 7 else 0
    return (n - 3) // 2 + 1 if n >= 3 else 0


def activation(name: str):
    if name == "gelu":
        return F.gelu
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name in ("silu", "swish"):
        return F.silu
    return F.relu


class Rotary(nn.Module):
    """transformers' partial rotary embedding (GLM style): frequencies theta^(-2i/d) for d = rotary_dim, each
    angle applied to the pair (2i, 2i+1) of the first 2 * ceil(d/2) dimensions."""

    def __init__(self, c: MoonshineConfig):
        super().__init__()
        d = c.rotary_dim
        self.register_buffer("inv_freq", 1.0 / (c.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float) / d)),
                             persistent=False)

    def forward(self, positions: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T] -> cos, sin [T, rotary width] (each angle repeated for its pair)."""
        freqs = positions[:, None].float() * self.inv_freq.float()
        return (freqs.cos().repeat_interleave(2, dim=-1).to(dtype),
                freqs.sin().repeat_interleave(2, dim=-1).to(dtype))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, head_dim]: its first cos.shape[-1] dimensions rotated pairwise, the rest as they are."""
    r = cos.shape[-1]
    xr, rest = x[..., :r], x[..., r:]
    pairs = xr.unflatten(-1, (-1, 2))
    turned = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return torch.cat([xr * cos + turned * sin, rest], dim=-1)


class Attention(nn.Module):
    def __init__(self, c: MoonshineConfig):
        super().__init__()
        inner = c.heads * c.head_dim
        self.heads, self.head_dim, self.pad = c.heads, c.head_dim, c.padded_head_dim - c.head_dim
        self.q_proj = nn.Linear(c.hidden, inner, bias=c.attention_bias)
        self.k_proj = nn.Linear(c.hidden, inner, bias=c.attention_bias)
        self.v_proj = nn.Linear(c.hidden, inner, bias=c.attention_bias)
        self.o_proj = nn.Linear(inner, c.hidden, bias=False)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)

    def qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The query, key and value of h [B, T, hidden], each [B, H, T, d], from one fused product
        (`modules.fused_linear`)."""
        fused = fused_linear(self.__dict__.setdefault("_fused", {}), (self.q_proj, self.k_proj, self.v_proj))
        return tuple(self.split(t) for t in fused(h).chunk(3, dim=-1))

    def padded(self, t: torch.Tensor) -> torch.Tensor:
        """t [..., d] with zeros up to the padded head size (transformers' `pad_head_dim_to_multiple_of`: zeros
        change no dot product, only the attention kernel's blocking)."""
        return F.pad(t, (0, self.pad)) if self.pad else t

    def attend(self, q, k, v, mask: Optional[torch.Tensor] = None, causal: bool = False,
               kv_padded: bool = False) -> torch.Tensor:
        """q [B, H, Tq, d], k, v [B, H, Tk, d] (already `padded` when kv_padded: a decoder's caches are kept so,
        padded once) -> [B, Tq, hidden] (after o_proj)."""
        if self.pad:
            q = self.padded(q)
            if not kv_padded:
                k, v = self.padded(k), self.padded(v)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                             scale=self.head_dim ** -0.5)
        if self.pad:
            out = out[..., :self.head_dim]
        return self.o_proj(out.transpose(1, 2).flatten(2))


class EncoderMLP(nn.Module):
    def __init__(self, c: MoonshineConfig):
        super().__init__()
        self.fc1 = nn.Linear(c.hidden, c.inner)
        self.fc2 = nn.Linear(c.inner, c.hidden)
        self.act = activation(c.encoder_act)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class DecoderMLP(nn.Module):
    def __init__(self, c: MoonshineConfig):
        super().__init__()
        self.fc1 = nn.Linear(c.hidden, 2 * c.inner)
        self.fc2 = nn.Linear(c.inner, c.hidden)
        self.act = activation(c.decoder_act)

    def forward(self, x):
        x, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(self.act(gate) * x)


def _norm(c: MoonshineConfig) -> nn.LayerNorm:
    return nn.LayerNorm(c.hidden, bias=False)


class EncoderLayer(nn.Module):
    def __init__(self, c: MoonshineConfig):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = EncoderMLP(c)
        self.input_layernorm = _norm(c)
        self.post_attention_layernorm = _norm(c)

    def forward(self, x, cos, sin):
        a = self.self_attn
        q, k, v = a.qkv(self.input_layernorm(x))
        x = x + a.attend(rotate(q, cos, sin), rotate(k, cos, sin), v)
        return x + self.mlp(self.post_attention_layernorm(x))


class Encoder(nn.Module):
    def __init__(self, c: MoonshineConfig):
        super().__init__()
        d = c.hidden
        self.conv1 = nn.Conv1d(1, d, kernel_size=127, stride=64, bias=False)
        self.conv2 = nn.Conv1d(d, 2 * d, kernel_size=7, stride=3)
        self.conv3 = nn.Conv1d(2 * d, d, kernel_size=3, stride=2)
        self.groupnorm = nn.GroupNorm(num_groups=1, num_channels=d, eps=1e-5)
        self.layers = nn.ModuleList([EncoderLayer(c) for _ in range(c.encoder_layers)])
        self.layer_norm = _norm(c)
        self.rotary = Rotary(c)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """audio [B, samples] (every row its own whole input: the GroupNorm spans all frames) -> [B, T, hidden]."""
        dtype = self.conv1.weight.dtype
        x = torch.tanh(self.conv1(audio.to(dtype)[:, None]))
        x = self.groupnorm(x)
        x = F.gelu(self.conv2(x))
        x = F.gelu(self.conv3(x)).transpose(1, 2)
        cos, sin = self.rotary(torch.arange(x.shape[1], device=x.device), x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.layer_norm(x)


class DecoderLayer(nn.Module):
    def __init__(self, c: MoonshineConfig):
        super().__init__()
        self.self_attn = Attention(c)
        self.encoder_attn = Attention(c)
        self.mlp = DecoderMLP(c)
        self.input_layernorm = _norm(c)
        self.post_attention_layernorm = _norm(c)
        self.final_layernorm = _norm(c)


@dataclass
class DecoderState:
    """One decode's cache (head size padded, `Attention.padded`): per layer the self-attention keys and values
    [rows, H, capacity, d], the first `length` positions filled (None before the first step; `append`), and the
    cross-attention ones [rows, H, S, d]; the cross-attention mask [rows, 1, 1, S] (None when every row attends
    to all S frames); the positions fed so far."""

    self_kv: list
    cross_kv: list
    mask: Optional[torch.Tensor]
    length: int = 0

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Adds a layer's new keys and values [rows, H, n, d] at position `length` -> all of them so far."""
        self.self_kv[layer], k, v = kv_append(self.self_kv[layer], self.length, k, v)
        return k, v

    def select(self, rows: torch.Tensor) -> None:
        """Keeps the given rows, in that order."""
        self.self_kv = [None if kv is None else (kv[0].index_select(0, rows), kv[1].index_select(0, rows))
                        for kv in self.self_kv]
        self.cross_kv = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.cross_kv]
        if self.mask is not None:
            self.mask = self.mask.index_select(0, rows)


class Decoder(nn.Module):
    def __init__(self, c: MoonshineConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden)
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c.decoder_layers)])
        self.norm = _norm(c)
        self.rotary = Rotary(c)

    def start(self, states: torch.Tensor, lengths: torch.Tensor) -> DecoderState:
        """A state over encoder states [B, S, hidden] whose rows hold lengths[b] valid frames."""
        cross = []
        for layer in self.layers:
            a = layer.encoder_attn
            cross.append((a.padded(a.split(a.k_proj(states))), a.padded(a.split(a.v_proj(states)))))
        s = states.shape[1]
        mask = None
        if bool((lengths < s).any()):
            mask = (torch.arange(s, device=states.device)[None, :] < lengths[:, None].to(states.device))[:, None, None]
        return DecoderState([None] * len(self.layers), cross, mask)

    def forward(self, ids: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """ids [rows, L] at the state's next positions -> the final hidden states [rows, L, hidden]."""
        x = self.embed_tokens(ids)
        n = ids.shape[1]
        cos, sin = self.rotary(torch.arange(state.length, state.length + n, device=ids.device), x.dtype)
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            q, k, v = a.qkv(layer.input_layernorm(x))
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            first = state.length == 0
            k, v = state.append(i, a.padded(k), a.padded(v))
            x = x + a.attend(q, k, v, causal=n > 1 and first, kv_padded=True)
            c = layer.encoder_attn
            h = layer.post_attention_layernorm(x)
            ck, cv = state.cross_kv[i]
            x = x + c.attend(c.split(c.q_proj(h)), ck, cv, mask=state.mask, kv_padded=True)
            x = x + layer.mlp(layer.final_layernorm(x))
        state.length += n
        return self.norm(x)


class MoonshineBody(nn.Module):
    def __init__(self, c: MoonshineConfig):
        super().__init__()
        self.encoder = Encoder(c)
        self.decoder = Decoder(c)


class MoonshineModel(nn.Module):
    """Encoder + decoder + head, under transformers' names."""

    def __init__(self, config: MoonshineConfig):
        super().__init__()
        self.config = config
        self.model = MoonshineBody(config)
        self.proj_out = nn.Linear(config.hidden, config.vocab_size, bias=False)

    def load_checkpoint(self, sd: dict) -> None:
        """Tensors under transformers' names; KeyError naming what is missing, unexpected or of another shape.
        A tied head takes the token embedding (a stored head weight is replaced, as transformers ties it)."""
        own = dict(sd)
        emb = own.get("model.decoder.embed_tokens.weight")
        if self.config.tie:
            own.pop("proj_out.weight", None)
            if emb is not None:
                own["proj_out.weight"] = emb
        expected = self.state_dict()
        missing = [k for k in expected if k not in own]
        unexpected = [k for k in own if k not in expected]
        if missing or unexpected:
            raise KeyError("checkpoint does not match the config: "
                           + (f"missing {missing[:5]} " if missing else "")
                           + (f"unexpected {unexpected[:5]}" if unexpected else ""))
        for k, v in own.items():
            if tuple(v.shape) != tuple(expected[k].shape):
                raise KeyError(f"checkpoint tensor {k} has shape {tuple(v.shape)}, the config expects "
                               f"{tuple(expected[k].shape)}")
            if not v.is_floating_point():
                raise KeyError(f"checkpoint tensor {k} is {v.dtype}, not floating point")
        self.load_state_dict({k: v.float() for k, v in own.items()}, strict=True, assign=True)
        if self.config.tie:
            self.proj_out.weight = self.model.decoder.embed_tokens.weight
        for name in ("encoder", "decoder"):
            rot = getattr(self.model, name).rotary
            if rot.inv_freq.is_meta:
                rot.inv_freq = Rotary(self.config).inv_freq

    @torch.no_grad()
    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        return self.model.encoder(audio)

    @torch.no_grad()
    def start(self, states: torch.Tensor, lengths: torch.Tensor) -> DecoderState:
        return self.model.decoder.start(states, lengths)

    @torch.no_grad()
    def step(self, ids: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """Feeds ids [rows, L] -> the head's logits of the last position [rows, vocab], float32."""
        return self.proj_out(self.model.decoder(ids, state)[:, -1]).float()

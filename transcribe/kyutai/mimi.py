"""The encoder side of the Mimi codec (transformers' `MimiModel.encode`): 24 kHz audio -> codebook ids at 12.5 Hz.

SEANet (causal convolutions, ELU residual blocks, strided downsampling to 25 Hz) -> a transformer (RoPE, LayerNorm,
layer scale, GELU MLP; attention within a sliding window of frames) -> a replicate-padded stride-2 convolution to
12.5 Hz -> the split residual vector quantizer (a semantic RVQ and an acoustic RVQ, each with its input projection,
nearest codebook entry by Euclidean distance, as transformers' `torch.cdist` + argmin).

One code path for offline and live audio: `encode(samples, state)` takes any whole number of frames (1920 samples
each) and carries the causal convolutions' left context (their padding cache: the first call pads with zeros, or
with the first sample for replicate padding, as transformers does) and the transformer's keys and values of the last
`sliding_window - 1` frames, so that audio cut into frames anywhere gives the codes of the whole, and the state stays
the same size however long the stream runs."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .config import MimiConfig


class CausalConv(nn.Module):
    """transformers' MimiConv1d (causal): the left padding is the carried context, `kernel - stride` samples."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, dilation: int = 1, bias: bool = True,
                 pad_mode: str = "constant"):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, stride, dilation=dilation, bias=bias)
        self.stride = stride
        self.context = (kernel - 1) * dilation + 1 - stride
        self.pad_mode = pad_mode

    def forward(self, x: torch.Tensor, state: list, i: int) -> torch.Tensor:
        prev = state[i]
        if prev is None:
            prev = (x[..., :1].expand(-1, -1, self.context) if self.pad_mode == "replicate"
                    else x.new_zeros(x.shape[0], x.shape[1], self.context))
        x = torch.cat([prev, x], dim=-1)
        # a copy: a view would keep the whole padded input of every layer alive until the next call
        state[i] = x[..., x.shape[-1] - self.context:].clone() if self.context > 0 else x[..., :0].clone()
        return self.conv(x)


class ResBlock(nn.Module):
    def __init__(self, cfg: MimiConfig, dim: int, dilation: int):
        super().__init__()
        hidden = dim // cfg.compress
        self.block = nn.ModuleList([
            nn.ELU(), CausalConv(dim, hidden, cfg.residual_kernel_size, dilation=dilation, pad_mode=cfg.pad_mode),
            nn.ELU(), CausalConv(hidden, dim, 1, pad_mode=cfg.pad_mode)])
        self.shortcut = CausalConv(dim, dim, 1, pad_mode=cfg.pad_mode) if cfg.use_conv_shortcut else None


class SEANet(nn.Module):
    """The convolutional encoder; `convs` lists its causal convolutions in order (their state slots)."""

    def __init__(self, cfg: MimiConfig):
        super().__init__()
        layers: list = [CausalConv(1, cfg.num_filters, cfg.kernel_size, pad_mode=cfg.pad_mode)]
        scale = 1
        for ratio in cfg.ratios:
            dim = scale * cfg.num_filters
            for j in range(cfg.num_residual_layers):
                layers.append(ResBlock(cfg, dim, cfg.dilation_growth_rate ** j))
            layers.append(nn.ELU())
            layers.append(CausalConv(dim, dim * 2, ratio * 2, stride=ratio, pad_mode=cfg.pad_mode))
            scale *= 2
        layers.append(nn.ELU())
        layers.append(CausalConv(scale * cfg.num_filters, cfg.hidden_size, cfg.last_kernel_size, pad_mode=cfg.pad_mode))
        self.layers = nn.ModuleList(layers)
        self.convs: list[CausalConv] = []
        for layer in layers:
            if isinstance(layer, CausalConv):
                self.convs.append(layer)
            elif isinstance(layer, ResBlock):
                self.convs += [m for m in layer.block if isinstance(m, CausalConv)]
                if layer.shortcut is not None:
                    self.convs.append(layer.shortcut)
        self._slot = {id(c): i for i, c in enumerate(self.convs)}

    def forward(self, x: torch.Tensor, state: list) -> torch.Tensor:
        slot = self._slot
        for layer in self.layers:
            if isinstance(layer, CausalConv):
                x = layer(x, state, slot[id(layer)])
            elif isinstance(layer, ResBlock):
                h = x
                for m in layer.block:
                    h = m(h, state, slot[id(m)]) if isinstance(m, CausalConv) else m(h)
                skip = x if layer.shortcut is None else layer.shortcut(x, state, slot[id(layer.shortcut)])
                x = skip + h
            else:
                x = layer(x)
        return x


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """transformers' rotate-half RoPE; x (batch, heads, time, head_dim), cos / sin (time, head_dim)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def rope_tables(inv_freq: torch.Tensor, start: int, n: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    pos = torch.arange(start, start + n, dtype=torch.float32, device=inv_freq.device)
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def window_attention(q, k, v, n_past: int, window: int, scale: float) -> torch.Tensor:
    """q (B, H, T, D) over keys (B, Hkv, n_past + T, D): query t (at n_past + t) sees keys j with
    n_past + t - window < j <= n_past + t."""
    t, s = q.shape[2], k.shape[2]
    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    qi = torch.arange(t, device=q.device)[:, None] + n_past
    kj = torch.arange(s, device=q.device)[None, :]
    mask = (kj <= qi) & (qi - kj < window)
    if t == 1 and bool(mask.all()):
        mask = None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def cached_self_attention(layer, h: torch.Tensor, cos, sin, kv: list, i: int, window: int) -> torch.Tensor:
    """Layer `layer`'s (q_proj, k_proj, v_proj, o_proj, heads, kv_heads, head_dim) rotary self-attention of h
    (B, T, hidden) over its sliding window, the codec's transformer's and the LM's alike: kv[i] holds the layer's
    last window - 1 keys and values (None at first) and is replaced by the new ones. Returns o_proj's output."""
    b, t, _ = h.shape
    q = layer.q_proj(h).view(b, t, layer.heads, layer.head_dim).transpose(1, 2)
    k = layer.k_proj(h).view(b, t, layer.kv_heads, layer.head_dim).transpose(1, 2)
    v = layer.v_proj(h).view(b, t, layer.kv_heads, layer.head_dim).transpose(1, 2)
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    past = kv[i]
    n_past = 0
    if past is not None:
        n_past = past[0].shape[2]
        k = torch.cat([past[0], k], dim=2)
        v = torch.cat([past[1], v], dim=2)
    keep = window - 1
    kv[i] = (k[:, :, max(0, k.shape[2] - keep):], v[:, :, max(0, v.shape[2] - keep):])
    a = window_attention(q, k, v, n_past, window, layer.head_dim ** -0.5)
    return layer.o_proj(a.transpose(1, 2).reshape(b, t, -1))


class MimiLayer(nn.Module):
    def __init__(self, cfg: MimiConfig):
        super().__init__()
        d, hd = cfg.hidden_size, cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, hd
        b = cfg.attention_bias
        self.q_proj = nn.Linear(d, cfg.heads * hd, bias=b)
        self.k_proj = nn.Linear(d, cfg.kv_heads * hd, bias=b)
        self.v_proj = nn.Linear(d, cfg.kv_heads * hd, bias=b)
        self.o_proj = nn.Linear(cfg.heads * hd, d, bias=b)
        self.fc1 = nn.Linear(d, cfg.intermediate_size, bias=False)
        self.fc2 = nn.Linear(cfg.intermediate_size, d, bias=False)
        self.norm1 = nn.LayerNorm(d, eps=cfg.norm_eps)
        self.norm2 = nn.LayerNorm(d, eps=cfg.norm_eps)
        self.scale1 = nn.Parameter(torch.ones(d))
        self.scale2 = nn.Parameter(torch.ones(d))


class MimiTransformer(nn.Module):
    def __init__(self, cfg: MimiConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList([MimiLayer(cfg) for _ in range(cfg.layers)])
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x: torch.Tensor, cache: dict) -> torch.Tensor:
        """x (B, T, hidden) at positions cache["pos"]...; cache["kv"][i]: layer i's last window - 1 keys / values."""
        cfg = self.cfg
        t = x.shape[1]
        pos = cache["pos"]
        cos, sin = rope_tables(self.inv_freq, pos, t, x.dtype)
        for i, layer in enumerate(self.layers):
            x = x + layer.scale1 * cached_self_attention(layer, layer.norm1(x), cos, sin, cache["kv"], i,
                                                         cfg.sliding_window)
            h = layer.norm2(x)
            x = x + layer.scale2 * layer.fc2(F.gelu(layer.fc1(h)))
        cache["pos"] = pos + t
        return x


class RVQ(nn.Module):
    """One residual vector quantizer: its input projection and codebooks (embed_sum / cluster_usage)."""

    def __init__(self, cfg: MimiConfig, n: int):
        super().__init__()
        self.input_proj = (nn.Linear(cfg.hidden_size, cfg.vq_dim, bias=False) if cfg.vq_dim != cfg.hidden_size
                           else None)
        self.register_buffer("codebooks", torch.zeros(n, cfg.codebook_size, cfg.codebook_dim))

    def encode(self, latents: torch.Tensor, n: int) -> torch.Tensor:
        """latents (T, hidden) -> codes (n, T): each codebook's nearest entry (transformers' `torch.cdist` + argmin)."""
        x = latents if self.input_proj is None else self.input_proj(latents)
        out = []
        for cb, padded in zip(self.codebooks[:n], self._padded_codebooks()):
            idx = _cdist(x[None].float(), padded)[0].argmin(dim=-1)
            x = x - cb[idx]
            out.append(idx)
        return torch.stack(out)

    def _padded_codebooks(self) -> list:
        """Per codebook (entries, 1, squared norm) side by side [1, size, dim + 2] in float32: the codebook's half
        of the product `_cdist` takes, made once (torch.cdist makes it again at every call: half a live frame's
        codec time)."""
        key = (self.codebooks.data_ptr(), self.codebooks.dtype, self.codebooks.device)
        held = self.__dict__.get("_padded")
        if held is None or held[0] != key:
            cbs = self.codebooks.detach().float()
            padded = torch.cat([cbs, torch.ones_like(cbs[..., :1]), cbs.pow(2).sum(-1, keepdim=True)], dim=-1)
            held = (key, [p[None] for p in padded])
            self.__dict__["_padded"] = held
        return held[1]


def _cdist(x: torch.Tensor, padded: torch.Tensor) -> torch.Tensor:
    """torch.cdist(x, cb, p=2) as ATen computes it for these sizes (its matrix-product form: [-2x, |x|^2, 1] against
    [cb, 1, |cb|^2], clamped at zero, square root), with the codebook's half given (`RVQ._padded_codebooks`): the same
    operations on the same operands, so the same distances. x [1, T, dim] -> [1, T, size]."""
    if x.shape[1] <= 25 and padded.shape[1] <= 25:  # ATen's direct form for small sizes: torch.cdist itself
        return torch.cdist(x, padded[..., :-2], p=2)
    x_ = torch.cat([x.mul(-2), x.pow(2).sum(-1, keepdim=True), torch.ones_like(x[..., :1])], dim=-1)
    return x_.matmul(padded.mT).clamp_min_(0).sqrt_()


class MimiEncoder(nn.Module):
    def __init__(self, cfg: MimiConfig):
        super().__init__()
        self.cfg = cfg
        self.seanet = SEANet(cfg)
        self.transformer = MimiTransformer(cfg)
        self.downsample = CausalConv(cfg.hidden_size, cfg.hidden_size, 2 * cfg.latent_stride, cfg.latent_stride,
                                     bias=False, pad_mode="replicate")
        self.semantic = RVQ(cfg, cfg.num_semantic_quantizers)
        self.acoustic = RVQ(cfg, cfg.num_quantizers - cfg.num_semantic_quantizers)

    def new_state(self) -> dict:
        return {"convs": [None] * (len(self.seanet.convs) + 1),
                "transformer": {"pos": 0, "kv": [None] * self.cfg.layers}}

    def encode(self, samples: torch.Tensor, state: Optional[dict], num_codebooks: int) -> tuple[torch.Tensor, dict]:
        """samples: a whole number of frames (1-D float32) -> (codes (frames, num_codebooks), the state after them)."""
        if state is None:
            state = self.new_state()
        if samples.numel() == 0:
            return torch.zeros(0, num_codebooks, dtype=torch.long, device=samples.device), state
        convs = state["convs"]
        x = self.seanet(samples.view(1, 1, -1), convs)
        x = self.transformer(x.transpose(1, 2), state["transformer"]).transpose(1, 2)
        lat = self.downsample(x, convs, len(convs) - 1)[0].T  # frames x hidden
        nsem = self.cfg.num_semantic_quantizers
        codes = self.semantic.encode(lat, nsem)
        if num_codebooks > nsem:
            codes = torch.cat([codes, self.acoustic.encode(lat, num_codebooks - nsem)], dim=0)
        return codes.T.contiguous(), state

"""Cache-aware streaming FastConformer: the encoder one chunk at a time, as NeMo's
`cache_aware_stream_step` computes it.

A cache-aware model (causal downsampling, `chunked_limited` attention, causal depthwise
convolutions) sees, at each step, one attention chunk of `right + 1` encoder frames plus what it
keeps of the past:
- the pre-encode cache: the last `factor + 1` feature frames before the chunk, run through the
  subsampling again so its causal convolutions see their left context (the first
  `drop_extra_pre_encoded` output frames, which belong to the previous chunk, are dropped);
- per layer, the last-channel cache: the attention's keys and values of the last `left` frames,
  which the chunk's queries attend to (NeMo keeps the attention input and projects it again at
  every chunk; the projections are kept here, see `EncoderCache`);
- per layer, the last-time cache: the depthwise convolution's input of the last `kernel - 1`
  frames (its left padding).

`Schedule` is NeMo's `setup_streaming_params` for one lookahead: how many feature frames each
chunk takes (the first chunk has no pre-encode cache, hence a different size) and how many encoder
frames it yields. `EncoderCache` holds the caches of one stream; `stream_step` runs one chunk.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from ..nemo.conformer import ConformerEncoder, ConformerLayer, _MASK_VALUE, _rel_shift_block, sinusoid_table


@dataclass(frozen=True)
class Schedule:
    """NeMo's streaming_cfg for one lookahead (feature frames unless said otherwise)."""

    att_context_size: tuple[int, int]
    chunk_size: tuple[int, int]  # feature frames of the first chunk, of every later chunk
    shift_size: tuple[int, int]
    pre_encode_cache_size: tuple[int, int]  # feature frames prepended: first chunk, later chunks
    drop_extra_pre_encoded: int  # encoder frames dropped after subsampling (later chunks)
    valid_out_len: int  # encoder frames a chunk yields
    last_channel_cache_size: int  # encoder frames of attention cache
    conv_cache_size: int  # frames of depthwise convolution cache
    sampling_frames: tuple[int, int]  # the fewest feature frames that give an output: first, later

    @property
    def lookahead_frames(self) -> int:
        return self.att_context_size[1]

    def to_dict(self) -> dict:
        return {
            "chunk_size": list(self.chunk_size), "shift_size": list(self.shift_size),
            "cache_drop_size": 0, "last_channel_cache_size": self.last_channel_cache_size,
            "valid_out_len": self.valid_out_len, "pre_encode_cache_size": list(self.pre_encode_cache_size),
            "drop_extra_pre_encoded": self.drop_extra_pre_encoded,
        }


def check_streaming(encoder: ConformerEncoder) -> Optional[str]:
    """None if the encoder is cache-aware, else why not (in words)."""
    if not encoder.causal_downsampling:
        return "its subsampling is not causal (causal_downsampling: false)"
    if encoder.att_context_style != "chunked_limited":
        return f"its attention is not chunked (att_context_style: {encoder.att_context_style})"
    if encoder.self_attention_model != "rel_pos":
        return f"its attention is {encoder.self_attention_model}, not rel_pos"
    if any(c[1] < 0 for c in encoder.att_context_sizes):
        return "its attention has an unlimited right context"
    return None


def schedule(encoder: ConformerEncoder, att_context_size: Optional[Sequence[int]] = None,
             max_context: int = 10000) -> Schedule:
    """The streaming schedule for one of the encoder's lookaheads (the default when None)."""
    why = check_streaming(encoder)
    if why is not None:
        raise ValueError(f"not a cache-aware streaming model: {why}")
    att = tuple(int(v) for v in (att_context_size or encoder.att_context_size))
    if list(att) not in encoder.att_context_sizes:
        raise ValueError(f"att_context_size {list(att)} is not one of this model's lookaheads "
                         f"{encoder.att_context_sizes}")
    f = encoder.subsampling_factor
    lookahead = att[1]
    sampling = (1, f)
    chunk = (sampling[0] + f * lookahead, sampling[1] + f * lookahead)
    shift = chunk  # chunked_limited: nothing of a chunk is recomputed
    valid_out_len = (shift[1] - sampling[1]) // f + 1
    pre_cache = (0, f + 1)
    drop = 1 + (pre_cache[1] - 1) // f if pre_cache[1] >= 1 else 0
    left = att[0] if att[0] >= 0 else max_context
    conv_cache = encoder.layers[0].conv.context[0]
    return Schedule(att, chunk, shift, pre_cache, drop, valid_out_len, left, conv_cache, sampling)


class EncoderCache:
    """The caches of one stream (batch of one).

    NeMo's last-channel cache holds each layer's attention input (after its LayerNorm) for the
    last C frames and projects it to keys and values again at every chunk; here the projected
    keys and values are kept instead ([L, 1, heads, C, d_k] each): the same numbers, computed once
    per frame instead of once per frame per chunk (C / chunk times less work: 35x at 160 ms). The
    last-time cache is NeMo's: the depthwise convolution's input of the last K-1 frames
    [L, 1, D, K-1]. `length`: how many of the last C frames are valid (from the end). `positions`
    holds each layer's projected relative-position encodings per chunk length (they depend only
    on the schedule)."""

    def __init__(self, encoder: ConformerEncoder, sched: Schedule, device=None, dtype=torch.float32):
        n = len(encoder.layers)
        att = encoder.layers[0].self_attn
        c = sched.last_channel_cache_size
        # Keys/values live in a buffer with room for several chunks after the C cached frames: a
        # chunk writes its own after them and the window [start, start + C + t) is what it attends
        # to; the last C frames move back to the front only when the room is used up.
        self.capacity = 2 * c + 4 * (sched.valid_out_len + sched.drop_extra_pre_encoded + 1)
        self.kbuf = torch.zeros(n, 1, att.h, self.capacity, att.d_k, device=device, dtype=dtype)
        self.vbuf = torch.zeros_like(self.kbuf)
        self.start = 0
        self.window = c
        self.last_time = torch.zeros(n, 1, encoder.d_model, sched.conv_cache_size, device=device, dtype=dtype)
        self.length = 0
        self.steps = 0  # chunks run
        self.positions: dict[int, list[torch.Tensor]] = {}

    @property
    def keys(self) -> torch.Tensor:
        """The cached keys [L, 1, heads, C, d_k] (oldest first)."""
        return self.kbuf[:, :, :, self.start:self.start + self.window]

    @property
    def values(self) -> torch.Tensor:
        return self.vbuf[:, :, :, self.start:self.start + self.window]

    def make_room(self, t: int) -> None:
        """Makes sure t frames fit after the window."""
        if self.start + self.window + t > self.capacity:
            if self.window + t > self.capacity:
                grow = self.window + t - self.capacity
                pad = torch.zeros(*self.kbuf.shape[:3], grow, self.kbuf.shape[4], dtype=self.kbuf.dtype,
                                  device=self.kbuf.device)
                self.kbuf = torch.cat([self.kbuf, pad], dim=3)
                self.vbuf = torch.cat([self.vbuf, pad.clone()], dim=3)
                self.capacity += grow
            w = self.window
            self.kbuf[:, :, :, :w] = self.kbuf[:, :, :, self.start:self.start + w].clone()
            self.vbuf[:, :, :, :w] = self.vbuf[:, :, :, self.start:self.start + w].clone()
            self.start = 0

    def projected_positions(self, encoder: ConformerEncoder, t: int, c: int, dtype) -> list[torch.Tensor]:
        """Per layer, linear_pos of the encodings of relative positions c+t-1 ... -(t-1): [h, c+2t-1, d_k]."""
        got = self.positions.get(t)
        if got is None:
            dev = self.kbuf.device
            rel = torch.arange(c + t - 1, -t, -1, dtype=torch.float32, device=dev)
            pos_emb = sinusoid_table(rel, encoder.d_model).to(dtype)
            got = []
            for layer in encoder.layers:
                att = layer.self_attn
                got.append(att.linear_pos(pos_emb).view(-1, att.h, att.d_k).transpose(0, 1).contiguous())
            if len(self.positions) > 4:  # a stream sees two or three chunk lengths
                self.positions.clear()
            self.positions[t] = got
        return got


@torch.inference_mode()
def stream_step(
    encoder: ConformerEncoder,
    feats: torch.Tensor,
    cache: EncoderCache,
    sched: Schedule,
    *,
    drop_extra_pre_encoded: int,
    keep_all_outputs: bool = False,
    length: Optional[int] = None,
) -> torch.Tensor:
    """One chunk: feats [n_mels, N] (pre-encode cache frames included) -> encoder output
    [d_model, T] for the chunk's new frames. Updates `cache` in place.

    length: valid feature frames of `feats` (all by default)."""
    dtype = next(encoder.parameters()).dtype
    n = feats.shape[-1] if length is None else int(length)
    x, lens = encoder.pre_encode(feats.to(dtype).t()[None], torch.tensor([n], device=feats.device))
    if drop_extra_pre_encoded > 0:
        x = x[:, drop_extra_pre_encoded:]
        lens = torch.clamp(lens - drop_extra_pre_encoded, min=0)
    if encoder.xscale is not None:
        x = x * encoder.xscale
    t = x.shape[1]
    valid = int(lens[0])
    c = sched.last_channel_cache_size
    k = c + t
    dev = x.device
    # Keys: c cache frames then the t new ones. A key is valid if it is one of the cache's last
    # `cache.length` frames or a new frame before `valid`; queries are the new frames.
    pos = torch.arange(k, device=dev)
    key_ok = (pos >= c - cache.length) & (pos < c + valid)
    q_ok = key_ok[c:]
    chunk = sched.att_context_size[1] + 1
    left_chunks = sched.att_context_size[0] // chunk if sched.att_context_size[0] >= 0 else 10000
    ci = torch.div(pos, chunk, rounding_mode="trunc")
    d = ci[c:, None] - ci[None, :]
    allowed = (d >= 0) & (d <= left_chunks) & key_ok[None, :] & q_ok[:, None]
    blocked = ~allowed  # [t, k]
    pad = ~q_ok  # [t]
    # Relative positions (c + r) - j for query r, key j: from c+t-1 down to -(t-1), projected per layer.
    positions = cache.projected_positions(encoder, t, c, dtype)
    cache.make_room(t)
    attend = _ChunkAttention(blocked, pad, cache.start, cache.start + c, cache.start + c + t)
    new_time = []
    for i, layer in enumerate(encoder.layers):
        x, tm = _layer_step(layer, x, positions[i], attend, cache.kbuf[i], cache.vbuf[i], cache.last_time[i])
        new_time.append(tm)
    cache.start += t
    cache.last_time = torch.stack(new_time)
    cache.length = min(cache.length + t, c)
    cache.steps += 1
    out = x[0].t()  # [D, t]
    n_out = valid if keep_all_outputs else min(valid, sched.valid_out_len)
    return out[:, :n_out]


@dataclass(frozen=True)
class _ChunkAttention:
    """What every layer's attention on one chunk shares: `blocked` [t, k] query-key pairs and
    `pad` [t] padding queries; in the key and value buffers the cached keys and values are at
    [lo, mid), the chunk's own at [mid, hi)."""

    blocked: torch.Tensor
    pad: torch.Tensor
    lo: int
    mid: int
    hi: int


def _layer_step(layer: ConformerLayer, x, p, attend: _ChunkAttention, kbuf, vbuf, cache_time):
    """One conformer layer on a chunk. kbuf/vbuf [1, heads, capacity, d_k]: the chunk's keys and
    values are written at [attend.mid, attend.hi) and all of [attend.lo, attend.hi) attended."""
    blocked, pad, lo, mid, hi = attend.blocked, attend.pad, attend.lo, attend.mid, attend.hi
    x = x + 0.5 * layer.feed_forward1(layer.norm_feed_forward1(x))
    att = layer.self_attn
    h = layer.norm_self_att(x)
    b, t, _ = h.shape
    kbuf[:, :, mid:hi] = att._heads(att.linear_k(h))
    vbuf[:, :, mid:hi] = att._heads(att.linear_v(h))
    q = att._heads(att.linear_q(h))
    scale = 1.0 / math.sqrt(att.d_k)
    qu = q + att.pos_bias_u[None, :, None, :]
    qv = (q + att.pos_bias_v[None, :, None, :]) * scale
    bd = _rel_shift_block(torch.matmul(qv, p.transpose(-2, -1)), hi - lo)
    bd = bd.masked_fill(blocked[None, None], _MASK_VALUE)
    out = F.scaled_dot_product_attention(qu, kbuf[:, :, lo:hi], vbuf[:, :, lo:hi], attn_mask=bd)
    out = out.masked_fill(pad[None, None, :, None], 0.0)
    x = x + att.linear_out(out.transpose(1, 2).reshape(b, t, att.h * att.d_k))
    conv_out, next_time = _conv_step(layer.conv, layer.norm_conv(x), pad, cache_time)
    x = x + conv_out
    x = x + 0.5 * layer.feed_forward2(layer.norm_feed_forward2(x))
    return layer.norm_out(x), next_time


def _conv_step(conv, x, pad, cache_time):
    """The convolution module with the depthwise convolution's left padding taken from the cache."""
    x = F.glu(conv.pointwise(conv.pointwise_conv1, x), dim=-1)
    x = x.masked_fill(pad[None, :, None], 0.0)
    x = x.transpose(1, 2)  # [1, D, t]
    left, right = conv.context
    full = torch.cat([cache_time, F.pad(x, (0, right)) if right else x], dim=-1)
    next_time = full[:, :, full.shape[-1] - left:] if left else cache_time  # as NeMo: after the right padding
    x = F.conv1d(full, conv.depthwise_conv.weight, conv.depthwise_conv.bias, groups=x.shape[1])
    if conv.norm_kind == "layer_norm":
        x = conv.batch_norm(x.transpose(1, 2))
    else:
        x = conv.batch_norm(x).transpose(1, 2)
    return conv.pointwise(conv.pointwise_conv2, F.silu(x)), next_time


class Chunker:
    """Forms NeMo's chunks (CacheAwareStreamingAudioBuffer) from feature frames as they arrive:
    the first chunk takes `chunk_size[0]` frames with no pre-encode cache; every later one
    `chunk_size[1]` new frames behind the last `pre_encode_cache_size[1]` frames before them
    (zeros where the stream has fewer). `finish()` gives the partial last chunk, if any.

    Holds at most one chunk and its cache of frames."""

    def __init__(self, sched: Schedule, n_mels: int):
        self.sched = sched
        self.n_mels = n_mels
        self.reset()

    def reset(self) -> None:
        self._pending = torch.zeros(self.n_mels, 0)
        self._cache = torch.zeros(self.n_mels, 0)
        self.chunks = 0

    def _need(self) -> int:
        return self.sched.chunk_size[0] if self.chunks == 0 else self.sched.chunk_size[1]

    def push(self, frames: torch.Tensor) -> list[tuple[torch.Tensor, int]]:
        """frames [n_mels, k] -> the chunks now complete, as (feats with cache, drop_extra_pre_encoded)."""
        if frames.shape[-1]:
            self._pending = torch.cat([self._pending, frames.to(self._pending.dtype)], dim=-1)
        out = []
        while self._pending.shape[-1] >= self._need():
            n = self._need()
            out.append(self._take(n))
        return out

    def finish(self, pad_frames: int = 0, drop_short: bool = False) -> Optional[tuple[torch.Tensor, int]]:
        """The last, partial chunk as (feats, drop_extra_pre_encoded); None if no frame is left.

        pad_frames: zero frames appended to the stream first. NeMo's buffer takes the whole-signal
        features including the frames past the valid length (the centred STFT's last frame, set
        to the pad value 0) and counts them as valid; passing that count here reproduces it.
        drop_short: drop a last chunk of fewer frames than `sampling_frames`, as NeMo's buffer
        does (by default it is run, so no audio is left out)."""
        if pad_frames > 0:
            self._pending = torch.cat([self._pending, torch.zeros(self.n_mels, pad_frames, dtype=self._pending.dtype)], -1)
        n = self._pending.shape[-1]
        if n == 0:
            return None
        least = self.sched.sampling_frames[0] if self.chunks == 0 else self.sched.sampling_frames[1]
        if drop_short and n < least:
            self._pending = self._pending[:, :0]
            return None
        return self._take(n)

    def _take(self, n: int) -> tuple[torch.Tensor, int]:
        new = self._pending[:, :n]
        self._pending = self._pending[:, n:]
        if self.chunks == 0:
            pre = self.sched.pre_encode_cache_size[0]
            drop = 0
        else:
            pre = self.sched.pre_encode_cache_size[1]
            drop = self.sched.drop_extra_pre_encoded
        cache = self._cache[:, max(0, self._cache.shape[-1] - pre):] if pre else self._cache[:, :0]
        if cache.shape[-1] < pre:
            cache = torch.cat([torch.zeros(self.n_mels, pre - cache.shape[-1], dtype=new.dtype), cache], dim=-1)
        feats = torch.cat([cache, new], dim=-1)
        keep = self.sched.pre_encode_cache_size[1]
        self._cache = torch.cat([self._cache, new], dim=-1)[:, -keep:] if keep else self._cache[:, :0]
        self.chunks += 1
        return feats, drop

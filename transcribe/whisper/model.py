"""Whisper encoder and decoder (openai-whisper's architecture and parameter names), inference only.

- Attention runs through scaled-dot-product attention.
- The decoder's self-attention keys and values live in a `KVCache` that grows by the new tokens
  of each step; a beam reorder gathers only this cache.
- Cross-attention keys and values are computed once per 30 s window (`cross_kv`) and shared by
  every beam: a cache's rows map to audio rows through `KVCache.audio_index`.
- Rows whose prompts differ in length share one cache through left padding (`KVCache.pad`): each
  row's keys start after its padding slots, which its queries never see, and its tokens keep
  their own positions (batched decoding of several inputs, transcribe/whisper/lockstep.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..modules import embedding_weight


@dataclass
class WhisperDims:
    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    @classmethod
    def from_dict(cls, d: dict) -> "WhisperDims":
        return cls(**{f.name: int(d[f.name]) for f in fields(cls)})


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """Whisper's encoder position table: sines in the first half of the channels, cosines after."""
    if channels % 2:
        raise ValueError("channels must be even")
    step = math.log(max_timescale) / (channels // 2 - 1)
    # Always computed on the CPU, even while a model is built on the meta device: meta tensors
    # would run through torch's Python decompositions (and import torch._dynamo, 1.5 s).
    inv = torch.exp(-step * torch.arange(channels // 2, dtype=torch.float32, device="cpu"))
    t = torch.arange(length, dtype=torch.float32, device="cpu")[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


class LayerNorm(nn.LayerNorm):
    """LayerNorm computed in float32 whatever the weights' dtype, as openai-whisper does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(
            x.float(), self.normalized_shape, self.weight.float(), self.bias.float(), self.eps
        ).type(x.dtype)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        return x.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)

    def kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split(self.key(x)), self.split(self.value(x))

    def project(self, x: torch.Tensor) -> tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Self-attention's (queries or None, keys, values) of x: here the keys and values (the
        queries are made by `attend`; the int8 form, transcribe/whisper/int8.py, makes all three in
        one fused projection)."""
        return (None, *self.kv(x))

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal_from: Optional[int],
               mask: Optional[torch.Tensor] = None, q: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Queries from x (or `q`, when made already) attend to k, v. causal_from: the position of
        x's first row among the keys (self-attention), or None (no mask). mask: instead, the keys
        each query sees, [B, 1, n, T] (True: seen)."""
        if q is None:
            q = self.split(self.query(x))
        n = q.shape[2]
        if mask is None and causal_from is not None and n > 1:
            # Row i (position causal_from + i) sees keys 0 .. causal_from + i.
            kpos = torch.arange(k.shape[2], device=x.device)
            qpos = causal_from + torch.arange(n, device=x.device)
            mask = kpos[None, :] <= qpos[:, None]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        b, h, t, d = o.shape
        return self.out(o.transpose(1, 2).reshape(b, t, h * d).to(x.dtype))

    def attend_prefixed(self, x: torch.Tensor, q: Optional[torch.Tensor], pk: torch.Tensor, pv: torch.Tensor,
                        k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """One new query per row (x [R, 1, C]) attends to keys shared by every row (pk, pv
        [1, h, P, d], read once for all rows) followed by the row's own (k, v [R, h, S, d], the
        new token's last): one softmax over both."""
        if q is None:
            q = self.split(self.query(x))
        r, h, n, d = q.shape
        if n != 1:
            raise ValueError("attend_prefixed takes one new token per row")
        qs = q.transpose(0, 2)  # [1, h, R, d]: the rows as the queries of one sequence
        sp = torch.matmul(qs, pk.transpose(-1, -2)).transpose(0, 2)  # [R, h, 1, P]
        ss = torch.matmul(q, k.transpose(-1, -2))  # [R, h, 1, S]
        w = torch.softmax(torch.cat([sp, ss], dim=-1).mul_(d ** -0.5), dim=-1)
        p = pk.shape[2]
        o = torch.matmul(w[..., :p].transpose(0, 2), pv).transpose(0, 2) + torch.matmul(w[..., p:], v)
        return self.out(o.transpose(1, 2).reshape(r, n, h * d).to(x.dtype))

    def scores(self, x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Attention scores before the softmax, q.k / sqrt(d), [B, h, n, T] in float32 (word
        alignment takes the softmax over the frames of speech only)."""
        q = self.split(self.query(x)).float()
        return (q @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross_attention: bool = False):
        super().__init__()
        self.attn = MultiHeadAttention(n_state, n_head)
        self.attn_ln = LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = LayerNorm(n_state) if cross_attention else None
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))
        self.mlp_ln = LayerNorm(n_state)


class AudioEncoder(nn.Module):
    def __init__(self, n_mels: int, n_ctx: int, n_state: int, n_head: int, n_layer: int):
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, n_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(n_state, n_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(n_ctx, n_state))
        self.blocks = nn.ModuleList(ResidualAttentionBlock(n_state, n_head) for _ in range(n_layer))
        self.ln_post = LayerNorm(n_state)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel [B, n_mels, 2 * n_ctx] -> audio features [B, n_ctx, n_state]."""
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).transpose(1, 2)
        if x.shape[1] != self.positional_embedding.shape[0]:
            raise ValueError(
                f"the encoder takes {2 * self.positional_embedding.shape[0]} mel frames (30 s), got {mel.shape[-1]}"
            )
        x = x + self.positional_embedding.to(x.dtype)
        for blk in self.blocks:
            h = blk.attn_ln(x)
            q, k, v = blk.attn.project(h)
            x = x + blk.attn.attend(h, k, v, None, q=q)
            x = x + blk.mlp(blk.mlp_ln(x))
        return self.ln_post(x)


@dataclass
class KVCache:
    """Self-attention keys and values per decoder layer, [rows, heads, tokens, d] each.

    `audio_index[r]` is the audio row (in the cross-attention keys/values) that cache row r reads:
    beams of one audio share its cross-attention tensors. `audio_rows` is the same map as a list
    on the host, when known (read from `audio_index` on first use otherwise): the decoder consults
    it every step, and on a GPU reading the tensor would cost a transfer each time.

    `pad` (host list, one per row, or None: no padding): row r's first pad[r] key slots are
    padding (rows whose prompts were shorter than the longest, left-padded to a common length);
    its queries never attend to them, and its tokens' positions are their slot minus pad[r].
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    audio_index: torch.Tensor
    audio_rows: Optional[list[int]] = field(default=None, repr=False, compare=False)
    pad: Optional[list[int]] = None
    # (keys, values) per layer, [1, heads, P, d]: the first P tokens, the same for every row (the
    # forced tokens of beams or samples, computed once; `TextDecoder.shared_prefix`). `keys` and
    # `values` then hold each row's tokens after them (possibly none yet).
    prefix: Optional[tuple[list[torch.Tensor], list[torch.Tensor]]] = None

    @property
    def length(self) -> int:
        p = 0 if self.prefix is None else self.prefix[0][0].shape[2]
        return p + (0 if not self.keys else self.keys[0].shape[2])

    def rows_on_host(self) -> list[int]:
        """`audio_index` as a list (read once, then kept)."""
        if self.audio_rows is None:
            self.audio_rows = self.audio_index.tolist()
        return self.audio_rows

    def reorder(self, rows: torch.Tensor) -> "KVCache":
        """Keep cache rows `rows` (a beam reorder). Cross-attention tensors are not touched."""
        known = self.audio_rows
        # Rows that all read one audio still do after any reorder: no need to read `rows`.
        one = known[0] if known and known.count(known[0]) == len(known) else None
        return KVCache(
            [k.index_select(0, rows) for k in self.keys],
            [v.index_select(0, rows) for v in self.values],
            self.audio_index.index_select(0, rows),
            None if one is None else [one] * rows.shape[0],
            None if self.pad is None else [self.pad[r] for r in rows.tolist()],
            self.prefix,
        )


class TextDecoder(nn.Module):
    def __init__(self, n_vocab: int, n_ctx: int, n_state: int, n_head: int, n_layer: int):
        super().__init__()
        # Given an (uninitialized) weight, Embedding skips its random init: on the meta device
        # that init runs through torch's Python decompositions and imports torch._dynamo (1.5 s).
        self.token_embedding = nn.Embedding(n_vocab, n_state, _weight=embedding_weight(n_vocab, n_state))
        self.positional_embedding = nn.Parameter(torch.empty(n_ctx, n_state))
        self.blocks = nn.ModuleList(ResidualAttentionBlock(n_state, n_head, cross_attention=True) for _ in range(n_layer))
        self.ln = LayerNorm(n_state)
        # Rows that start from the same forced tokens (beams, samples) compute them once and share
        # their keys and values (`KVCache.prefix`) instead of holding, reordering and reading a copy
        # each (`WhisperASR.decoder_steps`). Off here; the int8 form (transcribe/whisper/int8.py) turns it on.
        self.shared_prefix = False

    def cross_kv(self, audio: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Cross-attention keys and values of every layer, once per window of audio features."""
        return [blk.cross_attn.kv(audio) for blk in self.blocks]

    def forward(
        self,
        tokens: torch.Tensor,
        cross: list[tuple[torch.Tensor, torch.Tensor]],
        cache: Optional[KVCache] = None,
        cross_scores: Sequence[int] = (),
        positions: Optional[Sequence[int]] = None,
    ):
        """tokens [R, n] (the new tokens of each row) -> (logits [R, n, vocab] float32, cache, scores).

        With a cache the new tokens continue its rows; without one, rows start at position 0 and
        cache row r reads audio row r. scores: {layer: cross-attention scores before the softmax
        [R, heads, n, audio frames]} for the layers in `cross_scores`. positions: the new tokens'
        positions whose logits are wanted (default all): logits [R, len(positions), vocab].
        """
        rows, n = tokens.shape
        if cache is None:
            cache = KVCache([], [], torch.arange(rows, device=tokens.device), list(range(rows)))
        offset = cache.length
        pad = cache.pad
        if offset - min(pad or [0]) + n > self.positional_embedding.shape[0]:
            raise ValueError(f"the decoder holds {self.positional_embedding.shape[0]} tokens at most")
        mask = None
        if pad is None:
            pos = self.positional_embedding[offset : offset + n]
        else:
            # Row r's new tokens sit at slots offset.. and positions offset - pad[r]..; each sees
            # its row's keys from slot pad[r] on, up to itself.
            dev = tokens.device
            first = torch.tensor(pad, device=dev)[:, None]  # [R, 1]
            slots = offset + torch.arange(n, device=dev)  # [n]
            pos = self.positional_embedding[slots[None, :] - first]  # [R, n, C]
            kslot = torch.arange(offset + n, device=dev)
            mask = (kslot[None, None, :] >= first[:, :, None]) & (kslot[None, None, :] <= slots[None, :, None])
            mask = mask[:, None]  # [R, 1, n, T]: the same for every head
        x = self.token_embedding(tokens).to(self.positional_embedding.dtype) + pos
        x = x.to(self.activation_dtype(cross))
        idx = cache.audio_index
        audio_rows = cache.rows_on_host()
        same_rows = audio_rows == list(range(cross[0][0].shape[0]))
        # Rows that all read one audio (the beams of one window): their queries go to that audio's
        # keys and values as one sequence of rows * n queries, with no copy of the keys per row.
        shared = None if same_rows or cross_scores or not audio_rows else (
            audio_rows[0] if audio_rows.count(audio_rows[0]) == len(audio_rows) else None)
        keys, values, weights = [], [], {}
        for i, blk in enumerate(self.blocks):
            h = blk.attn_ln(x)
            q, k, v = blk.attn.project(h)
            if cache.keys:
                k = torch.cat([cache.keys[i], k], dim=2)
                v = torch.cat([cache.values[i], v], dim=2)
            keys.append(k)
            values.append(v)
            if cache.prefix is not None:
                x = x + blk.attn.attend_prefixed(h, q, cache.prefix[0][i], cache.prefix[1][i], k, v)
            else:
                x = x + blk.attn.attend(h, k, v, offset, mask, q=q)
            ck, cv = cross[i]
            h = blk.cross_attn_ln(x)
            if shared is not None:
                a = shared
                y = blk.cross_attn.attend(h.reshape(1, rows * n, -1), ck[a : a + 1], cv[a : a + 1], None)
                x = x + y.reshape(rows, n, -1)
            else:
                if not same_rows:
                    ck, cv = ck.index_select(0, idx), cv.index_select(0, idx)
                if i in cross_scores:
                    weights[i] = blk.cross_attn.scores(h, ck)
                x = x + blk.cross_attn.attend(h, ck, cv, None)
            x = x + blk.mlp(blk.mlp_ln(x))
        if positions is not None:
            x = x[:, list(positions)]
        return self.logits(self.ln(x)), KVCache(keys, values, idx, audio_rows, pad, cache.prefix), weights

    def activation_dtype(self, cross: list) -> torch.dtype:
        """The dtype of the decoder's activations: the cross-attention keys' (the model's)."""
        return cross[0][0].dtype

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Final states [R, n, C] -> logits over the vocabulary [R, n, vocab] (float32), through the
        tied token embedding.

        When the embedding is stored in float16 under float32 activations (`compact_embedding`),
        the weight goes through float32 in blocks that stay in the CPU's cache: the products are
        the float32 ones, but each step reads half the bytes (the projection is the largest
        read of a decoding step: 80 MB in float32 for 51864 x 384).
        """
        w = self.token_embedding.weight
        if w.dtype == x.dtype or x.device.type != "cpu":
            return F.linear(x, w.to(x.dtype)).float()
        out = torch.empty(*x.shape[:-1], w.shape[0], dtype=x.dtype, device=x.device)
        block = torch.empty(min(LOGIT_BLOCK_ROWS, w.shape[0]), w.shape[1], dtype=x.dtype, device=x.device)
        for start in range(0, w.shape[0], LOGIT_BLOCK_ROWS):
            rows = w[start : start + LOGIT_BLOCK_ROWS]
            b = block[: rows.shape[0]]
            b.copy_(rows)
            out[..., start : start + rows.shape[0]] = F.linear(x, b)
        return out.float()

    def compact_embedding(self) -> bool:
        """Store the token embedding in float16 when that loses nothing (weights that came from a
        float16 checkpoint) and the decoder computes in float32 on the CPU. Returns whether it did."""
        if not isinstance(self.token_embedding, nn.Embedding):
            return False
        w = self.token_embedding.weight
        if w.dtype != torch.float32 or w.device.type != "cpu":
            return False
        half = w.detach().to(torch.float16)
        if not torch.equal(half.float(), w.detach()):
            return False
        self.token_embedding.weight = nn.Parameter(half, requires_grad=False)
        return True

    def expand_embedding(self) -> None:
        """Store the token embedding in the compute dtype again (for a GPU, where the blocked
        float16 projection brings nothing)."""
        if not isinstance(self.token_embedding, nn.Embedding):
            return
        w = self.token_embedding.weight
        if w.dtype != self.positional_embedding.dtype:
            self.token_embedding.weight = nn.Parameter(w.detach().to(self.positional_embedding.dtype), requires_grad=False)


LOGIT_BLOCK_ROWS = 2048  # vocabulary rows per block of the float16 logit projection (1.5 MB)


class Whisper(nn.Module):
    def __init__(self, dims: WhisperDims):
        super().__init__()
        self.dims = dims
        self.encoder = AudioEncoder(dims.n_mels, dims.n_audio_ctx, dims.n_audio_state, dims.n_audio_head, dims.n_audio_layer)
        self.decoder = TextDecoder(dims.n_vocab, dims.n_text_ctx, dims.n_text_state, dims.n_text_head, dims.n_text_layer)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the model computes in (the token embedding may be stored more compactly)."""
        return self.decoder.positional_embedding.dtype

    @property
    def is_multilingual(self) -> bool:
        return self.dims.n_vocab >= 51865

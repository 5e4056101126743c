"""NeMo's Transformer decoder (`TransformerDecoderNM`: token embedding + fixed sinusoidal positions + layer
norm, pre-LN or post-LN blocks of self-attention, cross-attention and feed-forward, a final layer norm) and
its `TokenClassifier` head, run with a key/value cache (`DecoderState`): the prompt in one call, then one
token a step, each at its own position of the position table, as NeMo's generators feed it (NeMo caches each
layer's input states and recomputes keys and values from them; the products are the same). Shared by the
AED families built on NeMo's modules (Canary, Cohere Transcribe).

Module and parameter names follow NeMo's state dict (`_embedding.*`, `_decoder.layers.{i}.{layer_norm_1,
first_sub_layer,...}`, `mlp.layer0.*`), so a checkpoint loads without renaming."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .config import DecoderConfig

_ACT = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu, "silu": F.silu}


class _Attention(nn.Module):
    """NeMo's `MultiHeadAttention` (query_net, key_net, value_net, out_projection); the heads `head_dim` wide
    (NeMo's: hidden / heads; transformers' Canary may set another width), scores scaled by head_dim^-0.5."""

    def __init__(self, hidden: int, heads: int, head_dim: Optional[int] = None):
        super().__init__()
        self.heads = heads
        self.head_dim = head_dim if head_dim is not None else hidden // heads
        inner = heads * self.head_dim
        self.query_net = nn.Linear(hidden, inner)
        self.key_net = nn.Linear(hidden, inner)
        self.value_net = nn.Linear(hidden, inner)
        self.out_projection = nn.Linear(inner, hidden)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split(self.key_net(x)), self.split(self.value_net(x))

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
        q = self.split(self.query_net(x))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        b, _, t, d = out.shape
        return self.out_projection(out.transpose(1, 2).reshape(b, t, self.heads * d))


class _FeedForward(nn.Module):
    """NeMo's `PositionWiseFF` (dense_in, activation, dense_out)."""

    def __init__(self, hidden: int, inner: int, activation: str):
        super().__init__()
        self.dense_in = nn.Linear(hidden, inner)
        self.dense_out = nn.Linear(inner, hidden)
        self.act = _ACT[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense_out(self.act(self.dense_in(x)))


class _Block(nn.Module):
    """NeMo's `TransformerDecoderBlock`: self-attention, cross-attention, feed-forward, each with a residual;
    layer norms before each (pre_ln) or after each residual (post-LN)."""

    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.pre_ln = c.pre_ln
        self.layer_norm_1 = nn.LayerNorm(c.hidden, eps=1e-5)
        self.first_sub_layer = _Attention(c.hidden, c.heads, c.head_dim)
        self.layer_norm_2 = nn.LayerNorm(c.hidden, eps=1e-5)
        self.second_sub_layer = _Attention(c.hidden, c.heads, c.head_dim)
        self.layer_norm_3 = nn.LayerNorm(c.hidden, eps=1e-5)
        self.third_sub_layer = _FeedForward(c.hidden, c.inner, c.activation)

    def forward(self, x, cache: list, layer: int, cross: tuple, self_mask, cross_mask) -> torch.Tensor:
        if self.pre_ln:
            h = self.layer_norm_1(x)
            h = x + self.first_sub_layer.attend(h, *self._extend(cache, layer, h), self_mask)
            c = self.layer_norm_2(h)
            h = h + self.second_sub_layer.attend(c, *cross, cross_mask)
            return h + self.third_sub_layer(self.layer_norm_3(h))
        h = self.layer_norm_1(x + self.first_sub_layer.attend(x, *self._extend(cache, layer, x), self_mask))
        h = self.layer_norm_2(h + self.second_sub_layer.attend(h, *cross, cross_mask))
        return self.layer_norm_3(h + self.third_sub_layer(h))

    def _extend(self, cache: list, layer: int, h: torch.Tensor):
        k, v = self.first_sub_layer.keys_values(h)
        if cache[layer] is not None:
            k = torch.cat([cache[layer][0], k], dim=2)
            v = torch.cat([cache[layer][1], v], dim=2)
        cache[layer] = (k, v)
        return k, v


class _Embedding(nn.Module):
    """NeMo's `TransformerEmbedding`: token embedding + the fixed sinusoidal position table (stored in the
    checkpoint, divided by sqrt(hidden)), then a layer norm."""

    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.token_embedding = nn.Embedding(c.vocab_size, c.hidden)
        self.position_embedding = _Positions(c.hidden, c.max_positions)
        self.layer_norm = nn.LayerNorm(c.hidden, eps=1e-5)

    def forward(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        table = self.position_embedding.pos_enc
        if start + ids.shape[1] > table.shape[0]:
            raise ValueError(f"decoder position {start + ids.shape[1] - 1} is past its table of {table.shape[0]}")
        pos = table[start:start + ids.shape[1]].to(self.token_embedding.weight.dtype)
        return self.layer_norm(self.token_embedding(ids) + pos)


class _Positions(nn.Module):
    def __init__(self, hidden: int, length: int):
        super().__init__()
        self.register_buffer("pos_enc", sinusoid_positions(hidden, length))


def sinusoid_positions(hidden: int, length: int) -> torch.Tensor:
    """NeMo's `FixedPositionalEncoding` table (for a model built without a checkpoint)."""
    position = torch.arange(0.0, length).unsqueeze(1)
    div = torch.exp(-math.log(10000.0) / hidden * torch.arange(0.0, hidden, 2))
    table = torch.zeros(length, hidden)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div)
    return table / math.sqrt(hidden)


class _Stack(nn.Module):
    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.layers = nn.ModuleList(_Block(c) for _ in range(c.layers))
        self.final_layer_norm = nn.LayerNorm(c.hidden, eps=1e-5) if c.pre_ln and c.final_norm else None


class TransformerDecoder(nn.Module):
    """NeMo's `TransformerDecoderNM` (`_embedding`, `_decoder`)."""

    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.config = c
        self._embedding = _Embedding(c)
        self._decoder = _Stack(c)

    def start(self, states: torch.Tensor, lengths: torch.Tensor) -> "DecoderState":
        """A state over encoder states [B, T, hidden] (their valid lengths [B]): each layer's cross-attention
        keys and values, computed once."""
        states = states.to(self._embedding.token_embedding.weight.dtype)
        t = states.shape[1]
        mask = None
        if bool((lengths < t).any()):
            mask = (torch.arange(t, device=states.device)[None, :] < lengths[:, None].to(states.device))[:, None, None, :]
        cross = [layer.second_sub_layer.keys_values(states) for layer in self._decoder.layers]
        return DecoderState([None] * len(cross), cross, mask, 0)

    def last_hidden(self, ids: torch.Tensor, state: "DecoderState") -> torch.Tensor:
        """Feeds ids [rows, L] at the state's next positions (its cache grows by L) -> the last position's
        output [rows, hidden] (after the final layer norm), which the head reads."""
        x = self._embedding(ids, state.position)
        n = ids.shape[1]
        self_mask = None
        if n > 1:  # a causal mask over the new positions (the cached ones all lie before them)
            past = state.position
            self_mask = torch.ones(n, past + n, dtype=torch.bool, device=ids.device).tril(diagonal=past)
        for i, layer in enumerate(self._decoder.layers):
            x = layer(x, state.self_kv, i, state.cross_kv[i], self_mask, state.cross_mask)
        if self._decoder.final_layer_norm is not None:
            x = self._decoder.final_layer_norm(x)
        state.position += n
        return x[:, -1]


class Head(nn.Module):
    """NeMo's `TokenClassifier` of one layer (`mlp.layer0`)."""

    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.mlp = nn.Module()
        self.mlp.layer0 = nn.Linear(hidden, vocab)


@dataclass
class DecoderState:
    """What the decoder keeps between steps for a batch of rows: each layer's self-attention keys and
    values so far, each layer's cross-attention keys and values of the encoder states, the encoder mask,
    and the next position."""

    self_kv: list
    cross_kv: list
    cross_mask: Optional[torch.Tensor]  # [rows, 1, 1, T] bool (True: attend), None when nothing is padded
    position: int = 0

    def select(self, rows: torch.Tensor) -> "DecoderState":
        """The state of the rows `rows` (a beam's reordering, or a batch item repeated per beam); the state
        itself when `rows` keeps every row in place (a beam of one: no copy of the caches each step)."""
        n = self.cross_kv[0][0].shape[0] if self.cross_kv else None
        if n is not None and rows.numel() == n and bool(torch.equal(rows.cpu(), torch.arange(n))):
            return self
        pick = lambda t: None if t is None else t.index_select(0, rows)  # noqa: E731
        return DecoderState([None if kv is None else (pick(kv[0]), pick(kv[1])) for kv in self.self_kv],
                            [(pick(k), pick(v)) for k, v in self.cross_kv], pick(self.cross_mask), self.position)




class _EncoderBlock(nn.Module):
    """NeMo's `TransformerEncoderBlock`: self-attention and feed-forward, each with a residual; layer norms
    before each (pre_ln) or after each residual (post-LN)."""

    def __init__(self, hidden: int, inner: int, heads: int, activation: str, pre_ln: bool):
        super().__init__()
        self.pre_ln = pre_ln
        self.layer_norm_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.first_sub_layer = _Attention(hidden, heads)
        self.layer_norm_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.second_sub_layer = _FeedForward(hidden, inner, activation)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
        att = self.first_sub_layer
        if self.pre_ln:
            h = self.layer_norm_1(x)
            h = x + att.attend(h, *att.keys_values(h), mask)
            return h + self.second_sub_layer(self.layer_norm_2(h))
        h = self.layer_norm_1(x + att.attend(x, *att.keys_values(x), mask))
        return self.layer_norm_2(h + self.second_sub_layer(h))


class TransformerEncoder(nn.Module):
    """NeMo's `TransformerEncoder` (`layers.{i}.*`, `final_layer_norm` when pre-LN with a final norm): states
    [B, T, hidden] and their valid lengths -> [B, T, hidden]; padded keys are masked (NeMo adds -10000 to
    their scores: the same softmax for every valid row)."""

    def __init__(self, hidden: int, inner: int, layers: int, heads: int, activation: str = "relu",
                 pre_ln: bool = False, final_norm: bool = True):
        super().__init__()
        self.layers = nn.ModuleList(_EncoderBlock(hidden, inner, heads, activation, pre_ln) for _ in range(layers))
        self.final_layer_norm = nn.LayerNorm(hidden, eps=1e-5) if pre_ln and final_norm else None

    def forward(self, x: torch.Tensor, lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
        mask = None
        if lengths is not None and bool((lengths < x.shape[1]).any()):
            mask = (torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None])[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.final_layer_norm is None else self.final_layer_norm(x)

"""Helpers for building modules that are then given a checkpoint's tensors."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


def embedding_weight(rows: int, dim: int) -> torch.Tensor:
    """An embedding table for nn.Embedding(_weight=...): random normal as nn.Embedding's own
    init, except on the meta device (a model built to take a checkpoint's tensors), where the
    init is skipped: there it would run through torch's Python decompositions and import
    torch._dynamo (1.5 s)."""
    w = torch.empty(rows, dim)
    if not w.is_meta:
        nn.init.normal_(w)
    return w


def checked_state(expected: dict, tensors, what: str, where: str, dtype: Optional[torch.dtype],
                  keep_float=lambda name: False, consume: bool = False) -> dict:
    """The tensors a module's `load_state_dict(..., assign=True)` takes: every name of `expected` (name ->
    shape) present in `tensors`, of its shape and floating point, none extra, each cast to `dtype` (None: kept
    as stored; those `keep_float(name)` accepts to float32); a ModelError naming the first tensor that is
    missing, unexpected, misshapen or not floating point. `what`: whose tensors, for messages ("the language
    model's"). `consume`: each tensor is taken out of the dict `tensors` as it is cast, so that a cast copy
    does not live beside its original (when nothing else holds it)."""
    from .errors import ModelError

    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise ModelError(f"{where}: {what} tensor {missing[0]!r} is missing"
                         + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise ModelError(f"{where}: unexpected {what} tensor {extra[0]!r}"
                         + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))
    state = {}
    for name, shape in expected.items():
        t = tensors.pop(name) if consume else tensors[name]
        if tuple(t.shape) != tuple(shape):
            raise ModelError(f"{where}: {what} tensor {name!r} has shape {tuple(t.shape)}, the config implies "
                             f"{tuple(shape)}")
        if not t.is_floating_point():
            raise ModelError(f"{where}: {what} tensor {name!r} is not floating point ({t.dtype})")
        state[name] = t.to(torch.float32) if keep_float(name) else t if dtype is None else t.to(dtype)
    return state


def label_lstm_step(cache: dict, embed_weight: torch.Tensor, zero_label: int, lstm: nn.LSTM, int8: bool,
                    labels: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
    """One step of a transducer predictor: an embedding (the `zero_label` row embeds to zeros: the start of
    a sequence) then an `nn.LSTM` stack, written out. labels [B], state (h, c) each [layers, B, H] ->
    output [B, H], new state.

    The first layer's input product depends on the label alone, so it is a table, [vocabulary, 4H], made
    once (embedding times input weights, plus both biases): a step reads a row of it instead of half the
    layer's weights. Each later layer's input and hidden products are one matrix product with the two weight
    matrices side by side (much cheaper per step than a call of nn.LSTM on a sequence of one). `int8`: the
    products on the hidden state (and a later layer's input) as `quant.Int8Linear`. The tables and fused
    weights are kept in `cache` (a dict the caller owns, emptied when its weights change), keyed by the
    weights' storage, dtype and device.
    """
    from .quant import Int8Linear

    h0, c0 = state
    hs, cs = [], []
    x = None
    for layer in range(lstm.num_layers):
        if layer == 0:
            table, w_hh = _first_lstm_layer(cache, embed_weight, zero_label, lstm, int8)
            if isinstance(w_hh, Int8Linear):
                gates = table.index_select(0, labels) + w_hh(h0[0])
            else:
                gates = torch.addmm(table.index_select(0, labels), h0[0], w_hh.t())
        else:
            w, b = _lstm_step_weights(cache, lstm, layer, int8)
            if isinstance(w, Int8Linear):
                gates = w(torch.cat([x, h0[layer]], dim=1))
            else:
                gates = F.linear(torch.cat([x, h0[layer]], dim=1), w, b)
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c0[layer] + torch.sigmoid(i) * torch.tanh(g)
        x = torch.sigmoid(o) * torch.tanh(c)
        hs.append(x)
        cs.append(c)
    return x, (torch.stack(hs), torch.stack(cs))


def _first_lstm_layer(cache: dict, embed_weight: torch.Tensor, zero_label: int, lstm: nn.LSTM, int8: bool):
    from .quant import Int8Linear

    w_ih = lstm.weight_ih_l0
    key = ("table", w_ih.data_ptr(), w_ih.dtype, w_ih.device)
    if key not in cache:
        emb = embed_weight.detach().clone()
        emb[zero_label] = 0.0
        table = torch.addmm(lstm.bias_ih_l0 + lstm.bias_hh_l0, emb.to(w_ih.dtype), w_ih.t()).detach()
        w_hh = lstm.weight_hh_l0.detach()
        cache[key] = (table, Int8Linear(w_hh, None) if int8 else w_hh)
    return cache[key]


def _lstm_step_weights(cache: dict, lstm: nn.LSTM, layer: int, int8: bool):
    from .quant import Int8Linear

    w_ih = getattr(lstm, f"weight_ih_l{layer}")
    key = (layer, w_ih.data_ptr(), w_ih.dtype, w_ih.device)
    if key not in cache:
        w = torch.cat([w_ih, getattr(lstm, f"weight_hh_l{layer}")], dim=1).detach()
        b = (getattr(lstm, f"bias_ih_l{layer}") + getattr(lstm, f"bias_hh_l{layer}")).detach()
        cache[key] = (Int8Linear(w, b), None) if int8 else (w, b)
    return cache[key]


def fused_linear(cache: dict, layers) -> nn.Module:
    """One layer computing several linear layers that read the same input, their outputs side by side (a
    self-attention's query, key and value projections): one matrix product instead of several, and for int8
    layers (`quant.Int8Linear`) one quantization of the input. Made once and kept in `cache` (a dict the
    caller owns) while the layers are the same objects (a swap, e.g. to int8, makes it again); the layers'
    own weights then become views of the fused one (no second copy). Each output column is the same dot
    product as in its own layer; only the product's blocking may differ (float rounding in the last bits).
    Layers of other kinds (weights kept compressed) run one after the other, their outputs side by side."""
    from .quant import Int8Linear

    layers = tuple(layers)
    hit = cache.get("fused")
    if hit is not None and len(hit[0]) == len(layers) and all(a is b for a, b in zip(hit[0], layers)):
        return hit[1]
    sizes = [m.out_features for m in layers]
    biases = [m.bias for m in layers]
    if all(b is None for b in biases):
        bias = None
    else:
        bias = torch.cat([torch.zeros(n) if b is None else b.detach().float() for n, b in zip(sizes, biases)])
    if all(isinstance(m, Int8Linear) for m in layers):
        fused = Int8Linear.from_int8(torch.cat([m.weight_t.t() for m in layers]),
                                     torch.cat([m.weight_scale for m in layers]), bias)
        for m, q in zip(layers, fused.weight_t.t().split(sizes)):
            m.weight_t = q.t()
    elif all(type(m) is nn.Linear for m in layers):
        w = torch.cat([m.weight.detach() for m in layers])
        fused = nn.Linear(w.shape[1], w.shape[0], bias=bias is not None, device="meta")
        fused.weight = nn.Parameter(w, requires_grad=False)
        for m, part in zip(layers, w.split(sizes)):
            m.weight = nn.Parameter(part, requires_grad=False)
        if bias is not None:
            fused.bias = nn.Parameter(bias.to(w.dtype), requires_grad=False)
    else:  # other kinds (weights kept compressed): the layers one after the other, their outputs side by side
        fused = _SideBySide(layers)
    cache["fused"] = (layers, fused)
    return fused


class _SideBySide(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.parts = list(layers)  # not registered: the layers stay their owner's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([m(x) for m in self.parts], dim=-1)


def kv_append(held: Optional[tuple[torch.Tensor, torch.Tensor]], length: int, k: torch.Tensor, v: torch.Tensor):
    """A decoder's self-attention cache of one layer grown by a step: `held` the buffers (keys, values)
    [rows, H, capacity, d] whose first `length` positions are filled (None: empty), k, v [rows, H, n, d] the
    step's -> (buffers, keys, values), the last two views of the first length + n positions. The capacity
    doubles when full, so a step writes its own positions instead of copying the whole cache (torch.cat)."""
    end = length + k.shape[2]
    if held is None or held[0].shape[2] < end:
        cap = max(2 * end, 64)
        grown = tuple(t.new_empty(t.shape[0], t.shape[1], cap, t.shape[3]) for t in (k, v))
        if held is not None:
            for g, h in zip(grown, held):
                g[:, :, :length] = h[:, :, :length]
        held = grown
    held[0][:, :, length:end] = k
    held[1][:, :, length:end] = v
    return held, held[0][:, :, :end], held[1][:, :, :end]

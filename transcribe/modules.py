"""Helpers for building modules that are then given a checkpoint's tensors."""
from __future__ import annotations

from typing import Optional

import torch
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

"""Helpers for building modules that are then given a checkpoint's tensors."""
from __future__ import annotations

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

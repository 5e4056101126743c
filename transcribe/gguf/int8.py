"""A GGUF file's weights kept compressed: int8 linear layers made straight from the file's bytes.

The part every family shares (Parakeet: transcribe/parakeet/gguf_int8.py, Granite:
transcribe/granite/gguf.py). While a file is read tensor by tensor, a weight the family runs as an
`Int8Linear` (int8 weights with one scale per output row, activations quantized per row at run time:
transcribe/quant.py) goes from the file's bytes to int8 rows (`quants.int8_rows`: each row dequantized
exactly, then quantized per row with Int8Linear's own formula, in chunks of rows), so no float32 copy of
that weight is ever made, and the model is built around a stand-in of its shape that holds no memory
(one zero, expanded). Once the model is built, `adopt(model)` replaces each stand-in's layer (an
nn.Linear, or a pointwise nn.Conv1d [N, K, 1]) by its Int8Linear; no stand-in may be left.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from ..errors import ModelError
from ..quant import Int8Linear
from . import quants
from .file import GGUFFile


class Int8Rows:
    """Int8 rows of the weights read so far (by the model's name of each weight), and their layers."""

    def __init__(self):
        self.rows: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def take(self, f: GGUFFile, gguf_name: str, name: str, shape: Optional[Sequence[int]] = None) -> torch.Tensor:
        """Read `gguf_name` as int8 rows kept under `name` (the model's `<layer>.weight`); returns the
        stand-in, of `shape` (default: the file's shape), that the model is built with."""
        info = f.info(gguf_name)
        rows = list(info.shape)
        while len(rows) > 2 and rows[-1] == 1:  # a pointwise convolution [N, K, 1]: rows of K
            rows.pop()
        try:
            q, scale = quants.int8_rows(f.raw(gguf_name), info.qtype, tuple(rows))
        except ValueError as e:
            raise ModelError(f"{f.path}: tensor {gguf_name}: {e}") from None
        f.release(gguf_name)
        self.rows[name] = (q, scale)
        f.made(q.numel())  # the heap is trimmed now and then (see GGUFFile.made)
        return torch.zeros(1).expand(*(info.shape if shape is None else shape))

    def adopt(self, model: nn.Module) -> int:
        """Replace each stand-in's layer by its Int8Linear (biases as loaded). Returns how many."""
        for name, (q, scale) in self.rows.items():
            path = name[: -len(".weight")]
            parent_name, _, attr = path.rpartition(".")
            parent = model.get_submodule(parent_name)
            layer = getattr(parent, attr)
            if not isinstance(layer, (nn.Linear, nn.Conv1d)):
                raise ModelError(f"{name}: an int8 weight for a {type(layer).__name__}, not a linear layer")
            k = layer.weight.numel() // layer.weight.shape[0]
            if tuple(q.shape) != (layer.weight.shape[0], k):
                raise ModelError(f"{name}: int8 weights of shape {tuple(q.shape)} for a layer of {tuple(layer.weight.shape)}")
            bias = layer.bias.detach() if layer.bias is not None else None
            setattr(parent, attr, Int8Linear.from_int8(q, scale, bias))
        left = [n for n, p in model.named_parameters() if p.numel() > 1 and 0 in p.stride()]
        if left:
            raise ModelError(f"{left[0]}: a weight read as int8 has no int8 layer to go to")
        n = len(self.rows)
        self.rows = {}
        return n

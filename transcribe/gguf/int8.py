"""A GGUF file's weights kept compressed: quantized linear layers made straight from the file's bytes.

The part every family shares (Parakeet: transcribe/parakeet/gguf_int8.py, Granite:
transcribe/granite/gguf.py). While a file is read tensor by tensor, a weight the family keeps compressed
goes from the file's bytes to one of two layouts (transcribe/quant.py), in chunks of rows, so no float32
copy of that weight is ever made:

- Q8_0 blocks (`take(..., blocks=True)`, a Q8_0 file's default): a Q8_0 weight's blocks (int8 values with
  one scale per 32) as the file holds them, mapped, not copied (`GGUFFile.mapped`), run as `Q8Linear` (the
  weight dequantized exactly at each call, float activations); a weight of another type beside them is kept
  in float16 (an F16 weight: the file's, mapped; another: dequantized, then rounded), run as `HalfLinear`
  (float32 products);
- int8 rows (`take(...)`, dtype int8): one scale per output row (`quants.int8_rows`: each row
  dequantized exactly, then quantized per row with Int8Linear's own formula), run as `Int8Linear`
  (activations quantized per row, int8 x int8 products).

The model is built around a stand-in of the weight's shape that holds no memory (one zero, expanded).
Once the model is built, `adopt(model)` replaces each stand-in's layer (an nn.Linear, or a pointwise
nn.Conv1d [N, K, 1]) by its quantized layer; no stand-in may be left.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import nn

from ..errors import ModelError
from ..quant import HalfLinear, Int8Linear, Q8Linear
from . import quants
from .file import GGUFFile


class Int8Rows:
    """The compressed weights read so far (by the model's name of each weight), and their layers."""

    def __init__(self):
        # name -> (layout "rows" / "blocks" / "half", weight: int8 [N, K] or float16 [N, K], scales:
        # [N] per row, [N, K / 32] per Q8_0 block, or None); or layout "mapped blocks" (the file's Q8_0
        # blocks, uint8 [N, K / 32, 34]) / "mapped half" (its F16 weight [N, K]), mapped, scales None
        # (GGUFFile.mapped)
        self.rows: dict[str, tuple[str, torch.Tensor, Optional[torch.Tensor]]] = {}

    def take(self, f: GGUFFile, gguf_name: str, name: str, shape: Optional[Sequence[int]] = None,
             blocks: bool = False) -> torch.Tensor:
        """Read `gguf_name` as int8 rows (blocks: a Q8_0 tensor as its blocks, another as float16) kept
        under `name` (the model's `<layer>.weight`); returns the stand-in, of `shape` (default: the
        file's shape), that the model is built with."""
        info = f.info(gguf_name)
        rows = list(info.shape)
        while len(rows) > 2 and rows[-1] == 1:  # a pointwise convolution [N, K, 1]: rows of K
            rows.pop()
        layout = "rows" if not blocks else "blocks" if info.qtype == quants.Q8_0 else "half"
        if layout != "rows" and info.qtype == (quants.Q8_0 if layout == "blocks" else quants.F16) \
                and info.offset % 2 == 0:
            # held as the file stores it, mapped: no copy, nothing read until the first call (a Q8_0 file of
            # the 0.6B Parakeet loads in under a second; split into values and scales it took 3 s)
            b, n = f.mapped(gguf_name), math.prod(rows[:-1])
            self.rows[name] = ("mapped " + layout, b.view(n, rows[-1] // 32, 34) if layout == "blocks"
                               else b.view(torch.float16).view(n, rows[-1]), None)
            return torch.zeros(1).expand(*(info.shape if shape is None else shape))
        try:
            if layout == "half":
                q, scale = quants.dequantize(f.raw(gguf_name), info.qtype, tuple(rows)).to(torch.float16), None
                if not bool(torch.isfinite(q).all()):
                    raise ValueError("a weight beyond float16's range (|w| > 65504): load the file with "
                                     "dtype='float32'")
            else:
                read = quants.q8_0_blocks if layout == "blocks" else quants.int8_rows
                q, scale = read(f.raw(gguf_name), info.qtype, tuple(rows))
        except ValueError as e:
            raise ModelError(f"{f.path}: tensor {gguf_name}: {e}") from None
        f.release(gguf_name)
        self.rows[name] = (layout, q, scale)
        f.made(q.numel())  # the heap is trimmed now and then (see GGUFFile.made)
        return torch.zeros(1).expand(*(info.shape if shape is None else shape))

    def adopt(self, model: nn.Module) -> int:
        """Replace each stand-in's layer by its Q8Linear / HalfLinear / Int8Linear (biases as loaded).
        Returns how many."""
        for name, (layout, q, scale) in self.rows.items():
            path = name[: -len(".weight")]
            parent_name, _, attr = path.rpartition(".")
            parent = model.get_submodule(parent_name)
            layer = getattr(parent, attr)
            if not isinstance(layer, (nn.Linear, nn.Conv1d)):
                raise ModelError(f"{name}: a quantized weight for a {type(layer).__name__}, not a linear layer")
            k = layer.weight.numel() // layer.weight.shape[0]
            if (q.shape[0], q.shape[1] * 32 if layout == "mapped blocks" else q.shape[1]) != (layer.weight.shape[0], k):
                raise ModelError(f"{name}: weights of shape {tuple(q.shape)} for a layer of {tuple(layer.weight.shape)}")
            bias = layer.bias.detach() if layer.bias is not None else None
            if layout == "mapped blocks":
                new = Q8Linear.from_blocks(q, bias)
            elif layout == "mapped half":
                new = HalfLinear.from_f16(q, bias)
            elif layout == "blocks":
                new = Q8Linear(q, scale, bias)
            else:
                new = HalfLinear(q, bias) if layout == "half" else Int8Linear.from_int8(q, scale, bias)
            setattr(parent, attr, new)
        left = [n for n, p in model.named_parameters() if p.numel() > 1 and 0 in p.stride()]
        if left:
            raise ModelError(f"{left[0]}: a weight read compressed has no quantized layer to go to")
        n = len(self.rows)
        self.rows = {}
        return n

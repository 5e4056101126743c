"""A Parakeet GGUF file's weights kept compressed: int8 linear layers made straight from the file.

Two modes, both running `Int8Linear`s (int8 weights with one scale per output row, activations quantized
per row at run time, int8 x int8 products: transcribe/quant.py):
- by default, a file whose linear weights are stored as Q8_0 keeps them compressed: each Q8_0 weight
  becomes an int8 layer, and so does every other matrix product of the encoder (the pointwise
  convolutions, which parakeet.cpp stores in F32 and transcribe.cpp in F16 because ggml convolves in
  float: here they are matrix products like the rest, quantized per row at load); what the file stores in
  float outside the encoder (parakeet.cpp: the joint's output layer and the LSTM) stays float32. The
  joint's output layer decides every token: quantizing it too moved a random-weight streaming TDT's tokens
  (agreement with F32 0.878, against 0.98 with it in float, the upstream runtime's figure);
- `dtype="int8"` (any file) quantizes every layer `ParakeetModel.quantize_int8` quantizes (the encoder's
  linear layers and pointwise convolutions, the joint's linear layers, the LSTM), as for a .nemo.
The weights go from the file's bytes to int8 one tensor at a time (`gguf.quants.int8_rows`, in chunks of
rows): no float32 copy of those layers is ever made.

Why not weight-only int8 (float activations): PyTorch's CPU kernel for it (`_weight_int8pack_mm`) is
slower than float32's matrix product on an encoder's shapes (benchmarks/README.md, "GGUF files"), so it
could not run a Q8_0 file at float32's speed or better.

While the file is read, each such weight is a stand-in of its shape that holds no memory (one zero,
expanded); once the model is built, every stand-in's layer is replaced by its Int8Linear, and no stand-in
may be left. Q8_0 blocks (32 values, one scale each) become rows with one scale: each row is the Q8_0
values dequantized exactly, then quantized again per row, which is what `quantize_int8` does with the
dequantized float32 model (the tests compare the two).
"""
from __future__ import annotations

import re
from typing import Optional

import torch

from ..gguf import quants
from ..gguf.file import GGUFFile
from ..gguf.int8 import Int8Rows  # the generic part, shared with Granite

# The NeMo names of the weights `ParakeetModel.quantize_int8` turns into int8 products.
INT8_WEIGHTS = re.compile(
    r"^(encoder\.(pre_encode\.out|layers\.\d+\.(feed_forward[12]\.linear[12]|self_attn\.linear_(q|k|v|out|pos)"
    r"|conv\.pointwise_conv[12]))|joint\.(enc|pred|joint_net\.\d+))\.weight$")


def keeps_q8_0(f: GGUFFile, schema_names) -> bool:
    """Whether the file's int8-able weights are stored as Q8_0 (then the model keeps them int8 by
    default). `schema_names` maps the file's tensor names to NeMo names."""
    types = {f.tensors[n].qtype for n in f.tensors if INT8_WEIGHTS.match(schema_names(n) or "")}
    return quants.Q8_0 in types


class Int8Reader(Int8Rows):
    """The read_state_dict hook: an int8-able weight is read as int8 rows, a stand-in takes its place
    (`gguf.int8.Int8Rows`; `adopt(model)` then makes the layers)."""

    def __init__(self, stored_q8_0_only: bool = False):
        """stored_q8_0_only: the default mode for a Q8_0 file (see the module), else every int8-able weight."""
        super().__init__()
        self.stored_q8_0_only = stored_q8_0_only

    def __call__(self, f: GGUFFile, gguf_name: str, nemo_name: str) -> Optional[torch.Tensor]:
        if not INT8_WEIGHTS.match(nemo_name):
            return None
        info = f.info(gguf_name)
        if self.stored_q8_0_only and info.qtype != quants.Q8_0 and not nemo_name.startswith("encoder."):
            return None
        return self.take(f, gguf_name, nemo_name)

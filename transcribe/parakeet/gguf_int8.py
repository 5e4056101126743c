"""A Parakeet GGUF file's weights kept compressed: quantized linear layers made straight from the file.

Two modes (the layers: transcribe/quant.py; reading them: transcribe/gguf/int8.py):
- by default, a file whose linear weights are stored as Q8_0 keeps the encoder's matrix products
  compressed as `Q8Linear`s: the file's Q8_0 blocks as they are (int8 values, one scale per 32),
  dequantized exactly at each call and multiplied with float activations (bfloat16 where the CPU
  multiplies it natively, else float32). The encoder's other matrix products (the pointwise
  convolutions, which parakeet.cpp stores in F32 and transcribe.cpp in F16 because ggml convolves in
  float) are kept in float16 (`HalfLinear`: 2 bytes a weight, transcribe.cpp's F16 as it is) and
  computed in float32: quantizing them to Q8_0 blocks too (1.06 bytes), or computing them in bfloat16,
  was measured to add more error than the upstream runtimes' own quantized activations
  (benchmarks/README.md, "Q8_0 compute"). Outside the encoder
  (the joint, the LSTM, the embedding: a few MB even in a 0.6B model) the weights are dequantized
  exactly to float32 once, at load;
- `dtype="int8"` (any file) quantizes every layer `ParakeetModel.quantize_int8` quantizes (the encoder's
  linear layers and pointwise convolutions, the joint's linear layers, the LSTM) as `Int8Linear`s (int8
  weights per output row, activations quantized per row at run time), as for a .nemo.

Why this default: the upstream runtimes compute a Q8_0 weight against activations quantized to Q8_0
blocks (ggml), so their Q8_0 results stay close to their F32 ones; `Int8Linear` quantized the weights a
second time (per row) and the activations per row, and agreed less with our F32 result than the
upstream runtimes with theirs. `Q8Linear` adds no rounding to the weights and none (float32) or
bfloat16's to the activations. Measured (agreement, speed, memory): benchmarks/README.md, "Q8_0 compute".

While the file is read, each such weight is a stand-in of its shape that holds no memory (one zero,
expanded); once the model is built, every stand-in's layer is replaced by its quantized layer, and no
stand-in may be left. No float32 copy of a compressed weight is ever made.
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
    """The read_state_dict hook: a weight kept compressed is read as Q8_0 blocks or int8 rows, a
    stand-in takes its place (`gguf.int8.Int8Rows`; `adopt(model)` then makes the layers)."""

    def __init__(self, q8_0_default: bool = False):
        """q8_0_default: the default mode for a Q8_0 file (the encoder as Q8_0 blocks, see the module),
        else dtype int8's (every int8-able weight as int8 rows)."""
        super().__init__()
        self.q8_0_default = q8_0_default

    def __call__(self, f: GGUFFile, gguf_name: str, nemo_name: str) -> Optional[torch.Tensor]:
        if not INT8_WEIGHTS.match(nemo_name):
            return None
        if not self.q8_0_default:
            return self.take(f, gguf_name, nemo_name)
        if not nemo_name.startswith("encoder."):
            return None  # read as float32 (exactly dequantized)
        return self.take(f, gguf_name, nemo_name, blocks=True)

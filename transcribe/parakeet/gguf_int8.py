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

Why not weight-only int8 (float activations): PyTorch's CPU kernel for it (`_weight_int8pack_mm`) ran
2-100x slower than float32's matrix product on an encoder's shapes here (750 x 1024 x 4096: 63 ms in
bfloat16, 3.1 s in float32, against 31 ms float32 and 13 ms int8 x int8), so it could not run a Q8_0 file
at float32's speed or better.

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
from torch import nn

from ..errors import ModelError
from ..gguf import quants
from ..gguf.file import GGUFFile
from ..quant import Int8Linear
from ..runtime import release_memory

TRIM_EVERY = 32 << 20  # bytes of int8 weights made between two trims of the heap

# The NeMo names of the weights `ParakeetModel.quantize_int8` turns into int8 products.
INT8_WEIGHTS = re.compile(
    r"^(encoder\.(pre_encode\.out|layers\.\d+\.(feed_forward[12]\.linear[12]|self_attn\.linear_(q|k|v|out|pos)"
    r"|conv\.pointwise_conv[12]))|joint\.(enc|pred|joint_net\.\d+))\.weight$")


def keeps_q8_0(f: GGUFFile, schema_names) -> bool:
    """Whether the file's int8-able weights are stored as Q8_0 (then the model keeps them int8 by
    default). `schema_names` maps the file's tensor names to NeMo names."""
    types = {f.tensors[n].qtype for n in f.tensors if INT8_WEIGHTS.match(schema_names(n) or "")}
    return quants.Q8_0 in types


class Int8Reader:
    """The read_state_dict hook: an int8-able weight is read as int8 rows, a stand-in takes its place."""

    def __init__(self, stored_q8_0_only: bool = False):
        """stored_q8_0_only: the default mode for a Q8_0 file (see the module), else every int8-able weight."""
        self.rows: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.stored_q8_0_only = stored_q8_0_only
        self._since_trim = 0

    def __call__(self, f: GGUFFile, gguf_name: str, nemo_name: str) -> Optional[torch.Tensor]:
        if not INT8_WEIGHTS.match(nemo_name):
            return None
        info = f.info(gguf_name)
        if self.stored_q8_0_only and info.qtype != quants.Q8_0 and not nemo_name.startswith("encoder."):
            return None
        shape = list(info.shape)
        while len(shape) > 2 and shape[-1] == 1:  # a pointwise convolution [N, K, 1]: rows of K
            shape.pop()
        try:
            q, scale = quants.int8_rows(f.raw(gguf_name), info.qtype, tuple(shape))
        except ValueError as e:
            raise ModelError(f"{f.path}: tensor {gguf_name}: {e}") from None
        f.release(gguf_name)
        self.rows[nemo_name] = (q, scale)
        # The int8 weights (kept) and each tensor's float chunks (freed) alternate in the heap, which
        # then cannot shrink: without a trim now and then, the load's peak held twice the int8 model
        # (TDT 0.6B Q8_0: 2.3 GB peak; trimming every 32 MiB: 1.2 GB, at no measurable cost).
        self._since_trim += q.numel()
        if self._since_trim >= TRIM_EVERY:
            release_memory()
            self._since_trim = 0
        return torch.zeros(1).expand(*info.shape)

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

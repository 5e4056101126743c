"""Writing a GGUF file: the metadata as an ordered list of (key, value type, value), tensors as float
tensors with the ggml type each is stored in (quantized by `quants.quantize`), through `gguf.GGUFWriter`.

Value types: "str", "u32", "i32", "f32", "bool", or ("arr", one of those but "bool") for an array.
"""
from __future__ import annotations

import re

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import quants


@dataclass
class KV:
    entries: list = field(default_factory=list)  # [key, vtype, value], in file order

    def add(self, key: str, vtype, value) -> None:
        self.entries.append([key, vtype, value])

    def keys(self) -> list[str]:
        return [e[0] for e in self.entries]

    def index(self, key: str) -> int:
        return self.keys().index(key)

    def get(self, key: str, default=None):
        for e in self.entries:
            if e[0] == key:
                return e[2]
        return default



def parse_value(key: str, vtype, text: str):
    """A value typed `vtype` from its text (a list: comma-separated). ValueError when it does not parse."""
    if vtype == "str":
        return text
    if vtype in ("u32", "i32"):
        v = int(text)
        if vtype == "u32" and v < 0:
            raise ValueError("must be >= 0")
        return v
    if vtype == "f32":
        return float(text)
    if vtype == "bool":
        low = text.strip().lower()
        if low in ("1", "true", "yes"):
            return True
        if low in ("0", "false", "no"):
            return False
        raise ValueError("must be true or false")
    if isinstance(vtype, tuple):
        items = [s.strip() for s in text.split(",") if s.strip()] if text.strip() else []
        return [parse_value(key, vtype[1], s) for s in items]
    raise ValueError(f"unsupported type {vtype}")


_ARR = {"str": "STRING", "i32": "INT32", "f32": "FLOAT32", "u32": "UINT32"}


def write(path: Path, kv: KV, tensors: list[tuple[str, torch.Tensor, int]]) -> None:
    """Write `kv` (general.architecture first) and `tensors` [(name, float tensor, ggml type)] to `path`."""
    import gguf

    GT = gguf.GGUFValueType
    w = gguf.GGUFWriter(str(path), arch=kv.get("general.architecture"))  # writes that key first
    try:
        for key, vtype, value in kv.entries:
            if key == "general.architecture":
                continue
            if vtype == "str":
                w.add_string(key, value)
            elif vtype == "u32":
                w.add_uint32(key, int(value))
            elif vtype == "i32":
                w.add_int32(key, int(value))
            elif vtype == "f32":
                w.add_float32(key, float(value))
            elif vtype == "bool":
                w.add_bool(key, bool(value))
            else:
                sub = GT[_ARR[vtype[1]]]
                w.add_key_value(key, list(value), GT.ARRAY, sub_type=sub)
        for name, t, q in tensors:
            if q == quants.F32:
                arr = t.contiguous().numpy().astype(np.float32, copy=False)
                w.add_tensor(name, arr)
            elif q == quants.F16:
                arr = t.contiguous().to(torch.float16).numpy()
                w.add_tensor(name, arr)
            else:
                raw = quants.quantize(t.contiguous(), q).numpy()
                w.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType(q))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
    finally:
        w.close()


# A type suffix of a GGUF file's name (-F32, -q8_0, -Q4_K_M...).
_TYPE_SUFFIX = re.compile(r"[-_.](f32|f16|bf16|q\d(_\d|_k(_[sml])?)?)$", re.IGNORECASE)


def variant_of(out_path) -> str:
    """The variant slug from an output file name: its stem without a type suffix (-F32, -Q8_0...)."""
    stem = Path(out_path).name
    if stem.lower().endswith(".gguf"):
        stem = stem[:-5]
    return _TYPE_SUFFIX.sub("", stem) or stem


def size_label(n_params: int) -> str:
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n_params >= scale:
            v = n_params / scale
            return (f"{v:.0f}" if v >= 10 else f"{v:.1f}").rstrip("0").rstrip(".") + suffix
    return str(n_params)

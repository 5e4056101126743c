"""A transformers checkpoint's safetensors files: one `<stem>.safetensors`, or the shards a
`<stem>.safetensors.index.json` names; read as tensors only (nothing in them runs)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import ModelError


def weight_files(path: Path, stem: str = "model") -> list[Path]:
    """The files of `path`'s `<stem>` weights; a ModelError naming what is missing."""
    index = path / f"{stem}.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelError(f"{index}: not a safetensors index ({e})") from None
        if not all(isinstance(s, str) and "/" not in s and "\\" not in s and s not in ("", ".", "..") for s in shards):
            raise ModelError(f"{index}: a shard name is not a file name of the directory")
        files = [path / s for s in shards]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ModelError(f"{path}: weight shards missing: {', '.join(missing[:4])}")
        return files
    single = path / f"{stem}.safetensors"
    if single.is_file():
        return [single]
    raise ModelError(f"{path}: no {stem}.safetensors (or {stem}.safetensors.index.json) weights")


# safetensors' dtype names -> torch's (the ones checkpoints of these models use)
_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
           "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
_MAX_HEADER = 100 << 20  # bytes of JSON header a file may declare (the format's own limit)


def read_tensors(files: list[Path]) -> dict:
    """name -> tensor of every file (torch tensors); a ModelError for an unreadable file or a tensor named twice.

    Each tensor is a private (copy-on-write) mapping of its own bytes of the file (`file_map`): nothing is read until it is
    used, and a tensor the caller drops (a weight cast or quantized as it loads) gives its pages back at once.
    With one mapping for the whole file (safetensors' own reader), every page read stays resident until the
    last tensor of the file is gone: a 4.6 GB checkpoint quantized to int8 peaked at 7.2 GB that way."""
    out: dict = {}
    for f in files:
        try:
            for name, t in _map_file(f):
                if name in out:
                    raise ModelError(f"{f}: tensor {name!r} appears in two files")
                out[name] = t
        except OSError as e:
            raise ModelError(f"{f}: {e}") from None
    return out


def _map_file(f: Path):
    """(name, tensor) of a safetensors file: an 8-byte little-endian header size, a JSON header (name -> dtype,
    shape, data offsets), the data."""
    import torch

    from .file_map import map_bytes

    def bad(why: str) -> ModelError:
        return ModelError(f"{f}: not a readable safetensors file ({why})")

    with open(f, "rb") as h:
        size = os.fstat(h.fileno()).st_size
        head = h.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if n < 2 or n > min(_MAX_HEADER, size - 8):
            raise bad("no header")
        try:
            header = json.loads(h.read(n).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise bad(f"header: {e}") from None
        if not isinstance(header, dict):
            raise bad("the header is not an object")
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            try:
                dtype = getattr(torch, _DTYPES[info["dtype"]])
                shape = [int(d) for d in info["shape"]]
                a, b = (int(o) for o in info["data_offsets"])
            except (KeyError, TypeError, ValueError):
                raise bad(f"tensor {name!r}: dtype, shape or data_offsets missing or unknown") from None
            count = 1
            for d in shape:
                count *= d
            itemsize = torch.empty((), dtype=dtype).element_size()
            if min(shape, default=0) < 0 or not 0 <= a <= b or base + b > size or b - a != count * itemsize:
                raise bad(f"tensor {name!r}: its data does not fit its shape or the file")
            a, b = base + a, base + b
            if count == 0:
                t = torch.empty(shape, dtype=dtype)
            elif a % itemsize:  # not aligned for its dtype in the file: a copy of its own
                h.seek(a)
                t = torch.frombuffer(bytearray(h.read(b - a)), dtype=torch.uint8).view(dtype).reshape(shape)
            else:
                t = map_bytes(h.fileno(), a, b - a).view(dtype).reshape(shape)
            yield name, t

"""Reading a GGUF file: its key/value metadata and its tensors, memory-mapped.

`header.py` parses the header (every declared count checked before it is read); the file's bytes
stay a read-only memory map: a tensor is read (and dequantized, `quants.py`) when it is asked for,
and `release(name)` gives its pages back to the system once the model holds its own copy, so loading
never keeps a full copy of the file in memory on top of the model. Nothing in a GGUF file is executed.

`Keys` is the metadata as a loader sees it: every key is either read (`get`, `require`), accepted as
not changing what the model computes (`accept`), or, at `finish()`, a `ModelError` naming it.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np
import torch

from ..config_yaml import excerpt
from ..errors import ModelError
from ..file_map import map_bytes
from . import MAGIC
from ..runtime import release_memory
from . import quants
from .header import read_header

_PAGE = mmap.PAGESIZE
TRIM_EVERY = 32 << 20  # bytes of tensors made (`made`) between two trims of the heap


@dataclass(frozen=True)
class TensorInfo:
    name: str
    qtype: int  # ggml type id (quants.F32, quants.Q8_0, ...)
    shape: tuple[int, ...]  # PyTorch order (ggml's ne reversed)
    offset: int  # absolute byte offset in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return quants.TYPE_NAMES.get(self.qtype, f"type {self.qtype}")

    @property
    def ne(self) -> tuple[int, ...]:
        """ggml's dims (fastest first)."""
        return tuple(reversed(self.shape))


class GGUFFile:
    """One GGUF file: `arch`, `meta` (key -> Python value), `value_types` (key -> gguf value type
    names, e.g. ("UINT32",) or ("ARRAY", "INT32")), `tensors` (name -> TensorInfo, in file order)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise ModelError(f"{self.path}: no such GGUF file")
        with open(self.path, "rb") as f:
            head = f.read(4)
        if head != MAGIC:
            raise ModelError(f"{self.path}: not a GGUF file (it does not start with {MAGIC!r})")
        header = read_header(self.path)
        size = self.path.stat().st_size
        self.meta: dict[str, Any] = header.meta
        self.value_types: dict[str, tuple[str, ...]] = header.value_types
        self.tensors: dict[str, TensorInfo] = {}
        for t in header.tensors:
            self.tensors[t.name] = self._info(t, header.data_offset, size)
        try:
            self._data: Optional[np.memmap] = np.memmap(self.path, mode="r")
        except (OSError, ValueError) as e:
            raise ModelError(f"{self.path}: unreadable GGUF file ({e})") from None
        self.arch = self.meta.get("general.architecture")
        self.alignment = int(self.meta.get("general.alignment", 32))
        self._since_trim = 0

    def _info(self, t, data_offset: int, size: int) -> TensorInfo:
        """A tensor's entry checked: a type this package reads, a unique name, its bytes inside the file."""
        if t.qtype not in quants.TYPE_NAMES:
            raise ModelError(f"{self.path}: tensor {t.name} has ggml type {t.qtype} "
                             f"({_ggml_name(t.qtype)}), which this package does not read "
                             f"({', '.join(quants.TYPE_NAMES.values())})")
        if t.name in self.tensors:
            raise ModelError(f"{self.path}: corrupt or truncated GGUF file (tensor {t.name} appears twice)")
        per_block, block_bytes = quants.block_size(t.qtype)
        n = 1
        for d in t.ne:
            n *= d
        info = TensorInfo(t.name, t.qtype, tuple(reversed(t.ne)), data_offset + t.offset, n * block_bytes // per_block)
        if info.offset + info.nbytes > size:
            raise ModelError(f"{self.path}: truncated GGUF file (tensor {t.name} ends at byte "
                             f"{info.offset + info.nbytes}, the file has {size})")
        return info

    # ------------------------------------------------------------------------------------------
    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelError(f"{self.path}: tensor {name} is missing") from None

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as a read-only uint8 view of the memory map (no copy)."""
        info = self.info(name)
        if self._data is None:
            raise ModelError(f"{self.path}: the file was closed")
        return self._data[info.offset:info.offset + info.nbytes]

    def mapped(self, name: str) -> torch.Tensor:
        """The tensor's bytes as a uint8 tensor [nbytes] on a private (copy-on-write) mapping of its own: nothing
        is read until it is used, nothing is copied, and its pages go when the last view of it is dropped.
        For a weight held as the file stores it (a Q8_0 file's blocks, an F16 weight): the model then keeps the
        file open through the mapping, as ggml's runtimes do."""
        info = self.info(name)
        try:
            with open(self.path, "rb") as h:
                return map_bytes(h.fileno(), info.offset, info.nbytes)
        except (OSError, ValueError) as e:
            raise ModelError(f"{self.path}: tensor {name}: cannot map it ({e})") from None

    def tensor(self, name: str, dtype: torch.dtype = torch.float32, release: bool = True) -> torch.Tensor:
        """The tensor as a new `dtype` tensor of its PyTorch shape (dequantized if quantized); its
        pages of the map are released afterwards unless release is false."""
        info = self.info(name)
        try:
            if info.qtype == quants.F32 and dtype == torch.float32:
                out = torch.from_numpy(np.array(self.raw(name)).view(np.float32)).reshape(info.shape)
            else:
                out = quants.dequantize(self.raw(name), info.qtype, info.shape)
                if out.dtype != dtype:
                    out = out.to(dtype)
        except ValueError as e:
            raise ModelError(f"{self.path}: tensor {name}: {e}") from None
        if release:
            self.release(name)
        if info.qtype != quants.F32:
            self.made(out.numel() * out.element_size())
        return out

    def made(self, nbytes: int) -> None:
        """Count bytes of tensors made from the file through temporaries (dequantized, or int8 rows); the
        heap is trimmed every TRIM_EVERY of them. The kept tensors and each one's freed float chunks
        alternate in the heap, which then cannot shrink: untrimmed, a 0.6B model's load peaked far above
        what it keeps (Q8_0 as int8: 2.24 GB against 1.24 GB trimmed; Q4_0 dequantized: 3.19 against 2.72)."""
        self._since_trim += nbytes
        if self._since_trim >= TRIM_EVERY:
            release_memory()
            self._since_trim = 0

    def release(self, name: str) -> None:
        """Drop the pages of one tensor from this process's memory (they are re-read from the file if
        asked for again): after a tensor is copied into the model, its bytes in the map need no memory."""
        info = self.tensors.get(name)
        mm = getattr(self._data, "_mmap", None)
        if info is None or mm is None or not hasattr(mm, "madvise"):
            return
        start = info.offset - info.offset % _PAGE
        end = info.offset + info.nbytes
        try:
            mm.madvise(mmap.MADV_DONTNEED, start, end - start)
        except (OSError, ValueError, AttributeError):
            pass

    def close(self) -> None:
        """Unmap the file (tensors already read stay valid)."""
        data, self._data = self._data, None
        mm = getattr(data, "_mmap", None)
        del data
        if mm is not None:
            try:
                mm.close()
            except (BufferError, ValueError):
                pass  # a view still refers to it; the map goes with the last view

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def keys(self, prefix: str = "") -> "Keys":
        return Keys(self, prefix)


class Keys:
    """The metadata keys a loader reads. `get`/`require` read a key (relative to `prefix`, or absolute
    when it starts with "general." / "tokenizer.ggml." / the prefix itself); `accept` marks keys that do
    not change what the model computes; `finish()` raises a ModelError for any key left."""

    def __init__(self, file: GGUFFile, prefix: str = ""):
        self.file = file
        self.prefix = prefix
        self.seen: set[str] = set()

    def _full(self, key: str) -> str:
        if key.startswith(("general.", "tokenizer.ggml.")) or (self.prefix and key.startswith(self.prefix)):
            return key
        return self.prefix + key

    def has(self, key: str) -> bool:
        return self._full(key) in self.file.meta

    def get(self, key: str, default=None):
        full = self._full(key)
        self.seen.add(full)
        return self.file.meta.get(full, default)

    def require(self, key: str):
        full = self._full(key)
        if full not in self.file.meta:
            raise ModelError(f"{self.file.path}: metadata key {full} is missing")
        self.seen.add(full)
        return self.file.meta[full]

    def accept(self, keys: Iterable[str]) -> None:
        """Mark keys (exact, or ending in '*' for a prefix) as read and not needed."""
        for key in keys:
            if key.endswith("*"):
                stem = self._full(key[:-1])
                self.seen.update(k for k in self.file.meta if k.startswith(stem))
            else:
                self.seen.add(self._full(key))

    def expect(self, key: str, allowed) -> Any:
        """A key whose value must be one of `allowed` (a ModelError names the value otherwise)."""
        value = self.require(key)
        if value not in allowed:
            raise ModelError(f"{self.file.path}: {self._full(key)} = {excerpt(value)} is not implemented "
                             f"({', '.join(map(repr, allowed))})")
        return value

    def finish(self) -> None:
        left = sorted(k for k in self.file.meta if k not in self.seen)
        if left:
            shown = ", ".join(f"{k} = {_short(self.file.meta[k])}" for k in left[:6])
            raise ModelError(f"{self.file.path}: metadata key{'s' if len(left) > 1 else ''} this code does not "
                             f"implement: {shown}{' ...' if len(left) > 6 else ''}")


def _short(v) -> str:
    return excerpt(v, 60)


def _ggml_name(qtype: int) -> str:
    try:
        import gguf

        return gguf.GGMLQuantizationType(qtype).name
    except ValueError:
        return "unknown"


def missing_layers(f: GGUFFile, prefix: str, n_layers: int, what: str = "such layers") -> Optional[str]:
    """Why a file's layer count `n_layers` does not match the layers whose tensors (`prefix`N.*) it holds,
    or None when it does: checked from the tensor names before a model is built, so a count claiming
    more is an error naming the first missing layer's tensors, never a loop over the claimed count."""
    have = set()
    for name in f.tensors:
        if name.startswith(prefix):
            index = name[len(prefix):].split(".", 1)[0]
            if index.isdigit():
                have.add(int(index))
    if n_layers == len(have) and have == set(range(len(have))):
        return None
    missing = next((i for i in range(len(have) + 1) if i not in have), len(have))
    return (f"{n_layers}, but the file holds tensors for {len(have)} {what}"
            + (f" (tensors {prefix}{missing}.* are missing)" if missing < n_layers else ""))

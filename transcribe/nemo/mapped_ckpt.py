"""A PyTorch checkpoint (`model_weights.ckpt`, PyTorch's zip format) read where it lies, tensor by tensor mapped.

A `.nemo` is a tar archive, and NeMo writes it uncompressed: the checkpoint's bytes lie in the archive as they are,
and inside them PyTorch's zip stores each storage uncompressed (`archive/data/<key>`). So each storage can be a
private (copy-on-write) mapping of its own bytes of the file (`transcribe.file_map`): nothing is read until it is used, nothing is
copied, and a storage that the model drops (a weight cast to bfloat16 or quantized to int8 as it loads) gives its
pages back at once. `torch.load` of the archive's member reads the whole checkpoint into memory first: for the
0.6B Parakeet 2.5 GB read and copied, which an int8 model then drops.

The pickle (`archive/data.pkl`) is read with PyTorch's own weights-only unpickler, as `torch.load(...,
weights_only=True)` reads it: nothing in the file is executed. `read_mapped` returns None for whatever it does not
read this way (a compressed member or record, a big-endian checkpoint, an unpickling error: the caller then reads
the file with `torch.load`, which says what is wrong).
"""
from __future__ import annotations

import io
import os
import struct
import zipfile
from typing import Optional

import torch

from ..file_map import map_bytes

_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")  # a zip entry's local header: 30 bytes
_LOCAL_MAGIC = 0x04034B50


class _Window(io.RawIOBase):
    """Bytes [start, start + size) of an open file, as a file of their own (seekable, read-only)."""

    def __init__(self, f, start: int, size: int):
        super().__init__()
        self.f, self.start, self.size, self.pos = f, start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, b) -> int:
        n = max(0, min(len(b), self.size - self.pos))
        if n == 0:
            return 0
        self.f.seek(self.start + self.pos)
        got = self.f.readinto(memoryview(b)[:n])
        self.pos += got
        return got


def read_mapped(path: str | os.PathLike, start: int, size: int) -> Optional[dict]:
    """The checkpoint lying in bytes [start, start + size) of `path`, unpickled (weights only) with each storage
    mapped from the file; None when it is not stored so (see the module)."""
    try:
        from torch import _weights_only_unpickler as wu  # torch.load(weights_only=True)'s own
    except ImportError:
        return None

    with open(path, "rb") as f:
        try:
            z = zipfile.ZipFile(_Window(f, start, size))
        except (zipfile.BadZipFile, OSError, ValueError, EOFError):
            return None
        infos = {i.filename: i for i in z.infolist()}
        pkl = [n for n in infos if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkl) != 1:
            return None
        prefix = pkl[0][: -len("data.pkl")]
        order = infos.get(prefix + "byteorder")
        if order is not None and z.read(order).strip() != b"little":
            return None
        if infos[pkl[0]].compress_type != zipfile.ZIP_STORED:
            return None
        data = z.read(infos[pkl[0]])

        def where(name: str) -> tuple[int, int]:
            """A record's (offset in the file, bytes): it must be stored, inside the member."""
            info = infos.get(name)
            if info is None or info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
                raise ValueError(f"record {name} is missing or compressed")
            f.seek(start + info.header_offset)
            head = f.read(_LOCAL_HEADER.size)
            if len(head) != _LOCAL_HEADER.size:
                raise ValueError("truncated")
            fields = _LOCAL_HEADER.unpack(head)
            if fields[0] != _LOCAL_MAGIC:
                raise ValueError("no local header")
            at = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
            if at + info.file_size > size:
                raise ValueError(f"record {name} ends past the checkpoint")
            return start + at, info.file_size

        storages: dict = {}

        def persistent_load(saved_id):
            if not isinstance(saved_id, tuple) or len(saved_id) != 5:
                raise ValueError("not a storage")
            typename, storage_type, key, _location, numel = saved_id
            if (typename.decode() if isinstance(typename, bytes) else typename) != "storage":
                raise ValueError("not a storage")
            dtype = torch.uint8 if storage_type is torch.UntypedStorage else storage_type.dtype
            key = key.decode() if isinstance(key, bytes) else str(key)
            if key not in storages:
                at, nbytes = where(f"{prefix}data/{key}")
                itemsize = torch.empty((), dtype=dtype).element_size()
                if nbytes != numel * itemsize:
                    raise ValueError(f"storage {key}: {nbytes} bytes for {numel} values")
                storages[key] = torch.storage.TypedStorage(
                    wrap_storage=map_bytes(f.fileno(), at, nbytes).untyped_storage(), dtype=dtype, _internal=True)
            return storages[key]

        try:
            up = wu.Unpickler(io.BytesIO(data), encoding="utf-8")
            up.persistent_load = persistent_load
            return up.load()
        except Exception:  # the caller reads it with torch.load, which names what is wrong
            return None


"""A GGUF file's header (version, metadata, tensor table), parsed with every declared count checked
before anything is read.

The header's counts (keys, tensors, array lengths, string lengths, dimensions) are the file's own
words: each is checked against the bytes left in the file (an array of n uint32 needs 4n bytes, a
string array at least 8 bytes an element for the lengths) and against what a model file can need
(`MAX_*` below) before it is acted on, so a small file cannot make the reader allocate or loop
beyond a bound. Read with plain file reads, in the format's little-endian byte order; a big-endian
file (which the tensor decoders could not read either) is refused.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..errors import ModelError

VERSIONS = (2, 3)
# Bounds of what a model file can need (a transcription model's GGUF has tens of keys, a vocabulary
# of at most a few hundred thousand tokens, a few thousand tensors of at most 4 dimensions).
MAX_KEYS = 1 << 16
MAX_TENSORS = 1 << 16
MAX_ARRAY = 1 << 20  # elements of one metadata array (a vocabulary of 2^20 tokens)
MAX_ELEMENTS = 1 << 22  # elements of all metadata arrays together
MAX_NAME = 1 << 16  # bytes of a key or tensor name
MAX_STRING = 64 << 20  # bytes of one string value
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS

STRING, ARRAY = 8, 9
# gguf value type id -> (name, struct format of one value); STRING and ARRAY are read apart.
SCALARS: dict[int, tuple[str, str]] = {
    0: ("UINT8", "B"), 1: ("INT8", "b"), 2: ("UINT16", "H"), 3: ("INT16", "h"), 4: ("UINT32", "I"),
    5: ("INT32", "i"), 6: ("FLOAT32", "f"), 7: ("BOOL", "B"), 10: ("UINT64", "Q"), 11: ("INT64", "q"),
    12: ("FLOAT64", "d"),
}
TYPE_NAMES = {**{k: v[0] for k, v in SCALARS.items()}, STRING: "STRING", ARRAY: "ARRAY"}


@dataclass(frozen=True)
class RawTensor:
    name: str
    qtype: int
    ne: tuple[int, ...]  # ggml's dims (fastest first)
    offset: int  # relative to the data section


@dataclass
class Header:
    version: int
    meta: dict[str, Any]  # key -> Python value (lists for arrays)
    value_types: dict[str, tuple[str, ...]]  # key -> ("UINT32",) or ("ARRAY", "INT32")
    tensors: list[RawTensor]
    alignment: int
    data_offset: int  # absolute offset of the data section


class _Corrupt(Exception):
    pass


class _Reader:
    def __init__(self, f: BinaryIO, size: int):
        self.f, self.size, self.pos = f, size, 0
        self.elements = 0  # array elements read so far

    def left(self) -> int:
        return self.size - self.pos

    def take(self, n: int) -> bytes:
        if n > self.left():
            raise _Corrupt(f"{n} bytes wanted at byte {self.pos}, the file has {self.size}")
        data = self.f.read(n)
        if len(data) != n:
            raise _Corrupt(f"the file ends at byte {self.pos + len(data)}")
        self.pos += n
        return data

    def scalar(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def name(self, what: str) -> str:
        n = self.scalar("Q")
        if n > MAX_NAME:
            raise _Corrupt(f"{what} at byte {self.pos - 8} declares a name of {n} bytes")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise _Corrupt(f"{what} at byte {self.pos - n} is not UTF-8") from None

    def string_bytes(self, key: str) -> bytes:
        n = self.scalar("Q")
        if n > MAX_STRING:
            raise ModelError(f"metadata key {key} declares a string of {n} bytes, more than a GGUF "
                             f"string may have here ({MAX_STRING >> 20} MiB)")
        return self.take(n)


def _decode(data: bytes, key: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModelError(f"metadata key {key} is unreadable ({e})") from None


def _array(r: _Reader, key: str) -> tuple[list, tuple[str, ...]]:
    itype = r.scalar("I")
    n = r.scalar("Q")
    if itype == ARRAY:
        raise ModelError(f"metadata key {key} is an array of arrays, which this package does not read")
    if itype != STRING and itype not in SCALARS:
        raise _Corrupt(f"metadata key {key} is an array of unknown value type {itype}")
    if n > MAX_ARRAY or r.elements + n > MAX_ELEMENTS:
        raise ModelError(f"metadata key {key} declares an array of {n} elements, more than a model file's "
                         f"metadata may hold ({MAX_ARRAY} in one array, {MAX_ELEMENTS} in all)")
    least = 8 if itype == STRING else struct.calcsize(SCALARS[itype][1])
    if n * least > r.left():
        raise _Corrupt(f"metadata key {key} declares an array of {n} elements ({n * least} bytes at least), "
                       f"{r.left()} bytes are left in the file")
    r.elements += n
    if itype == STRING:
        return [_decode(r.string_bytes(key), key) for _ in range(n)], ("ARRAY", "STRING")
    name, fmt = SCALARS[itype]
    values = np.frombuffer(r.take(n * least), dtype="<" + fmt, count=n).tolist()
    if itype == 7:  # BOOL
        values = [bool(v) for v in values]
    return values, ("ARRAY", name)


def _value(r: _Reader, vtype: int, key: str) -> tuple[Any, tuple[str, ...]]:
    if vtype == STRING:
        return _decode(r.string_bytes(key), key), ("STRING",)
    if vtype == ARRAY:
        return _array(r, key)
    if vtype not in SCALARS:
        raise _Corrupt(f"metadata key {key} has unknown value type {vtype}")
    name, fmt = SCALARS[vtype]
    v = r.scalar(fmt)
    return (bool(v) if vtype == 7 else v), (name,)


def _counts(r: _Reader) -> tuple[int, int, int]:
    version = r.scalar("I")
    if version & 0xFFFF == 0 and version:
        raise ModelError("a big-endian GGUF file, which this package does not read")
    if version not in VERSIONS:
        raise ModelError(f"GGUF version {version} is not read (versions {', '.join(map(str, VERSIONS))})")
    n_tensors, n_keys = r.scalar("Q"), r.scalar("Q")
    # a key is at least 13 bytes (name length, type, a one-byte value), a tensor entry 24
    for n, most, least, what in ((n_keys, MAX_KEYS, 13, "metadata keys"), (n_tensors, MAX_TENSORS, 24, "tensors")):
        if n > most:
            raise ModelError(f"the header declares {n} {what}, more than a model file may have ({most})")
        if n * least > r.left():
            raise _Corrupt(f"the header declares {n} {what}, which cannot fit in the {r.size} bytes of the file")
    return version, n_tensors, n_keys


def _tensor(r: _Reader) -> RawTensor:
    name = r.name("a tensor name")
    n_dims = r.scalar("I")
    if n_dims > MAX_DIMS:
        raise _Corrupt(f"tensor {name} declares {n_dims} dimensions (ggml has at most {MAX_DIMS})")
    ne = struct.unpack(f"<{n_dims}Q", r.take(8 * n_dims))
    qtype, offset = r.scalar("I"), r.scalar("Q")
    return RawTensor(name, qtype, tuple(ne), offset)


def _parse(r: _Reader) -> Header:
    if r.take(4) != b"GGUF":
        raise _Corrupt("no GGUF magic")
    version, n_tensors, n_keys = _counts(r)
    meta: dict[str, Any] = {}
    types: dict[str, tuple[str, ...]] = {}
    for _ in range(n_keys):
        key = r.name("a metadata key")
        if key in meta:
            raise _Corrupt(f"metadata key {key} appears twice")
        meta[key], types[key] = _value(r, r.scalar("I"), key)
    tensors = [_tensor(r) for _ in range(n_tensors)]
    alignment = meta.get("general.alignment", 32)
    if "general.alignment" in meta and (types["general.alignment"] != ("UINT32",) or alignment <= 0
                                        or alignment & (alignment - 1)):
        raise _Corrupt(f"general.alignment = {alignment!r} is not a power of two (uint32)")
    data_offset = -(-r.pos // alignment) * alignment
    return Header(version, meta, types, tensors, alignment, data_offset)


def read_header(path: str | Path) -> Header:
    """The header of the GGUF file at `path`; a ModelError naming the file when it is not a readable
    GGUF header or declares more than the file holds or a model file may need."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            return _parse(_Reader(f, size))
    except _Corrupt as e:
        raise ModelError(f"{path}: corrupt or truncated GGUF file ({e})") from None
    except ModelError as e:
        raise ModelError(f"{path}: {e}") from None
    except OSError as e:
        raise ModelError(f"{path}: unreadable GGUF file ({e.strerror or e})") from None

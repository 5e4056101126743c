"""GGUF files (the format of llama.cpp's ggml, used by parakeet.cpp and transcribe.cpp): reading them
memory-mapped (`file.py`; the header parsed with bounds, `header.py`), the ggml tensor types
(`quants.py`), writing them (`writer.py`). What the tensors and keys mean is each family's
business: `parakeet/gguf.py`, `granite/gguf.py`."""
from __future__ import annotations

from pathlib import Path

MAGIC = b"GGUF"


def is_gguf(path) -> bool:
    """Whether a path is a file that starts with the GGUF magic."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def architecture(path) -> str | None:
    """`general.architecture` of a GGUF file, read from the header without parsing the rest (writers put
    it first; when it is not first, the whole metadata is parsed); None when the path is not a GGUF file
    or names no architecture."""
    import struct

    if not is_gguf(path):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(24)
            if len(head) < 24:
                return None
            n = struct.unpack("<Q", f.read(8))[0]
            if n == len("general.architecture") and f.read(n) == b"general.architecture":
                vtype = struct.unpack("<I", f.read(4))[0]
                if vtype == 8:  # a string
                    m = struct.unpack("<Q", f.read(8))[0]
                    if m <= 256:
                        return f.read(m).decode("utf-8", "replace")
                return None
    except (OSError, struct.error):
        return None
    try:
        from .header import read_header

        value = read_header(path).meta.get("general.architecture")
        return value if isinstance(value, str) else None
    except Exception:  # a corrupt file: its loader says what is wrong
        return None

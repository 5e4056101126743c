"""Bytes of a model file as a tensor on a private mapping of their own, holding no file descriptor.

Every weight that a loader keeps as the file stores it, or reads only to convert, is mapped this way
(safetensors files, GGUF files, `.nemo` checkpoints): nothing is read until it is used, nothing is copied, the
mapping is copy-on-write (a write to the tensor stays in this process), and it is unmapped when the last tensor
viewing it is gone, so a weight dropped while loading (cast or quantized) gives its pages back at once.

Python's `mmap.mmap` keeps a duplicate of the file's descriptor open for each mapping: a 0.6B model's thousand
tensors would hold a thousand descriptors, against a common limit of 1024 per process. So on POSIX systems the
mapping is made with the C library's mmap(2) through ctypes and released by munmap(2) when the buffer the tensor
holds is collected; elsewhere (or without a C library found) `mmap.mmap` is used.

A mapped weight follows its file: a model file overwritten in place while a model from it is loaded changes that
model's weights (or faults it, cut short), as with any memory-mapped model (llama.cpp, safetensors); a file
replaced by a rename, as hub downloads replace files, leaves the loaded model as it was.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import weakref

import torch

_MAP_FAILED = ctypes.c_void_p(-1).value


def _libc():
    if os.name != "posix":
        return None
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
        lib.munmap.restype = ctypes.c_int
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        return lib
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def map_bytes(fd: int, offset: int, nbytes: int) -> torch.Tensor:
    """Bytes [offset, offset + nbytes) of the open file `fd` as a uint8 tensor on a private mapping of their own
    (the descriptor may be closed afterwards). An OSError when the system refuses the mapping."""
    if nbytes <= 0:
        return torch.empty(0, dtype=torch.uint8)
    base = offset - offset % mmap.ALLOCATIONGRANULARITY
    length = offset + nbytes - base
    libc = _LIBC
    if libc is None:
        view = mmap.mmap(fd, length, offset=base, access=mmap.ACCESS_COPY)
        return torch.frombuffer(view, dtype=torch.uint8, count=nbytes, offset=offset - base)
    addr = libc.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE, fd, base)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of {length} bytes at {base}: {os.strerror(err)}")
    buf = (ctypes.c_uint8 * length).from_address(addr)
    weakref.finalize(buf, libc.munmap, addr, length)  # when the last tensor on it is gone
    return torch.frombuffer(buf, dtype=torch.uint8, count=nbytes, offset=offset - base)

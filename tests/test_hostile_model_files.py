"""Hostile model files (issue 36, item 6): small GGUF headers whose declared counts are huge. Each is
given to the CLI in a subprocess under an address-space limit and a time limit, and must end in a
clear model error (exit 2) within them. Before the bounds, these files took gigabytes (the `gguf`
package read arrays element by element before any check).

The limits are the issue's test form: the loaders stop at the first count they check, in well under a
second and a few megabytes here; the time limit only keeps a regression from hanging the suite.
"""
from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from .conftest import REPO, SHARED

JFK = SHARED / "audio" / "jfk.wav"
MEMORY_LIMIT = 3 << 30  # bytes of address space: the CLI with torch loaded needs about 1 GB of it
TIME_LIMIT = 120  # seconds: a loaded CLI refusing a model takes a few


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _cli(model: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "transcribe", str(JFK), "-m", str(model)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TIME_LIMIT, preexec_fn=_limit_memory)


def _refused(model: Path, *words: str) -> str:
    r = _cli(model)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and str(model) in r.stderr, r.stderr[-2000:]
    for w in words:
        assert w in r.stderr, (w, r.stderr[-2000:])
    assert len(r.stderr) < 2000, len(r.stderr)  # a message, not a formatted expansion
    return r.stderr


# ------------------------------------------------------------------------------------------
# GGUF headers


def _s(text: str | bytes) -> bytes:
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def _kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", 8) + _s(value)


def _gguf(tmp_path: Path, hostile: bytes, n_kv: int = 2, n_tensors: int = 0, pad: int = 1 << 20) -> Path:
    """A GGUF header: magic, version 3, tensor count, kv count, general.architecture = parakeet, then
    the hostile bytes, then `pad` zero bytes (the file is about a megabyte, as in the issue)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + _kv_str("general.architecture", "parakeet")
    path = tmp_path / "hostile.gguf"
    path.write_bytes(head + hostile + bytes(pad))
    return path


def _array(key: str, itype: int, n: int) -> bytes:
    return _s(key) + struct.pack("<IIQ", 9, itype, n)


def test_a_uint8_array_of_2_to_the_40_elements_is_refused(tmp_path):
    _refused(_gguf(tmp_path, _array("parakeet.x", 0, 1 << 40)), "parakeet.x", "1099511627776 elements")


def test_an_array_of_arrays_is_refused(tmp_path):
    _refused(_gguf(tmp_path, _array("parakeet.x", 9, 1 << 40) + struct.pack("<IQ", 0, 1 << 30)),
             "parakeet.x is an array of arrays")


def test_a_vocabulary_of_ten_million_entries_is_refused(tmp_path):
    _refused(_gguf(tmp_path, _array("tokenizer.ggml.tokens", 8, 10_000_000)), "tokenizer.ggml.tokens", "10000000")


def test_a_vocabulary_beyond_the_bound_is_refused_even_when_the_file_holds_it(tmp_path):
    n = (1 << 20) + 1  # every entry an empty string: 8 bytes each, the file holds them all
    path = _gguf(tmp_path, _array("tokenizer.ggml.tokens", 8, n), pad=8 * n)
    _refused(path, "tokenizer.ggml.tokens declares an array of 1048577 elements")


@pytest.mark.parametrize("hostile, n_kv, n_tensors, words", [
    (b"", 1 << 40, 0, ["1099511627776 metadata keys"]),
    (b"", 1, 1 << 40, ["1099511627776 tensors"]),
    (_s("parakeet.x") + struct.pack("<IQ", 8, 1 << 60), 2, 0, ["parakeet.x declares a string of"]),
    (struct.pack("<Q", 1 << 60), 2, 0, ["corrupt or truncated GGUF file", "name of 1152921504606846976 bytes"]),
    (_s("t") + struct.pack("<I", 1 << 31), 1, 1, ["corrupt or truncated GGUF file", "2147483648 dimensions"]),
    (_s("t") + struct.pack("<I3QIQ", 3, 1 << 40, 1 << 40, 1 << 40, 0, 0), 1, 1, ["truncated GGUF file", "tensor t"]),
])
def test_huge_counts_in_a_gguf_header_are_refused(tmp_path, hostile, n_kv, n_tensors, words):
    _refused(_gguf(tmp_path, hostile, n_kv=n_kv, n_tensors=n_tensors), *words)

"""The safetensors reader of the transformers-format families (transcribe/safetensors_files.py): every tensor
as safetensors' own reader gives it, each a mapping of its own bytes (a dropped tensor frees its pages), and a
ModelError naming the file for what it cannot read."""
from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file

from transcribe.errors import ModelError
from transcribe.safetensors_files import read_tensors, weight_files


def _tensors() -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "w.bf16": torch.randn(5, 7, generator=g).to(torch.bfloat16),  # 70 bytes: what follows is not 4-aligned
        "odd.u8": torch.arange(3, dtype=torch.uint8),
        "v.f32": torch.randn(11, generator=g),
        "empty": torch.zeros(0, 4),
        "flag": torch.tensor([True, False, True]),
        "q.i8": torch.randint(-127, 128, (4, 9), generator=g, dtype=torch.int8),
        "big.f16": torch.randn(300, 40, generator=g).to(torch.float16),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
    }


def test_every_tensor_reads_as_safetensors_reads_it(tmp_path):
    f = tmp_path / "model.safetensors"
    save_file(_tensors(), str(f), metadata={"format": "pt"})
    ours = read_tensors(weight_files(tmp_path))
    ref = load_file(str(f))
    assert set(ours) == set(ref)
    for k, t in ref.items():
        assert ours[k].dtype == t.dtype and ours[k].shape == t.shape and torch.equal(ours[k], t), k
    # private mappings: writing to a tensor changes neither the file nor a second read
    ours["v.f32"].add_(1.0)
    assert torch.equal(read_tensors([f])["v.f32"], ref["v.f32"])


def test_shards_and_a_tensor_in_two_of_them(tmp_path):
    t = _tensors()
    save_file({"a": t["v.f32"]}, str(tmp_path / "s1.safetensors"))
    save_file({"b": t["q.i8"]}, str(tmp_path / "s2.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}))
    got = read_tensors(weight_files(tmp_path))
    assert set(got) == {"a", "b"} and torch.equal(got["b"], t["q.i8"])
    save_file({"a": t["v.f32"]}, str(tmp_path / "s2.safetensors"))
    with pytest.raises(ModelError, match="'a' appears in two files"):
        read_tensors(weight_files(tmp_path))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../s1.safetensors"}}))
    with pytest.raises(ModelError, match="not a file name of the directory"):
        weight_files(tmp_path)


def _raw(header: dict, data: bytes) -> bytes:
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


@pytest.mark.parametrize("content, message", [
    (b"", "no header"),
    (struct.pack("<Q", 1 << 40) + b"{}", "no header"),
    (struct.pack("<Q", 5) + b"{nope", "header"),
    (_raw({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8), "does not fit"),
    (_raw({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, b"\0" * 16), "does not fit"),
    (_raw({"x": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8), "unknown"),
    (_raw({"x": {"dtype": "F32", "shape": [1]}}, b"\0" * 4), "missing"),
    (_raw([1, 2], b""), "not an object"),
])
def test_an_unreadable_file_is_named(tmp_path, content, message):
    f = tmp_path / "model.safetensors"
    f.write_bytes(content)
    with pytest.raises(ModelError, match=message) as e:
        read_tensors([f])
    assert str(f) in str(e.value)


def test_a_tensor_not_aligned_for_its_dtype_is_read_as_a_copy(tmp_path):
    y = torch.tensor([1.5, -2.25], dtype=torch.float32)
    raw = _raw({"x": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
                "y": {"dtype": "F32", "shape": [2], "data_offsets": [3, 11]}}, bytes([7, 8, 9]) + y.numpy().tobytes())
    f = tmp_path / "model.safetensors"
    f.write_bytes(raw)
    got = read_tensors([f])
    assert got["x"].tolist() == [7, 8, 9] and torch.equal(got["y"], y)

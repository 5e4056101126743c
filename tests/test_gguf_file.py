"""transcribe/gguf/file.py: the metadata as a loader reads it, tensors read from the map and released."""
from __future__ import annotations

import shutil

import pytest
import torch

from transcribe.errors import ModelError
from transcribe.gguf import architecture, is_gguf
from transcribe.gguf.file import GGUFFile

from .conftest import SHARED

GGUF = SHARED / "models" / "gguf"
Q8 = GGUF / "parakeet-cpp" / "tiny-tdt-fit-q8_0.gguf"


def test_metadata_values_and_types():
    with GGUFFile(Q8) as f:
        assert f.arch == "parakeet"
        assert f.meta["parakeet.encoder.d_model"] == 64 and f.value_types["parakeet.encoder.d_model"] == ("UINT32",)
        assert f.meta["parakeet.tdt.durations"] == [0, 1, 2, 3, 4]
        assert f.value_types["parakeet.tdt.durations"] == ("ARRAY", "INT32")
        assert f.meta["parakeet.encoder.xscaling"] is True
        assert f.meta["parakeet.tokenizer.pieces"][:2] == ["<unk>", "\u2581t"]
        # a float32 value read as the float it is (0.97 in float32)
        assert f.meta["parakeet.preprocessor.preemph"] == pytest.approx(0.97, abs=1e-7)
        info = f.info("encoder.pre_encode.out.weight")
        assert info.type_name == "Q8_0" and info.shape == (64, 512) and info.ne == (512, 64)


def test_keys_not_read_are_an_error_naming_them():
    with GGUFFile(Q8) as f:
        keys = f.keys("parakeet.")
        assert keys.require("encoder.d_model") == 64
        assert keys.get("no.such.key", 7) == 7
        keys.accept(["arch", "general.*", "preprocessor.*", "tokenizer.*", "encoder.*", "decoder.*", "joint.*", "decoding.*",
                     "tdt.*", "vocab_size"])
        with pytest.raises(ModelError, match=r"parakeet\.blank_id = 128"):
            keys.finish()
        keys.accept(["blank_id"])
        keys.finish()
        with pytest.raises(ModelError, match=r"parakeet\.arch = 'tdt' is not implemented \('ctc'\)"):
            keys.expect("arch", ("ctc",))
        with pytest.raises(ModelError, match="metadata key parakeet.nothing is missing"):
            keys.require("nothing")


def test_a_released_tensor_reads_again_the_same():
    with GGUFFile(Q8) as f:
        a = f.tensor("encoder.pre_encode.out.weight")
        b = f.tensor("encoder.pre_encode.out.weight")
        assert torch.equal(a, b) and a.dtype == torch.float32 and a.shape == (64, 512)
        w = f.tensor("preprocessor.featurizer.window")
    assert w.shape == (400,)  # a copy: valid after the file is closed
    with pytest.raises(ModelError, match="tensor nothing is missing"):
        GGUFFile(Q8).info("nothing")


def test_not_gguf_and_truncated_files(tmp_path):
    other = tmp_path / "x.gguf"
    other.write_bytes(b"NOPE" + bytes(100))
    assert not is_gguf(other) and architecture(other) is None
    with pytest.raises(ModelError, match="not a GGUF file"):
        GGUFFile(other)
    cut = tmp_path / "cut.gguf"
    data = Q8.read_bytes()
    for n in (2000, len(data) // 2, len(data) - 9):  # the last 8 bytes are alignment padding
        cut.write_bytes(data[:n])
        assert architecture(cut) == "parakeet"
        with pytest.raises(ModelError, match="truncated"):
            GGUFFile(cut)
    shutil.copy(Q8, tmp_path / "ok.gguf")
    assert architecture(tmp_path / "ok.gguf") == "parakeet"

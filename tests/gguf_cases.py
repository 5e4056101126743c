"""What the tests of transcribe.cpp's GGUF files of a family share (tests/test_<family>_gguf.py): the file's
runtime reference (`<stem>.ref.json` beside it, tools/make_<family>_gguf_refs.py), the file loaded once per
module, a clip of the shared audio, a copy of the file with one name or value edited in place, and the check that
loading such a copy is refused with a one-line ModelError naming what is wrong."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import transcribe
from transcribe.errors import ModelError

from .conftest import SHARED


def runtime_ref(gguf: Path) -> dict:
    """The `.ref.json` beside `gguf`: what transcribe.cpp's runtime gave for it."""
    return json.loads(Path(gguf).with_suffix(".ref.json").read_text(encoding="utf-8"))


def model_fixture(gguf: Path):
    """A module-scoped fixture loading `gguf` with transcribe.load_model (assign it to a module name: the
    fixture's name is that name)."""

    @pytest.fixture(scope="module")
    def model():
        return transcribe.load_model(str(gguf))

    return model


def audio(rel: str, *, mono: bool = True) -> np.ndarray:
    """shared/`rel` as float32; asserted 16 kHz (and one channel when `mono`)."""
    x, sr = sf.read(str(SHARED / rel), dtype="float32")
    assert sr == 16000 and (x.ndim == 1 or not mono)
    return x


def edited(tmp_path: Path, source: Path, old: bytes, new: bytes, *, count: int | None = None) -> Path:
    """tmp_path/edited.gguf: `source` with its first `old` replaced by `new`, of the same length (so the file's
    layout, offsets and sizes stay valid); `old` must occur (exactly `count` times when given)."""
    assert len(old) == len(new)
    data = Path(source).read_bytes()
    if count is None:
        assert data.count(old) >= 1, old
    else:
        assert data.count(old) == count, old
    out = tmp_path / "edited.gguf"
    out.write_bytes(data.replace(old, new, 1))
    return out


def refused_in_one_line(path: Path, words: str, load=None) -> None:
    """Loading `path` (transcribe.load_model, or `load(path)`) raises a ModelError whose one-line message
    contains `words`."""
    with pytest.raises(ModelError) as e:
        if load is None:
            transcribe.load_model(str(path))
        else:
            load(path)
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)

"""Voxtral Realtime as transcribe.cpp's `voxtral_realtime` GGUF files: the tiny model converted by transcribe.cpp's
own converter (tests/models/gguf/voxtral_realtime/, made by tools/make_voxtral_realtime_gguf_refs.py; README
there), read by `transcribe/voxtral_realtime/gguf.py`: its tensors are the directory's rounded to the file's types
(exactly), and its live text equals what transcribe.cpp 0.4.1's own streaming path transcribes from the same file
(`*.ref.json`). transcribe.cpp's offline `run()` is recorded too and not compared: on this model it writes
garbage (jfk.wav: "amiable"), where its streaming path and ours give the transcript (the README says why)."""
from __future__ import annotations

import json

import pytest
import soundfile as sf
import torch

import transcribe
from transcribe.errors import ModelError

from .conftest import AUDIO, MODELS

DIR = MODELS / "gguf" / "voxtral_realtime"
FILE = DIR / "voxtral-realtime-tiny-BF16.gguf"
REF = json.loads(FILE.with_suffix(".ref.json").read_text(encoding="utf-8"))
TINY = MODELS / "voxtral_realtime" / "tiny"


@pytest.fixture(scope="module")
def model():
    return transcribe.load_model(str(FILE))


def test_the_file_holds_the_directory_s_weights_in_its_types():
    from safetensors.torch import load_file

    from transcribe.voxtral_realtime.config import read_config
    from transcribe.voxtral_realtime.gguf import read_gguf

    cfg, state, tok = read_gguf(FILE)
    ours = read_config(TINY)
    assert (cfg.encoder, cfg.lm, cfg.lm_window, cfg.downsample) == (ours.encoder, ours.lm, ours.lm_window,
                                                                    ours.downsample)
    assert cfg.layout == ours.layout and cfg.features == ours.features
    stored = load_file(str(TINY / "model.safetensors"))
    assert set(state) == set(stored)
    for name, t in state.items():
        # the converter reads the model in bfloat16 (the published dtype) and writes those values: BF16 matrices,
        # F16 convolutions and F32 norms and biases, each of which holds a bfloat16 value exactly
        want = stored[name].to(torch.bfloat16)
        if ".conv" in name and t.dim() == 3:
            want = want.to(torch.float16)  # (below float16's normal range a value is rounded again)
        assert torch.equal(t, want.float()), name
    assert len(tok) == len(transcribe.load_model(str(TINY)).tokenizer)


@pytest.mark.parametrize("run", REF["runs"], ids=lambda r: r["clip"])
def test_live_text_equals_transcribe_cpp_streaming(model, run):
    pcm, _ = sf.read(str(AUDIO.parent / run["clip"]), dtype="float32")
    s = model.stream()
    for i in range(0, len(pcm), 8000):
        s.feed(pcm[i:i + 8000])
    s.finalize()
    assert s.text() == run["stream_text"] == run["stream_committed"]
    assert model.transcribe(pcm).text == run["stream_text"]  # offline: the same text on these clips


def test_the_directory_and_the_file_agree(model):
    d = transcribe.load_model(str(TINY), dtype="bfloat16")
    pcm, _ = sf.read(str(AUDIO / "jfk.wav"), dtype="float32")
    assert model.transcribe(pcm).text == d.transcribe(pcm).text


def test_another_architecture_is_not_claimed(tmp_path):
    from transcribe.voxtral_realtime import detect

    assert detect(FILE) == "gguf"
    other = next(p for p in (MODELS / "gguf").rglob("*.gguf") if "voxtral_realtime" not in str(p))
    assert detect(other) is None
    bad = tmp_path / "x.gguf"
    data = bytearray(FILE.read_bytes())
    bad.write_bytes(bytes(data[: len(data) // 2]))  # truncated: a clear error, not a crash
    with pytest.raises(ModelError):
        transcribe.load_model(str(bad))

"""transcribe.cpp's `moonshine_streaming` GGUF file (written by its own converter from the tiny model:
tools/make_moonshine_streaming_gguf_refs.py) loads, and transcribes as transcribe.cpp's runtime does (the
transcribe-cpp wheel's outputs, recorded next to the file): the offline token ids, and the live session's final
text against transcribe.cpp's streaming path. Ids compared exactly (float32 weights, the same as the directory's:
the norms' folded unit offset comes back exactly, see test_the_file_holds_the_directorys_model)."""
from __future__ import annotations

import numpy as np
import pytest

import transcribe
from transcribe.errors import ModelError

from .conftest import MODELS
from .gguf_cases import audio, model_fixture, runtime_ref

GGUF = MODELS / "gguf" / "moonshine_streaming" / "moonshine-streaming-tiny-F32.gguf"
REF = runtime_ref(GGUF)
model = model_fixture(GGUF)

@pytest.mark.parametrize("run", REF["runs"], ids=[r["clip"] for r in REF["runs"]])
def test_offline_ids_equal_transcribe_cpp(model, run):
    # transcribe.cpp's offline budget is not the model card's 6.5 tokens a second: give room, greedy stops at EOS
    hyp = model.decode_pcm(audio(run["clip"], mono=False), model.options(max_new_tokens=192))
    assert hyp.ids == run["offline_ids"]
    assert model.decode_ids(hyp.ids) == run["offline_text"].strip()


def test_the_live_text_equals_transcribe_cpps_stream(model):
    run = REF["runs"][0]
    pcm = audio(run["clip"], mono=False)
    s = model.stream(decode_every_ms=2000.0)  # the final text does not depend on how often the partials come
    for i in range(0, len(pcm), 8000):
        s.feed(pcm[i:i + 8000])
    assert s.finalize() == run["stream_text"].strip()


def test_the_file_holds_the_directorys_model(model):
    d = transcribe.load_model(str(MODELS / "moonshine_streaming" / "tiny"))
    for (k, a), b in zip(model.model.state_dict().items(), d.model.state_dict().values()):
        assert a.shape == b.shape, k
        if k.endswith("gamma"):  # (gamma + 1) - 1 in float32: the norm's factor gamma + 1 is the file's, exactly
            assert np.array_equal((a + 1.0).numpy(), (b + 1.0).numpy()), k
        else:
            assert np.array_equal(a.numpy(), b.numpy()), k


def test_a_broken_file_is_refused(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(GGUF.read_bytes()[:4096])
    with pytest.raises(ModelError):
        transcribe.load_model(str(bad))

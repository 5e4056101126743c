"""SenseVoice GGUF files of transcribe.cpp: tests/models/gguf/sensevoice/sensevoice-tiny-F32.gguf, written by
transcribe.cpp's own scripts/convert-sensevoice.py from tests/models/sensevoice/tiny, loads here and gives the ids
(tags included) and the text that transcribe.cpp's runtime (the transcribe-cpp 0.4.1 wheel) gives for every run
its .ref.json records (3 clips x language None / en x itn on / off; tools/make_sensevoice_gguf_refs.py), and the
same ids as the model directory it was converted from (same float32 weights, same code path)."""
import pytest

import transcribe
from transcribe.errors import ModelError

from .conftest import REPO
from .gguf_cases import audio as _audio
from .gguf_cases import model_fixture, runtime_ref

GGUF = REPO / "tests" / "models" / "gguf" / "sensevoice" / "sensevoice-tiny-F32.gguf"
REF = runtime_ref(GGUF)
model = model_fixture(GGUF)


@pytest.mark.parametrize("k", range(len(REF["runs"])))
def test_ids_and_text_equal_transcribe_cpp(model, k):
    run = REF["runs"][k]
    asked, want = run["asked"], run["result"]
    pcm = _audio(run["audio"])
    use_itn = asked["itn"] == "on"
    d = model.decode(pcm, asked["language"], use_itn)
    assert d.ids == want["token_ids"]
    assert model.tokenizer.decode(d.ids) == want["raw_text"]
    t = model.transcribe(pcm, language=asked["language"], itn=use_itn)
    assert t.text == want["text"] and t.language == (want["language"] or "en")
    assert t.tags == {"emotion": "NEUTRAL", "event": "Speech"}


def test_same_ids_as_the_directory_it_came_from(model):
    tiny = transcribe.load_model(str(REPO / "tests" / "models" / "sensevoice" / "tiny"))
    pcm = _audio("audio/jfk.wav")
    assert model.decode(pcm, None, True).ids == tiny.decode(pcm, None, True).ids
    assert [p for p in model.tokenizer.pieces] == [p for p in tiny.tokenizer.pieces]


def test_a_gguf_of_another_architecture_is_not_read_as_sensevoice(tmp_path):
    from transcribe.sensevoice.gguf import read_gguf

    other = REPO / "tests" / "models" / "gguf" / "granite-nar-other-BF16.gguf"
    with pytest.raises(ModelError, match="not 'sensevoice'"):
        read_gguf(other)

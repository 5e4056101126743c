"""transcribe.cpp's MedASR GGUF file of the tiny model (tests/models/gguf/medasr/: written by transcribe.cpp's own
converter, scripts/convert-medasr.py, from tests/models/medasr/tiny) loads and runs here with the token ids and
text transcribe.cpp's runtime gives (the transcribe-cpp 0.4.1 package, `.ref.json` beside the file), which are
also transformers' (tests/references/medasr); a file this code cannot run is refused in one line."""
import pytest
import torch

import transcribe
from transcribe.medasr import detect

from .conftest import MODELS
from .gguf_cases import audio as _audio
from .gguf_cases import edited, model_fixture, refused_in_one_line, runtime_ref

GGUF = MODELS / "gguf" / "medasr" / "medasr-tiny-F32.gguf"
REF = runtime_ref(GGUF)
RUNS = REF["runs"]
model = model_fixture(GGUF)


def test_the_file_is_detected_as_medasr_gguf(model):
    assert detect(GGUF) == "gguf" and model.family == "medasr"


@pytest.mark.parametrize("run", RUNS, ids=[r["audio"] for r in RUNS])
def test_ids_and_text_equal_transcribe_cpp_s(model, run):
    t = model.transcribe(_audio(run["audio"]), sample_rate=16000)
    assert [x.id for x in t.tokens] == run["result"]["token_ids"]
    assert t.text == run["result"]["text"]


def test_the_network_is_the_directory_s(model):
    """The file's float32 weights are the checkpoint's: the logits agree to float32 rounding (the same products,
    the same kernels; 1e-5 on logits of magnitude ~20)."""
    a = transcribe.load_model(str(MODELS / "medasr" / "tiny"))
    b = model
    x = _audio("audio/jfk.wav")
    la, na = a.logits([x])
    lb, nb = b.logits([x])
    assert na == nb
    torch.testing.assert_close(la, lb, rtol=0, atol=1e-5)


@pytest.mark.parametrize("old,new,words", [
    (b"stt.variant", b"stt.varianX", "metadata key this code does not implement: stt.varianX"),
    (b"stt.medasr.encoder.rope_theta", b"stt.medasr.encoder.rope_thetX", "stt.medasr.encoder.rope_theta is missing"),
    (b"hann_symmetric", b"hann_symmetriX", "stt.frontend.window = 'hann_symmetriX' is not implemented"),
    (b"enc.blocks.1.ff2_down.weight", b"enc.blocks.1.ff2_down.weighX", "does not implement: enc.blocks.1.ff2_down"),
])
def test_a_file_this_code_cannot_run_is_refused_in_one_line(tmp_path, old, new, words):
    refused_in_one_line(edited(tmp_path, GGUF, old, new), words)

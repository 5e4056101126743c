"""Voxtral from transcribe.cpp's own GGUF file (tests/models/gguf/voxtral/: scripts/convert-voxtral.py on the tiny
model, tools/make_voxtral_gguf_refs.py) against what transcribe.cpp's runtime (transcribe-cpp 0.4.1) transcribes
from it: the same text for every recorded run (transcription with and without a language, translation into French
and English: the untrained translations are long runs of arbitrary tokens, so equal texts mean equal ids). The
tokenizer rebuilt from the file's tokens equals tekken.json's; the file's refusals are named. The runtime records
no token ids for this family, so texts are compared; a near-tie would show as a different text (the BF16 weights
are read exactly, and every recorded run is equal here)."""
import pytest
import soundfile as sf

import transcribe

from .conftest import MODELS, SHARED
from .gguf_cases import edited, model_fixture, refused_in_one_line, runtime_ref

GGUF = MODELS / "gguf" / "voxtral" / "voxtral-tiny-BF16.gguf"
REF = runtime_ref(GGUF)
model = model_fixture(GGUF)


def test_the_file_is_detected_as_voxtral_gguf():
    from transcribe.voxtral import detect

    assert detect(GGUF) == "gguf" and REF["model"]["arch"] == "voxtral"
    assert detect(MODELS / "gguf" / "qwen3_asr" / "qwen3-asr-tiny-BF16.gguf") is None


@pytest.mark.parametrize("run", REF["runs"], ids=lambda r: f"{r['audio']}-{r['asked']}")
def test_the_text_equals_transcribe_cpp_s(model, run):
    assert run["rc"] == 0, run["result"]
    x, sr = sf.read(str(SHARED / run["audio"]), dtype="float32")
    t = model.transcribe(x, max_new_tokens=500, **run["asked"])
    assert t.text == run["result"]["text"]


def test_the_tokenizer_is_tekken_json_s(model):
    from transcribe.llm.tekken import TekkenTokenizer

    tek = TekkenTokenizer.load(MODELS / "voxtral" / "tiny" / "tekken.json")
    tok = model.tokenizer
    assert len(tok) == len(tek) and tok.specials == tek.specials and tok.pieces == tek.pieces
    text = "And so, my fellow Americans, lang:en naïve 😀 12,345"
    assert tok.encode(text) == tek.encode(text)


def test_the_weights_are_the_directory_s_rounded_to_bfloat16():
    import torch

    d = transcribe.load_model(str(MODELS / "voxtral" / "tiny"), dtype="bfloat16")
    g = transcribe.load_model(str(GGUF), dtype="bfloat16")
    a = dict(d.model.named_parameters())
    b = dict(g.model.named_parameters())
    assert a.keys() == b.keys()
    # the converter writes the convolutions as F16 (its loader has no BF16 convolution) and norms and biases as
    # F32: those differ from bfloat16 by their rounding; every matrix is bit for bit the same bfloat16 value
    for k in a:
        if a[k].dim() == 2:
            assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("old,new,words", [
    (b"stt.variant", b"stt.varianX", "metadata key this code does not implement: stt.varianX"),
    (b"stt.voxtral.decoder.vocab_size", b"stt.voxtral.decoder.vocab_sizX", "stt.voxtral.decoder.vocab_size is missing"),
    (b"per_utterance", b"per_fxterance", "stt.frontend.normalize = 'per_fxterance' is not implemented"),
    (b"enc.blocks.1.ffn.fc2.bias", b"enc.blocks.1.ffn.fc2.biaX", "does not implement: enc.blocks.1.ffn.fc2.biaX"),
    (b"tekken", b"tekkeX", "tokenizer.ggml.pre"),
])
def test_a_file_this_code_cannot_run_is_refused_in_one_line(tmp_path, old, new, words):
    refused_in_one_line(edited(tmp_path, GGUF, old, new), words)

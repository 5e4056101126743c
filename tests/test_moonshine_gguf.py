"""Moonshine from transcribe.cpp's own GGUF file (tests/models/gguf/moonshine/: scripts/convert-moonshine.py on the
tiny model, tools/make_moonshine_gguf_refs.py) against what transcribe.cpp's runtime (transcribe-cpp 0.4.1)
transcribes from it: the same text for every recorded run, under transcribe.cpp's output bound (193 tokens). The
runtime records no token ids for this family, so texts are compared; the file's F32 weights are read bit for bit
(the directory's), so the ids are the directory model's, which are transformers' (tests/test_moonshine.py). The
tokenizer rebuilt from the file decodes every id as tokenizer.json does; the file's refusals are named."""
import pytest
import soundfile as sf
import torch

import transcribe

from .conftest import MODELS, SHARED
from .gguf_cases import edited, model_fixture, refused_in_one_line, runtime_ref

GGUF = MODELS / "gguf" / "moonshine" / "moonshine-tiny-test-F32.gguf"
TINY = MODELS / "moonshine" / "tiny"
REF = runtime_ref(GGUF)
model = model_fixture(GGUF)


def test_the_file_is_detected_as_moonshine_gguf():
    from transcribe.moonshine import detect

    assert detect(GGUF) == "gguf" and REF["model"]["arch"] == "moonshine"
    assert detect(MODELS / "gguf" / "voxtral" / "voxtral-tiny-BF16.gguf") is None


@pytest.mark.parametrize("run", REF["runs"], ids=lambda r: f"{r['audio']}-{r['samples']}")
def test_the_text_equals_transcribe_cpp_s(model, run):
    assert run["rc"] == 0, run["result"]
    x, sr = sf.read(str(SHARED / run["audio"]), dtype="float32")
    x = x[:run["samples"]] if run["samples"] else x
    assert model.transcribe(x, sample_rate=sr, max_new_tokens=193).text == run["result"]["text"]


def test_the_weights_and_tokenizer_are_the_directory_s(model):
    d = transcribe.load_model(str(TINY))
    a, b = dict(d.model.named_parameters()), dict(model.model.named_parameters())
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert model.tokenizer.pieces == d.tokenizer.pieces and model.tokenizer.special == d.tokenizer.special
    ids = list(range(len(d.tokenizer)))
    assert model.tokenizer.text(ids) == d.tokenizer.text(ids)
    assert [model.tokenizer.token_text(i) for i in ids] == [d.tokenizer.token_text(i) for i in ids]


@pytest.mark.parametrize("old,new,words", [
    (b"stt.variant", b"stt.varianX", "metadata key this code does not implement: stt.varianX"),
    (b"stt.moonshine.decoder.vocab_size", b"stt.moonshine.decoder.vocab_sizX",
     "stt.moonshine.decoder.vocab_size is missing"),
    (b"raw", b"mel", "stt.frontend.type = 'mel' is not implemented"),
    (b"enc.blocks.1.ffn.fc2.bias", b"enc.blocks.1.ffn.fc2.biaX", "does not implement: enc.blocks.1.ffn.fc2.biaX"),
    (b"gelu", b"mish", "encoder_hidden_act = 'mish' is not implemented"),
    (b"default", b"defaulX", "tokenizer.ggml.pre"),
])
def test_a_file_this_code_cannot_run_is_refused_in_one_line(tmp_path, old, new, words):
    refused_in_one_line(edited(tmp_path, GGUF, old, new, count=1), words)

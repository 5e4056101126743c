"""transcribe.cpp's GigaAM GGUF files (written by its own scripts/convert-gigaam.py from the tiny models of
tests/models/gigaam; tools/make_gigaam_gguf_refs.py) load here and give the token ids and text its runtime
(the transcribe-cpp wheel) gives, and the same ids as the checkpoint they were written from. The files are
F32: the same weights as the checkpoint (the LSTM's two biases summed into one, which is the same sum)."""
import pytest
import soundfile as sf

import transcribe
from transcribe.errors import ModelError

from .conftest import MODELS, SHARED
from .gguf_cases import runtime_ref

DIR = MODELS / "gguf" / "gigaam"
FILES = sorted(DIR.glob("*.gguf"))
FOLDER = {"gigaam-v3-ctc": "ctc", "gigaam-v3-rnnt": "rnnt", "gigaam-v3-e2e-ctc": "e2e-ctc",
          "gigaam-v3-e2e-rnnt": "e2e-rnnt"}


def _variant(path) -> str:
    return path.name.split("-tiny-")[0]


@pytest.fixture(scope="module")
def loaded():
    return {p.name: transcribe.load_model(str(p)) for p in FILES}


def test_every_variant_has_a_file():
    assert sorted(_variant(p) for p in FILES) == sorted(FOLDER)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_ids_and_text_equal_transcribe_cpp(loaded, path):
    ref = runtime_ref(path)
    assert ref["model"]["arch"] == "gigaam"
    m = loaded[path.name]
    assert m.family == "gigaam"
    for run in ref["runs"]:
        pcm, sr = sf.read(str(SHARED / run["audio"]), dtype="float32")
        t = m.transcribe(pcm)
        assert [x.id for x in t.tokens] == run["result"]["token_ids"], run["audio"]
        assert t.text == run["result"]["text"].strip()


def test_a_file_gives_its_checkpoint_s_ids(loaded):
    pcm, _ = sf.read(str(SHARED / "audio" / "jfk.wav"), dtype="float32")
    for p in FILES:
        ckpt = transcribe.load_model(str(MODELS / "gigaam" / FOLDER[_variant(p)]))
        assert [x.id for x in loaded[p.name].transcribe(pcm).tokens] == [x.id for x in ckpt.transcribe(pcm).tokens]


def test_an_unknown_key_is_refused(tmp_path):
    from transcribe.gguf.file import GGUFFile

    src = next(p for p in FILES if "rnnt" in p.name)
    import gguf

    with GGUFFile(src) as f:
        w = gguf.GGUFWriter(str(tmp_path / "x.gguf"), "gigaam")
        for k, v in f.meta.items():
            if k in ("general.architecture", "GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"):
                continue
            types = f.value_types[k]
            if types[0] == "ARRAY":
                w.add_array(k, list(v))
            elif types[0] == "STRING":
                w.add_string(k, v)
            elif types[0] == "BOOL":
                w.add_bool(k, v)
            elif types[0] == "FLOAT32":
                w.add_float32(k, v)
            else:
                w.add_uint32(k, v)
        w.add_string("stt.gigaam.encoder.rope_kind", "xpos")
        for name in f.tensors:
            w.add_tensor(name, f.tensor(name).numpy().reshape(f.tensors[name].shape))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    with pytest.raises(ModelError, match="rope_kind"):
        transcribe.load_model(str(tmp_path / "x.gguf"))

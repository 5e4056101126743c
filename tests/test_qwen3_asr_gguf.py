"""transcribe.cpp's `qwen3_asr` GGUF files (tests/models/gguf/qwen3_asr/, made by tools/make_qwen3_asr_gguf_refs.py
with the unmodified upstream converter and quantizer from an original-layout copy of tests/models/qwen3_asr/tiny)
load as a Qwen3ASR recognizer.

- The converter refuses tensors that are not bfloat16, so its file is made from a BF16 copy: the BF16 file holds
  the tiny model's tensors rounded to bfloat16 once, each stored as it is (BF16; F16 for the convolutions and
  F32 for norms and biases, both holding the rounded values exactly). Our model from it equals, parameter for
  parameter, our model from a directory holding those rounded tensors, so its greedy ids are the same exactly;
  on these clips they are also the float32 directory's (and transformers', tests/references/qwen3_asr).
- The F16 file (the quantizer's, from the BF16 one) differs from the rounded tensors by at most 3e-8 (bfloat16
  values below float16's normal range lose bits); its greedy ids are the same on these clips.
- Q8_0: loaded by default with the file's Q8_0 blocks (Q8Linear) and as dtype int8 (Int8Linear): a different
  computation, not exact; on these clips the greedy ids are the float32 directory's (a trained model with a
  margin; what is asserted is exactly that, on these clips, with the language detected and forced).
- transcribe.cpp's runtime text (committed refs, no runtime needed) is ours on every clip, file and language
  setting; with the language detected both name English.
- Config, tokenizer (ids, special set, encodings) and chat template rebuilt from the keys equal the directory's.
- Writing (`transcribe convert`, qwen3_asr/gguf_export.py): the BF16 file byte for byte from the float32 -hf
  directory; the F32 export loads as the directory exactly (parameters and ids).
"""
import json
import shutil
import struct
from pathlib import Path

import pytest
import soundfile as sf
import torch

from transcribe.errors import ModelError
from transcribe.gguf.file import GGUFFile
from transcribe.qwen3_asr import detect
from transcribe.qwen3_asr import load as load_family
from transcribe.qwen3_asr.gguf import read_gguf, tensor_names

from .conftest import SHARED
from .gguf_cases import edited, refused_in_one_line

HERE = Path(__file__).parent
GGUF = HERE / "models" / "gguf" / "qwen3_asr"
TINY = HERE / "models" / "qwen3_asr" / "tiny"
STEM = "qwen3-asr-tiny"
FILES = [f"{STEM}-{q}" for q in ("BF16", "F16", "Q8_0")]
CLIPS = ["audio/jfk.wav", "audio/dev/ls_61-70968-0002.wav", "audio/dev/fleurs_en_004.wav"]
LANGS = [None, "en"]
MAX_NEW = 80


@pytest.fixture(scope="module")
def pcm():
    out = {}
    for c in CLIPS:
        x, sr = sf.read(str(SHARED / c), dtype="float32")
        assert sr == 16000 and x.ndim == 1
        out[c] = x
    return out


def _greedy(asr, pcm) -> dict:
    """Every clip's generated ids (the language detected and forced), stop token included."""
    out = {}
    for lang in LANGS:
        opts = asr.options(language=lang, max_new_tokens=MAX_NEW)
        for c in CLIPS:
            out[c, lang] = asr.decode([pcm[c]], opts)[0][0].ids
    return out


@pytest.fixture(scope="module")
def directory(pcm):
    """The float32 directory's recognizer and its greedy ids."""
    asr = load_family(TINY, "tiny", "cpu", None, "transformers")
    return asr, _greedy(asr, pcm)


def _rounded_copy(tmp: Path) -> Path:
    """The tiny directory with every tensor rounded to bfloat16 (kept float32)."""
    from safetensors.torch import load_file, save_file

    dst = tmp / "rounded"
    shutil.copytree(TINY, dst)
    state = load_file(str(TINY / "model.safetensors"))
    save_file({k: v.to(torch.bfloat16).float().contiguous() for k, v in state.items()}, str(dst / "model.safetensors"))
    return dst


# ---------------------------------------------------------------------------------------------- reading

def test_the_files_are_detected_as_qwen3_asr_gguf():
    from transcribe.loading import FAMILIES

    for label in FILES:
        path = GGUF / f"{label}.gguf"
        assert detect(path) == "gguf"
        assert next(f.name for f in FAMILIES if f.detect(path)) == "qwen3_asr"
    assert detect(HERE / "models" / "gguf" / "canary" / "canary-tiny-Q8_0.gguf") is None


def test_config_tokenizer_and_template_are_the_directory_s():
    from transcribe.llm.tokenizer import LLMTokenizer
    from transcribe.qwen3_asr.config import read_config
    from transcribe.qwen3_asr.prompt import check_template

    cfg, _, tok, extra = read_gguf(GGUF / f"{STEM}-BF16.gguf")
    ours = read_config(TINY)
    assert cfg == ours  # features, encoder, LM, audio token, stop ids (640, 642), max_new_tokens 512
    ref = LLMTokenizer.load(TINY)
    assert tok.special == ref.special == frozenset(range(640, 646))
    assert len(tok) == 704 and len(ref) == 648  # the converter fills ids 648..703 with <|unused_{i}|>
    assert [tok.token(i) for i in range(648)] == [ref.token(i) for i in range(648)]
    for text in ("language English<asr_text>And so, my fellow Americans, 1984 caf\u00e9\n\n x",
                 "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>"
                 "<|im_end|>\n<|im_start|>assistant\n"):
        assert tok.encode(text) == ref.encode(text)
    assert tok.encode("<asr_text>") == [646]
    assert tok.decode(list(range(648)), skip_special=False) == ref.decode(list(range(648)), skip_special=False)
    assert tok.decode(list(range(648))) == ref.decode(list(range(648)))
    assert extra["template"] == (TINY / "chat_template.jinja").read_text(encoding="utf-8")
    assert check_template(extra["template"], "t") == "transformers -hf"
    assert extra["token_ids"] == {"bos": None, "eos": 642, "padding": 640}


def test_the_bf16_file_holds_the_rounded_tensors_and_f16_within_3e_8():
    from safetensors.torch import load_file

    ref = load_file(str(TINY / "model.safetensors"))
    for label, bound in ((f"{STEM}-BF16", 0.0), (f"{STEM}-F16", 3e-8)):
        cfg, state, _, _ = read_gguf(GGUF / f"{label}.gguf")
        assert set(state) == set(ref)
        for k, v in state.items():
            assert float((v - ref[k].to(torch.bfloat16).float()).abs().max()) <= bound, (label, k)
        assert len(tensor_names(cfg.encoder.layers, cfg.lm.num_layers, True)) + 2 == \
            len(GGUFFile(GGUF / f"{label}.gguf").tensors)


def test_the_quantizer_s_types():
    """What each file stores (the converter's BF16 policy, the quantizer's re-typing)."""
    types = {}
    for label in FILES:
        with GGUFFile(GGUF / f"{label}.gguf") as f:
            types[label] = {n: t.type_name for n, t in f.tensors.items()}
    assert types[f"{STEM}-BF16"]["enc.conv.0.weight"] == "F16"
    assert types[f"{STEM}-BF16"]["dec.token_embd.weight"] == "BF16"
    assert types[f"{STEM}-F16"]["enc.conv.0.weight"] == "F32"  # the quantizer widens the convolutions
    assert types[f"{STEM}-Q8_0"]["enc.conv.0.weight"] == "F32"
    assert types[f"{STEM}-Q8_0"]["dec.token_embd.weight"] == "Q8_0"  # the tied head too
    assert types[f"{STEM}-Q8_0"]["dec.blocks.0.attn.q_norm.weight"] == "F32"


# ---------------------------------------------------------------------------------------------- running

@pytest.mark.parametrize("label", [f"{STEM}-BF16", f"{STEM}-F16"])
def test_float_files_run_as_the_rounded_directory(tmp_path, pcm, directory, label):
    from transcribe.qwen3_asr.recognizer import Qwen3ASR

    asr = load_family(GGUF / f"{label}.gguf", label, "cpu", None, "gguf")
    got = _greedy(asr, pcm)
    if label.endswith("BF16"):
        rounded = Qwen3ASR.load(_rounded_copy(tmp_path), "rounded", "cpu")
        ours, theirs = dict(asr.model.named_parameters()), dict(rounded.model.named_parameters())
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[k], theirs[k]) for k in ours)
        assert got == _greedy(rounded, pcm)
    assert got == directory[1]  # and the float32 directory's, on these clips


@pytest.mark.parametrize("dtype", [None, torch.int8])
def test_the_q8_0_file_gives_the_directory_s_ids(pcm, directory, dtype):
    from transcribe.quant import Int8Linear, Q8Linear

    asr = load_family(GGUF / f"{STEM}-Q8_0.gguf", "q8", "cpu", dtype, "gguf")
    kind = Q8Linear if dtype is None else Int8Linear
    m = asr.model
    for layer in (m.audio_tower.conv_out, m.audio_tower.layers[0].fc1, m.multi_modal_projector.linear_2,
                  m.language_model.layers[1].self_attn.o_proj, m.language_model.layers[0].mlp.gate_proj):
        assert isinstance(layer, kind)
    assert m.language_model.embed_tokens.weight.dtype == torch.float32
    assert _greedy(asr, pcm) == directory[1]


@pytest.mark.parametrize("label", FILES)
def test_the_runtime_s_text(pcm, directory, label):
    """transcribe.cpp's own transcripts of the same file (committed refs): ours, on every clip and language
    setting; the runtime names the detected language as we do ("en") and none when it is forced."""
    runtime = json.loads((GGUF / f"{label}.ref.json").read_text(encoding="utf-8"))
    runs = [r for r in runtime["runs"] if not r.get("extra")]
    assert "load_error" not in runtime and len(runs) == len(CLIPS) * len(LANGS)
    asr = load_family(GGUF / f"{label}.gguf", label, "cpu", None, "gguf")
    for run in runs:
        assert run["rc"] == 0
        lang = run["language_asked"]
        t = asr.transcribe(pcm[run["audio"]], language=lang, max_new_tokens=MAX_NEW)
        assert t.text == run["result"]["text"], (run["audio"], lang)
        assert t.language == "en"
        assert run["result"]["language"] == ("en" if lang is None else "")


# Beyond the training data (jfk.wav forced to French: the tiny model knows English only, so its margins are small):
# which runtime texts are ours exactly; the others share their first five words (then a near-tie goes the other way:
# the runtime's BF16 products round activations, its Q8_0 products quantize them, ours do neither).
FRENCH_EQUAL = {(f"{STEM}-BF16", None): False, (f"{STEM}-BF16", "Hello there"): True,
                (f"{STEM}-F16", None): True, (f"{STEM}-F16", "Hello there"): True,
                (f"{STEM}-Q8_0", None): True, (f"{STEM}-Q8_0", "Hello there"): False}


@pytest.mark.parametrize("label", FILES)
def test_the_runtime_s_text_beyond_the_training_data(pcm, label):
    runtime = json.loads((GGUF / f"{label}.ref.json").read_text(encoding="utf-8"))
    asr = load_family(GGUF / f"{label}.gguf", label, "cpu", None, "gguf")
    extra = [r for r in runtime["runs"] if r.get("extra")]
    assert len(extra) == 2
    for run in extra:
        t = asr.transcribe(pcm[run["audio"]], language=run["language_asked"], context=run["prompt"],
                           max_new_tokens=512)
        theirs = run["result"]["text"]
        assert (t.text == theirs) == FRENCH_EQUAL[label, run["prompt"]], (label, run["prompt"], t.text, theirs)
        assert t.text.split()[:5] == theirs.split()[:5]


# ---------------------------------------------------------------------------------------------- damage

def _edited(tmp_path, old: bytes, new: bytes, source: str = f"{STEM}-BF16") -> Path:
    return edited(tmp_path, GGUF / f"{source}.gguf", old, new)


def _one_line_error(path: Path, match: str) -> None:
    refused_in_one_line(path, match, load=lambda p: load_family(p, "x", "cpu", None, "gguf"))


def test_an_unknown_key_is_an_error(tmp_path):
    _one_line_error(_edited(tmp_path, b"stt.variant", b"stt.varianX"),
                    "metadata key this code does not implement: stt.varianX")


def test_a_missing_key_is_an_error(tmp_path):
    _one_line_error(_edited(tmp_path, b"stt.qwen3_asr.decoder.vocab_size", b"stt.qwen3_asr.decoder.vocab_sizX"),
                    "metadata key stt.qwen3_asr.decoder.vocab_size is missing")


def test_a_setting_not_implemented_is_an_error(tmp_path):
    _one_line_error(_edited(tmp_path, b"per_utterance", b"per_fxterance"),
                    "stt.frontend.normalize = 'per_fxterance' is not implemented")
    act = b"stt.qwen3_asr.decoder.hidden_act" + struct.pack("<IQ", 8, 4)  # key, type (string), value length
    _one_line_error(_edited(tmp_path, act + b"silu", act + b"gelu"), "hidden_act 'gelu' is not implemented")


def test_an_m_rope_section_that_is_not_plain_rope_is_an_error(tmp_path):
    key = b"stt.qwen3_asr.decoder.rope_mrope_section_t" + struct.pack("<I", 4)
    _one_line_error(_edited(tmp_path, key + struct.pack("<I", 6), key + struct.pack("<I", 7)),
                    "M-RoPE section [7, 5, 5] does not cover head_dim 32")


def test_an_unknown_tensor_is_an_error(tmp_path):
    _one_line_error(_edited(tmp_path, b"enc.blocks.1.ffn.fc2.bias", b"enc.blocks.1.ffn.fc2.biaX"),
                    "tensor this code does not implement: enc.blocks.1.ffn.fc2.biaX")


def test_a_layer_count_that_does_not_fit_is_an_error(tmp_path):
    key = b"stt.qwen3_asr.decoder.n_layers" + struct.pack("<I", 4)
    _one_line_error(_edited(tmp_path, key + struct.pack("<I", 2), key + struct.pack("<I", 3)),
                    "stt.qwen3_asr.decoder.n_layers = ")


def test_a_foreign_chat_template_is_an_error(tmp_path):
    _one_line_error(_edited(tmp_path, b"<|im_start|>system", b"<|im_start|>systex"), "unknown chat template")


@pytest.mark.parametrize("keep", [0.02, 0.5, 0.99])
def test_a_truncated_file_is_an_error(tmp_path, keep):
    data = (GGUF / f"{STEM}-Q8_0.gguf").read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(ModelError) as e:
        load_family(path, "x", "cpu", None, "gguf")
    assert "\n" not in str(e.value)


def test_another_architecture_is_an_error():
    with pytest.raises(ModelError, match="architecture is 'canary', not 'qwen3_asr'"):
        read_gguf(HERE / "models" / "gguf" / "canary" / "canary-tiny-Q8_0.gguf")


def test_the_original_layout_directory_is_refused(tmp_path):
    """The converter's input (Qwen's original layout, tools/make_qwen3_asr_gguf_refs.py `original`) is not read
    by the directory loader: a one-line ModelError naming the -hf conversions."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mk", HERE.parent / "tools" / "make_qwen3_asr_gguf_refs.py")
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    mk.original_layout(TINY, tmp_path / "orig", "float32")
    assert detect(tmp_path / "orig") == "transformers"
    with pytest.raises(ModelError, match="original Qwen3-ASR layout") as e:
        load_family(tmp_path / "orig", "orig", "cpu", None, "transformers")
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------- writing

UPSTREAM_VARIANT = {"stt.variant": "qwen3-asr-0.6b"}


def test_export_writes_the_converter_s_file_byte_for_byte(tmp_path):
    """From the float32 -hf directory: rounded to BF16 as the refs tool's original-layout copy is, then the
    converter's rules (keys, types, order; the filterbank computed as librosa computes it)."""
    from transcribe.qwen3_asr.gguf_export import export_gguf

    out = export_gguf(TINY, tmp_path / "t-BF16.gguf", "bf16", UPSTREAM_VARIANT)
    assert out.read_bytes() == (GGUF / f"{STEM}-BF16.gguf").read_bytes()


def test_the_command_writes_the_converter_s_file(tmp_path):
    from transcribe.convert import main

    out = tmp_path / "t-BF16.gguf"
    assert main([str(TINY), str(out), "--meta", "stt.variant=qwen3-asr-0.6b"]) == 0
    assert out.read_bytes() == (GGUF / f"{STEM}-BF16.gguf").read_bytes()


def test_the_f32_export_is_the_directory_exactly(tmp_path, pcm, directory):
    from transcribe.qwen3_asr.gguf_export import export_gguf

    path = export_gguf(TINY, tmp_path / "tiny-F32.gguf", "f32")
    with GGUFFile(path) as f:
        assert {f.tensors[t].type_name for t in f.tensors} == {"F32"}
        assert f.meta["stt.variant"] == "tiny" and f.meta["general.name"] == "Qwen3-ASR"
        assert f.meta["general.file_type"] == 0 and f.meta["general.size_label"] == "298K"
    ours = load_family(path, "f32", "cpu", None, "gguf")
    a, b = dict(ours.model.named_parameters()), dict(directory[0].model.named_parameters())
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert _greedy(ours, pcm) == directory[1]


def test_export_refuses_what_the_file_cannot_hold(tmp_path):
    from transcribe.qwen3_asr.gguf_export import export_gguf

    src = tmp_path / "tiny"
    shutil.copytree(TINY, src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["tie_word_embeddings"] = cfg["text_config"]["tie_word_embeddings"] = False
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="head is not tied"):
        export_gguf(src, tmp_path / "x.gguf")
    with pytest.raises(ModelError, match="not written for Qwen3-ASR"):
        export_gguf(TINY, tmp_path / "x.gguf", "q8_0")
    with pytest.raises(ModelError, match="not identity keys: general.author"):
        export_gguf(TINY, tmp_path / "x.gguf", "bf16", {"general.author": "me"})
    assert not (tmp_path / "x.gguf").exists() and not (tmp_path / "x.gguf.part").exists()

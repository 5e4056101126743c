"""transcribe.cpp's `granite_speech` GGUF files (tests/models/gguf/granite_speech/, made by
tools/make_granite_speech_gguf_refs.py with the unmodified upstream converter and quantizer from the tiny models
of tests/models/granite_speech/: g40, g41, plus run; g33 is refused, below) load as a GraniteSpeechASR. Each
model is prompted with its reference's request (the model card's, as transformers' references were made).

- The converter refuses float32 checkpoints, so its files are made from a BF16 copy: the BF16 file (and the
  F16 file the quantizer makes from it) hold the tiny model's tensors rounded once, each as it is stored
  (BF16, or F16 after BF16 for the convolutions; F32 norms and biases after BF16). Our model from such a file
  equals, parameter for parameter, our model from a directory holding those rounded tensors, so its greedy ids
  are the same exactly; on these clips they are also the float32 directory's (and transformers').
- Q8_0: loaded by default with the file's Q8_0 blocks (Q8Linear) and as dtype int8 (Int8Linear): a different
  computation, not exact; the greedy ids are the float32 directory's on these clips where the tiny models
  transcribe (jfk, ls_61-70968-0002, and ls_1089-134691-0001 for g40 and g41); plus garbles ls_1089 (small
  margins) and its Q8_0 ids there agree for the first 15 tokens only (that is what is asserted).
- transcribe.cpp's runtime text (committed refs, no runtime needed) is ours on jfk and ls_61-70968-0002; on
  ls_1089-134691-0001 it transcribes something else (README: consistent with one encoder frame fewer in the
  runtime's front end; a quirk of the runtime, not of the file).
- g33 (a LoRA adapter): the converter does not merge it and drops the template of tokenizer_config.json;
  the file holds the base LM and no chat template, which we refuse to prompt (a ModelError); the runtime
  refuses the file too (its tokenizer lacks <|pad|>).
"""
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from transcribe.errors import ModelError
from transcribe.granite_speech import detect
from transcribe.granite_speech import load as load_family
from transcribe.granite_speech.checkpoint import lm_tensors, merge_lora, read_weights
from transcribe.granite_speech.gguf import read_gguf, tensor_names
from transcribe.gguf.file import GGUFFile

from .conftest import SHARED

HERE = Path(__file__).parent
GGUF = HERE / "models" / "gguf" / "granite_speech"
TINY = HERE / "models" / "granite_speech"
REFS = HERE / "references" / "granite_speech"
CLIPS = ["jfk.wav", "ls_61-70968-0002.wav", "ls_1089-134691-0001.wav"]
RUNNABLE = ["g40", "g41", "plus"]
VARIANTS = {"g40": "granite-4.0-1b-speech", "g33": "granite-4.0-1b-speech", "g41": "granite-speech-4.1-2b",
            "plus": "granite-speech-4.1-2b-plus"}


def _audio(name: str) -> np.ndarray:
    path = SHARED / "audio" / name if name == "jfk.wav" else SHARED / "audio" / "dev" / name
    pcm, sr = sf.read(str(path), dtype="float32")
    assert sr == 16000
    return pcm


@pytest.fixture(scope="module")
def pcm():
    return {c: _audio(c) for c in CLIPS}


def _instruction(model: str) -> str:
    """The request of the model's transformers reference (the model card's)."""
    ref = json.loads((REFS / f"{model}.json").read_text())
    return ref["chat_messages"][-1]["content"].replace("<|audio|>", "")


def _greedy(asr, pcm, model: str) -> dict:
    ins = _instruction(model)
    return {c: [t.id for t in asr.transcribe(pcm[c], max_new_tokens=60, instruction=ins).tokens] for c in CLIPS}


def _until_eos(ids: list) -> list:
    """transformers' greedy ids up to its stop token (561, <|end_of_text|>), which a transcript leaves out."""
    return ids[: ids.index(561)] if 561 in ids else ids


def _reference(model: str) -> dict:
    return json.loads((REFS / f"{model}.json").read_text())["audios"]


def _stored_as(path: Path, model: str) -> dict:
    """Our tensor name -> the ggml type the file stores it in."""
    cfg, _, _, _ = read_gguf(path)
    names = tensor_names(cfg.encoder.num_layers, cfg.projector.num_layers, cfg.lm.num_layers,
                         cfg.projector.cross_attention_frequency, cfg.lm.tie_word_embeddings)
    with GGUFFile(path) as f:
        return {ours: f.tensors[g].type_name for ours, g in names}


def _rounded(t: torch.Tensor, stored: str) -> torch.Tensor:
    """A checkpoint tensor as the converter (BF16 copy) and the quantizer store it."""
    t = t.to(torch.bfloat16).float()
    return t.half().float() if stored == "F16" else t


def _rounded_dir(tmp_path: Path, model: str, stored: dict) -> Path:
    """The tiny model's directory with its float tensors rounded as the file stores them (float32 still)."""
    from safetensors.torch import load_file, save_file

    out = tmp_path / model
    shutil.copytree(TINY / model, out)
    state = load_file(str(TINY / model / "model.safetensors"))
    ours = {k.replace("language_model.model.", "lm.").replace("language_model.lm_head.", "lm.lm_head."): k
            for k in state}
    for name, key in ours.items():
        if name in stored:
            state[key] = _rounded(state[key], stored[name]).reshape(state[key].shape).contiguous()
    save_file(state, str(out / "model.safetensors"))
    return out


# ---------------------------------------------------------------------------------------------- reading


def test_detect_and_family():
    from transcribe.loading import local_family

    for f in ("g40-BF16", "g40-F16", "g40-Q8_0", "g33-BF16", "g41-Q8_0", "plus-BF16"):
        assert detect(GGUF / f"{f}.gguf") == "gguf"
        assert local_family(GGUF / f"{f}.gguf").name == "granite_speech"
    assert detect(TINY / "g40") == "transformers"
    other = HERE / "models" / "gguf" / "canary" / "canary-tiny-Q8_0.gguf"
    assert detect(other) is None


def test_load_model_takes_the_file(pcm):
    import transcribe

    m = transcribe.load_model(str(GGUF / "g40-Q8_0.gguf"))
    assert m.family == "granite_speech" and m.name == "g40-Q8_0.gguf"
    assert m.transcribe(pcm["jfk.wav"]).text == _reference("g40")["jfk.wav"]["greedy_text"].strip()
    m = transcribe.load_model(str(GGUF / "g40-BF16.gguf"), dtype="bfloat16")
    assert m.model.dtype == torch.bfloat16


@pytest.mark.parametrize("model", RUNNABLE)
def test_config_is_the_directory_s(model):
    from transcribe.granite_speech.config import parse_config, read_json

    cfg, _, tok, extra = read_gguf(GGUF / f"{model}-BF16.gguf")
    assert cfg == parse_config(read_json(TINY / model / "config.json"))
    assert extra["token_ids"] == {"bos": 561, "eos": 561, "padding": 560, "unknown": 561}
    assert extra["identity"]["stt.variant"] == VARIANTS[model]
    assert tok.chat_template == (TINY / model / "chat_template.jinja").read_text()


def test_g33_config_is_the_directory_s_without_the_adapter():
    from transcribe.granite_speech.config import parse_config, read_json

    cfg, _, tok, _ = read_gguf(GGUF / "g33-BF16.gguf")
    want = parse_config(read_json(TINY / "g33" / "config.json"))
    assert cfg.lm == want.lm and cfg.encoder == want.encoder and cfg.projector == want.projector
    assert want.has_lora_adapter and not cfg.has_lora_adapter
    assert tok.chat_template is None  # tokenizer_config.json's template is not stored


@pytest.mark.parametrize("model", ["g40", "g33", "g41", "plus"])
def test_tokenizer_is_the_directory_s(model):
    """Same vocabulary, merges, special tokens and decoding. The pre-tokenizer is the one the file names:
    the converter writes "granite" (the Granite 4 LMs' split: digits in runs of at most three) for every variant
    but -plus ("gpt2"), while the tiny models' tokenizer.json has plain ByteLevel (GPT-2's split: any run of
    digits), so in g40, g33 and g41's files text with digits splits differently; the prompts have none."""
    from transcribe.llm.tokenizer import LLMTokenizer

    _, _, tok, _ = read_gguf(GGUF / f"{model}-BF16.gguf")
    ref = LLMTokenizer.load(TINY / model)
    assert len(tok) == len(ref) and tok.special == ref.special
    for text in ("USER: <|audio|>can you transcribe the speech into a written format?\n ASSISTANT:",
                 "<|start_of_role|>system<|end_of_role|>Knowledge Cutoff Date: April.\nYou are Granite, developed "
                 "by IBM.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|><|audio|>can you translate the "
                 "speech into French?<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>",
                 " and so my fellow americans ask not 12 345"):
        assert tok.encode(text) == ref.encode(text)
    ids = list(range(len(ref)))
    assert tok.decode(ids) == ref.decode(ids)
    assert tok.decode(ids, skip_special=False) == ref.decode(ids, skip_special=False)
    assert [ref.token(i) for i in ref.encode(" 19, 2024")] == ["Ġ19", ",", "Ġ2024"]
    if model == "plus":
        assert tok.encode(" 19, 2024") == ref.encode(" 19, 2024")
    else:  # a space before digits is its own piece and digits go in threes (" 2024" -> " ", "202", "4")
        assert [tok.token(i) for i in tok.encode(" 19, 2024")] == ["Ġ", "19", ",", "Ġ", "2", "02", "4"]


@pytest.mark.parametrize("label", ["g40-BF16", "g40-F16", "g33-BF16", "g41-BF16", "plus-BF16"])
def test_float_files_hold_the_checkpoint_rounded_once(label):
    model = label.split("-")[0]
    path = GGUF / f"{label}.gguf"
    stored = _stored_as(path, model)
    _, state, _, _ = read_gguf(path)
    ref = read_weights(TINY / model)
    assert set(state) == set(ref)
    for k, t in state.items():
        assert torch.equal(t, _rounded(ref[k], stored[k]).reshape(t.shape)), k


def test_the_lora_adapter_is_not_in_the_file():
    """The converter reads model.safetensors only: the LM is the base one, not the adapter-merged one."""
    _, state, _, _ = read_gguf(GGUF / "g33-BF16.gguf")
    base = lm_tensors(read_weights(TINY / "g33"))
    merged = dict(base)
    n = merge_lora(TINY / "g33", merged)
    assert n > 0
    changed = [k for k in base if not torch.equal(base[k], merged[k])]
    assert changed
    for k in changed:
        assert torch.equal(state["lm." + k], base[k].bfloat16().float())
        assert not torch.equal(state["lm." + k], merged[k].bfloat16().float())


def test_a_file_without_a_chat_template_is_refused():
    with pytest.raises(ModelError, match="no chat template") as e:
        load_family(GGUF / "g33-BF16.gguf", "g33", "cpu", None, "gguf")
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------- running


@pytest.mark.parametrize("label", ["g40-BF16", "g40-F16", "g41-BF16", "plus-BF16"])
def test_float_files_run_as_the_rounded_directory(tmp_path, pcm, label):
    from transcribe.granite_speech.recognizer import GraniteSpeechASR

    model = label.split("-")[0]
    path = GGUF / f"{label}.gguf"
    ours = load_family(path, label, "cpu", None, "gguf")
    direct = GraniteSpeechASR.load(_rounded_dir(tmp_path, model, _stored_as(path, model)), "dir", "cpu")
    a, b = ours.model.state_dict(), direct.model.state_dict()
    assert set(a) == set(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    got = _greedy(ours, pcm, model)
    assert got == _greedy(direct, pcm, model)
    # on these clips the rounding changes no token: the float32 directory's (transformers') greedy ids
    ref = _reference(model)
    for c in CLIPS:
        assert got[c] == _until_eos(ref[c]["greedy_ids"]), c


@pytest.mark.parametrize("model", RUNNABLE)
@pytest.mark.parametrize("dtype", [None, torch.int8])
def test_q8_0_files_give_the_directory_s_ids(pcm, model, dtype):
    from transcribe.quant import HalfLinear, Int8Linear, Q8Linear

    asr = load_family(GGUF / f"{model}-Q8_0.gguf", "q8", "cpu", dtype, "gguf")
    kinds = {type(m) for m in asr.model.modules()}
    if dtype is None:
        assert Q8Linear in kinds and HalfLinear in kinds  # the convolutions the quantizer leaves in F16
        assert isinstance(asr.model.lm.layers[0].self_attn.q_proj, Q8Linear)
    else:
        assert Int8Linear in kinds and Q8Linear not in kinds
    got = _greedy(asr, pcm, model)
    ref = _reference(model)
    for c in CLIPS:
        want = _until_eos(ref[c]["greedy_ids"])
        if model == "plus" and c == "ls_1089-134691-0001.wav":  # garbled output, small margins
            assert got[c][:15] == want[:15]
        else:
            assert got[c] == want, c


@pytest.mark.parametrize("label", ["g40-BF16", "g40-F16", "g40-Q8_0", "g41-BF16", "g41-Q8_0", "plus-BF16",
                                   "plus-Q8_0"])
def test_the_runtime_s_text(pcm, label):
    """transcribe.cpp's own transcripts of the same file (committed refs): ours on jfk and ls_61-70968-0002;
    on ls_1089-134691-0001 the runtime gives something else while we give transformers' (README)."""
    model = label.split("-")[0]
    runtime = json.loads((GGUF / f"{label}.ref.json").read_text())
    assert runtime["model"] == {"arch": "granite_speech", "variant": VARIANTS[model]}
    texts = {Path(r["audio"]).name: r["result"]["text"] for r in runtime["runs"]}
    asr = load_family(GGUF / f"{label}.gguf", label, "cpu", None, "gguf")
    ref = _reference(model)
    for c in CLIPS:
        ours = asr.transcribe(pcm[c], max_new_tokens=60, instruction=_instruction(model)).text
        if not (label == "plus-Q8_0" and c == "ls_1089-134691-0001.wav"):
            assert ours == ref[c]["greedy_text"].strip()
        if c == "ls_1089-134691-0001.wav":
            assert texts[c].strip() != ours
        else:
            assert texts[c].strip() == ours


def test_g33_runtime_refuses_the_file():
    for label in ("g33-BF16", "g33-Q8_0"):
        runtime = json.loads((GGUF / f"{label}.ref.json").read_text())
        assert runtime["runs"] == [] and "ModelLoadError" in runtime["load_error"]


# ---------------------------------------------------------------------------------------------- damage


def _edited(tmp_path, old: bytes, new: bytes, source: str = "g40-BF16") -> Path:
    data = (GGUF / f"{source}.gguf").read_bytes()
    at = data.index(old)
    out = tmp_path / "edited.gguf"
    out.write_bytes(data[:at] + new + data[at + len(new):])
    return out


def _one_line_error(path: Path, match: str) -> None:
    with pytest.raises(ModelError, match=match) as e:
        load_family(path, "x", "cpu", None, "gguf")
    assert "\n" not in str(e.value)


def test_an_unknown_key_is_an_error(tmp_path):
    _one_line_error(_edited(tmp_path, b"stt.variant", b"stt.varianX"),
                    "metadata key this code does not implement: stt.varianX")


def test_a_missing_key_is_an_error(tmp_path):
    _one_line_error(_edited(tmp_path, b"stt.granite.decoder.vocab_size", b"stt.granite.decoder.vocab_sizX"),
                    "metadata key stt.granite.decoder.vocab_size is missing")


def test_a_setting_not_implemented_is_an_error(tmp_path):
    _one_line_error(_edited(tmp_path, b"per_utterance", b"per_fxterance"),
                    "stt.frontend.normalize = 'per_fxterance' is not implemented")
    act = b"projector.hidden_act" + struct.pack("<IQ", 8, 4)  # the key, its type (string), the value's length
    _one_line_error(_edited(tmp_path, act + b"gelu", act + b"relu"),
                    "projector_config.hidden_act 'relu' is not implemented")


def test_an_unknown_tensor_is_an_error(tmp_path):
    _one_line_error(_edited(tmp_path, b"enc.ctc_bypass.bias", b"enc.ctc_bypasX.bias"),
                    "tensor this code does not implement: enc.ctc_bypasX.bias")


def test_a_layer_count_that_does_not_fit_is_an_error(tmp_path):
    key = b"stt.granite.decoder.n_layers"
    data = (GGUF / "g40-BF16.gguf").read_bytes()
    at = data.index(key + struct.pack("<I", 4)) + len(key) + 4
    out = tmp_path / "edited.gguf"
    out.write_bytes(data[:at] + struct.pack("<I", 3) + data[at + 4:])
    _one_line_error(out, "stt.granite.decoder.n_layers = ")


@pytest.mark.parametrize("keep", [0.5, 0.999, 0.01])
def test_a_truncated_file_is_an_error(tmp_path, keep):
    data = (GGUF / "g40-Q8_0.gguf").read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:int(len(data) * keep)])
    _one_line_error(path, "truncated")


def test_another_architecture_is_an_error():
    canary = HERE / "models" / "gguf" / "canary" / "canary-tiny-Q8_0.gguf"
    with pytest.raises(ModelError, match="architecture is 'canary', not 'granite_speech'"):
        read_gguf(canary)


# ---------------------------------------------------------------------------------------------- writing

@pytest.mark.parametrize("model", RUNNABLE)
def test_export_writes_the_converter_s_file_byte_for_byte(tmp_path, model):
    """From the float32 directory: rounded to BF16 as the refs tool's copy is, then the converter's rules."""
    from transcribe.granite_speech.gguf_export import export_gguf

    out = export_gguf(TINY / model, tmp_path / f"{model}-BF16.gguf", "bf16", {"stt.variant": VARIANTS[model]})
    assert out.read_bytes() == (GGUF / f"{model}-BF16.gguf").read_bytes()


def test_the_command_writes_the_converter_s_file(tmp_path):
    from transcribe.convert import main

    out = tmp_path / "g40-BF16.gguf"
    assert main([str(TINY / "g40"), str(out), "--meta", "stt.variant=granite-4.0-1b-speech"]) == 0
    assert out.read_bytes() == (GGUF / "g40-BF16.gguf").read_bytes()


def test_the_f32_export_is_the_directory_exactly(tmp_path, pcm):
    from transcribe.granite_speech.gguf_export import export_gguf
    from transcribe.granite_speech.recognizer import GraniteSpeechASR

    path = export_gguf(TINY / "g40", tmp_path / "g40-F32.gguf", "f32")
    with GGUFFile(path) as f:
        assert {f.tensors[t].type_name for t in f.tensors} == {"F32"}
        assert f.meta["stt.variant"] == "g40" and f.meta["general.name"] == "Granite Speech"
        assert "general.languages" not in f.meta and f.meta["general.file_type"] == 0
    ours = load_family(path, "f32", "cpu", None, "gguf")
    direct = GraniteSpeechASR.load(TINY / "g40", "dir", "cpu")
    a, b = ours.model.state_dict(), direct.model.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    got = _greedy(ours, pcm, "g40")
    assert got == _greedy(direct, pcm, "g40")
    ref = _reference("g40")
    assert all(got[c] == _until_eos(ref[c]["greedy_ids"]) for c in CLIPS)


def test_export_refuses_what_the_file_cannot_hold(tmp_path):
    from transcribe.granite_speech.gguf_export import export_gguf

    with pytest.raises(ModelError, match="LoRA adapter, which transcribe.cpp's schema cannot hold"):
        export_gguf(TINY / "g33", tmp_path / "x.gguf")
    src = tmp_path / "g40"
    shutil.copytree(TINY / "g40", src)
    (src / "chat_template.jinja").unlink()
    with pytest.raises(ModelError, match="no chat_template.jinja"):
        export_gguf(src, tmp_path / "x.gguf")
    with pytest.raises(ModelError, match="not written for Granite Speech"):
        export_gguf(TINY / "g40", tmp_path / "x.gguf", "q8_0")
    with pytest.raises(ModelError, match="not identity keys: general.author"):
        export_gguf(TINY / "g40", tmp_path / "x.gguf", "bf16", {"general.author": "me"})
    assert not (tmp_path / "x.gguf").exists() and not (tmp_path / "x.gguf.part").exists()

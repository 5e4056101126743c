"""Voxtral (transformers' `voxtral`, the Voxtral-Mini-3B-2507 layout) against transformers 5.25.0 and mistral-common
1.13.1 on the tiny model tests/models/voxtral/tiny (tools/voxtral_tiny.py; references by tools/voxtral_reference.py,
tests/references/voxtral/README.md): the tokenizer (tekken.json read by `llm.tekken`), the prompt ids of every
recorded run (transcription with and without a language, translation), greedy token ids, beam search (every
hypothesis' ids and score), an input of two 30 s chunks, a batch against each input alone, the stage tensors
(features, encoder, projector, first-step logits), the command, and the refusals.

Tolerances: the front end runs transformers' float32 operations (the same STFT and log; the filterbank is computed
here in float64 as transformers does, then cast); the encoder and LM run the same products through other kernels
(SDPA here, eager attention there), which differ between CPUs (AVX2, AVX-512, AMX) in the last bits. Measured on
this machine: features within 2e-6, projector rows within 2e-6 (values up to 3), first-step logits within 1e-5
(values up to 25), beam scores within 1e-6. The bounds (1e-4; 1e-3 on logits) leave 50x or more for other CPUs;
the ids are compared exactly (no recorded greedy step is a near-tie at that scale: see the README)."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
import torch

import transcribe
from transcribe.errors import ModelError, OptionValueError

from .conftest import AUDIO, MODELS, REPO

MODEL = MODELS / "voxtral" / "tiny"
REF_DIR = REPO / "tests" / "references" / "voxtral"
REFS = json.loads((REF_DIR / "tiny.json").read_text(encoding="utf-8"))
MAX_NEW = REFS["how"]["max_new_tokens"]
STOPS = {2}
PAD = 11
CLIPS = list(REFS["clips"])
CONCAT = ["jfk.wav", "dev/ls_1089-134691-0001.wav", "dev/fleurs_en_004.wav"]
MODES = {"en": "en", "auto": None}
CASES = [(c, m) for c in CLIPS for m in MODES]
TOL = 1e-4


def _audio(clip: str) -> np.ndarray:
    if clip == "concat":
        return np.concatenate([_audio(c) for c in CONCAT])
    x, sr = sf.read(str(AUDIO / clip), dtype="float32")
    assert sr == 16000 and x.ndim == 1
    return x


def _until_stop(ids: list[int]) -> list[int]:
    out = []
    for t in ids:
        if t in STOPS:
            break
        out.append(t)
    return out


@pytest.fixture(scope="module")
def model():
    return transcribe.load_model(str(MODEL))


def test_the_directory_is_detected_as_voxtral():
    from transcribe.loading import FAMILIES
    from transcribe.voxtral import detect

    assert detect(MODEL) == "transformers"
    assert next(f.name for f in FAMILIES if f.detect(MODEL)) == "voxtral"
    assert detect(MODELS / "qwen3_asr" / "tiny") is None


# ---------------------------------------------------------------------------------------------- tokenizer

def test_the_tekken_tokenizer_encodes_and_decodes_as_mistral_common(model):
    tok = model.tokenizer
    ref = REFS["tokenizer"]
    assert len(tok) == ref["n_words"] and tok.n_special == ref["num_special_tokens"]
    for name, i in ref["specials"].items():
        assert tok.token_id(name) == i
    for text, ids in ref["encode"].items():
        assert tok.encode(text) == ids, text
    d = ref["decode"]
    assert tok.decode(d["ids"]) == d["ignore"] and tok.decode(d["ids"], skip_special=False) == d["keep"]
    if "decode_split" in ref:
        assert tok.decode(ref["decode_split"]["ids"]) == ref["decode_split"]["ignore"]


@pytest.mark.parametrize("change,words", [
    (lambda d: d["config"].update(version="v99"), "version"),
    (lambda d: d["vocab"][3].update(rank=7), "vocabulary entry 3"),
    (lambda d: d["vocab"][300].update(token_bytes="***"), "base64"),
    (lambda d: d["vocab"].__setitem__(65, d["vocab"][66] | {"rank": 65}), "byte 65"),
    (lambda d: d["config"].update(default_vocab_size=10 ** 7), "does not fit"),
    (lambda d: d["special_tokens"].__setitem__(5, {"rank": 5, "token_str": "<s>", "is_control": True}), "unique"),
    (lambda d: d["config"].update(pattern="(unclosed"), "regex"),
])
def test_a_broken_tekken_file_is_refused_in_one_line(tmp_path, change, words):
    from transcribe.llm.tekken import TekkenTokenizer

    data = json.loads((MODEL / "tekken.json").read_text(encoding="utf-8"))
    change(data)
    p = tmp_path / "tekken.json"
    p.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ModelError, match=words):
        TekkenTokenizer.load(p)


# ---------------------------------------------------------------------------------------------- prompts

@pytest.mark.parametrize("clip,mode", CASES)
def test_the_prompt_ids_are_mistral_common_s(model, clip, mode):
    ref = REFS["clips"][clip][mode]
    mel = model.frontend.chunks(_audio(clip))
    assert [1] + list(mel.shape) == [1] + [ref["input_features_shape"][0]] + ref["input_features_shape"][1:]
    rows = mel.shape[0] * model.model.config.encoder.chunk_rows
    assert rows == ref["num_audio_tokens"]
    assert model.prompts.build(rows, MODES[mode]).ids == ref["input_ids"]


@pytest.mark.parametrize("target", list(REFS["translate"]))
def test_the_translation_prompt_is_mistral_common_s_chat_turn(model, target):
    ref = REFS["translate"][target]
    rows = model.model.config.encoder.chunk_rows
    assert model.prompts.build(rows, None, target).ids == ref["input_ids"]


# ---------------------------------------------------------------------------------------------- search

@pytest.mark.parametrize("clip,mode", CASES)
def test_greedy_ids_and_text_equal_transformers(model, clip, mode):
    ref = REFS["clips"][clip][mode]
    opts = model.options(language=MODES[mode], max_new_tokens=MAX_NEW)
    hyp = model.decode([_audio(clip)], opts)[0][0]
    assert hyp.ids == _until_stop(ref["greedy_ids"])
    t = model.transcribe(_audio(clip), language=MODES[mode], max_new_tokens=MAX_NEW)
    assert t.text == ref["greedy_text"].strip()
    assert t.language == MODES[mode]
    assert not t.text or t.segments[0].end == pytest.approx(REFS["clips"][clip]["samples"] / 16000)
    assert [tok.id for tok in t.tokens] == hyp.ids and all(tok.logprob <= 0 for tok in t.tokens)


@pytest.mark.parametrize("target", list(REFS["translate"]))
def test_translation_ids_equal_transformers(model, target):
    ref = REFS["translate"][target]
    hyp = model.decode([_audio("jfk.wav")], model.options(task="translate", target_language=target,
                                                           max_new_tokens=MAX_NEW))[0][0]
    assert hyp.ids == _until_stop(ref["greedy_ids"])
    t = model.transcribe(_audio("jfk.wav"), task="translate", target_language=target, max_new_tokens=MAX_NEW)
    assert t.text == ref["greedy_text"].strip() and t.language == target
    if target != "en":  # a target other than the spoken language translates without task, as Canary's does
        same = model.transcribe(_audio("jfk.wav"), language="en", target_language=target, max_new_tokens=MAX_NEW)
        assert [tok.id for tok in same.tokens] == hyp.ids


@pytest.mark.parametrize("key", [k for k in REFS["beam"] if k != "settings"])
def test_beam_search_ids_and_scores_equal_transformers(model, key):
    clip, mode = key.split("|")
    ref = REFS["beam"][key]
    n = REFS["beam"]["settings"]["num_beams"]
    opts = model.options(language=MODES[mode], max_new_tokens=MAX_NEW, beam_size=n, nbest=n)
    hyps = model.decode([_audio(clip)], opts)[0]
    assert [h.ids for h in hyps] == [_until_stop(s) for s in ref["sequences"]]
    assert [h.score for h in hyps] == pytest.approx(ref["sequences_scores"], abs=TOL)
    t = model.transcribe(_audio(clip), language=MODES[mode], max_new_tokens=MAX_NEW, beam_size=n, nbest=n)
    assert [h.text for h in t.nbest.hypotheses] == [s.strip() for s in ref["texts"]]
    assert t.text == ref["texts"][0].strip() and t.nbest.beam == "transformers"


def test_a_batch_gives_each_input_its_own_result(model):
    """Each input alone is the reference; a batch (one of two chunks among one-chunk inputs, left-padded prompts)
    gives every input the same tokens."""
    names = ["jfk.wav", "concat", CLIPS[1]]
    xs = [_audio(c) for c in names]
    for mode, lang in MODES.items():
        out = model.transcribe(xs, language=lang, max_new_tokens=MAX_NEW, batch_size=len(xs))
        for c, t in zip(names, out):
            assert [tok.id for tok in t.tokens] == _until_stop(REFS["clips"][c][mode]["greedy_ids"]), (c, mode)
    hyps = model.decode(xs, model.options(max_new_tokens=MAX_NEW, beam_size=3, nbest=3))
    key = "dev/ls_61-70968-0002.wav|auto"
    assert [h.ids for h in hyps[2]] == [_until_stop(s) for s in REFS["beam"][key]["sequences"]]


def test_an_empty_input_is_refused_and_a_short_one_is_one_chunk(model):
    from transcribe.errors import AudioError

    with pytest.raises(AudioError, match="no audio samples"):
        model.transcribe(np.zeros(0, dtype=np.float32), sample_rate=16000)
    assert model.decode([np.zeros(0, np.float32)], model.options())[0][0].ids == []
    assert model.frontend.chunks(np.full(100, 0.1, np.float32)).shape == (1, 128, 3000)
    assert model.frontend.chunks(np.zeros(480001, np.float32)).shape[0] == 2
    t = model.transcribe(_audio("jfk.wav")[:1600], language="en", max_new_tokens=5)
    assert t.duration == pytest.approx(0.1)


# ---------------------------------------------------------------------------------------------- stages

@pytest.fixture(scope="module")
def stages():
    from safetensors.torch import load_file

    return load_file(str(REF_DIR / "tiny_stages.safetensors"))


def test_the_stage_tensors_equal_transformers_s(model, stages):
    m = model.model
    mel = model.frontend.chunks(_audio("jfk.wav"))
    assert torch.allclose(mel.amax().reshape(1), stages["mel_peak"], atol=TOL, rtol=0)
    assert torch.allclose(mel[0, :, :400], stages["mel"], atol=TOL, rtol=0)
    with torch.inference_mode():
        enc = m.audio_tower(mel)
        rows = m.audio_rows(mel)
    assert torch.allclose(enc[0, :64], stages["encoder_rows_0_64"], atol=TOL, rtol=0)
    assert rows.shape == stages["projected"].shape
    assert torch.allclose(rows, stages["projected"], atol=TOL, rtol=0), float((rows - stages["projected"]).abs().max())
    lm = m.language_model
    p = model.prompts.build(rows.shape[0], "en")
    assert p.ids == REFS["clips"]["jfk.wav"]["en"]["input_ids"]
    with torch.inference_mode():
        x = lm.embed(torch.tensor(p.ids))
        x[p.audio_start:p.audio_start + p.audio_rows] = rows
        logits = lm.logits(lm(x[None], lm.new_cache(1, x.shape[0])))[0, -1].float()
    assert torch.allclose(logits, stages["first_logits"], atol=10 * TOL, rtol=0)


# ---------------------------------------------------------------------------------------------- settings

@pytest.mark.parametrize("options,words", [
    ({"word_timestamps": True}, "cannot time words"),
    ({"language": "english-ish"}, "two-letter"),
    ({"task": "translate", "target_language": "ja"}, "translates into"),
    ({"task": "summarize"}, "transcribe or translate"),
    ({"beam_size": 2, "nbest": 3}, "cannot exceed"),
    ({"max_piece_s": 5.0}, "max_piece_s"),
])
def test_bad_options_are_refused_in_one_line(model, options, words):
    with pytest.raises(OptionValueError, match=words):
        model.transcribe(_audio("jfk.wav")[:16000], **options)


def _copy(tmp_path):
    dst = tmp_path / "voxtral-copy"
    shutil.copytree(MODEL, dst)
    return dst


def _edit_json(path, edit):
    d = json.loads(path.read_text(encoding="utf-8"))
    edit(d)
    path.write_text(json.dumps(d), encoding="utf-8")


@pytest.mark.parametrize("change,words", [
    (lambda p: _edit_json(p / "config.json", lambda d: d.update(projector_hidden_act="relu")), "projector_hidden_act"),
    (lambda p: _edit_json(p / "config.json", lambda d: d["audio_config"].update(scale_embedding=True)),
     "scale_embedding"),
    (lambda p: _edit_json(p / "config.json", lambda d: d["audio_config"].update(max_source_positions=1000)),
     "2 \\* max_source_positions"),
    (lambda p: _edit_json(p / "config.json", lambda d: d.update(audio_token_id=25)), "audio_token_id 25"),
    (lambda p: _edit_json(p / "config.json", lambda d: d.update(new_switch=1)), "'new_switch' is not implemented"),
    (lambda p: _edit_json(p / "config.json", lambda d: d["text_config"].update(rope_scaling={"rope_type": "yarn"})),
     "rotary scaling"),
    (lambda p: _edit_json(p / "preprocessor_config.json", lambda d: d.update(n_fft=512)), "n_fft"),
    (lambda p: _edit_json(p / "generation_config.json", lambda d: d.update(repetition_penalty=1.2)),
     "repetition_penalty"),
    (lambda p: (p / "tekken.json").unlink(), "tekken.json is missing"),
    (lambda p: (p / "config.json").rename(p / "params.json"), "native layout"),
])
def test_a_checkpoint_this_code_cannot_run_is_refused_in_one_line(tmp_path, change, words):
    p = _copy(tmp_path)
    change(p)
    with pytest.raises(ModelError, match=words):
        transcribe.load_model(str(p))


def test_a_missing_or_misshapen_tensor_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    p = _copy(tmp_path)
    sd = load_file(str(p / "model.safetensors"))
    head = next(k for k in sd if k.endswith("lm_head.weight"))
    save_file({k: v for k, v in sd.items() if k != head}, str(p / "model.safetensors"))
    with pytest.raises(ModelError, match="lm_head.weight is missing"):
        transcribe.load_model(str(p))
    key = next(k for k in sd if "embed_positions" in k)
    sd[key] = sd[key][:10]
    save_file(sd, str(p / "model.safetensors"))
    with pytest.raises(ModelError, match="embed_positions"):
        transcribe.load_model(str(p))


def _cli(*args, model=MODEL) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transcribe", *args, "--model", str(model)], capture_output=True,
                          text=True, timeout=300)


def test_the_command_prints_the_reference_text():
    r = _cli(str(AUDIO / "jfk.wav"), "--language", "en", "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["text"] == REFS["clips"]["jfk.wav"]["en"]["greedy_text"].strip() and out["language"] == "en"
    r = _cli(str(AUDIO / "jfk.wav"), "--task", "translate", "--target-language", "fr")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == REFS["translate"]["fr"]["greedy_text"].strip()
    r = _cli(str(AUDIO / "jfk.wav"), "--language", "xx-long-code")
    assert r.returncode != 0 and "two-letter" in r.stderr and "Traceback" not in r.stderr


def test_a_long_input_is_cut_at_pauses_and_its_pieces_joined(model):
    from transcribe import long_input

    x = np.concatenate([_audio("jfk.wav"), np.zeros(16000, np.float32), _audio(CONCAT[1]), _audio(CONCAT[2]),
                        np.zeros(8000, np.float32), _audio("jfk.wav")])
    t = model.transcribe(x, language="en", max_piece_s=30.0, max_new_tokens=MAX_NEW)
    spans = long_input.cut_spans(x, 16000, 30.0, "auto", grain=160)
    assert len(spans) > 1 and t.duration == pytest.approx(len(x) / 16000)
    pieces = model.transcribe([x[a:b] for a, b in spans], language="en", max_new_tokens=MAX_NEW)
    assert t.text == " ".join(p.text for p in pieces if p.text) and t.language == "en"
    assert [tok.id for tok in t.tokens] == [tok.id for p in pieces for tok in p.tokens]


def test_int8_and_bfloat16_load_and_transcribe():
    from transcribe.quant import Int8Linear

    m8 = transcribe.load_model(str(MODEL), dtype="int8")
    assert not any(isinstance(mod, torch.nn.Linear) for mod in m8.model.audio_tower.modules())
    assert any(isinstance(mod, Int8Linear) for mod in m8.model.multi_modal_projector.modules())
    ref = REFS["clips"]["jfk.wav"]["en"]["greedy_text"].strip()
    for m in (m8, transcribe.load_model(str(MODEL), dtype="bfloat16")):
        t = m.transcribe(_audio("jfk.wav"), language="en", max_new_tokens=MAX_NEW)
        # the tiny model's text survives the rounding of int8 and bfloat16 on most words
        words = ref.split()
        same = sum(a == b for a, b in zip(t.text.split(), words))
        assert same >= len(words) // 2, (t.text, ref)


def test_a_stream_commits_each_utterance_as_the_offline_pipeline_decodes_it(model):
    """transcribe/utterances.py: cut at the 2 s pause between two clips, each utterance decoded whole."""
    a, b = _audio("jfk.wav"), _audio(CLIPS[1])
    pcm = np.concatenate([a, np.zeros(32000, np.float32), b])
    s = model.stream(pause_s=1.2, language="en", max_new_tokens=MAX_NEW)
    commits = []
    for i in range(0, len(pcm), 8000):
        s.feed(pcm[i:i + 8000])
        new = s.take_new_text()
        if new:
            commits.append(new)
    s.finalize()
    commits.append(s.take_new_text())
    assert len(commits) == 2
    first = model.transcribe(a, language="en", max_new_tokens=MAX_NEW).text
    assert commits[0].strip() == first
    assert s.text().strip().startswith(first) and len(s.text().strip()) > len(first)


def test_the_published_config_spelling_is_taken(tmp_path):
    """transformers 4.54's config.json (the published repos'): text_config rope_theta + rope_scaling null and
    sliding_window null, audio_config head_dim and num_key_value_heads, the tensors under `language_model.model.*`
    (what the tiny model's files hold too) -> the same model."""
    p = _copy(tmp_path)

    def published(d):
        text = d["text_config"]
        text["rope_theta"] = text.pop("rope_parameters")["rope_theta"]
        text.update(rope_scaling=None, sliding_window=None)
        d["audio_config"].update(head_dim=16, num_key_value_heads=4)
        d["torch_dtype"] = d.pop("dtype")

    _edit_json(p / "config.json", published)
    m = transcribe.load_model(str(p))
    t = m.transcribe(_audio("jfk.wav"), language="en", max_new_tokens=MAX_NEW)
    assert [tok.id for tok in t.tokens] == _until_stop(REFS["clips"]["jfk.wav"]["en"]["greedy_ids"])
    _edit_json(p / "config.json", lambda d: d["audio_config"].update(head_dim=32))
    with pytest.raises(ModelError, match="head_dim 32"):
        transcribe.load_model(str(p))

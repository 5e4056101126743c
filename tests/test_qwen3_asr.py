"""Qwen3-ASR (transformers' `qwen3_asr`, the -hf layout) against transformers 5.24.0's own outputs on the tiny
model tests/models/qwen3_asr/tiny (tests/references/qwen3_asr/README.md says how the references were made and what
the model is): the prompt ids of every recorded run, greedy token ids with the language detected and forced, beam
search (4 beams: every hypothesis' ids and its score), a batch against each input alone, the stage tensors (front
end, encoder input and output, projector, the first step's logits, the teacher-forced log-probabilities), the
processor's output parsing, the command, and the refusals.

Tolerances: the front end runs transformers' float32 operations on each input alone (the same STFT, filterbank
product and log); the encoder and LM the same products through other kernels and other batch shapes (the encoder's
windows padded into one SDPA call where transformers makes one call per window), which differ between CPUs (AVX2,
AVX-512, AMX). Measured on this machine: features and the encoder's input equal, encoder and projector outputs
within 1e-6 (values up to 5), the first step's logits within 6e-6 (values up to 20), teacher-forced
log-probabilities within 1e-9, beam scores within 3e-7. The bounds, 1e-4 (1e-3 on logits), leave 100x or more for
other CPUs, and no decision the references record is near a tie at that scale: the smallest top-2 logit margin of
every greedy step of every run is above 9, and the beams' scores are 1.4e-3 or more apart (the ids are compared
exactly)."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
import torch

import transcribe
from transcribe.errors import ModelError, OptionsNotTaken, OptionValueError

from .conftest import AUDIO, MODELS, REPO

MODEL = MODELS / "qwen3_asr" / "tiny"
REF_DIR = REPO / "tests" / "references" / "qwen3_asr"
REFS = json.loads((REF_DIR / "tiny.json").read_text(encoding="utf-8"))
MAX_NEW = REFS["how"]["max_new_tokens"]
_EOS = REFS["generation_config_file"].get("eos_token_id")
STOPS = set(_EOS if isinstance(_EOS, list) else [_EOS])
CLIPS = list(REFS["clips"])
MODES = {"auto": None, "forced_English": "en"}
CASES = [(c, m) for c in CLIPS for m in MODES]
TOL = 1e-4


def _audio(clip: str) -> np.ndarray:
    x, sr = sf.read(str(AUDIO / clip), dtype="float32")
    assert sr == 16000 and x.ndim == 1
    return x


def _until_stop(ids: list[int]) -> list[int]:
    """Generated ids up to the first stop token (transformers fills finished rows with pad = a stop token)."""
    out = []
    for t in ids:
        if t in STOPS:
            break
        out.append(t)
    return out


@pytest.fixture(scope="module")
def model():
    return transcribe.load_model(str(MODEL))


def test_the_directory_is_detected_as_qwen3_asr():
    from transcribe.loading import FAMILIES
    from transcribe.qwen3_asr import detect

    assert detect(MODEL) == "transformers"
    assert next(f.name for f in FAMILIES if f.detect(MODEL)) == "qwen3_asr"  # not Whisper's "not a Whisper model"
    assert detect(MODELS / "cohere-tiny") is None


# ---------------------------------------------------------------------------------------------- prompts

@pytest.mark.parametrize("clip,mode", CASES)
def test_the_prompt_ids_are_the_processor_s(model, clip, mode):
    ref = REFS["clips"][clip][mode]
    feats, frames = model.frontend.batch([_audio(clip)])
    assert int(frames[0]) == ref["valid_mel_frames"]
    assert list(feats.shape) == ref["input_features_shape"]
    rows = int(model.model.audio_tower.output_lengths(frames)[0])
    assert rows == ref["num_audio_tokens"]
    assert model.prompts.build(rows, MODES[mode]).ids == ref["input_ids"]


def test_the_audio_token_count_is_the_processor_s(model):
    for frames, n in REFS["audio_token_formula_checks"].items():
        assert int(model.model.audio_tower.output_lengths(torch.tensor([int(frames)]))[0]) == n, frames


def test_a_forced_language_is_named_as_the_processor_names_it(model):
    from transcribe.qwen3_asr.prompt import LANGUAGES

    enc = REFS["tokenizer"]["encode_examples"]
    assert model.prompts.forced["en"] == enc["language English<asr_text>"]
    assert len(LANGUAGES) == 30 and LANGUAGES["yue"] == "Cantonese" and LANGUAGES["fil"] == "Filipino"
    # a code or an English name, any case, as transformers' resolve_language takes it
    a = model.transcribe(_audio("jfk.wav")[:16000], language="English", max_new_tokens=3)
    b = model.transcribe(_audio("jfk.wav")[:16000], language="EN", max_new_tokens=3)
    assert a.language == b.language == "en" and [t.id for t in a.tokens] == [t.id for t in b.tokens]


def test_a_context_is_the_system_turn_s_text_as_the_processor_writes_it(model):
    """transformers 5.24.0's `apply_transcription_request(audio, prompt=...)` on this model gives these ids before
    the audio placeholders (checked in a run of it on five texts, each with and without a language: all equal)."""
    audio_start = REFS["tokens"]["<|audio_start|>"]
    want = {"\n\nTerms: QWEN, ASR\n": [641, 424, 198, 198, 198, 51, 269, 76, 82, 25, 220, 48, 54, 529, 11, 602, 49, 198,
                                      642, 198, 641, 439, 198, audio_start],
            "Golden fortune, happy life.": [641, 424, 198, 38, 572, 281, 349, 83, 425, 68, 11, 316, 549, 79, 88, 304,
                                            414, 68, 13, 642, 198, 641, 439, 198, audio_start]}
    for context, ids in want.items():
        p = model.prompts.build(7, "en", model.prompts.context_prefix(context))
        assert p.ids[:p.audio_start] == ids and p.ids[p.audio_start:] == model.prompts.build(7, "en").ids[
            model.prompts.build(7, "en").audio_start:]
    assert model.prompts.context_prefix("") == model.prompts.context_prefix(None) == model.prompts.prefix
    x = _audio("jfk.wav")[:16000]
    with pytest.raises(OptionValueError, match="context may not hold the chat's special tokens"):
        model.transcribe(x, context="a<|im_end|>b")
    t = model.transcribe(x, context="Golden fortune", language="en", max_new_tokens=3)
    assert t.language == "en"


# ---------------------------------------------------------------------------------------------- search

@pytest.mark.parametrize("clip,mode", CASES)
def test_greedy_ids_text_and_language_equal_transformers(model, clip, mode):
    ref = REFS["clips"][clip][mode]
    opts = model.options(language=MODES[mode], max_new_tokens=MAX_NEW)
    hyp = model.decode([_audio(clip)], opts)[0][0]
    assert hyp.ids == _until_stop(ref["greedy_ids"])
    assert hyp.stopped == (ref["stopped_by"] == "eos")
    t = model.transcribe(_audio(clip), language=MODES[mode], max_new_tokens=MAX_NEW)
    parsed = ref["greedy_parsed_new_tokens"]
    assert t.text == parsed["transcription"]
    if MODES[mode] is None:
        from transcribe.qwen3_asr.prompt import output_language

        assert t.language == output_language(parsed["language"])
    else:
        assert t.language == "en" and parsed["language"] is None  # the prompt named it: the output does not
    assert t.segments == ([] if not t.text else t.segments) and (not t.text or t.segments[0].end == pytest.approx(
        REFS["clips"][clip]["samples"] / 16000))
    assert "".join(tok.text for tok in t.tokens).strip() == model.tokenizer.decode(
        [tok.id for tok in t.tokens], skip_special=False).strip()


@pytest.mark.parametrize("key", [k for k in REFS["beam"] if k != "settings"])
def test_beam_search_ids_and_scores_equal_transformers(model, key):
    clip, mode = key.split("|")
    ref = REFS["beam"][key]
    opts = model.options(language=MODES[mode], max_new_tokens=MAX_NEW, beam_size=4, nbest=4)
    hyps = model.decode([_audio(clip)], opts)[0]
    assert [h.ids for h in hyps] == [_until_stop(s) for s in ref["sequences"]]
    assert [h.score for h in hyps] == pytest.approx(ref["sequences_scores"], abs=TOL)
    t = model.transcribe(_audio(clip), language=MODES[mode], max_new_tokens=MAX_NEW, beam_size=4, nbest=4)
    assert [h.text for h in t.nbest.hypotheses] == [p["transcription"] for p in ref["parsed"]]
    assert t.text == ref["parsed"][0]["transcription"] and t.nbest.beam == "transformers"


@pytest.mark.parametrize("mode", list(MODES))
def test_a_batch_gives_each_input_s_own_result(model, mode):
    """Each input alone is the reference (transformers pads a batch's shorter inputs' audio and prompts; its
    batch rows are recorded with whether they equal the inputs alone)."""
    xs = [_audio(c) for c in CLIPS]
    out = model.transcribe(xs, language=MODES[mode], max_new_tokens=MAX_NEW, batch_size=len(xs))
    for c, t in zip(CLIPS, out):
        alone = model.transcribe(_audio(c), language=MODES[mode], max_new_tokens=MAX_NEW)
        assert [tok.id for tok in t.tokens] == [tok.id for tok in alone.tokens], c
        assert t.text == alone.text == REFS["clips"][c][mode]["greedy_parsed_new_tokens"]["transcription"]
    hyps = model.decode(xs, model.options(language=MODES[mode], max_new_tokens=MAX_NEW))
    for row, h in zip(REFS["batch"][mode]["rows"], hyps):
        if row["same_as_single_after_trimming_pad"]:
            assert h[0].ids == _until_stop(row["greedy_ids"]), row["clip"]


def test_the_encoder_gives_each_input_of_a_batch_its_own_rows(model):
    """Five inputs, 33 chunks: more than one slice of the convolutions (CONV_CHUNKS) and windows of every input."""
    from transcribe.qwen3_asr.encoder import CONV_CHUNKS

    xs = [_audio("jfk.wav"), _audio(CLIPS[1]), _audio("jfk.wav")[:40000], _audio("jfk.wav"), _audio(CLIPS[2])]
    m = model.model
    with torch.inference_mode():
        feats, frames = model.frontend.batch(xs)
        assert int((-(-frames // 100)).sum()) > CONV_CHUNKS
        together = m.audio_embeddings(feats, frames)
        for x, rows in zip(xs, together):
            alone = m.audio_embeddings(*model.frontend.batch([x]))[0]
            assert rows.shape == alone.shape and torch.allclose(rows, alone, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------- stages

@pytest.fixture(scope="module")
def stages():
    from safetensors.torch import load_file

    return load_file(str(REF_DIR / "tiny_stages.safetensors"))


def _stage_run(model):
    """jfk.wav's features, encoder input (the first layer's packed rows), encoder and projector outputs."""
    m = model.model
    feats, frames = model.frontend.batch([_audio("jfk.wav")])
    seen = {}

    def hook(module, args):
        x, mask = args
        seen["rows"] = x[mask[:, 0, 0, :]]
        seen["windows"] = mask[:, 0, 0, :].sum(-1)

    h = m.audio_tower.layers[0].register_forward_pre_hook(hook)
    try:
        with torch.inference_mode():
            enc = m.audio_tower(feats, frames)[0]
            proj = m.multi_modal_projector(enc)
    finally:
        h.remove()
    return feats, frames, seen, enc, proj


def test_the_stage_tensors_equal_transformers_s(model, stages):
    feats, frames, seen, enc, proj = _stage_run(model)
    ref_feats = stages["input_features"]
    assert feats[0].shape == ref_feats.shape
    assert torch.allclose(feats[0], ref_feats, atol=TOL, rtol=0)
    assert int(frames[0]) == int(stages["input_features_mask"].sum())
    # the attention windows are transformers' cu_seqlens
    cu = stages["cu_seqlens"]
    assert seen["windows"].tolist() == (cu[1:] - cu[:-1]).tolist()
    for name, mine in (("encoder_layer0_in", seen["rows"]), ("encoder_out", enc), ("projector_out", proj)):
        assert mine.shape == stages[name].shape, name
        assert torch.allclose(mine, stages[name], atol=TOL, rtol=0), (name, float((mine - stages[name]).abs().max()))


def test_the_first_step_s_logits_and_the_teacher_forced_log_probabilities_equal_transformers_s(model, stages):
    m = model.model
    lm = m.language_model
    ids = stages["input_ids"].tolist()
    greedy = stages["greedy_ids"].tolist()
    _, _, _, _, proj = _stage_run(model)
    p = model.prompts.build(proj.shape[0], None)
    assert p.ids == ids
    with torch.inference_mode():
        x = lm.embed(torch.tensor(ids + greedy))
        x[p.audio_start:p.audio_start + p.audio_rows] = proj
        cache = lm.new_cache(1, x.shape[0])
        logits = lm.logits(lm(x[None], cache))[0].float()
    first = logits[len(ids) - 1]
    assert torch.allclose(first, stages["first_step_logits"], atol=10 * TOL, rtol=0)
    lp = torch.log_softmax(logits[len(ids) - 1:-1].double(), -1).gather(-1, torch.tensor(greedy)[:, None])[:, 0]
    assert torch.allclose(lp.float(), stages["teacher_forced_logprobs"], atol=TOL, rtol=0)
    # greedy search's own log-probabilities: the transcript's tokens (after "language English<asr_text>", before
    # the stop token) carry transformers' teacher-forced ones
    t = model.transcribe(_audio("jfk.wav"), max_new_tokens=MAX_NEW)
    skip = len(greedy) - 1 - len(t.tokens)
    assert [tok.id for tok in t.tokens] == greedy[skip:-1]
    assert [tok.logprob for tok in t.tokens] == pytest.approx(stages["teacher_forced_logprobs"][skip:-1].tolist(),
                                                              abs=TOL)


# ---------------------------------------------------------------------------------------------- output text

def test_the_output_is_parsed_as_the_processor_parses_it():
    from transcribe.qwen3_asr.prompt import parse_output

    # cases and answers from transformers' Qwen3ASRProcessor.parse_output (5.24.0)
    assert parse_output("language English<asr_text>Hello there.") == ("English", "Hello there.")
    assert parse_output("  language None<asr_text>") == (None, "")
    assert parse_output("Hello") == (None, "Hello")
    assert parse_output("") == (None, "")
    assert parse_output("English<asr_text>x") == ("English", "x")
    assert parse_output("language <asr_text>x") == ("language", "x")  # "language" alone is not "language "
    assert parse_output("\n\nlanguage German\nfoo<asr_text> y ") == ("German", "y")
    assert parse_output("system\nassistant\nlanguage French<asr_text>Bonjour") == ("French", "Bonjour")
    assert parse_output("language Chinese<asr_text>" + "哈" * 30) == ("Chinese", "哈")


def test_the_repetition_fix_is_the_processor_s():
    from transcribe.qwen3_asr.prompt import fix_repetitions

    # answers from transformers' _detect_and_fix_repetitions (threshold 20); equal on 3000 random strings
    assert fix_repetitions("a" * 20) == "a" * 20
    assert fix_repetitions("a" * 21 + "b") == "ab"
    assert fix_repetitions("x " + "ab" * 20 + "cd") == "x abcd"
    assert fix_repetitions("ab" * 19 + "c") == "ab" * 19 + "c"
    assert fix_repetitions("hello " * 25 + "world " + "ok" * 30) == "hello world ok"
    assert fix_repetitions("abc") == "abc"


# ---------------------------------------------------------------------------------------------- settings

def test_the_generation_config_s_stop_tokens_and_default_length(model):
    gen = model.model.config.generation
    assert set(gen.stop_ids) == STOPS
    # the tiny model's generation config sets no max_new_tokens: the published one's 512 (transformers itself
    # would stop at max_length 20, as the reference records)
    assert "max_new_tokens" not in REFS["generation_config_file"] and gen.max_new_tokens == 512
    assert REFS["generation_resolved"]["call_without_max_new_tokens"]["new_tokens"] == 20
    assert len(model.transcribe(_audio("jfk.wav"), language="en", max_new_tokens=3).tokens) <= 3


@pytest.mark.parametrize("options,error,words", [
    (dict(language="xx"), OptionValueError, r"does not know the language 'xx' \(one of ar, cs, da, de"),
    (dict(pnc=True), OptionsNotTaken, "is a Qwen3-ASR model and does not take pnc"),
    (dict(task="translate"), OptionsNotTaken, "does not take task"),
    (dict(word_timestamps=True), OptionValueError, "cannot time words"),
    (dict(nbest=2), OptionValueError, r"nbest \(2\) cannot exceed beam_size \(1\)"),
    (dict(max_new_tokens=0), OptionValueError, "max_new_tokens"),
    (dict(max_piece_s=5.0), OptionValueError, "max_piece_s"),
])
def test_bad_options_are_refused_in_one_line(model, options, error, words):
    with pytest.raises(error, match=words) as e:
        model.transcribe(_audio("jfk.wav")[:16000], **options)
    assert "\n" not in str(e.value)


def _copy(tmp_path, name="qwen3-asr-copy"):
    d = tmp_path / name
    shutil.copytree(MODEL, d)
    return d


def _edit_json(path, edit):
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.mark.parametrize("change,words", [
    (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json is missing"),
    (lambda d: (d / "model.safetensors").unlink(), "no model.safetensors"),
    (lambda d: (d / "chat_template.jinja").write_text("{{ messages[0].content }}"),
     "unknown chat template (it lacks '<|im_start|>system'"),
    (lambda d: (d / "chat_template.jinja").unlink(), "no chat template"),
    (lambda d: _edit_json(d / "config.json", lambda c: c["audio_config"].update(n_window_infer=250)),
     "n_window_infer 250 is not a multiple of 2 * n_window (100)"),
    (lambda d: _edit_json(d / "config.json", lambda c: c.update(rope_something=1)),
     "the setting 'rope_something' is not implemented"),
    (lambda d: _edit_json(d / "config.json", lambda c: c["text_config"].update(use_sliding_window=True)),
     "sliding-window attention"),
    (lambda d: _edit_json(d / "config.json", lambda c: c.update(architectures=["Qwen3ASRForTokenClassification"])),
     "the forced aligner's token classification is another model"),
    (lambda d: _edit_json(d / "config.json", lambda c: c.update(thinker_config={})),
     "use the transformers conversion (Qwen/Qwen3-ASR-0.6B-hf"),
    (lambda d: _edit_json(d / "processor_config.json", lambda c: c["feature_extractor"].update(dither=0.5)),
     "dither = 0.5 is not implemented"),
    (lambda d: _edit_json(d / "generation_config.json", lambda c: c.update(repetition_penalty=1.2)),
     "repetition_penalty 1.2 is not implemented"),
    (lambda d: _edit_json(d / "generation_config.json", lambda c: c.update(max_length=100)),
     "max_length 100 without max_new_tokens is not implemented"),
])
def test_a_checkpoint_this_code_cannot_run_is_refused_in_one_line(tmp_path, change, words):
    d = _copy(tmp_path)
    change(d)
    with pytest.raises(ModelError) as e:
        transcribe.load_model(str(d))
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("audio,text,params", [
    (dict(d_model=896, encoder_layers=18, encoder_attention_heads=14, encoder_ffn_dim=3584, output_dim=1024),
     dict(hidden_size=1024, intermediate_size=3072), 782426112),
    (dict(d_model=1024, encoder_layers=24, encoder_attention_heads=16, encoder_ffn_dim=4096, output_dim=2048),
     dict(hidden_size=2048, intermediate_size=6144), 2038052480),
])
def test_the_published_sizes_are_taken(audio, text, params):
    """Qwen3-ASR-0.6B and -1.7B (transcribe.cpp's intake of the originals; the -hf conversion keeps the sizes): the
    config parses and the modules hold as many parameters as transformers' model of that config (counted on its
    meta device: 782,426,112 and 2,038,052,480 with the head tied)."""
    from transcribe.llm.model import DecoderLM
    from transcribe.qwen3_asr.config import parse_config
    from transcribe.qwen3_asr.encoder import AudioEncoder, Projector

    cfg = json.loads((MODEL / "config.json").read_text(encoding="utf-8"))
    cfg["audio_config"].update(n_window_infer=800, downsample_hidden_size=480, **audio)
    cfg["text_config"].update(num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                              vocab_size=151936, **text)
    c = parse_config(cfg, {}, {"eos_token_id": [151643, 151645], "max_new_tokens": 512}, "published")
    assert c.encoder.window_chunks == 8 and c.encoder.chunk_positions == 13 and c.lm.tie_word_embeddings
    with torch.device("meta"):
        parts = (AudioEncoder(c.encoder), Projector(c.encoder), DecoderLM(c.lm))
    assert sum(p.numel() for part in parts for p in part.parameters()) == params


def test_a_compatible_chat_template_is_taken_and_the_known_one_is_recognised(model, tmp_path):
    from transcribe.qwen3_asr.prompt import check_template, read_template

    text, source = read_template(MODEL)
    assert source == "chat_template.jinja" and check_template(text, "x") == "transformers -hf"
    # a template holding the layout's pieces in order (here without the {% generation %} markers) is taken
    assert check_template(text.replace("{% generation %}", "").replace("{% endgeneration %}", ""), "x") == "compatible"
    with pytest.raises(ModelError, match="holds '<timestamp>'"):
        check_template(text + "{{- '<timestamp><timestamp>' -}}", "x")


# ---------------------------------------------------------------------------------------------- command

def _cli(*args, model=MODEL) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transcribe", str(AUDIO / "jfk.wav"), "--model", str(model), *args],
                          capture_output=True, text=True, cwd=str(REPO), timeout=300)


def test_the_command_prints_the_reference_text_and_language():
    r = _cli("--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    ref = REFS["clips"]["jfk.wav"]["auto"]
    parsed = ref["greedy_parsed_new_tokens"]
    from transcribe.qwen3_asr.prompt import output_language

    assert out["language"] == output_language(parsed["language"]) and out["duration"] == pytest.approx(11.0)
    assert set(out) >= {"text", "language", "duration", "model", "segments", "words", "tokens"}
    if ref["stopped_by"] == "eos":  # the command's default length (512) ran it to its end too
        assert out["text"] == parsed["transcription"]
    else:
        assert out["text"].startswith(parsed["transcription"][:40])


@pytest.mark.parametrize("args,words", [
    (["--pnc"], "is a Qwen3-ASR model and does not take --pnc"),
    (["--language", "xx"], "does not know the language 'xx'"),
    (["--word-timestamps"], "cannot time words"),
])
def test_the_command_refuses_bad_options_in_one_line(args, words):
    r = _cli(*args, "--format", "json")
    assert r.returncode == 2 and r.stdout == ""
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("change,words", [
    (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json is missing"),
    (lambda d: (d / "chat_template.jinja").write_text("{{ messages[0].content }}"), "unknown chat template"),
])
def test_the_command_refuses_a_broken_checkpoint_in_one_line(tmp_path, change, words):
    d = _copy(tmp_path)
    change(d)
    r = _cli("--format", "json", model=d)
    assert r.returncode == 2 and r.stdout == ""
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------- long inputs, int8

def test_a_long_input_is_cut_at_pauses_and_its_pieces_joined(model):
    from transcribe import long_input

    x = np.concatenate([_audio(c) for c in CLIPS])
    t = model.transcribe(x, language="en", max_piece_s=10.0, max_new_tokens=MAX_NEW)
    spans = long_input.cut_spans(x, 16000, 10.0, "auto", grain=160)
    assert len(spans) > 1 and t.duration == pytest.approx(len(x) / 16000)
    pieces = model.transcribe([x[a:b] for a, b in spans], language="en", max_new_tokens=MAX_NEW)
    assert t.text == " ".join(p.text for p in pieces if p.text) and t.language == "en"
    assert [tok.id for tok in t.tokens] == [tok.id for p in pieces for tok in p.tokens]


def test_int8_makes_every_linear_layer_an_int8_product(model):
    from transcribe.llm.model import int8_compute
    from transcribe.quant import Int8Linear, W8Linear

    q = transcribe.load_model(str(MODEL), dtype="int8")
    layers = [m for m in q.model.modules() if isinstance(m, torch.nn.Linear)]
    # the LM's kind follows the CPU (weight-only int8 in bfloat16 where bfloat16 is native), the encoder's does not
    lm_kind = W8Linear if int8_compute("cpu") == torch.bfloat16 else Int8Linear
    assert layers == [] and any(isinstance(m, lm_kind) for m in q.model.language_model.modules())
    assert any(isinstance(m, Int8Linear) for m in q.model.audio_tower.modules())
    x = _audio("dev/ls_61-70968-0002.wav")
    a = q.transcribe(x, language="en", max_new_tokens=MAX_NEW)
    b = model.transcribe(x, language="en", max_new_tokens=MAX_NEW)
    assert a.language == b.language == "en" and a.tokens  # int8 changes results slightly: never compared exactly


def test_a_short_input_is_padded_to_half_a_second_and_one_without_frames_is_empty(model, tmp_path):
    x = _audio("jfk.wav")
    # the published front end pads inputs to 8000 samples, the padding counted as audio (50 frames, 7 rows)
    assert model.frontend.frames(100) == 50 and model.frontend.frames(16000) == 100
    assert model.transcribe(x[:100], language="en", max_new_tokens=3).duration == pytest.approx(100 / 16000)
    d = _copy(tmp_path)
    _edit_json(d / "processor_config.json", lambda c: c["feature_extractor"].update(min_length=0))
    m0 = transcribe.load_model(str(d))
    out = m0.transcribe([x[:100], x[:16000]], language="en", max_new_tokens=5)
    assert out[0].text == "" and not out[0].tokens
    assert [t.id for t in out[1].tokens] == [t.id for t in model.transcribe(x[:16000], language="en",
                                                                             max_new_tokens=5).tokens]


# ---------------------------------------------------------------------------------------------- live session

def test_a_stream_commits_each_utterance_as_the_offline_pipeline_decodes_it(model):
    """transcribe/utterances.py: cut at the 2 s pause between two clips, each utterance decoded whole (its
    transcription's tokens: the language prefix left out)."""
    a, b = _audio("jfk.wav"), _audio(CLIPS[1])
    pcm = np.concatenate([a, np.zeros(32000, np.float32), b])
    s = model.stream(pause_s=1.2, language="en", max_new_tokens=MAX_NEW)
    commits = []
    for i in range(0, len(pcm), 8000):
        s.feed(pcm[i:i + 8000])
        new = s.take_new_text()
        if new:
            commits.append((new, list(s.drain_words())))
    s.finalize()
    commits.append((s.take_new_text(), list(s.drain_words())))
    assert len(commits) == 2
    cut = commits[0][1][0].start
    assert len(a) / 16000 < cut < len(a) / 16000 + 2.0
    first = model.transcribe(pcm[:int(round(cut * 16000))], language="en", max_new_tokens=MAX_NEW)
    rest = model.transcribe(pcm[int(round(cut * 16000)):], language="en", max_new_tokens=MAX_NEW)
    assert commits[0][0].strip() == first.text and commits[1][0].strip() == rest.text
    assert s.text().strip() == first.text + " " + rest.text  # a space leads each utterance
    assert all(w.start == w.end == cut for w in commits[0][1])  # the model gives no times: words sit at the cut


@pytest.mark.parametrize("options,words", [
    (dict(nbest=2, beam_size=2), "nbest does not apply to a stream"),
    (dict(pause_s=5.0, max_piece_s=12.0), "must hold three pauses"),
    (dict(pnc=True), "does not take pnc"),
])
def test_bad_stream_options_are_refused_in_one_line(model, options, words):
    with pytest.raises((OptionValueError, OptionsNotTaken), match=words) as e:
        model.stream(**options)
    assert "\n" not in str(e.value)

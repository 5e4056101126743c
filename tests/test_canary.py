"""Canary (NeMo EncDecMultiTaskModel) against NeMo's own outputs on the tiny canary2-format model of
../shared/models/canary-tiny (made and decoded by NeMo 3.0.0: its README says how): token ids exactly for
greedy ASR with and without punctuation, en->de translation, the beam of 4 and its 4-best list, timestamps
and a padded batch; stage tensors within float32 tolerances.

Tolerances: the front end and encoder run the same float32 operations as NeMo in another order (FFT,
matrix products, attention kernels), so tensors agree to about 1e-5 relative per stage and the decoder's
logits to about 1e-4; beam scores are sums of up to ~40 log-probabilities, each within ~1e-5, so they agree
within 1e-3."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import transcribe
from transcribe.errors import OptionValueError, OptionsNotTaken

from .conftest import AUDIO, SHARED

CANARY = SHARED / "models" / "canary-tiny"
MODEL = CANARY / "canary-tiny.nemo"
REFS = json.loads((CANARY / "references.json").read_text())
CLIPS = REFS["clips"]


def _path(clip: str) -> Path:
    return AUDIO / clip if clip == "jfk.wav" else AUDIO / "dev" / clip


@pytest.fixture(scope="module")
def model():
    return transcribe.load_model(str(MODEL))


_DONE: dict = {}


def _run(model, kind: str, clip: str):
    """The transcript of a reference's run, made once (fleurs_en_004 with timestamps runs to NeMo's length
    limit: 1015 tokens)."""
    if (kind, clip) not in _DONE:
        _DONE[kind, clip] = model.transcribe(str(_path(clip)), **KINDS[kind])
    return _DONE[kind, clip]


# kind -> the options that make NeMo's decoding config of that run (max_generation_delta -1: NeMo's greedy
# strategy, bounded by the decoder's table only; beam_size 1: NeMo's default, a beam of one).
KINDS = {
    "greedy_asr_en_pnc": dict(max_generation_delta=-1),
    "greedy_asr_en_nopnc": dict(max_generation_delta=-1, pnc=False),
    "greedy_ast_en_de": dict(max_generation_delta=-1, target_language="de"),
    "beam4_asr_en_pnc": dict(beam_size=4),
    "greedy_timestamps_asr_en_pnc": dict(max_generation_delta=-1, word_timestamps=True),
    "default_decoding_asr_en_pnc": dict(beam_size=1),
}
CASES = [(k, c["clip"]) for k in KINDS for c in REFS["results"][k]["per_clip"]]


def _ref(kind: str, clip: str) -> dict:
    return next(c for c in REFS["results"][kind]["per_clip"] if c["clip"] == clip)


@pytest.mark.parametrize("kind,clip", CASES, ids=[f"{k}-{c}" for k, c in CASES])
def test_token_ids_and_text_equal_nemo(model, kind, clip):
    ref = _ref(kind, clip)
    t = _run(model, kind, clip)
    assert [tok.id for tok in t.tokens] == ref["output_ids"]
    assert t.text == ref["text"].strip()
    assert t.language == ("de" if "en_de" in kind else "en")


def test_the_prompts_are_nemo_s(model):
    from transcribe.canary.prompt import Request

    for kind, kw in KINDS.items():
        req = Request(None, kw.get("target_language"), None, kw.get("pnc"), None, kw.get("word_timestamps", False))
        assert list(model.prompts.build(req).ids) == _ref(kind, "jfk.wav")["prompt_ids"], kind


@pytest.mark.parametrize("clip", CLIPS)
def test_timestamps_give_nemo_s_words_and_segments(model, clip):
    ref = _ref("greedy_timestamps_asr_en_pnc", clip)["timestamp"]
    t = _run(model, "greedy_timestamps_asr_en_pnc", clip)
    assert [w.word for w in t.words] == [w["word"] for w in ref["word"]]
    for got, want in zip(t.words, ref["word"]):  # offsets x 80 ms: the same products
        assert (got.start, got.end) == pytest.approx((want["start"], want["end"]), abs=1e-9)
    assert [s.text for s in t.segments] == [s["segment"] for s in ref["segment"]]
    for got, want in zip(t.segments, ref["segment"]):
        assert (got.start, got.end) == pytest.approx((want["start"], want["end"]), abs=1e-9)
        assert got.words and got.words[0].start == got.start


@pytest.mark.parametrize("clip", CLIPS)
def test_the_n_best_list_equals_nemo_s(model, clip):
    ref = _ref("beam4_nbest_asr_en_pnc", clip)
    t = model.transcribe(str(_path(clip)), beam_size=4, nbest=4)
    got = t.nbest.hypotheses
    want = sorted(ref["nbest"], key=lambda h: -h["score"])  # length penalty 0: NeMo's best is the top score
    assert [[tok.id for tok in h.tokens] for h in got] == [h["output_ids"] for h in want]
    assert [h.score for h in got] == pytest.approx([h["score"] for h in want], abs=1e-3)
    assert [h.text for h in got] == [h["text"].strip() for h in want]
    assert [tok.id for tok in t.tokens] == want[0]["output_ids"] == ref["nbest"][int(ref["best_index"])]["output_ids"]


def test_a_batch_gives_each_input_what_it_gives_alone(model):
    """NeMo's padded batch of four (one call): the same ids as each clip alone, here and in NeMo."""
    batch = REFS["results"]["greedy_asr_en_pnc_batch4"]["per_clip"]
    paths = [str(_path(c["clip"])) for c in batch]
    got = model.transcribe(paths, batch_size=4, max_generation_delta=-1)
    assert [[tok.id for tok in t.tokens] for t in got] == [c["output_ids"] for c in batch]
    beams = model.transcribe(paths, batch_size=4, beam_size=4, nbest=4)
    alone = [model.transcribe(p, beam_size=4, nbest=4) for p in paths]
    for b, a in zip(beams, alone):
        assert [[x.id for x in h.tokens] for h in b.nbest.hypotheses] == [[x.id for x in h.tokens] for h in a.nbest.hypotheses]
        assert [h.score for h in b.nbest.hypotheses] == pytest.approx([h.score for h in a.nbest.hypotheses], abs=1e-4)


def test_stage_tensors_equal_nemo_s(model):
    from safetensors.torch import load_file

    st = load_file(str(CANARY / "canary-tiny_stages.safetensors"))
    m = model.model
    audio = st["audio"]
    lengths = torch.tensor([audio.shape[1]])
    with torch.inference_mode():
        mel, mel_len = m.preprocessor(audio, lengths)
        assert mel.shape == st["mel"].shape and int(mel_len) == int(st["mel_len"])
        assert torch.allclose(mel, st["mel"], atol=2e-3, rtol=1e-4)  # log-mel, normalized per feature
        states, enc_len = m.encode(audio, lengths)
        assert torch.allclose(states, st["encoder_states_projected"], atol=2e-4, rtol=1e-4)
        state = m.start(states, enc_len)
        logits = m.step(st["prompt_ids"], state)
    assert torch.allclose(logits, st["first_step_logits"], atol=2e-4, rtol=1e-4)
    logp = torch.log_softmax(logits, dim=-1)
    assert torch.allclose(logp, st["first_step_logprobs"], atol=2e-4, rtol=1e-4)


def test_the_greedy_log_probs_are_nemo_s_teacher_forced_ones(model):
    ref = _ref("greedy_asr_en_pnc", "jfk.wav")
    t = _run(model, "greedy_asr_en_pnc", "jfk.wav")
    assert [tok.logprob for tok in t.tokens] == pytest.approx(ref["teacher_forced_logprobs"][:len(t.tokens)], abs=1e-4)


def test_short_inputs_are_padded_to_one_second_as_nemo_does(model):
    x = transcribe.load_audio(str(_path("jfk.wav")))[:8000]
    padded = np.concatenate([np.zeros(4000, np.float32), x, np.zeros(4000, np.float32)])
    assert [t.id for t in model.transcribe(x).tokens] == [t.id for t in model.transcribe(padded).tokens]


def test_the_model_s_languages_and_refusals(model):
    assert model.languages == ["de", "en", "es", "fr"]
    with pytest.raises(OptionValueError, match="language 'xx' is not one of the model's languages"):
        model.transcribe(str(_path("jfk.wav")), language="xx")
    with pytest.raises(OptionValueError, match="translate needs a target_language other than"):
        model.transcribe(str(_path("jfk.wav")), task="translate", target_language="en")
    with pytest.raises(OptionValueError, match="task transcribe keeps the spoken language"):
        model.transcribe(str(_path("jfk.wav")), task="transcribe", target_language="de")
    with pytest.raises(OptionsNotTaken, match="is a Canary model and does not take head"):
        model.transcribe(str(_path("jfk.wav")), head="ctc")
    # translate without a target from English has no default (English is the default target)
    with pytest.raises(OptionValueError, match="translate needs a target_language"):
        model.transcribe(str(_path("jfk.wav")), task="translate")


def test_translate_from_another_language_defaults_to_english(model):
    from transcribe.canary.prompt import Request

    p = model.prompts.build(Request(language="de", task="translate"))
    assert (p.source, p.target) == ("de", "en")


def test_the_model_s_decoding_config_is_the_default(model):
    """canary-tiny's config: a beam of 1 bounded by 50 tokens over the encoder frames (NeMo's
    `default_decoding`)."""
    ref = _ref("default_decoding_asr_en_pnc", "jfk.wav")
    assert [t.id for t in model.transcribe(str(_path("jfk.wav"))).tokens] == ref["output_ids"]
    d = model.model.config.decoding
    assert (d.strategy, d.beam_size, d.beam_delta, d.length_penalty) == ("beam", 1, 50, 0.0)


# ---------------------------------------------------------------------------------------------- surfaces

def _cli_json(capsys, *args) -> dict:
    from transcribe.cli import main

    assert main([str(_path("jfk.wav")), "--model", str(MODEL), "--format", "json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_command_gives_nemo_s_ids(capsys):
    """The issue's commands: the default search, translation and the 4-best list, with the reference's ids."""
    out = _cli_json(capsys)
    assert [t["id"] for t in out["tokens"]] == _ref("greedy_asr_en_pnc", "jfk.wav")["output_ids"]
    out = _cli_json(capsys, "--task", "translate", "--language", "en", "--target-language", "de")
    assert [t["id"] for t in out["tokens"]] == _ref("greedy_ast_en_de", "jfk.wav")["output_ids"]
    assert out["language"] == "de"
    out = _cli_json(capsys, "--beam-size", "4", "--nbest", "4")
    want = sorted(_ref("beam4_nbest_asr_en_pnc", "jfk.wav")["nbest"], key=lambda h: -h["score"])
    assert [[t["id"] for t in h["tokens"]] for h in out["nbest"]["hypotheses"]] == [h["output_ids"] for h in want]
    out = _cli_json(capsys, "--no-pnc")
    assert [t["id"] for t in out["tokens"]] == _ref("greedy_asr_en_nopnc", "jfk.wav")["output_ids"]
    out = _cli_json(capsys, "--word-timestamps")
    ref = _ref("greedy_timestamps_asr_en_pnc", "jfk.wav")["timestamp"]["word"]
    assert [(w["word"], w["start"], w["end"]) for w in out["words"]] == \
        [(w["word"], pytest.approx(w["start"]), pytest.approx(w["end"])) for w in ref]


@pytest.mark.parametrize("args,words", [
    (["--language", "xx"], "language 'xx' is not one of the model's languages (de, en, es, fr)"),
    (["--task", "translate", "--target-language", "en"], "translate needs a target_language"),
    (["--head", "ctc"], "canary-tiny.nemo is a Canary model and does not take --head"),
    (["--beam-size", "65"], "--beam-size must be at most 64"),
    (["--temperature", "0.5"], "is a Canary model and does not take --temperature"),
], ids=["language", "translate-same", "other-family", "beam-bound", "whisper-option"])
def test_the_command_refuses_bad_options_in_one_line(capsys, args, words):
    from transcribe.cli import main

    assert main([str(_path("jfk.wav")), "--model", str(MODEL), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_the_server_serves_canary_transcriptions_and_translations(tmp_path):
    pytest.importorskip("fastapi", reason="the server tests need the test extra")
    from .test_server import Server, multipart

    s = Server(["--model", str(MODEL)], tmp_path)
    try:
        wav = _path("jfk.wav").read_bytes()
        body, headers = multipart({"model": MODEL.name, "response_format": "verbose_json"}, {"file": ("a.wav", wav)})
        status, _, raw = s.request("POST", "/v1/audio/transcriptions", body, headers)
        assert status == 200, raw
        assert json.loads(raw)["text"] == _ref("greedy_asr_en_pnc", "jfk.wav")["text"].strip()
        body, headers = multipart({"model": MODEL.name, "language": "de", "target_language": "en",
                                   "response_format": "json"}, {"file": ("a.wav", wav)})
        status, _, raw = s.request("POST", "/v1/audio/translations", body, headers)
        assert status == 200, raw  # German speech (as the model is told) into English
        # a target language of its own is Canary's speech translation on either endpoint
        body, headers = multipart({"model": MODEL.name, "target_language": "de"}, {"file": ("a.wav", wav)})
        status, _, raw = s.request("POST", "/v1/audio/transcriptions", body, headers)
        assert status == 200 and json.loads(raw)["text"] == _ref("greedy_ast_en_de", "jfk.wav")["text"].strip()
        body, headers = multipart({"model": MODEL.name, "language": "xx"}, {"file": ("a.wav", wav)})
        status, _, raw = s.request("POST", "/v1/audio/transcriptions", body, headers)
        assert status == 400 and json.loads(raw)["error"]["param"] == "language"
    finally:
        s.stop()


# ---------------------------------------------------------------------------------------------- long inputs

def test_a_long_input_is_cut_at_pauses_and_joined(model):
    """Three dev clips with a second of silence between them, cut into pieces of at most 10 s: the pieces
    fall in the silences, and the joined transcript is the pieces' transcripts end to end (ids in order,
    times shifted by each piece's start)."""
    from transcribe import long_input

    clips = [_path(c) for c in CLIPS[1:]]
    gap = np.zeros(16000, np.float32)
    parts = [transcribe.load_audio(str(c)) for c in clips]
    pcm = np.concatenate([parts[0], gap, parts[1], gap, parts[2]])
    spans = long_input.cut_spans(pcm, 16000, 10.0, "auto", grain=model.model.frame_stride)
    assert len(spans) == 3
    edges = np.cumsum([len(parts[0]), len(gap), len(parts[1]), len(gap)])
    assert edges[0] <= spans[1][0] <= edges[1] and edges[2] <= spans[2][0] <= edges[3]  # in the silences
    whole = model.transcribe(pcm, max_piece_s=10.0, word_timestamps=True)
    alone = [model.transcribe(pcm[a:b], word_timestamps=True) for a, b in spans]
    assert [t.id for t in whole.tokens] == [t.id for p in alone for t in p.tokens]
    assert whole.text == " ".join(p.text for p in alone)
    shifted = [round(w.start + a / 16000, 3) for p, (a, _) in zip(alone, spans) for w in p.words]
    assert [w.start for w in whole.words] == pytest.approx(shifted, abs=1e-3)
    assert whole.duration == pytest.approx(len(pcm) / 16000)
    # under the limit: one piece, the same as without cutting
    assert [t.id for t in model.transcribe(parts[0], max_piece_s=40.0).tokens] == \
        [t.id for t in model.transcribe(parts[0]).tokens]


# ---------------------------------------------------------------------------------------------- streaming

def test_a_stream_of_one_window_is_the_offline_decoding(model):
    """A window over the whole input decodes it as transcribe() does with timestamps: the stream commits
    every text token of it (NeMo's offline parsing keeps only the words between two timestamp tokens,
    canary/streaming.py), so it equals the offline token sequence without the timestamp tokens."""
    x = transcribe.load_audio(str(_path("jfk.wav")))
    with model.stream(chunk_s=12.0, left_s=0.0, right_s=0.0) as s:
        for i in range(0, len(x), 8000):
            s.feed(x[i:i + 8000])
        text = s.finalize()
    off = model.transcribe(x, word_timestamps=True)
    ids = [t.id for t in off.tokens if t.id not in model.tokenizer.timestamps]
    assert text == model.tokenizer.text(ids).strip()
    assert s.windows_decoded == 1


def test_a_stream_in_windows_commits_words_once(model):
    x = np.concatenate([transcribe.load_audio(str(_path(c))) for c in CLIPS[1:3]])
    with model.stream() as s:
        for i in range(0, len(x), 4000):
            s.feed(x[i:i + 4000])
        text = s.finalize()
    assert s.windows_decoded >= 3 and text and "<|" not in text
    assert text == s.committed_text()


def test_a_model_without_timestamp_tokens_cannot_stream():
    v1 = transcribe.load_model(str(Path(__file__).parent / "models" / "canary" / "tiny-canary1.nemo"))
    with pytest.raises(transcribe.TranscribeError, match="cannot stream: it has no timestamp tokens"):
        v1.stream()

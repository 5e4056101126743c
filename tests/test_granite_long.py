"""Long inputs on the Granite NAR recognizer: cut at pauses into pieces that run as batches and are
joined back. The tiny model's transcripts are word salad, but they are a deterministic function of
each piece, which is what these tests check: the joined result is the pieces' results in order,
with their times shifted by each piece's start, and no batch holds more than the set amount of audio.
"""
from __future__ import annotations

import numpy as np
import pytest

import transcribe
from transcribe.audio import load_audio
from transcribe.granite import recognizer as rec
from transcribe.long_input import split_at_pauses

from .conftest import AUDIO, SHARED

TINY = SHARED / "models" / "granite-nar-tiny"


@pytest.fixture(scope="module")
def model():
    return transcribe.load_model(str(TINY))


@pytest.fixture(scope="module")
def long_audio():
    """About 2.5 minutes: real speech clips with a 1.2 s silence after each."""
    speech = load_audio(str(AUDIO / "jfk.wav"), 16000)
    gap = np.zeros(int(1.2 * 16000), np.float32)
    parts, starts = [], []
    at = 0
    while at < 150 * 16000:
        starts.append(at)
        parts += [speech, gap]
        at += len(speech) + len(gap)
    return np.concatenate(parts), starts


def test_long_input_is_the_join_of_its_pieces(model, long_audio):
    pcm, _ = long_audio
    pieces = [(start, len(piece)) for _, start, piece in model._pieces([(0, pcm)], 30.0, "energy")]
    assert len(pieces) >= 5
    # contiguous, covering the input, cut on whole 20 ms frames, each within the limit
    assert pieces[0][0] == 0 and sum(n for _, n in pieces) == len(pcm)
    assert all(a + n == b for (a, n), (b, _) in zip(pieces, pieces[1:]))
    assert all(a % 320 == 0 and n <= 30 * 16000 + 320 for a, n in pieces)
    whole = model.transcribe(pcm, max_piece_s=30.0, detector="energy")
    assert whole.duration == pytest.approx(len(pcm) / 16000)
    ids, starts, words = [], [], []
    for a, n in pieces:
        part = model.transcribe(pcm[a:a + n], max_piece_s=30.0, detector="energy")
        off = a / 16000
        ids += [t.id for t in part.tokens]
        starts += [round(off + t.start, 3) for t in part.tokens]
        words += [w.word for w in part.words]
    assert [t.id for t in whole.tokens] == ids
    assert [t.start for t in whole.tokens] == pytest.approx(starts, abs=1e-3)
    assert [w.word for w in whole.words] == words
    assert [t.start for t in whole.tokens] == sorted(t.start for t in whole.tokens)
    assert all(0.0 <= t.start < t.end <= whole.duration for t in whole.tokens)
    # a segment never spans a cut between pieces
    cuts = [a / 16000 for a, _ in pieces[1:]]
    for s in whole.segments:
        assert not any(s.start < c < s.end - 1e-6 for c in cuts), (s.start, s.end, cuts)


def test_cuts_land_in_the_silences(long_audio):
    pcm, starts = long_audio
    speech_len = starts[1] - int(1.2 * 16000)
    for p in split_at_pauses(pcm, 16000, max_s=30.0, min_s=10.0, detector="energy")[1:]:
        into = (p.start - max(s for s in starts if s <= p.start))
        assert into >= speech_len, "a cut inside speech"


def test_batches_hold_bounded_audio(model, long_audio, monkeypatch):
    """Pieces run in batches of at most `batch_size` and MAX_BATCH_AUDIO_S of padded audio: a long
    file never sits in the network whole (what makes an hour run in bounded memory)."""
    pcm, _ = long_audio
    monkeypatch.setattr(rec, "MAX_BATCH_AUDIO_S", 45.0)
    seen = []
    real = type(model.model).forward

    def spy(self, features, lengths, keep=False):
        seen.append((features.shape[0], features.shape[1]))
        return real(self, features, lengths, keep)

    monkeypatch.setattr(type(model.model), "forward", spy)
    t = model.transcribe(pcm, max_piece_s=20.0, batch_size=8, detector="energy")
    assert len(seen) >= 3
    for b, frames in seen:
        assert b * frames * 320 / 16000 <= 45.0 + 0.02
    assert t.tokens


def test_max_piece_limits(model):
    with pytest.raises(transcribe.TranscribeError, match="max_piece_s"):
        model.transcribe(np.zeros(16000, np.float32), max_piece_s=500)
    with pytest.raises(transcribe.TranscribeError, match="pause detector"):
        model.transcribe(np.zeros(16000, np.float32), detector="psychic")

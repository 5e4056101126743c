"""The family-independent streaming pieces: incremental detokenization and the session's
bookkeeping (committed text, words, events, utterance release), on a scripted session."""
from __future__ import annotations

import random

import numpy as np
import pytest

from transcribe.errors import TranscribeError
from transcribe.streaming import CommitToken, StreamingSession, _as_float32
from transcribe.text.detok import IncrementalText
from transcribe.text.sentencepiece import SentencePieceTokenizer
from transcribe.nemo.checkpoint import read_nemo

from .conftest import SHARED

TINY = SHARED / "models/parakeet-tiny/tiny-tdt-fit.nemo"


@pytest.fixture(scope="module")
def sp():
    return SentencePieceTokenizer(read_nemo(TINY).tokenizer)


def _chunks(seq, rng):
    i = 0
    while i < len(seq):
        n = rng.choice([0, 1, 1, 2, 3, 7])
        yield seq[i:i + n]
        i += n


def test_incremental_text_equals_whole_decode_sentencepiece(sp):
    rng = random.Random(0)
    for _ in range(200):
        ids = [rng.randrange(len(sp)) for _ in range(rng.randrange(0, 40))]
        inc = IncrementalText(sp.decode)
        out = "".join(inc.add(c) for c in _chunks(ids, rng)) + inc.flush()
        assert out == sp.decode(ids)


def test_incremental_text_holds_incomplete_utf8():
    # A byte-level vocabulary: ids 0..255 are bytes, decoded with replacement of incomplete characters.
    def decode(ids):
        return bytes(ids).decode("utf-8", errors="replace")

    rng = random.Random(1)
    words = ["hé", "€uro", "日本", "ok ", "ß"]
    for _ in range(100):
        text = "".join(rng.choice(words) for _ in range(rng.randrange(1, 8)))
        ids = list(text.encode("utf-8"))
        inc = IncrementalText(decode)
        pieces = [inc.add(c) for c in _chunks(ids, rng)] + [inc.flush()]
        assert "".join(pieces) == text
        assert all("\ufffd" not in p for p in pieces)


class Scripted(StreamingSession):
    """Commits a scripted token list, one (frame, id) per 1280 samples (an 80 ms frame)."""

    def __init__(self, sp, script, eou):
        super().__init__(decode=sp.decode, piece=sp.piece, punctuation=set(), frame_seconds=lambda f: 0.08 * f,
                         chunk_ms=80, lookahead_ms=0, special={eou: "eou"})
        self.script = list(script)
        self.pos = 0
        self.pending = 0

    def _accept(self, samples):
        self.pending += samples.size
        while self.pending >= 1280 and self.pos < len(self.script):
            self.pending -= 1280
            tid = self.script[self.pos]
            self._commit([CommitToken(tid, self.pos, self.pos + 1, self.pos)], committed_seconds=0.08 * (self.pos + 1))
            self.pos += 1

    def _flush(self):
        self._accept(np.zeros(1280 * (len(self.script) - self.pos), np.float32))

    def _restart(self):
        self.pos = 0
        self.pending = 0


def test_session_bookkeeping(sp):
    ids = sp.encode("hello world")
    more = sp.encode("good night")
    eou = sp.encode("a")[0]  # stands in for an <EOU> token
    s = Scripted(sp, ids + [eou] + more, eou)
    s.feed(np.zeros(1280 * (len(ids) + 1), np.float32))
    assert s.take_new_text() == "hello world\n"
    ev = s.drain_events()
    assert [(e.type, e.frame) for e in ev] == [("eou", len(ids))]
    assert s.text() == "" and s.tokens() == []  # the finished utterance is released
    assert [w.word for w in s.drain_words()] == ["hello", "world"]
    s.feed(np.zeros(1280 * 2, np.int16))
    s.finalize()
    assert s.take_new_text() == "good night"
    assert [w.word for w in s.drain_words()] == ["good", "night"]
    assert s.drain_events() == []  # finalize never invents an EOU
    assert s.text() == "good night"
    assert [t.id for t in s.tokens()] == more
    with pytest.raises(TranscribeError):
        s.feed(np.zeros(10, np.float32))
    s.reset()
    assert s.text() == "" and s.latency.received_ms == 0


def test_feed_input_types():
    assert _as_float32(b"\x00\x80\xff\x7f").tolist() == [-1.0, 32767 / 32768]
    with pytest.raises(TranscribeError):
        _as_float32(b"\x00")
    with pytest.raises(TranscribeError):
        _as_float32(np.zeros((2, 5), np.float32))
    with pytest.raises(TranscribeError):
        _as_float32(np.zeros(5, np.int32))


def test_drain_keeps_the_order_of_words_and_events(sp):
    ids = sp.encode("hello world")
    eou = sp.encode("a")[0]
    s = Scripted(sp, ids + [eou] + sp.encode("good"), eou)
    s.feed(np.zeros(1280 * (len(ids) + 2), np.float32))
    s.finalize()
    got = [getattr(x, "word", None) or x.type for x in s.drain()]
    assert got == ["hello", "world", "eou", "good"]
    assert s.drain() == [] and s.drain_words() == [] and s.drain_events() == []

"""Buffered streaming for offline models (transcribe/buffered.py): left/chunk/right windows, words
merged at chunk boundaries without duplicates or losses.

- the boundary rule on a scripted model ("oracle"): each window returns the words of a known
  stream that fall in it, each window placing every word up to a frame off (as two real windows
  do); the committed tokens are exactly the stream's, for random windows and feed sizes, and a
  15-minute stream holds only its window;
- the real Parakeet pipeline on the tiny models fitted to jfk.wav: at chunk 2 s / left 2 s /
  right 2 s the TDT head and the hybrid's CTC head commit exactly the offline tokens (ids, frames,
  durations, confidences), for any feed sizes. The fitted RNN-T and CTC-only models are checked
  with one window only: they learned one 11 s input (normalization included) by heart and do not
  transcribe a part of it (`transcribe(audio[2 s:8 s])` gives "and so my you can do for" for the
  RNN-T), so no merge could give their offline text from shorter windows;
- Whisper tiny.en through 12 s windows on jfk: the same words as offline (case and punctuation
  aside: a window that ends mid-sentence may end it with a full stop, or capitalize its next
  word).
"""
from __future__ import annotations

import random
import re
from bisect import bisect_left

import numpy as np
import pytest
import soundfile as sf

import transcribe
from transcribe.buffered import BufferedSession, WindowToken, check_windows
from transcribe.errors import TranscribeError
from transcribe.parakeet.buffered import buffered_session
from transcribe.nemo.checkpoint import read_nemo
from transcribe.text.sentencepiece import WORD_START, SentencePieceTokenizer

from .conftest import AUDIO, TINY

FRAME = 1280  # samples per frame of the scripted model (80 ms, as Parakeet's 8x encoders)
VOCAB = ("and so my fellow americans ask not what your country can do for you "
         "a b i it is no yes oh well then").split()


@pytest.fixture(scope="module")
def sp():
    return SentencePieceTokenizer(read_nemo(TINY / "tiny-tdt-fit.nemo").tokenizer)


@pytest.fixture(scope="module")
def jfk():
    a, sr = sf.read(str(AUDIO / "jfk.wav"), dtype="float32")
    assert sr == 16000
    return a


def _pieces(n, rng, sizes=(1, 7, 160, 999, 1280, 4000, 16000, 37000)):
    i = 0
    while i < n:
        k = rng.choice(sizes)
        yield i, min(n, i + k)
        i += k


# ---------------------------------------------------------------- the boundary rule, scripted
class Oracle:
    """A known stream of words (token ids at frames) and a window decoder that returns the words
    whose first token falls in the window, each placed up to `jitter` frames off, differently in
    each window. A sample of the audio is its frame's index, so a window knows where it starts."""

    def __init__(self, sp, rng, n_words, jitter, pause_every=0):
        self.words = []  # (ids, first frame)
        f = rng.randrange(0, 4)
        prev = None
        for k in range(n_words):
            w = rng.choice([v for v in VOCAB if v != prev])
            prev = w
            ids = sp.encode(w)
            self.words.append((ids, f))
            gap = rng.choice([0, 1, 2, 4, 9, 25]) + (100 if pause_every and k % pause_every == pause_every - 1 else 0)
            f += len(ids) + 2 * jitter + 1 + gap
        self.frames = f + 3
        self.firsts = [f0 for _, f0 in self.words]
        self.sp = sp
        self.jitter = jitter
        self.seed = rng.randrange(1 << 30)

    @property
    def samples(self):
        return self.frames * FRAME

    def audio(self, a, b):
        return (np.arange(a, b, dtype=np.int64) // FRAME).astype(np.float32)

    def ids(self):
        return [i for ids, _ in self.words for i in ids]

    def decode_window(self, window):
        f0 = int(window[0])
        assert f0 == int(window[min(len(window), FRAME) - 1])  # windows start on a frame
        f1 = f0 + len(window) / FRAME
        out = []
        lo = bisect_left(self.firsts, f0 - self.jitter)
        for k in range(lo, len(self.words)):
            ids, first = self.words[k]
            if first - self.jitter >= f1:
                break
            j = random.Random(self.seed ^ (f0 * 7919 + k)).randint(-self.jitter, self.jitter)
            start = first + j
            if not f0 <= start < f1:
                continue
            for n, i in enumerate(ids):
                fr = start + n - f0
                out.append(WindowToken(i, fr, fr + 1, fr, self.sp.piece(i).startswith(WORD_START), 1, 0.5))
        return out

    def session(self, chunk_s, left_s, right_s, tol_s=0.24):
        return BufferedSession(self.decode_window, decode=self.sp.decode, piece=self.sp.piece, punctuation=set(),
                               frame_samples=FRAME, chunk_s=chunk_s, left_s=left_s, right_s=right_s,
                               merge_tolerance_s=tol_s)


def _run(session, oracle, rng, check_held=True):
    new, tentative = [], False
    limit = session.window_s
    for a, b in _pieces(oracle.samples, rng):
        session.feed(oracle.audio(a, b))
        new.append(session.take_new_text())
        tentative = tentative or bool(session.tentative_text())
        if check_held:
            assert session.held_seconds <= limit + 1e-9
    session.finalize()
    new.append(session.take_new_text())
    return "".join(new), tentative


@pytest.mark.parametrize("seed", range(12))
def test_scripted_windows_commit_every_word_once(sp, seed):
    rng = random.Random(seed)
    jitter = seed % 2  # frames; the tolerance is 3 frames
    oracle = Oracle(sp, rng, rng.randrange(5, 60), jitter, pause_every=rng.choice([0, 7]))
    chunk = rng.choice([0.08, 0.4, 1.0, 1.6, 2.0, 3.2])
    left = rng.choice([1.0, 2.0, 4.0])
    right = rng.choice([0.0, 0.08, 0.5, 2.0])
    s = oracle.session(chunk, left, right)
    text, _ = _run(s, oracle, rng)
    assert [t.id for t in s.tokens()] == oracle.ids(), (chunk, left, right)
    assert text == s.committed_text() == sp.decode(oracle.ids())
    assert [w.word for w in s.drain_words()] == [sp.decode(ids) for ids, _ in oracle.words]
    assert s.latency.committed_ms == pytest.approx(1000 * oracle.samples / 16000)


def test_scripted_windows_give_the_same_tokens_for_any_feed_sizes(sp):
    oracle = Oracle(sp, random.Random(5), 40, 1)
    runs = []
    for seed in range(3):
        s = oracle.session(1.6, 2.0, 1.0)
        _run(s, oracle, random.Random(100 + seed))
        runs.append(s.tokens())
    s = oracle.session(1.6, 2.0, 1.0)
    s.feed(oracle.audio(0, oracle.samples))  # all at once: held for a moment, then trimmed
    assert s.held_seconds <= s.window_s
    s.finalize()
    runs.append(s.tokens())
    assert all(r == runs[0] for r in runs)
    assert [t.id for t in runs[0]] == oracle.ids()


def test_a_long_stream_keeps_only_its_window(sp):
    """Almost half an hour of scripted speech: the held audio never passes left + chunk + right, the
    buffer does not grow, every word comes out once, and each window is decoded once."""
    oracle = Oracle(sp, random.Random(7), 1500, 1, pause_every=50)
    assert oracle.samples / 16000 > 25 * 60
    s = oracle.session(2.0, 4.0, 2.0)
    sizes = set()
    got = []
    for a in range(0, oracle.samples, 8000):  # 0.5 s pieces, as a microphone gives them
        s.feed(oracle.audio(a, min(oracle.samples, a + 8000)))
        assert s.held_seconds <= s.window_s
        sizes.add(s._buf.size)
        got.extend(t.id for t in s.take_new_tokens())
    s.finalize()
    got.extend(t.id for t in s.take_new_tokens())
    assert got == oracle.ids()
    assert max(sizes) * 4 < 1 << 20  # one 8 s window of float32 (+ one frame), never more
    # a window for each chunk whose right context came, then one for the rest
    assert s.windows_decoded == (oracle.samples - 32000) // 32000 + 1


def test_a_word_placed_across_the_boundary_is_committed_once(sp):
    """One window puts a word one frame before the chunk's end (it commits it), the next one frame
    after (in its chunk): committed once. The reverse (placed after the end, then before the start
    of the next chunk): not lost. And a next window that spells the committed word differently, at
    the same place: the time rule alone decides (before the chunk: not committed again)."""
    for first, second, spelled, want in ((24, 25, "ask", "ask"), (25, 24, "ask", "ask"), (24, 24, "asked", "ask"),
                                         (24, 26, "asked", "ask asked")):
        def decode(window):
            w0 = int(window[0]) // FRAME
            f, ids = (first, sp.encode("ask")) if w0 == 0 else (second, sp.encode(spelled))
            return [WindowToken(i, f - w0 + n, f - w0 + n + 1, f - w0 + n, n == 0) for n, i in enumerate(ids)]

        s = BufferedSession(decode, decode=sp.decode, piece=sp.piece, punctuation=set(), frame_samples=FRAME,
                            chunk_s=2.0, left_s=1.0, right_s=2.0)  # chunk 0 ends at frame 25, window 1 starts at 13
        s.feed(np.arange(5 * 16000, dtype=np.float32))
        s.finalize()
        assert s.windows_decoded == 2  # chunk [0, 2 s) at 4 s, then [2 s, 5 s) in the window from 1 s
        assert s.committed_text() == want, (first, second, spelled)


def test_bad_options_are_refused(sp):
    for kw in (dict(chunk_s=0), dict(chunk_s=-1), dict(left_s=-0.5), dict(right_s=-1), dict(chunk_s=float("nan")),
               dict(left_s=float("inf")), dict(chunk_s=True), dict(right_s="2")):
        args = dict(chunk_s=2.0, left_s=2.0, right_s=2.0)
        args.update(kw)
        with pytest.raises(TranscribeError):
            check_windows(**args)
        with pytest.raises(TranscribeError):
            BufferedSession(lambda w: [], decode=sp.decode, piece=sp.piece, punctuation=set(), frame_samples=FRAME,
                            **args)
    with pytest.raises(TranscribeError, match="at least one frame"):
        BufferedSession(lambda w: [], decode=sp.decode, piece=sp.piece, punctuation=set(), frame_samples=FRAME,
                        chunk_s=0.01, left_s=0, right_s=0)
    with pytest.raises(TranscribeError, match="at most 30 s"):
        check_windows(10, 15, 6, max_window_s=30)
    with pytest.raises(TranscribeError):
        BufferedSession(lambda w: [], decode=sp.decode, piece=sp.piece, punctuation=set(), frame_samples=0,
                        chunk_s=1, left_s=0, right_s=0)


# ---------------------------------------------------------------- Parakeet, the real pipeline
@pytest.fixture(scope="module")
def tdt():
    return transcribe.load_model(str(TINY / "tiny-tdt-fit.nemo"))


def _stream(session, audio, rng):
    """Feeds audio in random pieces; returns the take_new_text pieces and whether tentative text
    showed before finalize."""
    new, tentative = [], False
    for a, b in _pieces(len(audio), rng):
        session.feed(audio[a:b])
        assert session.held_seconds <= session.window_s + 1e-9
        new.append(session.take_new_text())
        tentative = tentative or bool(session.tentative_text())
    session.finalize()
    new.append(session.take_new_text())
    return new, tentative


def _facts(tokens, window=True):
    """What a token is: id, emission frame, times; with window=True also its confidence and
    duration, which only the same windows give alike (a window's logits are not the whole clip's:
    confidences a few percent apart, a CTC spike one frame shorter)."""
    return [(t.id, t.frame, round(t.start, 3), round(t.end, 3)) + ((t.duration_frames, t.confidence) if window else ())
            for t in tokens]


def test_parakeet_tdt_streams_the_offline_tokens(tdt, jfk):
    off = tdt.transcribe(jfk)
    runs = []
    for seed in range(3):
        s = buffered_session(tdt, chunk_s=2.0, left_s=2.0, right_s=2.0)
        assert (s.chunk_s, s.left_s, s.right_s) == (2.0, 2.0, 2.0)
        new, tentative = _stream(s, jfk, random.Random(seed))
        assert tentative  # the right context's words showed before they were committed
        assert "".join(new) == s.committed_text() == s.text() == off.text
        assert s.windows_decoded == 5  # chunks [0, 2) ... [6, 8) once their right context came, then [8, 11)
        words = s.drain_words()
        assert [(w.word, w.start, w.end) for w in words] == [(w.word, w.start, w.end) for w in off.words]
        runs.append(_facts(s.tokens()))
    s = buffered_session(tdt, chunk_s=2.0, left_s=2.0, right_s=2.0)
    s.feed(jfk)
    s.finalize()
    runs.append(_facts(s.tokens()))
    assert all(r == runs[0] for r in runs)  # any feed sizes: the same windows, the same tokens
    assert _facts(s.tokens(), False) == _facts(off.tokens, False)


def test_parakeet_ctc_head_streams_the_offline_tokens(jfk):
    asr = transcribe.load_model(str(TINY / "tiny-hybrid-tdt-ctc-fit.nemo"))
    off = asr.transcribe(jfk, head="ctc")
    s = buffered_session(asr, chunk_s=2.0, left_s=2.0, right_s=2.0, head="ctc")
    new, _ = _stream(s, jfk, random.Random(3))
    assert "".join(new) == s.committed_text() == off.text
    assert _facts(s.tokens(), False) == _facts(off.tokens, False)


@pytest.mark.parametrize("name", ["tdt", "rnnt", "ctc"])
def test_parakeet_one_window_is_the_offline_transcript(name, jfk):
    """A chunk longer than the input: one window, the whole clip: the offline tokens, every head."""
    asr = transcribe.load_model(str(TINY / f"tiny-{name}-fit.nemo"))
    off = asr.transcribe(jfk)
    s = buffered_session(asr, chunk_s=12.0, left_s=0, right_s=0)
    s.feed(jfk)
    assert s.committed_text() == "" and s.windows_decoded == 0
    s.finalize()
    assert s.windows_decoded == 1
    assert s.committed_text() == off.text
    assert _facts(s.tokens()) == _facts(off.tokens)


def test_parakeet_defaults_and_bad_options(tdt):
    s = buffered_session(tdt)
    assert (s.chunk_s, s.left_s, s.right_s) == (2.0, 4.0, 2.0)
    assert s.latency.chunk_ms == 2000 and s.latency.lookahead_ms == 2000
    assert buffered_session(tdt, chunk_s=1.1).chunk_s == 1.12  # whole 80 ms frames
    for kw in (dict(chunk_s=0), dict(left_s=-1), dict(right_s=-0.1), dict(head="ctc"), dict(confidence="nope")):
        with pytest.raises(TranscribeError):
            buffered_session(tdt, **kw)


# ---------------------------------------------------------------- Whisper through windows
@pytest.fixture(scope="module")
def whisper(default_whisper_dir):
    return transcribe.load_model(str(default_whisper_dir))


def _norm_words(text):
    return re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()


def test_whisper_streams_the_offline_words(whisper, jfk):
    off = whisper.transcribe(jfk, word_timestamps=True)
    with whisper.stream() as s:  # 4 s chunks, 6 s left, 2 s right: 3 windows
        assert (s.chunk_s, s.left_s, s.right_s) == (4.0, 6.0, 2.0)
        new, tentative = [], False
        for a, b in _pieces(len(jfk), random.Random(0), sizes=(3200, 8000, 16000)):
            s.feed(jfk[a:b])
            assert s.held_seconds <= s.window_s
            new.append(s.take_new_text())
            tentative = tentative or bool(s.tentative_text())
    assert s.finished and tentative
    new.append(s.take_new_text())
    text = "".join(new)
    assert text == s.committed_text()
    assert _norm_words(text) == _norm_words(off.text)  # every word once, none lost at the 4 s and 8 s boundaries
    words = s.drain_words()
    assert [w.word for w in words] == text.split()
    starts = [w.start for w in words]
    assert starts == sorted(starts) and 0 <= starts[0] and words[-1].end <= 11.0
    assert s.windows_decoded == 3


def test_whisper_window_that_stops_early_is_decoded_on(whisper):
    """On this window (a dev clip from 10 s: the end of one speaker, a pause, another speaker)
    tiny.en ends its text after the first sentence with a single timestamp ("no more speech"), so
    the rest is skipped, offline too; the stream decodes the rest of the window after the last
    word once more, and the second speaker's words are not lost."""
    a, sr = sf.read(str(AUDIO / "dev" / "picovoice_diarization_3spk.wav"), dtype="float32")
    window = a[10 * sr:]
    assert "turbulence" not in whisper.transcribe(window).text
    s = whisper.stream()
    text = whisper.tokenizer.decode([t.id for t in s._decode_window(window)])
    assert text.startswith(" in the water") and "turbulence" in text


def test_whisper_options(whisper):
    with pytest.raises(TranscribeError):
        whisper.stream(chunk_s=10, left_s=15, right_s=6)  # 31 s: more than Whisper's window
    for kw in (dict(chunk_s=0), dict(left_s=-1), dict(word_timestamps=False), dict(beam=4), dict(bogus=1),
               dict(prefix="And so")):
        with pytest.raises(TranscribeError):
            whisper.stream(**kw)
    assert whisper.stream(beam_size=2, chunk_s=3).chunk_s == 3.0


def test_whisper_byte_level_tokens_make_whole_characters_and_words(default_whisper_dir):
    """Whisper's byte-level BPE through the session: text equals the tokenizer's decode of every
    token (no broken characters in any piece handed out), and words are whole ("café", "日本語")."""
    from transcribe.whisper.streaming import token_piece
    from transcribe.whisper.tokenizer import WhisperTokenizer

    tok = WhisperTokenizer((default_whisper_dir / "tokenizer.json").read_text(encoding="utf-8"), 51864)
    text = " café naïve 日本語 ok über straße"
    ids = tok.encode(text)
    assert any("\ufffd" in tok.decode([i]) for i in ids)  # some tokens are parts of a character

    def decode(window):  # one token every 50 ms, a word's first token marks it
        w0 = int(window[0]) // 160
        return [WindowToken(i, 5 * k - w0, 5 * k - w0 + 5, 5 * k - w0, tok.decode([i]).startswith(" "))
                for k, i in enumerate(ids) if w0 <= 5 * k < w0 + len(window) // 160]

    s = BufferedSession(decode, decode=tok.decode, piece=lambda i: token_piece(tok, i), punctuation=set(),
                        frame_samples=160, chunk_s=0.3, left_s=0.5, right_s=0.2)
    new = []
    for a, b in _pieces(5 * len(ids) * 160 + 1600, random.Random(1), sizes=(160, 800, 3000)):
        s.feed(np.arange(a, b, dtype=np.float32))
        new.append(s.take_new_text())
    s.finalize()
    new.append(s.take_new_text())
    assert all("\ufffd" not in p for p in new)
    assert "".join(new) == text.strip()
    assert [w.word for w in s.drain_words()] == text.split()

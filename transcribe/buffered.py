"""Buffered streaming for offline models: left, chunk and right context windows.

An offline model (any Parakeet head, Whisper) sees the whole input at once. To stream it, the
audio is cut into chunks of `chunk_s`; once a chunk's right context (`right_s` of audio after it)
has arrived, the window [chunk start - left_s, chunk end + right_s] goes through the model's own
offline pipeline (`decode_window`), and the words that belong to the chunk are committed (NeMo's
buffered/chunked inference, with words merged by time). The first chunk has no left context;
`finalize()` decodes the last window to the end of the audio and commits everything in it.

Only the window is kept (at most left + chunk + right seconds, plus the piece being fed), so a
stream can run for hours with bounded memory and the same cost per chunk.

The boundary rule. The unit committed is a whole word (its first token and the tokens up to the
next word start), so a word is never split between two windows' spellings. A word belongs to the
chunk its first token was emitted in: emission frame in [chunk start, chunk end). Two windows may
place a word at a boundary slightly differently (one frame before it in one window, one after it
in the next), which the time rule alone would commit twice or never. So each window first looks
for the last committed word L: the same text (lower case, letters and digits), emitted within
`merge_tolerance_s` (tol) of where it was committed.
- found: the words after it are new; those emitted from chunk start - tol on are committed (a
  word that the last window placed just past the boundary is not lost, L is not repeated);
- not found, and L may lie before the window (L's frame - tol is before its start: a pause longer
  than the left context): the words emitted from max(chunk start - tol, L + tol) on are new;
- not found although the window covers L's place (the window spells it differently): the time
  rule alone decides (emission frame >= chunk start);
- nothing committed yet: the words from chunk start - tol on.
The words emitted after the chunk (in the right context) are the tentative text: they may change.
`finalize()` decodes a last window to the end of the audio and commits all its new words.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from .errors import TranscribeError
from .streaming import SAMPLE_RATE, CommitToken, StreamingSession
from .text.words import WordSpan


@dataclass
class WindowToken:
    """A token of one decoded window, as `decode_window` returns it. Times are in the session's
    frames (`frame_samples` samples each) from the start of the window.

    start/end: the token's span; frame: where it was emitted (the time the boundary rule reads:
    for a word, its first token's frame); word_start: whether it begins a word (the unit that is
    committed whole); duration: its predicted duration in frames (TDT), when the model has one."""

    id: int
    start: int
    end: int
    frame: int
    word_start: bool = True
    duration: Optional[int] = None
    confidence: Optional[float] = None


def check_windows(chunk_s, left_s, right_s, max_window_s: Optional[float] = None) -> tuple[float, float, float]:
    """Validated (chunk, left, right) in seconds: chunk > 0, contexts >= 0, all finite numbers,
    and the whole window at most `max_window_s` (Whisper's 30 s)."""
    out = []
    for name, v, positive in (("chunk_s", chunk_s, True), ("left_s", left_s, False), ("right_s", right_s, False)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise TranscribeError(f"{name} must be a number of seconds, got {v!r}")
        if positive and v <= 0:
            raise TranscribeError(f"{name} must be positive, got {v}")
        if v < 0:
            raise TranscribeError(f"{name} must not be negative, got {v}")
        out.append(float(v))
    if max_window_s is not None and sum(out) > max_window_s + 1e-9:
        raise TranscribeError(f"left_s + chunk_s + right_s is {sum(out):g} s: this model's window holds at most "
                              f"{max_window_s:g} s")
    return out[0], out[1], out[2]


_WORD_CHARS = re.compile(r"\W+", re.UNICODE)


def _same_word(text: str) -> str:
    """The form two windows' spellings of a word are compared in: lower case, letters and digits."""
    return _WORD_CHARS.sub("", text.lower())


@dataclass(frozen=True)
class BufferWindows:
    """The windows of a `BufferedSession`, checked (`check_windows`): the chunk and the left and right
    contexts in seconds, how far two windows may place the same word apart (merge_tolerance_s), and
    the longest window the model takes (max_window_s; None: no limit)."""

    chunk_s: float
    left_s: float
    right_s: float
    merge_tolerance_s: float = 0.25
    max_window_s: Optional[float] = None

    def __post_init__(self):
        check_windows(self.chunk_s, self.left_s, self.right_s, self.max_window_s)
        tol = self.merge_tolerance_s
        if not (isinstance(tol, (int, float)) and 0 <= tol < math.inf):
            raise TranscribeError(f"merge_tolerance_s must be a number of seconds >= 0, got {tol!r}")


class BufferedSession(StreamingSession):
    """A `StreamingSession` over windows of an offline model (see the module docstring).

    decode_window(samples) -> list[WindowToken]: one window of 16 kHz float32 audio through the
    model. frame_samples: samples per frame of its times (the encoder frame for Parakeet, 10 ms
    for Whisper); the chunk and the contexts are rounded to whole frames, so that every window
    starts on a frame. The other keywords are the fields of `BufferWindows`: chunk_s, left_s,
    right_s, merge_tolerance_s (how far two windows may place the same word apart), max_window_s.
    """

    def __init__(
        self,
        decode_window: Callable[[np.ndarray], Sequence[WindowToken]],
        *,
        decode: Callable[[list[int]], str],
        piece: Callable[[int], str],
        punctuation: set[str],
        frame_samples: int,
        **windows,
    ):
        w = BufferWindows(**windows)
        if isinstance(frame_samples, bool) or not isinstance(frame_samples, int) or frame_samples < 1:
            raise TranscribeError(f"frame_samples must be a positive integer, got {frame_samples!r}")
        fs = frame_samples
        chunk_s, left_s, right_s = float(w.chunk_s), float(w.left_s), float(w.right_s)

        def frames(seconds: float) -> int:
            return int(round(seconds * SAMPLE_RATE / fs))

        self._fs = fs
        self._chunk = frames(chunk_s) * fs  # samples, whole frames
        self._left = frames(left_s) * fs
        self._right = frames(right_s) * fs
        if self._chunk < fs:
            raise TranscribeError(f"chunk_s must be at least one frame ({fs / SAMPLE_RATE:g} s), got {chunk_s}")
        self._tol = frames(w.merge_tolerance_s)  # frames
        self._decode_window = decode_window
        super().__init__(decode=decode, piece=piece, punctuation=punctuation,
                         frame_seconds=lambda f: f * fs / SAMPLE_RATE,
                         chunk_ms=1000.0 * self._chunk / SAMPLE_RATE, lookahead_ms=1000.0 * self._right / SAMPLE_RATE)
        self._restart()

    # ------------------------------------------------------------------ facts
    @property
    def chunk_s(self) -> float:
        return self._chunk / SAMPLE_RATE

    @property
    def left_s(self) -> float:
        return self._left / SAMPLE_RATE

    @property
    def right_s(self) -> float:
        return self._right / SAMPLE_RATE

    @property
    def window_s(self) -> float:
        """The longest window: left + chunk + right."""
        return (self._left + self._chunk + self._right) / SAMPLE_RATE

    @property
    def held_seconds(self) -> float:
        """The audio held now (at most the window once a feed() has returned)."""
        return self._n / SAMPLE_RATE

    @property
    def windows_decoded(self) -> int:
        return self._windows

    # ------------------------------------------------------------------ StreamingSession
    def _restart(self) -> None:
        self._buf = np.zeros(self._left + self._chunk + self._right + self._fs, np.float32)
        self._n = 0  # valid samples in _buf
        self._buf_start = 0  # stream sample of _buf[0]
        self._c0 = 0  # stream sample where the next chunk starts: the audio before it is committed
        self._last_word: Optional[tuple[str, int]] = None  # (compared text, stream frame) of the last committed word
        self._said = False  # whether any word is committed
        self._windows = 0

    def _accept(self, samples: np.ndarray) -> None:
        need = self._n + samples.size
        if need > self._buf.size:
            grown = np.zeros(max(need, 2 * self._buf.size), np.float32)
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown
        self._buf[self._n : need] = samples
        self._n = need
        while self._buf_start + self._n >= self._c0 + self._chunk + self._right:
            self._step(final=False)
        self._trim(max(0, self._c0 - self._left))  # once per feed: a long piece is not moved once per chunk

    def _flush(self) -> None:
        if self._buf_start + self._n > self._c0:
            self._step(final=True)
        self._trim(self._buf_start + self._n)

    # ------------------------------------------------------------------ one window
    def _step(self, final: bool) -> None:
        c0 = self._c0
        end = self._buf_start + self._n
        c1 = end if final else c0 + self._chunk
        w0 = max(0, c0 - self._left)
        w1 = end if final else c1 + self._right
        window = self._buf[w0 - self._buf_start : w1 - self._buf_start]
        tokens = list(self._decode_window(np.ascontiguousarray(window)))
        self._windows += 1
        off = w0 // self._fs
        words = _words(tokens)
        take, rest = self._merge(words, off, c0 // self._fs, None if final else c1 // self._fs)
        commit = [CommitToken(int(t.id), off + t.start, off + t.end, off + t.frame, t.duration, t.confidence)
                  for w in take for t in w]
        if take:
            ids = [int(t.id) for t in take[-1]]
            self._last_word = (_same_word(self._decode(ids)), off + take[-1][0].frame)
            self._said = True
        self._commit(commit, committed_seconds=c1 / SAMPLE_RATE)
        self._set_tentative(self._tentative_of(rest))
        self._c0 = c1

    def _merge(self, words: list[list[WindowToken]], off: int, c0: int, c1: Optional[int]):
        """-> (the words to commit, the words after the chunk), by the boundary rule (module
        docstring). Stream frames: off is the window's first, c0/c1 the chunk's (c1 None: the end)."""
        tol = self._tol
        start = 0  # words before it are not candidates
        if self._last_word is None:
            lower = c0 - tol  # nothing committed yet: no word can come twice
        else:
            text, frame = self._last_word
            best = None
            for i, w in enumerate(words):
                d = abs(off + w[0].frame - frame)
                if d <= tol and (best is None or d < best[0]) and \
                        _same_word(self._decode([int(t.id) for t in w])) == text:
                    best = (d, i)
            if best is not None:  # the last committed word: what follows it is new
                start, lower = best[1] + 1, c0 - tol
            elif frame - tol < off:  # it may lie before this window: only what is clearly after it is new
                lower = max(c0 - tol, frame + tol + 1)
            else:  # this window has it in another spelling, or not at all: time alone decides
                lower = c0
        take, rest = [], []
        for w in words[start:]:
            f = off + w[0].frame
            if c1 is not None and f >= c1:
                rest.append(w)
            elif f >= lower:
                take.append(w)
        return take, rest

    def _tentative_of(self, words: list[list[WindowToken]]) -> str:
        ids = [int(t.id) for w in words for t in w]
        if not ids:
            return ""
        text = self._decode(ids)
        if not self._said:
            return text.lstrip(" ")
        if words[0][0].word_start and not text.startswith(" "):
            text = " " + text
        return text

    def _trim(self, keep_from: int) -> None:
        """Drops the audio before stream sample `keep_from` (no later window reaches it)."""
        d = min(max(0, keep_from - self._buf_start), self._n)
        if d:
            self._buf[: self._n - d] = self._buf[d : self._n]
            self._n -= d
            self._buf_start += d
        window = self._left + self._chunk + self._right + self._fs
        if self._buf.size > 4 * window and self._n <= window:  # a big feed grew it: give the memory back
            small = np.zeros(window, np.float32)
            small[: self._n] = self._buf[: self._n]
            self._buf = small

    def _emit_words(self, words: Sequence[WordSpan], next_start: Optional[int] = None) -> None:
        # Byte-level BPE (Whisper) decodes a word with its leading space: a word is its text alone.
        for w in words:
            w.word = w.word.strip()
        super()._emit_words(words, next_start)


def _words(tokens: Sequence[WindowToken]) -> list[list[WindowToken]]:
    """Tokens -> words: a word starts at a token marked word_start (or at the first token)."""
    out: list[list[WindowToken]] = []
    for t in tokens:
        if t.word_start or not out:
            out.append([t])
        else:
            out[-1].append(t)
    return out

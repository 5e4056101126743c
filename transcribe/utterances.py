"""Live sessions for offline models that give no word times (the audio-LLMs: Granite Speech, Qwen3-ASR):
the stream is cut at pauses into utterances, and each utterance is decoded once, whole, by the model's own
offline pipeline when the pause after it has arrived (or when it reaches `max_piece_s` without one: then it
is cut at its best pause, as long offline inputs are, `long_input.cut_spans`).

Every `check_s` of audio the session looks at what it holds (at most `max_piece_s` plus a check): the pause
detector (`pauses.speech_activity`, the energy detector by default: it needs no model) marks speech; the
last silence of at least `pause_s` that follows speech ends an utterance at its middle. Audio before a cut is
decoded (unless it holds no speech) and released, so a stream can run for hours with bounded memory.
With `partial_s`, the audio of the open utterance is also decoded every `partial_s` seconds for the tentative
text (a UI's grey text; it costs a decode of the open utterance each time: off by default).

Times: the model gives none, so a committed word is placed at the cut that ended its utterance (its start
and end; 10 ms frames from the start of the stream): honest about when it was decided, not where it was
said. The offline transcript of the same audio cuts where `max_piece_s` cuts it, so the stream's text is
the offline text when the stream's pauses and the offline pieces coincide, not in general.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from .long_input import cut_spans
from .pauses import speech_activity
from .streaming import SAMPLE_RATE, CommitToken, StreamingSession

FRAME = SAMPLE_RATE // 100  # samples per 10 ms frame: the session's time unit


class UtteranceSession(StreamingSession):
    """`decode_piece(pcm) -> token ids` is the model's offline decode of one utterance (mono float32 at
    16 kHz); the other arguments are StreamingSession's text functions and the cutting rules above."""

    def __init__(self, decode_piece: Callable[[np.ndarray], Sequence[int]], *, decode: Callable[[list[int]], str],
                 piece: Callable[[int], str], punctuation: set[str], pause_s: float = 0.5,
                 max_piece_s: float = 30.0, check_s: float = 0.5, partial_s: Optional[float] = None,
                 detector: str = "energy"):
        if not 0.05 <= pause_s <= 10.0:
            raise ValueError(f"pause_s must be within 0.05 and 10 s (got {pause_s})")
        if max_piece_s < 3 * pause_s:
            raise ValueError(f"max_piece_s ({max_piece_s}) must be at least three pauses long")
        self._decode_piece = decode_piece
        self._pause = int(pause_s * SAMPLE_RATE)
        self._max = int(max_piece_s * SAMPLE_RATE)
        self._max_s = float(max_piece_s)
        self._check = max(FRAME, int(check_s * SAMPLE_RATE))
        self._partial = None if partial_s is None else max(self._check, int(partial_s * SAMPLE_RATE))
        self._detector = detector
        super().__init__(decode=decode, piece=piece, punctuation=punctuation,
                         frame_seconds=lambda f: f * FRAME / SAMPLE_RATE, chunk_ms=1000.0 * check_s,
                         lookahead_ms=1000.0 * pause_s)
        self._restart()

    # ------------------------------------------------------------------ StreamingSession's hooks
    def _restart(self) -> None:
        self._held: list[np.ndarray] = []
        self._held_n = 0
        self._start = 0            # stream sample where the held audio starts
        self._unchecked = 0        # samples since the last look for a pause
        self._since_partial = 0

    def _accept(self, samples) -> None:
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        self._held.append(x)
        self._held_n += x.size
        self._unchecked += x.size
        self._since_partial += x.size
        if self._unchecked >= self._check:
            self._unchecked = 0
            self._look()
        if self._partial is not None and self._since_partial >= self._partial and self._held_n:
            self._since_partial = 0
            pcm = self._audio()
            self._set_tentative(self._decode([int(t) for t in self._decode_piece(pcm)]).strip() if _has_speech(
                pcm, self._detector) else "")

    def _flush(self) -> None:
        if self._held_n:
            self._emit(self._held_n)

    # ------------------------------------------------------------------ cutting
    def _audio(self) -> np.ndarray:
        if len(self._held) > 1:
            self._held = [np.concatenate(self._held)]
        return self._held[0] if self._held else np.zeros(0, np.float32)

    def _look(self) -> None:
        pcm = self._audio()
        cut = _pause_cut(pcm, self._pause, self._detector)
        if cut is None and pcm.size >= self._max:
            spans = cut_spans(pcm, SAMPLE_RATE, self._max_s, self._detector, grain=FRAME)
            cut = spans[0][1] if len(spans) > 1 else pcm.size
        if cut is not None and cut > 0:
            self._emit(cut)

    def _emit(self, cut: int) -> None:
        """Decode the held audio before `cut` (if it holds speech), commit its tokens at the cut, release it."""
        pcm = self._audio()
        head, rest = pcm[:cut], pcm[cut:]
        end = (self._start + cut) // FRAME
        if _has_speech(head, self._detector):
            ids = [int(t) for t in self._decode_piece(head)]
            self._commit([CommitToken(t, end, end, end) for t in ids], committed_seconds=(self._start + cut) / SAMPLE_RATE)
        else:
            self._committed_seconds = max(self._committed_seconds, (self._start + cut) / SAMPLE_RATE)
        self._set_tentative("")
        self._held = [rest.copy()] if rest.size else []
        self._held_n = rest.size
        self._start += cut


def _speech_mask(pcm: np.ndarray, detector: str) -> tuple[np.ndarray, int]:
    act = speech_activity(pcm, SAMPLE_RATE, detector)
    return np.asarray(act.speech) >= 0.5, act.hop


def _has_speech(pcm: np.ndarray, detector: str) -> bool:
    if pcm.size < FRAME:
        return False
    mask, _ = _speech_mask(pcm, detector)
    return bool(mask.any())


def _pause_cut(pcm: np.ndarray, pause: int, detector: str) -> Optional[int]:
    """The sample at the middle of the last silence of at least `pause` samples that follows speech and
    ends before the held audio does (a silence still running at the end may grow: its cut waits); None when
    there is none."""
    if pcm.size < pause + FRAME:
        return None
    mask, hop = _speech_mask(pcm, detector)
    speech = np.flatnonzero(mask)
    if speech.size == 0:
        return None
    need = max(1, -(-pause // hop))
    # silences between speech frames, and the one from the last speech frame to the end
    gaps = np.diff(speech) - 1
    ends = np.append(speech[1:], len(mask))  # frame where each silence ends (the next speech, or the end)
    starts = speech + 1
    lengths = np.append(gaps, len(mask) - 1 - speech[-1])
    for k in range(len(lengths) - 1, -1, -1):
        if lengths[k] >= need:
            a, b = int(starts[k]), int(ends[k])
            if b == len(mask):  # silence running to the end: cut once it is long enough, in its first pause
                return (a + need // 2) * hop
            return ((a + b) // 2) * hop
    return None

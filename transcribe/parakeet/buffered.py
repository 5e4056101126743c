"""Buffered streaming for any Parakeet model (TDT, RNN-T, CTC heads): windows of the stream go
through the model's own offline pipeline (front end with its per-window normalization, encoder,
greedy decoding), and transcribe/buffered.py merges their words at the chunk boundaries.

Defaults: 2 s chunks with 4 s of left and 2 s of right context (8 s windows). NeMo's buffered
RNN-T/CTC examples use 1.6-2 s chunks in 4-10 s buffers; an 8 s window keeps at least 2 s of audio
on both sides of every committed word (enough for the encoder's attention and for a word that
crosses the chunk's end), and costs about 4x the offline encoder time (each second of audio is
seen by four windows). A word is committed 2-4 s after it is spoken (the rest of its chunk plus
the right context), plus the time the window takes.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..buffered import BufferedSession, WindowToken
from ..errors import TranscribeError
from ..runtime import model_call
from ..streaming import SAMPLE_RATE
from ..text.sentencepiece import WORD_START

CHUNK_S = 2.0
LEFT_S = 4.0
RIGHT_S = 2.0
# How far two windows may place the same word apart and still be taken for one (3 frames of 80 ms).
MERGE_TOLERANCE_S = 0.24


def buffered_session(asr, *, chunk_s: Optional[float] = None, left_s: Optional[float] = None,
                     right_s: Optional[float] = None, head: Optional[str] = None,
                     confidence: str = "entropy") -> BufferedSession:
    """A live session for a ParakeetASR over left/chunk/right windows (module docstring). The
    chunk and contexts are rounded to whole encoder frames (80 ms for 8x subsampling); head as
    in `transcribe` (the default: the model's first head)."""
    if asr.sample_rate != SAMPLE_RATE:
        raise TranscribeError(f"{asr.name} takes {asr.sample_rate} Hz audio: streaming works at {SAMPLE_RATE} Hz")
    head = asr._resolve_head(head)
    asr.check_options(head=head, confidence=confidence)
    stride = int(asr.model.frame_stride)  # samples per encoder frame
    frame_s = asr.model.frame_seconds(1)

    def decode_window(samples: np.ndarray) -> list[WindowToken]:
        local = asr._local_context(len(samples), "auto")
        with model_call(asr.threads):
            t = asr._transcribe_batch([samples], head, confidence, local, False)[0]
        return [WindowToken(tok.id, int(round(tok.start / frame_s)), int(round(tok.end / frame_s)), int(tok.frame),
                            tok.piece.startswith(WORD_START), tok.duration_frames, tok.confidence)
                for tok in t.tokens]

    return BufferedSession(
        decode_window, decode=asr.tokenizer.decode, piece=asr.tokenizer.piece, punctuation=asr.punctuation,
        frame_samples=stride,
        chunk_s=CHUNK_S if chunk_s is None else chunk_s,
        left_s=LEFT_S if left_s is None else left_s,
        right_s=RIGHT_S if right_s is None else right_s,
        merge_tolerance_s=MERGE_TOLERANCE_S,
    )

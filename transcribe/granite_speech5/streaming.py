"""Buffered streaming for Granite Speech 5 CTC: windows of the stream (left + chunk + right context) go through
the recognizer's offline path, and transcribe/buffered.py commits the words whose first token is emitted in the
chunk (the model is an offline encoder: its block attention and per-input log-mel maximum see the window).

Times: the session's frames are the encoder's (80 ms); a token is emitted at the first frame of its CTC run.
A token starts a word where its text alone differs from its piece (the word mark), as in offline words.

Defaults: 5.12 s chunks, 5.12 s of left and 2.56 s of right context (12.8 s windows: multiples of the 1.28 s
attention block of the published model, so a window's blocks fall where the offline input's do); two windows
may place a word a few frames apart: the merge tolerance is 0.24 s (3 frames)."""
from __future__ import annotations

from dataclasses import fields

import numpy as np

from ..buffered import BufferedSession, WindowToken
from ..runtime import model_call
from .frontend import SAMPLES_PER_FRAME
from .options import MAX_WINDOW_S, GraniteSpeech5Options, GraniteSpeech5StreamOptions

CHUNK_S = 5.12
LEFT_S = 5.12
RIGHT_S = 2.56
MERGE_TOLERANCE_S = 0.24


def buffered_session(asr, opts: GraniteSpeech5StreamOptions) -> BufferedSession:
    """A live session for a GraniteSpeech5ASR over left/chunk/right windows (the module's docstring); every
    window decodes with the session's options (beam_size, ...)."""
    window_opts = {f.name: getattr(opts, f.name) for f in fields(GraniteSpeech5Options)}
    window_opts.update(word_timestamps=True, timestamps=True, max_piece_s=MAX_WINDOW_S)
    window = GraniteSpeech5Options(**window_opts)
    tok = asr.tokenizer
    frame = SAMPLES_PER_FRAME * asr.model.cfg.subsampling  # samples per encoder frame
    min_samples = frame

    def decode_window(samples: np.ndarray) -> list[WindowToken]:
        if len(samples) < min_samples:  # a last window under one frame: nothing to decode
            return []
        with model_call(asr.threads):
            t = asr._transcribe([samples], window)[0]
        return [WindowToken(x.id, x.frame, x.frame + x.duration_frames, x.frame, x.piece != x.text, None,
                            x.confidence) for x in t.tokens]

    return BufferedSession(
        decode_window, decode=tok.decode, piece=asr.pieces.__getitem__,
        punctuation={".", ",", "?", "!", ";", ":"},
        frame_samples=frame,
        chunk_s=CHUNK_S if opts.chunk_s is None else opts.chunk_s,
        left_s=LEFT_S if opts.left_s is None else opts.left_s,
        right_s=RIGHT_S if opts.right_s is None else opts.right_s,
        merge_tolerance_s=MERGE_TOLERANCE_S,
        max_window_s=MAX_WINDOW_S,
    )

"""Buffered streaming for Canary: windows of the stream (left + chunk + right context) go through the
recognizer with the model's timestamp tokens on, and transcribe/buffered.py commits the words whose start
falls in the chunk (NeMo's own streaming for Canary is chunked inference of the same kind).

Times: a word starts at the timestamp token before it (NeMo's `<|s|> word <|e|>` pairs, one unit = one
encoder frame, 80 ms): the session's frames are the encoder's. A model without timestamp tokens (the
canary-1b format) has no word times to place a word in a chunk by, so it has no live session. Every text
token the model emits is kept (at the time of the timestamp token before it), where NeMo's offline parsing
keeps only the words it finds between a pair of timestamp tokens: a word the model does not enclose in a
pair (a weak model does that) is in the stream's text and not in the offline text with word_timestamps.

Defaults: 4 s chunks, 6 s of left and 2 s of right context (12 s windows, well inside the 40 s the models
are trained on); two windows may place a word one or two frames apart: the merge tolerance is 0.24 s."""
from __future__ import annotations

from dataclasses import fields

import numpy as np

from ..buffered import BufferedSession, WindowToken
from ..errors import TranscribeError
from ..runtime import model_call
from .options import CanaryOptions, CanaryStreamOptions

CHUNK_S = 4.0
LEFT_S = 6.0
RIGHT_S = 2.0
MAX_WINDOW_S = 40.0
MERGE_TOLERANCE_S = 0.24


def buffered_session(asr, opts: CanaryStreamOptions) -> BufferedSession:
    """A live session for a CanaryASR over left/chunk/right windows (the module's docstring); every window
    decodes with the session's options (language, target_language, pnc, beam_size, ...)."""
    if asr.tokenizer.id_of("<|timestamp|>") is None:
        raise TranscribeError(f"{asr.name} cannot stream: it has no timestamp tokens to place words in time "
                              "(canary-1b format models)")
    window_opts = {f.name: getattr(opts, f.name) for f in fields(CanaryOptions)}
    window_opts.update(word_timestamps=True, timestamps=True, max_piece_s=MAX_WINDOW_S)
    window = CanaryOptions(**window_opts)
    tok = asr.tokenizer
    frame = asr.model.frame_stride  # samples per encoder frame

    def decode_window(samples: np.ndarray) -> list[WindowToken]:
        with model_call(asr.threads):
            t = asr._transcribe([samples], window)[0]
        return window_tokens(tok, t, frame / asr.sample_rate)

    return BufferedSession(
        decode_window, decode=lambda ids: tok.text(ids), piece=tok.piece,
        punctuation={".", ",", "?", "!", ";", ":"},
        frame_samples=frame,
        chunk_s=CHUNK_S if opts.chunk_s is None else opts.chunk_s,
        left_s=LEFT_S if opts.left_s is None else opts.left_s,
        right_s=RIGHT_S if opts.right_s is None else opts.right_s,
        merge_tolerance_s=MERGE_TOLERANCE_S,
        max_window_s=MAX_WINDOW_S,
    )


def window_tokens(tok, t, frame_s: float) -> list[WindowToken]:
    """A window's Transcript (with timestamp tokens) -> its text tokens in encoder frames; the timestamp
    tokens themselves are times, not text, and are left out. A token starts a word where its piece does
    (SentencePiece's word mark)."""
    out = []
    for x in t.tokens:
        if int(x.id) in tok.timestamps or int(x.id) in tok.special.values():
            continue
        start, end = int(round(x.start / frame_s)), int(round(x.end / frame_s))
        out.append(WindowToken(int(x.id), start, max(end, start), start, tok.piece(x.id).startswith("\u2581"),
                               None, x.confidence))
    return out

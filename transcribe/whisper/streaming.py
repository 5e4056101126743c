"""Buffered streaming for Whisper: windows of the stream (left + chunk + right context, at most
30 s, Whisper's own window) go through the recognizer's sequential loop with word timestamps, and
transcribe/buffered.py commits the words whose start falls in the chunk.

Times: a word starts where openai-whisper's alignment puts it (cross-attention + DTW, with its
heuristics), a token at its own aligned time; the session's frames are 10 ms. A word is the unit
committed, so a word that crosses the chunk's end is committed whole by the chunk it starts in.

Defaults: 4 s chunks, 6 s of left and 2 s of right context (12 s windows). Every window costs one
30 s encoder pass whatever its length, so chunks are longer than Parakeet's (fewer windows); the
left context gives the decoder the sentence it is in (Whisper's text, casing and punctuation depend
on it), and 2 s on the right lets the chunk's last word finish. Two windows may place a word up to
0.6 s apart (the alignment heuristics move words after a pause): that is the merge tolerance.

A window whose text ends 2 s or more before the window does (Whisper ended it with a single
timestamp: "no more speech", which also happens after a pause or at a new speaker) is decoded once
more from its last word on, so the chunk's words are not lost. On the 37 dev clips (5.5 min,
../shared/audio/dev) tiny.en's stream with the defaults differs from its offline transcript in
3.2% of the words (case and punctuation aside): 13.4% word errors against the references, 11.7%
offline.
"""
from __future__ import annotations

from dataclasses import fields, replace

import numpy as np

from ..buffered import BufferedSession, WindowToken
from ..errors import TranscribeError
from ..runtime import model_call
from ..streaming import SAMPLE_RATE
from .options import APPEND_PUNCTUATION, WhisperOptions, WhisperStreamOptions

CHUNK_S = 4.0
LEFT_S = 6.0
RIGHT_S = 2.0
MAX_WINDOW_S = 30.0
MERGE_TOLERANCE_S = 0.6
# A window whose words end this long before its end is decoded again after its last word.
CONTINUE_S = 2.0
FRAME_SAMPLES = 160  # 10 ms
# transcribe() options that a window does not take: the session sets them.
_FIXED = {"word_timestamps", "sample_rate", "batch_size", "timestamps", "condition_on_previous_text"}


def refuse_fixed(given: dict) -> None:
    """Raises TranscribeError for stream options given by name that the session sets itself, and
    for a prefix (every window would start with it)."""
    fixed = sorted(set(given) & _FIXED)
    if fixed:
        raise TranscribeError(f"a Whisper stream sets {', '.join(fixed)} itself")
    if given.get("prefix"):
        raise TranscribeError("prefix does not apply to a stream (every window would start with it)")


def buffered_session(asr, opts: WhisperStreamOptions) -> BufferedSession:
    """A live session for a WhisperASR over left/chunk/right windows (module docstring).

    opts: the checked stream options (`WhisperASR.stream_options`): chunk_s, left_s, right_s and
    transcribe's decoding options for every window (language, task, beam_size, temperature,
    initial_prompt, ...). Without a language, a multilingual model detects it in the first window
    that has words and keeps it."""
    window_opts = {f.name: getattr(opts, f.name) for f in fields(WhisperOptions)}
    window_opts.update(word_timestamps=True, condition_on_previous_text=False)
    held = {"opts": WhisperOptions(**window_opts)}  # the language, once a window detects it
    tok = asr.tokenizer

    def transcribe(samples: np.ndarray):
        with model_call(asr.threads):
            t = asr._transcribe([samples], held["opts"])[0]
        if held["opts"].language is None and asr.multilingual and t.words:
            held["opts"] = replace(held["opts"], language=t.language)
        return t

    def decode_window(samples: np.ndarray) -> list[WindowToken]:
        t = transcribe(samples)
        out = window_tokens(tok, t)
        if not t.words:
            return out
        # Whisper may end a window's text early (a single timestamp at the end of its text says "no
        # more speech", so the rest of the window is skipped, also offline): after a pause or a new
        # speaker, the words of the chunk would be lost. The rest of the window after the last word
        # is decoded once more on its own.
        last = int(round(t.words[-1].end * SAMPLE_RATE / FRAME_SAMPLES))
        if len(samples) - last * FRAME_SAMPLES >= CONTINUE_S * SAMPLE_RATE:
            more = window_tokens(tok, transcribe(samples[last * FRAME_SAMPLES :]))
            out += [WindowToken(x.id, x.start + last, x.end + last, x.frame + last, x.word_start, x.duration,
                                x.confidence) for x in more]
        return out

    return BufferedSession(
        decode_window, decode=tok.decode, piece=lambda i: token_piece(tok, i),
        punctuation=set(APPEND_PUNCTUATION) - {'"', "'"},
        frame_samples=FRAME_SAMPLES,
        chunk_s=CHUNK_S if opts.chunk_s is None else opts.chunk_s,
        left_s=LEFT_S if opts.left_s is None else opts.left_s,
        right_s=RIGHT_S if opts.right_s is None else opts.right_s,
        merge_tolerance_s=MERGE_TOLERANCE_S,
        max_window_s=MAX_WINDOW_S,
    )


def token_piece(tok, i: int) -> str:
    """The piece the session is given for a token: the vocabulary entry ("Ġthe") for a token that
    starts a word, its text otherwise. The session's word grouping (text.words) takes a token whose
    piece differs from its text for a word start, which a byte-level entry always is ("Ã©" for
    "é"), so a word's later tokens must be given as their text."""
    text = tok.decode([i])
    return tok.piece(i) if text.startswith(" ") else text


def window_tokens(tok, t) -> list[WindowToken]:
    """A window's Transcript (with word timestamps) -> its tokens, word by word, in 10 ms frames.
    Transcript.tokens lists the tokens of its words in order; each word takes tokens until their
    text is the word's."""
    def fr(seconds: float) -> int:
        return int(round(seconds * SAMPLE_RATE / FRAME_SAMPLES))

    out: list[WindowToken] = []
    tokens = t.tokens
    k = 0
    for w in t.words:
        ids: list[int] = []
        first = True
        while k < len(tokens):
            x = tokens[k]
            k += 1
            ids.append(int(x.id))
            out.append(WindowToken(int(x.id), fr(x.start), fr(x.end), fr(w.start) if first else fr(x.start),
                                   first, None, x.confidence))
            first = False
            if tok.decode(ids).strip() == w.word:
                break
    for x in tokens[k:]:  # (none, unless a word's text and its tokens disagree)
        out.append(WindowToken(int(x.id), fr(x.start), fr(x.end), fr(x.start), tok.decode([x.id]).startswith(" "),
                               None, x.confidence))
    return out

"""The options of a Moonshine Streaming recognizer's `transcribe()` (`MoonshineStreamingOptions`) and `stream()`
(`MoonshineStreamingStreamOptions`), declared once with how the command and the server spell them
(`transcribe.options`); a name another family also declares is spelled as there (batch_size, timestamps,
word_timestamps, beam_size, sample_rate, max_piece_s, detector)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import (MAX_BATCH_SIZE, boolean, number, option, parse_bool, parse_positive_int, positive_int,
                       sample_rate)

# Pieces of a long input (seconds): the adapter's position table bounds a piece (4,096 encoder frames, 82 s, in the
# published models); the recognizer cuts at the smaller of this and the table.
MAX_PIECE_S = (5.0, 80.0)
# The model card's bound on generated tokens: 6.5 per second of audio (more loops on hallucinations).
TOKENS_PER_S = 6.5
MAX_NEW_TOKENS = 1 << 14
MAX_BEAMS = 16
# A live session decodes its text again every this much new audio (ms) and cuts its stream into segments of at
# most this many seconds (each decoded on its own, as an offline piece).
DECODE_EVERY_MS = (20.0, 5000.0)
SEGMENT_S = (2.0, 80.0)


@dataclass(frozen=True)
class MoonshineStreamingOptions:
    """timestamps: one segment over each input (the model has no timestamp tokens); word_timestamps: not
    available (True is an error). Search: greedy (transformers' generate), or transformers' beam search with
    beam_size > 1; at most max_new_tokens tokens (default: the model card's bound, 6.5 a second of audio).
    Long inputs: cut at pauses (detector) into pieces of at most max_piece_s (default 30 s, and never beyond the
    model's position table), decoded one by one and joined with a space."""

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    timestamps: bool = option(True, help="segment times", command=False, form=None)
    word_timestamps: bool = option(False, help="time every word (json output; Parakeet models always give word "
                                   "times)", action="store_true", parse=parse_bool, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAMS}: "
                                      "transformers' beam search)", parse=parse_positive_int, metavar="N")
    max_new_tokens: Optional[int] = option(None, help="Moonshine Streaming: at most N generated tokens (default: "
                                           "6.5 a second of audio, the model card's bound)", parse=int,
                                           command=False, form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    max_piece_s: float = option(30.0, help="cut inputs longer than this at pauses (5-80 s)", parse=float,
                                command=False)
    detector: str = option("auto", help="the pause detector: auto, energy or silero", command=False, form=None)

    def __post_init__(self):
        from ..pauses import DETECTORS

        number("max_piece_s", self.max_piece_s, *MAX_PIECE_S, allow_none=False,
               why="seconds; the adapter's position table holds 82 s in the published models")
        if self.detector not in DETECTORS:
            raise OptionValueError("detector", f"unknown pause detector {self.detector!r} (one of "
                                   f"{', '.join(DETECTORS)})")
        positive_int("batch_size", self.batch_size, most=MAX_BATCH_SIZE)
        positive_int("beam_size", self.beam_size, most=MAX_BEAMS)
        positive_int("max_new_tokens", self.max_new_tokens, most=MAX_NEW_TOKENS)
        boolean("timestamps", self.timestamps)
        boolean("word_timestamps", self.word_timestamps)
        if self.word_timestamps:
            raise OptionValueError("word_timestamps", "Moonshine Streaming models cannot time words (no timestamp "
                                   "tokens, no alignment implemented); a transcript has one segment per input")
        sample_rate(self.sample_rate)


@dataclass(frozen=True)
class MoonshineStreamingStreamOptions:
    """A live session: the encoder runs on each new stretch of audio once its lookahead has arrived, and the
    decoder decodes the segment's text again (greedy, from the start) every decode_every_ms of new encoder
    frames; that text is tentative until the segment ends. A segment ends after segment_s seconds, at the
    quietest 20 ms of its last 2 s; its text, decoded over the whole segment as offline, is then committed."""

    decode_every_ms: float = option(240.0, help="Moonshine Streaming: decode the live text again every MS of new "
                                    "audio (20-5000; default 240)", parse=float, metavar="MS")
    segment_s: float = option(20.0, help="Moonshine Streaming: commit the text and start afresh every S seconds "
                              "at a quiet moment (2-80; default 20)", parse=float, metavar="S")

    def __post_init__(self):
        number("decode_every_ms", self.decode_every_ms, *DECODE_EVERY_MS, allow_none=False, why="milliseconds")
        number("segment_s", self.segment_s, *SEGMENT_S, allow_none=False, why="seconds")

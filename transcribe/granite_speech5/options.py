"""The options of a Granite Speech 5 CTC recognizer's `transcribe()` (`GraniteSpeech5Options`), declared once with
how the command and the server spell them (`transcribe.options`), and of its live sessions over buffered windows
(`GraniteSpeech5StreamOptions`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import (MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, boolean, number, option, parse_positive_int,
                       positive_int, sample_rate)

MAX_PIECE_S = (10.0, 600.0)  # block attention: the cost per second is flat, a piece bounds the memory


@dataclass(frozen=True)
class GraniteSpeech5Options:
    """batch_size: pieces run together. beam_size: CTC beam search with N beams (None: greedy, the reference's
    decoding; the best hypothesis is the transcript). max_piece_s: inputs longer than
    this are cut at pauses into pieces of at most this length (10-600 s). detector: the pause detector ("auto",
    "energy", "silero"; see transcribe.pauses). sample_rate: the rate of array inputs (default 16 kHz); files carry
    their own. word_timestamps (Whisper's option) is accepted: words come with the timestamps here."""

    batch_size: int = option(8, help=f"pieces run together (at most {MAX_BATCH_SIZE})", command=False, form=None)
    timestamps: bool = option(True, help="segment, word and token times", command=False, form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM}: "
                                      f"{WHY_BEAM})", parse=parse_positive_int, metavar="N")
    max_piece_s: float = option(120.0, help="cut inputs longer than this at pauses (10-600 s)", parse=float,
                                command=False)
    detector: str = option("auto", help="the pause detector: auto, energy or silero", command=False, form=None)
    word_timestamps: bool = option(False, help="(words always come with the timestamps)", command=False,
                                   form=None)

    def __post_init__(self):
        from ..pauses import DETECTORS

        positive_int("batch_size", self.batch_size, allow_none=False, most=MAX_BATCH_SIZE)
        positive_int("beam_size", self.beam_size, most=MAX_BEAM, why=WHY_BEAM)
        boolean("timestamps", self.timestamps)
        boolean("word_timestamps", self.word_timestamps)
        sample_rate(self.sample_rate)
        number("max_piece_s", self.max_piece_s, *MAX_PIECE_S, allow_none=False, why="seconds")
        if self.detector not in DETECTORS:
            raise OptionValueError("detector", f"unknown pause detector {self.detector!r} (one of "
                                   f"{', '.join(DETECTORS)})")


MAX_WINDOW_S = 120.0  # a stream's window (chunk, left and right context together)


@dataclass(frozen=True)
class GraniteSpeech5StreamOptions(GraniteSpeech5Options):
    """A live session over windows of the stream (transcribe/granite_speech5/streaming.py): chunk_s (seconds
    decided per window), left_s (context before), right_s (lookahead after), and transcribe()'s decoding options
    for every window (the session times words itself: word_timestamps and timestamps are its own)."""

    chunk_s: Optional[float] = option(None, help=f"seconds decided per window (above 0; with left_s and right_s at "
                                      f"most {MAX_WINDOW_S:g})", parse=float, command=False)
    left_s: Optional[float] = option(None, help="seconds of context before a window (0 or more)", parse=float,
                                     command=False)
    right_s: Optional[float] = option(None, help="seconds of lookahead after a window (0 or more)", parse=float,
                                      command=False)
    # transcribe()'s options that the command's --stream does not pass (it refuses their flags); the library's
    # stream() takes the decoding ones
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM})",
                                      parse=parse_positive_int, command=False)
    word_timestamps: bool = option(False, help="(a stream times every word itself)", command=False, form=None)

    def __post_init__(self):
        super().__post_init__()
        number("chunk_s", self.chunk_s, 0.0, MAX_WINDOW_S, above=True)
        number("left_s", self.left_s, 0.0, MAX_WINDOW_S)
        number("right_s", self.right_s, 0.0, MAX_WINDOW_S)

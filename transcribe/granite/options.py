"""The options of a Granite Speech NAR recognizer's `transcribe()` (`GraniteOptions`), declared once with
how the command and the server spell them (`transcribe.options`). The family has no live session."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import MAX_BATCH_SIZE, boolean, number, option, positive_int, sample_rate

MAX_PIECE_S = (10.0, 200.0)  # the editor holds about 3.5-4 minutes


@dataclass(frozen=True)
class GraniteOptions:
    """batch_size: pieces run together. max_piece_s: inputs longer than this are cut at pauses into pieces
    of at most this length (10-200 s). detector: the pause detector ("auto", "energy", "silero"; see
    transcribe.pauses). sample_rate: the rate of array inputs (default 16 kHz); files carry their own.
    word_timestamps (Whisper's option) is accepted: words come with the timestamps here."""

    batch_size: int = option(8, help=f"pieces run together (at most {MAX_BATCH_SIZE})", command=False, form=None)
    timestamps: bool = option(True, help="segment, word and token times", command=False, form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    max_piece_s: float = option(90.0, help="cut inputs longer than this at pauses (10-200 s)", parse=float,
                                command=False)
    detector: str = option("auto", help="the pause detector: auto, energy or silero", command=False, form=None)
    word_timestamps: bool = option(False, help="(words always come with the timestamps)", command=False,
                                   form=None)

    def __post_init__(self):
        from ..pauses import DETECTORS

        positive_int("batch_size", self.batch_size, allow_none=False, most=MAX_BATCH_SIZE)
        boolean("timestamps", self.timestamps)
        boolean("word_timestamps", self.word_timestamps)
        sample_rate(self.sample_rate)
        number("max_piece_s", self.max_piece_s, *MAX_PIECE_S, allow_none=False,
               why="seconds; the editor holds about 3.5 minutes")
        if self.detector not in DETECTORS:
            raise OptionValueError("detector", f"unknown pause detector {self.detector!r} (one of "
                                   f"{', '.join(DETECTORS)})")

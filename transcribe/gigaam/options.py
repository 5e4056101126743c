"""The options of a GigaAM recognizer's `transcribe()` (`GigaAMOptions`), declared once with how the command
and the server spell them (`transcribe.options`); names other families declare are spelled as there. The
family has no live session."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import (MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, boolean, number, option, parse_positive_int,
                       positive_int, sample_rate)

# gigaam's transcribe() takes at most 25 s (LONGFORM_THRESHOLD; longer audio goes through its VAD
# segmentation); pieces of long inputs are cut at pauses to at most this.
MAX_PIECE_S = (5.0, 25.0)


@dataclass(frozen=True)
class GigaAMOptions:
    """batch_size: pieces run together (the results are each piece's alone). timestamps: segment, word and
    token times (from the encoder's 40 ms frames). beam_size N: beam search with N beams (CTC: the prefix
    beam search; RNN-T: the default transducer beam), nbest (<= beam_size) of them in `Transcript.nbest`;
    default greedy, which is gigaam's own decoding. max_piece_s: inputs longer than this (5-25 s; default 25,
    gigaam's limit for one call) are cut at pauses (detector) and the pieces' transcripts joined.
    sample_rate: the rate of array inputs. word_timestamps is accepted: words come with the timestamps."""

    batch_size: int = option(4, help=f"pieces run together (at most {MAX_BATCH_SIZE})", command=False, form=None)
    timestamps: bool = option(True, help="segment, word and token times", command=False, form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM}: "
                                      f"{WHY_BEAM})", parse=parse_positive_int, metavar="N")
    nbest: Optional[int] = option(None, help="return the N best hypotheses, ranked, in the json output "
                                  "(N <= --beam-size)", parse=parse_positive_int, metavar="N")
    max_piece_s: float = option(25.0, help="cut inputs longer than this at pauses (5-25 s)", parse=float,
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
        positive_int("beam_size", self.beam_size, most=MAX_BEAM, why=WHY_BEAM)
        positive_int("nbest", self.nbest, most=MAX_BEAM, why=WHY_BEAM)
        if (self.nbest or 1) > (self.beam_size or 1):
            size = self.beam_size or 1
            raise OptionValueError("nbest", f"nbest ({self.nbest}) cannot exceed beam_size ({size}): a beam of "
                                   f"{size} keeps {size} hypotheses")
        number("max_piece_s", self.max_piece_s, *MAX_PIECE_S, allow_none=False,
               why="seconds; gigaam transcribes at most 25 s at once")
        if self.detector not in DETECTORS:
            raise OptionValueError("detector", f"unknown pause detector {self.detector!r} (one of "
                                   f"{', '.join(DETECTORS)})")

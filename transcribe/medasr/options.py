"""The options of a MedASR recognizer's `transcribe()` (`MedASROptions`), declared once with how the command and
the server spell them (`transcribe.options`); the names other families also declare are spelled as there
(batch_size, timestamps, confidence, sample_rate, beam_size, nbest, word_timestamps, max_piece_s, detector)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import (MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, boolean, number, option, parse_bool, parse_positive_int,
                       positive_int, sample_rate)

CONFIDENCE = ("entropy", "max_prob")
# Pieces of a long input: transformers' speech-recognition pipeline runs MedASR in chunks of 20 s (its model
# card's chunk_length_s); the rotary positions reach 10,000 frames (400 s), attention grows with the square.
MAX_PIECE_S = (10.0, 120.0)


@dataclass(frozen=True)
class MedASROptions:
    """batch_size: inputs encoded together (None: 4 on a CPU, 16 on a GPU); a result does not depend on its batch.
    timestamps: segment, word and token times from the CTC frames (40 ms each); word_timestamps is accepted (words
    come with the timestamps). confidence: the per-token measure, "entropy" or "max_prob". Search: greedy (the
    argmax of every frame, transformers' `generate`), or beam_size N (the CTC beam search of transcribe.search.
    ctc_beam; the reference has none) keeping nbest of the hypotheses in `Transcript.nbest`. Long inputs: cut at
    pauses (detector) into pieces of at most max_piece_s (default 20 s, the pipeline's chunk), joined by a space."""

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    timestamps: bool = option(True, help="segment, word and token times", command=False, form=None)
    confidence: str = option("entropy", help="token confidence measure (default: entropy)", choices=CONFIDENCE,
                             command=False)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM}: "
                                      f"{WHY_BEAM})", parse=parse_positive_int, metavar="N")
    nbest: Optional[int] = option(None, help="return the N best hypotheses, ranked, in the json output "
                                  "(N <= --beam-size)", parse=parse_positive_int, metavar="N")
    word_timestamps: bool = option(False, help="time every word (json output; Parakeet models always give word "
                                   "times)", action="store_true", parse=parse_bool, form=None)
    max_piece_s: float = option(20.0, help="cut inputs longer than this at pauses (10-120 s)", parse=float,
                                command=False)
    detector: str = option("auto", help="the pause detector: auto, energy or silero", command=False, form=None)

    def __post_init__(self):
        from ..pauses import DETECTORS

        positive_int("batch_size", self.batch_size, most=MAX_BATCH_SIZE)
        boolean("timestamps", self.timestamps)
        boolean("word_timestamps", self.word_timestamps)
        if self.confidence not in CONFIDENCE:
            raise OptionValueError("confidence", f"confidence must be one of {', '.join(CONFIDENCE)}, got "
                                   f"{self.confidence!r}")
        sample_rate(self.sample_rate)
        positive_int("beam_size", self.beam_size, most=MAX_BEAM, why=WHY_BEAM)
        positive_int("nbest", self.nbest, most=MAX_BEAM, why=WHY_BEAM)
        if (self.nbest or 1) > (self.beam_size or 1):
            size = self.beam_size or 1
            raise OptionValueError("nbest", f"nbest ({self.nbest}) cannot exceed beam_size ({size}): a beam of "
                                   f"{size} keeps {size} hypotheses")
        number("max_piece_s", self.max_piece_s, *MAX_PIECE_S, allow_none=False,
               why="seconds; MedASR's pipeline decodes chunks of 20 s")
        if self.detector not in DETECTORS:
            raise OptionValueError("detector", f"unknown pause detector {self.detector!r} (one of "
                                   f"{', '.join(DETECTORS)})")

"""The options of a Moonshine recognizer's `transcribe()` (`MoonshineOptions`), declared once with how the command
and the server spell them (`transcribe.options`); a name another family also declares is spelled as there
(batch_size, timestamps, word_timestamps, beam_size, nbest, length_penalty, max_new_tokens, sample_rate,
max_piece_s, detector)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import (MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, UtteranceStreamFields, boolean, number, option, parse_bool,
                       parse_positive_int, positive_int, sample_rate)

# Pieces of a long input: the published models are trained on clips shorter than about 30 s, and the model card's
# output bound (6.5 tokens a second) reaches the decoder's 194 positions at 30 s.
MAX_PIECE_S = (5.0, 60.0)
MAX_NEW_TOKENS = 1 << 16
MAX_LENGTH_PENALTY = 2.0


@dataclass(frozen=True)
class MoonshineOptions:
    """timestamps: one segment over each input (the model has no timestamp tokens); word_timestamps: not available
    (True is an error). Search: greedy, or transformers' beam search with beam_size N (nbest <= N of its
    hypotheses come back in `Transcript.nbest`; length_penalty its exponent, default 1.0). The output bound is the
    model card's: `generate(max_length=int(samples * 6.5 / 16000))`, i.e. that many tokens minus the decoder's start
    token, per input (transformers' own `generate` has no rule of its own; the card's keeps the model from looping
    past the speech); max_new_tokens replaces it. Long inputs: cut at pauses (detector) into pieces of at most
    max_piece_s (default 30 s), decoded in batches and joined with a space."""

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    timestamps: bool = option(True, help="segment times", command=False, form=None)
    word_timestamps: bool = option(False, help="time every word (json output; Parakeet models always give word "
                                   "times)", action="store_true", parse=parse_bool, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM}: "
                                      f"{WHY_BEAM})", parse=parse_positive_int, metavar="N")
    nbest: Optional[int] = option(None, help="return the N best hypotheses, ranked, in the json output "
                                  "(N <= --beam-size)", parse=parse_positive_int, metavar="N")
    length_penalty: Optional[float] = option(None, help="beam length penalty (default: none, length-normalized; 0 "
                                             f"to 2; Moonshine: transformers' exponent, 0 to {MAX_LENGTH_PENALTY:g})",
                                             parse=float, command=False)
    max_new_tokens: Optional[int] = option(None, help="Moonshine: at most N generated tokens (default: the model "
                                           "card's 6.5 tokens a second of audio)", parse=int, command=False,
                                           form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    max_piece_s: float = option(30.0, help="cut inputs longer than this at pauses (5-60 s)", parse=float,
                                command=False)
    detector: str = option("auto", help="the pause detector: auto, energy or silero", command=False, form=None)

    def __post_init__(self):
        from ..pauses import DETECTORS

        number("max_piece_s", self.max_piece_s, *MAX_PIECE_S, allow_none=False,
               why="seconds; Moonshine models are trained on clips of up to about 30 s")
        if self.detector not in DETECTORS:
            raise OptionValueError("detector", f"unknown pause detector {self.detector!r} (one of "
                                   f"{', '.join(DETECTORS)})")
        positive_int("batch_size", self.batch_size, most=MAX_BATCH_SIZE)
        positive_int("max_new_tokens", self.max_new_tokens, most=MAX_NEW_TOKENS)
        positive_int("beam_size", self.beam_size, most=MAX_BEAM, why=WHY_BEAM)
        positive_int("nbest", self.nbest, most=MAX_BEAM, why=WHY_BEAM)
        number("length_penalty", self.length_penalty, 0.0, MAX_LENGTH_PENALTY)
        boolean("timestamps", self.timestamps)
        boolean("word_timestamps", self.word_timestamps)
        if self.word_timestamps:
            raise OptionValueError("word_timestamps", "Moonshine models cannot time words (no timestamp tokens, "
                                   "no alignment implemented); a transcript has one segment per input")
        if (self.nbest or 1) > (self.beam_size or 1):
            size = self.beam_size or 1
            raise OptionValueError("nbest", f"nbest ({self.nbest}) cannot exceed beam_size ({size}): a beam of "
                                   f"{size} keeps {size} hypotheses")
        sample_rate(self.sample_rate)


@dataclass(frozen=True)
class MoonshineStreamOptions(UtteranceStreamFields, MoonshineOptions):
    """A live session cut at pauses (transcribe/utterances.py, `options.UtteranceStreamFields`): pause_s, partial_s,
    and transcribe's decoding options for every utterance (each decoded whole, as transcribe() decodes a clip)."""

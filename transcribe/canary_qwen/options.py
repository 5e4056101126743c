"""The options of a Canary-Qwen recognizer's `transcribe()` (`CanaryQwenOptions`), declared once with how the command
and the server spell them (`transcribe.options`); a name another family also declares is spelled as there."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import (MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, UtteranceStreamFields, boolean, number, option,
                       parse_bool, parse_positive_int, positive_int, sample_rate)

# transformers' length_penalty is an exponent of the length: 0 to 2 are the usual values (1 by default).
MAX_LENGTH_PENALTY = 10.0
# At most this many generated tokens (the LM's 40,960 positions hold the prompt too; the recognizer bounds it by
# what they leave).
MAX_NEW_TOKENS = 1 << 15
# The model card's example asks for 128 new tokens; a piece of up to 40 s of fast speech needs more, so the default
# is twice that (generation stops at <|im_end|> long before, for any normal piece).
DEFAULT_MAX_NEW_TOKENS = 256
# Pieces of a long input: canary-qwen-2.5b was trained on up to 40 s of audio (its model card); longer inputs are
# cut at pauses into pieces of at most this much.
MAX_PIECE_S = (5.0, 600.0)
DEFAULT_PIECE_S = 40.0


@dataclass(frozen=True)
class CanaryQwenOptions:
    """language: "en" or none (the model is English only and its prompt names no language); timestamps: one segment
    over each input (the model writes no times); word_timestamps: not available. Search: greedy (as `SALM.generate`
    runs transformers' generate, stopping at the tokenizer's eos, <|im_end|>), or transformers' beam search with
    beam_size N (nbest <= N hypotheses in `Transcript.nbest`, scored as transformers' sequences_scores),
    length_penalty its exponent (default 1.0); max_new_tokens caps the generated tokens (the stop token counted;
    default 256). Long inputs: cut at pauses (detector) into pieces of at most max_piece_s (default 40 s, the
    longest audio the model was trained on), decoded in batches and joined with a space."""

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    timestamps: bool = option(True, help="segment times", command=False, form=None)
    language: Optional[str] = option(None, help="language code of multilingual models (e.g. en, de)",
                                     metavar="LANG")
    word_timestamps: bool = option(False, help="time every word (json output; Parakeet models always give word "
                                   "times)", action="store_true", parse=parse_bool, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM}: "
                                      f"{WHY_BEAM})", parse=parse_positive_int, metavar="N")
    nbest: Optional[int] = option(None, help="return the N best hypotheses, ranked, in the json output "
                                  "(N <= --beam-size)", parse=parse_positive_int, metavar="N")
    length_penalty: Optional[float] = option(None, help="beam length penalty (default: none, length-normalized; 0 "
                                             f"to 2; Canary-Qwen: transformers' exponent, 0 to "
                                             f"{MAX_LENGTH_PENALTY:g}, default 1)", parse=float, command=False)
    max_new_tokens: Optional[int] = option(None, help=f"Canary-Qwen: at most N tokens generated per input (1 to "
                                           f"{MAX_NEW_TOKENS}; default {DEFAULT_MAX_NEW_TOKENS})",
                                           parse=parse_positive_int, command=False, form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    max_piece_s: float = option(DEFAULT_PIECE_S, help=f"cut inputs longer than this at pauses ({MAX_PIECE_S[0]:g}-"
                                f"{MAX_PIECE_S[1]:g} s)", parse=float, command=False)
    detector: str = option("auto", help="the pause detector: auto, energy or silero", command=False, form=None)

    def __post_init__(self):
        from ..pauses import DETECTORS

        number("max_piece_s", self.max_piece_s, *MAX_PIECE_S, allow_none=False,
               why="seconds; the model was trained on up to 40 s")
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
            raise OptionValueError("word_timestamps", "Canary-Qwen models cannot time words (the model writes no "
                                   "times); a transcript has one segment per input")
        if self.language is not None and self.language not in ("en", "english", "English"):
            raise OptionValueError("language", f"Canary-Qwen models transcribe English only (en), not "
                                   f"{str(self.language)[:40]!r}")
        sample_rate(self.sample_rate)
        if (self.nbest or 1) > (self.beam_size or 1):
            size = self.beam_size or 1
            raise OptionValueError("nbest", f"nbest ({self.nbest}) cannot exceed beam_size ({size}): a beam of "
                                   f"{size} keeps {size} hypotheses")


@dataclass(frozen=True)
class CanaryQwenStreamOptions(UtteranceStreamFields, CanaryQwenOptions):
    """A live session cut at pauses (transcribe/utterances.py, `options.UtteranceStreamFields`): pause_s,
    partial_s, and transcribe's decoding options for every utterance."""

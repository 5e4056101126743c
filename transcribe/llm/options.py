"""The options every audio-LLM family's `transcribe()` shares (`LLMOptions`, a family's options class derives from
it) and their checks (`check_search`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from ..errors import OptionValueError
from ..options import (MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, boolean, number, option, parse_bool, parse_positive_int,
                       positive_int, sample_rate)


def check_search(opts, *, piece_s: tuple[float, float], piece_why: str, max_new_tokens: int,
                 max_length_penalty: float, no_words: str) -> None:
    """batch_size, max_piece_s (within `piece_s`; `piece_why` says why), detector, max_new_tokens (at most
    `max_new_tokens`), beam_size, nbest (at most beam_size), length_penalty, timestamps, word_timestamps (refused
    when true: `no_words` says why) and sample_rate of `opts`."""
    from ..pauses import DETECTORS

    number("max_piece_s", opts.max_piece_s, *piece_s, allow_none=False, why=piece_why)
    if opts.detector not in DETECTORS:
        raise OptionValueError("detector", f"unknown pause detector {opts.detector!r} (one of {', '.join(DETECTORS)})")
    positive_int("batch_size", opts.batch_size, most=MAX_BATCH_SIZE)
    positive_int("max_new_tokens", opts.max_new_tokens, most=max_new_tokens)
    positive_int("beam_size", opts.beam_size, most=MAX_BEAM, why=WHY_BEAM)
    positive_int("nbest", opts.nbest, most=MAX_BEAM, why=WHY_BEAM)
    number("length_penalty", opts.length_penalty, 0.0, max_length_penalty)
    boolean("timestamps", opts.timestamps)
    boolean("word_timestamps", opts.word_timestamps)
    if opts.word_timestamps:
        raise OptionValueError("word_timestamps", no_words)
    sample_rate(opts.sample_rate)
    if (opts.nbest or 1) > (opts.beam_size or 1):
        size = opts.beam_size or 1
        raise OptionValueError("nbest", f"nbest ({opts.nbest}) cannot exceed beam_size ({size}): a beam of {size} "
                               f"keeps {size} hypotheses")


@dataclass(frozen=True)
class LLMOptions:
    """The options every audio-LLM family's `transcribe()` takes, declared once (a family's options class derives
    from this, declares its own fields and its max_piece_s (its default and range differ), sets the class
    constants below, and calls `super().__post_init__()` before its own checks)."""

    PIECE_S: ClassVar[tuple[float, float]] = (10.0, 1200.0)   # max_piece_s's range
    PIECE_WHY: ClassVar[str] = "seconds; one piece's text must fit max_new_tokens"
    MAX_NEW_TOKENS: ClassVar[int] = 1 << 16
    MAX_LENGTH_PENALTY: ClassVar[float] = 10.0  # transformers' exponent: 0 to 2 are the usual values
    NO_WORDS: ClassVar[str] = "this model cannot time words (it writes no times); a transcript has one segment " \
                              "per input"

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    timestamps: bool = option(True, help="segment times", command=False, form=None)
    word_timestamps: bool = option(False, help="time every word (json output; Parakeet models always give word "
                                   "times)", action="store_true", parse=parse_bool, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM}: "
                                      f"{WHY_BEAM})", parse=parse_positive_int, metavar="N")
    nbest: Optional[int] = option(None, help="return the N best hypotheses, ranked, in the json output "
                                  "(N <= --beam-size)", parse=parse_positive_int, metavar="N")
    length_penalty: Optional[float] = option(None, help="beam length penalty (default: none, length-normalized; 0 "
                                             "to 2; audio-LLMs: transformers' exponent, 0 to 10, default 1)",
                                             parse=float, command=False)
    max_new_tokens: Optional[int] = option(None, help="audio-LLMs: at most N tokens generated per input (default: "
                                           "the model's)", parse=parse_positive_int, command=False, form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    detector: str = option("auto", help="the pause detector: auto, energy or silero", command=False, form=None)

    def __post_init__(self):
        cls = type(self)
        check_search(self, piece_s=cls.PIECE_S, piece_why=cls.PIECE_WHY, max_new_tokens=cls.MAX_NEW_TOKENS,
                     max_length_penalty=cls.MAX_LENGTH_PENALTY, no_words=cls.NO_WORDS)

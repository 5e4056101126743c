"""The options of a Kyutai STT recognizer's `transcribe()` (`KyutaiOptions`) and `stream()` (`KyutaiStreamOptions`),
declared once with how the command and the server spell them (`transcribe.options`); names other families also
declare are spelled as there (batch_size, timestamps, word_timestamps, sample_rate)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..options import (MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, boolean, option, parse_bool, parse_positive_int,
                       positive_int, sample_rate)


@dataclass(frozen=True)
class KyutaiOptions:
    """timestamps: one segment over each input; word_timestamps: each word at the frame the model wrote its first
    token, less the delay (the model's own alignment of text to audio, 80 ms steps). Search: greedy (transformers'
    generate: one token per 80 ms frame, in lockstep with the audio), or beam_size > 1: transformers' beam search
    (`generate(num_beams=N)`: the same positions, beams ranked by their sum of log-probabilities; it re-ranks
    where pads and words fall, and holds the whole input's codes). Inputs of any length are decoded whole: the
    codec's transformer and the LM attend within sliding windows, so memory and cost per second stay bounded.
    batch_size: accepted, the inputs are decoded one after another."""

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    timestamps: bool = option(True, help="segment times", command=False, form=None)
    word_timestamps: bool = option(False, help="time every word (json output; Parakeet models always give word "
                                   "times)", action="store_true", parse=parse_bool, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM}: "
                                      f"{WHY_BEAM})", parse=parse_positive_int, metavar="N")
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)

    def __post_init__(self):
        positive_int("batch_size", self.batch_size, most=MAX_BATCH_SIZE)
        positive_int("beam_size", self.beam_size, most=MAX_BEAM, why=WHY_BEAM)
        boolean("timestamps", self.timestamps)
        boolean("word_timestamps", self.word_timestamps)
        sample_rate(self.sample_rate)


@dataclass(frozen=True)
class KyutaiStreamOptions:
    """A live session in lockstep with the audio: one token per 80 ms frame once the frame's audio has come; the
    same tokens as transcribe() on the whole input. No options."""

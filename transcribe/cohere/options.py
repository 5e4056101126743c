"""The options of a Cohere Transcribe recognizer's `transcribe()` (`CohereOptions`), declared once with how
the command and the server spell them (`transcribe.options`); a name another family also declares is
spelled as there (language, pnc, batch_size, timestamps, word_timestamps, sample_rate, max_piece_s,
detector). Checks that need the loaded model (a language in its vocabulary) are the recognizer's."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import MAX_BATCH_SIZE, boolean, number, option, parse_bool, positive_int, sample_rate

# Pieces of a long input: transformers' feature extractor decodes inputs of up to 30-35 s whole and cuts
# longer ones into chunks of at most 35 s (the published model's `max_audio_clip_s`); the decoder's 1,024
# positions hold the prompt and the text of far more than that.
MAX_PIECE_S = (10.0, 120.0)
# At most this many generated tokens (the decoder's position table is the real bound: 1,024 in the
# published model, prompt included).
MAX_NEW_TOKENS = 1 << 16


@dataclass(frozen=True)
class CohereOptions:
    """language: the spoken language (one of the model's: ar de el en es fr it ja ko nl pl pt vi zh; default
    en), transcribed in that language; pnc: punctuation and capitals (default on); timestamps: one segment
    over each input (the model has no timestamp tokens); word_timestamps: not available (True is an error).
    Search: greedy (transformers' generate with num_beams=1), stopping at EOS or after max_new_tokens tokens
    (default: as many as the decoder's position table leaves after the prompt). Long inputs: cut at pauses
    (detector) into pieces of at most max_piece_s (default 35 s, the published model's clip length),
    decoded in batches and joined (with a space; without one for ja and zh, as transformers joins its chunks)."""

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    timestamps: bool = option(True, help="segment times", command=False, form=None)
    language: Optional[str] = option(None, help="language code of multilingual models (e.g. en, de)",
                                     metavar="LANG")
    pnc: Optional[bool] = option(None, help="punctuation and capitals (default: the model's, on)",
                                 action=argparse.BooleanOptionalAction, parse=parse_bool)
    word_timestamps: bool = option(False, help="time every word (json output; Parakeet models always give word "
                                   "times)", action="store_true", parse=parse_bool, form=None)
    max_new_tokens: Optional[int] = option(None, help="Cohere: at most N generated tokens (default: up to the "
                                           "decoder's position table)", parse=int, command=False, form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    max_piece_s: float = option(35.0, help="cut inputs longer than this at pauses (10-120 s)", parse=float,
                                command=False)
    detector: str = option("auto", help="the pause detector: auto, energy or silero", command=False, form=None)

    def __post_init__(self):
        from ..pauses import DETECTORS

        number("max_piece_s", self.max_piece_s, *MAX_PIECE_S, allow_none=False,
               why="seconds; Cohere Transcribe decodes clips of up to 35 s")
        if self.detector not in DETECTORS:
            raise OptionValueError("detector", f"unknown pause detector {self.detector!r} (one of "
                                   f"{', '.join(DETECTORS)})")
        positive_int("batch_size", self.batch_size, most=MAX_BATCH_SIZE)
        positive_int("max_new_tokens", self.max_new_tokens, most=MAX_NEW_TOKENS)
        boolean("timestamps", self.timestamps)
        boolean("word_timestamps", self.word_timestamps)
        if self.word_timestamps:
            raise OptionValueError("word_timestamps", "Cohere Transcribe models cannot time words here (their "
                                   "prompt asks for no timestamps, as transformers' does, and no alignment is "
                                   "implemented); a transcript has one segment per input")
        if self.pnc is not None:
            boolean("pnc", self.pnc)
        if self.language is not None and (not isinstance(self.language, str) or not 0 < len(self.language) <= 16):
            raise OptionValueError("language", f"language must be a language code such as en or de, got "
                                   f"{str(self.language)[:40]!r}")
        sample_rate(self.sample_rate)

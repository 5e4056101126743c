"""The options of a SenseVoice recognizer's `transcribe()` (`SenseVoiceOptions`), declared once with how the
command and the server spell them (`transcribe.options`); a name another family also declares is spelled as
there (language, timestamps, word_timestamps, sample_rate, max_piece_s, detector). The family has no live
session."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import boolean, number, option, parse_bool, sample_rate

# The language prompts of SenseVoiceSmall (funasr's lid_dict): rows of the prompt embedding.
LANGUAGE_ROWS = {"auto": 0, "zh": 3, "en": 4, "yue": 7, "ja": 11, "ko": 12, "nospeech": 13}
TEXT_NORM_ROWS = {True: 14, False: 15}  # "withitn", "woitn"
EVENT_EMOTION_ROWS = (1, 2)
# funasr's model card: SenseVoiceSmall decodes up to 30 s per call; longer inputs are cut at pauses.
MAX_PIECE_S = (5.0, 60.0)


@dataclass(frozen=True)
class SenseVoiceOptions:
    """language: the language prompt ("auto" (default): the model says which; zh, en, yue, ja, ko, nospeech), as
    funasr's `language=`; itn: inverse text normalization, punctuation and numbers as digits (funasr's
    `use_itn`, default off; the name Canary's option has); timestamps: segment, word and token times from the CTC frames (60 ms each);
    word_timestamps is accepted (words come with the timestamps). Search: CTC greedy (funasr's). The model's
    language, emotion and event tags go to `Transcript.language` and `Transcript.tags`, not into the text.
    Long inputs: cut at pauses (detector) into pieces of at most max_piece_s (default 30 s, the published
    model's clip length), decoded one at a time and joined."""

    language: Optional[str] = option(None, help="language code of multilingual models (e.g. en, de)",
                                     metavar="LANG")
    itn: bool = option(False, help="inverse text normalization: punctuation, capitals, digits (default off)",
                       action=argparse.BooleanOptionalAction, parse=parse_bool)
    timestamps: bool = option(True, help="segment, word and token times", command=False, form=None)
    word_timestamps: bool = option(False, help="(words always come with the timestamps)", command=False,
                                   form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    max_piece_s: float = option(30.0, help="cut inputs longer than this at pauses (5-60 s)", parse=float,
                                command=False)
    detector: str = option("auto", help="the pause detector: auto, energy or silero", command=False, form=None)

    def __post_init__(self):
        from ..pauses import DETECTORS

        if self.language is not None and self.language not in LANGUAGE_ROWS:
            raise OptionValueError("language", f"SenseVoice's language prompts are {', '.join(LANGUAGE_ROWS)}; "
                                   f"got {str(self.language)[:40]!r}")
        boolean("itn", self.itn)
        boolean("timestamps", self.timestamps)
        boolean("word_timestamps", self.word_timestamps)
        sample_rate(self.sample_rate)
        number("max_piece_s", self.max_piece_s, *MAX_PIECE_S, allow_none=False,
               why="seconds; SenseVoiceSmall decodes clips of up to 30 s")
        if self.detector not in DETECTORS:
            raise OptionValueError("detector", f"unknown pause detector {self.detector!r} (one of "
                                   f"{', '.join(DETECTORS)})")

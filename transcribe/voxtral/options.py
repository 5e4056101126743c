"""The options of a Voxtral recognizer's `transcribe()` (`VoxtralOptions`), declared once with how the command and
the server spell them (`transcribe.options`); a name another family also declares is spelled as there."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import (MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, UtteranceStreamFields, boolean, number, option,
                       parse_bool, parse_positive_int, positive_int, sample_rate)
from .prompt import TASKS, instruction, language_code

MAX_LENGTH_PENALTY = 10.0
MAX_NEW_TOKENS = 1 << 16
# Pieces of a long input: the model reads any number of 30 s chunks (the card says 30 minutes), but one piece's
# text must fit max_new_tokens (500 by default: about two and a half minutes of fast speech).
MAX_PIECE_S = (30.0, 1800.0)
DEFAULT_PIECE_S = 120.0


@dataclass(frozen=True)
class VoxtralOptions:
    """language: the spoken language's ISO 639-1 code (or the English name of one of the card's eight), written
    into the prompt as mistral-common's transcription request does ("lang:en"); default none, the model detects
    it (`Transcript.language` is then None: the model does not say). task "translate": speech translation into
    target_language (English by default; one of en fr de es it pt nl hi) through the chat prompt "Translate this
    to <Language>." (a target_language other than language translates too); language is then not used. timestamps: one segment over each input (the model writes no
    times); word_timestamps: not available. Search: greedy, or transformers' beam search with beam_size N (nbest
    <= N hypotheses in `Transcript.nbest`, scored as transformers' sequences_scores), length_penalty its
    exponent; max_new_tokens caps the generated tokens (default: the generation config's, else 500). Long inputs:
    cut at pauses (detector) into pieces of at most max_piece_s (default 120 s), decoded and joined."""

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    timestamps: bool = option(True, help="segment times", command=False, form=None)
    language: Optional[str] = option(None, help="language code of multilingual models (e.g. en, de)",
                                     metavar="LANG")
    target_language: Optional[str] = option(None, help="Canary: the output's language (another than --language "
                                            "translates; default: --language)", metavar="LANG")
    task: Optional[str] = option(None, help="transcribe (default) or translate (Whisper: into English; Canary: "
                                 "into --target-language, English by default)", choices=TASKS, form=None)
    word_timestamps: bool = option(False, help="time every word (json output; Parakeet models always give word "
                                   "times)", action="store_true", parse=parse_bool, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM}: "
                                      f"{WHY_BEAM})", parse=parse_positive_int, metavar="N")
    nbest: Optional[int] = option(None, help="return the N best hypotheses, ranked, in the json output "
                                  "(N <= --beam-size)", parse=parse_positive_int, metavar="N")
    length_penalty: Optional[float] = option(None, help="beam length penalty (default: none, length-normalized; 0 "
                                             f"to 2; Qwen3-ASR: transformers' exponent, 0 to {MAX_LENGTH_PENALTY:g}, "
                                             "default 1)", parse=float, command=False)
    max_new_tokens: Optional[int] = option(None, help="Qwen3-ASR: at most N tokens generated per input (1 to "
                                           "65536; default: the model's, 512)", parse=parse_positive_int,
                                           command=False, form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    max_piece_s: float = option(DEFAULT_PIECE_S, help=f"cut inputs longer than this at pauses ({MAX_PIECE_S[0]:g}-"
                                f"{MAX_PIECE_S[1]:g} s)", parse=float, command=False)
    detector: str = option("auto", help="the pause detector: auto, energy or silero", command=False, form=None)

    def __post_init__(self):
        from ..pauses import DETECTORS

        number("max_piece_s", self.max_piece_s, *MAX_PIECE_S, allow_none=False,
               why="seconds; one piece's text must fit max_new_tokens")
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
            raise OptionValueError("word_timestamps", "Voxtral models cannot time words (the model writes no "
                                   "times); a transcript has one segment per input")
        if self.task is not None and self.task not in TASKS:
            raise OptionValueError("task", f"task must be transcribe or translate, got {self.task!r}")
        for name in ("language", "target_language"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 32):
                raise OptionValueError(name, f"{name} must be a language code such as en or de, got "
                                       f"{str(value)[:40]!r}")
        language_code(self.language)
        target = self.target_code
        if target is not None:
            instruction(target)
        sample_rate(self.sample_rate)
        if (self.nbest or 1) > (self.beam_size or 1):
            size = self.beam_size or 1
            raise OptionValueError("nbest", f"nbest ({self.nbest}) cannot exceed beam_size ({size}): a beam of "
                                   f"{size} keeps {size} hypotheses")

    @property
    def language_code(self) -> Optional[str]:
        return language_code(self.language)

    @property
    def target_code(self) -> Optional[str]:
        """The translation's target language code, or None when transcribing: task "translate" translates into
        target_language (English by default); without it, a target_language other than language does (as
        Canary's options read)."""
        target = language_code(self.target_language, "target_language")
        if self.task == "translate":
            return target or "en"
        if self.task is None and target is not None and target != self.language_code:
            return target
        return None


@dataclass(frozen=True)
class VoxtralStreamOptions(UtteranceStreamFields, VoxtralOptions):
    """A live session cut at pauses (transcribe/utterances.py): pause_s, partial_s, and transcribe's decoding
    options for every utterance."""

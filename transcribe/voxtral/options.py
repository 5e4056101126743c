"""The options of a Voxtral recognizer's `transcribe()` (`VoxtralOptions`), declared once with how the command and
the server spell them (`transcribe.options`); a name another family also declares is spelled as there."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..llm.options import LLMOptions
from ..options import UtteranceStreamFields, option
from .prompt import TASKS, instruction, language_code

MAX_LENGTH_PENALTY = 10.0
MAX_NEW_TOKENS = 1 << 16
# Pieces of a long input: the model reads any number of 30 s chunks (the card says 30 minutes), but one piece's
# text must fit max_new_tokens (500 by default: about two and a half minutes of fast speech).
MAX_PIECE_S = (30.0, 1800.0)
DEFAULT_PIECE_S = 120.0


@dataclass(frozen=True)
class VoxtralOptions(LLMOptions):
    """language: the spoken language's ISO 639-1 code (or the English name of one of the card's eight), written
    into the prompt as mistral-common's transcription request does ("lang:en"); default none, the model detects
    it (`Transcript.language` is then None: the model does not say). task "translate": speech translation into
    target_language (English by default; one of en fr de es it pt nl hi) through the chat prompt "Translate this
    to <Language>." (a target_language other than language translates too); language is then not used.
    timestamps: one segment over each input (the model writes no times); word_timestamps: not available. Search: greedy, or transformers' beam search with beam_size N (nbest
    <= N hypotheses in `Transcript.nbest`, scored as transformers' sequences_scores), length_penalty its
    exponent; max_new_tokens caps the generated tokens (default: the generation config's, else 500). Long inputs:
    cut at pauses (detector) into pieces of at most max_piece_s (default 120 s), decoded and joined."""

    PIECE_S = MAX_PIECE_S
    NO_WORDS = ("Voxtral models cannot time words (the model writes no times); a transcript has one segment per "
                "input")

    language: Optional[str] = option(None, help="language code of multilingual models (e.g. en, de)",
                                     metavar="LANG")
    target_language: Optional[str] = option(None, help="Canary: the output's language (another than --language "
                                            "translates; default: --language)", metavar="LANG")
    task: Optional[str] = option(None, help="transcribe (default) or translate (Whisper: into English; Canary: "
                                 "into --target-language, English by default)", choices=TASKS, form=None)
    max_piece_s: float = option(DEFAULT_PIECE_S, help=f"cut inputs longer than this at pauses ({MAX_PIECE_S[0]:g}-"
                                f"{MAX_PIECE_S[1]:g} s)", parse=float, command=False)

    def __post_init__(self):
        super().__post_init__()
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

"""The options of a Qwen3-ASR recognizer's `transcribe()` (`Qwen3ASROptions`), declared once with how the command
and the server spell them (`transcribe.options`); a name another family also declares is spelled as there
(language, batch_size, timestamps, word_timestamps, beam_size, nbest, length_penalty, max_new_tokens, sample_rate,
max_piece_s, detector)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..llm.options import LLMOptions
from ..options import UtteranceStreamFields, option, text
from .prompt import CHAT_TOKENS, language_code

# transformers' length_penalty is an exponent of the length: 0 to 2 are the usual values (1 by default).
MAX_LENGTH_PENALTY = 10.0
# At most this many generated tokens (the LM's position table, 65,536 in the published models, holds the
# prompt too; the recognizer bounds it by what the table leaves).
MAX_NEW_TOKENS = 1 << 16
# Pieces of a long input: the encoder attends within 8 s windows, so any length encodes alike, but one piece's
# text must fit max_new_tokens (512 by the published generation config: about 2 minutes of fast speech; the
# original library cuts at 20 minutes and raises its own budget).
MAX_PIECE_S = (10.0, 1200.0)
DEFAULT_PIECE_S = 60.0
# The system turn's text: a few sentences or a list of terms (the LM's 65,536 positions hold far more).
MAX_CONTEXT_CHARS = 10000


@dataclass(frozen=True)
class Qwen3ASROptions(LLMOptions):
    """language: the spoken language, a code or its English name (one of the model's 30: ar cs da de el en es fa fi
    fil fr hi hu id it ja ko mk ms nl pl pt ro ru sv th tr vi yue zh); it is written into the prompt
    ("language English<asr_text>", as transformers' `apply_transcription_request(language=)` does); default: none,
    the model names the language itself and `Transcript.language` is the code of what it wrote. context: text for
    the prompt's system turn (names, terms, the topic: what the original library calls context and transformers'
    processor `prompt=`), none by default. timestamps: one
    segment over each input (the model has no timestamp tokens); word_timestamps: not available (True is an error:
    words are untimed). Search: greedy (transformers' generate with num_beams=1), or transformers' beam search
    with beam_size N (nbest <= N of its hypotheses come back in `Transcript.nbest`, scored as transformers'
    sequences_scores), length_penalty its exponent (default: the model's generation config, 1.0);
    max_new_tokens caps the generated tokens (the stop token counted, as transformers counts it; default: the
    model's generation config, 512 in the published ones). Output: the processor's parsed form (its repetition
    fix, the text after "<asr_text>"). Long inputs: cut at pauses (detector) into pieces of at most max_piece_s
    (default 60 s), decoded in batches and joined (with a space; without one for zh, yue, ja and th)."""

    PIECE_S = MAX_PIECE_S
    NO_WORDS = ("Qwen3-ASR models cannot time words here (the model writes no times, and its forced aligner is "
                "another model); a transcript has one segment per input")

    language: Optional[str] = option(None, help="language code of multilingual models (e.g. en, de)",
                                     metavar="LANG")
    context: Optional[str] = option(None, help="text the model reads before the audio (names, terms, the "
                                    "topic)", metavar="TEXT")
    max_piece_s: float = option(DEFAULT_PIECE_S, help=f"cut inputs longer than this at pauses ({MAX_PIECE_S[0]:g}-"
                                f"{MAX_PIECE_S[1]:g} s)", parse=float, command=False)

    def __post_init__(self):
        super().__post_init__()
        if self.language is not None:
            if not isinstance(self.language, str) or not 0 < len(self.language) <= 32:
                raise OptionValueError("language", f"language must be a language code such as en or de, got "
                                       f"{str(self.language)[:40]!r}")
            language_code(self.language)
        text("context", self.context, MAX_CONTEXT_CHARS)
        if self.context is not None and any(t in self.context for t in CHAT_TOKENS):
            raise OptionValueError("context", "context may not hold the chat's special tokens ("
                                   + ", ".join(CHAT_TOKENS) + "): they would change the prompt's layout")

    @property
    def language_code(self) -> Optional[str]:
        """The forced language's code, or None (detected)."""
        return language_code(self.language)


@dataclass(frozen=True)
class Qwen3ASRStreamOptions(UtteranceStreamFields, Qwen3ASROptions):
    """A live session cut at pauses (transcribe/utterances.py, `options.UtteranceStreamFields`): pause_s,
    partial_s, and transcribe's decoding options for every utterance. The committed text is each utterance's
    transcription tokens decoded (the language prefix left out; the offline transcript's repetition fix is not
    applied to a stream's tokens)."""

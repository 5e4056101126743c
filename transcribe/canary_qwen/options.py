"""The options of a Canary-Qwen recognizer's `transcribe()` (`CanaryQwenOptions`), declared once with how the command
and the server spell them (`transcribe.options`); a name another family also declares is spelled as there."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..llm.options import LLMOptions
from ..options import UtteranceStreamFields, option

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
class CanaryQwenOptions(LLMOptions):
    """language: "en" or none (the model is English only and its prompt names no language); timestamps: one segment
    over each input (the model writes no times); word_timestamps: not available. Search: greedy (as `SALM.generate`
    runs transformers' generate, stopping at the tokenizer's eos, <|im_end|>), or transformers' beam search with
    beam_size N (nbest <= N hypotheses in `Transcript.nbest`, scored as transformers' sequences_scores),
    length_penalty its exponent (default 1.0); max_new_tokens caps the generated tokens (the stop token counted;
    default 256). Long inputs: cut at pauses (detector) into pieces of at most max_piece_s (default 40 s, the
    longest audio the model was trained on), decoded in batches and joined with a space."""

    PIECE_S = MAX_PIECE_S
    PIECE_WHY = "seconds; the model was trained on up to 40 s"
    MAX_NEW_TOKENS = MAX_NEW_TOKENS
    NO_WORDS = ("Canary-Qwen models cannot time words (the model writes no times); a transcript has one segment "
                "per input")

    language: Optional[str] = option(None, help="language code of multilingual models (e.g. en, de)",
                                     metavar="LANG")
    max_piece_s: float = option(DEFAULT_PIECE_S, help=f"cut inputs longer than this at pauses ({MAX_PIECE_S[0]:g}-"
                                f"{MAX_PIECE_S[1]:g} s)", parse=float, command=False)

    def __post_init__(self):
        super().__post_init__()
        if self.language is not None and self.language not in ("en", "english", "English"):
            raise OptionValueError("language", f"Canary-Qwen models transcribe English only (en), not "
                                   f"{str(self.language)[:40]!r}")


@dataclass(frozen=True)
class CanaryQwenStreamOptions(UtteranceStreamFields, CanaryQwenOptions):
    """A live session cut at pauses (transcribe/utterances.py, `options.UtteranceStreamFields`): pause_s,
    partial_s, and transcribe's decoding options for every utterance."""

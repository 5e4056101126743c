"""Voxtral's prompts, built in code as mistral-common's instruct tokenizer (v7) encodes them (no template is run).

Transcription (`encode_transcription`, what transformers' `apply_transcription_request` tokenizes):

    <s>[INST][BEGIN_AUDIO][AUDIO] x N[/INST][lang:xx][TRANSCRIBE]

`lang:xx` (the ISO 639-1 code, no space, encoded as text) only when a language is given; without it the model
detects the language. Translation (a chat turn of the audio and an instruction, what `apply_chat_template`
encodes for a user message holding an audio chunk and then a text chunk):

    <s>[INST][BEGIN_AUDIO][AUDIO] x N<instruction text>[/INST]

with the instruction "Translate this to <Language>." (the model card's wording). N is 375 rows per 30 s chunk
of the zero-padded audio (mistral-common pads to whole chunks; `VoxtralConfig.encoder.chunk_rows`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

from ..errors import ModelError, OptionValueError

# The languages the model card names (Voxtral is multilingual beyond them; any ISO 639-1 code is passed on).
LANGUAGES = {"en": "English", "fr": "French", "de": "German", "es": "Spanish", "it": "Italian", "pt": "Portuguese",
             "nl": "Dutch", "hi": "Hindi"}
_BY_NAME = {name.lower(): code for code, name in LANGUAGES.items()}
BOS, INST, END_INST, BEGIN_AUDIO, AUDIO, TRANSCRIBE = "<s>", "[INST]", "[/INST]", "[BEGIN_AUDIO]", "[AUDIO]", "[TRANSCRIBE]"
TASKS = ("transcribe", "translate")


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def token_id(self, token: str) -> int: ...


def language_code(value: Optional[str], option: str = "language") -> Optional[str]:
    """A two-letter ISO 639-1 code (any case) or an English name of the model card's languages -> the code; None
    stays None."""
    if value is None:
        return None
    low = str(value).strip().lower()
    if low in _BY_NAME:
        return _BY_NAME[low]
    if len(low) == 2 and low.isascii() and low.isalpha():
        return low
    raise OptionValueError(option, f"Voxtral takes a two-letter ISO 639-1 language code (e.g. "
                           f"{', '.join(LANGUAGES)}), got {str(value)[:40]!r}")


def instruction(target: str) -> str:
    """The translation instruction for a target language code."""
    name = LANGUAGES.get(target)
    if name is None:
        raise OptionValueError("target_language", f"Voxtral translates into {', '.join(LANGUAGES)} (the model card's "
                               f"languages), not {target!r}")
    return f"Translate this to {name}."


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    audio_start: int   # index of the first [AUDIO] row
    audio_rows: int


class PromptBuilder:
    def __init__(self, tokenizer: Tokenizer, audio_token_id: int, where: str):
        self.tok = tokenizer
        try:
            ids = {name: tokenizer.token_id(name) for name in (BOS, INST, END_INST, BEGIN_AUDIO, AUDIO, TRANSCRIBE)}
        except ModelError as e:
            raise ModelError(f"{where}: not a Voxtral tokenizer ({e})") from None
        if ids[AUDIO] != audio_token_id:
            raise ModelError(f"{where}: config.json's audio_token_id {audio_token_id} is not the tokenizer's "
                             f"[AUDIO] ({ids[AUDIO]})")
        self.ids = ids

    def build(self, rows: int, language: Optional[str] = None, translate_to: Optional[str] = None) -> Prompt:
        i = self.ids
        head = [i[BOS], i[INST], i[BEGIN_AUDIO]]
        ids = head + [i[AUDIO]] * rows
        if translate_to is not None:
            ids += self.tok.encode(instruction(translate_to)) + [i[END_INST]]
        else:
            ids.append(i[END_INST])
            if language is not None:
                ids += self.tok.encode(f"lang:{language}")
            ids.append(i[TRANSCRIBE])
        return Prompt(ids, len(head), rows)

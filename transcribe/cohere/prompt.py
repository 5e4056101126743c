"""Cohere Transcribe's decoder prompt (transformers' `CohereAsrProcessor.get_decoder_prompt_ids`), built from
token strings, never from text:

    ▁ <|startofcontext|> <|startoftranscript|> <|emo:undefined|> <|lang|> <|lang|> <|pnc|>|<|nopnc|>
    <|noitn|> <|notimestamp|> <|nodiarize|>

The language twice (spoken = written: transcription only), the standalone `▁` piece first. transformers'
`generate()` keeps a prompt whose first id is the generation config's `decoder_start_token_id` (the id of
`▁` in the published model) and otherwise puts that id in front of it, or `bos_token_id` when the config
has none (transformers' `CohereAsrConfig` default): an 11-token prompt, reproduced here as transformers runs
it. A piece the vocabulary lacks is an error here (transformers would silently use `<unk>`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ModelError, OptionValueError
from .tokenizer import WORD_START, CohereTokenizer

# transformers' CohereAsrProcessor.LANGUAGES.
LANGUAGES = ("ar", "de", "el", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "vi", "zh")
# Languages written without spaces between words (transformers joins their chunks with "").
NO_SPACE_LANGUAGES = ("ja", "zh")
DEFAULT_LANGUAGE = "en"
_FIXED = (WORD_START, "<|startofcontext|>", "<|startoftranscript|>", "<|emo:undefined|>", "<|pnc|>", "<|nopnc|>",
          "<|noitn|>", "<|notimestamp|>", "<|nodiarize|>")


@dataclass(frozen=True)
class Prompt:
    ids: tuple
    language: str


class PromptBuilder:
    def __init__(self, tokenizer: CohereTokenizer, name: str, decoder_start=None, bos=None):
        self.tok = tokenizer
        missing = [p for p in _FIXED if tokenizer.id(p) is None]
        if missing:
            raise ModelError(f"{name}: the vocabulary lacks the prompt's pieces {', '.join(missing)}")
        start = bos if decoder_start is None else decoder_start
        # the id generate() puts in front of the prompt (none when the prompt starts with it)
        self.prefix = () if start is None or start == tokenizer.id(WORD_START) else (int(start),)
        self.languages = tuple(lang for lang in LANGUAGES if tokenizer.id(f"<|{lang}|>") is not None)

    def build(self, language, pnc) -> Prompt:
        lang = DEFAULT_LANGUAGE if language is None else language
        if lang not in self.languages:
            raise OptionValueError("language", f"language {lang!r} is not one this model transcribes (one of "
                                   f"{', '.join(self.languages)})")
        t = self.tok.id
        ids = self.prefix + (t(WORD_START), t("<|startofcontext|>"), t("<|startoftranscript|>"), t("<|emo:undefined|>"),
               t(f"<|{lang}|>"), t(f"<|{lang}|>"), t("<|pnc|>" if pnc is None or pnc else "<|nopnc|>"),
               t("<|noitn|>"), t("<|notimestamp|>"), t("<|nodiarize|>"))
        return Prompt(ids, lang)

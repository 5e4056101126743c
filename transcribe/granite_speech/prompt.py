"""Granite Speech's prompts, built in code from the chat format the checkpoint's template renders (the
template is read as data and recognised, never run):

- the role format of the Granite 3.x / 4.x LMs (granite-speech-3.3, -4.1-2b-plus):
  `<|start_of_role|>system<|end_of_role|>{system}<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>
  {request}<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>`, with the model cards' system message
  (the template's own default carries today's date, so the cards pass a fixed one, and so do we);
- the plain format of granite-4.0-1b-speech and granite-speech-4.1-2b: `USER: {request}\n ASSISTANT:`.

The request is `<|audio|>` and an instruction ("can you transcribe the speech into a written format?", the
model cards' request; or a translation request; or the caller's own). The processor then repeats the audio
token once per audio embedding; a template with neither format's markers is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ModelError, OptionValueError
from ..llm.tokenizer import LLMTokenizer
from ..text.languages import LANGUAGE_NAMES, language_code

AUDIO = "<|audio|>"
ROLE_MARKERS = ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>")
SYSTEM = ("Knowledge Cutoff Date: April 2024.\nToday's Date: December 19, 2024.\n"
          "You are Granite, developed by IBM. You are a helpful AI assistant")
TRANSCRIBE = "can you transcribe the speech into a written format?"
TRANSLATE = "can you translate the speech into {language}?"


@dataclass(frozen=True)
class Prompt:
    before: list[int]   # the ids before the audio embeddings
    after: list[int]    # ... after them
    text: str           # the prompt's text with one audio token (for messages and tests)

    def ids(self, audio_id: int, n_audio: int) -> list[int]:
        return self.before + [audio_id] * n_audio + self.after


class PromptBuilder:
    def __init__(self, tokenizer: LLMTokenizer, where: str):
        template = tokenizer.chat_template
        if not template:
            raise ModelError(f"{where}: the tokenizer has no chat template (tokenizer_config.json's chat_template or "
                             "chat_template.jinja): its prompt format is unknown")
        if all(m in template for m in ROLE_MARKERS):
            self.format = "role"
        elif "USER: " in template and " ASSISTANT:" in template:
            self.format = "user-assistant"
        else:
            raise ModelError(f"{where}: the chat template is not one this code knows (neither Granite's role markers "
                             "nor the USER:/ASSISTANT: format); prompts are built in code, never by running a template")
        for token in ((AUDIO,) + ROLE_MARKERS if self.format == "role" else (AUDIO,)):
            if not tokenizer.has(token):
                raise ModelError(f"{where}: the tokenizer lacks {token}, which the chat format needs")
        self.tokenizer = tokenizer
        self.where = where

    def text(self, request: str) -> str:
        if self.format == "role":
            return (f"<|start_of_role|>system<|end_of_role|>{SYSTEM}<|end_of_text|>\n"
                    f"<|start_of_role|>user<|end_of_role|>{request}<|end_of_text|>\n"
                    "<|start_of_role|>assistant<|end_of_role|>")
        return f"USER: {request}\n ASSISTANT:"

    def build(self, task: str | None, target_language: str | None, instruction: str | None) -> Prompt:
        if instruction is not None:
            request = instruction
        elif task == "translate":
            code = language_code(target_language or "")
            if code is None:
                raise OptionValueError("target_language", f"unknown language {target_language!r} (a code such as "
                                       "fr or de, or an English name)")
            request = TRANSLATE.format(language=LANGUAGE_NAMES[code].title())
        else:
            request = TRANSCRIBE
        if AUDIO in request:
            raise OptionValueError("instruction", f"the instruction may not contain {AUDIO}: the audio goes before it")
        text = self.text(AUDIO + request)
        head, tail = text.split(AUDIO)
        tok = self.tokenizer
        return Prompt(tok.encode(head), tok.encode(tail), text)

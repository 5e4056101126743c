"""Canary-Qwen's prompt, built in code as NeMo's `SALM.generate` builds it for speech recognition.

The model card's request is one user turn, `"Transcribe the following: <|audioplaceholder|>"`, in NeMo's `qwen`
prompt format (`QwenPromptFormatter`): the turn `<|im_start|>user\\n{message}<|im_end|>\\n` and, since the last turn
is not the assistant's, the generation prefix `<|im_start|>assistant\\n`, each tokenized on its own (NeMo's
`AutoTokenizer.text_to_ids`: no BOS or EOS added; the placeholder, a special token, keeps its own id). No system
turn, no thinking block (Qwen3's chat template, which would add them, is not what SALM runs). The placeholder's
one id is then replaced by the audio's rows (`replace_placeholders_and_build_targets`), one per encoder frame."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ModelError
from ..llm.tokenizer import LLMTokenizer

REQUEST = "Transcribe the following: {audio}"
USER_TURN = "<|im_start|>user\n{message}<|im_end|>\n"
GENERATION_PREFIX = "<|im_start|>assistant\n"
CHAT_TOKENS = ("<|im_start|>", "<|im_end|>")


@dataclass(frozen=True)
class Prompt:
    ids: list[int]      # the prompt's ids, the placeholder's one id included
    audio_at: int       # the placeholder's position: its row is replaced by the audio's rows


class PromptBuilder:
    def __init__(self, tokenizer: LLMTokenizer, tag: str, where: str):
        for t in CHAT_TOKENS:
            if not tokenizer.has(t):
                raise ModelError(f"{where}: the tokenizer has no {t} (NeMo's qwen prompt format needs it)")
        self.audio_id = tokenizer.add_special(tag)
        ids = tokenizer.encode(USER_TURN.format(message=REQUEST.format(audio=tag))) + \
            tokenizer.encode(GENERATION_PREFIX)
        if ids.count(self.audio_id) != 1:
            raise ModelError(f"{where}: the prompt's audio placeholder {tag!r} is not one token of the tokenizer")
        self.prompt = Prompt(ids, ids.index(self.audio_id))

    def build(self) -> Prompt:
        return self.prompt

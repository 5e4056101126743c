"""Qwen3-ASR's prompt and output text.

The prompt is what transformers' `Qwen3ASRProcessor.apply_transcription_request` renders with the -hf repos' chat
template (one audio; the system turn empty, or holding the `prompt=` text: `context` here), built here in code,
never by running the template:

    <|im_start|>system\\n[context]<|im_end|>\\n
    <|im_start|>user\\n<|audio_start|><|audio_pad|> x N<|audio_end|><|im_end|>\\n
    <|im_start|>assistant\\n[language <Name><asr_text>]

N is the number of encoder positions of the input (`AudioEncoder.output_lengths`); the bracketed tail forces a
language (its English name, "language English<asr_text>"); without it the model writes "language <Name><asr_text>"
itself before the text. The template is checked first: the -hf conversion's template (by its SHA-256) or one
holding every piece the layout above needs (and none of another model's); any other is refused (`check_template`).

The output is read as the processor's `decode(..., return_format="parsed")` reads it: the repetition fix
(a character repeated more than 20 times kept once; a pattern of up to 20 characters repeated 20 times or more
kept once, and the rest of the text fixed the same way), then the text after "<asr_text>" and the language named
before it (`parse_output`)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Protocol, Sequence

from ..errors import ModelError, OptionValueError

# The languages Qwen3-ASR was trained with, by code, and the English names its prompt and output use.
LANGUAGES = {
    "ar": "Arabic", "yue": "Cantonese", "zh": "Chinese", "cs": "Czech", "da": "Danish", "nl": "Dutch",
    "en": "English", "fil": "Filipino", "fi": "Finnish", "fr": "French", "de": "German", "el": "Greek",
    "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian", "ja": "Japanese", "ko": "Korean",
    "mk": "Macedonian", "ms": "Malay", "fa": "Persian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "es": "Spanish", "sv": "Swedish", "th": "Thai", "tr": "Turkish", "vi": "Vietnamese",
}
_BY_NAME = {name.lower(): code for code, name in LANGUAGES.items()}
# Languages written without spaces between words: pieces of a long input are joined without one.
NO_SPACE_LANGUAGES = ("zh", "yue", "ja", "th")

MARKER = "<asr_text>"
# The chat's special tokens: a context holding one would change the prompt's structure.
CHAT_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|audio_start|>", "<|audio_pad|>", "<|audio_end|>")
AUDIO_START, AUDIO_PAD, AUDIO_END = "<|audio_start|>", "<|audio_pad|>", "<|audio_end|>"
PREFIX = f"<|im_start|>system\n<|im_end|>\n<|im_start|>user\n{AUDIO_START}"
SUFFIX = f"{AUDIO_END}<|im_end|>\n<|im_start|>assistant\n"

# SHA-256 of the ASR chat template transformers' converter (convert_qwen3_asr_to_hf.py) writes into the -hf repos.
KNOWN_TEMPLATES = {"a825f126881372d962a0defee2504ac0eb2b173d8ae64faaf8d09fd986b850ac": "transformers -hf"}
# Pieces another template's text must hold for the layout above (its source text: a template builds its parts in
# any order, so only their presence is checked); one without them, or the forced aligner's `<timestamp>` template
# (or another model's: images, thinking), is refused.
_TEMPLATE_PIECES = ("<|im_start|>system", "<|im_end|>", "<|im_start|>user", f"{AUDIO_START}{AUDIO_PAD}{AUDIO_END}",
                    "<|im_start|>assistant")
_FOREIGN = ("<timestamp>", "<|vision_start|>", "<think>")
# Files a checkpoint's chat template may be in, first found wins (transformers 5's processor file first).
_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "processor_config.json", "tokenizer_config.json")

REPEAT_THRESHOLD = 20
REPEAT_MAX_PATTERN = 20


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def token_id(self, token: str) -> int: ...


def language_code(value: Optional[str]) -> Optional[str]:
    """A language code or English name (any case) -> its code; None stays None; OptionValueError otherwise."""
    if value is None:
        return None
    low = str(value).lower()
    if low in LANGUAGES:
        return low
    if low in _BY_NAME:
        return _BY_NAME[low]
    raise OptionValueError("language", f"Qwen3-ASR does not know the language {str(value)[:40]!r} (one of "
                           f"{', '.join(sorted(LANGUAGES))}, or their English names; none: detected)")


def read_template(path: Path) -> tuple[Optional[str], str]:
    """(the chat template's text or None, the file it came from) of a checkpoint directory."""
    for name in _TEMPLATE_FILES:
        f = path / name
        if not f.is_file():
            continue
        try:
            text = f.read_text(encoding="utf-8")
            if name.endswith(".jinja"):
                return text, name
            data = json.loads(text)
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ModelError(f"{f}: not readable ({e})") from None
        value = data.get("chat_template") if isinstance(data, dict) else None
        if isinstance(value, str):
            return value, name
        if value is not None:
            raise ModelError(f"{f}: chat_template is not one template text (a list of named templates is not "
                             "implemented)")
    return None, ""


def check_template(text: Optional[str], where: str) -> str:
    """The template's kind ("transformers -hf" or "compatible"); a one-line ModelError for an unknown one."""
    if text is None:
        raise ModelError(f"{where}: no chat template (chat_template.jinja): the prompt's layout is unknown")
    known = KNOWN_TEMPLATES.get(hashlib.sha256(text.encode("utf-8")).hexdigest())
    if known:
        return known
    for piece in _TEMPLATE_PIECES:
        if piece not in text:
            raise ModelError(f"{where}: unknown chat template (it lacks {piece!r}, which Qwen3-ASR's prompt holds)")
    foreign = [p for p in _FOREIGN if p in text]
    if foreign:
        raise ModelError(f"{where}: unknown chat template (it holds {foreign[0]!r}: not Qwen3-ASR's speech "
                         "recognition prompt)")
    return "compatible"


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    audio_start: int   # index of the first audio placeholder
    audio_rows: int    # placeholders (the input's encoder positions)
    language: Optional[str]  # the forced language's code, or None (detected)


class PromptBuilder:
    """The prompt's token ids, from the tokenizer's ids for the layout's text pieces (each encoded once)."""

    def __init__(self, tokenizer: Tokenizer, audio_token_id: int, where: str):
        self.where = where
        self.tokenizer = tokenizer
        self.audio_id = audio_token_id
        pad = tokenizer.token_id(AUDIO_PAD)
        if pad != audio_token_id:
            raise ModelError(f"{where}: the tokenizer's {AUDIO_PAD} is id {pad}, the config's audio_token_id "
                             f"{audio_token_id}")
        for token in ("<|im_start|>", "<|im_end|>", AUDIO_START, AUDIO_END):
            tokenizer.token_id(token)  # a ModelError naming a missing one
        self.marker_id = tokenizer.token_id(MARKER)
        self.prefix = tokenizer.encode(PREFIX)
        self.suffix = tokenizer.encode(SUFFIX)
        self.forced = {code: tokenizer.encode(f"language {name}{MARKER}") for code, name in LANGUAGES.items()}

    def context_prefix(self, context: Optional[str]) -> list[int]:
        """The ids before the audio placeholders, with `context` as the system turn's text (the processor's
        `prompt=`); the whole text is encoded at once, as transformers encodes the rendered prompt."""
        if not context:
            return self.prefix
        return self.tokenizer.encode(PREFIX.replace("system\n", f"system\n{context}", 1))

    def build(self, audio_rows: int, language: Optional[str], prefix: Optional[list[int]] = None) -> Prompt:
        """The prompt for an input of `audio_rows` encoder positions; `language` a code (forced) or None;
        `prefix` the ids before the placeholders (`context_prefix`; default: an empty system turn)."""
        head = self.prefix if prefix is None else prefix
        tail = self.forced[language] if language is not None else []
        ids = head + [self.audio_id] * audio_rows + self.suffix + tail
        return Prompt(ids, len(head), audio_rows, language)


# -- the output
def fix_repetitions(text: str, threshold: int = REPEAT_THRESHOLD, max_pattern: int = REPEAT_MAX_PATTERN) -> str:
    """The processor's repetition fix (the original library's): runs of one character longer than `threshold`
    become that character; then, scanning from the start, the first pattern of 1..`max_pattern` characters found
    `threshold` times in a row is kept once (with all its further repeats dropped), and the text after it is
    fixed the same way."""
    return _fix_patterns(_fix_char_runs(text, threshold), threshold, max_pattern)


def _fix_char_runs(s: str, threshold: int) -> str:
    out, i, n = [], 0, len(s)
    while i < n:
        j = i + 1
        while j < n and s[j] == s[i]:
            j += 1
        out.append(s[i] if j - i > threshold else s[i:j])
        i = j
    return "".join(out)


def _fix_patterns(s: str, threshold: int, max_pattern: int) -> str:
    out: list[str] = []
    while True:
        n = len(s)
        if n < 2 * threshold:
            out.append(s)
            return "".join(out)
        i = 0
        found = None
        while i <= n - 2 * threshold and found is None:
            for k in range(1, max_pattern + 1):
                if i + k * threshold > n:
                    break
                pattern = s[i:i + k]
                if all(s[i + r * k:i + (r + 1) * k] == pattern for r in range(1, threshold)):
                    end = i + threshold * k
                    while end + k <= n and s[end:end + k] == pattern:
                        end += k
                    found = (pattern, end)
                    break
            if found is None:
                i += 1
        if found is None:
            out.append(s)
            return "".join(out)
        out.append(s[:i] + found[0])
        s = s[found[1]:]


def parse_output(text: Optional[str]) -> tuple[Optional[str], str]:
    """Generated text (special tokens skipped) -> (the language name the model wrote, or None; the transcription),
    as transformers' `Qwen3ASRProcessor.parse_output` reads it."""
    if text is None or not text.strip():
        return None, ""
    text = text.strip()
    if "assistant\n" in text:
        text = text.split("assistant\n", 1)[1]
    text = fix_repetitions(text)
    if MARKER not in text:
        return None, text.strip()
    prefix, transcription = text.split(MARKER, 1)
    prefix = prefix.strip()
    if prefix.lower() == "language none":
        return None, transcription.strip()
    language = None
    for line in prefix.splitlines():
        line = line.strip()
        if not line:
            continue
        language = (line[len("language "):].strip() or None) if line.lower().startswith("language ") else line
        break
    return language or None, transcription.strip()


def output_language(name: Optional[str]) -> Optional[str]:
    """The code of a language name the model wrote (its own names); a name outside the table as written, lowercased."""
    if name is None:
        return None
    return _BY_NAME.get(name.lower(), name.lower())


def marker_end(ids: Sequence[int], marker_id: int) -> int:
    """Index just after the first `<asr_text>` token of generated ids (0 when it has none)."""
    for i, t in enumerate(ids):
        if t == marker_id:
            return i + 1
    return 0

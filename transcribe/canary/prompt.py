"""The decoder prompt of NeMo's two Canary formats, built from the options of a call.

- `canary` (canary-1b): `<|startoftranscript|> <|src|> <|transcribe|>/<|translate|> <|tgt|> <|pnc|>/<|nopnc|>`.
- `canary2` (the flash models, canary-1b-v2): `<|startofcontext|> [context] <|startoftranscript|> <|emotion|>
  <|src|> <|tgt|> <|pnc|>/<|nopnc|> <|itn|>/<|noitn|> <|timestamp|>/<|notimestamp|> <|diarize|>/<|nodiarize|>`;
  translation is a target language other than the source (there is no task token).

A slot the call leaves open takes the model's `prompt_defaults` (the canary2 configs give them), else NeMo's
default. A language or a switch the vocabulary has no token for is a clear error, never a silent default."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from .tokenizer import BOS, CanaryTokenizer

TASKS = ("transcribe", "translate")
_TRUE = {"yes", "true", "1", "pnc", "itn", "timestamp", "diarize"}
_FALSE = {"no", "false", "0", "nopnc", "noitn", "notimestamp", "nodiarize"}
# canary2's defaults where a config gives none (NeMo's canary2 prompt_defaults).
_CANARY2_DEFAULTS = {"emotion": "<|emo:undefined|>", "pnc": "<|pnc|>", "itn": "<|noitn|>",
                     "timestamp": "<|notimestamp|>", "diarize": "<|nodiarize|>"}
# NeMo maps a two-letter code to a locale a canary2 vocabulary may spell it with.
_LOCALES = {"en": "en-US", "es": "es-ES", "fr": "fr-FR", "de": "de-DE"}


@dataclass(frozen=True)
class Request:
    """What one call asks of the prompt (None: the model's default)."""

    language: Optional[str] = None         # spoken (source) language
    target_language: Optional[str] = None  # output language; another than the source: speech translation
    task: Optional[str] = None             # "transcribe" or "translate"
    pnc: Optional[bool] = None             # punctuation and capitals
    itn: Optional[bool] = None             # inverse text normalization (canary2)
    timestamps: bool = False               # timestamp tokens around each word (canary2)


@dataclass(frozen=True)
class Prompt:
    ids: tuple[int, ...]
    source: str
    target: str

    @property
    def translating(self) -> bool:
        return self.source != self.target


def _flag(value: str) -> Optional[bool]:
    v = value.strip().strip("<|>").lower()
    return True if v in _TRUE else False if v in _FALSE else None


def _default_language(defaults: dict, slot: str) -> Optional[str]:
    value = defaults.get(slot) or ""
    value = value[2:-2] if value.startswith("<|") and value.endswith("|>") else value
    return value or None


class PromptBuilder:
    """Prompts of one model: its format, vocabulary and `prompt_defaults`."""

    def __init__(self, fmt: str, tokenizer: CanaryTokenizer, defaults: dict):
        self.fmt = fmt
        self.tok = tokenizer
        self.defaults = dict(defaults)
        self.languages = tokenizer.languages

    # -- checks of a request (before any audio is decoded)
    def language(self, code: Optional[str], what: str) -> str:
        """The vocabulary's spelling of a language code (NeMo's canary2 mapping of "en" to "en-US" where
        only the locale is there); OptionValueError for one the model does not have."""
        option = "language" if what == "source" else "target_language"
        if code is None:
            code = _default_language(self.defaults, "source_lang" if what == "source" else "target_lang") or "en"
        if not isinstance(code, str):
            raise OptionValueError(option, f"{option} must be a language code, got {type(code).__name__}")
        if code in self.languages:
            return code
        if self.fmt == "canary2" and _LOCALES.get(code) in self.languages:
            return _LOCALES[code]
        known = ", ".join(self.languages) or "none"
        raise OptionValueError(option, f"{option} {code!r} is not one of the model's languages ({known})")

    def plan(self, req: Request) -> tuple[str, str]:
        """(source, target) language tokens' codes a request resolves to."""
        if req.task is not None and req.task not in TASKS:
            raise OptionValueError("task", f"task must be transcribe or translate, got {req.task!r}")
        source = self.language(req.language, "source")
        if req.target_language is not None:
            target = self.language(req.target_language, "target")
        elif req.task == "translate":
            target = self.language("en", "target") if source not in ("en", "en-US") else None
            if target is None:
                raise OptionValueError("target_language", "translate needs a target_language other than the "
                                       f"spoken language {source!r}")
        else:
            target = source
        if req.task == "translate" and target == source:
            raise OptionValueError("target_language", f"translate needs a target_language other than the spoken "
                                   f"language {source!r}")
        if req.task == "transcribe" and target != source:
            raise OptionValueError("task", f"task transcribe keeps the spoken language {source!r}; a target_language "
                                   f"{target!r} is a translation (task translate)")
        if self.fmt == "canary" and target != source and self.tok.id_of("<|translate|>") is None:
            raise OptionValueError("task", "this model has no <|translate|> token: it cannot translate")
        if req.timestamps and self.tok.id_of("<|timestamp|>") is None:
            raise OptionValueError("word_timestamps", "this model has no timestamp tokens (<|timestamp|>): it "
                                   "gives no word times")
        if req.itn is not None and self.fmt != "canary2":
            raise OptionValueError("itn", "inverse text normalization is a switch of canary2-format models only")
        return source, target

    # -- the prompt
    def build(self, req: Request, context: tuple[int, ...] = ()) -> Prompt:
        source, target = self.plan(req)
        slots = {**_CANARY2_DEFAULTS, **self.defaults} if self.fmt == "canary2" else dict(self.defaults)
        pnc = req.pnc if req.pnc is not None else (_flag(slots.get("pnc", "yes")) is not False)
        if self.fmt == "canary":
            task = "<|translate|>" if target != source else "<|transcribe|>"
            tokens = [BOS, f"<|{source}|>", task, f"<|{target}|>", "<|pnc|>" if pnc else "<|nopnc|>"]
            return Prompt(tuple(self._ids(tokens)), source, target)
        itn = req.itn if req.itn is not None else (_flag(slots.get("itn", "no")) is True)
        diarize = _flag(slots.get("diarize", "no")) is True
        emotion = slots.get("emotion") or "<|emo:undefined|>"
        head = self._ids(["<|startofcontext|>"]) + list(context)
        tokens = [BOS, emotion, f"<|{source}|>", f"<|{target}|>", "<|pnc|>" if pnc else "<|nopnc|>",
                  "<|itn|>" if itn else "<|noitn|>", "<|timestamp|>" if req.timestamps else "<|notimestamp|>",
                  "<|diarize|>" if diarize else "<|nodiarize|>"]
        return Prompt(tuple(head + self._ids(tokens)), source, target)

    def _ids(self, tokens: list[str]) -> list[int]:
        out = []
        for t in tokens:
            i = self.tok.id_of(t)
            if i is None:
                raise OptionValueError("language", f"the model's vocabulary has no {t} token for its "
                                       f"{self.fmt} prompt")
            out.append(i)
        return out

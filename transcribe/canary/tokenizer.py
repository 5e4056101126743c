"""Canary's vocabulary: NeMo's aggregate tokenizer (`tokenizer.type: agg`: one SentencePiece model of
special tokens, `spl_tokens`, then one per language, their ids laid end to end in the config's order) or
one SentencePiece model holding the special tokens too (`tokenizer.type: bpe`).

Text is NeMo's `ids_to_text`: the pieces joined, `▁` as a space, special tokens (`<|en|>`, `<|5|>`)
left as they are (timestamps are read out of them afterwards)."""
from __future__ import annotations

import re
from typing import Optional, Sequence

from ..text.sentencepiece import WORD_START, SentencePieceTokenizer

SPECIAL_TOKENIZER = "spl_tokens"
BOS, EOS, PAD, NOSPEECH = "<|startoftranscript|>", "<|endoftext|>", "<pad>", "<|nospeech|>"
# The special tokens that are not languages (NeMo's canary and canary2 formats; emotions are "<|emo:...|>").
_NOT_LANGUAGES = {"nospeech", "pnc", "nopnc", "startofcontext", "startoftranscript", "endoftext", "itn", "noitn",
                  "timestamp", "notimestamp", "diarize", "nodiarize", "transcribe", "translate", "spkchange",
                  "audioseparator", "unklang", "predict_lang", "nopredict_lang"}
_LANGUAGE = re.compile(r"^[a-z]{2,3}(-[A-Za-z]{2,4})?$")
_TIMESTAMP = re.compile(r"^<\|(\d+)\|>$")


class CanaryTokenizer:
    """ids <-> pieces of a Canary model; `special` maps each special token (`<|...|>`, `<pad>`) to its id."""

    def __init__(self, parts: Sequence[tuple[str, SentencePieceTokenizer]]):
        self.parts = list(parts)
        self.pieces: list[str] = []
        self.offsets: dict[str, int] = {}
        for name, sp in self.parts:
            self.offsets[name] = len(self.pieces)
            self.pieces.extend(sp.pieces)
        special_source = dict(self.parts).get(SPECIAL_TOKENIZER)
        start = self.offsets.get(SPECIAL_TOKENIZER, 0)
        pieces = special_source.pieces if special_source is not None else self.pieces
        self.special: dict[str, int] = {}
        for i, p in enumerate(pieces):
            if (p.startswith("<|") and p.endswith("|>")) or p == PAD:
                self.special.setdefault(p, start + i)
        for token in (BOS, EOS, PAD):
            if token not in self.special:
                raise ValueError(f"the tokenizer has no {token} token (not a Canary vocabulary)")
        self.bos, self.eos, self.pad = self.special[BOS], self.special[EOS], self.special[PAD]
        self.timestamps = {i: int(m.group(1)) for p, i in self.special.items() if (m := _TIMESTAMP.match(p))}
        langs = [n for n, _ in self.parts if n != SPECIAL_TOKENIZER] if len(self.parts) > 1 else None
        self.languages = sorted(
            p[2:-2] for p in self.special
            if _LANGUAGE.match(p[2:-2]) and p[2:-2] not in _NOT_LANGUAGES and (langs is None or p[2:-2] in langs))

    def __len__(self) -> int:
        return len(self.pieces)

    def piece(self, i: int) -> str:
        return self.pieces[i] if 0 <= i < len(self.pieces) else ""

    def text(self, ids: Sequence[int]) -> str:
        """NeMo's `ids_to_text` (an id past the vocabulary, one of the head's padding rows, is empty)."""
        return "".join(self.piece(int(i)) for i in ids).replace(WORD_START, " ")

    def token_text(self, i: int) -> str:
        return self.piece(int(i)).replace(WORD_START, " ")

    def id_of(self, token: str) -> Optional[int]:
        return self.special.get(token)

    def encode(self, text: str, language: str) -> list[int]:
        """Text in a language's sub-tokenizer (the aggregate's), as ids of the whole vocabulary."""
        if len(self.parts) == 1:
            name, sp = self.parts[0]
        else:
            found = dict(self.parts).get(language)
            if found is None:
                raise ValueError(f"no sub-tokenizer for language {language!r}")
            name, sp = language, found
        return [self.offsets[name] + i for i in sp.encode(text)]


def from_nemo(config: dict, files: dict[str, bytes], source: str) -> CanaryTokenizer:
    """The tokenizer a NeMo config names, from the archive's files (`nemo:` members). ValueError when
    it cannot be built."""
    tok = config.get("tokenizer") or {}
    kind = tok.get("type")
    if kind == "agg":
        langs = tok.get("langs") or {}
        if not isinstance(langs, dict) or SPECIAL_TOKENIZER not in langs:
            raise ValueError(f"tokenizer.langs has no {SPECIAL_TOKENIZER} sub-tokenizer")
        parts = []
        for name, sub in langs.items():
            if not isinstance(sub, dict) or sub.get("type", "bpe") != "bpe":
                raise ValueError(f"tokenizer.langs.{name}.type = {sub.get('type') if isinstance(sub, dict) else sub!r} "
                                 "is not implemented (bpe: a SentencePiece model)")
            parts.append((str(name), SentencePieceTokenizer(_member(files, sub.get("model_path"), f"langs.{name}"))))
        return CanaryTokenizer(parts)
    if kind in (None, "bpe"):
        return CanaryTokenizer([("bpe", SentencePieceTokenizer(_member(files, tok.get("model_path"), "model_path")))])
    raise ValueError(f"tokenizer.type = {str(kind)[:40]!r} is not implemented (agg or bpe)")


def _member(files: dict[str, bytes], path, what: str) -> bytes:
    name = str(path or "")
    name = name[len("nemo:"):] if name.startswith("nemo:") else name
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    if not name:
        raise ValueError(f"tokenizer.{what} names no SentencePiece model")
    if name not in files:
        raise ValueError(f"tokenizer file {name} (tokenizer.{what}) is missing")
    return files[name]

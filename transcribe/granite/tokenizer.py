"""The Granite checkpoint's tokenizer (tokenizer.json through `tokenizers`, decoding only), read from a
checkpoint directory or rebuilt from a GGUF file's metadata."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import ModelError


class GraniteTokenizer:
    """The checkpoint's tokenizer.json through `tokenizers` (decoding only)."""

    def __init__(self, path: Path):
        try:
            from tokenizers import Tokenizer
        except ImportError:  # pragma: no cover - a dependency
            raise ModelError("the tokenizers package is needed for Granite models (pip install tokenizers)") from None
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises its own Exception type
            raise ModelError(f"{path}: not a readable tokenizer.json ({e})") from None
        self._setup()

    @classmethod
    def from_json(cls, text: str, where: str) -> "GraniteTokenizer":
        """A tokenizer from tokenizer.json text (e.g. rebuilt from a GGUF file's metadata)."""
        from tokenizers import Tokenizer

        self = cls.__new__(cls)
        try:
            self._tok = Tokenizer.from_str(text)
        except Exception as e:  # tokenizers raises its own Exception type
            raise ModelError(f"{where}: the tokenizer cannot be built ({e})") from None
        self._setup()
        return self

    def _setup(self) -> None:
        self.size = self._tok.get_vocab_size(with_added_tokens=True)
        self._special = {t.content for t in self._tok.get_added_tokens_decoder().values() if t.special}

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def piece(self, i: int) -> str:
        return self._tok.id_to_token(i) or ""

    def is_special(self, i: int) -> bool:
        return self.piece(i) in self._special

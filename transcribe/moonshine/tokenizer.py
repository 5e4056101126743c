"""Moonshine's vocabulary: the published `tokenizer.json` (a SentencePiece-style BPE with byte fallback, read with
the `tokenizers` library) and transformers' text of generated ids (`decode(ids, skip_special_tokens=True)`: the
special added tokens dropped, `▁` as a space, byte pieces joined into UTF-8, one leading space stripped)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

WORD_START = "\u2581"


class MoonshineTokenizer:
    def __init__(self, tokenizer):
        self._tok = tokenizer
        n = tokenizer.get_vocab_size(with_added_tokens=True)
        self.pieces = [tokenizer.id_to_token(i) or "" for i in range(n)]
        added = tokenizer.get_added_tokens_decoder()
        self.special = {int(i) for i, t in added.items() if t.special}

    def __len__(self) -> int:
        return len(self.pieces)

    def piece(self, i: int) -> str:
        return self.pieces[i] if 0 <= i < len(self.pieces) else ""

    def token_text(self, i: int) -> str:
        """One id's text as it stands in a transcript ('' for a special token)."""
        if i in self.special:
            return ""
        return self._tok.decode([int(i)], skip_special_tokens=True) if self.piece(i).startswith("<0x") else \
            self.piece(i).replace(WORD_START, " ")

    def text(self, ids: Sequence[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)


def load_tokenizer(path: Path) -> MoonshineTokenizer:
    """The directory's tokenizer.json (ValueError when missing or unreadable)."""
    from tokenizers import Tokenizer

    f = path / "tokenizer.json"
    if not f.is_file():
        raise ValueError("no tokenizer.json (the vocabulary the transcript is decoded with)")
    try:
        tok = Tokenizer.from_str(f.read_text(encoding="utf-8"))
    except Exception as e:  # tokenizers raises its own Exception type with Rust text
        raise ValueError(f"tokenizer.json: unreadable ({str(e).splitlines()[0][:200] if str(e) else e})") from None
    return MoonshineTokenizer(tok)

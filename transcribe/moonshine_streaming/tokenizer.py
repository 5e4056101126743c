"""Moonshine Streaming's vocabulary: `tokenizer.json` (a SentencePiece-style BPE with byte fallback, read with
the `tokenizers` library) and transformers' text of generated ids (`decode(ids, skip_special_tokens=True)`,
with its `clean_up_tokenization_spaces` when tokenizer_config.json asks for it)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .config import read_json

WORD_START = "\u2581"
MAX_TOKENIZER_BYTES = 64 << 20


def clean_up(text: str) -> str:
    """transformers' `clean_up_tokenization` (spaces before punctuation and English contractions)."""
    for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
                 (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(a, b)
    return text


class MoonshineStreamingTokenizer:
    def __init__(self, tokenizer, cleanup: bool = False):
        self._tok = tokenizer
        self.cleanup = cleanup
        n = tokenizer.get_vocab_size(with_added_tokens=True)
        self.pieces = [tokenizer.id_to_token(i) or "" for i in range(n)]
        added = tokenizer.get_added_tokens_decoder()
        self.special = {int(i) for i, t in added.items() if t.special}

    def __len__(self) -> int:
        return len(self.pieces)

    def piece(self, i: int) -> str:
        return self.pieces[i] if 0 <= i < len(self.pieces) else ""

    def token_text(self, i: int) -> str:
        """One id's text in a transcript (`▁` as a space; a special token: '')."""
        if i in self.special:
            return ""
        return self.piece(i).replace(WORD_START, " ")

    def text(self, ids: Sequence[int]) -> str:
        out = self._tok.decode([int(i) for i in ids], skip_special_tokens=True)
        return clean_up(out) if self.cleanup else out


def load_tokenizer(path: Path) -> MoonshineStreamingTokenizer:
    """The directory's tokenizer.json (ValueError when missing or unreadable)."""
    from tokenizers import Tokenizer

    f = path / "tokenizer.json"
    if not f.is_file():
        raise ValueError("no tokenizer.json (the vocabulary the transcript is decoded with)")
    if f.stat().st_size > MAX_TOKENIZER_BYTES:
        raise ValueError(f"tokenizer.json is larger than {MAX_TOKENIZER_BYTES} bytes")
    try:
        tok = Tokenizer.from_str(f.read_text(encoding="utf-8"))
    except Exception as e:  # tokenizers raises its own Exception type with Rust text
        raise ValueError(f"tokenizer.json: unreadable ({str(e).splitlines()[0][:200] if str(e) else e!r})") from None
    cfg = read_json(path / "tokenizer_config.json") or {}
    return MoonshineStreamingTokenizer(tok, bool(cfg.get("clean_up_tokenization_spaces", False)))

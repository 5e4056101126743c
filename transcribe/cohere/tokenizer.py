"""Cohere Transcribe's vocabulary: `tokenizer.json` (read with the `tokenizers` library) or the SentencePiece
`tokenizer.model` transformers converts it from, and transformers' text of generated ids.

transformers converts the SentencePiece model into a `tokenizers` BPE whose only special tokens are `<unk>`,
`<pad>`, `<|endoftext|>` and `<|startoftranscript|>`; the other `<|...|>` pieces are plain vocabulary, so
`decode(..., skip_special_tokens=True)` keeps them in the text. Its decoder turns `▁` into spaces and strips
one leading space. The SentencePiece path gives the same text: those four pieces dropped, byte pieces
(`<0x..>`) joined into UTF-8, `▁` as a space, one leading space stripped."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

WORD_START = "\u2581"
# The pieces transformers' converted tokenizer treats as special (skip_special_tokens drops them).
SKIPPED = ("<unk>", "<pad>", "<|endoftext|>", "<|startoftranscript|>")
_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


class CohereTokenizer:
    """ids <-> pieces and transformers' text of ids."""

    def __init__(self, pieces: Sequence[str], skipped: set[int], tokenizer=None, byte_ids: Optional[set] = None):
        self.pieces = list(pieces)
        self._ids = {p: i for i, p in reversed(list(enumerate(self.pieces)))}  # the first id of a piece
        self.skipped = set(skipped)
        self._tok = tokenizer  # a tokenizers.Tokenizer, or None (SentencePiece path)
        self._bytes = byte_ids or set()

    def __len__(self) -> int:
        return len(self.pieces)

    def id(self, piece: str) -> Optional[int]:
        """The id of a piece, None if the vocabulary lacks it."""
        return self._ids.get(piece)

    def piece(self, i: int) -> str:
        return self.pieces[i] if 0 <= i < len(self.pieces) else ""

    def token_text(self, i: int) -> str:
        """One id's text as it appears in a transcript (`▁` as a space; a skipped special token: '')."""
        if i in self.skipped:
            return ""
        return self.piece(i).replace(WORD_START, " ")

    def text(self, ids: Sequence[int]) -> str:
        """transformers' `decode(ids, skip_special_tokens=True)`."""
        ids = [int(i) for i in ids]
        if self._tok is not None:
            return self._tok.decode(ids, skip_special_tokens=True)
        out, pending = [], bytearray()
        for i in ids:
            if i in self.skipped or not 0 <= i < len(self.pieces):
                continue
            m = _BYTE.match(self.pieces[i]) if i in self._bytes else None
            if m:
                pending.append(int(m.group(1), 16))
                continue
            if pending:
                out.append(pending.decode("utf-8", errors="replace"))
                pending = bytearray()
            out.append(self.pieces[i].replace(WORD_START, " "))
        if pending:
            out.append(pending.decode("utf-8", errors="replace"))
        text = "".join(out)
        return text[1:] if text.startswith(" ") else text


def from_tokenizer_json(path: Path) -> CohereTokenizer:
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_str(path.read_text(encoding="utf-8"))
    except Exception as e:  # tokenizers raises its own Exception type with Rust text
        raise ValueError(f"{path.name}: unreadable tokenizer.json ({str(e).splitlines()[0][:200]})") from None
    n = tok.get_vocab_size(with_added_tokens=True)
    pieces = [tok.id_to_token(i) or "" for i in range(n)]
    skipped = {i for i, p in enumerate(pieces) if p in SKIPPED}
    return CohereTokenizer(pieces, skipped, tokenizer=tok)


def from_sentencepiece(path: Path) -> CohereTokenizer:
    from ..text.sentencepiece import SentencePieceTokenizer

    sp = SentencePieceTokenizer(str(path))
    proc = sp._sp
    byte_ids = {i for i in range(len(sp)) if proc.IsByte(i)}
    skipped = {i for i, p in enumerate(sp.pieces) if p in SKIPPED}
    return CohereTokenizer(sp.pieces, skipped, byte_ids=byte_ids)


def load_tokenizer(path: Path) -> CohereTokenizer:
    """The directory's tokenizer.json, else its tokenizer.model (ValueError when neither reads)."""
    if (path / "tokenizer.json").is_file():
        return from_tokenizer_json(path / "tokenizer.json")
    if (path / "tokenizer.model").is_file():
        return from_sentencepiece(path / "tokenizer.model")
    raise ValueError("no tokenizer.json or tokenizer.model (the vocabulary the transcript is decoded with)")

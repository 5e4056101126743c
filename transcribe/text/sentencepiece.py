"""SentencePiece vocabularies (NeMo's BPE / unigram tokenizers): id -> piece, ids -> text."""
from __future__ import annotations

import unicodedata
from typing import Sequence

WORD_START = "\u2581"  # SentencePiece's word-boundary mark


class SentencePieceTokenizer:
    """A SentencePiece model (NeMo BPE / unigram tokenizers)."""

    def __init__(self, model: bytes | str):
        import sentencepiece as spm

        self._sp = spm.SentencePieceProcessor()
        try:
            if isinstance(model, (bytes, bytearray)):
                self._sp.LoadFromSerializedProto(bytes(model))
            else:
                self._sp.Load(str(model))
        except Exception as e:  # sentencepiece raises OSError / RuntimeError with C++ text
            raise ValueError(f"unreadable SentencePiece model ({e})") from None
        self.pieces = [self._sp.IdToPiece(i) for i in range(self._sp.GetPieceSize())]

    def __len__(self) -> int:
        return len(self.pieces)

    def piece(self, i: int) -> str:
        return self.pieces[i]

    def decode(self, ids: Sequence[int]) -> str:
        return self._sp.DecodeIds([int(i) for i in ids])

    def encode(self, text: str) -> list[int]:
        return list(self._sp.EncodeAsIds(text))


def punctuation_in(pieces: Sequence[str]) -> set[str]:
    """Punctuation characters of a vocabulary, from its plain pieces (not word-initial, not <...>/[...])."""
    out = set()
    for p in pieces:
        if not p or p.strip() == "" or p.startswith(WORD_START) or p.startswith("##"):
            continue
        if (p.startswith("<") and p.endswith(">")) or (p.startswith("[") and p.endswith("]")):
            continue
        out.update(ch for ch in p if unicodedata.category(ch).startswith("P"))
    return out

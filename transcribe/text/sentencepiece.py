"""SentencePiece vocabularies (NeMo's BPE / unigram tokenizers): id -> piece, ids -> text."""
from __future__ import annotations

import unicodedata
from typing import Optional, Sequence

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


# --------------------------------------------------------------------------------------------------
# A SentencePiece model from its pieces alone (GGUF files carry the vocabulary, not the .model file)
# --------------------------------------------------------------------------------------------------

# SentencePiece's piece types (sentencepiece_model.proto, ModelProto.SentencePiece.Type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
UNIGRAM, BPE = 1, 2  # TrainerSpec.ModelType


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # protobuf writes a negative int32 as a 10-byte varint
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, value) -> bytes:
    """One protobuf field: bytes/str (length-delimited), float (fixed32), bool/int (varint)."""
    import struct

    if isinstance(value, str):
        value = value.encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return _varint(number << 3 | 2) + _varint(len(value)) + bytes(value)
    if isinstance(value, float):
        return _varint(number << 3 | 5) + struct.pack("<f", value)
    return _varint(number << 3 | 0) + _varint(int(value))


def is_special_shape(piece: str) -> bool:
    """A piece written like a tag, `<...>` (e.g. <unk>, <EOU>, <|endoftext|>)."""
    return len(piece) > 2 and piece.startswith("<") and piece.endswith(">")


def is_byte_piece(piece: str) -> bool:
    """SentencePiece's byte-fallback pieces `<0x00>`..`<0xFF>`."""
    return len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">") and all(
        c in "0123456789ABCDEF" for c in piece[3:5])


def sentencepiece_proto(pieces: Sequence[str], scores: Optional[Sequence[float]] = None,
                        types: Optional[Sequence[int]] = None, model_type: int = BPE,
                        add_dummy_prefix: bool = True, remove_extra_whitespaces: bool = True) -> bytes:
    """A serialized SentencePiece ModelProto (hand-written protobuf, no protobuf package) with these
    pieces. Without `scores`, scores as SentencePiece's BPE trainer writes them: -k for the k-th
    normal piece (0 for the others). Without `types`: `<unk>` is the unknown piece, `<0xXX>` byte
    pieces, other `<...>` pieces user-defined (decoded as their text, matched whole when encoding),
    the rest normal. Normalization: identity (NeMo's tokenizers are trained with it: no character
    map), with the dummy prefix and whitespace folding as NeMo's models have them."""
    n = len(pieces)
    if scores is not None and len(scores) != n or types is not None and len(types) != n:
        raise ValueError(f"{n} pieces but {len(scores or [])} scores and {len(types or [])} types")
    if types is None:
        types = [UNKNOWN if p == "<unk>" else BYTE if is_byte_piece(p) else USER_DEFINED if is_special_shape(p)
                 else NORMAL for p in pieces]
    unknown = [i for i, t in enumerate(types) if t == UNKNOWN]
    if len(unknown) != 1:
        raise ValueError(f"a SentencePiece vocabulary has exactly one unknown piece, this one has {len(unknown)}")
    if scores is None:
        k, scores = 0, []
        for t in types:
            scores.append(float(-k) if t == NORMAL else 0.0)
            k += t == NORMAL
    seen = set()
    out = bytearray()
    for p, s, t in zip(pieces, scores, types):
        if not p:
            raise ValueError("an empty piece")
        if p in seen:
            raise ValueError(f"piece {p!r} appears twice")
        seen.add(p)
        if t not in (NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE):
            raise ValueError(f"piece {p!r} has type {t}, not a SentencePiece type")
        out += _field(1, _field(1, p) + _field(2, float(s)) + _field(3, int(t)))
    trainer = (_field(3, model_type) + _field(4, n) + _field(35, any(t == BYTE for t in types))
               + _field(40, unknown[0]) + _field(41, -1) + _field(42, -1) + _field(43, -1))
    normalizer = (_field(1, "identity") + _field(3, bool(add_dummy_prefix))
                  + _field(4, bool(remove_extra_whitespaces)) + _field(5, True))
    out += _field(2, trainer) + _field(3, normalizer)
    return bytes(out)


class PiecesTokenizer(SentencePieceTokenizer):
    """A SentencePiece tokenizer made from a vocabulary (pieces, optional scores and types) with no
    .model file, e.g. a GGUF file's: the pieces become a SentencePiece model in memory
    (`sentencepiece_proto`) that sentencepiece itself loads, so decoding is sentencepiece's own.
    Same interface as SentencePieceTokenizer."""

    def __init__(self, pieces: Sequence[str], scores: Optional[Sequence[float]] = None,
                 types: Optional[Sequence[int]] = None, model_type: int = BPE):
        super().__init__(sentencepiece_proto(pieces, scores, types, model_type))
        if self.pieces != list(pieces):
            raise ValueError("sentencepiece did not keep the pieces in order")

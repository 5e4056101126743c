"""The vocabulary of a transformers-format Canary folder (tokenizer.json, as `CanaryConverter` writes it:
special tokens as added tokens, BPE or Unigram pieces, a Metaspace decoder), with transformers' text:
`decode(ids, skip_special_tokens=True)` drops the added tokens marked special and the named special tokens
(`all_special_ids`: bos, eos, pad, unk; `<pad>` is not marked special in the file but is dropped), turns `▁`
into spaces and removes the first remaining piece's leading space (Metaspace's `prepend_scheme` always or
first). Text is never encoded: the prompt is special tokens alone."""
from __future__ import annotations

from typing import Sequence

from ..errors import ModelError
from ..nemo.config import short
from .tokenizer import BOS, EOS, PAD, CanaryTokenizer

UNK = "<unk>"


class HFCanaryTokenizer(CanaryTokenizer):
    """A Canary vocabulary from tokenizer.json; text as transformers' `decode(skip_special_tokens=True)`
    gives it: special tokens dropped, `▁` a space, the first remaining piece's leading space removed
    (Metaspace's `prepend_scheme` always / first)."""

    def __init__(self, pieces: list[str], skipped: set[int], strip_first: bool, replacement: str):
        super().__init__([("bpe", _Pieces(pieces))])
        self.skipped = frozenset(skipped)
        self.strip_first = strip_first
        self.replacement = replacement

    def text(self, ids: Sequence[int]) -> str:
        out = []
        for i in ids:
            i = int(i)
            if i in self.skipped or not 0 <= i < len(self.pieces):
                continue
            piece = self.pieces[i].replace(self.replacement, " ")
            if not out and self.strip_first and piece.startswith(" "):
                piece = piece[1:]
            out.append(piece)
        return "".join(out)

    def token_text(self, i: int) -> str:
        return self.piece(int(i)).replace(self.replacement, " ")


class _Pieces:
    """The vocabulary known by its pieces (text is never encoded: the prompt is special tokens alone)."""

    def __init__(self, pieces: list[str]):
        self.pieces = pieces

    def encode(self, text: str) -> list[int]:
        raise ValueError("encoding text with a transformers Canary vocabulary is not implemented")


def from_tokenizer_json(data, named, where: str) -> HFCanaryTokenizer:
    """tokenizer.json's content (and tokenizer_config.json's, `named`, or None) -> the vocabulary; a
    ModelError naming what is not implemented (`where`: the file, for messages)."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ModelError(f"{where}: no model section")
    model = data["model"]
    kind = model.get("type")
    vocab = model.get("vocab")
    if kind == "BPE" and isinstance(vocab, dict):
        table = {int(i): str(p) for p, i in vocab.items() if isinstance(i, int) and not isinstance(i, bool)}
    elif kind == "Unigram" and isinstance(vocab, list):
        table = {i: str(e[0]) for i, e in enumerate(vocab) if isinstance(e, (list, tuple)) and e}
    else:
        raise ModelError(f"{where}: model.type = {short(kind)} is not implemented (BPE, Unigram)")
    special = set()
    for tok in data.get("added_tokens") or []:
        if not isinstance(tok, dict) or not isinstance(tok.get("id"), int) or "content" not in tok:
            raise ModelError(f"{where}: added_tokens entry {short(tok)} is malformed")
        table[tok["id"]] = str(tok["content"])
        if tok.get("special"):
            special.add(tok["id"])
    n = len(table)
    if n == 0 or set(table) != set(range(n)):
        missing = sorted(set(range(max(table, default=-1) + 1)) - set(table))[:5]
        raise ModelError(f"{where}: the vocabulary's ids are not 0..{n - 1} (missing {missing})")
    pieces = [table[i] for i in range(n)]
    dec = data.get("decoder") or {}
    if not isinstance(dec, dict) or dec.get("type") != "Metaspace":
        raise ModelError(f"{where}: decoder = {short(dec.get('type') if isinstance(dec, dict) else dec)} is not "
                         "implemented (Metaspace)")
    scheme = dec.get("prepend_scheme", "always")
    if scheme not in ("always", "first", "never"):
        raise ModelError(f"{where}: decoder.prepend_scheme = {short(scheme)} is not implemented")
    replacement = dec.get("replacement", "▁")
    if not isinstance(replacement, str) or len(replacement) != 1:
        raise ModelError(f"{where}: decoder.replacement = {short(replacement)} is not implemented (one character)")
    # transformers also drops its named special tokens (`all_special_ids`), `<pad>` included.
    index = {p: i for i, p in reversed(list(enumerate(pieces)))}
    names = [named.get(k) for k in ("bos_token", "eos_token", "pad_token", "unk_token")] \
        if isinstance(named, dict) else []
    names = [v for v in names if v is not None]
    for value in names or [BOS, EOS, PAD, UNK]:
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str) and value in index:
            special.add(index[value])
    try:
        return HFCanaryTokenizer(pieces, special, scheme != "never", replacement)
    except ValueError as e:
        raise ModelError(f"{where}: {e}") from None

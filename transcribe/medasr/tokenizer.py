"""MedASR's tokenizer (transformers' LasrTokenizer) read from tokenizer.json as data: a unigram vocabulary whose
ids 0-3 are <epsilon> (the pad token and CTC blank), <s>, </s>, <unk>, then the pieces; added tokens (the
specials and 100 <extra_id_N> sentinels above the CTC head's outputs).

Text is made as the reference's decode makes it (LasrTokenizer._decode after the CTC collapse): the ids' tokens,
special ones left out (skip_special_tokens=True, as transformers' speech-recognition pipeline decodes), through
the Metaspace decoder (every "▁" a space; the first token's leading space dropped), then transformers'
clean_up_tokenization when tokenizer_config.json asks for it."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import ModelError
from .config import read_json

WORD_START = "\u2581"
# transformers' clean_up_tokenization (PreTrainedTokenizerBase), in its order
_CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))
MAX_TOKENS = 1 << 20


class LasrTokenizer:
    def __init__(self, pieces: Sequence[str], special: set[int], added: dict[int, str], prepend: bool,
                 clean_up: bool, pad_id: int):
        self.pieces = list(pieces)
        self.special = set(special)
        self.added = dict(added)
        self.prepend = prepend
        self.clean_up = clean_up
        self.pad_id = pad_id

    def __len__(self) -> int:
        return max(len(self.pieces), max(self.added, default=-1) + 1)

    def piece(self, i: int) -> str:
        return self.added.get(i, self.pieces[i] if 0 <= i < len(self.pieces) else "")

    def is_special(self, i: int) -> bool:
        return i in self.special

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Token ids (already collapsed: no repeats merged here, blanks not expected) -> text."""
        tokens = []
        for i in ids:
            i = int(i)
            if skip_special and i in self.special:
                continue
            p = self.piece(i)
            if p:
                tokens.append(p)
        out = []
        for k, tok in enumerate(tokens):
            s = tok.replace(WORD_START, " ")
            if k == 0 and self.prepend and s.startswith(" "):
                s = s[1:]
            out.append(s)
        text = "".join(out)
        if self.clean_up:
            for a, b in _CLEAN_UP:
                text = text.replace(a, b)
        return text


def load_tokenizer(path: Path) -> LasrTokenizer:
    """tokenizer.json (+ tokenizer_config.json) of a directory -> LasrTokenizer; ModelError for what is not the
    published layout (a unigram model with a Metaspace decoder)."""
    tj = read_json(path / "tokenizer.json")
    if tj is None:
        raise ModelError(f"{path}: no tokenizer.json")
    cfg = read_json(path / "tokenizer_config.json") or {}
    model = tj.get("model") or {}
    if model.get("type") != "Unigram" or not isinstance(model.get("vocab"), list):
        raise ModelError(f"{path}/tokenizer.json: a {model.get('type')!r} model, not LasrTokenizer's unigram")
    vocab = model["vocab"]
    if len(vocab) > MAX_TOKENS or not all(isinstance(v, list) and v and isinstance(v[0], str) for v in vocab):
        raise ModelError(f"{path}/tokenizer.json: the unigram vocabulary is not a list of [piece, score]")
    dec = tj.get("decoder") or {}
    if dec.get("type") != "Metaspace" or dec.get("replacement", WORD_START) != WORD_START:
        raise ModelError(f"{path}/tokenizer.json: decoder {dec.get('type')!r} is not implemented (Metaspace with "
                         f"{WORD_START!r})")
    scheme = dec.get("prepend_scheme", "always" if dec.get("add_prefix_space", True) else "never")
    if scheme not in ("always", "first", "never"):
        raise ModelError(f"{path}/tokenizer.json: Metaspace prepend_scheme {scheme!r} is not implemented")
    special, added = set(), {}
    for a in tj.get("added_tokens") or []:
        try:
            i, content = int(a["id"]), str(a["content"])
        except (KeyError, TypeError, ValueError):
            raise ModelError(f"{path}/tokenizer.json: an added token without id and content") from None
        if not 0 <= i < MAX_TOKENS:
            raise ModelError(f"{path}/tokenizer.json: added token id {i} out of range")
        added[i] = content
        if a.get("special"):
            special.add(i)
    pieces = [v[0] for v in vocab]
    pad = cfg.get("pad_token", "<epsilon>")
    pad = pad.get("content") if isinstance(pad, dict) else pad
    pad_id = next((i for i, c in added.items() if c == pad), pieces.index(pad) if pad in pieces else 0)
    clean = cfg.get("clean_up_tokenization_spaces", False)
    return LasrTokenizer(pieces, special, added, scheme != "never", bool(clean), pad_id)

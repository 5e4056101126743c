"""What the transformers-format families share when they write or read transcribe.cpp's GGUF files: the gpt2 (BPE)
vocabulary its converters build from `tokenizer.json`, and FLOAT32 metadata values read back as the decimals they
were written from."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..errors import ModelError
from ..json_files import read_optional


def f32_value(v: float) -> float:
    """A FLOAT32 metadata value as the decimal it was written from (the shortest decimal that is the same
    float32: 9.99999997e-07 -> 1e-06), so a config rebuilt from a file equals the original."""
    return float(str(np.float32(v)))


def bpe_vocab(src: Path, vocab_size: int) -> tuple[dict, Callable[[str], Optional[int]]]:
    """The gpt2 GGUF vocabulary of a transformers BPE tokenizer (`tokenizer.json` and `tokenizer_config.json` in
    `src`), as transcribe.cpp's converters build it: {"tokens", "types", "merges"} over `vocab_size` ids (ids no
    piece has become `<|unused_{i}|>`, normal; added tokens control tokens when marked special, normal
    otherwise), and `id_of(field)`: the id of the token tokenizer_config.json names in `field` (`bos_token`, a
    string or {"content": ...}), None when it names none or an unknown one."""
    tj = read_optional(src / "tokenizer.json")
    tcfg = read_optional(src / "tokenizer_config.json")
    if tj is None or tcfg is None:
        raise ModelError(f"{src}: tokenizer.json and tokenizer_config.json (the special tokens' names) are needed")
    model = tj.get("model") or {}
    if model.get("type", "BPE") != "BPE":
        raise ModelError(f"{src}/tokenizer.json: a {model.get('type')} model; the gpt2 GGUF tokenizer is BPE")
    vocab = dict(model.get("vocab") or {})
    merges = [f"{m[0]} {m[1]}" if isinstance(m, list) else m for m in model.get("merges") or []]
    added = tj.get("added_tokens") or []
    by_id: dict[int, tuple[str, bool]] = {int(i): (t, False) for t, i in vocab.items()}
    for a in added:
        by_id[int(a["id"])] = (a["content"], bool(a.get("special", False)))
    if not by_id:
        raise ModelError(f"{src}/tokenizer.json: no tokens")
    if max(by_id) >= vocab_size:
        raise ModelError(f"{src}: the tokenizer has id {max(by_id)}, beyond the LM's vocab_size {vocab_size}")
    tokens, types = [], []
    for i in range(vocab_size):
        tok, special = by_id.get(i, (f"<|unused_{i}|>", False))
        tokens.append(tok)
        types.append(3 if special else 1)

    def id_of(field: str) -> Optional[int]:
        val = tcfg.get(field)
        if isinstance(val, dict):
            val = val.get("content")
        if not val:
            return None
        if val in vocab:
            return int(vocab[val])
        return next((int(a["id"]) for a in added if a.get("content") == val), None)

    return {"tokens": tokens, "types": types, "merges": merges}, id_of

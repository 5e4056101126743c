"""A Qwen2-style byte-level BPE tokenizer as transcribe.cpp's converters write it into a GGUF file
(`tokenizer.ggml.model` "gpt2", `pre` "qwen2": tokens, token types 1 normal / 3 control, merges) rebuilt into an
`LLMTokenizer`: the tokens before the first control one are the BPE vocabulary; from it on, each token (but the
converters' `<|unused_{i}|>` fillers for ids without a token) is an added token, special when control; Qwen2's
split, NFC, the ByteLevel decoder."""
from __future__ import annotations

import json
import re
from typing import Iterable

from ..errors import ModelError
from .tokenizer import LLMTokenizer

TOKEN_NORMAL, TOKEN_CONTROL = 1, 3
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
FILLER = re.compile(r"<\|unused_(\d+)\|>")


def qwen2_tokenizer(tokens: list, types: list, merges: list, where: str, special: Iterable[int] = ()) -> LLMTokenizer:
    """The file's tokenizer; `special`: the named ids (eos, pad, bos) decode drops as well."""
    if not isinstance(tokens, list) or not isinstance(types, list) or len(tokens) != len(types) or not tokens \
            or not isinstance(merges, list):
        raise ModelError(f"{where}: tokenizer.ggml.tokens, token_type and merges are not lists (tokens and types "
                         "of one length)")
    first = next((i for i, k in enumerate(types) if k == TOKEN_CONTROL), len(tokens))
    vocab: dict[str, int] = {}
    added = []
    for i, (tok, kind) in enumerate(zip(tokens, types)):
        if not isinstance(tok, str):
            raise ModelError(f"{where}: tokenizer.ggml.tokens[{i}] is not text")
        if kind not in (TOKEN_NORMAL, TOKEN_CONTROL):
            raise ModelError(f"{where}: tokenizer.ggml.token_type[{i}] = {kind!r} is not implemented (1 normal, "
                             "3 control)")
        if tok in vocab:
            raise ModelError(f"{where}: tokenizer.ggml.tokens[{i}] {tok[:40]!r} repeats token {vocab[tok]}")
        vocab[tok] = i
        filler = FILLER.fullmatch(tok)
        if i >= first and not (filler and int(filler.group(1)) == i and kind == TOKEN_NORMAL):
            added.append({"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": kind == TOKEN_CONTROL})
    pairs = []
    for m in merges:
        parts = m.split(" ") if isinstance(m, str) else []
        if len(parts) != 2:
            raise ModelError(f"{where}: tokenizer.ggml.merges entry {str(m)[:60]!r} is not two pieces")
        pairs.append(parts)
    spec = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": pairs},
    }
    return LLMTokenizer.from_json(json.dumps(spec), where, special=special)

"""A Hugging Face `tokenizer.json` (byte-level BPE as Granite's and Qwen's LMs use it) through the `tokenizers`
library, with what transformers adds from tokenizer_config.json: the special tokens (added tokens marked special
and the named ones: eos, pad, bos, unk) that `decode(skip_special_tokens=True)` drops, its
`clean_up_tokenization_spaces`, and the chat template text (read, never run: each family builds its prompt in
code and checks the template is one it knows)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..errors import ModelError
from ..json_files import read_object as _read_json

_NAMED = ("bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token")


def clean_up_spaces(text: str) -> str:
    """transformers' `clean_up_tokenization`: the spaces English word pieces leave before punctuation and
    contractions."""
    for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                 (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(a, b)
    return text


class LLMTokenizer:
    def __init__(self, tokenizer, special: set[int], clean_up: bool, chat_template: Optional[str], where: str,
                 force_clean_up: bool = False):
        self._tok = tokenizer
        self.special = frozenset(special)
        # transformers 5 ignores clean_up_tokenization_spaces for a BPE tokenizer (it would strip the spaces BPE
        # keeps before punctuation), unless the config forces it with its long-named switch
        bpe = type(tokenizer.model).__name__ == "BPE"
        self.clean_up = clean_up and (force_clean_up or not bpe)
        self.chat_template = chat_template
        self.where = where

    @classmethod
    def load(cls, directory: Path) -> "LLMTokenizer":
        from tokenizers import Tokenizer

        path = directory / "tokenizer.json"
        if not path.is_file():
            raise ModelError(f"{directory}: tokenizer.json is missing")
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # the library's parse errors are plain Exceptions
            raise ModelError(f"{path}: not a tokenizer the tokenizers library reads ({str(e)[:200]})") from None
        cfg_path = directory / "tokenizer_config.json"
        cfg = _read_json(cfg_path) if cfg_path.is_file() else {}
        special = {int(i) for i, t in tok.get_added_tokens_decoder().items() if t.special}
        for key in _NAMED:
            value = cfg.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                i = tok.token_to_id(value)
                if i is not None:
                    special.add(i)
        template = cfg.get("chat_template")
        for name in ("chat_template.jinja", "chat_template.json"):
            p = directory / name
            if template is None and p.is_file():
                template = p.read_text(encoding="utf-8") if name.endswith(".jinja") else \
                    _read_json(p).get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if template is not None and not isinstance(template, str):
            raise ModelError(f"{cfg_path}: chat_template is not text")
        force = bool(cfg.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False))
        return cls(tok, special, bool(cfg.get("clean_up_tokenization_spaces", False)), template, str(directory), force)

    @classmethod
    def from_json(cls, spec: str, where: str, special: Iterable[int] = (), clean_up: bool = False,
                  chat_template: Optional[str] = None) -> "LLMTokenizer":
        """A tokenizer from a `tokenizer.json` text (e.g. one rebuilt from a GGUF file's vocabulary, merges
        and special tokens): its added tokens marked special and the ids in `special` (the named bos / eos /
        pad / unk) are dropped by decode; `clean_up` and `chat_template` as tokenizer_config.json's."""
        from tokenizers import Tokenizer

        try:
            tok = Tokenizer.from_str(spec)
        except Exception as e:  # the library's parse errors are plain Exceptions
            raise ModelError(f"{where}: not a tokenizer the tokenizers library reads ({str(e)[:200]})") from None
        ids = {int(i) for i, t in tok.get_added_tokens_decoder().items() if t.special}
        ids.update(int(i) for i in special)
        return cls(tok, ids, clean_up, chat_template, where)

    def add_special(self, token: str) -> int:
        """`token` as transformers' `add_special_tokens` adds it (a special added token, not normalized, no strip:
        an audio placeholder a model's loader adds to its LM's tokenizer), at the next id when the tokenizer does
        not have it; its id. decode drops it."""
        from tokenizers import AddedToken

        if self._tok.token_to_id(token) is None:
            self._tok.add_special_tokens([AddedToken(token, special=True, normalized=False)])
        i = self.token_id(token)
        self.special = self.special | {i}
        return i

    def __len__(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """The ids of `text`; special-token strings in it become their ids; no BOS or EOS is added."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        ids = [int(i) for i in ids]
        if skip_special:
            ids = [i for i in ids if i not in self.special]
        text = self._tok.decode(ids, skip_special_tokens=False)
        return clean_up_spaces(text) if self.clean_up else text

    def token_id(self, token: str) -> int:
        i = self._tok.token_to_id(token)
        if i is None:
            raise ModelError(f"{self.where}: the tokenizer has no token {token!r}")
        return i

    def has(self, token: str) -> bool:
        return self._tok.token_to_id(token) is not None

    def token(self, i: int) -> str:
        return self._tok.id_to_token(int(i)) or ""

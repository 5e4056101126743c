"""Mistral's `tekken.json` tokenizer (mistral-common's `Tekkenizer`, as Voxtral models ship it), read here.

A tekken file is a tiktoken-style byte-level BPE: `vocab` lists byte strings (base64) by rank, the first 256 the
single bytes in order; `config.pattern` is the regex that cuts text into pieces before merging; the first
`default_num_special_tokens` ids are special (control) tokens, named in `special_tokens` or filled in as
`<SPECIAL_{id}>`, and a regular token's id is its rank plus that count. No library reads this format without
tiktoken, so the reader is this module: the pieces are cut by the `tokenizers` library's regex splitter (the same
pattern, Oniguruma), and each piece is merged as tiktoken merges (repeatedly the adjacent pair whose joined bytes
have the lowest rank, leftmost first, `_merge`). Decoding joins the tokens' bytes and reads them as UTF-8 with
replacement characters, each run between special tokens alone, as mistral-common's decode does; special tokens
are dropped (`SpecialTokenPolicy.IGNORE`) or kept by name.

The file's `audio` section (sampling rate, frame rate, spectrogram, chunk length, streaming delays) is kept as
read (`TekkenTokenizer.audio`): the families that use it check what they need."""
from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from ..errors import ModelError

# mistral-common's tokenizer versions (TokenizerVersion); a file of another version is refused as it refuses it.
VERSIONS = ("v1", "v2", "v3", "v7", "v11", "v13", "v15")
# Published tekken files hold 150,000 pieces (19 MB of JSON); this bounds what is parsed.
MAX_FILE_BYTES = 64 << 20
MAX_SPECIAL = 1 << 16
FILLER = "<SPECIAL_{}>"
# The pattern of every published tekken file (mistral-common's data files, Voxtral's): a file that names its
# pre-tokenizer "tekken" without its pattern (a GGUF file) means this one.
PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
           r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|"
           r"\s+(?!\S)|\s+")
# The special tokens of files written before special_tokens were stored (mistral-common's
# DEPRECATED_SPECIAL_TOKENS, versions up to v7), in rank order.
LEGACY_SPECIAL = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                  "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
                  "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]")


def byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet (the printable character standing for each byte, as llama.cpp's GGUF files
    spell BPE tokens) -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
                 *range(ord("\u00ae"), ord("\u00ff") + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def _merge(piece: bytes, ranks: Mapping[bytes, int]) -> list[int]:
    """tiktoken's byte-pair merge of one piece: the ranks of the tokens it becomes."""
    whole = ranks.get(piece)
    if whole is not None:
        return [whole]
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return [ranks[p] for p in parts]


class TekkenTokenizer:
    """ids: special tokens 0 .. n_special - 1, then regular tokens (rank + n_special)."""

    def __init__(self, pieces: Sequence[bytes], specials: Sequence[str], pattern: str, where: str,
                 audio: Optional[Mapping[str, Any]] = None, version: str = "v7"):
        from tokenizers import Regex, pre_tokenizers

        if len(set(specials)) != len(specials):
            raise ModelError(f"{where}: the special tokens are not unique")
        for i, p in enumerate(pieces[:256]):
            if p != bytes([i]):
                raise ModelError(f"{where}: token rank {i} is not the byte {i} (a tekken vocabulary starts with the "
                                 "256 bytes in order)")
        if len(pieces) < 256:
            raise ModelError(f"{where}: the vocabulary has {len(pieces)} tokens, fewer than the 256 bytes")
        self.pieces = list(pieces)
        self.ranks = {p: i for i, p in enumerate(self.pieces)}
        if len(self.ranks) != len(self.pieces):
            raise ModelError(f"{where}: the vocabulary repeats a token")
        self.specials = list(specials)
        self.n_special = len(self.specials)
        self.special = frozenset(range(self.n_special))
        self._special_ids = {s: i for i, s in enumerate(self.specials)}
        self.pattern = pattern
        try:
            self._split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
        except Exception as e:  # the library's regex errors are plain Exceptions
            raise ModelError(f"{where}: the tokenizer's pattern is not a regex the tokenizers library reads "
                             f"({str(e)[:200]})") from None
        self.where = where
        self.audio = dict(audio) if audio is not None else None
        self.version = version

    @classmethod
    def load(cls, path: Path) -> "TekkenTokenizer":
        """A tekken.json file, checked as mistral-common's `Tekkenizer.from_file` checks it."""
        path = Path(path)
        try:
            size = path.stat().st_size
            if size > MAX_FILE_BYTES:
                raise ModelError(f"{path}: {size} bytes, larger than any tekken tokenizer ({MAX_FILE_BYTES})")
            data = json.loads(path.read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ModelError(f"{path}: not a readable tekken tokenizer ({str(e)[:200]})") from None
        return cls.from_data(data, str(path))

    @classmethod
    def from_data(cls, data: Any, where: str) -> "TekkenTokenizer":
        if not isinstance(data, dict) or not isinstance(data.get("config"), dict) or \
                not isinstance(data.get("vocab"), list):
            raise ModelError(f"{where}: not a tekken tokenizer (no config or vocab)")
        cfg = data["config"]
        version = cfg.get("version")
        if version not in VERSIONS:
            raise ModelError(f"{where}: tekken version {version!r} is not one mistral-common knows ({', '.join(VERSIONS)})")
        pattern = cfg.get("pattern")
        n_special = cfg.get("default_num_special_tokens")
        vocab_size = cfg.get("default_vocab_size")
        for key, value in (("default_num_special_tokens", n_special), ("default_vocab_size", vocab_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ModelError(f"{where}: the tekken config's {key} must be a positive number (got {value!r})")
        if not isinstance(pattern, str) or not pattern:
            raise ModelError(f"{where}: the tekken config has no pattern")
        if n_special > MAX_SPECIAL:
            raise ModelError(f"{where}: {n_special} special tokens, more than {MAX_SPECIAL}")
        listed = data.get("special_tokens")
        if listed is None:
            if VERSIONS.index(version) > VERSIONS.index("v7"):
                raise ModelError(f"{where}: a tekken {version} tokenizer must list its special tokens")
            names = list(LEGACY_SPECIAL)
        else:
            if not isinstance(listed, list):
                raise ModelError(f"{where}: special_tokens is not a list")
            names = []
            for i, t in enumerate(listed):
                if not isinstance(t, dict) or t.get("rank") != i or not isinstance(t.get("token_str"), str):
                    raise ModelError(f"{where}: special token {i} is not {{rank: {i}, token_str: ...}}")
                names.append(t["token_str"])
        if len(names) > n_special:
            raise ModelError(f"{where}: {len(names)} special tokens listed, more than default_num_special_tokens "
                             f"{n_special}")
        names += [FILLER.format(i) for i in range(len(names), n_special)]
        inner = vocab_size - n_special
        vocab = data["vocab"]
        if inner <= 0 or inner > len(vocab):
            raise ModelError(f"{where}: default_vocab_size {vocab_size} does not fit {len(vocab)} tokens and "
                             f"{n_special} special tokens")
        pieces = []
        for i, t in enumerate(vocab[:inner]):
            if not isinstance(t, dict) or t.get("rank") != i or not isinstance(t.get("token_bytes"), str):
                raise ModelError(f"{where}: vocabulary entry {i} is not {{rank: {i}, token_bytes: ...}}")
            try:
                pieces.append(base64.b64decode(t["token_bytes"], validate=True))
            except (binascii.Error, ValueError):
                raise ModelError(f"{where}: vocabulary entry {i}'s token_bytes is not base64") from None
        audio = data.get("audio")
        if audio is not None and not isinstance(audio, dict):
            raise ModelError(f"{where}: the tekken audio section is not an object")
        return cls(pieces, names, pattern, where, audio, version)

    def __len__(self) -> int:
        return self.n_special + len(self.pieces)

    def encode(self, text: str) -> list[int]:
        """The ids of `text` as plain text (special-token names in it are encoded as text, as mistral-common's
        `encode` does); no BOS or EOS."""
        ids: list[int] = []
        for piece, _ in self._split.pre_tokenize_str(text):
            ids.extend(r + self.n_special for r in _merge(piece.encode("utf-8"), self.ranks))
        return ids

    def token_bytes(self, i: int) -> bytes:
        i = int(i)
        if 0 <= i < self.n_special:
            return self.specials[i].encode("utf-8")
        if self.n_special <= i < len(self):
            return self.pieces[i - self.n_special]
        raise ModelError(f"{self.where}: token id {i} is outside the vocabulary ({len(self)})")

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        out: list[str] = []
        run = bytearray()
        for i in ids:
            i = int(i)
            if i < self.n_special:
                if run:
                    out.append(run.decode("utf-8", errors="replace"))
                    run.clear()
                if not skip_special:
                    out.append(self.token_bytes(i).decode("utf-8"))
            else:
                run += self.token_bytes(i)
        if run:
            out.append(run.decode("utf-8", errors="replace"))
        return "".join(out)

    def token_id(self, token: str) -> int:
        """A special token's id by its name ("[TRANSCRIBE]", "<s>")."""
        i = self._special_ids.get(token)
        if i is None:
            raise ModelError(f"{self.where}: the tokenizer has no special token {token!r}")
        return i

    def has(self, token: str) -> bool:
        return token in self._special_ids

    def token(self, i: int) -> str:
        """A token as text (its bytes read as UTF-8 with replacement characters; a special token's name)."""
        return self.token_bytes(i).decode("utf-8", errors="replace")

"""A transformers checkpoint's safetensors files: one `<stem>.safetensors`, or the shards a
`<stem>.safetensors.index.json` names; read as tensors only (nothing in them runs)."""
from __future__ import annotations

import json
from pathlib import Path

from .errors import ModelError


def weight_files(path: Path, stem: str = "model") -> list[Path]:
    """The files of `path`'s `<stem>` weights; a ModelError naming what is missing."""
    index = path / f"{stem}.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelError(f"{index}: not a safetensors index ({e})") from None
        files = [path / s for s in shards]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ModelError(f"{path}: weight shards missing: {', '.join(missing[:4])}")
        return files
    single = path / f"{stem}.safetensors"
    if single.is_file():
        return [single]
    raise ModelError(f"{path}: no {stem}.safetensors (or {stem}.safetensors.index.json) weights")


def read_tensors(files: list[Path]) -> dict:
    """name -> tensor of every file (torch tensors); a ModelError for an unreadable file."""
    from safetensors import SafetensorError, safe_open

    out: dict = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as h:
                for k in h.keys():
                    out[k] = h.get_tensor(k)
        except SafetensorError as e:
            raise ModelError(f"{f}: not a readable safetensors file ({e})") from None
        except OSError as e:
            raise ModelError(f"{f}: {e}") from None
    return out

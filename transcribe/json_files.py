"""JSON object files of a model directory (config.json, generation_config.json, tokenizer_config.json, ...):
read with a ModelError naming the file when it is not a readable JSON object."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from .errors import ModelError


def read_object(path: Path) -> dict:
    """The JSON object in `path`; a ModelError when it is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: not a JSON object")
    return data


def read_optional(path: Path) -> Optional[dict]:
    """The JSON object in `path`, or None when there is no such file."""
    return read_object(path) if Path(path).is_file() else None


def config_of(directory: Path, limit: int = 1 << 20) -> Optional[dict]:
    """A directory's config.json as a family's `detect` reads it: the object, or None when `directory` is not a
    directory, has no config.json, or holds one larger than `limit` bytes, unreadable or not an object (detection
    never raises; loading says what is wrong)."""
    path = Path(directory) / "config.json"
    try:
        if not Path(directory).is_dir() or not path.is_file() or path.stat().st_size > limit:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None

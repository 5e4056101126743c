"""Whisper checkpoint readers: CTranslate2 (ctranslate2.py), openai-whisper .pt (openai_pt.py) and
transformers directories (transformers.py); what they share (common.py). This module tells the
formats apart by their files alone, without PyTorch, so a command can check its options against
the model's family before anything heavy is imported."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from ...errors import ModelError

CONFIG_JSON = "config.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # preferred first


def detect(path: Path) -> Optional[str]:
    """Which Whisper checkpoint format a path holds: "ctranslate2" (a directory with model.bin),
    "transformers" (config.json with model_type whisper, safetensors or .bin weights), "openai"
    (a .pt file, or a directory holding exactly one), or None (not Whisper)."""
    if path.is_dir() and (path / "model.bin").exists():
        return "ctranslate2"
    if path.is_dir() and is_transformers_dir(path):
        return "transformers"
    if path.is_file() and path.suffix == ".pt":
        return "openai"
    if path.is_dir() and not (path / "model_config.yaml").exists() and not list(path.glob("*.nemo")):
        if find_openai_pt(path) is not None:
            return "openai"
    return None


def find_openai_pt(path: Path) -> Path | None:
    """The checkpoint a path names: a .pt file, or a directory holding exactly one .pt file."""
    if path.is_file():
        return path if path.suffix == ".pt" else None
    if path.is_dir():
        pts = sorted(p for p in path.glob("*.pt") if p.is_file())
        if len(pts) == 1:
            return pts[0]
        if len(pts) > 1:
            raise ModelError(f"{path}: holds {len(pts)} .pt files ({', '.join(p.name for p in pts[:4])}); name one")
    return None


def _model_type(path: Path):
    try:
        cfg = json.loads((path / CONFIG_JSON).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return cfg.get("model_type") if isinstance(cfg, dict) else None


def is_transformers_dir(path: Path) -> bool:
    """A directory with config.json and transformers weights (of any model type: a non-Whisper
    one is then reported by the reader, not taken for a NeMo directory)."""
    if not (path / CONFIG_JSON).is_file():
        return False
    has_weights = any((path / n).is_file() or (path / (n + ".index.json")).is_file() for n in WEIGHT_FILES)
    return has_weights or _model_type(path) == "whisper"



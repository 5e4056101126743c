"""Cohere Transcribe (CohereLabs/cohere-transcribe-03-2026; transformers' `CohereAsrForConditionalGeneration`,
model type `cohere_asr`): NeMo's FastConformer encoder, a projection, NeMo's pre-LN Transformer decoder with an
untied head, prompted with a language and punctuation switch; greedy transcription in 14 languages, exact
against transformers. `detect` and `load` are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "PIECE_S", "detect", "load"]

# The family contract (loading.Family): the name in messages and the options of transcribe().
KIND = "Cohere"
from .options import CohereOptions as Options  # noqa: E402
StreamOptions = None
# Batch jobs cut inputs longer than this into pieces at pauses (the published model's clip length:
# transformers' feature extractor cuts longer audio into chunks of at most 35 s).
PIECE_S = 35.0


def detect(path: Path) -> Optional[str]:
    """"transformers" for a directory whose config.json has model_type "cohere_asr"; else None."""
    cfg_path = path / "config.json"
    if not path.is_dir() or not cfg_path.is_file():
        return None
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return "transformers" if isinstance(cfg, dict) and cfg.get("model_type") == "cohere_asr" else None


def load(path: Path, name: str, device, dtype, kind: str):
    from .recognizer import CohereASR

    return CohereASR.load(path, name, device, dtype)

"""Kyutai STT (kyutai/stt-1b-en_fr, kyutai/stt-2.6b-en in transformers' layout, the `-trfs` repositories;
transformers' `KyutaiSpeechToTextForConditionalGeneration`, model type `kyutai_speech_to_text`): the Mimi codec's
encoder turns 24 kHz audio into codebook ids at 12.5 Hz, and a decoder LM, its input the sum of the previous text
token's and the frame's codebook embeddings, writes one text token per 80 ms frame, delayed behind the audio.
Offline transcription and a live `stream()` in lockstep with the audio, token ids equal to transformers'.
`detect` and `load` are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "detect", "load"]

KIND = "Kyutai STT"
from .options import KyutaiOptions as Options  # noqa: E402
from .options import KyutaiStreamOptions as StreamOptions  # noqa: E402


def detect(path: Path) -> Optional[str]:
    """"transformers" for a directory whose config.json has model_type "kyutai_speech_to_text"; else None."""
    cfg_path = path / "config.json"
    if not path.is_dir() or not cfg_path.is_file():
        return None
    try:
        if cfg_path.stat().st_size > (1 << 20):
            return None
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return "transformers" if isinstance(cfg, dict) and cfg.get("model_type") == "kyutai_speech_to_text" else None


def load(path: Path, name: str, device, dtype, kind: str):
    from .recognizer import KyutaiASR

    return KyutaiASR.load(path, name, device, dtype)

"""OpenAI Whisper: checkpoints (CTranslate2, openai .pt, transformers), front end, model, tokenizer,
decoding (logit rules, greedy, beam), long-form transcription, word timing, language detection and
the recognizer. `detect` and `load` are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional


def detect(path: Path) -> Optional[str]:
    """Which Whisper checkpoint format a path holds, or None (see `checkpoints.detect`)."""
    from .checkpoints import detect as detect_format

    return detect_format(path)


def load(path: Path, name: str, device, dtype, kind: str):
    """The recognizer of a Whisper checkpoint (see `WhisperASR.load`)."""
    from .recognizer import WhisperASR

    return WhisperASR.load(path, name, device, dtype, kind)

"""OpenAI Whisper: checkpoints (CTranslate2, openai .pt, transformers), front end, model, tokenizer,
decoding (logit rules, greedy, beam), long-form transcription, word timing, language detection and
the recognizer. `detect` and `load` are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional


def detect(path: Path) -> Optional[str]:
    """Which Whisper checkpoint format a path holds: "ctranslate2" (a directory with model.bin),
    "transformers" (config.json with model_type whisper, safetensors or .bin weights), "openai"
    (a .pt file, or a directory holding exactly one), or None (not Whisper)."""
    from .checkpoints.openai_pt import find_openai_pt
    from .checkpoints.transformers import is_transformers_dir

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


def load(path: Path, name: str, device, dtype, kind: str):
    """The recognizer of a Whisper checkpoint (see `WhisperASR.load`)."""
    from .recognizer import WhisperASR

    return WhisperASR.load(path, name, device, dtype, kind)

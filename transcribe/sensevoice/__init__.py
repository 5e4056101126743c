"""SenseVoice (FunAudioLLM's SenseVoiceSmall, run by the `funasr` package): Kaldi fbank + LFR + CMVN front end,
a SAN-M encoder (self-attention with FSMN memory) after four prompt embeddings (language, event, emotion,
text norm), a CTC head whose first frames give the language, emotion and event tags (`Transcript.language`,
`Transcript.tags`). `detect` and `load` are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "detect", "load"]

KIND = "SenseVoice"
from .options import SenseVoiceOptions as Options  # noqa: E402
StreamOptions = None  # no live session
# Batch jobs cut inputs longer than this into pieces at pauses (the model card's 30 s clips).
PIECE_S = 30.0


def detect(path: Path) -> Optional[str]:
    """"sensevoice" for a directory with funasr's config.yaml naming SenseVoiceSmall and a model.pt; "gguf" for a
    GGUF file of transcribe.cpp's `sensevoice` architecture; else None."""
    if path.is_file():
        from ..gguf import architecture

        return "gguf" if architecture(path) == "sensevoice" else None
    cfg = path / "config.yaml"
    if not path.is_dir() or not cfg.is_file() or not (path / "model.pt").is_file():
        return None
    try:
        head = cfg.read_text(encoding="utf-8")[:1 << 16]
    except (OSError, UnicodeDecodeError):
        return None
    from .config import MODEL_NAMES

    for line in head.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model" and not line.startswith((" ", "\t")):
            return "sensevoice" if value.strip().strip("'\"") in MODEL_NAMES else None
    return None


def load(path: Path, name: str, device, dtype, kind: str):
    """The recognizer of a SenseVoice model directory (`recognizer.SenseVoiceASR.load`) or of a transcribe.cpp
    GGUF file (kind "gguf", `gguf.load_gguf`)."""
    if kind == "gguf":
        from .gguf import load_gguf

        return load_gguf(path, name, device, dtype)
    from .recognizer import SenseVoiceASR

    return SenseVoiceASR.load(path, name, device, dtype)

"""Moonshine (UsefulSensors/moonshine-tiny, -base; transformers' `MoonshineForConditionalGeneration`, model type
`moonshine`): a convolution stem over the raw 16 kHz waveform, a rotary-position Transformer encoder and a decoder
with cross-attention; English transcription, greedy or beam, exact against transformers. `detect` and `load` are
this family's entry in `transcribe.loading.FAMILIES`. (Moonshine Streaming, model type `moonshine_streaming`, is
another family.)"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "detect", "load"]

KIND = "Moonshine"
from .options import MoonshineOptions as Options  # noqa: E402
from .options import MoonshineStreamOptions as StreamOptions  # noqa: E402  (a session cut at pauses)
# Batch jobs cut inputs longer than this into pieces at pauses (the models are trained on clips under ~30 s).
PIECE_S = 30.0


def detect(path: Path) -> Optional[str]:
    """"gguf" for a transcribe.cpp GGUF file of the `moonshine` architecture; "transformers" for a directory whose
    config.json has model_type "moonshine"; else None."""
    if path.is_file():
        from ..gguf import architecture, is_gguf

        return "gguf" if is_gguf(path) and architecture(path) == "moonshine" else None
    from ..json_files import config_of

    cfg = config_of(path)
    return "transformers" if cfg is not None and cfg.get("model_type") == "moonshine" else None


def load(path: Path, name: str, device, dtype, kind: str):
    from .recognizer import MoonshineASR

    if kind == "gguf":
        from .gguf import load_gguf

        return load_gguf(path, name, device, dtype)
    return MoonshineASR.load(path, name, device, dtype)

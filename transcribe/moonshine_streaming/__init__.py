"""Moonshine Streaming (UsefulSensors/moonshine-streaming-tiny, -small, -medium; transformers'
`MoonshineStreamingForConditionalGeneration`, model type `moonshine_streaming`): an encoder over 5 ms frames of
the waveform (two causal stride-2 convolutions, sliding-window attention without positions, 80 ms of lookahead
per lookahead layer), an adapter adding learned positions, and a decoder with partial RoPE and cross-attention.
Offline transcription (greedy and beam, token ids equal to transformers') and a live `stream()` whose encoder
runs on audio as it comes; transcribe.cpp's GGUF files load too. `detect` and `load` are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "detect", "load"]

KIND = "Moonshine Streaming"
from .options import MoonshineStreamingOptions as Options  # noqa: E402
from .options import MoonshineStreamingStreamOptions as StreamOptions  # noqa: E402

# Batch jobs cut inputs longer than this into pieces at pauses (the recognizer's default piece).
PIECE_S = 30.0


def detect(path: Path) -> Optional[str]:
    """"gguf" for a transcribe.cpp GGUF file of the `moonshine_streaming` architecture; "transformers" for a
    directory whose config.json has model_type "moonshine_streaming"; else None."""
    if path.is_file():
        from ..gguf import architecture, is_gguf

        return "gguf" if is_gguf(path) and architecture(path) == "moonshine_streaming" else None
    cfg_path = path / "config.json"
    if not path.is_dir() or not cfg_path.is_file():
        return None
    try:
        if cfg_path.stat().st_size > (1 << 20):
            return None
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return "transformers" if isinstance(cfg, dict) and cfg.get("model_type") == "moonshine_streaming" else None


def load(path: Path, name: str, device, dtype, kind: str):
    if kind == "gguf":
        from .gguf import load_gguf

        return load_gguf(path, name, device, dtype)
    from .recognizer import MoonshineStreamingASR

    return MoonshineStreamingASR.load(path, name, device, dtype)

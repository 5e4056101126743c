"""Voxtral Realtime (mistralai/Voxtral-Mini-4B-Realtime-2602; transformers' `VoxtralRealtimeForConditionalGeneration`,
model type `voxtral_realtime`): a causal audio encoder (causal convolutions, rotary sliding-window attention) and a
projector stacking 4 frames, whose embeddings are added to a Mistral LM's token embeddings, one text token per
80 ms, the LM's layers conditioned on the transcription delay. Offline transcription and a live `stream()` on the
model's own streaming path, token ids equal to transformers'. `detect` and `load` are this family's entry in
`transcribe.loading.FAMILIES`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "detect", "load"]

KIND = "Voxtral Realtime"
from .options import VoxtralRealtimeOptions as Options  # noqa: E402
from .options import VoxtralRealtimeStreamOptions as StreamOptions  # noqa: E402


def detect(path: Path) -> Optional[str]:
    """"gguf" for a transcribe.cpp GGUF file of the `voxtral_realtime` architecture; "transformers" for a directory
    whose config.json has model_type "voxtral_realtime"; else None."""
    if path.is_file():
        from ..gguf import architecture, is_gguf

        return "gguf" if is_gguf(path) and architecture(path) == "voxtral_realtime" else None
    cfg_path = path / "config.json"
    if not path.is_dir() or not cfg_path.is_file():
        return None
    try:
        if cfg_path.stat().st_size > (1 << 20):
            return None
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return "transformers" if isinstance(cfg, dict) and cfg.get("model_type") == "voxtral_realtime" else None


def load(path: Path, name: str, device, dtype, kind: str):
    if kind == "gguf":
        from .gguf import load_gguf

        return load_gguf(path, name, device, dtype)
    from .recognizer import VoxtralRealtimeASR

    return VoxtralRealtimeASR.load(path, name, device, dtype)

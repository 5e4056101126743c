"""IBM Granite Speech, the autoregressive audio-LLMs (transformers' `GraniteSpeechForConditionalGeneration` and
`GraniteSpeechPlusForConditionalGeneration`: granite-speech-3.3-2b/8b, granite-4.0-1b-speech,
granite-speech-4.1-2b, granite-speech-4.1-2b-plus): the shared conformer encoder (`ibm.conformer`), a BLIP-2
Q-Former projector, a Granite LM (`llm/`) with its LoRA adapter merged at load, prompted through its chat format;
greedy and beam search exact against transformers. `detect` and `load` are this family's entry in
`transcribe.loading.FAMILIES`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "detect", "load"]

# The family contract (loading.Family): the name in messages and the options of transcribe().
KIND = "Granite Speech"
from .options import GraniteSpeechOptions as Options  # noqa: E402
from .options import GraniteSpeechStreamOptions as StreamOptions  # noqa: E402  (a session cut at pauses)
# Batch jobs cut inputs longer than this into pieces at pauses (the default max_piece_s).
PIECE_S = 30.0


def detect(path: Path) -> Optional[str]:
    """"transformers" for a directory whose config.json has model_type granite_speech or granite_speech_plus;
    else None."""
    from .config import MODEL_TYPES

    cfg_path = path / "config.json"
    if not path.is_dir() or not cfg_path.is_file():
        return None
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return "transformers" if isinstance(cfg, dict) and cfg.get("model_type") in MODEL_TYPES else None


def load(path: Path, name: str, device, dtype, kind: str):
    from .recognizer import GraniteSpeechASR

    return GraniteSpeechASR.load(path, name, device, dtype)

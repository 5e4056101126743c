"""MedASR (google/medasr; transformers' `LasrForCTC`, model type "lasr_ctc"): a Conformer encoder with rotary
positions and a CTC head over a SentencePiece vocabulary, for English medical dictation; greedy CTC exact against
transformers, the shared CTC beam search, token and word times from the CTC frames. `detect` and `load` are this
family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "PIECE_S", "detect", "load"]

KIND = "MedASR"
from .options import MedASROptions as Options  # noqa: E402
StreamOptions = None
# Batch jobs cut inputs longer than this into pieces at pauses (transformers' pipeline chunks MedASR by 20 s).
PIECE_S = 20.0


def detect(path: Path) -> Optional[str]:
    """"transformers" for a directory whose config.json has model_type "lasr_ctc"; "gguf" for a transcribe.cpp
    GGUF file of architecture "medasr"; else None."""
    path = Path(path)
    if path.is_file():
        from ..gguf import architecture, is_gguf

        return "gguf" if is_gguf(path) and architecture(path) == "medasr" else None
    from ..json_files import config_of

    cfg = config_of(path)
    return "transformers" if cfg is not None and cfg.get("model_type") == "lasr_ctc" else None


def load(path: Path, name: str, device, dtype, kind: str):
    from .recognizer import MedASR

    if kind == "gguf":
        from .gguf import load_gguf

        return load_gguf(path, name, device, dtype)
    return MedASR.load(path, name, device, dtype)

"""NVIDIA Parakeet (NeMo FastConformer): the `.nemo` checkpoint, NeMo's front end, the conformer
encoder, the heads (TDT, RNN-T, CTC) and the recognizer. `detect` and `load` are this family's entry
in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional


def detect(path: Path) -> Optional[str]:
    """"nemo" for a directory with model_config.yaml or a .nemo file in it, and for any file (the
    last family asked: a file that is not a .nemo archive gets an error that says what it is); else None."""
    if path.is_file():
        return "nemo"
    if path.is_dir() and ((path / "model_config.yaml").exists() or any(path.glob("*.nemo"))):
        return "nemo"
    return None


def load(path: Path, name: str, device, dtype, kind: str):
    """The recognizer of a NeMo checkpoint (see `ParakeetASR.load`)."""
    from .recognizer import ParakeetASR

    return ParakeetASR.load(path, name, device, dtype)

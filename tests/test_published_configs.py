"""The published Parakeet checkpoints build from their configurations alone.

Each configuration under tests/configs/published/ is built with random (meta) weights; the parameter
count of every module must equal NeMo's for the same configuration (tests/references/nemo/
param_counts.json, made by tools/published_param_counts.py), and the total must be within 10% of the
published nominal size.
"""
from __future__ import annotations

import json

import pytest
import torch
import yaml

from transcribe.parakeet.model import ParakeetModel

from .conftest import REFS, REPO

COUNTS = json.loads((REFS / "param_counts.json").read_text())["models"]
REQUIRED = {
    "parakeet-tdt-0.6b-v2", "parakeet-tdt-0.6b-v3", "parakeet-tdt_ctc-110m",
    "parakeet-rnnt-0.6b", "parakeet-ctc-0.6b", "parakeet-tdt-1.1b",
}


def _count(module) -> int:
    return 0 if module is None else sum(p.numel() for p in module.parameters())


def test_all_published_models_listed():
    assert REQUIRED <= set(COUNTS)


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_builds_with_nemo_parameter_count(name):
    ref = COUNTS[name]
    cfg = yaml.safe_load((REPO / ref["config"]).read_text())
    with torch.device("meta"):
        model = ParakeetModel(cfg)
    got = {
        "encoder": _count(model.encoder),
        "decoder": _count(model.decoder),
        "joint": _count(model.joint),
        "ctc_decoder": _count(model.ctc_decoder),
    }
    want = {k: (v or 0) for k, v in ref["modules"].items()}
    assert got == want
    total = sum(got.values())
    assert total == ref["total"]
    assert abs(total / ref["nominal"] - 1.0) < 0.10
    assert model.encoder.d_model == ref["d_model"] and len(model.encoder.layers) == ref["n_layers"]
    assert model.preprocessor.n_mels == ref["n_mels"]
    assert model.vocab_size == ref["vocab_size"]
    if ref.get("tdt_durations"):
        assert model.durations == ref["tdt_durations"]

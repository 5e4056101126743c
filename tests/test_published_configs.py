"""The published Parakeet / Nemotron checkpoints build from their configurations alone.

Each configuration under tests/configs/published/ is built with random (meta) weights; the parameter
count of every module must equal NeMo's for the same configuration (tests/references/nemo/
param_counts.json, made by tools/published_param_counts.py), and the total must be within 10% of the
published nominal size. The streaming models (cache-aware encoders, the <EOU> model, the language
prompt of Nemotron 3.5) are among them.
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
    # cache-aware streaming models
    "parakeet_realtime_eou_120m-v1", "nemotron-speech-streaming-en-0.6b",
}
CONFIGS = REPO / "tests" / "configs" / "published"


def _count(module) -> int:
    return 0 if module is None else sum(p.numel() for p in module.parameters())


def _cfg(name: str) -> dict:
    return yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())


def test_all_published_models_listed():
    assert REQUIRED <= set(COUNTS)
    assert {p.stem for p in CONFIGS.glob("*.yaml")} == set(COUNTS)


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_builds_with_nemo_parameter_count(name):
    ref = COUNTS[name]
    cfg = yaml.safe_load((REPO / ref["config"]).read_text())
    with torch.device("meta"):
        model = ParakeetModel(cfg)
    got = {k: _count(getattr(model, k, None)) for k in ref["modules"]}
    want = {k: (v or 0) for k, v in ref["modules"].items()}
    assert got == want
    # nothing beyond NeMo's modules (the front end has buffers only)
    assert _count(model) == sum(got.values()) == ref["total"]
    assert abs(ref["total"] / ref["nominal"] - 1.0) < 0.10
    assert model.encoder.d_model == ref["d_model"] and len(model.encoder.layers) == ref["n_layers"]
    assert model.preprocessor.n_mels == ref["n_mels"]
    assert model.vocab_size == ref["vocab_size"]
    if ref.get("tdt_durations"):
        assert model.durations == ref["tdt_durations"]
    streaming = ref.get("streaming")
    if streaming:  # every lookahead is kept, the first is the default
        assert model.encoder.att_context_sizes == streaming["att_context_size"]
        assert model.encoder.att_context_size == streaming["att_context_size"][0]
        assert model.encoder.att_context_style == streaming["att_context_style"]
        assert model.encoder.pre_encode.causal == streaming["causal_downsampling"]


def test_eou_vocabulary_and_streaming_setup():
    """parakeet_realtime_eou_120m-v1: 1024 text pieces + <EOU> + <EOB>, blank 1026, [70, 1] chunked."""
    with torch.device("meta"):
        model = ParakeetModel(_cfg("parakeet_realtime_eou_120m-v1"))
    assert model.transducer == "rnnt" and model.vocab_size == 1026 and model.blank == 1026
    assert model.joint.joint_net[-1].out_features == 1027
    assert model.decoder.layers == 1
    assert model.encoder.att_context_size == [70, 1] and model.encoder.att_context_style == "chunked_limited"
    conv = model.encoder.layers[0].conv
    assert conv.context == (8, 0) and conv.norm_kind == "layer_norm"


def test_nemotron_lookahead_choices():
    """The multi-lookahead models keep NeMo's first entry as their default context."""
    for name, first in (("nemotron-speech-streaming-en-0.6b", [70, 13]),):
        cfg = _cfg(name)
        with torch.device("meta"):
            model = ParakeetModel(cfg)
        assert model.encoder.att_context_size == first
        assert model.frame_seconds(1) == pytest.approx(0.08)

"""The published Granite Speech NAR model (ibm-granite/granite-speech-4.1-2b-nar) builds from its
config.json alone.

tests/configs/published/granite-speech-4.1-2b-nar.json is the hub config in IBM's layout (the
field names of ../shared/models/granite-nar-tiny/config.json, the real model's sizes; what could be
confirmed is in granite-speech-4.1-2b-nar.md beside it). Built on the meta device (no weights), the
network must have exactly the published parameter count, 2,254,541,148: the projector's LayerNorms
carry no affine parameters here, as in the Hugging Face native model (IBM's checkpoint stores them
as exact identity, 28,672 numbers more). A setting the code does not implement is a ModelError.
"""
from __future__ import annotations

import copy
import json

import pytest
import torch

from transcribe.errors import ModelError
from transcribe.granite.config import parse_config
from transcribe.granite.model import GraniteNAR

from .conftest import REPO

CONFIG = REPO / "tests" / "configs" / "published" / "granite-speech-4.1-2b-nar.json"
PUBLISHED_PARAMETERS = 2_254_541_148


def _expected_parts() -> dict[str, int]:
    """Each part's count from the config's sizes, written out by hand (not by the model code)."""
    d, ff, heads, dh, ctx_pos = 1024, 4096, 8, 128, 512
    ln = 2 * d
    ffn = ln + (d * ff + ff) + (ff * d + d)
    attn = ln + d * heads * dh + d * 2 * heads * dh + (heads * dh * d + d) + (2 * ctx_pos + 1) * dh
    conv = ln + (d * 4 * d + 4 * d) + 2 * d * 15 + 2 * (2 * d) + (2 * d * d + d)  # up, depthwise, BatchNorm, down
    block = 2 * ffn + attn + conv + ln
    encoder = (160 * d + d) + 16 * block + (d * 348 + 348) + (348 * d + d) + (d * 100352 + 100352)

    h, m = 2048, 4096
    qformer_layer = 4 * (h * h + h) + (h * m + m) + (m * h + h)
    projector = (4 * d * h + h) + 3 * h + 15 * h + 2 * qformer_layer + (h * h + h)

    kv = 4 * 128
    lm_layer = 2 * h * h + 2 * h * kv + 3 * h * 4096 + 2 * h
    lm = 100352 * h + 40 * lm_layer + h  # embeddings (tied head), layers, final norm
    return {"encoder": encoder, "projector": projector, "language_model": lm}


def _config() -> dict:
    return json.loads(CONFIG.read_text())


@pytest.fixture(scope="module")
def model() -> GraniteNAR:
    with torch.device("meta"):
        return GraniteNAR(parse_config(_config()))


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_published_parameter_count(model):
    assert all(p.is_meta for p in model.parameters())
    assert _count(model) == PUBLISHED_PARAMETERS
    parts = {k: _count(getattr(model, k)) for k in ("encoder", "projector", "language_model")}
    assert parts == _expected_parts()
    assert sum(parts.values()) == PUBLISHED_PARAMETERS


def test_published_shapes(model):
    cfg = model.cfg
    assert cfg.layout == "ibm"
    assert cfg.blank_token_id == cfg.bpe_blank_channel == 100257 and cfg.bpe_id_offset == 0
    assert cfg.encoder_layer_indices == [4, 8, 12, -1] and model.encoder.tap_indices == [4, 8, 12, 16]
    assert cfg.min_edit_sequence_length == 8 and cfg.scale_projected_embeddings
    assert tuple(model.encoder.out_bpe.weight.shape) == (100352, 1024)
    assert tuple(model.encoder.out.weight.shape) == (348, 1024)
    assert len(model.encoder.layers) == 16
    lm = model.language_model
    assert tuple(lm.model.embed_tokens.weight.shape) == (100352, 2048)
    assert lm.lm_head is None and lm.head_weight() is lm.model.embed_tokens.weight  # tied
    assert len(lm.model.layers) == 40
    attn = lm.model.layers[0].self_attn
    assert (attn.heads, attn.kv_heads, attn.head_dim, attn.scale) == (16, 4, 128, 0.0078125)
    assert tuple(lm.model.layers[0].mlp.gate_proj.weight.shape) == (4096, 2048)
    t = cfg.text
    assert (t.embedding_multiplier, t.residual_multiplier, t.logits_scaling) == (12.0, 0.22, 8.0)
    assert (t.rope_theta, t.rms_norm_eps, t.max_position_embeddings, t.eos_token_id) == (10000.0, 1e-5, 4096, 100257)
    p = model.projector
    assert tuple(p.layer_projector.weight.shape) == (2048, 4 * 1024)
    assert tuple(p.query.shape) == (1, 3, 2048) and tuple(p.window_positions.shape) == (1, 15, 2048)
    assert len(p.qformer.layers) == 2 and p.qformer.layers[0].cross_attention.heads == 32


def _set(cfg: dict, path: str, value) -> dict:
    cfg = copy.deepcopy(cfg)
    *parents, key = path.split(".")
    node = cfg
    for k in parents:
        node = node[k]
    node[key] = value
    return cfg


@pytest.mark.parametrize("path, value, named", [
    ("text_config.hidden_act", "gelu", "hidden_act"),
    ("text_config.rope_parameters", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0}, "yarn"),
    ("text_config.attention_bias", True, "attention_bias"),
    ("text_config.sliding_window", 128, "sliding_window"),
    ("encoder_config.relative_attention_kind", "xl", "relative_attention_kind"),
    ("projector_config.use_self_attention", True, "use_self_attention"),
    ("unknown_top_level_setting", 1, "unknown_top_level_setting"),
    ("encoder_config.bpe_output_dim", 100353 + 1, "BPE head"),
])
def test_unimplemented_settings_are_model_errors(path, value, named):
    with pytest.raises(ModelError, match=named):
        parse_config(_set(_config(), path, value))


def test_config_parses_unchanged():
    """The mutations above are the only reason for those errors: the file itself parses."""
    assert parse_config(_config()).text.num_hidden_layers == 40

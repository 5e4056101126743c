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

from transcribe.parakeet.model import ParakeetModel, PromptKernel

from .conftest import REFS, REPO

COUNTS = json.loads((REFS / "param_counts.json").read_text())["models"]
REQUIRED = {
    "parakeet-tdt-0.6b-v2", "parakeet-tdt-0.6b-v3", "parakeet-tdt_ctc-110m",
    "parakeet-rnnt-0.6b", "parakeet-ctc-0.6b", "parakeet-tdt-1.1b",
    # cache-aware streaming models
    "parakeet_realtime_eou_120m-v1", "nemotron-speech-streaming-en-0.6b", "nemotron-3.5-asr-streaming-0.6b",
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
    if "prompt_kernel" in ref["modules"]:
        detail = ref["detail"]["prompt_kernel"]
        assert model.prompt_kernel.num_prompts == detail["num_prompts"]
        assert model.prompt_kernel[0].in_features == detail["in_features"]
        assert model.prompt_kernel[0].out_features == detail["hidden"]
    else:
        assert model.prompt_kernel is None


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
    for name, first in (("nemotron-speech-streaming-en-0.6b", [70, 13]), ("nemotron-3.5-asr-streaming-0.6b", [56, 3])):
        cfg = _cfg(name)
        with torch.device("meta"):
            model = ParakeetModel(cfg)
        assert model.encoder.att_context_size == first
        assert model.frame_seconds(1) == pytest.approx(0.08)


def _small_prompt_cfg() -> dict:
    """Nemotron 3.5's configuration, shrunk (2 layers of 64) so a test runs it with random weights."""
    cfg = _cfg("nemotron-3.5-asr-streaming-0.6b")
    cfg["encoder"].update(n_layers=2, d_model=64, n_heads=4, subsampling_conv_channels=16)
    cfg["model_defaults"].update(enc_hidden=64, pred_hidden=32, joint_hidden=32)
    cfg["decoder"]["prednet"]["pred_hidden"] = 32
    cfg["decoder"]["vocab_size"] = cfg["joint"]["num_classes"] = 40
    cfg["joint"]["jointnet"].update(encoder_hidden=64, pred_hidden=32, joint_hidden=32)
    return cfg


def test_language_prompt_is_nemo_concat_and_projection():
    """The prompt: one-hot of the language's index concatenated to every encoder frame, then
    Linear -> ReLU -> Linear, as NeMo's PromptStreamingMixin; 'auto' by default; per frame, so
    chunks of the encoder output give the same result as the whole."""
    model = ParakeetModel.random(_small_prompt_cfg(), seed=1)
    assert isinstance(model.prompt_kernel, PromptKernel)
    assert model.prompt_dictionary["en-US"] == 0 and model.prompt_dictionary["auto"] == 101
    assert model.prompt_dictionary["no"] == 27 and model.prompt_index("nb-NO") == 103
    enc = torch.randn(2, 64, 9, generator=torch.Generator().manual_seed(0))
    k = model.prompt_kernel
    for lang, idx in (("de-DE", 9), (None, 101), (5, 5)):
        one_hot = torch.zeros(2, 9, 128)
        one_hot[..., idx] = 1.0
        x = torch.cat([enc.transpose(1, 2), one_hot], -1)
        want = (torch.relu(x @ k[0].weight.T + k[0].bias) @ k[2].weight.T + k[2].bias).transpose(1, 2)
        got = model.apply_prompt(enc, lang)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        parts = torch.cat([model.apply_prompt(enc[:, :, :4], lang), model.apply_prompt(enc[:, :, 4:], lang)], 2)
        torch.testing.assert_close(parts, got, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="not in the model's prompt dictionary"):
        model.prompt_index("xx-XX")
    with pytest.raises(ValueError, match="outside"):
        model.prompt_index(128)
    audio = torch.randn(1, 8000, generator=torch.Generator().manual_seed(2)) * 0.1
    lengths = torch.tensor([8000])
    feats, flen = model.features(audio, lengths)
    with torch.no_grad():
        raw, raw_len = model.encoder(feats, flen)
    enc_auto, enc_len = model.encode(audio, lengths)
    assert torch.equal(enc_len, raw_len)
    torch.testing.assert_close(enc_auto, model.apply_prompt(raw, "auto"))
    enc_fr, _ = model.encode(audio, lengths, language="fr-FR")
    assert not torch.allclose(enc_fr, enc_auto)


def test_prompt_settings():
    """The prompt is built only where NeMo builds it; settings that cannot work are errors."""
    cfg = _small_prompt_cfg()
    cfg["model_defaults"]["initialize_prompt_feature"] = False
    assert ParakeetModel.random(cfg).prompt_kernel is None  # NeMo's concat stays off
    plain = _small_prompt_cfg()
    plain["target"] = "nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel"
    model = ParakeetModel.random(plain)
    assert model.prompt_kernel is None
    with pytest.raises(ValueError, match="no language prompt"):
        model.apply_prompt(torch.zeros(1, 64, 3), "en-US")
    bad = _small_prompt_cfg()
    bad["model_defaults"]["enc_hidden"] = 128
    with pytest.raises(ValueError, match="enc_hidden = 128 disagrees"):
        ParakeetModel(bad)
    bad = _small_prompt_cfg()
    bad["model_defaults"]["prompt_dictionary"]["xx-XX"] = 200
    with pytest.raises(ValueError, match="prompt_dictionary"):
        ParakeetModel(bad)


def test_random_model_from_published_yaml():
    """`ParakeetModel.random` builds a published architecture with random weights (for benchmarks)."""
    model = ParakeetModel.random(CONFIGS / "parakeet_realtime_eou_120m-v1.yaml", seed=0)
    again = ParakeetModel.random(CONFIGS / "parakeet_realtime_eou_120m-v1.yaml", seed=0)
    assert not model.training and not any(p.is_meta for p in model.parameters())
    w = model.encoder.layers[3].self_attn.linear_q.weight
    assert torch.equal(w, again.encoder.layers[3].self_attn.linear_q.weight)
    audio = torch.randn(1, 16000, generator=torch.Generator().manual_seed(0)) * 0.1
    enc, enc_len = model.encode(audio, torch.tensor([16000]))
    assert enc.shape == (1, 512, 14) and int(enc_len[0]) == 14  # 101 mel frames, causal subsampling
    assert torch.isfinite(enc).all()

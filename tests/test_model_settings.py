"""A model file setting the code does not implement is a ModelError naming the file and the setting;
settings that do not change inference are accepted; every shipped model still loads.

Broken models are made from the real ones: a tiny .nemo re-tarred with an edited config, the
synthetic CTranslate2 model.bin of test_ctranslate2, a copy of the transformers test model, a small
random openai-whisper .pt.
"""
from __future__ import annotations

import argparse
import copy
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
import torch
import yaml

import transcribe
from transcribe.errors import ModelError
from transcribe.nemo import checkpoint as nemo_checkpoint
from transcribe.parakeet.config import HARMLESS_KEYS
from transcribe.whisper.checkpoints.ctranslate2 import HARMLESS_FLAGS, read_ctranslate2
from transcribe.whisper.checkpoints.openai_pt import read_openai_pt
from transcribe.whisper.checkpoints.transformers import HARMLESS_CONFIG, read_transformers_whisper
from transcribe.whisper.model import Whisper, WhisperDims

from .conftest import AUDIO, MODELS, TINY
from .test_ctranslate2 import _serialize, _synthetic_ct2

HF_RANDOM = MODELS / "whisper-hf-random"
CTC = TINY / "tiny-ctc-fit.nemo"
TDT = TINY / "tiny-tdt-fit.nemo"
RNNT = TINY / "tiny-rnnt-fit.nemo"
HYBRID = TINY / "tiny-hybrid-tdt-ctc-fit.nemo"


# ------------------------------------------------------------------------------------------
# .nemo files with an edited config


def _members(src: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(src) as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar.getmembers()]


def _write_tar(dst: Path, members: list[tuple[tarfile.TarInfo, bytes]], mode: str = "w") -> Path:
    with tarfile.open(dst, mode) as tar:
        for info, data in members:
            info = copy.copy(info)
            if info.isfile():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return dst


def _nemo_with(tmp_path: Path, src: Path, edit, name: str = "edited.nemo", replace: dict | None = None) -> Path:
    """A copy of `src` whose config `edit(cfg)` changed (and members named in `replace` swapped)."""
    out = []
    for info, data in _members(src):
        base = Path(info.name).name
        if base == "model_config.yaml":
            cfg = yaml.safe_load(data)
            edit(cfg)
            data = yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True).encode()
        elif replace and base in replace:
            data = replace[base]
        out.append((info, data))
    return _write_tar(tmp_path / name, out)


def _set(path: str, value):
    """An edit setting cfg[a][b]... = value ("a.b.c"); value DELETE removes the key."""
    def edit(cfg):
        *parents, key = path.split(".")
        d = cfg
        for p in parents:
            d = d[p]
        if value is DELETE:
            del d[key]
        else:
            d[key] = value
    return edit


DELETE = object()

# (model, setting, value, what the message says)
NEMO_ERRORS = [
    # preprocessor
    (CTC, "preprocessor.no_such_key", 1, r"preprocessor\.no_such_key = 1"),
    (CTC, "preprocessor._target_", "nemo.collections.asr.modules.AudioToMFCCPreprocessor", r"preprocessor\._target_"),
    (CTC, "preprocessor.mel_norm", None, r"preprocessor\.mel_norm = None"),
    (CTC, "preprocessor.use_torchaudio", True, r"preprocessor\.use_torchaudio = True"),
    (CTC, "preprocessor.stft_conv", True, r"preprocessor\.stft_conv"),
    (CTC, "preprocessor.frame_splicing", 3, r"preprocessor\.frame_splicing = 3"),
    (CTC, "preprocessor.normalize", "fixed_mean", r"preprocessor\.normalize = 'fixed_mean'"),
    (CTC, "preprocessor.pad_to", "max", r"preprocessor\.pad_to = 'max'"),
    (CTC, "preprocessor.window", "kaiser", r"preprocessor\.window = 'kaiser'"),
    (CTC, "preprocessor.log_zero_guard_type", "max", r"preprocessor\.log_zero_guard_type"),
    (CTC, "preprocessor.log_zero_guard_value", "huge", r"preprocessor\.log_zero_guard_value"),
    (CTC, "preprocessor.n_window_size", 400, r"window_size and n_window_size"),
    (CTC, "sample_rate", 8000, r"sample_rate = 8000 disagrees"),
    (CTC, "target", "nemo.collections.asr.models.EncDecClassificationModel", r"target = .*EncDecClassificationModel"),
    (CTC, "tokenizer.type", "wpe", r"tokenizer\.type = 'wpe' is not implemented"),
    # encoder
    (CTC, "encoder.no_such_key", [1, 2], r"encoder\.no_such_key = \[1, 2\]"),
    (CTC, "encoder._target_", "nemo.collections.asr.modules.SqueezeformerEncoder", r"encoder\._target_"),
    (CTC, "encoder.global_tokens", 4, r"encoder\.global_tokens = 4"),
    (CTC, "encoder.self_attention_model", "abs_pos", r"encoder\.self_attention_model = 'abs_pos'"),
    (CTC, "encoder.untie_biases", False, r"encoder\.untie_biases = False"),
    (CTC, "encoder.feat_out", 32, r"encoder\.feat_out = 32"),
    (CTC, "encoder.conv_norm_type", "group_norm", r"encoder\.conv_norm_type = 'group_norm'"),
    (CTC, "encoder.subsampling", "vggnet", r"encoder\.subsampling = 'vggnet'"),
    (CTC, "encoder.subsampling_factor", 6, r"encoder\.subsampling_factor = 6"),
    (CTC, "encoder.att_context_style", "chunked_unlimited", r"encoder\.att_context_style"),
    (CTC, "encoder.n_heads", 3, r"encoder\.n_heads = 3"),
    (CTC, "encoder.conv_context_size", [2, 2], r"encoder\.conv_context_size = \[2, 2\]"),
    (CTC, "encoder.feat_in", 80, r"encoder\.feat_in = 80 disagrees with preprocessor\.features = 128"),
    # a key left out means NeMo's default (conv_kernel_size 31), not the checkpoint's 9: shapes disagree
    (CTC, "encoder.conv_kernel_size", DELETE, r"depthwise_conv\.weight has shape"),
    # CTC head
    (CTC, "decoder.add_blank", False, r"decoder\.add_blank = False"),
    (CTC, "decoder.no_such_key", "x", r"decoder\.no_such_key = 'x'"),
    (CTC, "decoder._target_", "nemo.collections.asr.modules.ConvASRDecoderClassification", r"decoder\._target_"),
    (HYBRID, "aux_ctc.decoder.add_blank", False, r"aux_ctc\.decoder\.add_blank = False"),
    (HYBRID, "aux_ctc.decoder.no_such_key", 1, r"aux_ctc\.decoder\.no_such_key = 1"),
    (HYBRID, "aux_ctc.decoder._target_", "Foo", r"aux_ctc\.decoder\._target_ = 'Foo'"),
    (HYBRID, "aux_ctc.no_such_key", 1, r"aux_ctc\.no_such_key = 1"),
    # transducer
    (TDT, "decoder.normalization_mode", "layer", r"decoder\.normalization_mode = 'layer'"),
    (TDT, "decoder.blank_as_pad", False, r"decoder\.blank_as_pad = False"),
    (TDT, "decoder.no_such_key", 1, r"decoder\.no_such_key = 1"),
    (TDT, "decoder._target_", "nemo.collections.asr.modules.StatelessTransducerDecoder", r"decoder\._target_"),
    (TDT, "decoder.prednet.rnn_hidden_size", 64, r"decoder\.prednet\.rnn_hidden_size = 64"),
    (TDT, "decoder.prednet.norm", "layer", r"decoder\.prednet\.norm = 'layer'"),
    (TDT, "joint._target_", "nemo.collections.asr.modules.SampledRNNTJoint", r"joint\._target_"),
    (TDT, "joint.no_such_key", 1, r"joint\.no_such_key = 1"),
    (TDT, "joint.jointnet.no_such_key", 1, r"joint\.jointnet\.no_such_key = 1"),
    (TDT, "joint.jointnet.activation", "gelu", r"joint\.jointnet\.activation = 'gelu' is not implemented"),
    (TDT, "decoding.big_blank_durations", [2, 4], r"decoding\.big_blank_durations = \[2, 4\]"),
    (TDT, "decoding.model_type", "multiblank", r"decoding\.model_type = 'multiblank'"),
    (RNNT, "decoding.durations", [0, 1, 2], r"durations = \[0, 1, 2\]"),
    (RNNT, "decoding.model_type", "tdt", r"decoding\.model_type = 'tdt'"),
]


@pytest.mark.parametrize("src, setting, value, match",
                         [pytest.param(*c, id=f"{c[0].stem}-{c[1]}") for c in NEMO_ERRORS])
def test_nemo_setting_not_implemented_is_an_error(tmp_path, src, setting, value, match):
    p = _nemo_with(tmp_path, src, _set(setting, value))
    with pytest.raises(ModelError, match=r"edited\.nemo: .*" + match):
        transcribe.load_model(str(p))


def test_nemo_reduction(tmp_path):
    """Time reduction in the encoder (reduction with reduction_factor > 1) is not implemented; a
    reduction named with factor 1 is inactive in NeMo too."""
    def edit(factor):
        def f(cfg):
            cfg["encoder"].update(reduction="pooling", reduction_position=1, reduction_factor=factor)
        return f
    with pytest.raises(ModelError, match=r"edited\.nemo: .*encoder\.reduction = 'pooling' \(reduction_factor 2\)"):
        transcribe.load_model(str(_nemo_with(tmp_path, CTC, edit(2))))
    transcribe.load_model(str(_nemo_with(tmp_path, CTC, edit(1), name="factor1.nemo")))


# Values for the harmless keys, none of them the default.
_HARMLESS_VALUES = {
    "dither": 0.5, "rng": 7, "nb_augmentation_prob": 0.5, "nb_max_freq": 3000,
    "dropout": 0.3, "dropout_pre_encoder": 0.3, "dropout_emb": 0.3, "dropout_att": 0.3,
    "stochastic_depth_drop_prob": 0.5, "stochastic_depth_mode": "uniform", "stochastic_depth_start_layer": 2,
    "att_context_probs": [1.0], "subsampling_conv_chunking_factor": -1, "use_pytorch_sdpa": True,
    "use_pytorch_sdpa_backends": ["flash"], "sync_max_audio_length": False, "reduction_position": 1,
    "global_tokens_spacing": 2, "global_attn_separate": True, "random_state_sampling": True, "t_max": 10,
    "forget_gate_bias": 2.0, "weights_init_scale": 0.5, "hidden_hidden_bias_scale": 0.5,
    "log_softmax": True, "preserve_memory": True, "fuse_loss_wer": True, "fused_batch_size": 8,
    "experimental_fuse_loss_wer": True, "masking_prob": 0.2, "vocabulary": ["a"], "init_mode": "xavier_normal",
    "ctc_loss_weight": 0.9, "use_cer": True, "ctc_reduction": "sum", "decoding": {"strategy": "beam"},
}
_SECTIONS = {"preprocessor": "preprocessor", "encoder": "encoder", "decoder": "decoder",
             "decoder.prednet": "decoder.prednet", "joint": "joint", "ctc": "aux_ctc.decoder", "aux_ctc": "aux_ctc"}


def _section(cfg: dict, path: str) -> dict:
    for p in path.split("."):
        cfg = cfg[p]
    return cfg


def test_harmless_nemo_settings_are_accepted_and_change_nothing(tmp_path):
    """Every key HARMLESS_KEYS lists, set to a value other than NeMo's default, loads and gives the
    model's own features, encoder output and transcript."""
    assert set(HARMLESS_KEYS) == set(_SECTIONS)

    def edit(cfg):
        for table, path in _SECTIONS.items():
            sec = _section(cfg, path)
            for key in HARMLESS_KEYS[table]:
                sec[key] = _HARMLESS_VALUES[key]

    p = _nemo_with(tmp_path, HYBRID, edit)
    a, b = transcribe.load_model(str(HYBRID)), transcribe.load_model(str(p))
    audio = torch.randn(1, 16000, generator=torch.Generator().manual_seed(0)) * 0.1
    lengths = torch.tensor([16000])
    fa, fb = a.model.features(audio, lengths), b.model.features(audio, lengths)
    assert torch.equal(fa[0], fb[0]) and torch.equal(fa[1], fb[1])
    ea, eb = a.model.encode(audio, lengths), b.model.encode(audio, lengths)
    assert torch.equal(ea[0], eb[0])
    wav = str(AUDIO / "jfk.wav")
    assert a.transcribe(wav).text == b.transcribe(wav).text


def test_nemo_gzip_archive_still_loads(tmp_path):
    """Older NeMo versions wrote gzip'd .nemo archives: their members are bounded by deflate's ratio."""
    p = _write_tar(tmp_path / "gz.nemo", _members(CTC), mode="w:gz")
    assert transcribe.load_model(str(p)).heads == ["ctc"]


# ------------------------------------------------------------------------------------------
# .nemo reading: weights with Python objects, reading limits


def _pickled_objects() -> bytes:
    buf = io.BytesIO()
    torch.save({"encoder.w": torch.zeros(2), "args": argparse.Namespace(lr=0.1)}, buf)
    return buf.getvalue()


def test_nemo_weights_with_python_objects(tmp_path):
    p = _nemo_with(tmp_path, CTC, lambda cfg: None, replace={"model_weights.ckpt": _pickled_objects()})
    with pytest.raises(ModelError, match=r"edited\.nemo: model_weights\.ckpt holds Python objects other than tensors "
                                         r"\(argparse\.Namespace\), which are not loaded \(weights_only\)"):
        transcribe.load_model(str(p))
    # the same in an unpacked directory
    d = tmp_path / "unpacked"
    d.mkdir()
    with tarfile.open(CTC) as tar:
        (d / "model_config.yaml").write_bytes(tar.extractfile("./model_config.yaml").read())
    (d / "model_weights.ckpt").write_bytes(_pickled_objects())
    with pytest.raises(ModelError, match=r"unpacked: model_weights\.ckpt holds Python objects other than tensors"):
        nemo_checkpoint.read_nemo(d)


def test_nemo_config_and_tokenizer_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(nemo_checkpoint, "MAX_SMALL_MEMBER", 2000)  # the config is 2541 bytes
    with pytest.raises(ModelError, match=r"ctc-fit\.nemo: the config file model_config\.yaml is 2541 bytes, "
                                         r"more than a config may have"):
        nemo_checkpoint.read_nemo(CTC)
    monkeypatch.setattr(nemo_checkpoint, "MAX_SMALL_MEMBER", 4000)
    tok = next(Path(m.name).name for m, _ in _members(CTC) if m.name.endswith("_tokenizer.model"))
    p = _nemo_with(tmp_path, CTC, lambda cfg: None, replace={tok: b"\0" * 5000})
    with pytest.raises(ModelError, match=r"edited\.nemo: the tokenizer file \w+_tokenizer\.model is 5000 bytes"):
        nemo_checkpoint.read_nemo(p)
    assert nemo_checkpoint.MAX_SMALL_MEMBER == 4000 and nemo_checkpoint.read_nemo(CTC).tokenizer


def test_nemo_member_larger_than_the_archive(tmp_path):
    """A header declaring more bytes than the file holds is an error before anything is read."""
    cfg_data = next(d for m, d in _members(CTC) if m.name.endswith("model_config.yaml"))
    info = tarfile.TarInfo("model_config.yaml")
    info.size = len(cfg_data)
    huge = tarfile.TarInfo("model_weights.ckpt")
    huge.size = 1 << 32  # 4 GiB declared, 1 kB present
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        tar.addfile(info, io.BytesIO(cfg_data))
    body = raw.getvalue().rstrip(b"\0")
    body += b"\0" * (-len(body) % 512)
    p = tmp_path / "huge.nemo"
    p.write_bytes(body + huge.tobuf(format=tarfile.USTAR_FORMAT) + b"\x80" * 1024)
    with pytest.raises(ModelError, match=r"huge\.nemo: corrupt or truncated \.nemo archive \(model_weights\.ckpt "
                                         r"declares 4294967296 bytes, more than the archive"):
        nemo_checkpoint.read_nemo(p)


# ------------------------------------------------------------------------------------------
# every shipped model still loads


@pytest.mark.parametrize("path", sorted(TINY.glob("*.nemo")) + sorted(MODELS.glob("*.nemo")), ids=lambda p: p.stem)
def test_shipped_nemo_models_load(path):
    assert transcribe.load_model(str(path)).heads


@pytest.mark.parametrize("name", ["whisper-ct2-random-float16", "whisper-ct2-random-int8"])
def test_shipped_ctranslate2_models_load(tmp_path, default_whisper_dir, name):
    for f in ("model.bin", "config.json"):
        shutil.copy(MODELS / name / f, tmp_path / f)
    shutil.copy(default_whisper_dir / "tokenizer.json", tmp_path / "tokenizer.json")
    config, sd, _ = read_ctranslate2(tmp_path)
    assert config["dims"]["n_text_head"] == 4 and "decoder.token_embedding.weight" in sd


def test_default_and_transformers_models_load(default_whisper_dir):
    assert read_ctranslate2(default_whisper_dir)[0]["dims"]["n_text_head"] == 6
    assert read_transformers_whisper(HF_RANDOM)[0]["dims"]["n_text_head"] == 4


# ------------------------------------------------------------------------------------------
# CTranslate2


def _ct2_dir(tmp_path: Path, variables: dict, config: dict | None = None, name: str = "ct2") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "model.bin").write_bytes(_serialize(variables, {}))
    (d / "config.json").write_text(json.dumps({"suppress_ids": [1, 2]} if config is None else config))
    (d / "tokenizer.json").write_text('{"model": {}}')
    return d


def test_ct2_synthetic_model_loads_with_harmless_flags(tmp_path):
    v = _synthetic_ct2()
    v["decoder/projection/weight"] = v["decoder/embeddings/weight"].clone()
    v["decoder/projection/bias"] = torch.zeros(v["decoder/embeddings/weight"].shape[0])
    for name in HARMLESS_FLAGS:
        v[name] = torch.tensor(1, dtype=torch.int8)
    v["decoder/layer_0/ffn/linear_0/keep_in_float32"] = torch.tensor(1, dtype=torch.int8)
    v["decoder/pre_norm"] = torch.tensor(1, dtype=torch.int8)
    config, sd, _ = read_ctranslate2(_ct2_dir(tmp_path, v, {"suppress_ids": [1], "layer_norm_epsilon": 1e-5}))
    assert config["dims"]["n_text_head"] == 4


def _flag(value, dtype=torch.int8):
    return torch.tensor(value, dtype=dtype)


CT2_ERRORS = [
    ("decoder/activation", _flag(0), r"decoder/activation = 0 is not implemented \(only 3\)"),
    ("decoder/pre_norm", _flag(0), r"decoder/pre_norm = 0"),
    ("decoder/scale_embeddings", _flag(1), r"decoder/scale_embeddings = 1"),
    ("decoder/alibi", _flag(1), r"decoder/alibi = 1"),
    ("decoder/start_from_zero_embedding", _flag(1), r"decoder/start_from_zero_embedding = 1"),
    ("decoder/layernorm_embedding/gamma", torch.ones(64), r"holds decoder/layernorm_embedding/gamma, which this code"),
    ("decoder/scale_outputs", torch.tensor(2.0), r"holds decoder/scale_outputs"),
    ("encoder/layer_0/self_attention/relative_position_keys", torch.zeros(5, 16), r"holds .*relative_position_keys"),
    ("decoder/projection/bias", torch.ones(50), r"decoder/projection/bias is not zero"),
    ("decoder/projection/weight", None, r"the output projection decoder/projection/weight differs from the token embedding"),
    ("encoder/num_heads", None, r"has no integer encoder/num_heads; the head count is not guessed"),
    ("decoder/num_heads", None, r"has no integer decoder/num_heads"),
]


@pytest.mark.parametrize("name, value, match", CT2_ERRORS, ids=[c[0] for c in CT2_ERRORS])
def test_ct2_setting_not_implemented_is_an_error(tmp_path, name, value, match):
    v = _synthetic_ct2()
    if name == "decoder/projection/weight":
        value = v["decoder/embeddings/weight"] + 0.01
    if name == "decoder/projection/bias":
        v["decoder/projection/weight"] = v["decoder/embeddings/weight"]
    if value is None:
        del v[name]
    else:
        v[name] = value
    with pytest.raises(ModelError, match=r"ct2/model\.bin: " + match):
        read_ctranslate2(_ct2_dir(tmp_path, v))


@pytest.mark.parametrize("config, match", [
    ({"no_such_key": 1}, r"config\.json: no_such_key = 1 is a setting this code does not implement"),
    ({"layer_norm_epsilon": 1e-6}, r"config\.json: layer_norm_epsilon = 1e-06 is not implemented"),
    ({"alignment_heads": [[1, 0]]}, r"config\.json: unreadable alignment_heads \(head \[1, 0\] outside 1 layers"),
    ({"suppress_ids": [1, 50]}, r"config\.json: suppress_ids holds \[50\], not token ids of the vocabulary of 50"),
    ({"lang_ids": "en"}, r"config\.json: lang_ids holds str, not token ids"),
])
def test_ct2_config_not_implemented_or_not_fitting_is_an_error(tmp_path, config, match):
    with pytest.raises(ModelError, match=match):
        read_ctranslate2(_ct2_dir(tmp_path, _synthetic_ct2(), config))


def test_ct2_int8_projection_quantized_apart_is_tied(tmp_path):
    """int8 embedding and projection quantized separately from one matrix agree within a step."""
    from .test_ctranslate2 import _quantize_int8

    v = _synthetic_ct2()
    emb = v["decoder/embeddings/weight"]
    v["decoder/embeddings/weight"], v["decoder/embeddings/weight_scale"] = _quantize_int8(emb)
    v["decoder/projection/weight"], v["decoder/projection/weight_scale"] = _quantize_int8(emb * (1 + 1e-7))
    read_ctranslate2(_ct2_dir(tmp_path, v))
    v["decoder/projection/weight"], v["decoder/projection/weight_scale"] = _quantize_int8(emb * 1.2)
    with pytest.raises(ModelError, match=r"decoder/projection/weight differs from the token embedding"):
        read_ctranslate2(_ct2_dir(tmp_path, v, name="apart"))


# ------------------------------------------------------------------------------------------
# transformers


def _hf_copy(tmp_path: Path, cfg_edit=None, name: str = "hf") -> Path:
    d = tmp_path / name
    shutil.copytree(HF_RANDOM, d)
    if cfg_edit:
        cfg = json.loads((d / "config.json").read_text())
        cfg_edit(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("key, value, match", [
    ("scale_embedding", True, r"scale_embedding = True is not implemented \(only False\)"),
    ("activation_function", "relu", r"activation_function 'relu' not supported"),
    ("layer_norm_eps", 1e-6, r"layer_norm_eps = 1e-06 is a setting this code does not implement"),
    ("quantization_config", {"quant_method": "bitsandbytes"}, r"quantization_config = .* is a setting"),
    ("median_filter_width", 5, r"median_filter_width = 5 is not implemented \(only 7\)"),
    ("is_encoder_decoder", False, r"is_encoder_decoder = False"),
    ("pruned_heads", {"0": [1]}, r"pruned_heads"),
    ("decoder_ffn_dim", 32, r"decoder_ffn_dim 32 is not 4 x d_model"),
])
def test_transformers_config_not_implemented_is_an_error(tmp_path, key, value, match):
    d = _hf_copy(tmp_path, lambda cfg: cfg.__setitem__(key, value))
    with pytest.raises(ModelError, match=r"hf.*: " + match):
        transcribe.load_model(str(d))


def test_transformers_harmless_config_keys_are_accepted(tmp_path):
    def edit(cfg):
        for key in HARMLESS_CONFIG:
            cfg.setdefault(key, None)
        cfg.update(dropout=0.3, num_beams=5, forced_decoder_ids=[[1, 50259]], use_cache=False)
    assert read_transformers_whisper(_hf_copy(tmp_path, edit))[0]["dims"]["n_text_layer"] == 2


def _hf_weights(d: Path, edit) -> None:
    from safetensors.torch import load_file, save_file

    sd = load_file(str(HF_RANDOM / "model.safetensors"))
    edit(sd)
    save_file({k: v.contiguous() for k, v in sd.items()}, str(d / "model.safetensors"))


def test_transformers_untied_output_projection(tmp_path):
    d = _hf_copy(tmp_path)
    _hf_weights(d, lambda sd: sd.__setitem__("proj_out.weight", sd["model.decoder.embed_tokens.weight"] * 2))
    with pytest.raises(ModelError, match=r"hf: the output projection proj_out\.weight differs from the token embedding"):
        transcribe.load_model(str(d))
    # tie_word_embeddings false: proj_out must be there (and equal the embedding)
    d = _hf_copy(tmp_path, lambda cfg: cfg.__setitem__("tie_word_embeddings", False), name="untied")
    with pytest.raises(ModelError, match=r"untied: config\.json has tie_word_embeddings = false, but the weights have "
                                         r"no proj_out\.weight"):
        transcribe.load_model(str(d))
    _hf_weights(d, lambda sd: sd.__setitem__("proj_out.weight", sd["model.decoder.embed_tokens.weight"].clone()))
    assert read_transformers_whisper(d)[0]["dims"]["n_vocab"] == 51864


def test_transformers_bin_with_python_objects(tmp_path):
    d = _hf_copy(tmp_path)
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(_pickled_objects())
    with pytest.raises(ModelError, match=r"pytorch_model\.bin: holds Python objects other than tensors "
                                         r"\(argparse\.Namespace\), which are not loaded \(weights_only\); "
                                         r"not a plain checkpoint"):
        transcribe.load_model(str(d))


# ------------------------------------------------------------------------------------------
# openai-whisper .pt


_DIMS = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=16, n_audio_head=4, n_audio_layer=2,
             n_vocab=51864, n_text_ctx=448, n_text_state=16, n_text_head=4, n_text_layer=2)


def _random_whisper(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    return {k: torch.randn_like(v) * 0.1 for k, v in Whisper(WhisperDims(**_DIMS)).state_dict().items()}


def test_openai_pt_extra_dims_is_an_error(tmp_path, default_whisper_dir):
    shutil.copy(default_whisper_dir / "tokenizer.json", tmp_path / "tokenizer.json")
    torch.save({"dims": dict(_DIMS, n_audio_kernel=5), "model_state_dict": _random_whisper()}, tmp_path / "m.pt")
    with pytest.raises(ModelError, match=r"m\.pt: dims n_audio_kernel = 5: not a dimension of openai-whisper's model"):
        transcribe.load_model(str(tmp_path / "m.pt"))


def test_openai_pt_with_python_objects(tmp_path):
    (tmp_path / "m.pt").write_bytes(_pickled_objects())
    with pytest.raises(ModelError, match=r"m\.pt: holds Python objects other than tensors \(argparse\.Namespace\)"):
        transcribe.load_model(str(tmp_path / "m.pt"))
    torch.save({"dims": _DIMS, "model_state_dict": _random_whisper(), "args": argparse.Namespace()}, tmp_path / "n.pt")
    with pytest.raises(ModelError, match=r"n\.pt: holds Python objects other than tensors"):
        read_openai_pt(tmp_path / "n.pt")


def test_key_bias_is_dropped_and_changes_nothing(tmp_path, default_whisper_dir):
    """A key bias adds q.b to every score of a query: the softmax, and so the model, is the same
    without it. Checked against a model that applies the bias, for a .pt and a transformers file."""
    shutil.copy(default_whisper_dir / "tokenizer.json", tmp_path / "tokenizer.json")
    sd = _random_whisper(1)
    g = torch.Generator().manual_seed(2)
    biased = dict(sd)
    for k in [k for k in sd if k.endswith(".key.weight")]:
        biased[k[: -len("weight")] + "bias"] = torch.randn(16, generator=g)
    torch.save({"dims": _DIMS, "model_state_dict": biased}, tmp_path / "biased.pt")
    asr = transcribe.load_model(str(tmp_path / "biased.pt"))

    ref = Whisper(WhisperDims(**_DIMS))
    for m in ref.modules():
        if hasattr(m, "key") and isinstance(m.key, torch.nn.Linear):
            m.key = torch.nn.Linear(16, 16, bias=True)
    ref.load_state_dict(biased)
    mel = torch.randn(1, 80, 3000, generator=g)
    tokens = torch.tensor([[50257, 50362, 400, 401]])
    with torch.no_grad():
        enc_a, enc_r = asr.model.encoder(mel), ref.encoder(mel)
        torch.testing.assert_close(enc_a, enc_r, atol=1e-5, rtol=1e-5)
        cross_a, cross_r = asr.model.decoder.cross_kv(enc_a), ref.decoder.cross_kv(enc_r)
        la = asr.model.decoder(tokens, cross_a)[0]
        lr = ref.decoder(tokens, cross_r)[0]
        torch.testing.assert_close(la, lr, atol=1e-4, rtol=1e-4)
        assert (ref.decoder.blocks[0].cross_attn.key.bias != 0).all()  # the reference does apply it

"""A Cohere Transcribe checkpoint directory (transformers' `cohere_asr` layout: config.json,
processor_config.json or preprocessor_config.json, model.safetensors) read and checked.

The model is NeMo's FastConformer encoder, a linear map to the decoder's width, NeMo's pre-LN Transformer
decoder and an untied output head; the config's fields are transformers' names for them, mapped here to
the shared NeMo building blocks' configs (`nemo.config.EncoderConfig`, `nemo.transformer.DecoderConfig`).
A field with a value this code does not implement is an error naming it, never run as something else."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

from ..json_files import read_optional as read_json  # noqa: F401  (checkpoint.py reads it here)
from ..nemo.config import DecoderConfig, EncoderConfig, FrontEndConfig, check_sizes, short

MODEL_TYPE = "cohere_asr"
ENCODER_TYPE = "parakeet_encoder"
ACTIVATIONS = ("relu", "gelu", "silu", "swish")
# The largest sizes a config may give (far above the published model: 8 layers of 1024, 16,384 pieces,
# 1,024 positions), so a hostile file is refused before a module is built.
SIZE_MAXIMA = {"hidden_size": 16384, "intermediate_size": 65536, "num_hidden_layers": 256,
               "num_attention_heads": 256, "max_position_embeddings": 1 << 16, "vocab_size": 1 << 20}
# The feature extractor's defaults (transformers' `CohereAsrFeatureExtractor`).
FEATURE_DEFAULTS = {"feature_size": 128, "sampling_rate": 16000, "hop_length": 160, "n_fft": 512, "win_length": 400,
                    "preemphasis": 0.97, "padding_value": 0.0, "dither": 1e-5}


@dataclass(frozen=True)
class CohereConfig:
    sample_rate: int
    preprocessor: FrontEndConfig
    dither: float               # the deterministic dither's scale (0: none)
    encoder: EncoderConfig
    decoder: DecoderConfig
    pad: int
    eos: int
    bos: int
    decoder_start: Optional[int]  # generation's decoder_start_token_id (the id of "▁" in the published model)
    tie: bool = False             # tie_word_embeddings: the head's weight is the token embedding (false published)


def _int(section: str, cfg: dict, key: str, default=None, least: int = 1) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{section}{key} = {short(value)} is not a whole number >= {least}")
    most = SIZE_MAXIMA.get(key)
    if most is not None and value > most:
        raise ValueError(f"{section}{key} = {short(value)} is out of the range this code accepts (at most {most})")
    return value


def _require(section: str, cfg: dict, key: str, allowed: tuple, default=None):
    value = cfg.get(key, default)
    if value not in allowed:
        raise ValueError(f"{section}{key} = {short(value)} is not implemented ({', '.join(map(str, allowed))})")
    return value


def encoder_config(enc: dict, n_mels: int) -> EncoderConfig:
    """transformers' `parakeet_encoder` config -> NeMo's encoder settings."""
    s = "encoder_config."
    _require(s, enc, "model_type", (ENCODER_TYPE,), ENCODER_TYPE)
    _require(s, enc, "hidden_act", ("silu", "swish"), "silu")
    _require(s, enc, "subsampling_conv_kernel_size", (3,), 3)
    _require(s, enc, "subsampling_conv_stride", (2,), 2)
    bias = _require(s, enc, "attention_bias", (True, False), True)
    _require(s, enc, "convolution_bias", (bias,), True)
    d = _int(s, enc, "hidden_size")
    heads = _int(s, enc, "num_attention_heads")
    kv = enc.get("num_key_value_heads", heads)
    if kv != heads:
        raise ValueError(f"{s}num_key_value_heads = {short(kv)} is not implemented (only num_attention_heads, {heads})")
    ff = _int(s, enc, "intermediate_size")
    if ff % d:
        raise ValueError(f"{s}intermediate_size = {ff} is not a multiple of hidden_size {d}")
    if _int(s, enc, "num_mel_bins", 128) != n_mels:
        raise ValueError(f"{s}num_mel_bins = {short(enc.get('num_mel_bins'))} disagrees with the feature extractor's "
                         f"feature_size {n_mels}")
    return EncoderConfig(feat_in=n_mels, n_layers=_int(s, enc, "num_hidden_layers"), d_model=d, n_heads=heads,
                         ff_expansion_factor=ff // d, subsampling="dw_striding",
                         subsampling_factor=_int(s, enc, "subsampling_factor", 8),
                         subsampling_conv_channels=_int(s, enc, "subsampling_conv_channels", 256),
                         conv_kernel_size=_int(s, enc, "conv_kernel_size", 9),
                         xscaling=bool(_require(s, enc, "scale_input", (True, False), False)),
                         pos_emb_max_len=_int(s, enc, "max_position_embeddings", 5000), use_bias=bool(bias))


def frontend_config(fe: dict) -> tuple[FrontEndConfig, float]:
    """transformers' `CohereAsrFeatureExtractor` settings -> NeMo's mel settings, and the dither scale."""
    s = "feature_extractor."
    f = {**FEATURE_DEFAULTS, **fe}
    for key in ("hop_length", "n_fft", "win_length", "feature_size", "sampling_rate"):
        _int(s, f, key)
    if f["win_length"] > f["n_fft"]:
        raise ValueError(f"{s}win_length = {f['win_length']} is longer than n_fft {f['n_fft']}")
    for key in ("preemphasis", "dither", "padding_value"):
        v = f[key]
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            raise ValueError(f"{s}{key} = {short(v)} is not a number >= 0")
    if f["padding_value"] != 0:
        raise ValueError(f"{s}padding_value = {short(f['padding_value'])} is not implemented (only 0)")
    pre = FrontEndConfig(sample_rate=f["sampling_rate"], window_size=None, window_stride=None,
                         n_window_size=f["win_length"], n_window_stride=f["hop_length"], n_fft=f["n_fft"],
                         window="hann", normalize="per_feature", preemph=f["preemphasis"] or None,
                         features=f["feature_size"], lowfreq=0.0, highfreq=f["sampling_rate"] / 2, log=True,
                         log_zero_guard_type="add", log_zero_guard_value=2 ** -24, pad_to=0, pad_value=0.0,
                         mag_power=2.0, exact_pad=False)
    return pre, float(f["dither"] or 0.0)


def parse_config(cfg: dict, features: dict, generation: Optional[dict] = None) -> CohereConfig:
    """config.json, the feature extractor's settings and generation_config.json -> a CohereConfig
    (ValueError naming the first field this code does not implement)."""
    s = ""
    _require(s, cfg, "model_type", (MODEL_TYPE,))
    enc = cfg.get("encoder_config")
    if not isinstance(enc, dict):
        raise ValueError(f"encoder_config = {short(enc)} is not an object")
    pre, dither = frontend_config(features)
    encoder = encoder_config(enc, pre.features)
    check_sizes(SimpleNamespace(preprocessor=pre, encoder=encoder))
    hidden = _int(s, cfg, "hidden_size")
    heads = _int(s, cfg, "num_attention_heads")
    kv = cfg.get("num_key_value_heads") or heads
    if kv != heads:
        raise ValueError(f"num_key_value_heads = {short(kv)} is not implemented (only num_attention_heads, {heads})")
    head_dim = cfg.get("head_dim") or hidden // heads
    if head_dim * heads != hidden:
        raise ValueError(f"head_dim = {short(head_dim)} x num_attention_heads {heads} is not hidden_size {hidden} "
                         "(not implemented)")
    _require(s, cfg, "attention_bias", (True,), True)
    act = _require(s, cfg, "hidden_act", ACTIVATIONS, "relu")
    tie = cfg.get("tie_word_embeddings", False)
    if tie not in (False, True):
        raise ValueError(f"tie_word_embeddings = {short(tie)} is not true or false")
    vocab = _int(s, cfg, "vocab_size")
    decoder = DecoderConfig(vocab_size=vocab, hidden=hidden, inner=_int(s, cfg, "intermediate_size"),
                            layers=_int(s, cfg, "num_hidden_layers"), heads=heads,
                            max_positions=_int(s, cfg, "max_position_embeddings", 1024), activation=act,
                            pre_ln=True, final_norm=True)
    gen = generation or {}
    ids = {}
    for key, default in (("pad_token_id", 2), ("eos_token_id", 3), ("bos_token_id", 4)):
        value = gen.get(key, cfg.get(key, default))
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
            raise ValueError(f"{key} = {short(value)} is not an id of the {vocab}-piece vocabulary")
        ids[key] = value
    start = gen.get("decoder_start_token_id", cfg.get("decoder_start_token_id"))
    if start is not None and (isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < vocab):
        raise ValueError(f"decoder_start_token_id = {short(start)} is not an id of the {vocab}-piece vocabulary")
    return CohereConfig(pre.sample_rate, pre, dither, encoder, decoder, ids["pad_token_id"], ids["eos_token_id"],
                        ids["bos_token_id"], start, bool(tie))


def read_features(path: Path) -> dict:
    """The feature extractor's settings: processor_config.json's `feature_extractor` (transformers 5) or
    preprocessor_config.json (older layouts); its defaults when neither is there."""
    proc = read_json(path / "processor_config.json")
    if proc is not None and isinstance(proc.get("feature_extractor"), dict):
        return proc["feature_extractor"]
    pre = read_json(path / "preprocessor_config.json")
    return pre or {}

"""MedASR's settings from a transformers-format directory: config.json (model type "lasr_ctc" with its
"lasr_encoder" encoder_config) and the feature extractor's settings (preprocessor_config.json, or the
"feature_extractor" entry of processor_config.json). Read as data; a setting this code does not implement is a
ModelError naming it, never ignored."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import ModelError

MODEL_TYPE = "lasr_ctc"
ENCODER_TYPE = "lasr_encoder"
ACTIVATIONS = ("silu", "swish")  # transformers' ACT2FN names of the same function


@dataclass(frozen=True)
class Features:
    """LasrFeatureExtractor's settings (its defaults where a file leaves one out)."""

    sample_rate: int = 16000
    n_mels: int = 128
    n_fft: int = 512
    hop: int = 160
    win: int = 400
    lower_hz: float = 125.0  # fixed in transformers' code, not in the files
    upper_hz: float = 7500.0


@dataclass(frozen=True)
class MedASRConfig:
    hidden: int
    layers: int
    heads: int
    head_dim: int
    ff: int
    conv_kernel: int
    sub_channels: int
    sub_kernel: int
    sub_stride: int
    n_mels: int
    eps: float
    ff_weights: tuple[float, float]
    conv_weights: tuple[float, float]
    rope_theta: float
    max_positions: int
    vocab_size: int
    blank: int
    attention_bias: bool
    conv_bias: bool
    features: Features

    @property
    def subsampling(self) -> int:
        """Feature frames per encoder frame (two strided convolutions)."""
        return self.sub_stride ** 2

    def encoded_length(self, frames: int) -> int:
        """Encoder frames of `frames` feature frames: each of the two convolutions is unpadded (transformers'
        `_get_subsampling_output_length`); below one frame is 0."""
        for _ in range(2):
            frames = (frames - self.sub_kernel) // self.sub_stride + 1
            if frames < 1:
                return 0
        return frames


def read_json(path: Path) -> Optional[dict]:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: expected a JSON object")
    return data


def read_features(path: Path) -> Features:
    """The feature extractor's settings of a directory (preprocessor_config.json, else processor_config.json's
    "feature_extractor"; LasrFeatureExtractor's defaults when neither has them)."""
    fe = read_json(path / "preprocessor_config.json")
    if fe is None:
        fe = (read_json(path / "processor_config.json") or {}).get("feature_extractor") or {}
    return read_features_dict(fe, str(path))


def read_features_dict(fe: dict, where: str) -> Features:
    """LasrFeatureExtractor's settings as its JSON spells them -> Features; ModelError for what is not its."""
    if not isinstance(fe, dict):
        raise ModelError(f"{where}: the feature extractor's settings are not a JSON object")
    kind = fe.get("feature_extractor_type", "LasrFeatureExtractor")
    if kind != "LasrFeatureExtractor":
        raise ModelError(f"{where}: feature extractor {kind!r} is not LasrFeatureExtractor")
    try:
        f = Features(sample_rate=int(fe.get("sampling_rate", 16000)), n_mels=int(fe.get("feature_size", 128)),
                     n_fft=int(fe.get("n_fft", 512)), hop=int(fe.get("hop_length", 160)),
                     win=int(fe.get("win_length", 400)))
        pad = float(fe.get("padding_value", 0.0))
    except (TypeError, ValueError) as e:
        raise ModelError(f"{where}: feature extractor settings not supported ({e})") from None
    if not (0 < f.win <= f.n_fft <= 1 << 16 and 0 < f.hop <= 1 << 16 and 0 < f.n_mels <= 1024
            and 0 < f.sample_rate <= 192000):
        raise ModelError(f"{where}: feature extractor settings out of range ({f})")
    if pad != 0.0:
        raise ModelError(f"{where}: padding_value {pad!r} is not implemented (0.0)")
    return f


def parse_config(cfg: dict, features: Features) -> MedASRConfig:
    """config.json -> MedASRConfig; raises ValueError (the loader says which file) for what this code does not
    implement."""
    if cfg.get("model_type") != MODEL_TYPE:
        raise ValueError(f"model_type {cfg.get('model_type')!r} is not {MODEL_TYPE!r}")
    enc = cfg.get("encoder_config")
    if not isinstance(enc, dict):
        raise ValueError("no encoder_config")
    if enc.get("model_type", ENCODER_TYPE) != ENCODER_TYPE:
        raise ValueError(f"encoder model_type {enc.get('model_type')!r} is not {ENCODER_TYPE!r}")
    act = enc.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise ValueError(f"hidden_act {act!r} is not implemented (silu)")
    rope = enc.get("rope_parameters") or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type {rope.get('rope_type')!r} is not implemented (default)")
    hidden, heads = int(enc.get("hidden_size", 512)), int(enc.get("num_attention_heads", 8))
    head_dim = int(enc.get("head_dim") or hidden // heads)
    kv = int(enc.get("num_key_value_heads") or heads)
    if kv != heads:
        raise ValueError(f"num_key_value_heads {kv} != num_attention_heads {heads} is not implemented")
    if head_dim % 2:
        raise ValueError(f"head_dim {head_dim} is odd (rotary positions rotate pairs)")
    ffw = tuple(float(x) for x in enc.get("feed_forward_residual_weights", (1.5, 0.5)))
    cw = tuple(float(x) for x in enc.get("conv_residual_weights", (2.0, 1.0)))
    if len(ffw) != 2 or len(cw) != 2:
        raise ValueError("residual weights must be pairs")
    c = MedASRConfig(
        hidden=hidden, layers=int(enc.get("num_hidden_layers", 17)), heads=heads, head_dim=head_dim,
        ff=int(enc.get("intermediate_size", 2048)), conv_kernel=int(enc.get("conv_kernel_size", 32)),
        sub_channels=int(enc.get("subsampling_conv_channels", 256)),
        sub_kernel=int(enc.get("subsampling_conv_kernel_size", 5)), sub_stride=int(enc.get("subsampling_conv_stride", 2)),
        n_mels=int(enc.get("num_mel_bins", 128)), eps=float(enc.get("layer_norm_eps", 1e-6)), ff_weights=ffw,
        conv_weights=cw, rope_theta=float(rope.get("rope_theta", 10000.0)),
        max_positions=int(enc.get("max_position_embeddings", 10000)), vocab_size=int(cfg.get("vocab_size", 512)),
        blank=int(cfg.get("pad_token_id", 0)), attention_bias=bool(enc.get("attention_bias", False)),
        conv_bias=bool(enc.get("convolution_bias", False)), features=features)
    for name in ("hidden", "layers", "heads", "ff", "conv_kernel", "sub_channels", "sub_kernel", "sub_stride",
                 "vocab_size"):
        if getattr(c, name) < 1 or getattr(c, name) > 1 << 16:
            raise ValueError(f"{name} {getattr(c, name)} out of range")
    if c.n_mels != features.n_mels:
        raise ValueError(f"num_mel_bins {c.n_mels} != the feature extractor's feature_size {features.n_mels}")
    if not 0 <= c.blank < c.vocab_size:
        raise ValueError(f"pad_token_id (the CTC blank) {c.blank} outside the vocabulary of {c.vocab_size}")
    return c

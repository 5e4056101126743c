"""NeMo's front end (`preprocessor`) and FastConformer encoder (`encoder`) config sections, parsed and
checked: the same sections in every NeMo family (Parakeet, Canary, Sortformer), read by the modules of
this folder.

Each key of a section a module is built from is one of three things: a setting this code implements (a
field of `FrontEndConfig` / `EncoderConfig`; a value the code does not implement is an error), a key
`HARMLESS_KEYS` lists, which does not change what the model computes at inference (accepted, not used),
or an error naming it. A model file is never run as something it is not: every such error is a
ValueError naming the setting and its value.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

from ..config_yaml import excerpt

_TRAINING = "training only"
HARMLESS_KEYS: dict[str, dict[str, str]] = {
    "preprocessor": {
        "dither": "noise added in training only (NeMo adds none in eval mode)",
        "rng": "the random generator of dither",
        "nb_augmentation_prob": "narrow-band augmentation, " + _TRAINING,
        "nb_max_freq": "narrow-band augmentation, " + _TRAINING,
    },
    "encoder": {
        "dropout": _TRAINING,
        "dropout_pre_encoder": _TRAINING,
        "dropout_emb": _TRAINING,
        "dropout_att": _TRAINING,
        "stochastic_depth_drop_prob": "layer drop, " + _TRAINING,
        "stochastic_depth_mode": "layer drop, " + _TRAINING,
        "stochastic_depth_start_layer": "layer drop, " + _TRAINING,
        "att_context_probs": "how training samples one of several att_context_size entries",
        "subsampling_conv_chunking_factor": "splits NeMo's subsampling convolutions to save memory; same output",
        "use_pytorch_sdpa": "which attention kernel NeMo calls; same product",
        "use_pytorch_sdpa_backends": "which attention kernel NeMo calls; same product",
        "sync_max_audio_length": "syncs the positional table's length across GPUs",
        "reduction_position": "only used with reduction (an error)",
        "global_tokens_spacing": "only used with global_tokens > 0 (an error)",
        "global_attn_separate": "only used with global_tokens > 0 (an error)",
    },
}
# Windows of the front end (`preprocessor.window`).
WINDOWS = ("hann", "hamming", "blackman", "bartlett")


def short(value) -> str:
    """repr(value), cut to 80 characters, for error messages (made without formatting more of the
    value than that: a value a YAML alias shares many times costs no more than a small one)."""
    return excerpt(value, 80)


def _class(target) -> str:
    return str(target or "").rsplit(".", 1)[-1]


def _check_target(section: str, target, allowed: tuple) -> None:
    if target is not None and _class(target) not in allowed:
        raise ValueError(f"{section} = {short(target)} is not implemented ({', '.join(allowed)})")


def _fields(cls) -> set[str]:
    return {f.name for f in fields(cls)}


def settings(section: str, cfg: dict, implemented: set[str], table: Optional[str] = None,
             harmless_keys: Optional[dict] = None) -> dict:
    """The keys of config section `section` that `implemented` names; the keys `harmless_keys` (default
    HARMLESS_KEYS) lists for it (or for `table`) are dropped; any other key is a ValueError naming it and
    its value."""
    harmless = (HARMLESS_KEYS if harmless_keys is None else harmless_keys).get(table or section, {})
    out = {}
    for key, value in cfg.items():
        if key in implemented:
            out[key] = value
        elif key not in harmless:
            name = key[:80] if isinstance(key, str) else short(key)
            raise ValueError(f"{section}.{name} = {short(value)} is a setting this code does not implement")
    return out



# --------------------------------------------------------------------------------------------------
# Front end and encoder: NeMo's own setting names, NeMo's defaults (a key left out means NeMo's
# default). Every field is a setting the module implements, or one with a single implemented value;
# a value the code does not implement is a ValueError when the dataclass is made.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrontEndConfig:
    """The `preprocessor` section (NeMo's `AudioToMelSpectrogramPreprocessor`), for `NemoMelFrontEnd`."""

    sample_rate: int = 16000
    window_size: Optional[float] = 0.02
    window_stride: Optional[float] = 0.01
    n_window_size: Optional[int] = None
    n_window_stride: Optional[int] = None
    window: str = "hann"
    normalize: Any = "per_feature"
    n_fft: Optional[int] = None
    preemph: Optional[float] = 0.97
    features: int = 64
    lowfreq: float = 0.0
    highfreq: Optional[float] = None
    log: bool = True
    log_zero_guard_type: str = "add"
    log_zero_guard_value: Any = 2**-24
    pad_to: Optional[int] = 16
    pad_value: float = 0.0
    mag_power: float = 2.0
    exact_pad: bool = False
    frame_splicing: int = 1
    mel_norm: Optional[str] = "slaney"
    use_torchaudio: bool = False
    stft_exact_pad: bool = False
    stft_conv: bool = False

    def __post_init__(self):
        if self.frame_splicing != 1:
            raise ValueError(f"preprocessor.frame_splicing = {short(self.frame_splicing)} is not implemented (only 1)")
        if self.mel_norm != "slaney":
            raise ValueError(f"preprocessor.mel_norm = {short(self.mel_norm)} is not implemented (only 'slaney', "
                             "librosa's area normalization)")
        if self.use_torchaudio:
            raise ValueError(f"preprocessor.use_torchaudio = {short(self.use_torchaudio)} is not implemented "
                             "(NeMo's own "
                             "featurizer only)")
        if self.stft_exact_pad or self.stft_conv:
            name = "stft_exact_pad" if self.stft_exact_pad else "stft_conv"
            raise ValueError(f"preprocessor.{name} = True (an old NeMo STFT setting) is not implemented")
        if self.window_size and self.n_window_size or self.window_stride and self.n_window_stride:
            raise ValueError("preprocessor: both window_size and n_window_size (or window_stride and n_window_stride) "
                             "are set; NeMo takes only one")
        if self.normalize not in ("NA", "none", None, False, "per_feature", "all_features"):
            raise ValueError(f"preprocessor.normalize = {short(self.normalize)} is not implemented (per_feature, "
                             "all_features, NA)")
        guard = self.log_zero_guard_value
        if isinstance(guard, str) and guard not in ("tiny", "eps"):
            raise ValueError(f"preprocessor.log_zero_guard_value = {short(guard)} is not implemented "
                             "(a number, 'tiny' or 'eps')")
        pad_to = self.pad_frames
        if isinstance(pad_to, bool) or not isinstance(pad_to, int) or pad_to < 0:
            raise ValueError(f"preprocessor.pad_to = {short(pad_to)} is not implemented "
                             "(a whole number of frames >= 0)")
        if self.log_zero_guard_type not in ("add", "clamp"):
            raise ValueError(f"preprocessor.log_zero_guard_type = {short(self.log_zero_guard_type)} is not implemented "
                             "(add, clamp)")
        if self.window not in WINDOWS:
            raise ValueError(f"preprocessor.window = {short(self.window)} is not implemented ({', '.join(WINDOWS)})")

    @property
    def normalization(self) -> Optional[str]:
        """'per_feature', 'all_features' or None (NeMo's "NA": none)."""
        return None if self.normalize in ("NA", "none", None, False) else self.normalize

    @property
    def pad_frames(self):
        """pad_to, with None (no padding) as 0."""
        return 0 if self.pad_to is None else self.pad_to


@dataclass(frozen=True)
class EncoderConfig:
    """The `encoder` section (NeMo's `ConformerEncoder`), for `ConformerEncoder`."""

    feat_in: int
    n_layers: int
    d_model: int
    n_heads: int = 4
    ff_expansion_factor: int = 4
    subsampling: str = "striding"
    subsampling_factor: int = 4
    subsampling_conv_channels: Optional[int] = -1
    causal_downsampling: bool = False
    conv_kernel_size: int = 31
    conv_norm_type: str = "batch_norm"
    conv_context_size: Any = None
    self_attention_model: str = "rel_pos"
    att_context_size: Any = None
    att_context_style: str = "regular"
    xscaling: bool = True
    pos_emb_max_len: int = 5000
    use_bias: bool = True
    untie_biases: bool = True
    feat_out: Optional[int] = -1
    reduction: Optional[str] = None
    reduction_factor: int = 1
    global_tokens: int = 0

    def __post_init__(self):
        if self.self_attention_model not in ("rel_pos", "rel_pos_local_attn"):
            raise ValueError(f"encoder.self_attention_model = {short(self.self_attention_model)} is not implemented "
                             "(rel_pos, rel_pos_local_attn)")
        if not self.untie_biases:
            raise ValueError(f"encoder.untie_biases = {short(self.untie_biases)} is not implemented (only true)")
        if self.feat_out not in (-1, None, 0):
            raise ValueError(f"encoder.feat_out = {short(self.feat_out)} is not implemented "
                             "(only -1: no output projection)")
        if self.reduction and self.reduction_factor > 1:
            raise ValueError(f"encoder.reduction = {short(self.reduction)} "
                             f"(reduction_factor {self.reduction_factor}) is "
                             "not implemented (no time reduction inside the encoder)")
        if self.global_tokens:
            raise ValueError(f"encoder.global_tokens = {short(self.global_tokens)} is not implemented (only 0)")
        if self.n_heads <= 0 or self.d_model % self.n_heads:
            raise ValueError(f"encoder.n_heads = {short(self.n_heads)} does not divide d_model {self.d_model}")
        ctx, kernel = self.conv_context_size, self.conv_kernel_size
        if ctx not in (None, "causal") and (
            not isinstance(ctx, (list, tuple)) or len(ctx) != 2 or int(ctx[0]) + int(ctx[1]) + 1 != kernel
        ):
            raise ValueError(f"encoder.conv_context_size = {short(ctx)} is not implemented (null, "
                             f"'causal' or [left, right] with left + right + 1 = conv_kernel_size {kernel})")
        self.att_context_sizes  # checks att_context_size
        if self.att_context_style not in ("regular", "chunked_limited"):
            raise ValueError(f"encoder.att_context_style = {short(self.att_context_style)} is not implemented "
                             "(regular, chunked_limited)")

    @property
    def conv_channels(self) -> int:
        """The subsampling's channels (-1 or null: d_model)."""
        c = self.subsampling_conv_channels
        return self.d_model if c in (-1, None) else c

    @property
    def conv_context(self):
        """The depthwise convolution's [left, right] context, None for centred."""
        if self.conv_context_size == "causal":
            return [self.conv_kernel_size - 1, 0]
        return self.conv_context_size

    @property
    def att_context_sizes(self) -> list[list[int]]:
        """att_context_size as a list of [left, right] pairs (several: a multi-lookahead streaming
        model, the first the default); [[-1, -1]] when unset."""
        ctx = self.att_context_size if self.att_context_size is not None else [-1, -1]
        choices = [list(c) for c in ctx] if len(ctx) and isinstance(ctx[0], (list, tuple)) else [list(ctx)]
        if any(len(c) != 2 for c in choices):
            raise ValueError(f"encoder.att_context_size = {short(self.att_context_size)} is not implemented "
                             "([left, right] pairs)")
        return [[int(a), int(b)] for a, b in choices]



# The largest structural size of these sections, per `section.key`: each far above every published NeMo
# model (the largest, canary/parakeet 1.1B-class: 42 layers, d_model 1024, 8 heads, ff x4, kernel 9/31,
# 128 mels, n_fft 512), so a real model never meets them, and a hostile file's `encoder.n_layers = 2**30`
# is refused before a module is built (building it, even on the meta device, would loop for hours).
SIZE_MAXIMA: dict[str, int] = {
    "preprocessor.features": 1024, "preprocessor.n_fft": 65536, "preprocessor.n_window_size": 65536,
    "preprocessor.n_window_stride": 65536, "preprocessor.pad_to": 65536,
    "encoder.n_layers": 256, "encoder.d_model": 16384, "encoder.n_heads": 256,
    "encoder.ff_expansion_factor": 64, "encoder.subsampling_factor": 64,
    "encoder.subsampling_conv_channels": 16384, "encoder.conv_kernel_size": 1023,
    "encoder.pos_emb_max_len": 1 << 20,
}
# SIZE_MAXIMA's keys -> (the config part, its field) they are read from.
SIZE_FIELDS = {
    "preprocessor.features": ("preprocessor", "features"), "preprocessor.n_fft": ("preprocessor", "n_fft"),
    "preprocessor.n_window_size": ("preprocessor", "n_window_size"),
    "preprocessor.n_window_stride": ("preprocessor", "n_window_stride"), "preprocessor.pad_to": ("preprocessor", "pad_to"),
    "encoder.n_layers": ("encoder", "n_layers"), "encoder.d_model": ("encoder", "d_model"),
    "encoder.n_heads": ("encoder", "n_heads"), "encoder.ff_expansion_factor": ("encoder", "ff_expansion_factor"),
    "encoder.subsampling_factor": ("encoder", "subsampling_factor"),
    "encoder.subsampling_conv_channels": ("encoder", "conv_channels"),
    "encoder.conv_kernel_size": ("encoder", "conv_kernel_size"), "encoder.pos_emb_max_len": ("encoder", "pos_emb_max_len"),
}


def check_sizes(config, maxima: Optional[dict] = None, size_fields: Optional[dict] = None) -> None:
    """A ValueError naming the key of the first structural size of `config` (an object with the parts
    `size_fields` names) above `maxima` (a list's size: its length), or below 0; by default the front
    end's and the encoder's."""
    maxima = SIZE_MAXIMA if maxima is None else maxima
    for key, (part, name) in (SIZE_FIELDS if size_fields is None else size_fields).items():
        obj = getattr(config, part, None)
        value = None if obj is None else getattr(obj, name)
        if value is None:
            continue
        size = len(value) if isinstance(value, (list, tuple)) else value
        if isinstance(size, bool) or not isinstance(size, (int, float)) or not 0 <= size <= maxima[key]:
            raise ValueError(f"{key} = {short(size)} is out of the range this code accepts (0 to {maxima[key]}, "
                             "far above any published model)")


def frontend_config(cfg: dict) -> FrontEndConfig:
    """The `preprocessor` section, checked."""
    pre = dict(cfg.get("preprocessor") or {})
    _check_target("preprocessor._target_", pre.pop("_target_", None), ("AudioToMelSpectrogramPreprocessor",))
    return FrontEndConfig(**settings("preprocessor", pre, _fields(FrontEndConfig)))


def encoder_config(cfg: dict, n_mels: int) -> EncoderConfig:
    """The `encoder` section, checked against the front end's `n_mels`."""
    enc = settings("encoder", cfg["encoder"], _fields(EncoderConfig) | {"_target_"})
    if int(enc.get("feat_in", -1)) != n_mels:
        raise ValueError(f"encoder.feat_in = {short(enc.get('feat_in'))} disagrees with preprocessor.features = "
                         f"{n_mels}")
    target = str(enc.pop("_target_", "ConformerEncoder"))
    if target.rsplit(".", 1)[-1] != "ConformerEncoder":
        raise ValueError(f"encoder._target_ = {short(target)} is not implemented (ConformerEncoder)")
    return EncoderConfig(**enc)


@dataclass(frozen=True)
class DecoderConfig:
    """NeMo's `TransformerDecoderNM` and its `TokenClassifier` head."""

    vocab_size: int      # the embedding's and the head's rows
    hidden: int
    inner: int
    layers: int
    heads: int
    max_positions: int   # the position table's length: prompt and output together
    activation: str = "relu"
    pre_ln: bool = True
    final_norm: bool = True  # pre_ln_final_layer_norm
    head_dim: Optional[int] = None  # per-head width (None: hidden / heads, NeMo's; transformers' Canary sets it)

"""A NeMo Parakeet model config (`model_config.yaml`, as a dict) parsed and checked.

`parse_config(cfg)` turns the dict into a frozen `ParakeetConfig`: the front end's settings
(`FrontEndConfig`), the encoder's (`EncoderConfig`), the transducer's predictor and joint
(`TransducerConfig`), the CTC head's (`CTCConfig`) and the language prompt's (`PromptConfig`).
`ParakeetModel` (model.py) builds its modules from it.

Each key of a config section a module is built from is one of three things: a setting this code
implements (a field of one of these dataclasses, or a key read here; a value the code does not
implement is an error), a key `HARMLESS_KEYS` lists, which does not change what the model computes
at inference (accepted, not used), or an error naming it. A model file is never run as something it
is not: every such error is a ValueError (KeyError, TypeError for a missing or malformed section)
naming the setting and its value.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

from ..config_yaml import excerpt
from ..search.transducer import DEFAULT_MAX_SYMBOLS

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
    "decoder": {"random_state_sampling": "random predictor states, " + _TRAINING},
    "decoder.prednet": {
        "dropout": _TRAINING,
        "t_max": "chrono initialization of the LSTM (initialization only)",
        "forget_gate_bias": "initialization only",
        "weights_init_scale": "initialization only",
        "hidden_hidden_bias_scale": "initialization only",
    },
    "joint": {
        "log_softmax": "where NeMo normalizes the joint's output; the search normalizes its own",
        "preserve_memory": "joint and loss fusion, " + _TRAINING,
        "fuse_loss_wer": "joint and loss fusion, " + _TRAINING,
        "fused_batch_size": "joint and loss fusion, " + _TRAINING,
        "experimental_fuse_loss_wer": "joint and loss fusion, " + _TRAINING,
        "masking_prob": "label masking, " + _TRAINING,
        "vocabulary": "token names; the tokenizer gives them",
    },
    "ctc": {"init_mode": "initialization only"},
    "aux_ctc": {
        "ctc_loss_weight": _TRAINING,
        "use_cer": "validation metric",
        "ctc_reduction": "loss reduction, " + _TRAINING,
        "decoding": "the CTC head's default search; chosen per call here",
    },
}
# Model classes (the config's `target`) whose sections this code builds.
MODEL_CLASSES = (
    "EncDecRNNTBPEModel", "EncDecCTCModelBPE", "EncDecHybridRNNTCTCBPEModel",
    "EncDecRNNTModel", "EncDecCTCModel", "EncDecHybridRNNTCTCModel",
    "EncDecRNNTBPEModelWithPrompt", "EncDecHybridRNNTCTCBPEModelWithPrompt",
    # NeMo's end-of-utterance training classes: the same modules (they add EOU metrics and force
    # timestamps in their own decoding config); <EOU>/<EOB> are vocabulary pieces.
    "EncDecRNNTBPEEOUModel", "EncDecHybridRNNTCTCBPEEOUModel",
)
# The classes that condition the encoder output on a language prompt (`PromptKernel`).
PROMPT_CLASSES = ("EncDecRNNTBPEModelWithPrompt", "EncDecHybridRNNTCTCBPEModelWithPrompt")
# The joint's activations (`joint.jointnet.activation`) the joint implements.
JOINT_ACTIVATIONS = ("relu", "tanh", "sigmoid", "swish", "silu")
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


def settings(section: str, cfg: dict, implemented: set[str], table: Optional[str] = None) -> dict:
    """The keys of config section `section` that `implemented` names; the keys HARMLESS_KEYS lists
    for it (or for `table`) are dropped; any other key is a ValueError naming it and its value."""
    harmless = HARMLESS_KEYS.get(table or section, {})
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


# --------------------------------------------------------------------------------------------------
# Heads and prompt: values read from the `decoder`, `joint`, `decoding`, `aux_ctc` and
# `model_defaults` sections (checked by `parse_config`).
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransducerConfig:
    """The transducer: NeMo's `RNNTDecoder` (predictor) and `RNNTJoint`, and what the joint's extra
    outputs are (`kind` 'tdt' with `durations`, or 'rnnt')."""

    vocab_size: int  # the predictor's vocabulary, without the blank
    pred_hidden: int
    pred_rnn_layers: int
    joint_enc_hidden: int
    joint_pred_hidden: int
    joint_hidden: int
    num_classes: int  # the joint's tokens, without the blank and the extra outputs
    num_extra_outputs: int
    activation: str
    out_index: int  # index of the output layer in the joint's nn.Sequential (2 after a dropout)
    kind: str
    durations: Optional[list[int]] = None
    max_symbols: int = DEFAULT_MAX_SYMBOLS

    @property
    def joint_outputs(self) -> int:
        return self.num_classes + 1 + self.num_extra_outputs


@dataclass(frozen=True)
class CTCConfig:
    """NeMo's `ConvASRDecoder`: the CTC head (the decoder of a CTC model, aux_ctc's of a hybrid)."""

    feat_in: int
    num_classes: int  # without the blank


@dataclass(frozen=True)
class PromptConfig:
    """The language prompt of a *WithPrompt model (`model_defaults`)."""

    num_prompts: int
    dictionary: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ParakeetConfig:
    """A checked NeMo model config: what `ParakeetModel` builds."""

    target: str
    sample_rate: int
    preprocessor: FrontEndConfig
    encoder: EncoderConfig
    transducer: Optional[TransducerConfig]
    ctc: Optional[CTCConfig]
    prompt: Optional[PromptConfig]

    @property
    def vocab_size(self) -> int:
        """Tokens without the blank: the transducer's when there is one, else the CTC head's."""
        return self.transducer.num_classes if self.transducer is not None else self.ctc.num_classes


# --------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------


def parse_config(cfg: dict) -> ParakeetConfig:
    """NeMo's model config -> `ParakeetConfig`; a setting this code does not implement is a
    ValueError naming it (KeyError, TypeError for a missing or malformed required key)."""
    _check_target("target", cfg.get("target"), MODEL_CLASSES)
    front = _frontend(cfg)
    sample_rate = int(cfg.get("sample_rate") or front.sample_rate)
    if cfg.get("sample_rate") and sample_rate != int(front.sample_rate):
        raise ValueError(f"sample_rate = {sample_rate} disagrees with preprocessor.sample_rate = "
                         f"{int(front.sample_rate)}")
    encoder = _encoder(cfg, int(front.features))
    d_model = encoder.d_model
    target = str(cfg.get("target", ""))
    dec = cfg.get("decoder") or {}
    dec_kind = _class(dec.get("_target_"))
    _check_target("decoder._target_", dec.get("_target_"), ("RNNTDecoder", "ConvASRDecoder"))
    transducer = None
    if dec_kind == "RNNTDecoder" or not dec_kind and cfg.get("joint"):
        transducer = _transducer(cfg, dec, d_model)
    ctc = _ctc(cfg, dec, dec_kind, d_model)
    if transducer is None and ctc is None:
        raise ValueError(f"model {target or '?'} has neither a transducer nor a CTC head")
    config = ParakeetConfig(target, sample_rate, front, encoder, transducer, ctc, _prompt(cfg, target, d_model))
    check_sizes(config)
    return config


# The largest structural size a config may give, per `section.key`: each far above every published
# NeMo ASR model (the largest, canary/parakeet 1.1B-class: 42 layers, d_model 1024, 8 heads, ff x4,
# kernel 9/31, 128 mels, n_fft 512, vocab 16k, 5 TDT durations, 2 predictor layers of 640), so a
# real model never meets them, and a hostile file's `encoder.n_layers = 2**30` is refused before a
# module is built (building it, even on the meta device, would loop for hours). The weights then
# have to match the (bounded) modules tensor by tensor.
SIZE_MAXIMA: dict[str, int] = {
    "preprocessor.features": 1024, "preprocessor.n_fft": 65536, "preprocessor.n_window_size": 65536,
    "preprocessor.n_window_stride": 65536, "preprocessor.pad_to": 65536,
    "encoder.n_layers": 256, "encoder.d_model": 16384, "encoder.n_heads": 256,
    "encoder.ff_expansion_factor": 64, "encoder.subsampling_factor": 64,
    "encoder.subsampling_conv_channels": 16384, "encoder.conv_kernel_size": 1023,
    "encoder.pos_emb_max_len": 1 << 20,
    "decoder.vocab_size": 1 << 20, "decoder.prednet.pred_hidden": 16384, "decoder.prednet.pred_rnn_layers": 64,
    "joint.jointnet.encoder_hidden": 16384, "joint.jointnet.pred_hidden": 16384,
    "joint.jointnet.joint_hidden": 16384, "joint.num_classes": 1 << 20, "joint.num_extra_outputs": 256,
    "decoding.durations": 256, "ctc.feat_in": 16384, "ctc.num_classes": 1 << 20,
    "model_defaults.num_prompts": 1 << 16,
}
# SIZE_MAXIMA's keys -> (the config part, its field) they are read from.
_SIZE_FIELDS = {
    "preprocessor.features": ("preprocessor", "features"), "preprocessor.n_fft": ("preprocessor", "n_fft"),
    "preprocessor.n_window_size": ("preprocessor", "n_window_size"),
    "preprocessor.n_window_stride": ("preprocessor", "n_window_stride"), "preprocessor.pad_to": ("preprocessor", "pad_to"),
    "encoder.n_layers": ("encoder", "n_layers"), "encoder.d_model": ("encoder", "d_model"),
    "encoder.n_heads": ("encoder", "n_heads"), "encoder.ff_expansion_factor": ("encoder", "ff_expansion_factor"),
    "encoder.subsampling_factor": ("encoder", "subsampling_factor"),
    "encoder.subsampling_conv_channels": ("encoder", "conv_channels"),
    "encoder.conv_kernel_size": ("encoder", "conv_kernel_size"), "encoder.pos_emb_max_len": ("encoder", "pos_emb_max_len"),
    "decoder.vocab_size": ("transducer", "vocab_size"), "decoder.prednet.pred_hidden": ("transducer", "pred_hidden"),
    "decoder.prednet.pred_rnn_layers": ("transducer", "pred_rnn_layers"),
    "joint.jointnet.encoder_hidden": ("transducer", "joint_enc_hidden"),
    "joint.jointnet.pred_hidden": ("transducer", "joint_pred_hidden"),
    "joint.jointnet.joint_hidden": ("transducer", "joint_hidden"), "joint.num_classes": ("transducer", "num_classes"),
    "joint.num_extra_outputs": ("transducer", "num_extra_outputs"), "decoding.durations": ("transducer", "durations"),
    "ctc.feat_in": ("ctc", "feat_in"), "ctc.num_classes": ("ctc", "num_classes"),
    "model_defaults.num_prompts": ("prompt", "num_prompts"),
}


def check_sizes(config) -> None:
    """A ValueError naming the key of the first structural size of `config` above SIZE_MAXIMA (a
    list's size: its length), or below 0."""
    for key, (part, name) in _SIZE_FIELDS.items():
        obj = getattr(config, part, None)  # (a Canary config has the front end and the encoder only)
        value = None if obj is None else getattr(obj, name)
        if value is None:
            continue
        size = len(value) if isinstance(value, (list, tuple)) else value
        if isinstance(size, bool) or not isinstance(size, (int, float)) or not 0 <= size <= SIZE_MAXIMA[key]:
            raise ValueError(f"{key} = {short(size)} is out of the range this code accepts (0 to {SIZE_MAXIMA[key]}, "
                             "far above any published model)")


def frontend_config(cfg: dict) -> FrontEndConfig:
    """The `preprocessor` section, checked (Canary's is the same NeMo section)."""
    return _frontend(cfg)


def encoder_config(cfg: dict, n_mels: int) -> EncoderConfig:
    """The `encoder` section, checked against the front end's `n_mels` (Canary's is the same NeMo section)."""
    return _encoder(cfg, n_mels)


def _frontend(cfg: dict) -> FrontEndConfig:
    pre = dict(cfg.get("preprocessor") or {})
    _check_target("preprocessor._target_", pre.pop("_target_", None), ("AudioToMelSpectrogramPreprocessor",))
    return FrontEndConfig(**settings("preprocessor", pre, _fields(FrontEndConfig)))


def _encoder(cfg: dict, n_mels: int) -> EncoderConfig:
    enc = settings("encoder", cfg["encoder"], _fields(EncoderConfig) | {"_target_"})
    if int(enc.get("feat_in", -1)) != n_mels:
        raise ValueError(f"encoder.feat_in = {short(enc.get('feat_in'))} disagrees with preprocessor.features = "
                         f"{n_mels}")
    target = str(enc.pop("_target_", "ConformerEncoder"))
    if target.rsplit(".", 1)[-1] != "ConformerEncoder":
        raise ValueError(f"encoder._target_ = {short(target)} is not implemented (ConformerEncoder)")
    return EncoderConfig(**enc)


def _predictor(cfg: dict, dec: dict) -> tuple[int, int, int]:
    """The `decoder` section of a transducer -> (vocabulary, pred_hidden, pred_rnn_layers)."""
    settings("decoder", dec, {"_target_", "prednet", "vocab_size", "normalization_mode", "blank_as_pad"})
    if dec.get("normalization_mode") is not None:
        raise ValueError(f"decoder.normalization_mode = {short(dec['normalization_mode'])} is not "
                         "implemented (only null: no normalization in the predictor)")
    if dec.get("blank_as_pad", True) is not True:
        raise ValueError(f"decoder.blank_as_pad = {short(dec['blank_as_pad'])} is not implemented (only "
                         "true: the blank embeds to zeros and starts the sequence)")
    vocab = int(dec.get("vocab_size") or cfg["joint"]["num_classes"])
    pn = dec.get("prednet") or {}
    settings("decoder.prednet", pn, {"pred_hidden", "pred_rnn_layers", "rnn_hidden_size"})
    if pn.get("rnn_hidden_size", -1) not in (-1, None, pn["pred_hidden"]):
        raise ValueError(f"decoder.prednet.rnn_hidden_size = {short(pn['rnn_hidden_size'])} is not "
                         "implemented (an LSTM with a projection)")
    return vocab, int(pn["pred_hidden"]), int(pn.get("pred_rnn_layers", 1))


def _joint(jcfg: dict, d_model: int) -> dict:
    """The `joint` section -> the joint's settings (TransducerConfig's fields of that name)."""
    _check_target("joint._target_", jcfg.get("_target_"), ("RNNTJoint",))
    settings("joint", jcfg, {"_target_", "jointnet", "num_classes", "num_extra_outputs"})
    jn = jcfg.get("jointnet") or {}
    settings("joint.jointnet", jn, {"encoder_hidden", "pred_hidden", "joint_hidden", "activation", "dropout"})
    activation = str(jn.get("activation", "relu")).lower()
    out = {"joint_enc_hidden": int(jn.get("encoder_hidden", d_model)), "joint_pred_hidden": int(jn["pred_hidden"]),
           "joint_hidden": int(jn["joint_hidden"]), "activation": activation,
           "out_index": 2 if float(jn.get("dropout") or 0.0) > 0 else 1,
           "num_extra_outputs": int(jcfg.get("num_extra_outputs") or 0)}
    if activation not in JOINT_ACTIVATIONS:
        raise ValueError(f"joint.jointnet.activation = {short(activation)} is not implemented "
                         f"({', '.join(JOINT_ACTIVATIONS)})")
    return out


def _joint_outputs(cfg: dict, extra: int) -> tuple[str, Optional[list[int]], int]:
    """What the joint's extra outputs are, from `decoding` -> (kind, durations, max_symbols). The rest
    of `decoding` is NeMo's default search (strategy, beam sizes, confidence...), chosen per call here."""
    decoding = cfg.get("decoding") or {}
    durations = decoding.get("durations") or (cfg.get("model_defaults") or {}).get("tdt_durations")
    if decoding.get("big_blank_durations"):
        raise ValueError(f"decoding.big_blank_durations = {short(decoding['big_blank_durations'])}: "
                         "multi-blank transducers are not implemented")
    model_type = decoding.get("model_type")
    if extra > 0:
        if model_type not in (None, "tdt"):
            raise ValueError(f"decoding.model_type = {short(model_type)} is not implemented with "
                             f"{extra} extra joint outputs (tdt)")
        if not durations or len(durations) != extra:
            raise ValueError("TDT joint without a matching list of durations in the config")
        kind, durations = "tdt", [int(d) for d in durations]
    else:
        if model_type not in (None, "rnnt") or decoding.get("durations"):
            raise ValueError(f"decoding.model_type = {short(model_type)}, durations = "
                             f"{short(decoding.get('durations'))}: the joint has no duration outputs "
                             "(num_extra_outputs 0), so only an RNN-T is implemented")
        kind, durations = "rnnt", None
    greedy = decoding.get("greedy") or {}
    ms = greedy.get("max_symbols", greedy.get("max_symbols_per_step"))
    return kind, durations, int(ms) if ms is not None else DEFAULT_MAX_SYMBOLS


def _transducer(cfg: dict, dec: dict, d_model: int) -> TransducerConfig:
    vocab, pred_hidden, layers = _predictor(cfg, dec)
    jcfg = cfg["joint"]
    joint = _joint(jcfg, d_model)
    kind, durations, max_symbols = _joint_outputs(cfg, joint["num_extra_outputs"])
    return TransducerConfig(vocab_size=vocab, pred_hidden=pred_hidden, pred_rnn_layers=layers,
                            num_classes=int(jcfg.get("num_classes") or vocab), kind=kind, durations=durations,
                            max_symbols=max_symbols, **joint)


def _ctc(cfg: dict, dec: dict, dec_kind: str, d_model: int) -> Optional[CTCConfig]:
    """The CTC head: the `decoder` of a CTC model, `aux_ctc.decoder` of a hybrid; None without one."""
    ctc_cfg = None
    if dec_kind == "ConvASRDecoder":
        ctc_cfg, where = dec, "decoder"
    elif cfg.get("aux_ctc"):
        settings("aux_ctc", cfg["aux_ctc"], {"decoder"})
        ctc_cfg, where = cfg["aux_ctc"].get("decoder"), "aux_ctc.decoder"
        if ctc_cfg is not None:
            _check_target("aux_ctc.decoder._target_", ctc_cfg.get("_target_"), ("ConvASRDecoder",))
    if ctc_cfg is None:
        return None
    settings(where, ctc_cfg, {"_target_", "feat_in", "num_classes", "vocabulary", "add_blank"}, table="ctc")
    if ctc_cfg.get("add_blank", True) is not True:
        raise ValueError(f"{where}.add_blank = {short(ctc_cfg['add_blank'])} is not implemented (only true)")
    n = int(ctc_cfg.get("num_classes") or -1)
    if n <= 0:  # NeMo: num_classes <= 0 means the vocabulary's size
        n = len(ctc_cfg.get("vocabulary") or [])
    if n <= 0:
        raise ValueError("CTC decoder without num_classes")
    return CTCConfig(int(ctc_cfg.get("feat_in", d_model)), n)


def _prompt(cfg: dict, target: str, d_model: int) -> Optional[PromptConfig]:
    """The language prompt: NeMo builds it when the class is a prompt model and
    model_defaults.initialize_prompt_feature is true (other classes never read these keys)."""
    defaults = cfg.get("model_defaults") or {}
    if _class(target) not in PROMPT_CLASSES or not defaults.get("initialize_prompt_feature", False):
        return None
    enc_hidden = int(defaults.get("enc_hidden", d_model))
    if enc_hidden != d_model:
        raise ValueError(f"model_defaults.enc_hidden = {enc_hidden} disagrees with encoder.d_model = {d_model} "
                         "(the prompt projection works on the encoder output)")
    num_prompts = int(defaults.get("num_prompts", 128))
    if num_prompts <= 0:
        raise ValueError(f"model_defaults.num_prompts = {num_prompts} is not implemented (a positive count)")
    # An unquoted `no` (Norwegian) reads as a boolean in YAML 1.1: the keys are NeMo's strings.
    dictionary = {("no" if k is False else str(k)): int(v)
                  for k, v in (defaults.get("prompt_dictionary") or {}).items()}
    bad = {k: v for k, v in dictionary.items() if not 0 <= v < num_prompts}
    if bad:
        raise ValueError(f"model_defaults.prompt_dictionary = {short(bad)}: indices outside 0..{num_prompts - 1}")
    return PromptConfig(num_prompts, dictionary)

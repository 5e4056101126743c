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

from dataclasses import dataclass, field
from typing import Optional

from ..nemo import config as _nemo
from ..nemo.config import (EncoderConfig, FrontEndConfig, _check_target, _class,  # noqa: F401
                           encoder_config, frontend_config, short)
from ..search.transducer import DEFAULT_MAX_SYMBOLS

_TRAINING = "training only"
# The front end's and the encoder's (nemo/config.py), and the heads'.
HARMLESS_KEYS: dict[str, dict[str, str]] = {
    **_nemo.HARMLESS_KEYS,
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


def settings(section: str, cfg: dict, implemented: set[str], table: Optional[str] = None) -> dict:
    """`nemo.config.settings` with the heads' harmless keys too."""
    return _nemo.settings(section, cfg, implemented, table, HARMLESS_KEYS)


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
    front = frontend_config(cfg)
    sample_rate = int(cfg.get("sample_rate") or front.sample_rate)
    if cfg.get("sample_rate") and sample_rate != int(front.sample_rate):
        raise ValueError(f"sample_rate = {sample_rate} disagrees with preprocessor.sample_rate = "
                         f"{int(front.sample_rate)}")
    encoder = encoder_config(cfg, int(front.features))
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
# SIZE_MAXIMA (the front end's and the encoder's, nemo/config.py) and the heads' (vocabulary 16k, 5 TDT
# durations, 2 predictor layers of 640 in the largest published model).
SIZE_MAXIMA: dict[str, int] = {
    **_nemo.SIZE_MAXIMA,
    "decoder.vocab_size": 1 << 20, "decoder.prednet.pred_hidden": 16384, "decoder.prednet.pred_rnn_layers": 64,
    "joint.jointnet.encoder_hidden": 16384, "joint.jointnet.pred_hidden": 16384,
    "joint.jointnet.joint_hidden": 16384, "joint.num_classes": 1 << 20, "joint.num_extra_outputs": 256,
    "decoding.durations": 256, "ctc.feat_in": 16384, "ctc.num_classes": 1 << 20,
    "model_defaults.num_prompts": 1 << 16,
}
_SIZE_FIELDS = {
    **_nemo.SIZE_FIELDS,
    "decoder.vocab_size": ("transducer", "vocab_size"), "decoder.prednet.pred_hidden": ("transducer", "pred_hidden"),
    "decoder.prednet.pred_rnn_layers": ("transducer", "pred_rnn_layers"),
    "joint.jointnet.encoder_hidden": ("transducer", "joint_enc_hidden"),
    "joint.jointnet.pred_hidden": ("transducer", "joint_pred_hidden"),
    "joint.jointnet.joint_hidden": ("transducer", "joint_hidden"), "joint.num_classes": ("transducer", "num_classes"),
    "joint.num_extra_outputs": ("transducer", "num_extra_outputs"), "decoding.durations": ("transducer", "durations"),
    "ctc.feat_in": ("ctc", "feat_in"), "ctc.num_classes": ("ctc", "num_classes"),
    "model_defaults.num_prompts": ("prompt", "num_prompts"),
}


def check_sizes(config: ParakeetConfig) -> None:
    """A ValueError naming the key of the first structural size of `config` above SIZE_MAXIMA."""
    _nemo.check_sizes(config, SIZE_MAXIMA, _SIZE_FIELDS)


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

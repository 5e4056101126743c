"""A NeMo Canary model config (`model_config.yaml` of an `EncDecMultiTaskModel`, as a dict) parsed and
checked.

The front end and the FastConformer encoder are Parakeet's (`parakeet.config`: the same NeMo sections,
the same rules); this module reads what Canary adds: the Transformer decoder (`transf_decoder`), the
projection between them (`model_defaults`), the output head (`head`), the prompt (`prompt_format`,
`prompt_defaults`) and the default search (`decoding`). As for Parakeet, a key of a section this code
builds from is a setting it implements, one `HARMLESS_KEYS` lists (no effect at inference), or an
error naming it: a model file is never run as something it is not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..nemo.config import DecoderConfig, EncoderConfig, FrontEndConfig, check_sizes, encoder_config, frontend_config, short

# The model class (the config's `target`) this family builds.
MODEL_CLASSES = ("EncDecMultiTaskModel",)
# NeMo's prompt formats of Canary models (nemo.collections.common.prompts): canary (canary-1b) and
# canary2 (canary-1b-flash, canary-180m-flash, canary-1b-v2).
PROMPT_FORMATS = ("canary", "canary2")
ACTIVATIONS = ("relu", "gelu", "swish", "silu")
_TRAINING = "training only"
HARMLESS_KEYS = {
    "transf_decoder": {"model_name": "which pretrained decoder NeMo started training from",
                       "pretrained": "whether NeMo started training from a pretrained decoder",
                       "encoder": "a pretrained encoder's config for training"},
    "transf_decoder.config_dict": {"embedding_dropout": _TRAINING, "ffn_dropout": _TRAINING,
                                   "attn_score_dropout": _TRAINING, "attn_layer_dropout": _TRAINING,
                                   "vocab_size": "the head's num_classes decides it"},
    "head": {"dropout": _TRAINING, "use_transformer_init": "initialization only",
             "activation": "between layers of a head of more than one layer (an error)"},
}
# The largest sizes a config may give (far above every published Canary: 1B-class decoders have 4-8
# layers of 1024, 8 heads, 1024-position tables, 16k-token vocabularies), so a hostile file's sizes are
# refused before a module is built.
SIZE_MAXIMA = {"hidden_size": 16384, "inner_size": 65536, "num_layers": 256, "num_attention_heads": 256,
               "max_sequence_length": 1 << 16, "num_classes": 1 << 20}


@dataclass(frozen=True)
class DecodingDefaults:
    """The search the model's `decoding` section asks for (what NeMo's `transcribe()` runs by default)."""

    strategy: str = "beam"       # "beam" or "greedy"
    beam_size: int = 1
    length_penalty: float = 0.0  # `beam.length_penalty` (NeMo never reads `beam.len_pen`)
    beam_delta: int = -1         # beam.max_generation_delta: at most encoder frames + delta tokens (-1: no limit)
    greedy_delta: int = -1       # greedy.max_generation_delta


@dataclass(frozen=True)
class CanaryConfig:
    target: str
    sample_rate: int
    preprocessor: FrontEndConfig
    encoder: EncoderConfig
    decoder: DecoderConfig
    prompt_format: str
    prompt_defaults: dict    # slot -> value of the "user" turn (the canary2 configs give them)
    decoding: DecodingDefaults

    @property
    def projection(self) -> bool:
        """Whether NeMo put `encoder_decoder_proj` between the encoder and the decoder (their widths differ)."""
        return self.encoder.d_model != self.decoder.hidden


def _class(target) -> str:
    return str(target or "").rsplit(".", 1)[-1]


def _keys(section: str, cfg: dict, implemented: set[str]) -> dict:
    harmless = HARMLESS_KEYS.get(section, {})
    out = {}
    for key, value in cfg.items():
        if key in implemented:
            out[key] = value
        elif key not in harmless:
            raise ValueError(f"{section}.{str(key)[:80]} = {short(value)} is a setting this code does not implement")
    return out


def _size(section: str, key: str, value, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= SIZE_MAXIMA[key]:
        raise ValueError(f"{section}.{key} = {short(value)} is out of the range this code accepts ({least} to "
                         f"{SIZE_MAXIMA[key]})")
    return value


def is_canary(cfg: dict) -> bool:
    """Whether a NeMo config is one of this family's (an AED multitask model)."""
    return _class(cfg.get("target")) in MODEL_CLASSES or ("transf_decoder" in cfg and "prompt_format" in cfg)


def parse_config(cfg: dict) -> CanaryConfig:
    """NeMo's model config -> `CanaryConfig`; a setting this code does not implement is a ValueError
    naming it (KeyError, TypeError for a missing or malformed required key)."""
    target = str(cfg.get("target", ""))
    if target and _class(target) not in MODEL_CLASSES:
        raise ValueError(f"target = {short(target)} is not implemented ({', '.join(MODEL_CLASSES)})")
    front = frontend_config(cfg)
    sample_rate = int(cfg.get("sample_rate") or front.sample_rate)
    if sample_rate != int(front.sample_rate):
        raise ValueError(f"sample_rate = {sample_rate} disagrees with preprocessor.sample_rate = {front.sample_rate}")
    encoder = encoder_config(cfg, int(front.features))
    transf_encoder = cfg.get("transf_encoder") or {}
    if int(transf_encoder.get("num_layers", 0) or 0) > 0:
        raise ValueError(f"transf_encoder.num_layers = {short(transf_encoder['num_layers'])} is not implemented "
                         "(only 0: no Transformer encoder between the FastConformer and the decoder)")
    fmt = cfg.get("prompt_format")
    if fmt not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format = {short(fmt)} is not implemented ({', '.join(PROMPT_FORMATS)})")
    decoder = _decoder(cfg)
    dims = cfg.get("model_defaults") or {}
    if dims.get("asr_enc_hidden") not in (None, encoder.d_model):
        raise ValueError(f"model_defaults.asr_enc_hidden = {short(dims['asr_enc_hidden'])} disagrees with "
                         f"encoder.d_model = {encoder.d_model}")
    if dims.get("lm_dec_hidden") not in (None, decoder.hidden):
        raise ValueError(f"model_defaults.lm_dec_hidden = {short(dims['lm_dec_hidden'])} disagrees with the "
                         f"decoder's hidden_size = {decoder.hidden}")
    config = CanaryConfig(target, sample_rate, front, encoder, decoder, str(fmt), _prompt_defaults(cfg),
                          _decoding(cfg.get("decoding") or {}))
    check_sizes(config)  # the front end's and the encoder's, as Parakeet's
    return config


def _decoder(cfg: dict) -> DecoderConfig:
    top = _keys("transf_decoder", dict(cfg["transf_decoder"]), {"_target_", "config_dict", "pre_ln_final_layer_norm"})
    if _class(top.get("_target_")) not in ("get_nemo_transformer", ""):
        raise ValueError(f"transf_decoder._target_ = {short(top['_target_'])} is not implemented "
                         "(get_nemo_transformer)")
    d = _keys("transf_decoder.config_dict", dict(top["config_dict"]),
              {"max_sequence_length", "num_token_types", "learn_positional_encodings", "hidden_size", "inner_size",
               "num_layers", "num_attention_heads", "hidden_act", "pre_ln"})
    section = "transf_decoder.config_dict"
    if d.get("num_token_types", 0):
        raise ValueError(f"{section}.num_token_types = {short(d['num_token_types'])} is not implemented (only 0)")
    if d.get("learn_positional_encodings", False):
        raise ValueError(f"{section}.learn_positional_encodings = true is not implemented (only the fixed "
                         "sinusoidal table)")
    act = str(d.get("hidden_act", "relu"))
    if act not in ACTIVATIONS:
        raise ValueError(f"{section}.hidden_act = {short(act)} is not implemented ({', '.join(ACTIVATIONS)})")
    hidden = _size(section, "hidden_size", d["hidden_size"])
    heads = _size(section, "num_attention_heads", d.get("num_attention_heads", 8))
    if hidden % heads:
        raise ValueError(f"{section}.num_attention_heads = {heads} does not divide hidden_size {hidden}")
    head = _keys("head", dict(cfg["head"]), {"_target_", "num_layers", "log_softmax", "hidden_size", "num_classes"})
    if _class(head.get("_target_")) not in ("TokenClassifier", ""):
        raise ValueError(f"head._target_ = {short(head['_target_'])} is not implemented (TokenClassifier)")
    if int(head.get("num_layers", 1)) != 1:
        raise ValueError(f"head.num_layers = {short(head['num_layers'])} is not implemented (only 1: one linear layer)")
    if head.get("hidden_size", hidden) != hidden:
        raise ValueError(f"head.hidden_size = {short(head['hidden_size'])} disagrees with the decoder's hidden_size "
                         f"= {hidden}")
    return DecoderConfig(
        vocab_size=_size("head", "num_classes", head["num_classes"]), hidden=hidden,
        inner=_size(section, "inner_size", d.get("inner_size", 4 * hidden)),
        layers=_size(section, "num_layers", d["num_layers"]), heads=heads,
        max_positions=_size(section, "max_sequence_length", d.get("max_sequence_length", 512)),
        activation=act, pre_ln=bool(d.get("pre_ln", False)),
        final_norm=bool(top.get("pre_ln_final_layer_norm", True)))


def _prompt_defaults(cfg: dict) -> dict:
    """The slot values of the "user" turn in `prompt_defaults` (absent: {})."""
    for turn in cfg.get("prompt_defaults") or []:
        if isinstance(turn, dict) and turn.get("role") == "user":
            slots = turn.get("slots") or {}
            if not isinstance(slots, dict):
                raise ValueError(f"prompt_defaults: the user turn's slots = {short(slots)} is not a mapping")
            return {str(k): "" if v is None else str(v) for k, v in slots.items()}
    return {}


def _decoding(d: dict) -> DecodingDefaults:
    strategy = str(d.get("strategy", "beam"))
    if strategy not in ("beam", "greedy", "greedy_batch"):
        raise ValueError(f"decoding.strategy = {short(strategy)} is not implemented (beam, greedy)")
    beam = d.get("beam") or {}
    greedy = d.get("greedy") or {}
    for section, part in (("decoding.beam", beam), ("decoding.greedy", greedy)):
        for key in ("ngram_lm_model", "boosting_tree"):
            if part.get(key):
                raise ValueError(f"{section}.{key} = {short(part[key])} is not implemented")
    size = beam.get("beam_size", 1)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 64:
        raise ValueError(f"decoding.beam.beam_size = {short(size)} is out of the range this code accepts (1 to 64)")
    pen = beam.get("length_penalty", 0.0)
    if isinstance(pen, bool) or not isinstance(pen, (int, float)) or not 0 <= pen <= 10:
        raise ValueError(f"decoding.beam.length_penalty = {short(pen)} is out of the range this code accepts (0 to 10)")
    return DecodingDefaults("greedy" if strategy.startswith("greedy") else "beam", size, float(pen),
                            int(beam.get("max_generation_delta", -1)), int(greedy.get("max_generation_delta", -1)))


def max_new_tokens(max_positions: int, prompt_len: int, encoder_frames: Optional[int], delta: int) -> int:
    """NeMo's length limit: the decoder's table holds prompt and output together (max_positions), and a
    non-negative delta also bounds the total by encoder frames + delta. The tokens that may be generated."""
    total = max_positions if delta < 0 or encoder_frames is None else min(max_positions, encoder_frames + delta)
    return max(total - prompt_len, 0)

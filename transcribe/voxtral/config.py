"""A Voxtral checkpoint directory's settings (transformers' `voxtral` layout, as `mistralai/Voxtral-Mini-3B-2507` and
`Voxtral-Small-24B-2507` publish it: config.json, preprocessor_config.json, generation_config.json, tekken.json)
read and checked.

The model is a Whisper encoder (two convolutions, GELU, the stored position table, pre-LN layers with a bias-free
key projection, a final LayerNorm) over 30 s chunks of 3000 mel frames, each chunk's 1500 states stacked by fours
(`intermediate_size` = 4 * d_model) into a bias-free projector (Linear, GELU, Linear) and written over the
prompt's [AUDIO] rows of a Llama LM (`llm`). Every key of config.json is implemented, known to change nothing at
inference, or refused with a ModelError naming it. Mistral's own layout (params.json + consolidated.safetensors,
the same repos' other files) is not read: the transformers files beside it are."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..config_yaml import excerpt
from ..errors import ModelError
from ..json_files import read_optional as read_json
from ..llm.config import LMConfig
from ..llm.generation_config import GenerationDefaults, generation_defaults

MODEL_TYPE = "voxtral"
ENCODER_TYPE = "voxtral_encoder"
ARCHITECTURE = "VoxtralForConditionalGeneration"
MISTRAL_LAYOUT = ("Mistral's native layout (params.json + consolidated.safetensors) is not read here: the "
                  "transformers files (config.json, model*.safetensors) the same repositories hold are")
# Sizes far above the published models (32 layers of 1280 for the encoder), so that a hostile file is refused
# before a module is built.
_ENCODER_MAXIMA = {"num_mel_bins": 512, "num_hidden_layers": 256, "num_attention_heads": 256,
                   "intermediate_size": 1 << 17, "hidden_size": 16384, "max_source_positions": 1 << 16,
                   "head_dim": 1024, "num_key_value_heads": 256}
_ENCODER_HARMLESS = {"model_type", "dropout", "attention_dropout", "activation_dropout", "layerdrop",
                     "encoder_layerdrop", "initializer_range", "dtype", "torch_dtype", "transformers_version",
                     "_name_or_path", "architectures", "output_attentions", "output_hidden_states", "return_dict",
                     "use_cache", "chunk_size_feed_forward", "id2label", "label2id", "problem_type",
                     "is_encoder_decoder", "vocab_size", "scale_embedding", "activation_function"}
# transformers' attribute_map names of the encoder's sizes (config files hold either)
_ALIASES = {"d_model": "hidden_size", "encoder_layers": "num_hidden_layers",
            "encoder_attention_heads": "num_attention_heads", "encoder_ffn_dim": "intermediate_size"}
_TOP_HARMLESS = {"model_type", "architectures", "initializer_range", "dtype", "torch_dtype", "transformers_version",
                 "_name_or_path", "output_attentions", "output_hidden_states", "return_dict", "use_cache",
                 "chunk_size_feed_forward", "id2label", "label2id", "problem_type", "is_encoder_decoder",
                 "tie_word_embeddings", "pad_token_id", "eos_token_id", "bos_token_id", "audio_token_id",
                 "audio_config", "text_config", "projector_hidden_act", "hidden_size", "vocab_size"}
# WhisperFeatureExtractor's settings as Voxtral's processor runs it (128 mels, 30 s chunks).
FEATURE_DEFAULTS = {"feature_size": 128, "sampling_rate": 16000, "hop_length": 160, "n_fft": 400,
                    "chunk_length": 30, "padding_value": 0.0, "dither": 0.0}
_FEATURE_HARMLESS = {"feature_extractor_type", "processor_class", "padding_side", "return_attention_mask",
                     "nb_max_frames", "n_samples"}
# The published generation_config.json sets no max_new_tokens (transformers would stop after 20 tokens, its
# default max_length): 500 is the model card's example value and about 6 minutes of speech.
DEFAULT_MAX_NEW_TOKENS = 500


@dataclass(frozen=True)
class FeatureConfig:
    sample_rate: int = 16000
    n_mels: int = 128
    n_fft: int = 400
    hop: int = 160
    chunk_s: int = 30            # the audio is zero-padded to whole chunks; each is one encoder input

    @property
    def chunk_samples(self) -> int:
        return self.chunk_s * self.sample_rate

    @property
    def chunk_frames(self) -> int:
        return self.chunk_samples // self.hop


@dataclass(frozen=True)
class EncoderConfig:
    n_mels: int
    d_model: int
    layers: int
    heads: int
    ffn_dim: int          # also the projector's input width: 4 encoder states stacked
    positions: int        # max_source_positions: one chunk's states (1500)

    @property
    def stack(self) -> int:
        """Encoder states per LM row (intermediate_size // d_model: 4)."""
        return self.ffn_dim // self.d_model

    @property
    def chunk_rows(self) -> int:
        """LM rows of one 30 s chunk (375)."""
        return self.positions // self.stack


@dataclass(frozen=True)
class VoxtralConfig:
    features: FeatureConfig
    encoder: EncoderConfig
    lm: LMConfig
    audio_token_id: int
    generation: GenerationDefaults


def _int(where: str, cfg: dict, key: str, default: Any = None, least: int = 1, most: Optional[int] = None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least or (most is not None and value > most):
        bound = f" and <= {most}" if most is not None else ""
        raise ModelError(f"{where}: {key} = {excerpt(value, 80)} is not a whole number >= {least}{bound}")
    return value


def encoder_config(enc: Any, where: str) -> EncoderConfig:
    if not isinstance(enc, dict):
        raise ModelError(f"{where}: audio_config is not an object")
    where = f"{where} audio_config"
    if enc.get("model_type", ENCODER_TYPE) != ENCODER_TYPE:
        raise ModelError(f"{where}: model_type {excerpt(enc.get('model_type'), 60)} is not {ENCODER_TYPE!r}")
    enc = {_ALIASES.get(k, k): v for k, v in enc.items()}
    for key in enc:
        if key not in _ENCODER_HARMLESS and key not in _ENCODER_MAXIMA:
            raise ModelError(f"{where}: the setting {key!r} is not implemented")
    act = enc.get("activation_function", "gelu")
    if act != "gelu":
        raise ModelError(f"{where}: activation_function {excerpt(act, 40)} is not implemented (only gelu)")
    if enc.get("scale_embedding", False):
        raise ModelError(f"{where}: scale_embedding true is not implemented (the published encoders scale nothing)")

    def size(key: str, default: int) -> int:
        return _int(where, enc, key, default, 1, _ENCODER_MAXIMA[key])

    cfg = EncoderConfig(n_mels=size("num_mel_bins", 128), d_model=size("hidden_size", 1280),
                        layers=size("num_hidden_layers", 32), heads=size("num_attention_heads", 20),
                        ffn_dim=size("intermediate_size", 5120), positions=size("max_source_positions", 1500))
    if cfg.d_model % cfg.heads:
        raise ModelError(f"{where}: hidden_size {cfg.d_model} is not a multiple of its {cfg.heads} heads")
    if enc.get("head_dim", cfg.d_model // cfg.heads) != cfg.d_model // cfg.heads:
        raise ModelError(f"{where}: head_dim {excerpt(enc['head_dim'], 40)} is not hidden_size / heads "
                         f"({cfg.d_model // cfg.heads}): the encoder computes no other")
    if enc.get("num_key_value_heads", cfg.heads) != cfg.heads:
        raise ModelError(f"{where}: num_key_value_heads {excerpt(enc['num_key_value_heads'], 40)} differs from its "
                         f"{cfg.heads} heads (the encoder has no grouped attention)")
    if cfg.ffn_dim % cfg.d_model or cfg.positions % cfg.stack:
        raise ModelError(f"{where}: intermediate_size {cfg.ffn_dim} is not a whole number of hidden_size "
                         f"{cfg.d_model} states dividing max_source_positions {cfg.positions} (the projector reads "
                         "the states stacked by intermediate_size / hidden_size)")
    return cfg


def feature_config(feats: dict, enc: EncoderConfig, where: str) -> FeatureConfig:
    """WhisperFeatureExtractor's settings: values other than those this front end computes are refused."""
    where = f"{where} feature extractor"
    kind = feats.get("feature_extractor_type", "WhisperFeatureExtractor")
    if kind != "WhisperFeatureExtractor":
        raise ModelError(f"{where}: {excerpt(kind, 60)} is not implemented (only WhisperFeatureExtractor)")
    for key in feats:
        if key not in FEATURE_DEFAULTS and key not in _FEATURE_HARMLESS:
            raise ModelError(f"{where}: the setting {key!r} is not implemented")
    for key in ("sampling_rate", "hop_length", "n_fft", "chunk_length", "padding_value", "dither"):
        value = feats.get(key, FEATURE_DEFAULTS[key])
        if value != FEATURE_DEFAULTS[key] or isinstance(value, bool):
            raise ModelError(f"{where}: {key} = {excerpt(value, 40)} is not implemented (only "
                             f"{FEATURE_DEFAULTS[key]})")
    n_mels = _int(where, feats, "feature_size", FEATURE_DEFAULTS["feature_size"], 1, 512)
    if n_mels != enc.n_mels:
        raise ModelError(f"{where}: feature_size {n_mels} differs from the encoder's num_mel_bins {enc.n_mels}")
    features = FeatureConfig(n_mels=n_mels)
    if features.chunk_frames != 2 * enc.positions:
        raise ModelError(f"{where}: a {features.chunk_s} s chunk has {features.chunk_frames} mel frames; the encoder "
                         f"takes 2 * max_source_positions = {2 * enc.positions}")
    return features


def parse_config(cfg: dict, feats: dict, gen: dict, where: str) -> VoxtralConfig:
    if cfg.get("model_type") != MODEL_TYPE:
        raise ModelError(f"{where}: model_type {excerpt(cfg.get('model_type'), 60)} is not {MODEL_TYPE!r}")
    archs = cfg.get("architectures") or [ARCHITECTURE]
    if archs != [ARCHITECTURE]:
        raise ModelError(f"{where}: architectures {excerpt(archs, 80)} are not implemented (only {ARCHITECTURE})")
    for key in cfg:
        if key not in _TOP_HARMLESS:
            raise ModelError(f"{where}: the setting {key!r} is not implemented")
    act = cfg.get("projector_hidden_act", "gelu")
    if act != "gelu":
        raise ModelError(f"{where}: projector_hidden_act {excerpt(act, 40)} is not implemented (only gelu)")
    encoder = encoder_config(cfg.get("audio_config", {}), where)
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise ModelError(f"{where}: text_config is not an object")
    text = {"model_type": "llama", **text}
    lm = LMConfig.from_hf(text, f"{where} text_config", tie_default=bool(cfg.get("tie_word_embeddings", False)))
    if lm.model_type not in ("llama", "mistral"):
        raise ModelError(f"{where}: the language model is {lm.model_type!r}, not llama")
    audio_token = _int(where, cfg, "audio_token_id", 24, 0, lm.vocab_size - 1)
    features = feature_config(feats, encoder, where)
    generation = generation_defaults(gen, text.get("eos_token_id", 2), DEFAULT_MAX_NEW_TOKENS, where)
    return VoxtralConfig(features, encoder, lm, audio_token, generation)


def read_config(path: Path) -> VoxtralConfig:
    cfg = read_json(path / "config.json")
    if cfg is None:
        if (path / "params.json").is_file():
            raise ModelError(f"{path}: {MISTRAL_LAYOUT}")
        raise ModelError(f"{path}: no config.json")
    feats = read_json(path / "preprocessor_config.json") or {}
    return parse_config(cfg, feats, read_json(path / "generation_config.json") or {}, str(path))

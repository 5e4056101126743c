"""A Qwen3-ASR checkpoint directory's settings (transformers' `qwen3_asr` layout, the `-hf` repos: config.json,
processor_config.json or preprocessor_config.json, generation_config.json) read and checked.

The model is an audio encoder (three stride-2 convolutions over chunks of 2 * n_window mel frames, a linear map,
sinusoidal positions per chunk, pre-LN Transformer layers attending within windows of n_window_infer mel frames,
a final LayerNorm), a projector (linear, GELU, linear) and a Qwen3 decoder-only LM (`llm`). Every key of
config.json is implemented, known to change nothing at inference, or refused with a ModelError naming it.

Qwen's original layout (`Qwen/Qwen3-ASR-0.6B`: a `thinker_config`, `thinker.*` tensor names, multimodal rotary
settings, vocab.json + merges.txt without tokenizer.json, Whisper's feature extractor) differs from this one in
more than names: it is refused with a message naming the converted repos (`ORIGINAL_LAYOUT`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..config_yaml import excerpt
from ..errors import ModelError
from ..json_files import read_optional as read_json
from ..llm.config import LMConfig
from ..llm.generation_config import GenerationDefaults, generation_defaults

MODEL_TYPE = "qwen3_asr"
ENCODER_TYPE = "qwen3_asr_encoder"
ARCHITECTURE = "Qwen3ASRForConditionalGeneration"
ORIGINAL_LAYOUT = ("Qwen's original Qwen3-ASR layout (thinker_config, thinker.* tensors, no tokenizer.json) is not "
                   "loaded here: use the transformers conversion (Qwen/Qwen3-ASR-0.6B-hf, Qwen/Qwen3-ASR-1.7B-hf; "
                   "aliases qwen3-asr-0.6b, qwen3-asr-1.7b)")

# The largest sizes a config may give (far above the published models: 24 layers of 1024, 480 conv channels),
# so a hostile file is refused before a module is built.
_ENCODER_MAXIMA = {"num_mel_bins": 512, "encoder_layers": 256, "encoder_attention_heads": 256,
                   "encoder_ffn_dim": 65536, "d_model": 16384, "output_dim": 65536, "downsample_hidden_size": 8192,
                   "n_window": 4096, "n_window_infer": 1 << 20, "max_position_embeddings": 1 << 16}
# Keys of the encoder's config that change nothing here: training, bookkeeping, and `scale_embedding` (the
# reference computes its embed_scale and never applies it).
_ENCODER_HARMLESS = {"model_type", "dropout", "attention_dropout", "activation_dropout", "initializer_range",
                     "scale_embedding", "dtype", "torch_dtype", "transformers_version", "_name_or_path",
                     "architectures", "output_attentions", "output_hidden_states", "return_dict", "use_cache",
                     "chunk_size_feed_forward", "id2label", "label2id", "problem_type", "is_encoder_decoder"}
_TOP_HARMLESS = {"model_type", "architectures", "initializer_range", "dtype", "torch_dtype", "transformers_version",
                 "_name_or_path", "output_attentions", "output_hidden_states", "return_dict", "use_cache",
                 "chunk_size_feed_forward", "id2label", "label2id", "problem_type", "is_encoder_decoder",
                 "tie_word_embeddings", "pad_token_id", "eos_token_id", "bos_token_id", "audio_token_id",
                 "timestamp_token_id", "token_classification_bias", "audio_config", "text_config"}
# transformers' `Qwen3ASRFeatureExtractor` defaults: the settings this front end implements.
FEATURE_DEFAULTS = {"feature_size": 128, "sampling_rate": 16000, "hop_length": 160, "n_fft": 400,
                    "padding_value": 0.0, "dither": 0.0, "n_window": 50, "min_length": 8000}
_FEATURE_HARMLESS = {"feature_extractor_type", "processor_class", "chunk_length", "padding_side",
                     "return_attention_mask", "nb_max_frames", "n_samples"}
# max_new_tokens when generation_config.json sets none: the published -hf repos' value and the original Qwen3-ASR
# library's default (transformers 5.24 itself would stop after 20 new tokens, its default max_length).
DEFAULT_MAX_NEW_TOKENS = 512


def post_cnn(frames: int) -> int:
    """Positions after the three (kernel 3, stride 2, padding 1) convolutions of `frames` mel frames (0 stays 0)."""
    for _ in range(3):
        frames = (frames - 1) // 2 + 1 if frames > 0 else 0
    return frames


@dataclass(frozen=True)
class FeatureConfig:
    sample_rate: int = 16000
    n_mels: int = 128
    n_fft: int = 400
    hop: int = 160
    min_samples: int = 8000   # shorter inputs are zero-padded to this many samples, and the padding counts as audio
    chunk_frames: int = 100   # the mel axis is padded (with 0.0) to a multiple of this (2 * n_window)


@dataclass(frozen=True)
class EncoderConfig:
    n_mels: int
    d_model: int
    layers: int
    heads: int
    ffn_dim: int
    conv_channels: int
    n_window: int
    n_window_infer: int
    output_dim: int

    @property
    def chunk_frames(self) -> int:
        """Mel frames of one convolution chunk."""
        return 2 * self.n_window

    @property
    def chunk_positions(self) -> int:
        """Encoder positions of one full chunk (13 for 100 frames)."""
        return post_cnn(self.chunk_frames)

    @property
    def window_chunks(self) -> int:
        """Chunks of one attention window (n_window_infer // chunk_frames: 8 in the published models)."""
        return self.n_window_infer // self.chunk_frames

    @property
    def conv_freqs(self) -> int:
        """Mel bins left after the three stride-2 convolutions."""
        return post_cnn(self.n_mels)


@dataclass(frozen=True)
class Qwen3ASRConfig:
    features: FeatureConfig
    encoder: EncoderConfig
    lm: LMConfig
    audio_token_id: int
    generation: GenerationDefaults


def is_original_layout(cfg: dict) -> bool:
    return isinstance(cfg, dict) and "thinker_config" in cfg


def _int(where: str, cfg: dict, key: str, default: Any = None, least: int = 1, most: Optional[int] = None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least or (most is not None and value > most):
        bound = f" and <= {most}" if most is not None else ""
        raise ModelError(f"{where}: {key} = {excerpt(value, 80)} is not a whole number >= {least}{bound}")
    return value


def _unknown(where: str, cfg: dict, known: set) -> None:
    for key in cfg:
        if key not in known:
            raise ModelError(f"{where}: the setting {key!r} is not implemented")


def encoder_config(enc: Any, where: str) -> EncoderConfig:
    """transformers' `qwen3_asr_encoder` config -> the encoder's settings."""
    if not isinstance(enc, dict):
        raise ModelError(f"{where}: audio_config is not an object")
    where = f"{where} audio_config"
    if enc.get("model_type", ENCODER_TYPE) != ENCODER_TYPE:
        raise ModelError(f"{where}: model_type {excerpt(enc.get('model_type'), 60)} is not {ENCODER_TYPE!r}")
    sizes = set(_ENCODER_MAXIMA) | {"activation_function", "num_attention_heads", "num_key_value_heads",
                                    "encoder_attention_heads"}
    _unknown(where, enc, _ENCODER_HARMLESS | sizes)
    act = enc.get("activation_function", "gelu")
    if act != "gelu":
        raise ModelError(f"{where}: activation_function {excerpt(act, 40)} is not implemented (only gelu)")

    def size(key: str, default: int, least: int = 1) -> int:
        return _int(where, enc, key, default, least, _ENCODER_MAXIMA.get(key))

    # transformers' attribute_map: num_attention_heads is encoder_attention_heads (the converter writes either)
    heads_key = "encoder_attention_heads" if "encoder_attention_heads" in enc else "num_attention_heads"
    heads = _int(where, enc, heads_key, 16, 1, _ENCODER_MAXIMA["encoder_attention_heads"])
    if enc.get("num_key_value_heads", heads) != heads:
        raise ModelError(f"{where}: num_key_value_heads {excerpt(enc.get('num_key_value_heads'), 40)} differs from "
                         f"the {heads} attention heads (the encoder has no grouped attention)")
    cfg = EncoderConfig(n_mels=size("num_mel_bins", 128), d_model=size("d_model", 1024),
                        layers=size("encoder_layers", 24), heads=heads, ffn_dim=size("encoder_ffn_dim", 4096),
                        conv_channels=size("downsample_hidden_size", 480), n_window=size("n_window", 50),
                        n_window_infer=size("n_window_infer", 800), output_dim=size("output_dim", 3584))
    if cfg.d_model % cfg.heads:
        raise ModelError(f"{where}: d_model {cfg.d_model} is not a multiple of its {cfg.heads} heads")
    if cfg.n_window_infer % cfg.chunk_frames:
        raise ModelError(f"{where}: n_window_infer {cfg.n_window_infer} is not a multiple of 2 * n_window "
                         f"({cfg.chunk_frames}): attention windows would not hold whole chunks")
    positions = size("max_position_embeddings", 13)
    if positions < cfg.chunk_positions:
        raise ModelError(f"{where}: max_position_embeddings {positions} is fewer than the {cfg.chunk_positions} "
                         f"positions of a chunk of {cfg.chunk_frames} frames")
    return cfg


def feature_config(feats: dict, enc: EncoderConfig, where: str) -> FeatureConfig:
    """The feature extractor's settings (transformers' `Qwen3ASRFeatureExtractor`): values other than those this
    front end computes are refused."""
    where = f"{where} feature extractor"
    kind = feats.get("feature_extractor_type", "Qwen3ASRFeatureExtractor")
    if kind != "Qwen3ASRFeatureExtractor":
        raise ModelError(f"{where}: {excerpt(kind, 60)} is not implemented (only Qwen3ASRFeatureExtractor)")
    _unknown(where, feats, set(FEATURE_DEFAULTS) | _FEATURE_HARMLESS)
    for key in ("sampling_rate", "hop_length", "n_fft", "padding_value", "dither"):
        value = feats.get(key, FEATURE_DEFAULTS[key])
        if value != FEATURE_DEFAULTS[key] or isinstance(value, bool):
            raise ModelError(f"{where}: {key} = {excerpt(value, 40)} is not implemented (only "
                             f"{FEATURE_DEFAULTS[key]})")
    n_mels = _int(where, feats, "feature_size", FEATURE_DEFAULTS["feature_size"], 1, 512)
    if n_mels != enc.n_mels:
        raise ModelError(f"{where}: feature_size {n_mels} differs from the encoder's num_mel_bins {enc.n_mels}")
    n_window = _int(where, feats, "n_window", FEATURE_DEFAULTS["n_window"], 1, 4096)
    if n_window != enc.n_window:
        raise ModelError(f"{where}: n_window {n_window} differs from the encoder's {enc.n_window}")
    min_samples = _int(where, feats, "min_length", FEATURE_DEFAULTS["min_length"], 0, 1 << 24)
    return FeatureConfig(n_mels=n_mels, min_samples=min_samples, chunk_frames=enc.chunk_frames)


def parse_config(cfg: dict, feats: dict, gen: dict, where: str) -> Qwen3ASRConfig:
    """config.json, the feature extractor's settings and generation_config.json -> the model's settings."""
    if is_original_layout(cfg):
        raise ModelError(f"{where}: {ORIGINAL_LAYOUT}")
    if cfg.get("model_type") != MODEL_TYPE:
        raise ModelError(f"{where}: model_type {excerpt(cfg.get('model_type'), 60)} is not {MODEL_TYPE!r}")
    archs = cfg.get("architectures") or [ARCHITECTURE]
    if archs != [ARCHITECTURE]:
        raise ModelError(f"{where}: architectures {excerpt(archs, 80)} are not implemented (only {ARCHITECTURE}: "
                         "the forced aligner's token classification is another model)")
    _unknown(where, cfg, _TOP_HARMLESS)
    encoder = encoder_config(cfg.get("audio_config", {}), where)
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise ModelError(f"{where}: text_config is not an object")
    text = {"model_type": "qwen3", **text}
    lm = LMConfig.from_hf(text, f"{where} text_config", tie_default=bool(cfg.get("tie_word_embeddings", True)))
    if lm.model_type != "qwen3":
        raise ModelError(f"{where}: the language model is {lm.model_type!r}, not qwen3")
    if encoder.output_dim != lm.hidden_size:
        raise ModelError(f"{where}: the audio encoder's output_dim {encoder.output_dim} differs from the language "
                         f"model's hidden_size {lm.hidden_size}")
    audio_token = _int(where, cfg, "audio_token_id", 151676, 0, lm.vocab_size - 1)
    features = feature_config(feats, encoder, where)
    generation = generation_defaults(gen, cfg.get("eos_token_id", (151643, 151645)), DEFAULT_MAX_NEW_TOKENS, where)
    return Qwen3ASRConfig(features, encoder, lm, audio_token, generation)


def read_features(path: Path) -> dict:
    """The feature extractor's settings: processor_config.json's `feature_extractor` (transformers 5) or
    preprocessor_config.json (older layouts); its defaults when neither is there."""
    proc = read_json(path / "processor_config.json")
    if proc is not None and isinstance(proc.get("feature_extractor"), dict):
        return proc["feature_extractor"]
    return read_json(path / "preprocessor_config.json") or {}


def read_config(path: Path) -> Qwen3ASRConfig:
    """A checkpoint directory's settings (config.json must be there)."""
    cfg = read_json(path / "config.json")
    if cfg is None:
        raise ModelError(f"{path}: no config.json")
    return parse_config(cfg, read_features(path), read_json(path / "generation_config.json") or {}, str(path))

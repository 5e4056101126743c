"""A Voxtral Realtime checkpoint directory's settings (transformers' `voxtral_realtime` layout, as
`VoxtralRealtimeForConditionalGeneration.save_pretrained` writes it, with the tokenizer's `tekken.json`):
config.json, processor_config.json (or preprocessor_config.json), generation_config.json and the `audio` section
of tekken.json (the streaming layout: left padding, transcription delay, frame rate), read and checked.

Every key of config.json is implemented, known to change nothing at inference, or refused with a ModelError
naming it. The streaming settings live in tekken.json as mistral-common reads them: the prompt is BOS and
`[STREAMING_PAD]` x (left-pad tokens + delay tokens), the audio is padded on the left by the left-pad tokens'
samples and, offline, on the right to whole tokens plus delay + 1 + 10 tokens of silence."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from ..errors import ModelError
from ..json_files import read_object, read_optional
from ..llm.config import LMConfig, _rope_theta

MODEL_TYPE = "voxtral_realtime"
ENCODER_TYPE = "voxtral_realtime_encoder"
TEXT_TYPE = "voxtral_realtime_text"
# mistral-common's OFFLINE_STREAMING_BUFFER_TOKENS: right padding after the delay for a last long word.
BUFFER_TOKENS = 10
# ada_rms_norm's bottleneck (transformers' VoxtralRealtimeTextAdaRmsNorm: a fixed 32) and the time embedding's base.
ADA_DIM = 32
TIME_THETA = 10000.0

_COMMON_HARMLESS = {"model_type", "architectures", "initializer_range", "dtype", "torch_dtype", "transformers_version",
                    "_name_or_path", "output_attentions", "output_hidden_states", "return_dict", "use_cache",
                    "chunk_size_feed_forward", "id2label", "label2id", "problem_type", "is_encoder_decoder",
                    "attention_dropout", "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id"}
# the encoder's `activation_function` is built by transformers and never applied; `vocab_size` is unused there;
# max_position_embeddings bounds nothing (the rotation is computed for any position)
_ENCODER_HARMLESS = _COMMON_HARMLESS | {"activation_function", "vocab_size", "max_position_embeddings", "layerdrop"}
_ENCODER_KEYS = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                 "head_dim", "hidden_act", "num_mel_bins", "rms_norm_eps", "rope_parameters", "rope_theta",
                 "rope_scaling", "sliding_window"}
_TEXT_KEYS = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps",
              "rope_parameters", "rope_theta", "rope_scaling", "sliding_window"}
_TOP_KEYS = {"audio_config", "text_config", "projector_hidden_act", "audio_length_per_tok", "default_num_delay_tokens",
             "downsample_factor", "hidden_size"}
_FEATURE_KEYS = {"feature_size", "sampling_rate", "hop_length", "n_fft", "win_length", "padding_value",
                 "global_log_mel_max"}
_FEATURE_HARMLESS = {"feature_extractor_type", "processor_class", "padding_side", "return_attention_mask"}
# The largest sizes a config may give (far above the published model's), so a hostile file is refused before a
# module is built.
_MAXIMA = {"hidden_size": 65536, "intermediate_size": 1 << 18, "num_hidden_layers": 512, "num_attention_heads": 1024,
           "num_key_value_heads": 1024, "head_dim": 4096, "num_mel_bins": 512, "vocab_size": 1 << 22,
           "sliding_window": 1 << 24, "max_position_embeddings": 1 << 26}


def _int(cfg: Mapping, key: str, where: str, default: Any = None, least: int = 1) -> int:
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < least or v > _MAXIMA.get(key, 1 << 30):
        raise ModelError(f"{where}: {key} must be an integer in [{least}, {_MAXIMA.get(key, 1 << 30)}] (got {v!r})")
    return v


def _unknown(cfg: Mapping, known: set, where: str) -> None:
    for key in cfg:
        if key not in known:
            raise ModelError(f"{where}: the setting {key!r} is not implemented")


@dataclass(frozen=True)
class EncoderConfig:
    hidden: int
    ffn: int
    layers: int
    heads: int
    head_dim: int
    n_mels: int
    eps: float
    rope_theta: float
    window: Optional[int]   # sliding window of the attention, in encoder frames (None: causal over everything)

    @classmethod
    def from_hf(cls, cfg: Any, where: str) -> "EncoderConfig":
        where = f"{where} audio_config"
        if not isinstance(cfg, Mapping):
            raise ModelError(f"{where}: not an object")
        if cfg.get("model_type", ENCODER_TYPE) != ENCODER_TYPE:
            raise ModelError(f"{where}: model_type {cfg.get('model_type')!r} is not {ENCODER_TYPE}")
        _unknown(cfg, _ENCODER_KEYS | _ENCODER_HARMLESS, where)
        if cfg.get("hidden_act", "silu") != "silu":
            raise ModelError(f"{where}: hidden_act {cfg.get('hidden_act')!r} is not implemented (only silu)")
        heads = _int(cfg, "num_attention_heads", where, 32)
        kv = cfg.get("num_key_value_heads", heads)
        if kv != heads:
            raise ModelError(f"{where}: the encoder's num_key_value_heads {kv!r} must equal its heads ({heads})")
        window = cfg.get("sliding_window", 750)
        if window is not None:
            window = _int(cfg, "sliding_window", where)
        return cls(hidden=_int(cfg, "hidden_size", where, 1280), ffn=_int(cfg, "intermediate_size", where, 5120),
                   layers=_int(cfg, "num_hidden_layers", where, 32), heads=heads,
                   head_dim=_int(cfg, "head_dim", where, 64), n_mels=_int(cfg, "num_mel_bins", where, 128),
                   eps=float(cfg.get("rms_norm_eps", 1e-5)), rope_theta=_rope_theta(cfg, where), window=window)


@dataclass(frozen=True)
class FeatureConfig:
    """transformers' `VoxtralRealtimeFeatureExtractor` settings (processor_config.json's feature_extractor)."""

    sample_rate: int = 16000
    n_mels: int = 128
    n_fft: int = 400
    hop: int = 160
    log_mel_max: Optional[float] = 1.5   # the fixed maximum of the log-mel (None: each input's own, as Whisper)


@dataclass(frozen=True)
class StreamLayout:
    """tekken.json's audio section as mistral-common's AudioConfig reads it (the streaming transcription format)."""

    sample_rate: int
    frame_rate: float
    hop: int
    window: int
    n_mels: int
    delay_ms: float            # transcription_delay_ms: the default delay
    left_pad_tokens: int       # streaming_n_left_pad_tokens

    @property
    def samples_per_token(self) -> int:
        """mistral-common's raw_audio_length_per_tok (1280: 80 ms at 16 kHz)."""
        return int(self.sample_rate // self.frame_rate)

    @property
    def frames_per_token(self) -> int:
        """Mel frames per text token (audio_length_per_tok: 8)."""
        return int(self.samples_per_token / self.hop)

    def delay_tokens(self, delay_ms: Optional[float] = None) -> int:
        """mistral-common's get_num_delay_tokens: the delay's samples as mel frames, rounded up to whole tokens."""
        ms = self.delay_ms if delay_ms is None else delay_ms
        samples = int(ms / 1000.0 * self.sample_rate)
        frames = math.ceil(samples / self.hop - 1) if samples % self.hop else samples // self.hop
        return math.ceil(frames / self.frames_per_token)

    def right_pad_tokens(self, delay_ms: Optional[float] = None) -> int:
        """mistral-common's n_right_pad_tokens: the delay, the BOS token and a buffer for a last long word."""
        return self.delay_tokens(delay_ms) + 1 + BUFFER_TOKENS


@dataclass(frozen=True)
class VoxtralRealtimeConfig:
    encoder: EncoderConfig
    lm: LMConfig
    lm_window: Optional[int]       # the decoder's sliding window in tokens (None: none)
    features: FeatureConfig
    layout: StreamLayout
    downsample: int                # encoder frames stacked into one audio embedding
    frames_per_token: int          # mel frames per text token (audio_length_per_tok)
    default_delay_tokens: int
    bos_id: int
    eos_ids: tuple
    pad_id: int                    # [STREAMING_PAD], read from the tokenizer by the recognizer


def _text_config(cfg: Any, tie: bool, where: str) -> tuple[LMConfig, Optional[int]]:
    where = f"{where} text_config"
    if not isinstance(cfg, Mapping):
        raise ModelError(f"{where}: not an object")
    if cfg.get("model_type", TEXT_TYPE) != TEXT_TYPE:
        raise ModelError(f"{where}: model_type {cfg.get('model_type')!r} is not {TEXT_TYPE}")
    _unknown(cfg, _TEXT_KEYS | _COMMON_HARMLESS, where)
    if cfg.get("hidden_act", "silu") != "silu":
        raise ModelError(f"{where}: hidden_act {cfg.get('hidden_act')!r} is not implemented (only silu)")
    hidden = _int(cfg, "hidden_size", where, 4096)
    heads = _int(cfg, "num_attention_heads", where, 32)
    kv = _int(cfg, "num_key_value_heads", where, 8)
    if heads % kv:
        raise ModelError(f"{where}: num_key_value_heads {kv} does not divide num_attention_heads {heads}")
    head_dim = cfg.get("head_dim") or hidden // heads
    window = cfg.get("sliding_window", 4096)
    if window is not None:
        window = _int(cfg, "sliding_window", where)
    tie_text = cfg.get("tie_word_embeddings")
    lm = LMConfig(model_type="mistral", vocab_size=_int(cfg, "vocab_size", where, 32000), hidden_size=hidden,
                  intermediate_size=_int(cfg, "intermediate_size", where, 14336),
                  num_layers=_int(cfg, "num_hidden_layers", where, 32), num_heads=heads, num_kv_heads=kv,
                  head_dim=int(head_dim), rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                  rope_theta=_rope_theta(cfg, where),
                  max_position_embeddings=_int(cfg, "max_position_embeddings", where, 131072),
                  tie_word_embeddings=bool(tie if tie_text is None else tie_text))
    return lm, window


def read_layout(path: Path) -> StreamLayout:
    """tekken.json's `audio` section (the streaming transcription settings)."""
    f = path / "tekken.json"
    if not f.is_file():
        raise ModelError(f"{path}: tekken.json (the tokenizer and its audio settings) is missing")
    audio = read_object(f).get("audio")
    where = f"{f} audio"
    if not isinstance(audio, Mapping):
        raise ModelError(f"{f}: no audio section: not the tokenizer of an audio model")
    if audio.get("transcription_format", "instruct") != "streaming":
        raise ModelError(f"{where}: transcription_format {audio.get('transcription_format')!r} is not streaming "
                         "(the offline Voxtral's tokenizer?)")
    enc = audio.get("audio_encoding_config")
    if not isinstance(enc, Mapping):
        raise ModelError(f"{where}: audio_encoding_config is missing")
    rate = _int(audio, "sampling_rate", where)
    frame_rate = audio.get("frame_rate")
    if isinstance(frame_rate, bool) or not isinstance(frame_rate, (int, float)) or not 0 < frame_rate <= rate:
        raise ModelError(f"{where}: frame_rate {frame_rate!r} is not a rate in (0, sampling_rate]")
    delay = audio.get("transcription_delay_ms")
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 < delay <= 60000:
        raise ModelError(f"{where}: transcription_delay_ms {delay!r} is not a delay in (0, 60000] ms")
    layout = StreamLayout(sample_rate=rate, frame_rate=float(frame_rate),
                          hop=_int(enc, "hop_length", where), window=_int(enc, "window_size", where),
                          n_mels=_int(enc, "num_mel_bins", where), delay_ms=float(delay),
                          left_pad_tokens=_int(audio, "streaming_n_left_pad_tokens", where, least=0))
    if layout.samples_per_token % layout.hop or layout.frames_per_token < 1:
        raise ModelError(f"{where}: {layout.samples_per_token} samples per token are not whole mel frames "
                         f"of {layout.hop}")
    return layout


def read_config(path: Path) -> VoxtralRealtimeConfig:
    path = Path(path)
    where = str(path / "config.json")
    cfg = read_object(path / "config.json")
    if cfg.get("model_type") != MODEL_TYPE:
        raise ModelError(f"{where}: model_type {cfg.get('model_type')!r} is not {MODEL_TYPE}")
    _unknown(cfg, _TOP_KEYS | _COMMON_HARMLESS, where)
    if cfg.get("projector_hidden_act", "gelu") != "gelu":
        raise ModelError(f"{where}: projector_hidden_act {cfg.get('projector_hidden_act')!r} is not implemented")
    encoder = EncoderConfig.from_hf(cfg.get("audio_config") or {}, where)
    lm, lm_window = _text_config(cfg.get("text_config") or {}, bool(cfg.get("tie_word_embeddings", True)), where)
    if cfg.get("hidden_size", lm.hidden_size) != lm.hidden_size:
        raise ModelError(f"{where}: hidden_size {cfg['hidden_size']} differs from the text model's {lm.hidden_size}")
    downsample = _int(cfg, "downsample_factor", where, 4)
    per_tok = _int(cfg, "audio_length_per_tok", where, 8)
    if per_tok != 2 * downsample:
        raise ModelError(f"{where}: audio_length_per_tok {per_tok} must be twice downsample_factor {downsample} "
                         "(the convolutions halve the mel frames)")
    features = _features(path)
    layout = read_layout(path)
    if (layout.hop, layout.window, layout.n_mels, layout.sample_rate) != \
            (features.hop, features.n_fft, features.n_mels, features.sample_rate):
        raise ModelError(f"{path}: tekken.json's audio settings (hop {layout.hop}, window {layout.window}, "
                         f"{layout.n_mels} mels, {layout.sample_rate} Hz) differ from the feature extractor's")
    if layout.frames_per_token != per_tok:
        raise ModelError(f"{path}: tekken.json gives {layout.frames_per_token} mel frames per token, config.json "
                         f"{per_tok}")
    if features.n_mels != encoder.n_mels:
        raise ModelError(f"{path}: the feature extractor's {features.n_mels} mels differ from the encoder's "
                         f"{encoder.n_mels}")
    gen = read_optional(path / "generation_config.json") or {}
    text = cfg.get("text_config") or {}
    bos = gen.get("bos_token_id", text.get("bos_token_id", 1))
    eos = gen.get("eos_token_id", text.get("eos_token_id", 2))
    eos_ids = tuple(eos) if isinstance(eos, list) else (eos,) if eos is not None else ()
    for t in (bos, *eos_ids):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < lm.vocab_size:
            raise ModelError(f"{path}: token id {t!r} of generation_config.json is not a vocabulary id")
    return VoxtralRealtimeConfig(encoder=encoder, lm=lm, lm_window=lm_window, features=features, layout=layout,
                                 downsample=downsample, frames_per_token=per_tok,
                                 default_delay_tokens=_int(cfg, "default_num_delay_tokens", where, 6),
                                 bos_id=int(bos), eos_ids=tuple(int(t) for t in eos_ids), pad_id=-1)


def _features(path: Path) -> FeatureConfig:
    proc = read_optional(path / "processor_config.json")
    fe = None
    where = str(path / "processor_config.json")
    if proc is not None:
        fe = proc.get("feature_extractor")
    if fe is None:
        where = str(path / "preprocessor_config.json")
        fe = read_optional(path / "preprocessor_config.json")
    if fe is None:
        return FeatureConfig()
    if not isinstance(fe, Mapping):
        raise ModelError(f"{where}: the feature extractor's settings are not an object")
    _unknown(fe, _FEATURE_KEYS | _FEATURE_HARMLESS, where)
    if fe.get("padding_value", 0.0) != 0.0:
        raise ModelError(f"{where}: padding_value {fe['padding_value']!r} is not implemented (only 0.0)")
    n_fft = _int(fe, "n_fft", where, 400)
    if fe.get("win_length", n_fft) != n_fft:
        raise ModelError(f"{where}: win_length {fe.get('win_length')!r} differs from n_fft {n_fft} (not implemented)")
    peak = fe.get("global_log_mel_max", 1.5)
    if peak is not None and (isinstance(peak, bool) or not isinstance(peak, (int, float)) or not math.isfinite(peak)):
        raise ModelError(f"{where}: global_log_mel_max {peak!r} is not a number")
    return FeatureConfig(sample_rate=_int(fe, "sampling_rate", where, 16000), n_mels=_int(fe, "feature_size", where, 128),
                         n_fft=n_fft, hop=_int(fe, "hop_length", where, 160),
                         log_mel_max=None if peak is None else float(peak))

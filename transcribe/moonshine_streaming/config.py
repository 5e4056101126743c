"""A Moonshine Streaming directory's settings (transformers' `MoonshineStreamingConfig` with its nested
`encoder_config`, the processor's feature extractor, generation_config.json), read as data into plain
dataclasses; a ValueError names a setting this code does not implement."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# A config.json (or another settings file) larger than this is not a model's settings.
MAX_JSON_BYTES = 1 << 20


def read_json(path: Path) -> Optional[dict]:
    """A small JSON object file -> dict; None when absent; ValueError when unreadable or not an object."""
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_JSON_BYTES:
        raise ValueError(f"{path.name} is larger than {MAX_JSON_BYTES} bytes")
    try:
        out = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path.name}: not JSON ({e})") from None
    if not isinstance(out, dict):
        raise ValueError(f"{path.name}: not a JSON object")
    return out


@dataclass(frozen=True)
class EncoderConfig:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    act: str                       # "gelu" (exact, as transformers' ACT2FN) or "silu" / "relu"
    bias: bool                     # attention q/k/v/o biases
    frame_len: int                 # samples per front-end frame (5 ms at 16 kHz: 80)
    windows: tuple                 # per layer (left, right): left frames incl. itself, right lookahead + 1

    @property
    def left_context(self) -> int:
        """Front-end frames before a frame that its output depends on (sum over the layers)."""
        return sum(max(0, left - 1) for left, _ in self.windows)

    @property
    def lookahead(self) -> int:
        """Front-end frames after a frame that its output depends on."""
        return sum(max(0, right - 1) for _, right in self.windows)


@dataclass(frozen=True)
class DecoderConfig:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    head_dim: int
    act: str
    bias: bool                     # q/k/v biases (o never has one)
    rope_theta: float
    rotary_factor: float
    vocab_size: int
    max_positions: int             # the adapter's position table (encoder frames)


@dataclass(frozen=True)
class MoonshineStreamingConfig:
    encoder: EncoderConfig
    decoder: DecoderConfig
    sample_rate: int
    bos: int
    eos: int
    pad: int
    decoder_start: int
    tie: bool


ACTS = ("gelu", "silu", "swish", "relu")


def _int(d: dict, key: str, default=None, least: int = 1) -> int:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise ValueError(f"{key} must be an integer >= {least}, got {v!r}")
    return v


def _act(d: dict, key: str, default: str) -> str:
    v = d.get(key, default)
    if v not in ACTS:
        raise ValueError(f"{key} {v!r} is not implemented (one of {', '.join(ACTS)})")
    return "silu" if v == "swish" else v


def parse_config(cfg: dict, features: Optional[dict], generation: Optional[dict]) -> MoonshineStreamingConfig:
    if cfg.get("model_type") != "moonshine_streaming":
        raise ValueError(f"model_type {cfg.get('model_type')!r} is not moonshine_streaming")
    enc = cfg.get("encoder_config") or {}
    if not isinstance(enc, dict):
        raise ValueError("encoder_config must be an object")
    e_hidden = _int(enc, "hidden_size", 320)
    e_heads = _int(enc, "num_attention_heads", 8)
    e_kv = _int(enc, "num_key_value_heads", e_heads)
    if e_heads % e_kv:
        raise ValueError(f"encoder heads {e_heads} are not a multiple of its key-value heads {e_kv}")
    e_layers = _int(enc, "num_hidden_layers", 6)
    windows = enc.get("sliding_windows", [[16, 4], [16, 4], [16, 0], [16, 0], [16, 4], [16, 4]])
    if not isinstance(windows, (list, tuple)) or len(windows) != e_layers or not all(
            isinstance(w, (list, tuple)) and len(w) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                  and 0 <= x <= 4096 for x in w) for w in windows):
        raise ValueError(f"sliding_windows must be {e_layers} pairs (left, right) of integers, got {windows!r}")
    if any(w[0] < 1 for w in windows):
        raise ValueError("a sliding window's left size must be at least 1 (the frame itself)")
    rate = _int(enc, "sample_rate", 16000)
    frame_ms = enc.get("frame_ms", 5.0)
    if not isinstance(frame_ms, (int, float)) or isinstance(frame_ms, bool) or not 0 < frame_ms <= 100:
        raise ValueError(f"frame_ms must be a positive number of milliseconds, got {frame_ms!r}")
    frame_len = int(round(rate * frame_ms / 1000.0))
    if frame_len < 2:
        raise ValueError("a front-end frame must hold at least two samples")
    encoder = EncoderConfig(
        hidden=e_hidden, intermediate=_int(enc, "intermediate_size", 1280), layers=e_layers, heads=e_heads,
        kv_heads=e_kv, head_dim=_int(enc, "head_dim", e_hidden // e_heads), act=_act(enc, "hidden_act", "gelu"),
        bias=bool(enc.get("attention_bias", False)), frame_len=frame_len,
        windows=tuple((int(a), int(b)) for a, b in windows))
    if "encoder_hidden_size" in cfg and cfg["encoder_hidden_size"] != e_hidden:
        raise ValueError(f"encoder_hidden_size {cfg['encoder_hidden_size']!r} differs from encoder_config's "
                         f"hidden_size {e_hidden}")

    d_hidden = _int(cfg, "hidden_size", 320)
    d_heads = _int(cfg, "num_attention_heads", 8)
    d_kv = cfg.get("num_key_value_heads", d_heads)
    if d_kv != d_heads:
        # transformers' decoder attention views its queries with the key-value head count: only equal counts run
        raise ValueError(f"decoder key-value heads {d_kv!r} differ from its heads {d_heads} (not implemented)")
    rope = cfg.get("rope_parameters") or {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.8}
    if not isinstance(rope, dict) or rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_parameters {rope!r}: only the default rotary embedding is implemented")
    theta = rope.get("rope_theta", 10000.0)
    factor = rope.get("partial_rotary_factor", 1.0)
    if not isinstance(theta, (int, float)) or theta <= 0 or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise ValueError(f"rope_parameters {rope!r}: rope_theta > 0 and 0 < partial_rotary_factor <= 1 expected")
    pad_to = cfg.get("pad_head_dim_to_multiple_of")
    if pad_to is not None and (not isinstance(pad_to, int) or pad_to < 1):
        raise ValueError(f"pad_head_dim_to_multiple_of must be a positive integer or null, got {pad_to!r}")
    # (padding the head dimension with zeros changes no attention value: the scale is the unpadded one)
    decoder = DecoderConfig(
        hidden=d_hidden, intermediate=_int(cfg, "intermediate_size", 1280), layers=_int(cfg, "num_hidden_layers", 6),
        heads=d_heads, head_dim=_int(cfg, "head_dim", d_hidden // d_heads), act=_act(cfg, "hidden_act", "silu"),
        bias=bool(cfg.get("attention_bias", False)), rope_theta=float(theta), rotary_factor=float(factor),
        vocab_size=_int(cfg, "vocab_size", 32768), max_positions=_int(cfg, "max_position_embeddings", 4096))
    gen = generation or {}

    def token(key: str, default: int) -> int:
        v = cfg.get(key, gen.get(key, default))
        if isinstance(v, list):
            v = v[0] if v else default
        if v is None:
            v = default
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < decoder.vocab_size:
            raise ValueError(f"{key} {v!r} is not a token id of the vocabulary")
        return v

    bos = token("bos_token_id", 1)
    features = features or {}
    f_rate = features.get("sampling_rate", rate)
    if f_rate != rate:
        raise ValueError(f"the feature extractor's sampling_rate {f_rate!r} differs from the encoder's {rate}")
    if features.get("do_normalize"):
        raise ValueError("do_normalize true (the feature extractor's per-input normalization) is not implemented")
    return MoonshineStreamingConfig(
        encoder=encoder, decoder=decoder, sample_rate=rate, bos=bos, eos=token("eos_token_id", 2),
        pad=token("pad_token_id", 0), decoder_start=token("decoder_start_token_id", bos),
        tie=bool(cfg.get("tie_word_embeddings", False)))


def read_features(path: Path) -> Optional[dict]:
    """The feature extractor's settings: preprocessor_config.json, else processor_config.json's
    `feature_extractor` (transformers 5 writes them there)."""
    pre = read_json(path / "preprocessor_config.json")
    if pre is not None:
        return pre
    proc = read_json(path / "processor_config.json")
    if proc is not None and isinstance(proc.get("feature_extractor"), dict):
        return proc["feature_extractor"]
    return None

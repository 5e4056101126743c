"""A Moonshine checkpoint's settings (transformers' `moonshine` layout: config.json, generation_config.json,
preprocessor_config.json) read and checked. A field with a value this code does not implement is an error naming
it, never run as something else."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import ModelError
from ..json_files import read_optional as read_json

MODEL_TYPE = "moonshine"
# transformers' ACT2FN names of the activations implemented here
ACTIVATIONS = ("gelu", "silu", "swish", "relu", "gelu_new", "gelu_pytorch_tanh")


@dataclass(frozen=True)
class MoonshineConfig:
    hidden: int
    inner: int                # the MLPs' width (the decoder's SwiGLU fc1 is twice this)
    encoder_layers: int
    decoder_layers: int
    heads: int                # encoder and decoder alike (transformers' shared config needs that)
    head_dim: int
    padded_head_dim: int      # pad_head_dim_to_multiple_of: heads padded with zeros inside attention
    rotary_dim: int           # int(head_dim * partial_rotary_factor)
    rope_theta: float
    encoder_act: str
    decoder_act: str
    attention_bias: bool
    tie: bool
    vocab_size: int
    max_positions: int        # max_position_embeddings (the rotary table's nominal length; not a hard bound)
    sample_rate: int
    decoder_start: int
    eos: int
    pad: int


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _int(cfg: dict, key: str, default=None, least: int = 1) -> int:
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise ValueError(f"{key} = {_short(v)} is not an integer >= {least}")
    return v


def _bool(cfg: dict, key: str, default: bool) -> bool:
    v = cfg.get(key, default)
    if v not in (True, False):
        raise ValueError(f"{key} = {_short(v)} is not true or false")
    return bool(v)


def _act(cfg: dict, key: str, default: str) -> str:
    v = cfg.get(key, default)
    if v not in ACTIVATIONS:
        raise ValueError(f"{key} = {_short(v)} is not implemented (one of {', '.join(ACTIVATIONS)})")
    return v


def _token(gen: dict, cfg: dict, key: str, vocab: int, default=None) -> int:
    v = gen.get(key, cfg.get(key, default))
    if isinstance(v, list) and len(v) == 1:
        v = v[0]
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < vocab:
        raise ValueError(f"{key} = {_short(v)} is not an id of the {vocab}-piece vocabulary")
    return v


def _rope(cfg: dict) -> tuple[float, float]:
    """(rope_theta, partial_rotary_factor) from transformers 5's `rope_parameters` or the published top-level
    fields (`rope_theta`, `partial_rotary_factor`, `rope_scaling` null); transformers' default factor is 0.9."""
    rp = cfg.get("rope_parameters")
    if rp is None:
        if cfg.get("rope_scaling") not in (None, {}):
            raise ValueError(f"rope_scaling = {_short(cfg.get('rope_scaling'))} is not implemented (only none)")
        rp = {"rope_type": "default", "rope_theta": cfg.get("rope_theta", 10000.0),
              "partial_rotary_factor": cfg.get("partial_rotary_factor", 0.9)}
    if not isinstance(rp, dict):
        raise ValueError(f"rope_parameters = {_short(rp)} is not an object")
    if rp.get("rope_type", "default") != "default":
        raise ValueError(f"rope_parameters.rope_type = {_short(rp.get('rope_type'))} is not implemented (only default)")
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    factor = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.9))
    for key, v in (("rope_theta", theta), ("partial_rotary_factor", factor)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{key} = {_short(v)} is not a number > 0")
    if factor > 1:
        raise ValueError(f"partial_rotary_factor = {_short(factor)} is more than 1")
    return float(theta), float(factor)


def parse_config(cfg: dict, generation: Optional[dict] = None, features: Optional[dict] = None) -> MoonshineConfig:
    """config.json, generation_config.json and preprocessor_config.json -> a MoonshineConfig (ValueError naming the
    first field this code does not implement)."""
    if cfg.get("model_type") != MODEL_TYPE:
        raise ValueError(f"model_type = {_short(cfg.get('model_type'))} is not {MODEL_TYPE!r}")
    hidden = _int(cfg, "hidden_size", 288)
    heads = _int(cfg, "encoder_num_attention_heads", 8)
    dec_heads = _int(cfg, "decoder_num_attention_heads", 8)
    if dec_heads != heads:
        raise ValueError(f"decoder_num_attention_heads = {dec_heads} differs from encoder_num_attention_heads "
                         f"{heads} (not implemented: transformers' layers share one head count)")
    for key in ("encoder_num_key_value_heads", "decoder_num_key_value_heads"):
        kv = cfg.get(key)
        if kv is not None and kv != heads:
            raise ValueError(f"{key} = {_short(kv)} is not implemented (only the attention heads, {heads})")
    head_dim = hidden // heads
    if head_dim * heads != hidden or cfg.get("head_dim", head_dim) != head_dim:
        raise ValueError(f"hidden_size {hidden} is not num_attention_heads {heads} x head_dim (not implemented)")
    pad_to = cfg.get("pad_head_dim_to_multiple_of")
    padded = head_dim
    if pad_to is not None:
        pad_to = _int(cfg, "pad_head_dim_to_multiple_of")
        padded = pad_to * ((head_dim + pad_to - 1) // pad_to)
    theta, factor = _rope(cfg)
    rotary = int(head_dim * factor)
    vocab = _int(cfg, "vocab_size", 32768)
    gen = generation or {}
    feats = features or {}
    if feats.get("do_normalize", False) not in (False, None):
        raise ValueError(f"preprocessor do_normalize = {_short(feats.get('do_normalize'))} is not implemented "
                         "(the published models feed the raw waveform)")
    if feats.get("feature_size", 1) != 1:
        raise ValueError(f"preprocessor feature_size = {_short(feats.get('feature_size'))} is not 1 (the conv stem "
                         "reads one waveform channel)")
    if feats.get("padding_value", 0.0) != 0:
        raise ValueError(f"preprocessor padding_value = {_short(feats.get('padding_value'))} is not implemented "
                         "(only 0)")
    rate = _int(feats, "sampling_rate", 16000, least=1000)
    eos = _token(gen, cfg, "eos_token_id", vocab, 2)
    return MoonshineConfig(
        hidden=hidden, inner=_int(cfg, "intermediate_size", 4 * hidden),
        encoder_layers=_int(cfg, "encoder_num_hidden_layers", 6), decoder_layers=_int(cfg, "decoder_num_hidden_layers", 6),
        heads=heads, head_dim=head_dim, padded_head_dim=padded, rotary_dim=rotary, rope_theta=theta,
        encoder_act=_act(cfg, "encoder_hidden_act", "gelu"), decoder_act=_act(cfg, "decoder_hidden_act", "silu"),
        attention_bias=_bool(cfg, "attention_bias", False), tie=_bool(cfg, "tie_word_embeddings", True),
        vocab_size=vocab, max_positions=_int(cfg, "max_position_embeddings", 512), sample_rate=rate,
        decoder_start=_token(gen, cfg, "decoder_start_token_id", vocab, 1), eos=eos,
        pad=_token(gen, cfg, "pad_token_id", vocab, eos) if gen.get("pad_token_id", cfg.get("pad_token_id")) is not None
        else eos)


def read_config(path: Path) -> MoonshineConfig:
    cfg = read_json(path / "config.json")
    if cfg is None:
        raise ModelError(f"{path}: no config.json")
    try:
        return parse_config(cfg, read_json(path / "generation_config.json"), read_json(path / "preprocessor_config.json"))
    except ValueError as e:
        raise ModelError(f"{path}: model config not supported ({e})") from None

"""The configuration of a Kyutai STT model in transformers' layout: config.json (model_type
"kyutai_speech_to_text", the LM's fields and `codec_config`, the Mimi codec's), generation_config.json (the initial
text token, when it overrides config.json's) and the processor's padding (preprocessor_config.json, or the
`feature_extractor` of processor_config.json): seconds of silence before the audio and the delay after it.
Settings the code does not implement raise ModelError."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import ModelError
from ..json_files import read_object

SAMPLE_RATE = 24000


@dataclass(frozen=True)
class MimiConfig:
    hidden_size: int
    num_filters: int
    ratios: tuple  # encoder strides, in the encoder's order (reversed upsampling_ratios)
    kernel_size: int
    last_kernel_size: int
    residual_kernel_size: int
    dilation_growth_rate: int
    num_residual_layers: int
    compress: int
    pad_mode: str
    use_conv_shortcut: bool
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    norm_eps: float
    rope_theta: float
    sliding_window: int
    attention_bias: bool
    num_quantizers: int
    num_semantic_quantizers: int
    codebook_size: int
    codebook_dim: int
    vq_dim: int
    frame_size: int  # samples per output frame
    latent_stride: int  # the downsampling's stride


@dataclass(frozen=True)
class LMConfig:
    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_dim: int
    rms_norm_eps: float
    rope_theta: float
    sliding_window: int
    num_codebooks: int
    codebook_vocab_size: int
    audio_bos_token_id: int
    audio_pad_token_id: int

    @property
    def embed_rows(self) -> int:
        return self.vocab_size + self.num_codebooks * self.codebook_vocab_size + 1


@dataclass(frozen=True)
class KyutaiConfig:
    mimi: MimiConfig
    lm: LMConfig
    bos_token_id: int  # the initial text token
    pad_token_id: Optional[int]
    eos_token_ids: tuple
    prefix_s: float  # silence before the audio (the processor's audio_silence_prefix_seconds)
    delay_s: float  # the text's delay behind the audio (audio_delay_seconds); 1 s more is padded after it

    @property
    def frame_s(self) -> float:
        return self.mimi.frame_size / SAMPLE_RATE

    def prefix_samples(self) -> int:
        return int(self.prefix_s * SAMPLE_RATE)

    def suffix_samples(self) -> int:
        return int((self.delay_s + 1.0) * SAMPLE_RATE)


def _need(cfg: dict, key: str, where: str, kind=int):
    v = cfg.get(key)
    if v is None or isinstance(v, bool) or not isinstance(v, kind):
        raise ModelError(f"{where}: {key} missing or not {'an integer' if kind is int else 'a number'} ({v!r})")
    return v


def _rope_theta(cfg: dict, where: str, default: float) -> float:
    rope = cfg.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        raise ModelError(f"{where}: rope_parameters is not an object")
    kind = rope.get("rope_type", "default")
    if kind != "default":
        raise ModelError(f"{where}: rope_type {kind!r} is not implemented (only the default RoPE)")
    theta = rope.get("rope_theta", cfg.get("rope_theta", default))
    if not isinstance(theta, (int, float)) or theta <= 0:
        raise ModelError(f"{where}: rope_theta {theta!r} is not a positive number")
    return float(theta)


def mimi_config(c: dict, where: str) -> MimiConfig:
    where = where + " codec_config"
    if c.get("model_type", "mimi") != "mimi":
        raise ModelError(f"{where}: model_type {c.get('model_type')!r}, not mimi")
    if not c.get("use_causal_conv", True):
        raise ModelError(f"{where}: use_causal_conv false is not implemented (a streaming model's codec is causal)")
    if c.get("audio_channels", 1) != 1:
        raise ModelError(f"{where}: audio_channels {c.get('audio_channels')} (only mono is implemented)")
    if c.get("sampling_rate", SAMPLE_RATE) != SAMPLE_RATE:
        raise ModelError(f"{where}: sampling_rate {c.get('sampling_rate')} (Mimi runs at {SAMPLE_RATE})")
    pad_mode = c.get("pad_mode", "constant")
    if pad_mode not in ("constant", "replicate"):
        raise ModelError(f"{where}: pad_mode {pad_mode!r} is not implemented (constant, replicate)")
    if c.get("hidden_act", "gelu") != "gelu":
        raise ModelError(f"{where}: hidden_act {c.get('hidden_act')!r} is not implemented (gelu)")
    if isinstance(c.get("residual_kernel_size"), list):
        raise ModelError(f"{where}: a list of residual kernel sizes is not implemented")
    ratios = c.get("upsampling_ratios") or [8, 6, 5, 4]
    if not all(isinstance(r, int) and r > 0 for r in ratios):
        raise ModelError(f"{where}: upsampling_ratios {ratios!r}")
    hidden = c.get("hidden_size", 512)
    heads = c.get("num_attention_heads", 8)
    head_dim = c.get("head_dim") or hidden // heads
    hop = math.prod(ratios)
    frame_rate = c.get("frame_rate", c.get("_frame_rate"))
    encodec_rate = math.ceil(SAMPLE_RATE / hop)
    frame_size = hop * 2 if frame_rate is None else int(round(SAMPLE_RATE / frame_rate))
    stride = frame_size // hop
    if stride * hop != frame_size or stride < 1 or encodec_rate == SAMPLE_RATE / frame_size:
        raise ModelError(f"{where}: frame rate {frame_rate} with strides {ratios} (a downsampling layer is expected)")
    nq = c.get("num_quantizers", 32)
    nsem = c.get("num_semantic_quantizers", 1)
    if not 0 < nsem < nq:
        raise ModelError(f"{where}: {nsem} semantic quantizers of {nq}")
    return MimiConfig(
        hidden_size=hidden, num_filters=c.get("num_filters", 64), ratios=tuple(reversed(ratios)),
        kernel_size=c.get("kernel_size", 7), last_kernel_size=c.get("last_kernel_size", 3),
        residual_kernel_size=c.get("residual_kernel_size", 3), dilation_growth_rate=c.get("dilation_growth_rate", 2),
        num_residual_layers=c.get("num_residual_layers", 1), compress=c.get("compress", 2), pad_mode=pad_mode,
        use_conv_shortcut=bool(c.get("use_conv_shortcut", False)), layers=c.get("num_hidden_layers", 8),
        heads=heads, kv_heads=c.get("num_key_value_heads") or heads, head_dim=head_dim,
        intermediate_size=c.get("intermediate_size", 2048), norm_eps=float(c.get("norm_eps", 1e-5)),
        rope_theta=_rope_theta(c, where, 10000.0), sliding_window=c.get("sliding_window", 250),
        attention_bias=bool(c.get("attention_bias", False)), num_quantizers=nq, num_semantic_quantizers=nsem,
        codebook_size=c.get("codebook_size", 2048), codebook_dim=c.get("codebook_dim", 256) or hidden,  # MimiConfig: 256 when absent, None: hidden
        vq_dim=c.get("vector_quantization_hidden_dimension", 256), frame_size=frame_size, latent_stride=stride)


def _padding(path: Path) -> tuple[float, float]:
    fe = None
    if (path / "preprocessor_config.json").is_file():
        fe = read_object(path / "preprocessor_config.json")
    elif (path / "processor_config.json").is_file():
        fe = read_object(path / "processor_config.json").get("feature_extractor")
    if not isinstance(fe, dict):
        raise ModelError(f"{path}: no feature extractor settings (preprocessor_config.json or processor_config.json)")
    prefix = fe.get("audio_silence_prefix_seconds", 0.0) or 0.0
    delay = fe.get("audio_delay_seconds", 0.0) or 0.0
    if fe.get("sampling_rate", SAMPLE_RATE) != SAMPLE_RATE:
        raise ModelError(f"{path}: the feature extractor's sampling_rate {fe.get('sampling_rate')} is not {SAMPLE_RATE}")
    if fe.get("chunk_length_s") is not None:
        raise ModelError(f"{path}: the feature extractor's chunk_length_s is not implemented")
    for name, v in (("audio_silence_prefix_seconds", prefix), ("audio_delay_seconds", delay)):
        if not isinstance(v, (int, float)) or not 0 <= v <= 60:
            raise ModelError(f"{path}: {name} {v!r} is not a number of seconds in [0, 60]")
    return float(prefix), float(delay)


def read_config(path: Path) -> KyutaiConfig:
    path = Path(path)
    where = str(path / "config.json")
    c = read_object(path / "config.json")
    if c.get("model_type") != "kyutai_speech_to_text":
        raise ModelError(f"{where}: model_type {c.get('model_type')!r}, not kyutai_speech_to_text")
    codec = c.get("codec_config")
    if not isinstance(codec, dict):
        raise ModelError(f"{where}: codec_config missing")
    mimi = mimi_config(codec, where)
    if c.get("hidden_act", "silu") != "silu":
        raise ModelError(f"{where}: hidden_act {c.get('hidden_act')!r} is not implemented (silu)")
    hidden = _need(c, "hidden_size", where)
    heads = _need(c, "num_attention_heads", where)
    ffn = _need(c, "ffn_dim", where)
    if ffn % 2:
        raise ModelError(f"{where}: ffn_dim {ffn} is odd (the gated MLP halves it)")
    vocab = _need(c, "vocab_size", where)
    ncb = c.get("num_codebooks", 32)
    if ncb > mimi.num_quantizers:
        raise ModelError(f"{where}: {ncb} codebooks but the codec has {mimi.num_quantizers} quantizers")
    cbv = c.get("codebook_vocab_size", 2049)
    lm = LMConfig(
        vocab_size=vocab, hidden_size=hidden, layers=_need(c, "num_hidden_layers", where), heads=heads,
        kv_heads=c.get("num_key_value_heads") or heads, head_dim=c.get("head_dim") or hidden // heads, ffn_dim=ffn,
        rms_norm_eps=float(c.get("rms_norm_eps", 1e-8)), rope_theta=_rope_theta(c, where, 10000.0),
        sliding_window=c.get("sliding_window") or 0, num_codebooks=ncb, codebook_vocab_size=cbv,
        audio_bos_token_id=c.get("audio_bos_token_id", 2048),
        audio_pad_token_id=c.get("audio_pad_token_id", vocab + ncb * cbv))
    if lm.sliding_window <= 0:
        raise ModelError(f"{where}: sliding_window {c.get('sliding_window')!r}: a streaming LM's window is expected")
    gen = read_object(path / "generation_config.json") if (path / "generation_config.json").is_file() else {}
    bos = gen.get("bos_token_id", c.get("bos_token_id"))
    if not isinstance(bos, int) or not 0 <= bos < lm.embed_rows:
        raise ModelError(f"{where}: the initial text token (bos_token_id) {bos!r} is not a row of the embeddings")
    eos = gen.get("eos_token_id", c.get("eos_token_id"))
    eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
    prefix, delay = _padding(path)
    return KyutaiConfig(mimi=mimi, lm=lm, bos_token_id=bos, pad_token_id=gen.get("pad_token_id", c.get("pad_token_id")),
                        eos_token_ids=eos_ids, prefix_s=prefix, delay_s=delay)

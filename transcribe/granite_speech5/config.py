"""Granite Speech 5 CTC's config.json (transformers' `GraniteSpeech5CTCConfig`, model type `granite_speech5_ctc`,
with its `encoder_config`) -> the shared IBM conformer's settings plus what this family adds: the subsampling
blocks, the tied CTC head, the blank. Torch-free. Settings the model does not run are refused, never ignored."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ModelError
from ..ibm.config import EncoderConfig

MODEL_TYPE = "granite_speech5_ctc"
ENCODER_TYPE = "granite_speech5_encoder"
# the front end stacks two frames, each its 80 (num_mel_bins) log-mels and their deltas
STACK, DELTAS = 2, 2


@dataclass(frozen=True)
class Config:
    encoder: EncoderConfig  # output_dim = the CTC vocabulary (16,384 BPE units), self_conditioning_layer 1-based
    subsample_layers: tuple[int, ...]  # 0-based blocks that halve the frame rate
    num_mel_bins: int
    vocab_size: int
    blank: int  # the pad token: transformers' CTC blank
    tied: bool  # the CTC head is the encoder's `out` (no ctc_head.* tensors)
    ffn_bias: bool  # attention_bias: the feed-forwards' biases

    @property
    def subsampling(self) -> int:
        return 2 ** len(self.subsample_layers)


def _int(cfg: dict, key: str, default=None, least: int = 1) -> int:
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise ModelError(f"config: {key} must be an integer >= {least}, got {v!r}")
    return v


def parse_config(cfg: dict) -> Config:
    if cfg.get("model_type") != MODEL_TYPE:
        raise ModelError(f"config: model_type {cfg.get('model_type')!r} is not {MODEL_TYPE!r}")
    enc = cfg.get("encoder_config") or {}
    if not isinstance(enc, dict):
        raise ModelError("config: encoder_config is not an object")
    if enc.get("model_type", ENCODER_TYPE) != ENCODER_TYPE:
        raise ModelError(f"config: encoder_config.model_type {enc.get('model_type')!r} is not {ENCODER_TYPE!r}")
    vocab = _int(cfg, "vocab_size", 16384)
    if _int(enc, "vocab_size", 16384) != vocab:
        raise ModelError(f"config: encoder_config.vocab_size {enc.get('vocab_size')} is not vocab_size {vocab}")
    hidden = _int(enc, "hidden_size", 1024)
    heads = _int(enc, "num_attention_heads", 8)
    head_dim = enc.get("head_dim")
    head_dim = hidden // heads if head_dim is None else _int(enc, "head_dim")
    kv = enc.get("num_key_value_heads")
    if kv is not None and kv != heads:
        # transformers' projections have num_attention_heads heads for keys and values whatever this says
        raise ModelError(f"config: num_key_value_heads {kv} != num_attention_heads {heads} is not supported")
    if enc.get("hidden_act", "silu") != "silu":
        raise ModelError(f"config: hidden_act {enc.get('hidden_act')!r} is not supported (silu only)")
    intermediate = _int(enc, "intermediate_size", 4096)
    if intermediate % hidden:
        raise ModelError(f"config: intermediate_size {intermediate} is not a multiple of hidden_size {hidden}")
    layers = _int(enc, "num_hidden_layers", 16)
    max_pos = _int(enc, "max_position_embeddings", 512)
    context = _int(enc, "context_size", 128)
    if context > max_pos:
        raise ModelError(f"config: context_size {context} exceeds max_position_embeddings {max_pos}")
    kernel = _int(enc, "conv_kernel_size", 7)
    if kernel % 2 == 0:
        raise ModelError(f"config: conv_kernel_size {kernel} is even (the convolution pads (k - 1) / 2 a side)")
    sub = enc.get("subsample_layers")
    sub = [0, 1] if sub is None else sub
    if not isinstance(sub, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers
                                            for i in sub) or len(set(sub)) != len(sub):
        raise ModelError(f"config: subsample_layers {sub!r} are not distinct block indices below {layers}")
    mid = layers // 2
    if mid < 1:
        raise ModelError(f"config: num_hidden_layers {layers}: the self-conditioning layer num_hidden_layers // 2 "
                         "must be a block")
    mels = _int(enc, "num_mel_bins", 80)
    blank = cfg.get("pad_token_id", 0)
    if isinstance(blank, bool) or not isinstance(blank, int) or not 0 <= blank < vocab:
        raise ModelError(f"config: pad_token_id (the CTC blank) {blank!r} is not an id below {vocab}")
    bias = enc.get("attention_bias", True)
    tied = cfg.get("tie_word_embeddings", True)
    if not isinstance(bias, bool) or not isinstance(tied, bool):
        raise ModelError("config: attention_bias and tie_word_embeddings must be true or false")
    encoder = EncoderConfig(
        num_layers=layers, hidden_dim=hidden, num_heads=heads, dim_head=head_dim, input_dim=mels * DELTAS * STACK,
        output_dim=vocab, bpe_output_dim=0, bpe_pooling_window=1, conv_kernel_size=kernel,
        conv_expansion_factor=_int(enc, "conv_expansion_factor", 2), feedforward_mult=intermediate // hidden,
        max_pos_emb=max_pos, context_size=context, self_conditioning_layer=mid)
    return Config(encoder, tuple(sorted(sub)), mels, vocab, blank, tied, bias)

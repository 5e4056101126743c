"""MedASR as transcribe.cpp's `medasr` GGUF files (`scripts/convert-medasr.py`, which reads the transformers
layout; tests/models/gguf/medasr/README.md): reading them (`load_gguf`).

The schema:

- tensors `enc.subsampling.{dense_0,conv_0,conv_1,dense_1}.*`, `enc.out_norm.weight`, `ctc.proj.*` (the k=1 conv
  head), `enc.blocks.{i}.{norm_ff1, ff1_up, ff1_down, norm_attn, attn_{q,k,v,o}, norm_conv, conv_pointwise1,
  conv_depthwise, conv_bn.{weight,bias,running_mean,running_var}, conv_pointwise2, norm_ff2, ff2_up, ff2_down,
  norm_post}`, mapped back to the checkpoint's names (model.py); the front end's `frontend.mel_filterbank`
  [n_fft/2+1, n_mels] and `frontend.window` [win], compared with ours (frontend.py), not used;
- the config as `stt.medasr.encoder.*`, `stt.medasr.ctc.*` and `stt.frontend.*`, rebuilt into the config.json and
  feature-extractor settings that `config.parse_config` checks (a file is held to the same limits as a directory);
  the front end's fixed choices (symmetric Hann, no normalization, Kaldi-scale unnormalized filters from 125 to
  7,500 Hz, log floor 1e-5) are required as they are;
- the tokenizer as `tokenizer.ggml.*` (model "bpe", pre "medasr": the SentencePiece pieces up to the CTC head's
  outputs); the control and unknown tokens (<epsilon>, <s>, </s>, <unk>) are the special ones the text leaves
  out, as the transformers tokenizer's added specials are; the text is made by tokenizer.py's rules.

What the file does not hold: batch norm's epsilon (transformers' BatchNorm1d default, 1e-5, as the runtime uses),
tokenizer_config.json's clean_up_tokenization_spaces (off, as in the published model's tokenizer).

Weights: any ggml type `gguf.quants` reads (F32 as the converter writes, F16, Q8_0, ...), dequantized to float32;
dtype bfloat16 / float16 / int8 then as for a directory. Every metadata key is read and implemented, accepted by
name as not changing the computation (`general.*`, `stt.variant`, `stt.capability.*`, the batch-norm momentum,
token scores), or a ModelError names it; so is a missing or unknown tensor."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from ..errors import ModelError
from ..gguf.hf import f32_value

ARCH = "medasr"
P = "stt.medasr."
# Largest absolute difference allowed between the stored filterbank / window and ours (both from the same
# float64 formulas, stored as float32).
FRONTEND_TOLERANCE = 1e-6
FRONTEND_TENSORS = ("frontend.mel_filterbank", "frontend.window")

_TOP = [("encoder.subsampler." + n + "." + w, "enc.subsampling." + n + "." + w)
        for n in ("dense_0", "conv_0", "conv_1", "dense_1") for w in ("weight", "bias")] + \
    [("encoder.out_norm.weight", "enc.out_norm.weight"), ("ctc_head.weight", "ctc.proj.weight"),
     ("ctc_head.bias", "ctc.proj.bias")]
_BLOCK = [("norm_feed_forward1.weight", "norm_ff1.weight"), ("feed_forward1.linear1.weight", "ff1_up.weight"),
          ("feed_forward1.linear2.weight", "ff1_down.weight"), ("norm_self_att.weight", "norm_attn.weight")] + \
    [(f"self_attn.{p}_proj.weight", f"attn_{p}.weight") for p in "qkvo"] + \
    [("norm_conv.weight", "norm_conv.weight"), ("conv.pointwise_conv1.weight", "conv_pointwise1.weight"),
     ("conv.depthwise_conv.weight", "conv_depthwise.weight")] + \
    [(f"conv.norm.{w}", f"conv_bn.{w}") for w in ("weight", "bias", "running_mean", "running_var")] + \
    [("conv.pointwise_conv2.weight", "conv_pointwise2.weight"), ("norm_feed_forward2.weight", "norm_ff2.weight"),
     ("feed_forward2.linear1.weight", "ff2_up.weight"), ("feed_forward2.linear2.weight", "ff2_down.weight"),
     ("norm_out.weight", "norm_post.weight")]
# the token types of tokenizer.ggml.token_type (llama.cpp's): unknown and control tokens are special
_UNKNOWN, _CONTROL = 2, 3


def tensor_names(layers: int) -> list[tuple[str, str]]:
    """(the checkpoint's name, the file's name) of every model tensor."""
    out = list(_TOP)
    for i in range(layers):
        out += [(f"encoder.layers.{i}.{a}", f"enc.blocks.{i}.{b}") for a, b in _BLOCK]
    return out


def config_from_meta(keys, where: str) -> tuple[dict, dict]:
    """(config.json, the feature extractor's settings) the file's keys were written from."""
    r = keys.require
    e, f = P + "encoder.", "stt.frontend."
    if r(e + "sub_n_layers") != 2:
        raise ModelError(f"{where}: {e}sub_n_layers {r(e + 'sub_n_layers')!r} is not 2 (LasrEncoderSubsampling's)")
    if r(e + "n_kv_heads") != r(e + "n_heads"):
        raise ModelError(f"{where}: {e}n_kv_heads != n_heads is not implemented")
    keys.accept([e + "batch_norm_momentum", "tokenizer.ggml.scores"])  # training-only / the encoder's side
    enc = {"model_type": "lasr_encoder", "hidden_size": r(e + "hidden"), "num_hidden_layers": r(e + "n_layers"),
           "num_attention_heads": r(e + "n_heads"), "num_key_value_heads": r(e + "n_kv_heads"),
           "head_dim": r(e + "head_dim"), "intermediate_size": r(e + "intermediate"),
           "hidden_act": r(e + "hidden_act"), "conv_kernel_size": r(e + "conv_kernel"),
           "conv_residual_weights": [f32_value(r(e + "conv_residual_w0")), f32_value(r(e + "conv_residual_w1"))],
           "feed_forward_residual_weights": [f32_value(r(e + "ff_residual_w0")), f32_value(r(e + "ff_residual_w1"))],
           "layer_norm_eps": f32_value(r(e + "layer_norm_eps")), "max_position_embeddings": r(e + "max_pos_emb"),
           "rope_parameters": {"rope_type": r(e + "rope_type"), "rope_theta": f32_value(r(e + "rope_theta"))},
           "num_mel_bins": r(e + "num_mel_bins"), "subsampling_conv_kernel_size": r(e + "sub_kernel"),
           "subsampling_conv_stride": r(e + "sub_stride"), "subsampling_conv_channels": r(e + "sub_channels"),
           # the converter writes the bias-free published layout; a bias tensor would be refused as unknown
           "attention_bias": False, "convolution_bias": False}
    cfg = {"model_type": "lasr_ctc", "encoder_config": enc, "vocab_size": r(P + "ctc.vocab_size"),
           "pad_token_id": r(P + "ctc.blank_id")}
    for key, want in (("type", "mel"), ("window", "hann_symmetric"), ("normalize", "none"), ("pad_mode", "zero"),
                      ("mel_norm", "htk")):
        keys.expect(f + key, (want,))
    for key, want in (("log_clamp_min", 1e-5), ("mel_lower_hz", 125.0), ("mel_upper_hz", 7500.0)):
        if f32_value(r(f + key)) != f32_value(want):
            raise ModelError(f"{where}: {f}{key} {r(f + key)!r} is not {want} (LasrFeatureExtractor's)")
    feats = {"feature_extractor_type": "LasrFeatureExtractor", "sampling_rate": r(f + "sample_rate"),
             "feature_size": r(f + "num_mels"), "n_fft": r(f + "n_fft"), "win_length": r(f + "win_length"),
             "hop_length": r(f + "hop_length")}
    return cfg, feats


def _check_frontend(f, features, where: str) -> None:
    from .frontend import LasrFrontend

    ours = LasrFrontend(features)
    for name, want in zip(FRONTEND_TENSORS, (ours.filters, ours.window)):
        if name not in f.tensors:
            raise ModelError(f"{where}: tensor {name} is missing")
        got = f.tensor(name)
        if tuple(got.shape) != tuple(want.shape):
            raise ModelError(f"{where}: tensor {name} is {tuple(got.shape)}, our front end's is {tuple(want.shape)}")
        diff = float((got.double() - want).abs().max())
        if not diff <= FRONTEND_TOLERANCE:
            raise ModelError(f"{where}: tensor {name} differs from this package's front end by {diff:.3g} "
                             f"(more than {FRONTEND_TOLERANCE}): a different front end is not implemented")


def _tokenizer(keys, vocab_size: int, blank: int, where: str):
    from .tokenizer import LasrTokenizer

    keys.expect("tokenizer.ggml.model", ("bpe",))
    keys.expect("tokenizer.ggml.pre", ("medasr",))
    tokens, types = keys.require("tokenizer.ggml.tokens"), keys.require("tokenizer.ggml.token_type")
    if not isinstance(tokens, list) or not isinstance(types, list) or len(tokens) != len(types) or \
            len(tokens) < vocab_size or not all(isinstance(t, str) for t in tokens):
        raise ModelError(f"{where}: tokenizer.ggml.tokens / token_type are not {vocab_size} or more tokens")
    for k in ("bos", "eos", "unknown", "padding", "blank"):
        v = keys.require(f"tokenizer.ggml.{k}_token_id")
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(tokens):
            raise ModelError(f"{where}: tokenizer.ggml.{k}_token_id {v!r} is not one of the tokens")
        if k in ("blank", "padding") and v != blank:
            raise ModelError(f"{where}: tokenizer.ggml.{k}_token_id {v} is not the CTC blank {blank}")
    special = {i for i, t in enumerate(types) if t in (_UNKNOWN, _CONTROL)}
    return LasrTokenizer(tokens, special, {}, True, False, blank)


def load_gguf(path: Path, name: str, device, dtype: Optional[torch.dtype] = None):
    """A `medasr` GGUF file -> a MedASR recognizer on `device` (weights dequantized to float32, then `dtype`)."""
    from ..gguf.file import GGUFFile, missing_layers
    from .config import parse_config, read_features_dict
    from .recognizer import MedASR

    where = str(path)
    with GGUFFile(path) as f:
        if f.arch != ARCH:
            raise ModelError(f"{where}: general.architecture is {f.arch!r}, not {ARCH!r}")
        keys = f.keys()
        keys.accept(["general.*", "stt.variant", "stt.capability.*"])
        raw, feats = config_from_meta(keys, where)
        problem = missing_layers(f, "enc.blocks.", keys.require(P + "encoder.n_layers"))
        if problem:
            raise ModelError(f"{where}: {P}encoder.n_layers = {problem}")
        try:
            cfg = parse_config(raw, read_features_dict(feats, where))
        except (ValueError, KeyError, TypeError) as e:
            raise ModelError(f"{where}: model config not supported ({e})") from None
        tokenizer = _tokenizer(keys, cfg.vocab_size, cfg.blank, where)
        _check_frontend(f, cfg.features, where)
        keys.finish()
        names = tensor_names(cfg.layers)
        known = {g for _, g in names} | set(FRONTEND_TENSORS)
        unknown = [n for n in f.tensors if n not in known]
        if unknown:
            raise ModelError(f"{where}: tensor{'s' if len(unknown) > 1 else ''} this code does not implement: "
                             f"{', '.join(unknown[:6])}")
        state = {}
        for ours, g in names:
            if g not in f.tensors:
                raise ModelError(f"{where}: tensor {g} is missing (our {ours})")
            state[ours] = f.tensor(g).float()
    return MedASR.finish(cfg, state, tokenizer, name, device, dtype, where)

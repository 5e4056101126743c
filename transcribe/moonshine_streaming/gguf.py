"""Moonshine Streaming as transcribe.cpp's `moonshine_streaming` GGUF files (`scripts/convert-moonshine_streaming.py`,
which reads the transformers layout): reading them (`load_gguf`).

The schema:

- tensors `enc.embedder.{comp.log_k, linear, conv1, conv2}`, `enc.blocks.{i}.{norm_attn, attn.{q,k,v,out},
  norm_ffn, ffn.{fc1,fc2}}`, `enc.final_norm` (the encoder's norms with the unit offset folded in: the file holds
  gamma + 1), `adapter.pos_emb`, `adapter.proj` (when the widths differ), `dec.token_embd`, `dec.final_norm`,
  `dec.lm_head`, `dec.blocks.{i}.{norm_self, self_attn.{q,k,v,out}, norm_cross, cross_attn.{q,k,v,out}, norm_ffn,
  ffn.{fc1,fc2}}`;
- the config as `stt.moonshine_streaming.{encoder,decoder}.*` and a few `stt.moonshine_streaming.*` keys;
- the tokenizer as `tokenizer.ggml.*` (model "bpe" with byte fallback): the pieces in id order and the merges,
  rebuilt into a `tokenizers` BPE with the SentencePiece conventions of the published tokenizer.json (a space is
  `▁`, one `▁` before the text, byte pieces `<0xNN>`; decoding drops the leading space).

Every metadata key is read and implemented, accepted by name as not changing the computation (`general.*`,
`stt.variant`, `stt.capability.*`, the padded head dimension), or a ModelError names it; so is a missing or unknown
tensor. Weights: any ggml type `gguf.quants` reads, dequantized to float32 (or the dtype asked for)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from ..errors import ModelError
from ..gguf.hf import f32_value
from .config import parse_config

ARCH = "moonshine_streaming"
P = "stt.moonshine_streaming."
TOKEN_CONTROL = 3

_ENC_TOP = [("encoder.embedder.comp.log_k", "enc.embedder.comp.log_k"),
            ("encoder.embedder.linear.weight", "enc.embedder.linear.weight"),
            ("encoder.embedder.conv1.weight", "enc.embedder.conv1.weight"),
            ("encoder.embedder.conv1.bias", "enc.embedder.conv1.bias"),
            ("encoder.embedder.conv2.weight", "enc.embedder.conv2.weight"),
            ("encoder.embedder.conv2.bias", "enc.embedder.conv2.bias"),
            ("encoder.final_norm.gamma", "enc.final_norm.weight")]
_ENC_BLOCK = [("input_layernorm.gamma", "norm_attn.weight"), ("post_attention_layernorm.gamma", "norm_ffn.weight"),
              ("mlp.fc1.weight", "ffn.fc1.weight"), ("mlp.fc1.bias", "ffn.fc1.bias"),
              ("mlp.fc2.weight", "ffn.fc2.weight"), ("mlp.fc2.bias", "ffn.fc2.bias")] \
    + [(f"self_attn.{p}_proj.{w}", f"attn.{q}.{w}") for p, q in zip("qkvo", ("q", "k", "v", "out"))
       for w in ("weight", "bias")]
_DEC_TOP = [("decoder.embed_tokens.weight", "dec.token_embd.weight"), ("decoder.norm.weight", "dec.final_norm.weight"),
            ("proj_out.weight", "dec.lm_head.weight"), ("decoder.pos_emb.weight", "adapter.pos_emb.weight"),
            ("decoder.proj.weight", "adapter.proj.weight")]
_DEC_BLOCK = [("input_layernorm.weight", "norm_self.weight"), ("post_attention_layernorm.weight", "norm_cross.weight"),
              ("final_layernorm.weight", "norm_ffn.weight"), ("mlp.fc1.weight", "ffn.fc1.weight"),
              ("mlp.fc1.bias", "ffn.fc1.bias"), ("mlp.fc2.weight", "ffn.fc2.weight"), ("mlp.fc2.bias", "ffn.fc2.bias")] \
    + [(f"{a}.{p}_proj.{w}", f"{b}.{q}.{w}") for a, b in (("self_attn", "self_attn"), ("encoder_attn", "cross_attn"))
       for p, q in zip("qkvo", ("q", "k", "v", "out")) for w in ("weight", "bias")]
_UNIT_OFFSET = ("gamma",)


def tensor_names(enc_layers: int, dec_layers: int) -> list[tuple[str, str]]:
    """(our parameter name, the file's name) of every tensor the network may have."""
    out = list(_ENC_TOP) + [(f"encoder.layers.{i}.{a}", f"enc.blocks.{i}.{b}") for i in range(enc_layers)
                            for a, b in _ENC_BLOCK]
    out += list(_DEC_TOP) + [(f"decoder.layers.{i}.{a}", f"dec.blocks.{i}.{b}") for i in range(dec_layers)
                             for a, b in _DEC_BLOCK]
    return out


def _config(keys, where: str) -> dict:
    """The metadata as a transformers config.json (checked by `config.parse_config`)."""
    r = keys.require
    e, d = P + "encoder.", P + "decoder."
    windows = r(e + "sliding_windows")
    if not isinstance(windows, list) or len(windows) % 2:
        raise ModelError(f"{where}: {e}sliding_windows is not a list of (left, right) pairs")
    frame_ms = f32_value(r(e + "frame_ms"))
    rate = r("stt.frontend.sample_rate")
    if r(e + "frame_len") != int(round(rate * frame_ms / 1000.0)):
        raise ModelError(f"{where}: {e}frame_len is not frame_ms at the sample rate")
    keys.expect("stt.frontend.type", ("raw",))
    keys.expect("stt.frontend.num_mels", (1,))
    keys.expect(P + "encoder_layernorm_unit_offset", (True,))
    eps = f32_value(r(P + "cmvn_eps"))
    if abs(eps - 1e-6) > 1e-12:
        raise ModelError(f"{where}: {P}cmvn_eps {eps!r} is not transformers' 1e-6 (not implemented)")
    enc_hidden = r(e + "d_model")
    if r(P + "encoder_hidden_size") != enc_hidden:
        raise ModelError(f"{where}: {P}encoder_hidden_size differs from {e}d_model")
    if r(P + "adapter_has_proj") != (enc_hidden != r(d + "d_model")):
        raise ModelError(f"{where}: {P}adapter_has_proj does not follow the encoder's and decoder's widths")
    keys.get(P + "pad_head_dim_to_multiple_of")  # zero padding of the heads changes no attention value
    return {
        "model_type": ARCH,
        "encoder_config": {"hidden_size": enc_hidden, "intermediate_size": r(e + "ffn_dim"),
                           "num_hidden_layers": r(e + "n_layers"), "num_attention_heads": r(e + "n_heads"),
                           "num_key_value_heads": r(e + "n_kv_heads"), "head_dim": r(e + "head_dim"),
                           "hidden_act": r(e + "activation"), "attention_bias": r(P + "attention_bias"),
                           "sample_rate": rate, "frame_ms": frame_ms,
                           "sliding_windows": [windows[i:i + 2] for i in range(0, len(windows), 2)]},
        "hidden_size": r(d + "d_model"), "intermediate_size": r(d + "ffn_dim"), "num_hidden_layers": r(d + "n_layers"),
        "num_attention_heads": r(d + "n_heads"), "num_key_value_heads": r(d + "n_kv_heads"),
        "head_dim": r(d + "head_dim"), "hidden_act": r(d + "activation"), "vocab_size": r(d + "vocab_size"),
        "max_position_embeddings": r(d + "max_position_embeddings"), "attention_bias": r(P + "attention_bias"),
        "tie_word_embeddings": r(d + "tie_word_embeddings"),
        "rope_parameters": {"rope_type": "default", "rope_theta": f32_value(r(P + "rope_theta")),
                            "partial_rotary_factor": f32_value(r(P + "partial_rotary_factor"))},
        "bos_token_id": r(P + "bos_token_id"), "eos_token_id": r(P + "eos_token_id"),
        "pad_token_id": r(P + "pad_token_id"), "decoder_start_token_id": r(P + "decoder_start_token_id"),
    }


def _tokenizer(keys, where: str, config):
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    from .tokenizer import MoonshineStreamingTokenizer

    keys.expect("tokenizer.ggml.model", ("bpe",))
    keys.expect("tokenizer.ggml.pre", ("default",))
    keys.expect("tokenizer.ggml.byte_fallback", (True,))
    keys.expect("tokenizer.ggml.add_bos_token", (True,))  # the decoder's start token is the config's
    tokens, types, merges = (keys.require("tokenizer.ggml." + k) for k in ("tokens", "token_type", "merges"))
    if not (isinstance(tokens, list) and isinstance(types, list) and len(tokens) == len(types) and tokens
            and isinstance(merges, list) and all(isinstance(m, str) and m.count(" ") == 1 for m in merges)):
        raise ModelError(f"{where}: tokenizer.ggml.tokens / token_type / merges are not lists of the model's pieces")
    if len(tokens) != config.decoder.vocab_size:
        raise ModelError(f"{where}: {len(tokens)} tokens for a vocabulary of {config.decoder.vocab_size}")
    for k, want in (("bos", config.bos), ("eos", config.eos), ("padding", config.pad)):
        if keys.require(f"tokenizer.ggml.{k}_token_id") != want:
            raise ModelError(f"{where}: tokenizer.ggml.{k}_token_id differs from the model's")
    unk = keys.require("tokenizer.ggml.unknown_token_id")
    if isinstance(unk, bool) or not isinstance(unk, int) or not 0 <= unk < len(tokens):
        raise ModelError(f"{where}: tokenizer.ggml.unknown_token_id {unk!r} is not a token")
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(str(t), i)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges], unk_token=str(tokens[unk]),
                               byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    special = [str(t) for t, k in zip(tokens, types) if k == TOKEN_CONTROL or t == tokens[unk]]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
    return MoonshineStreamingTokenizer(tok)


def load_gguf(path: Path, name: str, device, dtype: Optional[torch.dtype] = None):
    from ..gguf.file import GGUFFile
    from .model import MoonshineStreamingModel
    from .recognizer import MoonshineStreamingASR, finish

    where = str(path)
    with GGUFFile(path) as f:
        if f.arch != ARCH:
            raise ModelError(f"{where}: a {f.arch!r} GGUF file, not {ARCH}")
        keys = f.keys()
        keys.accept(["general.*", "stt.variant", "stt.capability.*"])
        try:
            config = parse_config(_config(keys, where), {"sampling_rate": keys.require("stt.frontend.sample_rate")},
                                  None)
        except ValueError as e:
            raise ModelError(f"{where}: model config not supported ({e})") from None
        tokenizer = _tokenizer(keys, where, config)
        keys.finish()
        with torch.device("meta"):
            model = MoonshineStreamingModel(config)
        own = model.state_dict()
        sd = {}
        for ours, theirs in tensor_names(config.encoder.layers, config.decoder.layers):
            if ours not in own:
                if theirs in f:
                    raise ModelError(f"{where}: tensor {theirs} is not in this model's layout")
                continue
            if theirs not in f:
                raise ModelError(f"{where}: tensor {theirs} is missing")
            t = f.tensor(theirs, torch.float32)
            if ours.endswith(_UNIT_OFFSET):
                t = t - 1.0  # the converter folds the unit offset in
            sd[ours] = t.reshape(own[ours].shape) if t.numel() == own[ours].numel() else t
        known = {theirs for _, theirs in tensor_names(config.encoder.layers, config.decoder.layers)}
        extra = sorted(set(f.tensors) - known)
        if extra:
            raise ModelError(f"{where}: unknown tensors {extra[:5]}")
    try:
        model.load_checkpoint(sd)
    except KeyError as e:
        raise ModelError(f"{where}: {e.args[0] if e.args else e}") from None
    return MoonshineStreamingASR(finish(model, name, device, dtype), tokenizer, name, str(device))

"""Moonshine as transcribe.cpp's `moonshine` GGUF files (`scripts/convert-moonshine.py`; tests/models/gguf/moonshine/
README.md): reading them (`load_gguf`).

The schema:

- tensors `enc.conv.{0,1,2}` (the stem; conv 0 without a bias), `enc.conv.norm` (its GroupNorm),
  `enc.blocks.{i}.{norm_attn, attn.{q,k,v,out}, norm_ffn, ffn.{fc1,fc2}}`, `enc.final_norm`, `dec.token_embd` (tied
  to the head), `dec.final_norm`, `dec.blocks.{i}.{norm_self, self_attn.*, norm_cross, cross_attn.*, norm_ffn,
  ffn.{fc1,fc2}}`: transformers' tensors renamed, their layouts as they are;
- the config as `stt.moonshine.{encoder,decoder}.*`, `stt.moonshine.{partial_rotary_factor, rope_theta,
  attention_bias, pad_head_dim_to_multiple_of, conv_stem.*, *_token_id}` and `stt.frontend.*`, rebuilt here into
  the config.json, generation_config.json and preprocessor_config.json that `config.parse_config` checks (so a file
  is held to the same limits as a checkpoint directory; the conv stem must be the published one);
- the tokenizer as `tokenizer.ggml.*` (model "bpe", pre "default", byte_fallback: a SentencePiece-style BPE): the
  tokens by id, their types (unknown and control tokens are the special ones transformers' decode drops), the
  merges; rebuilt into a `tokenizers` BPE with the published tokenizer.json's normalizer and decoder.

What the file does not hold: the output bound. transcribe.cpp runs to generation_config.json's `max_length` (194 in
the published files, not written into the GGUF); this reader keeps the model card's bound (`recognizer.max_length`)
like a checkpoint directory, and `max_new_tokens=193` runs transcribe.cpp's.

Weights: any ggml type `gguf.quants` reads (the converter writes the source dtype, F32), dequantized to float32
(then bfloat16 / float16 / int8 as a directory's model). Every metadata key is read and implemented, accepted by
name as not changing the computation (`general.*`, `stt.variant`, `stt.capability.*`), or a ModelError names it;
so is a missing or unknown tensor."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from ..errors import ModelError
from ..gguf.hf import f32_value

ARCH = "moonshine"
P = "stt.moonshine."
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6

_ATT = [(f"{p}_proj.weight", f"{p}.weight") for p in "qkv"] + [("o_proj.weight", "out.weight")]
_MLP = [(f"mlp.{a}.{w}", f"ffn.{a}.{w}") for a in ("fc1", "fc2") for w in ("weight", "bias")]
_ENC_TOP = [("model.encoder.conv1.weight", "enc.conv.0.weight"), ("model.encoder.conv2.weight", "enc.conv.1.weight"),
            ("model.encoder.conv2.bias", "enc.conv.1.bias"), ("model.encoder.conv3.weight", "enc.conv.2.weight"),
            ("model.encoder.conv3.bias", "enc.conv.2.bias"), ("model.encoder.groupnorm.weight", "enc.conv.norm.weight"),
            ("model.encoder.groupnorm.bias", "enc.conv.norm.bias"),
            ("model.encoder.layer_norm.weight", "enc.final_norm.weight")]
_ENC_BLOCK = [("input_layernorm.weight", "norm_attn.weight"), ("post_attention_layernorm.weight", "norm_ffn.weight")] \
    + [(f"self_attn.{a}", f"attn.{b}") for a, b in _ATT] + _MLP
_DEC_TOP = [("model.decoder.embed_tokens.weight", "dec.token_embd.weight"),
            ("model.decoder.norm.weight", "dec.final_norm.weight")]
_DEC_BLOCK = [("input_layernorm.weight", "norm_self.weight"), ("post_attention_layernorm.weight", "norm_cross.weight"),
              ("final_layernorm.weight", "norm_ffn.weight")] \
    + [(f"self_attn.{a}", f"self_attn.{b}") for a, b in _ATT] \
    + [(f"encoder_attn.{a}", f"cross_attn.{b}") for a, b in _ATT] + _MLP


def tensor_names(enc_layers: int, dec_layers: int) -> list[tuple[str, str]]:
    """(transformers' name, the file's name) of every tensor."""
    out = list(_ENC_TOP)
    for i in range(enc_layers):
        out += [(f"model.encoder.layers.{i}.{a}", f"enc.blocks.{i}.{b}") for a, b in _ENC_BLOCK]
    out += list(_DEC_TOP)
    for i in range(dec_layers):
        out += [(f"model.decoder.layers.{i}.{a}", f"dec.blocks.{i}.{b}") for a, b in _DEC_BLOCK]
    return out


def config_from_meta(keys, where: str) -> tuple[dict, dict, dict]:
    """(config.json, generation_config.json, preprocessor_config.json) the file's keys were written from."""
    r = keys.require
    e, d = P + "encoder.", P + "decoder."
    hidden, inner = r(e + "d_model"), r(e + "ffn_dim")
    for key, want in ((d + "d_model", hidden), (d + "ffn_dim", inner)):
        if r(key) != want:
            raise ModelError(f"{where}: {key} = {r(key)!r} differs from the encoder's {want!r} (not implemented: "
                             "one width for both)")
    keys.expect(P + "attention_bias", (False,))  # the converter writes no attention biases
    keys.expect(d + "tie_word_embeddings", (True,))  # nor an untied head
    pad = r(P + "pad_head_dim_to_multiple_of")
    cfg = {"model_type": "moonshine", "hidden_size": hidden, "intermediate_size": inner,
           "encoder_num_hidden_layers": r(e + "n_layers"), "decoder_num_hidden_layers": r(d + "n_layers"),
           "encoder_num_attention_heads": r(e + "n_heads"), "decoder_num_attention_heads": r(d + "n_heads"),
           "encoder_num_key_value_heads": r(e + "n_kv_heads"), "decoder_num_key_value_heads": r(d + "n_kv_heads"),
           "encoder_hidden_act": r(e + "activation"), "decoder_hidden_act": r(d + "activation"),
           "vocab_size": r(d + "vocab_size"), "max_position_embeddings": r(d + "max_position_embeddings"),
           "tie_word_embeddings": True, "attention_bias": False, "pad_head_dim_to_multiple_of": pad or None,
           "rope_parameters": {"rope_type": "default", "rope_theta": f32_value(r(P + "rope_theta")),
                               "partial_rotary_factor": f32_value(r(P + "partial_rotary_factor"))}}
    s = P + "conv_stem."
    keys.expect(s + "kernel_sizes", ([127, 7, 3],))
    keys.expect(s + "strides", ([64, 3, 2],))
    keys.expect(s + "groupnorm_num_groups", (1,))
    keys.expect(s + "channels", ([hidden, 2 * hidden, hidden],))
    if f32_value(r(s + "groupnorm_eps")) != 1e-5:
        raise ModelError(f"{where}: {s}groupnorm_eps = {r(s + 'groupnorm_eps')!r} is not implemented (1e-05)")
    gen = {k: r(P + k) for k in ("decoder_start_token_id", "bos_token_id", "eos_token_id", "pad_token_id")}
    keys.expect("stt.frontend.type", ("raw",))
    feats = {"sampling_rate": r("stt.frontend.sample_rate"), "feature_size": r("stt.frontend.num_mels")}
    return cfg, gen, feats


def _tokenizer(keys, where: str):
    """A MoonshineTokenizer of the file's tokenizer.* keys (the published tokenizer.json's pipeline)."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers
    from tokenizers.models import BPE

    from .tokenizer import MoonshineTokenizer

    keys.expect("tokenizer.ggml.model", ("bpe",))
    keys.expect("tokenizer.ggml.pre", ("default",))
    keys.expect("tokenizer.ggml.byte_fallback", (True,))
    keys.expect("tokenizer.ggml.add_bos_token", (True,))  # the decoder starts with <s>
    for k in ("unknown", "bos", "eos", "padding"):
        keys.get(f"tokenizer.ggml.{k}_token_id")  # the model's own ids are stt.moonshine.*_token_id
    tokens, types = keys.require("tokenizer.ggml.tokens"), keys.require("tokenizer.ggml.token_type")
    merges = keys.require("tokenizer.ggml.merges")
    if not isinstance(tokens, list) or not isinstance(types, list) or len(tokens) != len(types) or not tokens \
            or not all(isinstance(t, str) for t in tokens):
        raise ModelError(f"{where}: tokenizer.ggml.tokens and token_type are not lists of the same length")
    bad = [k for k in set(types) if k not in (TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE)]
    if bad:
        raise ModelError(f"{where}: tokenizer.ggml.token_type {bad[0]!r} is not implemented (normal, unknown, "
                         "control, byte)")
    if not isinstance(merges, list) or not all(isinstance(m, str) and len(m.split(" ")) == 2 for m in merges):
        raise ModelError(f"{where}: tokenizer.ggml.merges is not a list of 'left right' pairs")
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    if len(vocab) != len(tokens):
        raise ModelError(f"{where}: tokenizer.ggml.tokens holds a token twice")
    unk = next((t for t, k in zip(tokens, types) if k == TOKEN_UNKNOWN), None)
    try:
        tok = Tokenizer(BPE(vocab, [tuple(m.split(" ")) for m in merges], unk_token=unk, fuse_unk=True,
                            byte_fallback=True))
    except Exception as e:  # tokenizers' own exception type, with Rust text
        raise ModelError(f"{where}: tokenizer.ggml.* do not make a BPE ({str(e)[:200]})") from None
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t, k in zip(tokens, types)
                            if k in (TOKEN_UNKNOWN, TOKEN_CONTROL)])
    return MoonshineTokenizer(tok)


def read_gguf(path: Path):
    """(MoonshineConfig, float32 tensors under transformers' names, MoonshineTokenizer, extras) of a `moonshine`
    GGUF file; extras: `identity` (general.* and stt.variant) and the rebuilt `config`, `generation`, `features`."""
    from ..gguf.file import GGUFFile, missing_layers
    from .config import parse_config

    where = str(path)
    with GGUFFile(path) as f:
        if f.arch != ARCH:
            raise ModelError(f"{where}: general.architecture is {f.arch!r}, not {ARCH!r}")
        keys = f.keys()
        keys.accept(["general.*", "stt.variant", "stt.capability.*"])
        raw, gen, feats = config_from_meta(keys, where)
        for key, prefix in (("encoder.n_layers", "enc.blocks."), ("decoder.n_layers", "dec.blocks.")):
            problem = missing_layers(f, prefix, keys.require(P + key))
            if problem:
                raise ModelError(f"{where}: {P}{key} = {problem}")
        tokenizer = _tokenizer(keys, where)
        try:
            cfg = parse_config(raw, gen, feats)
        except ValueError as e:
            raise ModelError(f"{where}: model config not supported ({e})") from None
        keys.finish()
        names = tensor_names(cfg.encoder_layers, cfg.decoder_layers)
        known = {g for _, g in names}
        unknown = [n for n in f.tensors if n not in known]
        if unknown:
            raise ModelError(f"{where}: tensor{'s' if len(unknown) > 1 else ''} this code does not implement: "
                             f"{', '.join(unknown[:6])}")
        state: dict[str, torch.Tensor] = {}
        for ours, g in names:
            if g not in f.tensors:
                raise ModelError(f"{where}: tensor {g} is missing (transformers' {ours})")
            state[ours] = f.tensor(g)
        meta = {k: v for k, v in f.meta.items() if k.startswith(("general.", "stt.variant"))}
    return cfg, state, tokenizer, {"identity": meta, "config": raw, "generation": gen, "features": feats}


def load_gguf(path: Path, name: str, device, dtype: Optional[torch.dtype] = None):
    """A `moonshine` GGUF file -> a MoonshineASR on `device`."""
    from .model import MoonshineModel
    from .recognizer import MoonshineASR

    path = Path(path)
    cfg, state, tokenizer, _ = read_gguf(path)
    with torch.device("meta"):
        model = MoonshineModel(cfg)
    try:
        model.load_checkpoint(state)
    except KeyError as e:
        raise ModelError(f"{path}: {e.args[0] if e.args else e}") from None
    return MoonshineASR.finish(model, tokenizer, name, device, dtype)

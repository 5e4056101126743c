"""Granite Speech NAR as transcribe.cpp's `granite_speech_nar` GGUF files: reading them (`load_gguf`);
writing them is `gguf_export.export_gguf`.

The schema (transcribe.cpp 0.2.1, `scripts/convert-granite_nar.py`; see shared/models/gguf/README.md):

- tensors under `enc.` / `prj.` / `dec.` (the mapping to IBM's hub names is `tensor_names`), plus the
  front end's `frontend.mel_filterbank` [80, 257] and `frontend.window` [400]; the head is tied to
  `dec.token_embd.weight` (no `lm_head`); the encoder's fused `attn.to_kv` stays fused;
- the config as `stt.granite_nar.{encoder,projector,text}.*`, `stt.granite_nar.scale_projected_embeddings`,
  `stt.frontend.*`; the tokenizer as `tokenizer.ggml.*` (model "gpt2": byte-level BPE, tokens,
  token_type 1 normal / 3 special added / 4 other added, merges when there are any);
- `stt.granite_nar.ctc_chars`: a character table for the encoder's character-CTC head. This package never
  decodes that head to text (it is used only as probabilities: the self-conditioning feedback and the
  BPE pooling weights, 1 - p(blank)), so the table does not change what is computed; it is read and
  checked to be a list of strings whose entry 0 (the blank) is empty, nothing more. Its length need not
  match the head: the upstream converter writes its 348-entry default table whenever the config has no
  `ctc_tokenizer_config` (it does so for the 12-class tiny test model).

Weights kept compressed: by default a Q8_0 file (Q8_0_DEFAULT) runs the linear layers
`GraniteNAR.quantize_int8` names as Q8Linear (the file's Q8_0 blocks as they are, dequantized exactly at
each call, float activations), dtype int8 as Int8Linear (int8 rows, activations quantized per row);
both made straight from the file's bytes (`gguf/int8.py`: no float32 copy of the weight; a stand-in of
no memory until the model adopts its layers).

Loading reads every metadata key (or accepts it by name as not changing the computation: the
`general.*` identity block, `stt.capability.*`); an unknown key, a missing tensor, a tensor this code
does not know, or a front-end setting other than the one `frontend.py` implements is a `ModelError`
naming it. The stored mel filterbank and window are compared with our front end's (within
FRONTEND_TOLERANCE) rather than used: they must be the same front end.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import ModelError
from ..gguf.hf import f32_value
from ..gguf.file import missing_layers
from .frontend import HOP, N_FFT, N_MELS, SAMPLE_RATE, WIN_LENGTH, GraniteFrontEnd
from .tokenizer import GraniteTokenizer

ARCH = "granite_speech_nar"
P = "stt.granite_nar."
# Largest absolute difference allowed between the stored filterbank / window and ours (both are in
# [0, 1]; librosa's HTK filterbank equals ours exactly in float32, numpy's periodic Hann differs from
# torch.hann_window by at most 2.4e-7).
FRONTEND_TOLERANCE = 1e-6

# A Q8_0 file (any of the weights `GraniteNAR.quantize_int8` quantizes stored as Q8_0) loaded with dtype
# None keeps those weights compressed (Q8Linear: the file's Q8_0 blocks bit for bit; HalfLinear, float32
# products: those it stores otherwise, e.g. the pointwise convolutions the quantizer leaves F16, in float16;
# the rest float32), made straight from the file's bytes.
# Each call dequantizes a weight exactly and multiplies it with float activations (bfloat16 where the CPU
# multiplies it natively, else float32): no second rounding of the weights, no quantized activations
# (the per-row int8 model, dtype int8's, agreed less with the float result on Parakeet files; see
# transcribe/parakeet/gguf_int8.py and benchmarks/README.md, "Q8_0 compute"). dtype float32 / bfloat16
# still dequantize everything.
Q8_0_DEFAULT = True

# Token types (llama.cpp's tokenizer.ggml.token_type values) as the converter writes them.
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER = 1, 3, 4

_ENC_TOP = [
    ("encoder.input_linear.weight", "enc.input_linear.weight"),
    ("encoder.input_linear.bias", "enc.input_linear.bias"),
    ("encoder.out.weight", "enc.ctc_proj.weight"),
    ("encoder.out.bias", "enc.ctc_proj.bias"),
    ("encoder.out_mid.weight", "enc.ctc_bypass.weight"),
    ("encoder.out_mid.bias", "enc.ctc_bypass.bias"),
    ("encoder.out_bpe.weight", "enc.ctc_bpe.weight"),
    ("encoder.out_bpe.bias", "enc.ctc_bpe.bias"),
]
_ENC_BLOCK = [
    ("ff1.pre_norm.weight", "norm_ff1.weight"), ("ff1.pre_norm.bias", "norm_ff1.bias"),
    ("ff1.up_proj.weight", "ff1_up.weight"), ("ff1.up_proj.bias", "ff1_up.bias"),
    ("ff1.down_proj.weight", "ff1_down.weight"), ("ff1.down_proj.bias", "ff1_down.bias"),
    ("attn.pre_norm.weight", "norm_attn.weight"), ("attn.pre_norm.bias", "norm_attn.bias"),
    ("attn.to_q.weight", "attn_q.weight"), ("attn.to_kv.weight", "attn_kv.weight"),
    ("attn.to_out.weight", "attn_out.weight"), ("attn.to_out.bias", "attn_out.bias"),
    ("attn.rel_pos_emb.weight", "attn_rel_pos_emb.weight"),
    ("conv.norm.weight", "norm_conv.weight"), ("conv.norm.bias", "norm_conv.bias"),
    ("conv.up_conv.weight", "conv_pointwise1.weight"), ("conv.up_conv.bias", "conv_pointwise1.bias"),
    ("conv.depth_conv.conv.weight", "conv_depthwise.weight"),
    ("conv.batch_norm.weight", "conv_bn.weight"), ("conv.batch_norm.bias", "conv_bn.bias"),
    ("conv.batch_norm.running_mean", "conv_bn.running_mean"), ("conv.batch_norm.running_var", "conv_bn.running_var"),
    ("conv.down_conv.weight", "conv_pointwise2.weight"), ("conv.down_conv.bias", "conv_pointwise2.bias"),
    ("ff2.pre_norm.weight", "norm_ff2.weight"), ("ff2.pre_norm.bias", "norm_ff2.bias"),
    ("ff2.up_proj.weight", "ff2_up.weight"), ("ff2.up_proj.bias", "ff2_up.bias"),
    ("ff2.down_proj.weight", "ff2_down.weight"), ("ff2.down_proj.bias", "ff2_down.bias"),
    ("post_norm.weight", "norm_post.weight"), ("post_norm.bias", "norm_post.bias"),
]
_PRJ_TOP = [
    ("projector.layer_projector.weight", "prj.layer_projector.weight"),
    ("projector.layer_projector.bias", "prj.layer_projector.bias"),
    ("projector.out_norm.weight", "prj.out_norm.weight"),
    ("projector.out_norm.bias", "prj.out_norm.bias"),
    ("projector.out_linear.weight", "prj.out_linear.weight"),
    ("projector.out_linear.bias", "prj.out_linear.bias"),
    ("projector.query", "prj.query"),
    ("projector.window_positions", "prj.window_positions"),
]
_PRJ_BLOCK = [
    ("attn_norm.weight", "norm_attn.weight"), ("attn_norm.bias", "norm_attn.bias"),
    ("cross_attention.q_proj.weight", "cross_attn_q.weight"), ("cross_attention.q_proj.bias", "cross_attn_q.bias"),
    ("cross_attention.k_proj.weight", "cross_attn_k.weight"), ("cross_attention.k_proj.bias", "cross_attn_k.bias"),
    ("cross_attention.v_proj.weight", "cross_attn_v.weight"), ("cross_attention.v_proj.bias", "cross_attn_v.bias"),
    ("cross_attention.o_proj.weight", "cross_attn_o.weight"), ("cross_attention.o_proj.bias", "cross_attn_o.bias"),
    ("mlp_norm.weight", "norm_ffn.weight"), ("mlp_norm.bias", "norm_ffn.bias"),
    ("mlp.fc1.weight", "ffn_fc1.weight"), ("mlp.fc1.bias", "ffn_fc1.bias"),
    ("mlp.fc2.weight", "ffn_fc2.weight"), ("mlp.fc2.bias", "ffn_fc2.bias"),
]
_DEC_TOP = [
    ("language_model.model.embed_tokens.weight", "dec.token_embd.weight"),
    ("language_model.model.norm.weight", "dec.output_norm.weight"),
]
_DEC_BLOCK = [
    ("input_layernorm.weight", "norm_attn.weight"), ("post_attention_layernorm.weight", "norm_ffn.weight"),
    ("self_attn.q_proj.weight", "attn.q.weight"), ("self_attn.k_proj.weight", "attn.k.weight"),
    ("self_attn.v_proj.weight", "attn.v.weight"), ("self_attn.o_proj.weight", "attn.o.weight"),
    ("mlp.gate_proj.weight", "ffn.gate.weight"), ("mlp.up_proj.weight", "ffn.up.weight"),
    ("mlp.down_proj.weight", "ffn.down.weight"),
]
FRONTEND_TENSORS = ("frontend.mel_filterbank", "frontend.window")


def tensor_names(enc_layers: int, prj_layers: int, prj_taps: int, dec_layers: int) -> list[tuple[str, str]]:
    """(IBM hub name, GGUF name) of every model tensor, in the converter's order (the front end's two
    tensors come first in a file and are not listed)."""
    out = list(_ENC_TOP)
    for i in range(enc_layers):
        out += [(f"encoder.layers.{i}.{a}", f"enc.blocks.{i}.{b}") for a, b in _ENC_BLOCK]
    out += _PRJ_TOP
    for j in range(prj_taps):
        out += [(f"projector.layer_norms.{j}.{w}", f"prj.layer_norms.{j}.{w}") for w in ("weight", "bias")]
    for i in range(prj_layers):
        out += [(f"projector.qformer.layers.{i}.{a}", f"prj.blocks.{i}.{b}") for a, b in _PRJ_BLOCK]
    out += _DEC_TOP
    for i in range(dec_layers):
        out += [(f"language_model.model.layers.{i}.{a}", f"dec.blocks.{i}.{b}") for a, b in _DEC_BLOCK]
    return out




# ------------------------------------------------------------------------------------------------
# Tokenizer


def tokenizer_json(tokens: list[str], types: list[int], merges: Optional[list[str]], unk: Optional[int],
                   where: str) -> dict:
    """The `tokenizers` JSON of a gpt2-style (byte-level BPE) GGUF tokenizer, laid out as Granite's
    tokenizer.json: every token in the BPE vocabulary, type-3 tokens added as special, type-4 tokens
    added as not special, ByteLevel pre-tokenizer and decoder. A token that repeats an earlier one (or
    is empty, the converter's filler for ids no piece has) is left out of the vocabulary."""
    vocab: dict[str, int] = {}
    added = []
    for i, (tok, kind) in enumerate(zip(tokens, types)):
        if kind not in (TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER):
            raise ModelError(f"{where}: tokenizer.ggml.token_type[{i}] = {kind} is not implemented for a gpt2 "
                             "tokenizer (1 normal, 3 special added, 4 added)")
        if tok == "" or tok in vocab:
            continue
        vocab[tok] = i
        if kind != TOKEN_NORMAL:
            added.append({"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": kind == TOKEN_CONTROL})
    pairs = []
    for m in merges or []:
        parts = m.split(" ")
        if len(parts) != 2:
            raise ModelError(f"{where}: tokenizer.ggml.merges entry {m!r} is not two pieces")
        pairs.append(parts)
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": tokens[unk] if unk is not None else None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False, "vocab": vocab, "merges": pairs},
    }


def _tokenizer(keys, where: str):
    keys.expect("tokenizer.ggml.model", ("gpt2",))
    keys.expect("tokenizer.ggml.pre", ("granite",))
    tokens = keys.require("tokenizer.ggml.tokens")
    types = keys.require("tokenizer.ggml.token_type")
    if not isinstance(tokens, list) or not isinstance(types, list) or len(tokens) != len(types) or not tokens:
        raise ModelError(f"{where}: tokenizer.ggml.tokens and token_type are not lists of the same length")
    merges = keys.get("tokenizer.ggml.merges")
    ids = {}
    for k in ("bos", "eos", "padding", "unknown"):
        v = keys.get(f"tokenizer.ggml.{k}_token_id")
        if v is not None and not 0 <= int(v) < len(tokens):
            raise ModelError(f"{where}: tokenizer.ggml.{k}_token_id {v} is outside the {len(tokens)} tokens")
        ids[k] = v
    spec = tokenizer_json(tokens, types, merges, ids["unknown"], where)
    return GraniteTokenizer.from_json(json.dumps(spec), where), ids


# ------------------------------------------------------------------------------------------------
# Config


def config_from_meta(keys, where: str) -> dict:
    """The config.json (IBM hub layout) the file's `stt.granite_nar.*` keys were written from."""
    r = keys.require
    enc = {
        "num_layers": r(P + "encoder.n_layers"), "hidden_dim": r(P + "encoder.hidden"),
        "num_heads": r(P + "encoder.n_heads"), "dim_head": r(P + "encoder.head_dim"),
        "input_dim": r(P + "encoder.input_dim"), "output_dim": r(P + "encoder.output_dim"),
        "bpe_output_dim": r(P + "encoder.bpe_output_dim"), "bpe_pooling_window": r(P + "encoder.bpe_pool_window"),
        "conv_kernel_size": r(P + "encoder.conv_kernel_size"),
        "conv_expansion_factor": r(P + "encoder.conv_expansion"),
        "feedforward_mult": r(P + "encoder.feedforward_mult"), "max_pos_emb": r(P + "encoder.max_pos_emb"),
        "context_size": r(P + "encoder.context_size"), "self_conditioning_layer": r(P + "encoder.self_cond_layer"),
        "blank_token_id": r(P + "encoder.bpe_blank_id"),
    }
    prj = {
        "num_layers": r(P + "projector.n_layers"), "num_encoder_layers": r(P + "projector.num_encoder_layers"),
        "hidden_size": r(P + "projector.hidden"), "num_heads": r(P + "projector.n_heads"),
        "block_size": r(P + "projector.block_size"), "downsample_rate": r(P + "projector.downsample_rate"),
        "encoder_dim": r(P + "projector.encoder_dim"), "llm_dim": r(P + "projector.llm_dim"),
        "mlp_ratio": r(P + "projector.mlp_ratio"), "mlp_bias": r(P + "projector.mlp_bias"),
        "attn_bias": r(P + "projector.attn_bias"), "layernorm_eps": f32_value(r(P + "projector.layernorm_eps")),
    }
    hidden, heads = r(P + "text.hidden"), r(P + "text.n_heads")
    head_dim = r(P + "text.head_dim")
    if heads <= 0 or head_dim * heads != hidden:
        raise ModelError(f"{where}: {P}text.head_dim {head_dim} x n_heads {heads} is not hidden {hidden}")
    txt = {
        "model_type": "granite", "vocab_size": r(P + "text.vocab_size"), "hidden_size": hidden,
        "intermediate_size": r(P + "text.intermediate"), "num_hidden_layers": r(P + "text.n_layers"),
        "num_attention_heads": heads, "num_key_value_heads": r(P + "text.n_kv_heads"),
        "max_position_embeddings": r(P + "text.max_position_embeddings"),
        "rms_norm_eps": f32_value(r(P + "text.rms_norm_eps")),
        "rope_parameters": {"rope_type": "default", "rope_theta": f32_value(r(P + "text.rope_theta"))},
        "tie_word_embeddings": r(P + "text.tie_word_embeddings"),
        "attention_multiplier": f32_value(r(P + "text.attention_multiplier")),
        "embedding_multiplier": f32_value(r(P + "text.embedding_multiplier")),
        "logits_scaling": f32_value(r(P + "text.logits_scaling")),
        "residual_multiplier": f32_value(r(P + "text.residual_multiplier")),
        "bos_token_id": r(P + "text.bos_id"), "eos_token_id": r(P + "text.eos_id"),
        "pad_token_id": r(P + "text.pad_id"), "hidden_act": keys.expect(P + "text.hidden_act", ("silu",)),
        "attention_bias": False, "mlp_bias": False,
    }
    if txt["tie_word_embeddings"] is not True:
        raise ModelError(f"{where}: {P}text.tie_word_embeddings is false, but the schema has no output head "
                         "tensor (the head is dec.token_embd)")
    indices = r(P + "encoder.layer_indices")
    return {
        "model_type": ARCH,
        "blank_token_id": enc["blank_token_id"],
        "encoder_layer_indices": list(indices) if isinstance(indices, list) else indices,
        "scale_projected_embeddings": r(P + "scale_projected_embeddings"),
        # Not stored: transcribe.cpp hard-codes the template length max(2n+1, 8), as IBM's config has it.
        "min_edit_sequence_length": 8,
        "tie_word_embeddings": True,
        "encoder_config": enc, "projector_config": prj, "text_config": txt,
    }


def _frontend(keys, file, where: str) -> None:
    """The stored front end must be ours: settings exactly, filterbank and window within tolerance."""
    f = "stt.frontend."
    keys.expect(f + "type", ("mel",))
    keys.expect(f + "sample_rate", (SAMPLE_RATE,))
    keys.expect(f + "num_mels", (N_MELS,))
    keys.expect(f + "n_fft", (N_FFT,))
    keys.expect(f + "win_length", (WIN_LENGTH,))
    keys.expect(f + "hop_length", (HOP,))
    keys.expect(f + "window", ("hann_periodic",))
    keys.expect(f + "normalize", ("per_utterance",))
    keys.expect(f + "pad_mode", ("reflect",))
    keys.expect(f + "mel_norm", ("htk",))
    ours = GraniteFrontEnd()
    for name, want in (("frontend.mel_filterbank", ours.filters.T), ("frontend.window", ours.window)):
        got = file.tensor(name)
        if tuple(got.shape) != tuple(want.shape):
            raise ModelError(f"{where}: tensor {name} is {tuple(got.shape)}, our front end's is {tuple(want.shape)}")
        diff = float((got - want).abs().max())
        if not diff <= FRONTEND_TOLERANCE:
            raise ModelError(f"{where}: tensor {name} differs from this package's front end by {diff:.3g} "
                             f"(more than {FRONTEND_TOLERANCE}): a different front end is not implemented")


def _ctc_chars(keys, where: str) -> list[str]:
    chars = keys.require(P + "ctc_chars")
    if not isinstance(chars, list) or not chars or not all(isinstance(c, str) for c in chars):
        raise ModelError(f"{where}: {P}ctc_chars is not a list of strings")
    if chars[0] != "":
        raise ModelError(f"{where}: {P}ctc_chars[0] is {chars[0]!r}, not the blank ('')")
    return chars


# ------------------------------------------------------------------------------------------------
# Loading


def _squeeze_to(t: torch.Tensor, shape: tuple, name: str, where: str) -> torch.Tensor:
    """transcribe-quantize drops leading size-1 dims (prj.query [1,3,D] -> [3,D]): put them back."""
    if tuple(t.shape) == tuple(shape):
        return t
    if t.numel() == int(np.prod(shape)) and [d for d in t.shape if d != 1] == [d for d in shape if d != 1]:
        return t.reshape(shape)
    raise ModelError(f"{where}: tensor {name} is {tuple(t.shape)}, the config makes {tuple(shape)}")


def read_gguf(path: Path, dtype: torch.dtype = torch.float32, int8: Optional[str] = None):
    """(GraniteConfig, state dict under IBM's names as `dtype`, GraniteTokenizer, extras) of a
    `granite_speech_nar` GGUF file; extras holds `ctc_chars` and the `general.*` identity.

    int8 "auto": "blocks" (the rest float32, whatever `dtype`) when the file stores any of those weights
    as Q8_0 (see Q8_0_DEFAULT), else None; "blocks": each of those weights is read as its Q8_0 blocks
    (`gguf.quants.q8_0_blocks`) for a Q8Linear, or, stored in another type, as float16 for a HalfLinear.
    int8 "all": every weight `GraniteNAR.quantize_int8` quantizes (model.INT8_WEIGHTS) is read straight
    from the file's bytes as int8 rows (`gguf.quants.int8_rows`: no float32 copy of it is made) and a
    stand-in holding no memory takes its place in the state dict; "q8_0": only those the file stores as
    Q8_0. extras["int8"] then holds the `gguf.int8.Int8Rows` whose `adopt(model)` makes the layers once the
    model is built (`dtype` must be float32)."""
    from ..gguf import quants
    from ..gguf.file import GGUFFile
    from ..gguf.int8 import Int8Rows
    from .config import parse_config
    from .model import INT8_WEIGHTS, GraniteNAR

    if int8 not in (None, "auto", "all", "q8_0", "blocks"):
        raise ValueError(f"int8 is None, 'auto', 'all', 'q8_0' or 'blocks', not {int8!r}")
    if int8 in ("all", "q8_0", "blocks") and dtype != torch.float32:
        raise ValueError("an int8 model's other weights are float32")

    where = str(path)
    with GGUFFile(path) as f:
        if f.arch != ARCH:
            raise ModelError(f"{where}: general.architecture is {f.arch!r}, not {ARCH!r}")
        keys = f.keys()
        keys.accept(["general.*", "stt.variant", "stt.capability.*"])
        raw = config_from_meta(keys, where)
        for key, prefix in (("encoder.n_layers", "enc.blocks."), ("projector.n_layers", "prj.blocks."),
                            ("text.n_layers", "dec.blocks.")):
            _check_layer_count(f, where, P + key, prefix, keys.require(P + key))
        try:
            cfg = parse_config(raw, "ibm")
        except ModelError as e:
            raise ModelError(f"{where}: {e}") from None
        tokenizer, ids = _tokenizer(keys, where)
        chars = _ctc_chars(keys, where)
        _frontend(keys, f, where)
        keys.finish()

        with torch.device("meta"):
            shapes = {k: tuple(v.shape) for k, v in GraniteNAR(cfg, tied=True).state_dict().items()}
        names = tensor_names(cfg.encoder.num_layers, cfg.projector.num_layers, len(cfg.encoder_layer_indices),
                             cfg.text.num_hidden_layers)
        known = {g for _, g in names} | set(FRONTEND_TENSORS)
        unknown = [n for n in f.tensors if n not in known]
        if unknown:
            raise ModelError(f"{where}: tensor{'s' if len(unknown) > 1 else ''} this code does not implement: "
                             f"{', '.join(unknown[:6])}")
        if int8 == "auto":
            stored = {f.tensors[g].qtype for ibm, g in names if g in f.tensors and INT8_WEIGHTS.match(ibm)}
            int8 = "blocks" if quants.Q8_0 in stored else None
            if int8 is not None:
                dtype = torch.float32  # an int8 model's other weights
        rows = Int8Rows() if int8 is not None else None
        state: dict[str, torch.Tensor] = {}
        for ibm, g in names:
            if g not in f.tensors:
                raise ModelError(f"{where}: tensor {g} is missing (IBM's {ibm})")
            if rows is not None and ibm in shapes and INT8_WEIGHTS.match(ibm) and \
                    (int8 in ("all", "blocks") or f.tensors[g].qtype == quants.Q8_0):
                state[ibm] = rows.take(f, g, ibm, shapes[ibm], blocks=int8 == "blocks")
                continue
            t = f.tensor(g)
            if ibm not in shapes:
                # A projector LayerNorm: the model has no affine parameters there; they must be identity.
                want = 1.0 if ibm.endswith("weight") else 0.0
                if t.ndim != 1 or t.shape[0] not in (cfg.projector.hidden_size, cfg.projector.encoder_dim) or \
                        not bool((t == want).all()):
                    raise ModelError(f"{where}: tensor {g} is not an identity LayerNorm {'weight' if want else 'bias'}"
                                     " (affine projector LayerNorms are not implemented)")
                continue
            t = _squeeze_to(t, shapes[ibm], g, where)
            state[ibm] = t if t.dtype == dtype else t.to(dtype)
        meta = {k: v for k, v in f.meta.items() if k.startswith(("general.", "stt.variant"))}
    return cfg, state, tokenizer, {"ctc_chars": chars, "identity": meta, "token_ids": ids, "int8": rows}


def _check_layer_count(f, where: str, key: str, prefix: str, n_layers: int) -> None:
    """The file's `key` must be the number of layers whose tensors it holds (gguf.file.missing_layers)."""
    problem = missing_layers(f, prefix, n_layers)
    if problem:
        raise ModelError(f"{where}: {key} = {problem}")


def load_gguf(path: Path, name: str, device: torch.device, dtype: Optional[torch.dtype] = None):
    """A `granite_speech_nar` GGUF file -> a GraniteASR on `device` (dtype None: float32 on a CPU,
    bfloat16 on a GPU, as for a checkpoint directory, except a Q8_0 file: Q8Linear, see Q8_0_DEFAULT). dtype
    int8: the layers `GraniteNAR.quantize_int8` quantizes become Int8Linear straight from the file's bytes
    (each row dequantized exactly, then quantized per row: from a BF16 file, the
    int8 weights the checkpoint directory's int8 model has), the rest float32."""
    from .model import build
    from .recognizer import GraniteASR, check_dtype

    asked = dtype
    dtype = check_dtype(device, dtype)
    if dtype == torch.int8:
        int8 = "all"
    else:
        int8 = "auto" if asked is None and Q8_0_DEFAULT else None
    cfg, state, tokenizer, extra = read_gguf(Path(path), torch.float32 if dtype == torch.int8 else dtype, int8)
    try:
        model = build(cfg, state, tied=True)
    except ModelError as e:
        raise ModelError(f"{path}: {e}") from None
    del state
    if extra["int8"] is not None:
        extra["int8"].adopt(model)
    model.to(device)
    return GraniteASR(model, tokenizer, name, str(device))

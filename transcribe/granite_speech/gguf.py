"""Granite Speech (the autoregressive audio-LLMs) as transcribe.cpp's `granite_speech` GGUF files
(`scripts/convert-granite.py`, 0.2.1; tests/models/gguf/granite_speech/README.md): reading them (`load_gguf`).

The schema:

- tensors `enc.*` (the conformer: `enc.blocks.{i}.{norm_ff1, ff1.up, ff1.down, norm_attn, attn.q, attn.kv,
  attn.out, attn.rel_pos_emb, norm_conv, conv.pointwise1, conv.depthwise, conv.bn.*, conv.pointwise2, norm_ff2,
  ff2.up, ff2.down, norm_post}`, the CTC heads `enc.ctc_proj` / `enc.ctc_bypass`), `proj.*` (the Q-Former:
  `proj.query`, `proj.linear`, `proj.qformer.final_norm`, `proj.qformer.blocks.{i}.{self_attn, cross_attn}.{q,k,v,
  out}`, `norm_self_attn`, `norm_cross_attn`, `ffn.{up,down}`, `norm_ffn`), `dec.*` (the Granite LM:
  `dec.token_embd`, `dec.output_norm`, `dec.output` when the head is not tied, `dec.blocks.{i}.{norm_attn,
  norm_ffn, attn.{q,k,v,o}, ffn.{gate,up,down}}`), and the front end's `frontend.mel_filterbank` [80, 257] and
  `frontend.window` [400] (compared with ours, not used);
- the config as `stt.granite.{encoder,projector,decoder}.*`, `stt.granite.{audio_token_id, downsample_rate,
  window_size}` and `stt.frontend.*`, rebuilt here into the config.json that `config.parse_config` checks (so a
  file is held to the same limits as a checkpoint directory);
- the tokenizer as `tokenizer.ggml.*` (model "gpt2": byte-level BPE; `pre` "granite": the Granite 4 LMs'
  digit-triple split, "gpt2": plain ByteLevel), rebuilt into an `llm.tokenizer.LLMTokenizer`; the chat template
  as `tokenizer.chat_template` (recognised, never run: `prompt.PromptBuilder`).

What the file does not hold, and what this reader takes instead:

- a LoRA adapter: the converter reads model.safetensors only, so a file made from a checkpoint with one
  (granite-speech-3.3) holds the base LM (the adapter is not merged); the config is read with has_lora_adapter
  false, which is what the file computes;
- `clean_up_tokenization_spaces`: true, as the published checkpoints' tokenizer_config.json say;
- generation_config.json: the stop token is tokenizer.ggml.eos_token_id; no search defaults (greedy).

Weights: F32, F16, BF16 and Q8_0 (any ggml type `gguf.quants` reads, dequantized). A Q8_0 file loaded with
dtype None keeps its Q8_0 matrices compressed as the NAR family's reader does (`Q8_0_DEFAULT`: Q8Linear, the
file's blocks bit for bit, dequantized exactly at each call; the products the quantizer leaves in F16 beside
them as HalfLinear; the rest float32). dtype int8: the model's int8 layers (`model.INT8_WEIGHTS` and the LM's
products) as Int8Linear straight from the file's bytes. Other dtypes dequantize everything.

Every metadata key is read and implemented, accepted by name as not changing the computation (`general.*`,
`stt.variant`, `stt.capability.*`, `stt.translation.*`), or a ModelError names it; so is a missing or unknown
tensor.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import ModelError
from ..gguf.hf import f32_value

ARCH = "granite_speech"
P = "stt.granite."
Q8_0_DEFAULT = True
# Largest absolute difference allowed between the stored filterbank / window and ours (both in [0, 1]; librosa's
# HTK filterbank and numpy's periodic Hann differ from ours by float32 rounding).
FRONTEND_TOLERANCE = 1e-6
# Token types (llama.cpp's tokenizer.ggml.token_type) the converter writes: 1 normal, 3 control (special).
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER = 1, 3, 4
# The Granite 4 LMs' pre-tokenizer split (tokenizer.ggml.pre "granite"): words with one leading non-letter,
# digits in runs of at most three, punctuation runs, newlines, spaces; then byte-level without its own regex.
GRANITE_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# (our name below the part's prefix, the file's name below its prefix)
_ENC_TOP = [("input_linear.weight", "input_linear.weight"), ("input_linear.bias", "input_linear.bias"),
            ("out.weight", "ctc_proj.weight"), ("out.bias", "ctc_proj.bias"),
            ("out_mid.weight", "ctc_bypass.weight"), ("out_mid.bias", "ctc_bypass.bias")]


def _ff(n: str) -> list[tuple[str, str]]:
    return [(f"ff{n}.{a}.{w}", f"{b}.{w}") for a, b in (("pre_norm", f"norm_ff{n}"), ("up_proj", f"ff{n}.up"),
                                                       ("down_proj", f"ff{n}.down")) for w in ("weight", "bias")]


_ENC_BLOCK = _ff("1") + [
    ("attn.pre_norm.weight", "norm_attn.weight"), ("attn.pre_norm.bias", "norm_attn.bias"),
    ("attn.to_q.weight", "attn.q.weight"), ("attn.to_kv.weight", "attn.kv.weight"),
    ("attn.to_out.weight", "attn.out.weight"), ("attn.to_out.bias", "attn.out.bias"),
    ("attn.rel_pos_emb.weight", "attn.rel_pos_emb.weight"),
    ("conv.norm.weight", "norm_conv.weight"), ("conv.norm.bias", "norm_conv.bias"),
    ("conv.up_conv.weight", "conv.pointwise1.weight"), ("conv.up_conv.bias", "conv.pointwise1.bias"),
    ("conv.depth_conv.conv.weight", "conv.depthwise.weight"),
    ("conv.batch_norm.weight", "conv.bn.weight"), ("conv.batch_norm.bias", "conv.bn.bias"),
    ("conv.batch_norm.running_mean", "conv.bn.running_mean"), ("conv.batch_norm.running_var", "conv.bn.running_var"),
    ("conv.down_conv.weight", "conv.pointwise2.weight"), ("conv.down_conv.bias", "conv.pointwise2.bias"),
] + _ff("2") + [("post_norm.weight", "norm_post.weight"), ("post_norm.bias", "norm_post.bias")]

_PRJ_TOP = [("query", "query"), ("linear.weight", "linear.weight"), ("linear.bias", "linear.bias"),
            ("qformer.layernorm.weight", "qformer.final_norm.weight"),
            ("qformer.layernorm.bias", "qformer.final_norm.bias")]
_PRJ_BLOCK = [(f"{ours}.{a}.{w}", f"{b}.{w}")
              for ours, t in (("attention", "self_attn"), ("crossattention", "cross_attn"))
              for a, b in (("attention.query", f"{t}.q"), ("attention.key", f"{t}.k"), ("attention.value", f"{t}.v"),
                           ("output.dense", f"{t}.out"), ("output.LayerNorm", f"norm_{t}"))
              for w in ("weight", "bias")] + \
    [(f"{a}.{w}", f"{b}.{w}") for a, b in (("intermediate_query.dense", "ffn.up"), ("output_query.dense", "ffn.down"),
                                           ("output_query.LayerNorm", "norm_ffn")) for w in ("weight", "bias")]
_DEC_TOP = [("embed_tokens.weight", "token_embd.weight"), ("norm.weight", "output_norm.weight")]
_DEC_BLOCK = [("input_layernorm.weight", "norm_attn.weight"),
              ("post_attention_layernorm.weight", "norm_ffn.weight")] + \
    [(f"self_attn.{p}_proj.weight", f"attn.{p}.weight") for p in "qkvo"] + \
    [(f"mlp.{p}_proj.weight", f"ffn.{p}.weight") for p in ("gate", "up", "down")]
FRONTEND_TENSORS = ("frontend.mel_filterbank", "frontend.window")
# The LM's products dtype int8 / a Q8_0 file's default keep compressed (the encoder's and projector's:
# model.INT8_WEIGHTS); an untied head too.
_LM_INT8 = re.compile(r"^lm\.(layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)|lm_head)\.weight$")


def tensor_names(enc_layers: int, prj_layers: int, dec_layers: int, cross_every: int, tied: bool
                 ) -> list[tuple[str, str]]:
    """(our name, the file's name) of every model tensor, in the converter's order (the front end's two
    tensors come first in a file and are not listed). A Q-Former layer without cross-attention
    (i % cross_every != 0) has none of its tensors."""
    out = [("encoder." + a, "enc." + b) for a, b in _ENC_TOP]
    for i in range(enc_layers):
        out += [(f"encoder.layers.{i}.{a}", f"enc.blocks.{i}.{b}") for a, b in _ENC_BLOCK]
    out += [("projector." + a, "proj." + b) for a, b in _PRJ_TOP]
    for i in range(prj_layers):
        out += [(f"projector.qformer.encoder.layer.{i}.{a}", f"proj.qformer.blocks.{i}.{b}") for a, b in _PRJ_BLOCK
                if i % cross_every == 0 or not a.startswith("crossattention.")]
    out += [("lm." + a, "dec." + b) for a, b in _DEC_TOP]
    if not tied:
        out.append(("lm.lm_head.weight", "dec.output.weight"))
    for i in range(dec_layers):
        out += [(f"lm.layers.{i}.{a}", f"dec.blocks.{i}.{b}") for a, b in _DEC_BLOCK]
    return out




# ------------------------------------------------------------------------------------------------
# Config


def config_from_meta(keys, where: str) -> dict:
    """The config.json (transformers' layout) the file's `stt.granite.*` keys were written from."""
    r = keys.require
    e, p, d = P + "encoder.", P + "projector.", P + "decoder."
    # the converter's gguf writer drops an empty array, so a model without joined layers has no such key
    cat = keys.get(e + "cat_hidden_layers", [])
    if not isinstance(cat, list):
        raise ModelError(f"{where}: {e}cat_hidden_layers is not a list")
    enc = {"model_type": "granite_speech_encoder", "num_layers": r(e + "n_layers"), "hidden_dim": r(e + "hidden"),
           "num_heads": r(e + "n_heads"), "dim_head": r(e + "head_dim"), "input_dim": r(e + "input_dim"),
           "output_dim": r(e + "output_dim"), "feedforward_mult": r(e + "feedforward_mult"),
           "conv_kernel_size": r(e + "conv_kernel_size"), "conv_expansion_factor": r(e + "conv_expansion"),
           "max_pos_emb": r(e + "max_pos_emb"), "context_size": r(e + "context_size")}
    if cat:
        enc["cat_hidden_layers"] = list(cat)
    prj = {"model_type": "blip_2_qformer", "num_hidden_layers": r(p + "n_layers"), "hidden_size": r(p + "hidden"),
           "intermediate_size": r(p + "intermediate"), "num_attention_heads": r(p + "n_heads"),
           "encoder_hidden_size": r(p + "encoder_hidden_size"),
           "cross_attention_frequency": r(p + "cross_attn_frequency"), "hidden_act": r(p + "hidden_act"),
           "layer_norm_eps": f32_value(r(p + "layer_norm_eps")), "max_position_embeddings": r(p + "max_pos_emb"),
           "position_embedding_type": r(p + "position_embedding_type")}
    hidden, heads, head_dim = r(d + "hidden_size"), r(d + "n_heads"), r(d + "head_dim")
    if not isinstance(heads, int) or heads <= 0 or head_dim * heads != hidden:
        # transformers' Granite has no head_dim setting: it is hidden_size / num_attention_heads
        raise ModelError(f"{where}: {d}head_dim {head_dim} x n_heads {heads} is not hidden_size {hidden}")
    tie = r(d + "tie_word_embeddings")
    txt = {"model_type": "granite", "num_hidden_layers": r(d + "n_layers"), "hidden_size": hidden,
           "intermediate_size": r(d + "intermediate_size"), "num_attention_heads": heads,
           "num_key_value_heads": r(d + "n_kv_heads"), "hidden_act": r(d + "hidden_act"),
           "rms_norm_eps": f32_value(r(d + "rms_norm_eps")),
           "rope_parameters": {"rope_type": "default", "rope_theta": f32_value(r(d + "rope_theta"))},
           "max_position_embeddings": r(d + "max_position_embeddings"), "tie_word_embeddings": tie,
           "vocab_size": r(d + "vocab_size"),
           "embedding_multiplier": f32_value(r(d + "embedding_multiplier")),
           "logits_scaling": f32_value(r(d + "logits_scaling")),
           "attention_multiplier": f32_value(r(d + "attention_multiplier")),
           "residual_multiplier": f32_value(r(d + "residual_multiplier"))}
    return {"model_type": "granite_speech_plus" if cat else "granite_speech", "encoder_config": enc,
            "projector_config": prj, "text_config": txt, "audio_token_index": r(P + "audio_token_id"),
            "downsample_rate": r(P + "downsample_rate"), "window_size": r(P + "window_size"),
            "tie_word_embeddings": tie, "has_lora_adapter": False}


def _frontend(keys, file, where: str) -> None:
    """The stored front end must be ours (frontend.py): settings exactly, filterbank and window within
    FRONTEND_TOLERANCE."""
    from .frontend import HOP, N_FFT, N_MELS, SAMPLE_RATE, WIN_LENGTH, FrontEnd

    f = "stt.frontend."
    for key, want in (("type", "mel"), ("sample_rate", SAMPLE_RATE), ("num_mels", N_MELS), ("n_fft", N_FFT),
                      ("win_length", WIN_LENGTH), ("hop_length", HOP), ("window", "hann_periodic"),
                      ("normalize", "per_utterance"), ("dither", 0.0), ("pre_emphasis", 0.0), ("f_min", 0.0),
                      ("f_max", SAMPLE_RATE / 2), ("pad_mode", "reflect"), ("center", True), ("mel_norm", "htk")):
        keys.expect(f + key, (want,))
    ours = FrontEnd()
    for name, want in (("frontend.mel_filterbank", ours.filters.T), ("frontend.window", ours.window)):
        if name not in file.tensors:
            raise ModelError(f"{where}: tensor {name} is missing")
        got = file.tensor(name)
        if tuple(got.shape) != tuple(want.shape):
            raise ModelError(f"{where}: tensor {name} is {tuple(got.shape)}, our front end's is {tuple(want.shape)}")
        diff = float((got - want).abs().max())
        if not diff <= FRONTEND_TOLERANCE:
            raise ModelError(f"{where}: tensor {name} differs from this package's front end by {diff:.3g} "
                             f"(more than {FRONTEND_TOLERANCE}): a different front end is not implemented")


# ------------------------------------------------------------------------------------------------
# Tokenizer


def tokenizer_json(tokens: list, types: list, merges: list, pre: str, where: str) -> dict:
    """The `tokenizers` JSON of the file's byte-level BPE: every token in the BPE vocabulary, control (type 3)
    tokens also added as special and user-defined (type 4) ones as not special; the pre-tokenizer `pre` names;
    ByteLevel decoder. A token that repeats an earlier one (the converter's filler for ids no piece has,
    `<|unused_{i}|>`, is an ordinary token) is left out of the vocabulary."""
    vocab: dict[str, int] = {}
    added = []
    for i, (tok, kind) in enumerate(zip(tokens, types)):
        if not isinstance(tok, str):
            raise ModelError(f"{where}: tokenizer.ggml.tokens[{i}] is not text")
        if kind not in (TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER):
            raise ModelError(f"{where}: tokenizer.ggml.token_type[{i}] = {kind!r} is not implemented for a gpt2 "
                             "tokenizer (1 normal, 3 control, 4 user-defined)")
        if tok in vocab:
            continue
        vocab[tok] = i
        if kind != TOKEN_NORMAL:
            added.append({"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": kind == TOKEN_CONTROL})
    pairs = []
    for m in merges:
        parts = m.split(" ") if isinstance(m, str) else []
        if len(parts) != 2:
            raise ModelError(f"{where}: tokenizer.ggml.merges entry {m!r} is not two pieces")
        pairs.append(parts)
    if pre == "gpt2":
        pre_tok = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    else:
        pre_tok = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": GRANITE_SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": pre_tok, "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": pairs},
    }


def _tokenizer(keys, where: str):
    """(LLMTokenizer, {bos, eos, padding, unknown} ids) of the file's tokenizer.* keys."""
    from ..llm.tokenizer import LLMTokenizer

    keys.expect("tokenizer.ggml.model", ("gpt2",))
    pre = keys.expect("tokenizer.ggml.pre", ("granite", "gpt2"))
    tokens = keys.require("tokenizer.ggml.tokens")
    types = keys.require("tokenizer.ggml.token_type")
    merges = keys.require("tokenizer.ggml.merges")
    if not isinstance(tokens, list) or not isinstance(types, list) or len(tokens) != len(types) or not tokens:
        raise ModelError(f"{where}: tokenizer.ggml.tokens and token_type are not lists of the same length")
    if not isinstance(merges, list):
        raise ModelError(f"{where}: tokenizer.ggml.merges is not a list")
    for k in ("add_bos_token", "add_eos_token"):
        keys.expect(f"tokenizer.ggml.{k}", (False,))  # the prompts add no BOS / EOS (prompt.py)
    ids = {}
    for k in ("bos", "eos", "padding", "unknown"):
        v = keys.get(f"tokenizer.ggml.{k}_token_id")
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(tokens)):
            raise ModelError(f"{where}: tokenizer.ggml.{k}_token_id {v!r} is not one of the {len(tokens)} tokens")
        ids[k] = v
    template = keys.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise ModelError(f"{where}: tokenizer.chat_template is not text")
    spec = tokenizer_json(tokens, types, merges, pre, where)
    # transformers' special set: the added tokens marked special and the named ones (tokenizer_config.json's
    # bos / eos / pad / unk, which the file keeps as ids)
    named = {v for v in ids.values() if v is not None}
    tok = LLMTokenizer.from_json(json.dumps(spec), where, special=named, clean_up=True, chat_template=template)
    return tok, ids


# ------------------------------------------------------------------------------------------------
# Loading


def _squeeze_to(t: torch.Tensor, shape: tuple, name: str, where: str) -> torch.Tensor:
    """transcribe-quantize drops leading size-1 dims (proj.query [1, 3, D] -> [3, D]): put them back."""
    if tuple(t.shape) == tuple(shape):
        return t
    if t.numel() == int(np.prod(shape)) and [d for d in t.shape if d != 1] == [d for d in shape if d != 1]:
        return t.reshape(shape)
    raise ModelError(f"{where}: tensor {name} is {tuple(t.shape)}, the config makes {tuple(shape)}")


def read_gguf(path: Path, dtype: torch.dtype = torch.float32, int8: Optional[str] = None):
    """(GraniteSpeechConfig, state under our names (`encoder.*`, `projector.*`, `lm.*`) in `dtype`,
    LLMTokenizer, extras) of a `granite_speech` GGUF file; extras: `token_ids` (bos / eos / padding /
    unknown), `identity` (general.* and stt.variant), `int8` (the `gguf.int8.Int8Rows` of the weights read
    compressed, or None), `config` (the rebuilt config.json).

    int8 "auto": "blocks" when the file stores any of the int8 layers' weights as Q8_0, else None; "blocks":
    those weights as Q8_0 blocks (Q8Linear) or, stored otherwise, float16 (HalfLinear); "all": every one as
    int8 rows (Int8Linear). Such weights are stand-ins of no memory in the state until `Int8Rows.adopt`."""
    from ..gguf import quants
    from ..gguf.file import GGUFFile, missing_layers
    from ..gguf.int8 import Int8Rows
    from .config import parse_config
    from .model import INT8_WEIGHTS, GraniteSpeechModel

    if int8 not in (None, "auto", "all", "blocks"):
        raise ValueError(f"int8 is None, 'auto', 'all' or 'blocks', not {int8!r}")
    where = str(path)
    with GGUFFile(path) as f:
        if f.arch != ARCH:
            raise ModelError(f"{where}: general.architecture is {f.arch!r}, not {ARCH!r}")
        keys = f.keys()
        keys.accept(["general.*", "stt.variant", "stt.capability.*", "stt.translation.*"])
        raw = config_from_meta(keys, where)
        for key, prefix in (("encoder.n_layers", "enc.blocks."), ("projector.n_layers", "proj.qformer.blocks."),
                            ("decoder.n_layers", "dec.blocks.")):
            problem = missing_layers(f, prefix, keys.require(P + key))
            if problem:
                raise ModelError(f"{where}: {P}{key} = {problem}")
        try:
            cfg = parse_config(raw)
        except ModelError as e:
            raise ModelError(f"{where}: {e}") from None
        tokenizer, ids = _tokenizer(keys, where)
        _frontend(keys, f, where)
        keys.finish()

        with torch.device("meta"):
            shapes = {k: tuple(v.shape) for k, v in GraniteSpeechModel(cfg).state_dict().items()}
        names = tensor_names(cfg.encoder.num_layers, cfg.projector.num_layers, cfg.lm.num_layers,
                             cfg.projector.cross_attention_frequency, cfg.lm.tie_word_embeddings)
        known = {g for _, g in names} | set(FRONTEND_TENSORS)
        unknown = [n for n in f.tensors if n not in known]
        if unknown:
            raise ModelError(f"{where}: tensor{'s' if len(unknown) > 1 else ''} this code does not implement: "
                             f"{', '.join(unknown[:6])}")

        def compressible(ours: str) -> bool:
            return bool(INT8_WEIGHTS.match(ours) or _LM_INT8.match(ours))

        if int8 == "auto":
            stored = {f.tensors[g].qtype for ours, g in names if g in f.tensors and compressible(ours)}
            int8 = "blocks" if quants.Q8_0 in stored else None
        if int8 is not None:
            dtype = torch.float32  # an int8 model's other weights
        rows = Int8Rows() if int8 is not None else None
        state: dict[str, torch.Tensor] = {}
        for ours, g in names:
            if g not in f.tensors:
                raise ModelError(f"{where}: tensor {g} is missing (our {ours})")
            if rows is not None and compressible(ours):
                state[ours] = rows.take(f, g, ours, shapes[ours], blocks=int8 == "blocks")
                continue
            t = _squeeze_to(f.tensor(g), shapes[ours], g, where)
            # the BatchNorm statistics stay float32: from_state folds them in float32
            state[ours] = t if t.dtype == dtype or "batch_norm" in ours else t.to(dtype)
        meta = {k: v for k, v in f.meta.items() if k.startswith(("general.", "stt.variant"))}
    return cfg, state, tokenizer, {"token_ids": ids, "identity": meta, "int8": rows, "config": raw}


def load_gguf(path: Path, name: str, device, dtype: Optional[torch.dtype] = None):
    """A `granite_speech` GGUF file -> a GraniteSpeechASR on `device` (dtype None: float32, except a Q8_0
    file's compressed layers, see Q8_0_DEFAULT; int8: Int8Linear from the file's bytes, the rest float32)."""
    from .model import GraniteSpeechModel
    from .recognizer import GraniteSpeechASR

    path = Path(path)
    if dtype == torch.int8:
        int8 = "all"
    else:
        int8 = "auto" if dtype is None and Q8_0_DEFAULT else None
    work = torch.float32 if dtype in (None, torch.int8) else dtype
    cfg, state, tokenizer, extra = read_gguf(path, work, int8)
    lm_state = {k[3:]: v for k, v in state.items() if k.startswith("lm.")}
    rest = {k: v for k, v in state.items() if not k.startswith("lm.")}
    del state
    model = GraniteSpeechModel.from_state(cfg, rest, lm_state, str(path), work)
    if extra["int8"] is not None:
        extra["int8"].adopt(model)
    eos = extra["token_ids"]["eos"]
    if eos is None:
        raise ModelError(f"{path}: tokenizer.ggml.eos_token_id is missing: no stop token")
    model.to(device)
    return GraniteSpeechASR(model, tokenizer, name, str(device), [eos], {})

"""Writing a NeMo Parakeet checkpoint as a GGUF file in either upstream schema.

* `parakeet.cpp` (mudler/parakeet.cpp, `scripts/convert_parakeet_to_gguf.py` and `parakeet-cli
  quantize`): NeMo tensor names verbatim in state-dict order, `parakeet.*` keys, only an allowlist of
  2-D weights quantized.
* `transcribe.cpp` (handy-computer/transcribe.cpp, `scripts/convert-parakeet.py` and
  `transcribe-quantize`): renamed tensors (`gguf_names`), summed LSTM biases, TDT only for hybrids,
  `general.*` identity block, `stt.*` keys, a llama.cpp-style tokenizer with `<blank>` appended.

Both are described key by key in shared/models/gguf/README.md; the files there (made by the upstream
tools from our tiny models) are what `tests/test_gguf_export.py` compares against, byte for byte.
Nothing here imports NeMo: the config is read as NeMo resolves it (our `ParakeetModel` checks and
resolves it, built on the meta device so no weights are allocated).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ..errors import ModelError
from ..gguf import quants
from ..gguf.writer import KV, parse_value, variant_of, write  # noqa: F401 (variant_of: this module's API)
from ..gguf.writer import size_label as _size_label
from ..nemo.checkpoint import NemoCheckpoint, check_bpe_tokenizer, read_nemo
from .gguf_names import to_transcribe_cpp

SCHEMAS = ("parakeet.cpp", "transcribe.cpp")
TYPES = ("f32", "f16", "q8_0", "q4_0")

class ExportError(ModelError):
    """A model this schema cannot express, or a bad option."""


# ------------------------------------------------------------------------------------------------
# The model as NeMo resolves it


@dataclass
class _Info:
    cfg: dict
    model: Any  # ParakeetModel on the meta device
    pieces: list[str]
    sp: Any  # sentencepiece processor
    sd: dict
    source: str


def _resolve(ck: NemoCheckpoint) -> _Info:
    from .config import PROMPT_CLASSES, _class
    from .model import ParakeetModel

    cfg = ck.config
    defaults = cfg.get("model_defaults") or {}
    if _class(cfg.get("target")) in PROMPT_CLASSES or defaults.get("initialize_prompt_feature"):
        raise ExportError(f"{ck.source}: a prompt-conditioned model (multilingual prompt features) cannot be "
                          "written: neither GGUF schema here stores its prompt settings")
    try:
        with torch.device("meta"):
            model = ParakeetModel(cfg)
    except (ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{ck.source}: {e}") from None
    enc = model.encoder
    if enc.self_attention_model != "rel_pos":
        raise ExportError(f"{ck.source}: encoder.self_attention_model = {enc.self_attention_model!r} has no key in "
                          "either GGUF schema (only rel_pos)")
    sub = (cfg.get("encoder") or {}).get("subsampling", "striding")
    if sub != "dw_striding":
        raise ExportError(f"{ck.source}: encoder.subsampling = {sub!r} has no key in either GGUF schema "
                          "(only dw_striding)")
    if ck.tokenizer is None:
        raise ExportError(f"{ck.source}: no SentencePiece tokenizer in the checkpoint")
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(bytes(ck.tokenizer))
    except Exception as e:  # C++ errors come as RuntimeError/OSError
        raise ExportError(f"{ck.source}: unreadable SentencePiece tokenizer ({e})") from None
    pieces = [sp.IdToPiece(i) for i in range(sp.GetPieceSize())]
    return _Info(cfg, model, pieces, sp, ck.state_dict, str(ck.source))


def _vocab_size(info: _Info) -> int:
    """Tokens without the blank, as the output layers have them (checked against the tokenizer)."""
    sd = info.sd
    n = None
    for key in ("decoder.prediction.embed.weight", "decoder.decoder_layers.0.weight"):
        if key in sd:
            n = int(sd[key].shape[0]) - 1
            break
    if n is None:
        raise ExportError(f"{info.source}: neither a prediction network nor a CTC head in the checkpoint")
    if n != len(info.pieces):
        raise ExportError(f"{info.source}: the model has {n} tokens but its tokenizer {len(info.pieces)}")
    return n


def _pre(cfg: dict) -> dict:
    return dict(cfg.get("preprocessor") or {})


def _log_zero_guard(fe) -> float:
    v = fe.log_zero_guard_value
    if v == "tiny":
        return float(torch.finfo(torch.float32).tiny)
    if v == "eps":
        return float(torch.finfo(torch.float32).eps)
    return float(v)


def _streaming(enc) -> bool:
    return enc.att_context_style != "regular"


def _schedule(model):
    from .cache_aware import schedule

    try:
        return schedule(model.encoder)
    except ValueError as e:
        raise ExportError(f"streaming settings: {e}") from None


def _arch(model) -> str:
    kind = model.transducer  # "tdt" / "rnnt" / None
    if kind and model.ctc_decoder is not None:
        return f"hybrid_{kind}_ctc"
    return kind or "ctc"


# ------------------------------------------------------------------------------------------------
# parakeet.cpp

# Tensors its quantizers touch (both the Python converter and `parakeet-cli quantize`).
_PCPP_ALLOW = re.compile(
    r"^(encoder\.layers\.\d+\.(feed_forward[12]\.linear[12]|self_attn\.linear_(q|k|v|out|pos))\.weight"
    r"|encoder\.pre_encode\.out\.weight|joint\.enc\.weight|joint\.pred\.weight)$")
# Types only the C++ quantizer writes (from the f32 file); the Python converter writes f32/f16/q8_0.
_PCPP_CXX = (quants.Q4_0,)
_PCPP_KEEP_PRE = ("preprocessor.featurizer.fb", "preprocessor.featurizer.window")


def parakeet_cpp_kv(info: _Info, name: str) -> KV:
    m, cfg = info.model, info.cfg
    enc, fe = m.encoder, m.preprocessor
    ecfg = cfg.get("encoder") or {}
    layer = enc.layers[0]
    kv = KV()
    kv.add("general.architecture", "str", "parakeet")
    kv.add("general.name", "str", name)
    p = "parakeet."
    kv.add(p + "arch", "str", _arch(m))
    kv.add(p + "encoder.feat_in", "u32", fe.n_mels)
    kv.add(p + "encoder.d_model", "u32", enc.d_model)
    kv.add(p + "encoder.n_layers", "u32", len(enc.layers))
    kv.add(p + "encoder.n_heads", "u32", layer.self_attn.h)
    kv.add(p + "encoder.ff_dim", "u32", layer.feed_forward1.linear1.out_features)
    kv.add(p + "encoder.conv_kernel", "u32", layer.conv.depthwise_conv.kernel_size[0])
    kv.add(p + "encoder.conv_norm_type", "str", str(ecfg.get("conv_norm_type", "batch_norm")))
    kv.add(p + "encoder.subsampling_factor", "u32", enc.subsampling_factor)
    kv.add(p + "encoder.subsampling_conv_channels", "u32", enc.pre_encode.conv[0].out_channels)
    kv.add(p + "encoder.xscaling", "bool", enc.xscale is not None)
    kv.add(p + "encoder.pos_emb_max_len", "u32", int(ecfg.get("pos_emb_max_len", 5000)))
    kv.add(p + "encoder.use_bias", "bool", bool(ecfg.get("use_bias", True)))
    if _streaming(enc):
        sched = _schedule(m)
        if len(enc.att_context_sizes) > 1:
            kv.add(p + "encoder.att_context_presets", ("arr", "i32"), [v for c in enc.att_context_sizes for v in c])
        kv.add(p + "encoder.att_context_left", "i32", enc.att_context_size[0])
        kv.add(p + "encoder.att_context_right", "i32", enc.att_context_size[1])
        kv.add(p + "encoder.att_context_style", "str", enc.att_context_style)
        kv.add(p + "encoder.causal_downsampling", "bool", enc.causal_downsampling)
        kv.add(p + "encoder.conv_causal", "bool", layer.conv.context[1] == 0)
        d = sched.to_dict()
        kv.add(p + "streaming.chunk_size", ("arr", "i32"), d["chunk_size"])
        kv.add(p + "streaming.shift_size", ("arr", "i32"), d["shift_size"])
        kv.add(p + "streaming.cache_drop_size", "i32", d["cache_drop_size"])
        kv.add(p + "streaming.last_channel_cache_size", "i32", d["last_channel_cache_size"])
        kv.add(p + "streaming.valid_out_len", "i32", d["valid_out_len"])
        kv.add(p + "streaming.pre_encode_cache_size", ("arr", "i32"), d["pre_encode_cache_size"])
        kv.add(p + "streaming.drop_extra_pre_encoded", "i32", d["drop_extra_pre_encoded"])
    kv.add(p + "preprocessor.sample_rate", "u32", fe.sample_rate)
    kv.add(p + "preprocessor.n_mels", "u32", fe.n_mels)
    kv.add(p + "preprocessor.n_fft", "u32", fe.n_fft)
    kv.add(p + "preprocessor.win_length", "u32", fe.win_length)
    kv.add(p + "preprocessor.hop_length", "u32", fe.hop_length)
    kv.add(p + "preprocessor.preemph", "f32", float(fe.preemph or 0.0))
    kv.add(p + "preprocessor.mag_power", "f32", fe.mag_power)
    kv.add(p + "preprocessor.normalize", "str", str(_pre(cfg).get("normalize", "per_feature")))
    kv.add(p + "preprocessor.log_zero_guard", "f32", _log_zero_guard(fe))
    vocab = _vocab_size(info)
    kv.add(p + "vocab_size", "u32", vocab)
    kv.add(p + "blank_id", "u32", vocab)
    kv.add(p + "tokenizer.pieces", ("arr", "str"), list(info.pieces))
    if m.transducer:
        pn = (cfg.get("decoder") or {}).get("prednet") or {}
        jn = (cfg.get("joint") or {}).get("jointnet") or {}
        kv.add(p + "decoder.pred_hidden", "u32", int(pn["pred_hidden"]))
        kv.add(p + "decoder.pred_rnn_layers", "u32", int(pn.get("pred_rnn_layers", 1)))
        kv.add(p + "joint.joint_hidden", "u32", int(jn["joint_hidden"]))
        kv.add(p + "joint.activation", "str", str(jn.get("activation", "relu")).lower())
        kv.add(p + "decoding.max_symbols", "u32", int(m.max_symbols))
        if m.transducer == "tdt":
            kv.add(p + "tdt.durations", ("arr", "i32"), [int(d) for d in m.durations])
    return kv


def parakeet_cpp_tensors(info: _Info, sd: dict, qtype: int) -> list[tuple[str, torch.Tensor, int]]:
    out = []
    for name, t in sd.items():
        if name.endswith("num_batches_tracked"):
            continue
        if name.startswith("preprocessor.") and name not in _PCPP_KEEP_PRE:
            continue
        t = t.detach().to(torch.float32)
        if qtype in _PCPP_CXX:  # parakeet-cli quantize drops trailing ne of 1 (fb: [1, n_mels, bins] -> 2-D)
            while t.dim() > 1 and t.shape[0] == 1:
                t = t[0]
        q = quants.F32
        if qtype != quants.F32 and _PCPP_ALLOW.match(name) and t.dim() == 2 and min(t.shape) >= 32 \
                and t.shape[-1] % quants.block_size(qtype)[0] == 0:
            q = qtype
        out.append((name, t, q))
    return out


# ------------------------------------------------------------------------------------------------
# transcribe.cpp

# transcribe-quantize's file_type per preset (llama.cpp's LLAMA_FTYPE numbers).
_TCPP_FILE_TYPE = {quants.F32: 0, quants.F16: 1, quants.Q8_0: 7, quants.Q4_0: 2}

# The published variant profile fields the converter takes from a table; defaults derived here.
_LICENSE = ("cc-by-4.0", "Creative Commons Attribution 4.0", "https://creativecommons.org/licenses/by/4.0/")

# Block layout of one encoder layer: tensors always present, in the converter's order, then the
# optional ones (BatchNorm running stats, biases).
_BLOCK_MAIN = (
    "norm_ff1.weight", "norm_ff1.bias", "ff1.linear1.weight", "ff1.linear2.weight",
    "norm_attn.weight", "norm_attn.bias",
    "attn.linear_q.weight", "attn.linear_k.weight", "attn.linear_v.weight", "attn.linear_out.weight",
    "attn.linear_pos.weight", "attn.pos_bias_u", "attn.pos_bias_v",
    "norm_conv.weight", "norm_conv.bias",
    "conv.pointwise1.weight", "conv.depthwise.weight", "conv.pointwise2.weight",
    "conv.bn.weight", "conv.bn.bias",
    "norm_ff2.weight", "norm_ff2.bias", "ff2.linear1.weight", "ff2.linear2.weight",
    "norm_out.weight", "norm_out.bias",
)
_BLOCK_OPTIONAL = (
    "conv.bn.running_mean", "conv.bn.running_var",
    "ff1.linear1.bias", "ff1.linear2.bias",
    "attn.linear_q.bias", "attn.linear_k.bias", "attn.linear_v.bias", "attn.linear_out.bias",
    "conv.pointwise1.bias", "conv.depthwise.bias", "conv.pointwise2.bias",
    "ff2.linear1.bias", "ff2.linear2.bias",
)


def _token_type(sp, i: int, piece: str) -> int:
    if sp.IsUnknown(i):
        return 2
    if sp.IsControl(i):
        return 3
    if sp.IsUnused(i):
        return 5
    if sp.IsByte(i):
        return 6
    if re.fullmatch(r"<[a-z]{2,3}-[A-Z]{2}>", piece):
        return 3
    return 1


def transcribe_cpp_kv(info: _Info, variant: str, n_params: int) -> KV:
    m, cfg = info.model, info.cfg
    enc, fe = m.encoder, m.preprocessor
    ecfg = cfg.get("encoder") or {}
    pre = _pre(cfg)
    layer = enc.layers[0]
    head = m.transducer or "ctc"  # hybrids: TDT only
    norm = pre.get("normalize", "per_feature")
    if norm in ("NA", None, False, "none"):
        norm = "none"
    elif norm != "per_feature":
        raise ExportError(f"preprocessor.normalize = {norm!r} has no transcribe.cpp value (per_feature, none)")
    sp = info.sp
    vocab = _vocab_size(info)
    kv = KV()
    kv.add("general.architecture", "str", "parakeet")
    kv.add("general.name", "str", variant)
    kv.add("general.basename", "str", f"parakeet-{head}")
    kv.add("general.version", "str", "v1")
    kv.add("general.size_label", "str", _size_label(n_params))
    kv.add("general.author", "str", "NVIDIA")
    kv.add("general.organization", "str", "nvidia")
    kv.add("general.license", "str", _LICENSE[0])
    kv.add("general.license.name", "str", _LICENSE[1])
    kv.add("general.license.link", "str", _LICENSE[2])
    kv.add("general.file_type", "u32", 0)
    kv.add("general.languages", ("arr", "str"), ["en"])
    kv.add("stt.variant", "str", variant)
    kv.add("stt.capability.streaming", "bool", _streaming(enc))
    s = "stt.parakeet."
    kv.add(s + "head_kind", "str", head)
    kv.add("tokenizer.ggml.model", "str", "bpe")
    for key, idx in (("unknown", sp.unk_id()), ("bos", sp.bos_id()), ("eos", sp.eos_id())):
        if idx >= 0:
            kv.add(f"tokenizer.ggml.{key}_token_id", "u32", idx)
    kv.add("tokenizer.ggml.blank_token_id", "u32", vocab)
    e = s + "encoder."
    kv.add(e + "n_layers", "u32", len(enc.layers))
    kv.add(e + "d_model", "u32", enc.d_model)
    kv.add(e + "n_heads", "u32", layer.self_attn.h)
    kv.add(e + "d_ff", "u32", layer.feed_forward1.linear1.out_features)
    kv.add(e + "conv_kernel", "u32", layer.conv.depthwise_conv.kernel_size[0])
    kv.add(e + "subsampling_factor", "u32", enc.subsampling_factor)
    kv.add(e + "subsampling_channels", "u32", enc.pre_encode.conv[0].out_channels)
    kv.add(e + "pos_emb_max_len", "u32", int(ecfg.get("pos_emb_max_len", 5000)))
    kv.add(e + "use_bias", "bool", bool(ecfg.get("use_bias", True)))
    kv.add(e + "xscaling", "bool", enc.xscale is not None)
    kv.add(e + "att_context_left", "i32", enc.att_context_size[0])
    kv.add(e + "att_context_right", "i32", enc.att_context_size[1])
    kv.add(e + "att_context_style", "str", enc.att_context_style)
    kv.add(e + "conv_context_left", "i32", layer.conv.context[0])
    kv.add(e + "conv_context_right", "i32", layer.conv.context[1])
    kv.add(e + "conv_norm_type", "str", str(ecfg.get("conv_norm_type", "batch_norm")))
    if _streaming(enc):
        sched = _schedule(m)
        choices = sorted(enc.att_context_sizes, key=lambda c: -c[1])
        kv.add(e + "att_context_size_choices", ("arr", "i32"), [v for c in choices for v in c])
        kv.add(e + "streaming.pre_encode_cache_size", "i32", sched.pre_encode_cache_size[1])
        kv.add(e + "streaming.drop_extra_pre_encoded", "i32", sched.drop_extra_pre_encoded)
        kv.add(e + "streaming.sampling_frames_first", "i32", sched.sampling_frames[0])
    if m.transducer:
        pn = (cfg.get("decoder") or {}).get("prednet") or {}
        jn = (cfg.get("joint") or {}).get("jointnet") or {}
        jcfg = cfg.get("joint") or {}
        kv.add(s + "predictor.hidden", "u32", int(pn["pred_hidden"]))
        kv.add(s + "predictor.n_layers", "u32", int(pn.get("pred_rnn_layers", 1)))
        kv.add(s + "predictor.vocab", "u32", vocab + 1)
        kv.add(s + "joint.hidden", "u32", int(jn["joint_hidden"]))
        kv.add(s + "joint.num_extra_outputs", "u32", int(jcfg.get("num_extra_outputs") or 0))
        kv.add(s + "joint.activation", "str", str(jn.get("activation", "relu")).lower())
        if m.transducer == "tdt":
            kv.add(s + "tdt.durations", ("arr", "i32"), [int(d) for d in m.durations])
            kv.add(s + "tdt.max_symbols", "u32", int(m.max_symbols))
    f = "stt.frontend."
    kv.add(f + "type", "str", "mel")
    kv.add(f + "num_mels", "u32", fe.n_mels)
    kv.add(f + "sample_rate", "u32", fe.sample_rate)
    kv.add(f + "n_fft", "u32", fe.n_fft)
    kv.add(f + "win_length", "u32", fe.win_length)
    kv.add(f + "hop_length", "u32", fe.hop_length)
    kv.add(f + "window", "str", str(pre.get("window", "hann")))
    kv.add(f + "normalize", "str", norm)
    kv.add(f + "dither", "f32", float(pre.get("dither", 1e-5)))
    kv.add(f + "pre_emphasis", "f32", 0.97)
    kv.add(f + "f_min", "f32", float(pre.get("lowfreq") or 0.0))
    kv.add(f + "f_max", "f32", float(pre.get("highfreq") or fe.sample_rate / 2))
    tokens = list(info.pieces) + ["<blank>"]
    scores = [float(np.float32(sp.GetScore(i))) for i in range(vocab)] + [0.0]
    types = [_token_type(sp, i, info.pieces[i]) for i in range(vocab)] + [3]
    kv.add("tokenizer.ggml.tokens", ("arr", "str"), tokens)
    kv.add("tokenizer.ggml.scores", ("arr", "f32"), scores)
    kv.add("tokenizer.ggml.token_type", ("arr", "i32"), types)
    return kv


def _tcpp_bucket(name: str, ne0: int, qtype: int) -> int:
    """transcribe-quantize's type for one tensor under a preset."""
    if qtype == quants.F32:
        return quants.F32
    if name.endswith(".bias") or ".norm_" in name or ".conv.bn." in name or ".pos_bias_" in name \
            or name.startswith(("frontend.", "enc.pre_encode.conv.")) or ".conv.depthwise." in name:
        return quants.F32
    if ".conv.pointwise" in name:
        return quants.F16
    if ne0 % quants.block_size(qtype)[0]:
        return quants.F16
    return qtype


def transcribe_cpp_tensors(info: _Info, sd: dict, qtype: int) -> list[tuple[str, torch.Tensor, int]]:
    renamed: dict[str, torch.Tensor] = {}
    lstm_bias: dict[int, list] = {}
    from .gguf_names import NEMO_LSTM_BIAS

    for name, t in sd.items():
        t = t.detach().to(torch.float32)
        mb = NEMO_LSTM_BIAS.match(name)
        if mb:
            lstm_bias.setdefault(int(mb.group(2)), []).append(t)
            continue
        new = to_transcribe_cpp(name)
        if new is not None:
            renamed[new] = t
    for n, parts in lstm_bias.items():
        if len(parts) != 2:
            raise ExportError(f"LSTM layer {n}: expected bias_ih and bias_hh")
        renamed[f"pred.lstm.{n}.bias"] = parts[0] + parts[1]
    order: list[str] = []
    order += [k for k in renamed if k.startswith("enc.pre_encode.conv.")]
    order += [k for k in renamed if k.startswith("enc.pre_encode.") and k not in order]
    n_layers = len(info.model.encoder.layers)
    for i in range(n_layers):
        b = f"enc.blocks.{i}."
        for s in _BLOCK_MAIN:
            if b + s not in renamed:
                raise ExportError(f"tensor {b + s} (transcribe.cpp name) is missing from the checkpoint")
            order.append(b + s)
        order += [b + s for s in _BLOCK_OPTIONAL if b + s in renamed]
    if "pred.embed.weight" in renamed:
        order.append("pred.embed.weight")
        for n in sorted(lstm_bias):
            order += [f"pred.lstm.{n}.Wx", f"pred.lstm.{n}.Wh", f"pred.lstm.{n}.bias"]
        for part in ("enc", "pred", "out"):
            order += [k for k in (f"joint.{part}.weight", f"joint.{part}.bias") if k in renamed]
    if info.model.transducer is None:
        order += [k for k in ("head.ctc.weight", "head.ctc.bias") if k in renamed]
    left = [k for k in renamed if k not in order and not k.startswith("head.ctc.")]
    if left:
        raise ExportError(f"tensors transcribe.cpp has no place for: {', '.join(left[:5])}")
    out = []
    for name in order:
        t = renamed[name]
        if qtype != quants.F32:
            while t.dim() > 1 and t.shape[0] == 1:  # transcribe-quantize drops trailing ne of 1
                t = t[0]
        out.append((name, t, _tcpp_bucket(name, t.shape[-1], qtype)))
    return out


# ------------------------------------------------------------------------------------------------
# Overrides and writing


def apply_meta(kv: KV, meta: Optional[dict]) -> None:
    """Replace values of existing keys (`meta` maps key -> value; a str is parsed as the key's type).
    `stt.capability.lang_detect` (written by transcribe.cpp only when true) may be added."""
    for key, value in (meta or {}).items():
        keys = kv.keys()
        if key not in keys:
            if key == "stt.capability.lang_detect" and "stt.capability.streaming" in keys:
                kv.entries.insert(kv.index("stt.capability.streaming") + 1, [key, "bool", False])
            else:
                raise ExportError(f"--meta {key}: this schema writes no such key for this model (only the keys "
                                  "it writes can be replaced, and stt.capability.lang_detect added)")
        entry = kv.entries[kv.index(key)]
        if key == "general.architecture":
            raise ExportError("--meta general.architecture cannot be changed")
        if isinstance(value, str):
            try:
                value = parse_value(key, entry[1], value)
            except ValueError as e:
                raise ExportError(f"--meta {key}={value}: {e}") from None
        entry[2] = value
    if kv.get("stt.capability.lang_detect") is False:
        kv.entries.pop(kv.index("stt.capability.lang_detect"))


def _qtype(type_name: str) -> int:
    if str(type_name).lower() not in TYPES:
        raise ExportError(f"unknown --type {type_name!r} (choose from {', '.join(TYPES)})")
    return quants.type_id(type_name)


def export(model: str | os.PathLike | NemoCheckpoint, out: str | os.PathLike, schema: str = "parakeet.cpp",
           qtype: str = "f32", meta: Optional[dict] = None, name: Optional[str] = None,
           variant: Optional[str] = None) -> Path:
    """Write `model` (a .nemo path, NeMo directory or a read checkpoint) to the GGUF file `out`
    (written in place: `transcribe convert` writes to a temporary name and renames). `name` is
    parakeet.cpp's general.name (default: the model path as given); `variant` transcribe.cpp's
    stt.variant and default general.name (default: `out`'s stem without its type suffix); `meta`
    overrides KV values (`apply_meta`)."""
    if schema not in SCHEMAS:
        raise ExportError(f"unknown schema {schema!r} (choose from {', '.join(SCHEMAS)})")
    q = _qtype(qtype)
    ck = model if isinstance(model, NemoCheckpoint) else read_nemo(model)
    check_bpe_tokenizer(ck.config, ck.source)
    info = _resolve(ck)
    sd = ck.state_dict
    if schema == "parakeet.cpp":
        kv = parakeet_cpp_kv(info, str(name if name is not None else (model if not isinstance(model, NemoCheckpoint)
                                                                      else ck.source)))
        tensors = parakeet_cpp_tensors(info, sd, q)
    else:
        tensors = transcribe_cpp_tensors(info, sd, q)
        n_params = sum(t.numel() for _, t, _ in tensors)
        kv = transcribe_cpp_kv(info, variant or variant_of(out), n_params)
        if q != quants.F32:  # transcribe-quantize rewrites the file type: it moves before the tokenizer arrays
            entry = kv.entries.pop(kv.index("general.file_type"))
            entry[2] = _TCPP_FILE_TYPE[q]
            kv.entries.insert(kv.index("tokenizer.ggml.tokens"), entry)
    apply_meta(kv, meta)
    out = Path(out)
    write(out, kv, tensors)
    return out


def convert_parakeet(model, out, schema: str = "parakeet.cpp", qtype: str = "f32", meta: Optional[dict] = None,
                     name: Optional[str] = None, variant: Optional[str] = None) -> Path:
    """Alias of `export` (the API name of `transcribe convert` for NeMo models)."""
    return export(model, out, schema=schema, qtype=qtype, meta=meta, name=name, variant=variant)

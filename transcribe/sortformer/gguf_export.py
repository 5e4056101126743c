"""Writing a NeMo Sortformer checkpoint as a transcribe.cpp `sortformer` GGUF file (`transcribe convert`), in the
schema its converter `convert-sortformer.py` writes (F32) and its quantizer `transcribe-quantize` rewrites (F16,
Q8_0; the schema, key by key: tests/models/gguf/sortformer/README.md): the same keys in the same order, the
tensors renamed (`gguf.py`'s tables) in the converter's order, each in the type the quantizer's policy gives it.
`tests/test_sortformer_gguf.py` compares the result with the upstream tools' files byte for byte.

Identity: the converter writes the published model's identity whatever it converts (name "Streaming Sortformer
Diarizer 4spk v2.1", size "117M"); this writes the variant (the output's name without its type suffix, as
`stt.variant`) as `general.name` and the size of the tensors written; `--meta` replaces any value.

Refused, so that a file never runs as another model: a setting transcribe.cpp's runtime does not implement
and the schema cannot carry (an encoder without xscaling, with limited attention context, causal or other
subsampling, layer-norm convolution modules, no biases; a pre-LN Transformer, which the runtime refuses to
load, or another activation than ReLU, which it never applies; front-end settings other than the runtime's; a
speaker cache scored with other constants than NeMo's defaults). Not refused: the streaming operating point's
`chunk_left_context` / `chunk_right_context`, which the schema has no key for and transcribe.cpp chooses at run
time (a file loads with its runtime's values, 1 and 1; see `gguf.py`)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import torch

from ..errors import ModelError
from ..gguf import quants
from ..gguf.writer import KV, parse_value, size_label, variant_of, write
from ..nemo.checkpoint import read_nemo
from ..nemo.config import encoder_config, frontend_config
from .gguf import ARCH, RUNTIME_STREAMING, expected_shapes, tensor_table

TYPES = ("f32", "f16", "q8_0")
_FILE_TYPE = {quants.F32: 0, quants.F16: 1, quants.Q8_0: 7}
_NORMALIZE = {"per_feature": "per_feature", "all_features": "global", "NA": "none", "none": "none", None: "none"}
_IDENTITY = {
    "version": "v2.1", "author": "NVIDIA", "organization": "nvidia", "license": "other",
    "license.name": "nvidia-open-model-license",
    "license.link": "https://www.nvidia.com/en-us/agreements/enterprise-software/nvidia-open-model-license/",
    "description": "End-to-end streaming speaker diarizer (encoder-diarizer): NEST/FastConformer + Transformer, "
                   "4 sigmoid speaker-activity outputs per 80ms frame.",
}


class ExportError(ModelError):
    """A model this schema cannot express, or a bad option."""


def _schema(cfg: dict, source) -> dict:
    """The values the file stores, from the `.nemo`'s config; ExportError for what it cannot express."""
    def no(what: str) -> ExportError:
        return ExportError(f"{source}: {what} cannot be written: transcribe.cpp's Sortformer schema has no key for "
                           "it and its runtime computes otherwise (the file would run as another model)")

    try:
        fe = frontend_config(cfg)
        enc = encoder_config(cfg, fe.features)
    except (ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{source}: model config not supported ({e})") from None
    pre = cfg.get("preprocessor") or {}
    sr = int(fe.sample_rate)
    win = fe.n_window_size or int(round(float(fe.window_size) * sr))
    hop = fe.n_window_stride or int(round(float(fe.window_stride) * sr))
    if fe.preemph is None:
        raise no("preprocessor.preemph = null (no pre-emphasis; the converter writes 0.97)")
    for key, value, wanted in (("lowfreq", fe.lowfreq, 0), ("log", fe.log, True), ("mag_power", fe.mag_power, 2.0),
                               ("log_zero_guard_type", fe.log_zero_guard_type, "add"),
                               ("log_zero_guard_value", fe.log_zero_guard_value, 2 ** -24),
                               ("exact_pad", fe.exact_pad, False)):
        if value != wanted:
            raise no(f"preprocessor.{key} = {value!r}")
    if fe.highfreq not in (None, sr / 2):
        raise no(f"preprocessor.highfreq = {fe.highfreq!r}")
    if enc.subsampling != "dw_striding" or enc.subsampling_factor != 8 or enc.causal_downsampling:
        raise no(f"encoder subsampling {enc.subsampling} x{enc.subsampling_factor}"
                 f"{' (causal)' if enc.causal_downsampling else ''} (only dw_striding x8)")
    if enc.self_attention_model != "rel_pos" or enc.att_context_sizes != [[-1, -1]]:
        raise no(f"encoder attention {enc.self_attention_model} with context {enc.att_context_size} "
                 "(only rel_pos over the whole input)")
    half = (enc.conv_kernel_size - 1) // 2
    if enc.conv_context is not None and list(enc.conv_context) != [half, half]:
        raise no(f"encoder.conv_context_size = {enc.conv_context_size!r}")
    for key, value, wanted in (("conv_norm_type", enc.conv_norm_type, "batch_norm"), ("xscaling", enc.xscaling, True),
                               ("use_bias", enc.use_bias, True)):
        if value != wanted:
            raise no(f"encoder.{key} = {value!r}")
    tr = dict(cfg.get("transformer_encoder") or {})
    if tr.get("pre_ln", False):
        raise no("transformer_encoder.pre_ln = true (the runtime refuses pre-LN files)")
    if tr.get("hidden_act", "relu") != "relu":
        raise no(f"transformer_encoder.hidden_act = {tr.get('hidden_act')!r} (the runtime applies ReLU)")
    if tr.get("mask_future", False):
        raise no("transformer_encoder.mask_future = true")
    mods = dict(cfg.get("sortformer_modules") or {})
    for key, value in RUNTIME_STREAMING.items():
        if key not in ("chunk_left_context", "chunk_right_context") and mods.get(key, value) != value:
            raise no(f"sortformer_modules.{key} = {mods[key]!r} (the runtime's is {value})")
    n_spk = int(cfg.get("max_num_of_spks", 4))
    try:
        s = {
            "sample_rate": sr, "num_mels": int(fe.features), "n_fft": int(fe.n_fft or 2 ** (win - 1).bit_length()),
            "hop_length": hop, "win_length": win, "window": str(fe.window),
            "normalize": _NORMALIZE[fe.normalize if fe.normalize is not False else None],
            "pre_emphasis": float(fe.preemph), "dither": float(pre.get("dither", 0.0)),
            "max_speakers": n_spk, "frame_hop": hop * enc.subsampling_factor,
            "enc": {"n_layers": enc.n_layers, "d_model": enc.d_model, "n_heads": enc.n_heads,
                    "d_ff": enc.d_model * enc.ff_expansion_factor, "conv_kernel": enc.conv_kernel_size,
                    "subsampling_factor": enc.subsampling_factor, "subsampling_channels": enc.conv_channels,
                    "feat_in": enc.feat_in, "pos_emb_max_len": enc.pos_emb_max_len},
            "tf": {"n_layers": int(tr["num_layers"]), "d_model": int(tr["hidden_size"]),
                   "n_heads": int(tr.get("num_attention_heads", 1)), "d_ff": int(tr["inner_size"])},
            "stream": {k: int(mods[k]) for k in ("chunk_len", "spkcache_len", "fifo_len", "spkcache_update_period")},
        }
    except (KeyError, TypeError, ValueError) as e:
        raise ExportError(f"{source}: model config not supported (a Sortformer setting is missing or not a "
                          f"number: {e})") from None
    if int(mods.get("num_spks", n_spk)) != n_spk:
        raise ExportError(f"{source}: max_num_of_spks = {n_spk} differs from sortformer_modules.num_spks")
    return s


def _kv(s: dict, variant: str, n_params: int) -> KV:
    kv = KV()
    kv.add("general.architecture", "str", ARCH)
    kv.add("general.name", "str", variant)
    kv.add("general.basename", "str", "sortformer")
    kv.add("general.version", "str", _IDENTITY["version"])
    kv.add("general.size_label", "str", size_label(n_params))
    for key in ("author", "organization", "license", "license.name", "license.link", "description"):
        kv.add(f"general.{key}", "str", _IDENTITY[key])
    kv.add("general.file_type", "u32", 0)
    kv.add("general.languages", ("arr", "str"), ["en"])
    kv.add("stt.variant", "str", variant)
    f = "stt.frontend."
    for key in ("sample_rate", "num_mels", "n_fft", "hop_length", "win_length"):
        kv.add(f + key, "u32", s[key])
    kv.add(f + "window", "str", s["window"])
    kv.add(f + "normalize", "str", s["normalize"])
    kv.add(f + "pre_emphasis", "f32", s["pre_emphasis"])
    kv.add(f + "dither", "f32", s["dither"])
    for key, value in (("streaming", True), ("speaker_diarization", True), ("lang_detect", False),
                       ("translate", False), ("timestamps", False)):
        kv.add("stt.capability." + key, "bool", value)
    p = "stt.sortformer."
    kv.add(p + "max_speakers", "u32", s["max_speakers"])
    kv.add(p + "frame_hop", "u32", s["frame_hop"])
    for key, value in s["enc"].items():
        kv.add(p + "encoder." + key, "u32", value)
    kv.add(p + "encoder.conv_norm_type", "str", "batch_norm")
    for key, value in s["tf"].items():
        kv.add(p + "transformer." + key, "u32", value)
    kv.add(p + "transformer.activation", "str", "relu")
    kv.add(p + "transformer.pre_ln", "bool", False)
    for key, value in s["stream"].items():
        kv.add(p + "stream." + key, "u32", value)
    return kv


def _bucket(name: str, ne0: int, qtype: int) -> int:
    """transcribe-quantize's type for one tensor under a preset (its policy.cpp, for this schema's names)."""
    if qtype == quants.F32:
        return quants.F32
    if name.endswith((".bias", ".pos_bias_u", ".pos_bias_v")) or ".bn." in name or \
            ("norm_" in name and name.endswith(".weight")):
        return quants.F32  # the norm bucket
    if name.startswith("enc.blocks.") and name.endswith((".conv.pointwise1.weight", ".conv.pointwise2.weight")):
        return quants.F16  # 1x1 convolutions: F16 in every preset
    if ".conv." in name and name.endswith(".weight"):
        return quants.F32  # the other convolutions (pre-encode, depthwise): F32 in F16 / Q8_0
    if ne0 % quants.block_size(qtype)[0]:
        return quants.F16  # the fallback of a row that does not fill blocks
    return qtype


def _tensors(sd: dict, s: dict, qtype: int, source) -> list:
    table = tensor_table(s["enc"]["n_layers"], s["tf"]["n_layers"])
    config = {"encoder": {"d_model": s["enc"]["d_model"], "n_heads": s["enc"]["n_heads"],
                          "conv_kernel_size": s["enc"]["conv_kernel"],
                          "ff_expansion_factor": s["enc"]["d_ff"] // s["enc"]["d_model"],
                          "subsampling_conv_channels": s["enc"]["subsampling_channels"], "feat_in": s["enc"]["feat_in"],
                          "n_layers": s["enc"]["n_layers"]},
              "transformer_encoder": {"hidden_size": s["tf"]["d_model"], "inner_size": s["tf"]["d_ff"],
                                      "num_layers": s["tf"]["n_layers"]},
              "max_num_of_spks": s["max_speakers"]}
    shapes = expected_shapes(config)
    named = {n for n, _ in table}
    extra = [k for k in sd if k not in named and not k.startswith("preprocessor.") and not k.endswith("num_batches_tracked")]
    if extra:
        raise ExportError(f"{source}: tensor {extra[0]} has no place in transcribe.cpp's Sortformer schema")
    out = []
    for nemo, name in table:
        t = sd.get(nemo)
        if t is None:
            raise ExportError(f"{source}: the checkpoint lacks {nemo}")
        if tuple(t.shape) != shapes[nemo]:
            raise ExportError(f"{source}: {nemo} has shape {list(t.shape)}, the config gives {list(shapes[nemo])}")
        t = t.detach().to(torch.float32)
        if qtype != quants.F32:
            while t.dim() > 1 and t.shape[0] == 1:  # transcribe-quantize drops ggml's trailing dims of 1
                t = t[0]
        out.append((name, t, _bucket(name, t.shape[-1], qtype)))
    return out


def export(path: str | os.PathLike, out: str | os.PathLike, qtype: str = "f32", meta: Optional[dict] = None,
           variant: Optional[str] = None) -> Path:
    """Write the `.nemo` (or NeMo directory) `path` to the GGUF file `out` (`variant`: stt.variant and
    general.name, default `out`'s stem without a type suffix; `meta` replaces values of the keys written, or
    adds general.repo_url, which the converter writes with --repo-id)."""
    if str(qtype).lower() not in TYPES:
        raise ExportError(f"--type {qtype}: transcribe.cpp's Sortformer types are {', '.join(TYPES)}")
    q = quants.type_id(qtype)
    ck = read_nemo(path)
    s = _schema(ck.config, path)
    tensors = _tensors(ck.state_dict, s, q, path)
    kv = _kv(s, variant or variant_of(out), sum(t.numel() for _, t, _ in tensors))
    if q != quants.F32:  # transcribe-quantize rewrites the file type and moves it last
        entry = kv.entries.pop(kv.index("general.file_type"))
        entry[2] = _FILE_TYPE[q]
        kv.entries.append(entry)
    for key, value in (meta or {}).items():
        if key == "general.repo_url" and key not in kv.keys():
            kv.entries.insert(kv.index("general.license.link") + 1, [key, "str", ""])
        if key not in kv.keys() or key == "general.architecture":
            raise ExportError(f"--meta {key}: this schema writes no such key for this model, or it cannot change")
        entry = kv.entries[kv.index(key)]
        try:
            entry[2] = parse_value(key, entry[1], value) if isinstance(value, str) else value
        except ValueError as e:
            raise ExportError(f"--meta {key}={value}: {e}") from None
    write(Path(out), kv, tensors)
    return Path(out)


def export_gguf(path: Path, out: Path, schema: Optional[str], qtype: Optional[str], meta: Optional[dict],
                name: str) -> tuple[str, str]:
    """The family's `export_gguf` (`transcribe convert`): transcribe.cpp's `sortformer` schema (the only one),
    f32 by default. `name` (the model's name) is not stored: the variant is the output's name."""
    if schema not in (None, "transcribe.cpp"):
        raise ExportError(f"--schema {schema}: Sortformer GGUF files are transcribe.cpp's (its `sortformer` schema)")
    qtype = (qtype or "f32").lower()
    export(path, out, qtype=qtype, meta=meta)
    return "transcribe.cpp", qtype

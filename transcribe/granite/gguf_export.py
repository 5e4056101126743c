"""Writing a Granite Speech NAR checkpoint directory as a transcribe.cpp `granite_speech_nar` GGUF file.

The file has the keys, value types, key order and tensor order that transcribe.cpp's converter
(`convert-granite_nar.py`, release 0.2.1) writes, and the tensor types of the two upstream steps:

- "bf16": the converter's own output: linear weights, embeddings, `attn_rel_pos_emb`, `prj.query`,
  `prj.window_positions` BF16 (round to nearest even, as torch's `.to(torch.bfloat16)`); conv kernels
  F16; biases, norms, BatchNorm and the front end F32; `general.file_type` 32.
- "q8_0" / "q4_0" / "f16": what `transcribe-quantize --quant Q8_0|Q4_0|F16` makes of that BF16 file: it
  re-quantizes the converter's (rounded) values: linear weights get the preset type, F16 when their
  row (ggml's ne[0]) is not a multiple of the block (32); pointwise conv kernels F16; depthwise conv
  kernels, `prj.query`, `prj.window_positions`, biases, norms, BatchNorm and the front end F32; leading
  size-1 dims dropped (`prj.query` [1, 3, D] -> [3, D]); `general.file_type` 7 / 2 / 1.
- "f32": every tensor F32, the checkpoint's values unrounded (`general.file_type` 0); no upstream tool
  writes this one (the converter has no F32 option), it is the lossless file.

Identity keys follow the converter's rules: `general.size_label` from the checkpoint's parameter count
(every tensor of its weight files, bookkeeping included: "633K", "2.1B"; the converter counts every
`*.safetensors` in the folder, we count the weight files only), `stt.variant` and `general.repo_url`
from the repository id (by default the directory's name), and the converter's constants for the rest
(`general.name` "Granite Speech 4.1 2B NAR", basename, author, organization, license, five languages).
`meta` overrides any identity key (None drops it; `general.languages` may be a comma-separated string).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ..errors import ModelError
from ..gguf import quants
from .gguf import ARCH, FRONTEND_TENSORS, P, tensor_names

QTYPES = {"f32": (quants.F32, 0), "f16": (quants.F16, 1), "bf16": (quants.BF16, 32),
          "q8_0": (quants.Q8_0, 7), "q4_0": (quants.Q4_0, 2)}

IDENTITY_DEFAULTS: dict[str, Any] = {
    "general.name": "Granite Speech 4.1 2B NAR",
    "general.basename": "granite-speech-nar",
    "general.size_label": None,  # from the parameter count
    "general.author": "IBM",
    "general.organization": "ibm-granite",
    "general.license": "apache-2.0",
    "general.license.name": "Apache License 2.0",
    "general.license.link": "https://www.apache.org/licenses/LICENSE-2.0",
    "general.repo_url": None,  # https://huggingface.co/<repo id>
    "general.file_type": None,  # from qtype
    "general.languages": ["en", "fr", "de", "es", "pt"],
    "stt.variant": None,  # the repo id's last part
}
OVERRIDABLE = tuple(k for k in IDENTITY_DEFAULTS if k != "general.file_type")

_CONV_KERNELS = ("conv_pointwise1.weight", "conv_pointwise2.weight", "conv_depthwise.weight")
_F32_SUFFIXES = ("norm.weight", "norm.bias", "running_mean", "running_var", "conv_bn.weight", "conv_bn.bias")


def size_label(params: int) -> str:
    """The converter's `general.size_label`: 633204 -> "633K", 2.1e9 -> "2.1B"."""
    if params >= 1_000_000_000:
        return f"{params / 1_000_000_000:.1f}B"
    if params >= 1_000_000:
        return f"{params / 1_000_000:.0f}M"
    return f"{params / 1_000:.0f}K"


def converter_type(name: str) -> int:
    """The type convert-granite_nar.py gives a tensor (by its GGUF name)."""
    if name in FRONTEND_TENSORS or name.endswith(".bias") or ("norm" in name and name.endswith(".weight")) or \
            name.endswith(_F32_SUFFIXES):
        return quants.F32
    if name.endswith(_CONV_KERNELS):
        return quants.F16
    return quants.BF16


def quantizer_type(name: str, stored: int, shape: tuple[int, ...], preset: int) -> int:
    """The type transcribe-quantize gives a tensor of the converter's file (its name, stored type and
    PyTorch shape) under a legacy preset (F16, Q8_0, Q4_0)."""
    if stored == quants.F32 or name.endswith("conv_depthwise.weight") or name in ("prj.query", "prj.window_positions"):
        return quants.F32
    if name.endswith(("conv_pointwise1.weight", "conv_pointwise2.weight")):
        return quants.F16
    block = quants.block_size(preset)[0]
    return preset if shape[-1] % block == 0 else quants.F16


def _round(t: torch.Tensor, qtype: int) -> torch.Tensor:
    """float32 values as the converter stores them (BF16 / F16 rounding), back as float32."""
    if qtype == quants.BF16:
        return t.to(torch.bfloat16).float()
    if qtype == quants.F16:
        return t.to(torch.float16).float()
    return t


def hann_periodic(n: int) -> np.ndarray:
    """The converter's window: numpy float64 0.5 - 0.5 cos(2 pi k / n), then float32."""
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)


def read_tokenizer(src: Path, raw: dict) -> dict:
    """tokens, token types, merges and special ids of tokenizer.json, as the converter reads them; the
    special ids from tokenizer_config.json when there is one, else from config.json's text_config."""
    try:
        tok = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
        model = tok["model"]
        vocab = model["vocab"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelError(f"{src}/tokenizer.json: not a readable BPE tokenizer ({e})") from None
    if model.get("type", "BPE") != "BPE":
        raise ModelError(f"{src}/tokenizer.json: a {model.get('type')} model; the gpt2 GGUF tokenizer is BPE")
    added = tok.get("added_tokens") or []
    size = max([*vocab.values(), *(a["id"] for a in added)]) + 1
    tokens, types = [""] * size, [1] * size
    for piece, i in vocab.items():
        tokens[i] = piece
    for a in added:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = 3 if a.get("special", False) else 4
    merges = [f"{m[0]} {m[1]}" if isinstance(m, list) else m for m in model.get("merges") or []]

    def id_of(content):
        if isinstance(content, dict):
            content = content.get("content")
        if content is None:
            return None
        for a in added:
            if a["content"] == content:
                return a["id"]
        return vocab.get(content)

    ids: dict[str, Optional[int]]
    tcfg = _optional_json(src / "tokenizer_config.json")
    if tcfg is not None:
        ids = {k: id_of(tcfg.get(f"{k}_token")) for k in ("bos", "eos", "pad", "unk")}
        if ids["pad"] is None:
            ids["pad"] = vocab.get("<|pad|>")
    else:
        text = raw.get("text_config") or raw.get("llm_config") or {}
        ids = {k: text.get(f"{k}_token_id", raw.get(f"{k}_token_id")) for k in ("bos", "eos", "pad")}
        ids["unk"] = id_of(model.get("unk_token"))
    return {"tokens": tokens, "types": types, "merges": merges, **ids}


def ctc_chars(raw: dict) -> list[str]:
    """The converter's character table: config's ctc_tokenizer_config.char2idx, else its default
    (Latin-1 32..255 at their code points, 92 katakana from 256), at least output_dim entries."""
    table = (raw.get("ctc_tokenizer_config") or {}).get("char2idx")
    if table is None:
        table = {chr(n): n for n in range(32, 256)}
        table |= {chr(0x30A1 + n): 256 + n for n in range(92)}
    table = {k: int(v) for k, v in table.items()}
    size = max(max(table.values()) + 1, (raw.get("encoder_config") or {}).get("output_dim", 348))
    out = [""] * size
    for ch, i in table.items():
        out[i] = ch
    return out


def _params(src: Path) -> int:
    from safetensors import safe_open

    from .checkpoint import weight_files

    total = 0
    for f in weight_files(src):
        with safe_open(str(f), framework="pt") as h:
            for k in h.keys():
                total += int(np.prod(h.get_slice(k).get_shape()))
    return total


def _optional_json(path: Path) -> Optional[dict]:
    """A sidecar JSON file of the checkpoint, or None when it is not there."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: not readable JSON ({e})") from None


def _frontend_settings(src: Path) -> dict:
    pre = _optional_json(src / "preprocessor_config.json") or {}
    return {"sample_rate": pre.get("sampling_rate", 16000), "num_mels": pre.get("n_mels", 80),
            "n_fft": pre.get("n_fft", 512), "win_length": pre.get("win_length", 400),
            "hop_length": pre.get("hop_length", 160)}


def export_gguf(src, out, qtype: str = "bf16", meta: Optional[dict] = None) -> Path:
    """Write the Granite Speech NAR checkpoint directory `src` (IBM's hub layout, or one our loader
    maps onto it) as a transcribe.cpp GGUF file `out`; qtype "bf16" (the converter's file), "q8_0",
    "q4_0", "f16" (transcribe-quantize's), or "f32" (lossless). meta: identity keys to override
    (`OVERRIDABLE`; a None value leaves the key out). Returns the path written."""
    import gguf

    from .checkpoint import read_checkpoint
    from .config import parse_config

    key = str(qtype).strip().lower()
    if key not in QTYPES:
        raise ModelError(f"GGUF type {qtype!r} is not supported for Granite Speech NAR ({', '.join(QTYPES)})")
    target, file_type = QTYPES[key]
    meta = dict(meta or {})
    bad = sorted(set(meta) - set(OVERRIDABLE))
    if bad:
        raise ModelError(f"meta keys that are not identity keys: {', '.join(bad)} (one of {', '.join(OVERRIDABLE)})")
    src = Path(src)
    ckpt = read_checkpoint(src, torch.float32, identity_norms=True)
    raw = ckpt.config
    cfg = parse_config(raw, ckpt.layout)
    p, t = cfg.projector, cfg.text
    if not t.tie_word_embeddings:
        raise ModelError(f"{src}: the LM head is not tied to the embeddings; transcribe.cpp's schema has no head tensor")
    if p.mlp_hidden % p.hidden_size:
        raise ModelError(f"{src}: projector MLP width {p.mlp_hidden} is not a whole multiple of {p.hidden_size} "
                         "(the schema stores mlp_ratio as an integer)")
    tok = read_tokenizer(src, raw)
    fe = _frontend_settings(src)
    ident = _identity(src, file_type, meta)

    out = Path(out)
    tmp = out.with_name(out.name + ".part")
    w = gguf.GGUFWriter(str(tmp), ARCH)
    # transcribe-quantize rewrites general.file_type: its copy of the keys has it moved to just before the
    # tokenizer arrays (which both tools write last).
    requantized = target not in (quants.F32, quants.BF16)
    _add_identity(w, ident, requantized)
    _add_tokenizer_ids(w, tok)
    _add_model_keys(w, cfg, raw)
    _add_frontend_keys(w, fe)
    if requantized:
        w.add_uint32("general.file_type", file_type)
    w.add_array("tokenizer.ggml.tokens", tok["tokens"])
    w.add_array("tokenizer.ggml.token_type", tok["types"])
    w.add_array("tokenizer.ggml.merges", tok["merges"])  # the writer leaves an empty list out, as upstream
    for name, value in _tensors(src, ckpt.state_dict, cfg, fe):
        _add_converted(w, name, value, target)
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, out)
    except BaseException:
        w.close()
        tmp.unlink(missing_ok=True)
        raise
    return out


def _identity(src: Path, file_type: int, meta: dict) -> dict[str, Any]:
    """The identity keys: the converter's constants, those the checkpoint and its directory's name
    tell, then `meta`'s overrides."""
    repo = src.resolve().name
    ident = dict(IDENTITY_DEFAULTS)
    ident.update({"general.size_label": size_label(_params(src)), "general.repo_url": f"https://huggingface.co/{repo}",
                  "general.file_type": file_type, "stt.variant": repo.split("/")[-1]})
    if isinstance(meta.get("general.languages"), str):  # "en,fr" from a command line
        meta["general.languages"] = [x.strip() for x in meta["general.languages"].split(",") if x.strip()]
    ident.update(meta)
    return ident


def _add_identity(w, ident: dict[str, Any], requantized: bool) -> None:
    for k, v in ident.items():
        if v is None or (k == "general.file_type" and requantized):
            continue
        if k == "general.file_type":
            w.add_uint32(k, int(v))
        elif isinstance(v, (list, tuple)):
            w.add_array(k, [str(x) for x in v])
        else:
            w.add_string(k, str(v))


def _add_tokenizer_ids(w, tok: dict) -> None:
    """The capability flags, the tokenizer's kind and its special ids (its arrays come last)."""
    for cap in ("translate", "lang_detect", "word_timestamps", "speaker_diarization"):
        w.add_bool(f"stt.capability.{cap}", False)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "granite")
    for k, name in (("bos", "bos"), ("eos", "eos"), ("pad", "padding"), ("unk", "unknown")):
        if tok[k] is not None:
            w.add_uint32(f"tokenizer.ggml.{name}_token_id", int(tok[k]))


def _add_model_keys(w, cfg, raw: dict) -> None:
    """The character CTC alphabet and the encoder's, projector's and LM's hyperparameters."""
    e, p, t = cfg.encoder, cfg.projector, cfg.text
    w.add_array(P + "ctc_chars", ctc_chars(raw))
    u32 = w.add_uint32
    for k, v in (("n_layers", e.num_layers), ("hidden", e.hidden_dim), ("n_heads", e.num_heads),
                 ("head_dim", e.dim_head), ("input_dim", e.input_dim), ("output_dim", e.output_dim),
                 ("bpe_output_dim", e.bpe_output_dim), ("bpe_pool_window", e.bpe_pooling_window),
                 ("bpe_blank_id", cfg.bpe_blank_channel), ("self_cond_layer", e.self_conditioning_layer),
                 ("feedforward_mult", e.feedforward_mult), ("conv_kernel_size", e.conv_kernel_size),
                 ("conv_expansion", e.conv_expansion_factor), ("max_pos_emb", e.max_pos_emb),
                 ("context_size", e.context_size)):
        u32(P + "encoder." + k, int(v))
    w.add_array(P + "encoder.layer_indices", [int(i) for i in cfg.encoder_layer_indices])
    for k, v in (("n_layers", p.num_layers), ("hidden", p.hidden_size), ("mlp_ratio", p.mlp_hidden // p.hidden_size),
                 ("n_heads", p.num_heads), ("encoder_dim", p.encoder_dim), ("num_encoder_layers", p.num_encoder_layers),
                 ("block_size", p.block_size), ("downsample_rate", p.downsample_rate), ("llm_dim", p.llm_dim)):
        u32(P + "projector." + k, int(v))
    w.add_float32(P + "projector.layernorm_eps", p.layernorm_eps)
    w.add_bool(P + "projector.attn_bias", p.attn_bias)
    w.add_bool(P + "projector.mlp_bias", p.mlp_bias)
    w.add_bool(P + "scale_projected_embeddings", cfg.scale_projected_embeddings)
    for k, v in (("n_layers", t.num_hidden_layers), ("hidden", t.hidden_size), ("intermediate", t.intermediate_size),
                 ("n_heads", t.num_attention_heads), ("n_kv_heads", t.num_key_value_heads), ("head_dim", t.head_dim)):
        u32(P + "text." + k, int(v))
    w.add_string(P + "text.hidden_act", "silu")
    w.add_float32(P + "text.rms_norm_eps", t.rms_norm_eps)
    w.add_float32(P + "text.rope_theta", t.rope_theta)
    u32(P + "text.max_position_embeddings", t.max_position_embeddings)
    w.add_bool(P + "text.tie_word_embeddings", True)
    u32(P + "text.vocab_size", t.vocab_size)
    for k in ("embedding_multiplier", "logits_scaling", "attention_multiplier", "residual_multiplier"):
        w.add_float32(P + "text." + k, getattr(t, k))
    text_raw = raw.get("text_config") or raw.get("llm_config") or {}
    bos = text_raw.get("bos_token_id", raw.get("bos_token_id", t.eos_token_id))
    pad = text_raw.get("pad_token_id", raw.get("pad_token_id", 100256))
    u32(P + "text.bos_id", int(bos))
    u32(P + "text.eos_id", int(t.eos_token_id))
    u32(P + "text.pad_id", int(pad))


def _add_frontend_keys(w, fe: dict) -> None:
    w.add_string("stt.frontend.type", "mel")
    for k in ("sample_rate", "num_mels", "n_fft", "win_length", "hop_length"):
        w.add_uint32("stt.frontend." + k, int(fe[k]))
    for k, v in (("window", "hann_periodic"), ("normalize", "per_utterance"), ("pad_mode", "reflect"),
                 ("mel_norm", "htk")):
        w.add_string("stt.frontend." + k, v)


def _tensors(src: Path, state: dict, cfg, fe: dict) -> list[tuple[str, torch.Tensor]]:
    """The file's tensors in the converter's order, GGUF names: the front end's, then the checkpoint's
    (identity LayerNorms made for a layout without them)."""
    from .frontend import htk_mel_filterbank

    e, p, t = cfg.encoder, cfg.projector, cfg.text
    fb = htk_mel_filterbank(fe["sample_rate"], fe["n_fft"], fe["num_mels"]).T.contiguous()
    tensors = [("frontend.mel_filterbank", fb), ("frontend.window", torch.from_numpy(hann_periodic(fe["win_length"])))]
    names = tensor_names(e.num_layers, p.num_layers, len(cfg.encoder_layer_indices), t.num_hidden_layers)
    for ibm, g in names:
        if ibm not in state:
            if ibm.startswith("projector.") and "norm" in ibm:  # a layout without the identity LayerNorms
                width = p.encoder_dim if ".layer_norms." in ibm else p.hidden_size
                state[ibm] = torch.ones(width) if ibm.endswith("weight") else torch.zeros(width)
            else:
                raise ModelError(f"{src}: tensor {ibm} is missing (the GGUF file's {g})")
        tensors.append((g, state[ibm]))
    return tensors


def _add_converted(w, name: str, value: torch.Tensor, target: int) -> None:
    """One tensor in the type the upstream steps give it for the file type `target`."""
    value = value.detach().float().contiguous()
    stored = converter_type(name)
    if target == quants.F32:
        qt = quants.F32
    elif target == quants.BF16:
        qt = stored
    else:  # transcribe-quantize re-quantizes the converter's rounded values
        value = _round(value, stored)
        qt = quantizer_type(name, stored, tuple(value.shape), target)
        shape = list(value.shape)
        while len(shape) > 1 and shape[0] == 1:
            shape.pop(0)
        value = value.reshape(shape)
    _add(w, name, value, qt)


def _add(w, name: str, value: torch.Tensor, qtype: int) -> None:
    import gguf

    if qtype == quants.F32:
        w.add_tensor(name, value.numpy())
        return
    data = quants.quantize(value, qtype)
    data = data.reshape(*value.shape[:-1], data.shape[-1]).numpy()
    w.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType(qtype))

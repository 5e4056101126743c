"""Writing a NeMo Canary checkpoint as a transcribe.cpp `canary` GGUF file (`transcribe convert`), in the
schema its converter `convert-canary.py` writes and its quantizer `transcribe-quantize` rewrites (the
schema, key by key: tests/models/gguf/canary/README.md): the same keys in the same order, the tensors
renamed (`gguf.py`'s table) in the converter's order, F32, or Q8_0 / Q4_0 / F16 per tensor as the quantizer
chooses. `tests/test_canary_gguf.py` compares the result with the upstream tools' file.

Refused: a model the schema cannot express, so that the file would run as another model: an encoder with
`xscaling: true` (transcribe.cpp's Canary encoder never scales and the schema has no key for it), a
setting the schema has no key for (post-LN decoder blocks are written as `pre_ln` false, which it has)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import torch

from ..errors import ModelError
from ..gguf import quants
from ..gguf.writer import KV, parse_value, write
from ..nemo.checkpoint import read_nemo
from ..nemo.gguf_names import apply, rules
from .gguf import _TABLE

TYPES = ("f32", "f16", "q8_0", "q4_0")
_FILE_TYPE = {quants.F32: 0, quants.F16: 1, quants.Q8_0: 7, quants.Q4_0: 2}
_TO_TCPP = rules(_TABLE, True)
_LICENSE = ("cc-by-4.0", "Creative Commons Attribution 4.0", "https://creativecommons.org/licenses/by/4.0/")
# transcribe.cpp's names of the special tokens it writes ids for (`stt.canary.special.<name>_id`), in order.
_SPECIALS = ("nospeech", "startoftranscript", "endoftext", "startofcontext", "pnc", "nopnc", "itn", "noitn",
             "timestamp", "notimestamp", "diarize", "nodiarize", "pad", "transcribe", "translate", "spkchange",
             "audioseparator")


# The parts of an encoder block in the converter's order.
_BLOCK = ("norm_ff1.", "ff1.linear1.", "ff1.linear2.", "norm_attn.", "attn.linear_q.", "attn.linear_k.",
          "attn.linear_v.", "attn.linear_out.", "attn.linear_pos.", "attn.pos_bias_u", "attn.pos_bias_v", "norm_conv.",
          "conv.pointwise1.", "conv.depthwise.", "conv.pointwise2.", "conv.bn.", "norm_ff2.", "ff2.linear1.",
          "ff2.linear2.", "norm_out.")


class ExportError(ModelError):
    """A model this schema cannot express, or a bad option."""


def _kv(model, tok, variant: str, n_params: int, size_label) -> KV:
    c = model.config
    enc, dec, fe = c.encoder, c.decoder, c.preprocessor
    langs = [code for code in tok.offsets if code != "spl_tokens"] or tok.languages
    kv = KV()
    kv.add("general.architecture", "str", "canary")
    kv.add("general.name", "str", variant)
    kv.add("general.basename", "str", "canary")
    kv.add("general.version", "str", "v1")
    kv.add("general.size_label", "str", size_label(n_params))
    kv.add("general.author", "str", "NVIDIA")
    kv.add("general.organization", "str", "nvidia")
    kv.add("general.license", "str", _LICENSE[0])
    kv.add("general.license.name", "str", _LICENSE[1])
    kv.add("general.license.link", "str", _LICENSE[2])
    kv.add("general.file_type", "u32", 0)
    kv.add("general.languages", ("arr", "str"), langs)
    kv.add("stt.variant", "str", variant)
    kv.add("stt.capability.translate", "bool", True)
    kv.add("stt.capability.lang_detect", "bool", False)
    kv.add("stt.translation.target_languages", ("arr", "str"), langs)
    pairs = [p for x in langs if x != "en" for p in (f"en>{x}", f"{x}>en")]
    kv.add("stt.translation.pairs", ("arr", "str"), pairs)
    kv.add("stt.capability.timestamps", "bool", tok.id_of("<|timestamp|>") is not None)
    kv.add("tokenizer.ggml.model", "str", "unigram")
    kv.add("tokenizer.ggml.unknown_token_id", "u32", 0)
    kv.add("tokenizer.ggml.bos_token_id", "u32", tok.bos)
    kv.add("tokenizer.ggml.eos_token_id", "u32", tok.eos)
    kv.add("tokenizer.ggml.padding_token_id", "u32", tok.pad)
    s = "stt.canary."
    names = list(tok.offsets)
    kv.add(s + "tokenizer.lang_codes", ("arr", "str"), names if len(names) > 1 else ["all"])
    kv.add(s + "tokenizer.lang_offsets", ("arr", "i32"), [tok.offsets[n] for n in names])
    kv.add(s + "tokenizer.lang_sizes", ("arr", "i32"), [len(sp.pieces) for _, sp in tok.parts])
    kv.add(s + "tokenizer.single_sp", "bool", len(names) == 1)
    kv.add(s + "tokenizer.prompt_format", "str", c.prompt_format)
    for name in _SPECIALS:
        i = tok.id_of("<pad>" if name == "pad" else f"<|{name}|>")
        if i is not None:
            kv.add(f"{s}special.{name}_id", "u32", i)
    for code in langs:
        i = tok.id_of(f"<|{code}|>")
        if i is not None:
            kv.add(f"{s}special.lang.{code}_id", "u32", i)
    e = s + "encoder."
    for key, value in (("n_layers", enc.n_layers), ("d_model", enc.d_model), ("n_heads", enc.n_heads),
                       ("d_ff", enc.d_model * enc.ff_expansion_factor), ("conv_kernel", enc.conv_kernel_size),
                       ("subsampling_factor", enc.subsampling_factor), ("subsampling_channels", enc.conv_channels),
                       ("pos_emb_max_len", enc.pos_emb_max_len)):
        kv.add(e + key, "u32", value)
    kv.add(e + "use_bias", "bool", True)
    d = s + "decoder."
    for key, value in (("n_layers", dec.layers), ("d_model", dec.hidden), ("n_heads", dec.heads),
                       ("d_ff", dec.inner), ("max_position", dec.max_positions), ("vocab_size", dec.vocab_size)):
        kv.add(d + key, "u32", value)
    kv.add(d + "activation", "str", dec.activation)
    kv.add(d + "pre_ln", "bool", dec.pre_ln)
    kv.add(d + "learn_positional_encodings", "bool", False)
    kv.add(d + "encoder_decoder_proj", "bool", c.projection)
    f = "stt.frontend."
    sr = c.sample_rate
    win = fe.n_window_size or int(fe.window_size * sr)
    hop = fe.n_window_stride or int(fe.window_stride * sr)
    kv.add(f + "type", "str", "mel")
    kv.add(f + "num_mels", "u32", fe.features)
    kv.add(f + "sample_rate", "u32", sr)
    kv.add(f + "n_fft", "u32", fe.n_fft or 2 ** (win - 1).bit_length())
    kv.add(f + "win_length", "u32", win)
    kv.add(f + "hop_length", "u32", hop)
    kv.add(f + "window", "str", fe.window)
    kv.add(f + "normalize", "str", fe.normalization or "NA")
    kv.add(f + "dither", "f32", float(model.cfg.get("preprocessor", {}).get("dither", 1e-5)))
    kv.add(f + "pre_emphasis", "f32", 0.97)
    kv.add(f + "f_min", "f32", 0.0)
    kv.add(f + "f_max", "f32", sr / 2)
    kv.add(f + "log", "bool", True)
    pieces = list(tok.pieces) + [f"<unused_{i}>" for i in range(len(tok.pieces), dec.vocab_size)]
    control = set(tok.special.values())
    kv.add("tokenizer.ggml.tokens", ("arr", "str"), pieces)
    kv.add("tokenizer.ggml.scores", ("arr", "f32"), [0.0] * len(pieces))
    kv.add("tokenizer.ggml.token_type", ("arr", "i32"),
           [2 if i == 0 else 3 if i in control else 1 for i in range(len(pieces))])
    return kv


def _check(model, source) -> None:
    c = model.config
    if c.encoder.xscaling:
        raise ExportError(f"{source}: encoder.xscaling = true cannot be written: transcribe.cpp's Canary encoder "
                          "never scales and its GGUF schema has no key for it (the file would run as another model)")
    enc = c.encoder
    if enc.subsampling != "dw_striding" or enc.self_attention_model != "rel_pos" or enc.conv_norm_type != "batch_norm":
        raise ExportError(f"{source}: transcribe.cpp's Canary schema assumes dw_striding subsampling, rel_pos "
                          f"attention and batch norm (this encoder: {enc.subsampling}, {enc.self_attention_model}, "
                          f"{enc.conv_norm_type})")


def _bucket(name: str, ne0: int, qtype: int) -> int:
    """transcribe-quantize's type for one tensor under a preset (README section 4.2)."""
    if qtype == quants.F32:
        return quants.F32
    if name.endswith(".bias") or ".norm" in name or ".conv.bn." in name or ".pos_bias_" in name \
            or name.startswith("enc.pre_encode.conv.") or ".conv.depthwise." in name or name == "dec.embed.pos_enc":
        return quants.F32
    if ".conv.pointwise" in name or ne0 % quants.block_size(qtype)[0]:
        return quants.F16
    return qtype


def _tensors(sd: dict, qtype: int) -> list:
    renamed = {}
    for key, t in sd.items():
        if key.startswith("preprocessor.") or key.endswith("num_batches_tracked"):
            continue
        new = apply(key, _TO_TCPP)
        if new is None:
            raise ExportError(f"tensor {key} has no place in transcribe.cpp's Canary schema")
        renamed[new] = t.detach().to(torch.float32)
    def rank(name: str) -> tuple:
        """The converter's order: pre-encode convolutions, the rest of the pre-encode, each encoder block
        in `_BLOCK` order, the projection, the decoder's embedding, its layers, its final norm, its head."""
        if name.startswith("enc.pre_encode."):
            return (0, 0 if ".conv." in name else 1, 0, 0)
        if name.startswith("enc.blocks."):
            layer, rest = name[len("enc.blocks."):].split(".", 1)
            part = next((k for k, p in enumerate(_BLOCK) if rest.startswith(p)), len(_BLOCK))
            return (1, int(layer), part, 0)
        if name.startswith("dec.layer."):
            return (3, int(name.split(".")[2]), 0, 0)
        return (2 if name.startswith(("enc.", "dec.embed.")) else 4 if name.startswith("dec.norm.") else 5, 0, 0, 0)

    order = sorted(renamed, key=rank)  # (stable: a part's tensors keep the state dict's order)
    out = []
    for name in order:
        t = renamed[name]
        if qtype != quants.F32:
            while t.dim() > 1 and t.shape[0] == 1:  # transcribe-quantize drops trailing ne of 1
                t = t[0]
        out.append((name, t, _bucket(name, t.shape[-1], qtype)))
    return out


def export(path: str | os.PathLike, out: str | os.PathLike, qtype: str = "f32", meta: Optional[dict] = None,
           variant: Optional[str] = None) -> Path:
    """Write the `.nemo` (or NeMo directory) `path` to the GGUF file `out` (`variant`: stt.variant and
    general.name, default `out`'s stem without a type suffix; `meta` replaces values of the keys written)."""
    from ..gguf.writer import size_label, variant_of
    from .model import CanaryModel
    from .tokenizer import from_nemo

    if str(qtype).lower() not in TYPES:
        raise ExportError(f"unknown --type {qtype!r} (choose from {', '.join(TYPES)})")
    q = quants.type_id(qtype)
    ck = read_nemo(path)
    try:
        with torch.device("meta"):
            model = CanaryModel(ck.config)
        tok = from_nemo(ck.config, ck.files, str(path))
    except (ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{path}: model config not supported ({e})") from None
    _check(model, path)
    tensors = _tensors(ck.state_dict, q)
    kv = _kv(model, tok, variant or variant_of(out), sum(t.numel() for _, t, _ in tensors), size_label)
    if q != quants.F32:  # transcribe-quantize rewrites the file type and moves it before the tokenizer arrays
        entry = kv.entries.pop(kv.index("general.file_type"))
        entry[2] = _FILE_TYPE[q]
        kv.entries.insert(kv.index("tokenizer.ggml.tokens"), entry)
    for key, value in (meta or {}).items():
        if key == "general.repo_url" and key not in kv.keys():  # the converter's --repo-id; none by default
            kv.entries.insert(kv.index("general.license.link") + 1, [key, "str", ""])
        if key not in kv.keys() or key == "general.architecture":
            raise ExportError(f"--meta {key}: this schema writes no such key for this model, or it cannot change")
        entry = kv.entries[kv.index(key)]
        entry[2] = parse_value(key, entry[1], value) if isinstance(value, str) else value
    write(Path(out), kv, tensors)
    return Path(out)

"""Writing a Granite Speech checkpoint directory as a transcribe.cpp `granite_speech` GGUF file (`transcribe
convert`; reading such files: `gguf.py`).

The file has the keys, value types, key order and tensor order that transcribe.cpp's converter
(`scripts/convert-granite.py`, release 0.2.1) writes, in one of two types:

- "bf16" (the default): the converter's own output. The converter accepts BF16 checkpoints only (the published
  ones are); a float32 checkpoint is rounded to BF16 first (round to nearest even, torch's `.to(torch.bfloat16)`),
  so the file is the converter's file of the checkpoint's BF16 copy, byte for byte
  (tools/make_granite_speech_gguf_refs.py makes that copy the same way). Then, as the converter stores them:
  linear weights, embeddings, the relative-position table and the queries BF16; convolution kernels F16;
  biases, norms, BatchNorm and the front end F32; `general.file_type` 32.
- "f32": every tensor F32, the checkpoint's values unrounded (`general.file_type` 0); no upstream tool writes
  it (the converter has no F32 option), it is the lossless file. transcribe.cpp's quantizer starts from either.

Two things the converter does that would make a file compute something else than the checkpoint are refused
instead (ModelError): a LoRA adapter (has_lora_adapter: the converter reads model.safetensors only and drops
it), and a chat template only in tokenizer_config.json (the converter reads chat_template.jinja / .json only,
so the file has none). Also refused: a text config and outer config that disagree on tie_word_embeddings (the
converter follows the text config's, transformers the outer one's).

Identity keys follow the converter's rules for `stt.variant` (`meta["stt.variant"]`, by default the directory's
name, as its --variant or slug): `general.name`, `general.languages`, the capability and translation keys from
its tables of the three published variants (an unknown variant: general.name "Granite Speech", no languages, no
translation), `tokenizer.ggml.pre` "gpt2" for granite-speech-4.1-2b-plus and "granite" for the rest (whatever
tokenizer.json's own pre-tokenizer is), `general.size_label` from the checkpoint's parameter count (every tensor
but BatchNorm's counters); no `general.repo_url` unless `meta` gives one. Quantized types (Q8_0, F16...) are
transcribe-quantize's job: not written here.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ..errors import ModelError
from ..gguf import quants
from ..gguf.hf import bpe_vocab
from .gguf import ARCH, P, tensor_names

QTYPES = {"bf16": (quants.BF16, 32), "f32": (quants.F32, 0)}

# The converter's tables of the published variants.
NAMES = {"granite-4.0-1b-speech": "Granite Speech 4.0 1B", "granite-speech-4.1-2b": "Granite Speech 4.1 2B",
         "granite-speech-4.1-2b-plus": "Granite Speech 4.1 2B Plus"}
LANGUAGES = {"granite-4.0-1b-speech": ["en", "fr", "de", "es", "pt", "ja"],
             "granite-speech-4.1-2b": ["en", "fr", "de", "es", "pt", "ja"],
             "granite-speech-4.1-2b-plus": ["en", "fr", "de", "es", "pt"]}
TRANSLATION_TARGETS = {"granite-4.0-1b-speech": ["en", "fr", "de", "es", "pt", "ja", "it", "zh"],
                       "granite-speech-4.1-2b": ["en", "fr", "de", "es", "pt", "ja", "it", "zh"]}
PLUS = "granite-speech-4.1-2b-plus"
OVERRIDABLE = ("stt.variant", "general.name", "general.size_label", "general.repo_url", "general.languages")


def size_label(params: int) -> str:
    """The converter's `general.size_label`: 445774 -> "446K", 2.1e9 -> "2.1B"."""
    if params >= 1_000_000_000:
        return f"{params / 1_000_000_000:.1f}B"
    if params >= 1_000_000:
        return f"{params / 1_000_000:.0f}M"
    return f"{params / 1_000:.0f}K"


def converter_type(name: str) -> int:
    """The type convert-granite.py gives a tensor (its GGUF name) in its BF16 file."""
    if name.endswith(".bias") or ".bn." in name or ("norm_" in name and name.endswith(".weight")) or \
            name.endswith((".final_norm.weight", ".output_norm.weight", ".pos_emb.weight")) or \
            name in ("frontend.mel_filterbank", "frontend.window"):
        return quants.F32
    if ".conv." in name and name.endswith(".weight"):
        return quants.F16
    return quants.BF16


def hann_periodic(n: int) -> np.ndarray:
    """The converter's window: numpy float64 0.5 - 0.5 cos(2 pi k / n), then float32."""
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)


def read_tokenizer(src: Path, vocab_size: int) -> dict:
    """tokens, token types, merges and special ids as the converter reads tokenizer.json and
    tokenizer_config.json: ids no piece has become `<|unused_{i}|>` (normal), added tokens are control tokens
    when marked special and normal ones otherwise; bos / eos / pad / unk by their names in tokenizer_config."""
    vocab, id_of = bpe_vocab(src, vocab_size)
    return {**vocab, **{k: id_of(f"{k}_token") for k in ("bos", "eos", "pad", "unk")}}


def chat_template(src: Path) -> Optional[str]:
    """The template the converter stores: chat_template.jinja, else chat_template.json's."""
    from .config import read_json

    if (src / "chat_template.jinja").is_file():
        return (src / "chat_template.jinja").read_text(encoding="utf-8")
    if (src / "chat_template.json").is_file():
        return read_json(src / "chat_template.json").get("chat_template")
    return None


def _params(src: Path) -> int:
    from safetensors import safe_open

    from .checkpoint import weight_files

    total = 0
    for f in weight_files(src):
        with safe_open(str(f), framework="pt") as h:
            for k in h.keys():
                if not k.endswith("num_batches_tracked"):
                    total += int(np.prod(h.get_slice(k).get_shape()))
    return total


def export_gguf(src, out, qtype: str = "bf16", meta: Optional[dict] = None) -> Path:
    """Write the Granite Speech checkpoint directory `src` as a transcribe.cpp GGUF file `out` ("bf16": the
    converter's file; "f32": lossless). meta: identity keys to override (`OVERRIDABLE`; `stt.variant` also
    selects the converter's per-variant keys). Returns the path written."""
    import gguf

    from .checkpoint import read_weights
    from .config import parse_config, read_json

    key = str(qtype).strip().lower()
    if key not in QTYPES:
        raise ModelError(f"GGUF type {qtype!r} is not written for Granite Speech ({', '.join(QTYPES)}; quantized "
                         "files: transcribe-quantize)")
    target, file_type = QTYPES[key]
    meta = dict(meta or {})
    bad = sorted(set(meta) - set(OVERRIDABLE))
    if bad:
        raise ModelError(f"meta keys that are not identity keys: {', '.join(bad)} (one of {', '.join(OVERRIDABLE)})")
    src = Path(src)
    raw = read_json(src / "config.json")
    try:
        cfg = parse_config(raw)
    except ModelError as e:
        raise ModelError(f"{src}: {e}") from None
    if cfg.has_lora_adapter:
        raise ModelError(f"{src}: the model has a LoRA adapter, which transcribe.cpp's schema cannot hold (its "
                         "converter drops it)")
    text = raw["text_config"]
    if text.get("tie_word_embeddings") is not None and bool(text["tie_word_embeddings"]) != cfg.lm.tie_word_embeddings:
        raise ModelError(f"{src}: text_config.tie_word_embeddings and tie_word_embeddings disagree (the converter "
                         "follows the first, transformers the second)")
    template = chat_template(src)
    if template is None:
        raise ModelError(f"{src}: no chat_template.jinja or chat_template.json: the file would have no chat "
                         "template (the converter does not read tokenizer_config.json's)")
    tok = read_tokenizer(src, cfg.lm.vocab_size)
    if tok["types"][cfg.audio_token_id] != 3:
        raise ModelError(f"{src}: the audio token {cfg.audio_token_id} is not a special token")
    state = read_weights(src)
    variant = str(meta.pop("stt.variant", None) or src.resolve().name)
    ident = {"general.name": NAMES.get(variant, "Granite Speech"), "general.size_label": size_label(_params(src)),
             "general.repo_url": None, "general.languages": LANGUAGES.get(variant)}
    if isinstance(meta.get("general.languages"), str):  # "en,fr" from a command line
        meta["general.languages"] = [x.strip() for x in meta["general.languages"].split(",") if x.strip()]
    ident.update(meta)

    out = Path(out)
    tmp = out.with_name(out.name + ".part")
    w = gguf.GGUFWriter(str(tmp), ARCH)
    try:
        _add_identity(w, ident, file_type)
        _add_variant(w, variant)
        _add_tokenizer_ids(w, tok, variant)
        _add_model_keys(w, cfg, raw)
        _add_frontend_keys(w, src)
        w.add_array("tokenizer.ggml.tokens", tok["tokens"])
        w.add_array("tokenizer.ggml.token_type", tok["types"])
        w.add_array("tokenizer.ggml.merges", tok["merges"])
        w.add_string("tokenizer.chat_template", template)
        for name, value in _tensors(src, state, cfg):
            _add(w, name, value, target)
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


def _add_identity(w, ident: dict[str, Any], file_type: int) -> None:
    """add_general_identity's keys, in its order."""
    s = w.add_string
    s("general.name", str(ident["general.name"]))
    s("general.basename", "granite-speech")
    if ident["general.size_label"] is not None:
        s("general.size_label", str(ident["general.size_label"]))
    for k, v in (("general.author", "IBM"), ("general.organization", "ibm-granite"), ("general.license", "apache-2.0"),
                 ("general.license.name", "Apache License 2.0"),
                 ("general.license.link", "https://www.apache.org/licenses/LICENSE-2.0")):
        s(k, v)
    if ident["general.repo_url"] is not None:
        s("general.repo_url", str(ident["general.repo_url"]))
    w.add_uint32("general.file_type", file_type)
    if ident["general.languages"]:
        w.add_array("general.languages", [str(x) for x in ident["general.languages"]])


def _add_variant(w, variant: str) -> None:
    w.add_string("stt.variant", variant)
    translate = variant in TRANSLATION_TARGETS
    w.add_bool("stt.capability.translate", translate)
    w.add_bool("stt.capability.lang_detect", False)
    if translate:
        w.add_array("stt.translation.target_languages", TRANSLATION_TARGETS[variant])
        pairs = [p for lang in LANGUAGES.get(variant, []) if lang != "en" for p in (f"en>{lang}", f"{lang}>en")]
        w.add_array("stt.translation.pairs", pairs + ["en>it", "en>zh"])
    w.add_bool("stt.capability.word_timestamps", variant == PLUS)
    w.add_bool("stt.capability.speaker_diarization", variant == PLUS)


def _add_tokenizer_ids(w, tok: dict, variant: str) -> None:
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "gpt2" if variant == PLUS else "granite")
    for k, name in (("bos", "bos"), ("eos", "eos"), ("pad", "padding"), ("unk", "unknown")):
        if tok[k] is not None:
            w.add_uint32(f"tokenizer.ggml.{name}_token_id", int(tok[k]))
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_bool("tokenizer.ggml.add_eos_token", False)


def _add_model_keys(w, cfg, raw: dict) -> None:
    e, q, lm = cfg.encoder, cfg.projector, cfg.lm
    p, t = raw["projector_config"], raw["text_config"]
    u32, f32 = w.add_uint32, w.add_float32
    for k, v in (("n_layers", e.num_layers), ("hidden", e.hidden_dim), ("n_heads", e.num_heads),
                 ("head_dim", e.dim_head), ("input_dim", e.input_dim), ("output_dim", e.output_dim),
                 ("feedforward_mult", e.feedforward_mult), ("conv_kernel_size", e.conv_kernel_size),
                 ("conv_expansion", e.conv_expansion_factor), ("max_pos_emb", e.max_pos_emb),
                 ("context_size", e.context_size)):
        u32(P + "encoder." + k, int(v))
    w.add_array(P + "encoder.cat_hidden_layers", [int(i) for i in cfg.cat_hidden_layers])  # dropped when empty
    for k, v in (("n_layers", q.num_layers), ("hidden", q.hidden_size), ("intermediate", q.intermediate_size),
                 ("n_heads", q.num_heads), ("encoder_hidden_size", q.encoder_hidden_size),
                 ("cross_attn_frequency", q.cross_attention_frequency)):
        u32(P + "projector." + k, int(v))
    w.add_string(P + "projector.hidden_act", str(p.get("hidden_act", "gelu")).lower())
    f32(P + "projector.layer_norm_eps", q.layer_norm_eps)
    u32(P + "projector.max_pos_emb", int(p.get("max_position_embeddings", 2048)))
    w.add_string(P + "projector.position_embedding_type", str(p.get("position_embedding_type", "absolute")))
    d = P + "decoder."
    for k, v in (("n_layers", lm.num_layers), ("hidden_size", lm.hidden_size),
                 ("intermediate_size", lm.intermediate_size), ("n_heads", lm.num_heads),
                 ("n_kv_heads", lm.num_kv_heads), ("head_dim", lm.head_dim)):
        u32(d + k, int(v))
    w.add_string(d + "hidden_act", "silu")
    f32(d + "rms_norm_eps", lm.rms_norm_eps)
    f32(d + "rope_theta", lm.rope_theta)
    u32(d + "max_position_embeddings", lm.max_position_embeddings)
    w.add_bool(d + "tie_word_embeddings", lm.tie_word_embeddings)
    u32(d + "vocab_size", lm.vocab_size)
    # the text config's own values (the LM config keeps logits_scaling 1: transformers 5 does not apply it)
    for k in ("embedding_multiplier", "logits_scaling", "attention_multiplier", "residual_multiplier"):
        f32(d + k, float(t[k]))
    u32(P + "audio_token_id", cfg.audio_token_id)
    u32(P + "downsample_rate", q.window_size // q.num_queries)
    u32(P + "window_size", q.window_size)


def _frontend_settings(src: Path) -> dict:
    """The converter's melspec_kwargs (preprocessor_config.json, else processor_config.json's audio_processor);
    only our front end's settings are written (a checkpoint with others is refused)."""
    from .config import read_json
    from .frontend import HOP, N_FFT, N_MELS, SAMPLE_RATE, WIN_LENGTH

    pre = read_json(src / "preprocessor_config.json") if (src / "preprocessor_config.json").is_file() else {}
    mks = pre.get("melspec_kwargs") or {}
    if not mks and (src / "processor_config.json").is_file():
        mks = (read_json(src / "processor_config.json").get("audio_processor") or {}).get("melspec_kwargs") or {}
    fe = {"sample_rate": mks.get("sample_rate", SAMPLE_RATE), "num_mels": mks.get("n_mels", N_MELS),
          "n_fft": mks.get("n_fft", N_FFT), "win_length": mks.get("win_length", WIN_LENGTH),
          "hop_length": mks.get("hop_length", HOP)}
    ours = {"sample_rate": SAMPLE_RATE, "num_mels": N_MELS, "n_fft": N_FFT, "win_length": WIN_LENGTH, "hop_length": HOP}
    for k, v in fe.items():
        if v != ours[k]:
            raise ModelError(f"{src}: melspec {k} = {v!r} is not implemented ({ours[k]})")
    return fe


def _add_frontend_keys(w, src: Path) -> None:
    fe = _frontend_settings(src)
    w.add_string("stt.frontend.type", "mel")
    for k in ("num_mels", "sample_rate", "n_fft", "win_length", "hop_length"):
        w.add_uint32("stt.frontend." + k, int(fe[k]))
    w.add_string("stt.frontend.window", "hann_periodic")
    w.add_string("stt.frontend.normalize", "per_utterance")
    for k, v in (("dither", 0.0), ("pre_emphasis", 0.0), ("f_min", 0.0), ("f_max", fe["sample_rate"] / 2)):
        w.add_float32("stt.frontend." + k, v)
    w.add_string("stt.frontend.pad_mode", "reflect")
    w.add_bool("stt.frontend.center", True)
    w.add_string("stt.frontend.mel_norm", "htk")


def _tensors(src: Path, state: dict, cfg) -> list[tuple[str, torch.Tensor]]:
    """The file's tensors in the converter's order under its names: the front end's, then the model's."""
    from .frontend import FrontEnd

    fe = FrontEnd()
    out = [("frontend.mel_filterbank", fe.filters.T.contiguous()),
           ("frontend.window", torch.from_numpy(hann_periodic(fe.window.shape[0])))]
    names = tensor_names(cfg.encoder.num_layers, cfg.projector.num_layers, cfg.lm.num_layers,
                         cfg.projector.cross_attention_frequency, cfg.lm.tie_word_embeddings)
    for ours, g in names:
        if ours not in state:
            raise ModelError(f"{src}: tensor {ours} is missing (the GGUF file's {g})")
        out.append((g, state[ours]))
    return out


def _add(w, name: str, value: torch.Tensor, target: int) -> None:
    import gguf

    value = value.detach().float().contiguous()
    if target == quants.F32:
        w.add_tensor(name, value.numpy())
        return
    stored = converter_type(name)
    if name not in ("frontend.mel_filterbank", "frontend.window"):
        value = value.to(torch.bfloat16).float()  # the BF16 checkpoint the converter reads
    if stored == quants.F32:
        w.add_tensor(name, value.numpy())
    elif stored == quants.F16:
        w.add_tensor(name, value.numpy().astype(np.float16))
    else:
        data = quants.quantize(value, stored)
        w.add_tensor(name, data.reshape(*value.shape[:-1], data.shape[-1]).numpy(),
                     raw_dtype=gguf.GGMLQuantizationType(stored))

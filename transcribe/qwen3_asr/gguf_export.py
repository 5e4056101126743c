"""Writing a Qwen3-ASR checkpoint directory (the -hf layout) as a transcribe.cpp `qwen3_asr` GGUF file
(`transcribe convert`; reading such files: `gguf.py`).

transcribe.cpp's converter (`scripts/convert-qwen3_asr.py`, release 0.2.1) reads Qwen's original layout, bfloat16
only. The file written here is the converter's file of the directory's model in that layout, BF16 (as
tools/make_qwen3_asr_gguf_refs.py makes the copy it converts): the keys, value types, key order (the tokenizer's
tables last) and tensor order the converter writes, in one of two types:

- "bf16" (the default): every tensor rounded to BF16 once (round to nearest even), then stored as the converter
  stores it: linear weights and the embedding BF16, convolution kernels F16, biases, norms and the front end F32;
  `general.file_type` 32. Byte for byte the converter's file (tests/test_qwen3_asr_gguf.py).
- "f32": every tensor F32, the checkpoint's values unrounded (`general.file_type` 0); no upstream tool writes it
  (the converter has no F32 option); transcribe.cpp's quantizer starts from either.

What the -hf layout does not hold is written as the original layout holds it: `max_source_positions` 1500 and
`conv_chunksize` 500 (the published values; neither changes the computation), the M-RoPE section (the published
[24, 20, 20] for head_dim 128; for another head_dim h/2 frequencies: h = w = (head_dim / 2) * 5 // 16, t the rest,
which is plain RoPE for text positions all the same), `rope_mrope_interleaved` true, `general.languages` the 30
codes in the converter's order, the audio start / end ids from the tokenizer's `<|audio_start|>` /
`<|audio_end|>`. A model with an untied head is refused (the converter never writes a head).

Identity: `stt.variant` (`meta["stt.variant"]`, by default the directory's name), `general.name` from the
converter's table of its two published variants ("Qwen3-ASR" for another; the converter itself refuses one),
`general.size_label` from the parameter count (every tensor but a stored tied head); no `general.repo_url` unless
`meta` gives one. Quantized types (Q8_0, F16...) are transcribe-quantize's job: not written here.
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
from .gguf import ARCH, FRONTEND_TENSORS, P, tensor_names

QTYPES = {"bf16": (quants.BF16, 32), "f32": (quants.F32, 0)}
NAMES = {"qwen3-asr-0.6b": "Qwen3-ASR 0.6B", "qwen3-asr-1.7b": "Qwen3-ASR 1.7B"}
# the converter's LANGUAGE_TO_BCP47 order (the published support_languages)
LANGUAGE_CODES = ["zh", "en", "yue", "ar", "de", "fr", "es", "pt", "id", "it", "ko", "ru", "th", "vi", "ja", "tr",
                  "hi", "ms", "nl", "sv", "da", "fi", "pl", "cs", "fil", "fa", "el", "ro", "hu", "mk"]
MAX_SOURCE_POSITIONS = 1500
CONV_CHUNKSIZE = 500
OVERRIDABLE = ("stt.variant", "general.name", "general.size_label", "general.repo_url", "general.languages")


def size_label(params: int) -> str:
    """The converter's `general.size_label`: 297984 -> "298K", 6e8 -> "600M", 1.7e9 -> "1.7B"."""
    if params >= 1_000_000_000:
        return f"{params / 1_000_000_000:.1f}B"
    if params >= 1_000_000:
        return f"{params / 1_000_000:.0f}M"
    return f"{params / 1_000:.0f}K"


def mrope_section(head_dim: int) -> list[int]:
    """[t, h, w] covering head_dim / 2 frequencies: [24, 20, 20] for 128 (the published), [6, 5, 5] for 32."""
    half = head_dim // 2
    hw = half * 5 // 16
    return [half - 2 * hw, hw, hw]


def converter_type(name: str) -> int:
    """The type convert-qwen3_asr.py gives a tensor (its GGUF name) in its BF16 file."""
    if name.endswith(".bias") or ("norm_" in name and name.endswith(".weight")) or \
            name.endswith((".q_norm.weight", ".k_norm.weight", ".output_norm.weight", ".ln_post.weight")) or \
            name in FRONTEND_TENSORS:
        return quants.F32
    if ".conv." in name and name.endswith(".weight"):
        return quants.F16
    return quants.BF16


def hann_periodic(n: int) -> np.ndarray:
    """The converter's window: numpy float64 0.5 - 0.5 cos(2 pi k / n), then float32."""
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    mels = f / f_sp
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-300) / min_log_hz) / logstep, mels)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def slaney_filterbank(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """The converter's filterbank (librosa.filters.mel(norm="slaney", htk=False), 0 .. sr/2) computed the way
    librosa computes it (float64 ramps written into float32 rows, then scaled in float32): [n_mels, n_fft/2+1]."""
    weights = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    lo, hi = _hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(sr / 2.0))
    mel_f = _mel_to_hz(np.linspace(lo, hi, n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, np.newaxis]
    return weights


def read_tokenizer(src: Path, vocab_size: int) -> dict:
    """tokens, token types, merges and special ids as the converter reads vocab.json + added_tokens_decoder (here
    tokenizer.json's vocabulary and added tokens): ids no token has become `<|unused_{i}|>` (normal), added tokens
    are control tokens when marked special and normal otherwise; bos / eos / pad by their names in
    tokenizer_config.json."""
    vocab, id_of = bpe_vocab(src, vocab_size)
    ids = {t: i for i, t in enumerate(vocab["tokens"])}
    return {**vocab, "bos": id_of("bos_token"), "eos": id_of("eos_token"), "pad": id_of("pad_token"),
            "audio_start": ids.get("<|audio_start|>"), "audio_end": ids.get("<|audio_end|>")}


def export_gguf(src, out, qtype: str = "bf16", meta: Optional[dict] = None) -> Path:
    """Write the Qwen3-ASR -hf directory `src` as a transcribe.cpp GGUF file `out` ("bf16": the converter's file;
    "f32": lossless). meta: identity keys to override (`OVERRIDABLE`). Returns the path written."""
    import gguf

    from .config import read_config, read_features, read_json
    from ..safetensors_files import read_tensors, weight_files
    from .model import HEAD
    from .prompt import read_template

    key = str(qtype).strip().lower()
    if key not in QTYPES:
        raise ModelError(f"GGUF type {qtype!r} is not written for Qwen3-ASR ({', '.join(QTYPES)}; quantized files: "
                         "transcribe-quantize)")
    target, file_type = QTYPES[key]
    meta = dict(meta or {})
    bad = sorted(set(meta) - set(OVERRIDABLE))
    if bad:
        raise ModelError(f"meta keys that are not identity keys: {', '.join(bad)} (one of {', '.join(OVERRIDABLE)})")
    src = Path(src)
    cfg = read_config(src)
    if not cfg.lm.tie_word_embeddings:
        raise ModelError(f"{src}: the model's head is not tied to its embedding: transcribe.cpp's schema has no "
                         "head (its converter never writes one)")
    template, _ = read_template(src)
    if template is None:
        raise ModelError(f"{src}: no chat template: the file would have none")
    tok = read_tokenizer(src, cfg.lm.vocab_size)
    if tok["audio_start"] is None or tok["audio_end"] is None:
        raise ModelError(f"{src}: the tokenizer lacks <|audio_start|> or <|audio_end|>")
    feats = read_features(src)
    state = read_tensors(weight_files(src))
    state.pop(HEAD, None)  # tied: the embedding (the converter skips the stored copy)
    params = sum(int(t.numel()) for t in state.values())
    variant = str(meta.pop("stt.variant", None) or src.resolve().name)
    ident: dict[str, Any] = {"general.name": NAMES.get(variant, "Qwen3-ASR"), "general.size_label": size_label(params),
                             "general.repo_url": None, "general.languages": LANGUAGE_CODES}
    if isinstance(meta.get("general.languages"), str):  # "en,fr" from a command line
        meta["general.languages"] = [x.strip() for x in meta["general.languages"].split(",") if x.strip()]
    ident.update(meta)
    raw_cfg = read_json(src / "config.json") or {}

    out = Path(out)
    tmp = out.with_name(out.name + ".part")
    w = gguf.GGUFWriter(str(tmp), ARCH)
    try:
        _add_identity(w, ident, file_type)
        w.add_string("stt.variant", variant)
        w.add_bool("stt.capability.lang_detect", True)
        w.add_string("tokenizer.ggml.model", "gpt2")
        w.add_string("tokenizer.ggml.pre", "qwen2")
        for k, name in (("eos", "eos"), ("pad", "padding"), ("bos", "bos")):
            if tok[k] is not None:
                w.add_uint32(f"tokenizer.ggml.{name}_token_id", int(tok[k]))
        w.add_bool("tokenizer.ggml.add_bos_token", False)
        _add_model_keys(w, cfg, raw_cfg, tok)
        _add_frontend_keys(w, cfg, feats)
        w.add_array("tokenizer.ggml.tokens", tok["tokens"])
        w.add_array("tokenizer.ggml.token_type", tok["types"])
        w.add_array("tokenizer.ggml.merges", tok["merges"])
        w.add_string("tokenizer.chat_template", template)
        fe = cfg.features
        _add(w, "frontend.mel_filterbank", slaney_filterbank(fe.sample_rate, fe.n_fft, fe.n_mels), target)
        _add(w, "frontend.window", hann_periodic(fe.n_fft), target)
        for ours, g in tensor_names(cfg.encoder.layers, cfg.lm.num_layers, True):
            if ours not in state:
                raise ModelError(f"{src}: tensor {ours} is missing (the GGUF file's {g})")
            _add(w, g, state[ours], target)
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
    s("general.basename", "qwen3-asr")
    if ident["general.size_label"] is not None:
        s("general.size_label", str(ident["general.size_label"]))
    for k, v in (("general.author", "Alibaba Qwen Team"), ("general.organization", "Qwen"),
                 ("general.license", "apache-2.0"), ("general.license.name", "Apache License 2.0"),
                 ("general.license.link", "https://www.apache.org/licenses/LICENSE-2.0")):
        s(k, v)
    if ident["general.repo_url"] is not None:
        s("general.repo_url", str(ident["general.repo_url"]))
    w.add_uint32("general.file_type", file_type)
    if ident["general.languages"]:
        w.add_array("general.languages", [str(x) for x in ident["general.languages"]])


def _add_model_keys(w, cfg, raw: dict, tok: dict) -> None:
    e, lm = cfg.encoder, cfg.lm
    u32, f32 = w.add_uint32, w.add_float32
    enc = P + "encoder."
    act = str((raw.get("audio_config") or {}).get("activation_function", "gelu")).lower()
    for k, v in (("n_layers", e.layers), ("d_model", e.d_model), ("n_heads", e.heads), ("ffn_dim", e.ffn_dim),
                 ("num_mel_bins", e.n_mels), ("downsample_hidden", e.conv_channels), ("output_dim", e.output_dim),
                 ("max_source_positions", MAX_SOURCE_POSITIONS), ("n_window", e.n_window),
                 ("n_window_infer", e.n_window_infer), ("conv_chunksize", CONV_CHUNKSIZE)):
        u32(enc + k, int(v))
    w.add_string(enc + "activation", act)
    d = P + "decoder."
    for k, v in (("n_layers", lm.num_layers), ("hidden_size", lm.hidden_size),
                 ("intermediate_size", lm.intermediate_size), ("n_heads", lm.num_heads),
                 ("n_kv_heads", lm.num_kv_heads), ("head_dim", lm.head_dim)):
        u32(d + k, int(v))
    w.add_string(d + "hidden_act", "silu")
    f32(d + "rms_norm_eps", lm.rms_norm_eps)
    f32(d + "rope_theta", lm.rope_theta)
    for axis, v in zip("thw", mrope_section(lm.head_dim)):
        u32(d + f"rope_mrope_section_{axis}", v)
    w.add_bool(d + "rope_mrope_interleaved", True)
    u32(d + "max_position_embeddings", lm.max_position_embeddings)
    w.add_bool(d + "tie_word_embeddings", lm.tie_word_embeddings)
    u32(d + "vocab_size", lm.vocab_size)
    u32(P + "audio_token_id", cfg.audio_token_id)
    u32(P + "audio_start_token_id", int(tok["audio_start"]))
    u32(P + "audio_end_token_id", int(tok["audio_end"]))


def _add_frontend_keys(w, cfg, feats: dict) -> None:
    fe = cfg.features
    f = "stt.frontend."
    w.add_string(f + "type", "mel")
    for k, v in (("num_mels", fe.n_mels), ("sample_rate", fe.sample_rate), ("n_fft", fe.n_fft),
                 ("win_length", fe.n_fft), ("hop_length", fe.hop)):
        w.add_uint32(f + k, int(v))
    w.add_string(f + "window", "hann_periodic")
    w.add_string(f + "normalize", "per_utterance")
    for k, v in (("dither", 0.0), ("pre_emphasis", 0.0), ("f_min", 0.0), ("f_max", fe.sample_rate / 2)):
        w.add_float32(f + k, v)
    w.add_string(f + "pad_mode", "reflect")
    w.add_bool(f + "center", True)
    w.add_string(f + "mel_norm", "slaney")
    chunk = int(feats.get("chunk_length", 30))
    n_samples = int(feats.get("n_samples", chunk * fe.sample_rate))
    for k, v in (("chunk_length", chunk), ("n_samples", n_samples),
                 ("nb_max_frames", int(feats.get("nb_max_frames", n_samples // fe.hop)))):
        w.add_uint32(f + k, v)


def _add(w, name: str, value, target: int) -> None:
    import gguf

    value = torch.as_tensor(value).detach().float().contiguous()
    if target == quants.F32:
        w.add_tensor(name, value.numpy())
        return
    stored = converter_type(name)
    if name not in FRONTEND_TENSORS:
        value = value.to(torch.bfloat16).float()  # the BF16 checkpoint the converter reads
    if stored == quants.F32:
        w.add_tensor(name, value.numpy())
    elif stored == quants.F16:
        w.add_tensor(name, value.numpy().astype(np.float16))
    else:
        data = quants.quantize(value, stored)
        w.add_tensor(name, data.reshape(*value.shape[:-1], data.shape[-1]).numpy(),
                     raw_dtype=gguf.GGMLQuantizationType(stored))

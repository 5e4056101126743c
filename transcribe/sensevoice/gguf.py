"""SenseVoice as transcribe.cpp's `sensevoice` GGUF files (`scripts/convert-sensevoice.py`; tests/models/gguf/
sensevoice/): reading them (`load_gguf`).

The schema: tensors `frontend.cmvn.{shift,scale}` (am.mvn), `enc.embed.weight` (the prompt rows),
`enc.{encoders0.0, encoders.{i}, tp_encoders.{i}}.{attn.{qkv,out,fsmn}, ffn.{fc1,fc2}, norm_attn, norm_ffn}`,
`enc.after_norm`, `enc.tp_norm`, `ctc.head`; the encoder's shape as `stt.sensevoice.encoder.*`, the prompt rows
as `stt.sensevoice.special.*` (checked to be funasr's, which this package uses), the front end as
`stt.frontend.*` (checked to be the Kaldi fbank + LFR + CMVN this package computes); the SentencePiece
vocabulary as `tokenizer.ggml.{tokens,scores,token_type}` (model "bpe"), rebuilt into a SentencePiece model
(`text.sentencepiece.sentencepiece_proto`; the `<|...|>` tags, which the converter marks as control tokens, as
user-defined pieces so that they decode as their text, as the published vocabulary's do).

Weights: any ggml type `gguf.quants` reads, as float32. Every metadata key is read and implemented, accepted by
name as not changing the computation (`general.*`, `stt.variant`, `stt.capability.*`), or a ModelError names
it; so is a missing or unknown tensor."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import torch

from ..errors import ModelError

ARCH = "sensevoice"
P = "stt.sensevoice."
_BLOCK = [("self_attn.linear_q_k_v", "attn.qkv"), ("self_attn.linear_out", "attn.out"),
          ("feed_forward.w_1", "ffn.fc1"), ("feed_forward.w_2", "ffn.fc2"), ("norm1", "norm_attn"),
          ("norm2", "norm_ffn")]
# llama.cpp's token types
_NORMAL, _UNKNOWN, _CONTROL, _USER, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6


def tensor_names(blocks: int, tp_blocks: int) -> list[tuple[str, str]]:
    """(funasr's name, the file's name) of every weight."""
    out = [("embed.weight", "enc.embed.weight")]
    stacks = [("encoders0", 1), ("encoders", blocks - 1), ("tp_encoders", tp_blocks)]
    for stack, n in stacks:
        for i in range(n):
            a, b = f"encoder.{stack}.{i}.", f"enc.{stack}.{i}."
            out += [(a + x + "." + w, b + y + "." + w) for x, y in _BLOCK for w in ("weight", "bias")]
            out.append((a + "self_attn.fsmn_block.weight", b + "attn.fsmn.weight"))
    for norm in ("after_norm", "tp_norm"):
        out += [(f"encoder.{norm}.{w}", f"enc.{norm}.{w}") for w in ("weight", "bias")]
    out += [("ctc.ctc_lo.weight", "ctc.head.weight"), ("ctc.ctc_lo.bias", "ctc.head.bias")]
    return out


def _config(keys, where: str) -> tuple[dict, dict]:
    """(config.yaml as funasr writes it, frontend_conf) from the file's keys, the fixed ones checked."""
    from .options import EVENT_EMOTION_ROWS, LANGUAGE_ROWS, TEXT_NORM_ROWS

    r, e, f = keys.require, P + "encoder.", "stt.frontend."
    keys.expect(e + "attention_type", ("sanm",))
    keys.expect(e + "normalize_before", (True,))
    enc = {"output_size": r(e + "d_model"), "attention_heads": r(e + "n_heads"), "linear_units": r(e + "d_ff"),
           "num_blocks": r(e + "n_blocks"), "tp_blocks": r(e + "tp_blocks"), "kernel_size": r(e + "kernel_size"),
           "sanm_shfit": r(e + "sanm_shift"), "selfattention_layer_type": "sanm", "normalize_before": True}
    rows = {f"lang_{k}": v for k, v in LANGUAGE_ROWS.items()}
    rows.update({"event_speech": EVENT_EMOTION_ROWS[0], "emotion_neutral": EVENT_EMOTION_ROWS[1],
                 "withitn": TEXT_NORM_ROWS[True], "woitn": TEXT_NORM_ROWS[False]})
    for name, row in rows.items():
        keys.expect(P + "special." + name, (row,))
    for key, want in (("type", "kaldi_fbank_lfr"), ("sample_rate", 16000), ("n_fft", 400), ("win_length", 400),
                      ("hop_length", 160), ("window", "hamming"), ("normalize", "per_feature"), ("dither", 0.0),
                      ("upscale_samples", True), ("snip_edges", True), ("fbank_style", "kaldi_htk")):
        keys.expect(f + key, (want,))
    fe = {"fs": 16000, "window": "hamming", "n_mels": r(f + "num_mels"), "frame_length": 25, "frame_shift": 10,
          "lfr_m": r(f + "lfr_m"), "lfr_n": r(f + "lfr_n")}
    d_input = r(e + "d_input")
    if not isinstance(fe["n_mels"], int) or not isinstance(fe["lfr_m"], int) or d_input != fe["n_mels"] * fe["lfr_m"]:
        raise ModelError(f"{where}: {e}d_input {d_input!r} is not num_mels x lfr_m")
    cfg = {"model": "SenseVoiceSmall", "encoder": "SenseVoiceEncoderSmall", "encoder_conf": enc,
           "frontend": "WavFrontend", "frontend_conf": fe}
    return cfg, fe


def _tokenizer(keys, where: str):
    from ..text.sentencepiece import BPE, SentencePieceTokenizer, sentencepiece_proto

    keys.expect("tokenizer.ggml.model", ("bpe",))
    tokens = keys.require("tokenizer.ggml.tokens")
    scores = keys.require("tokenizer.ggml.scores")
    types = keys.require("tokenizer.ggml.token_type")
    if not (isinstance(tokens, list) and isinstance(scores, list) and isinstance(types, list)
            and len(tokens) == len(scores) == len(types) and tokens):
        raise ModelError(f"{where}: tokenizer.ggml.tokens, scores and token_type are not lists of the same length")
    if not all(isinstance(t, str) and t for t in tokens) or not all(t in (1, 2, 3, 4, 5, 6) for t in types):
        raise ModelError(f"{where}: tokenizer.ggml.tokens / token_type hold values that are not tokens / types")
    tag = re.compile(r"^<\|[^|]+\|>$")
    sp_types = [_USER if k == _CONTROL and tag.match(p) else k for p, k in zip(tokens, types)]
    for k in ("unknown", "blank"):
        keys.expect(f"tokenizer.ggml.{k}_token_id", (0,))  # the CTC blank is <unk>, id 0 (funasr's blank_id)
    for k in ("bos", "eos"):
        v = keys.get(f"tokenizer.ggml.{k}_token_id")
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(tokens)):
            raise ModelError(f"{where}: tokenizer.ggml.{k}_token_id {v!r} is not one of the {len(tokens)} tokens")
    try:
        return SentencePieceTokenizer(sentencepiece_proto(tokens, [float(s) for s in scores], sp_types, BPE))
    except (ValueError, TypeError) as e:
        raise ModelError(f"{where}: the tokenizer cannot be rebuilt ({e})") from None


def read_gguf(path: Path):
    """(config dict, frontend_conf, funasr-named float32 state dict, (shift, scale), tokenizer) of a file."""
    from ..gguf.file import GGUFFile, missing_layers

    where = str(path)
    with GGUFFile(path) as f:
        if f.arch != ARCH:
            raise ModelError(f"{where}: general.architecture is {f.arch!r}, not {ARCH!r}")
        keys = f.keys()
        keys.accept(["general.*", "stt.variant", "stt.capability.*"])
        cfg, fe = _config(keys, where)
        enc = cfg["encoder_conf"]
        for key, prefix, n in (("n_blocks", "enc.encoders.", enc["num_blocks"] - 1 if isinstance(
                enc["num_blocks"], int) else enc["num_blocks"]), ("tp_blocks", "enc.tp_encoders.", enc["tp_blocks"])):
            problem = missing_layers(f, prefix, n)
            if problem:
                raise ModelError(f"{where}: {P}encoder.{key} = {problem}")
        tokenizer = _tokenizer(keys, where)
        keys.finish()
        names = tensor_names(enc["num_blocks"], enc["tp_blocks"])
        known = {g for _, g in names} | {"frontend.cmvn.shift", "frontend.cmvn.scale"}
        unknown = [n for n in f.tensors if n not in known]
        if unknown:
            raise ModelError(f"{where}: tensors this code does not implement: {', '.join(unknown[:6])}")
        missing = [g for g in sorted(known) if g not in f.tensors]
        if missing:
            raise ModelError(f"{where}: tensor {missing[0]} is missing")
        state = {ours: f.tensor(g) for ours, g in names}
        cmvn = (f.tensor("frontend.cmvn.shift").reshape(-1), f.tensor("frontend.cmvn.scale").reshape(-1))
    return cfg, fe, state, cmvn, tokenizer


def load_gguf(path: Path, name: str, device, dtype: Optional[torch.dtype] = None):
    """A `sensevoice` GGUF file -> a SenseVoice recognizer on `device` (the weights read as float32, then placed
    in the dtype asked: `recognizer.place`)."""
    from .config import check_frontend
    from .frontend import SenseVoiceFrontEnd
    from .recognizer import SenseVoiceASR, build_model, place

    if dtype not in (None, torch.float32, torch.bfloat16, torch.int8):
        raise ModelError(f"{name}: SenseVoice models run in float32, bfloat16 or int8 here (asked for {dtype})")
    path = Path(path)
    cfg, fe, state, (shift, scale), tokenizer = read_gguf(path)
    n_mels, lfr_m, lfr_n = check_frontend(fe)
    d_input = n_mels * lfr_m
    if shift.numel() != d_input or scale.numel() != d_input:
        raise ModelError(f"{path}: CMVN of {shift.numel()}/{scale.numel()} values, the model takes {d_input} features")
    model = place(build_model(cfg, state, d_input, str(path)), device, dtype, name)
    return SenseVoiceASR(model, tokenizer, SenseVoiceFrontEnd(shift, scale, n_mels, lfr_m, lfr_n), name, str(device))

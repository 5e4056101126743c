"""Voxtral Realtime as transcribe.cpp's `voxtral_realtime` GGUF files (`scripts/convert-voxtral_realtime.py`, which
reads the transformers layout): reading them (`load_gguf`).

The schema:

- tensors `enc.*` (the stem `enc.conv.{0,1}`, `enc.blocks.{i}.{norm_attn, attn.{q,k,v,out}, norm_ffn,
  ffn.{gate,up,down}}`, `enc.final_norm`), `proj.linear_{1,2}`, `dec.*` (`dec.token_embd`, `dec.output_norm`,
  `dec.blocks.{i}.{norm_attn, norm_ffn, attn.{q,k,v,o}, ffn.{gate,up,down}, ada.linear_{1,2}}`; no head: the
  model's is tied), and three tables the runtime computes from (checked against ours, not used):
  `frontend.mel_filterbank`, `frontend.window` and `dec.time_embed.inv_freq`;
- the config as `stt.voxtral_realtime.{encoder,projector,decoder,time}.*` and `stt.frontend.*`;
- the tokenizer as `tokenizer.ggml.*` (model "gpt2", pre "tekken"): the control tokens (mistral-common's special
  tokens) first, then the tekken pieces in rank order, each as GPT-2's printable form of its bytes; rebuilt into
  an `llm.tekken.TekkenTokenizer` (the file has no split pattern: the published tekken.json's, which decoding
  does not read).

What the file does not hold, and what this reader takes instead (transcribe.cpp's runtime does the same): the
left padding (32 tokens, mistral-common's streaming_n_left_pad_tokens of the published tekken.json) and the
transcription delay (the config's default_num_delay_tokens x 80 ms). Weights: any ggml type `gguf.quants` reads,
dequantized to the dtype asked for (int8: quantized from them as a directory's are).

Every metadata key is read and implemented, accepted by name as not changing the computation (`general.*`,
`stt.variant`, `stt.capability.*`, the decoder's max positions), or a ModelError names it; so is a missing or
unknown tensor."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import torch

from ..errors import ModelError
from ..gguf.hf import f32_value
from ..llm.config import LMConfig
from .config import EncoderConfig, FeatureConfig, StreamLayout, VoxtralRealtimeConfig

ARCH = "voxtral_realtime"
P = "stt.voxtral_realtime."
LEFT_PAD_TOKENS = 32
# the published tekken.json's split pattern (mistral-common's; decoding does not read it)
TEKKEN_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
                  r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3
FRONTEND_TOLERANCE = 1e-6

_ENC_TOP = [("audio_tower.embedder.conv1.weight", "enc.conv.0.weight"),
            ("audio_tower.embedder.conv1.bias", "enc.conv.0.bias"),
            ("audio_tower.embedder.conv2.weight", "enc.conv.1.weight"),
            ("audio_tower.embedder.conv2.bias", "enc.conv.1.bias"),
            ("audio_tower.norm.weight", "enc.final_norm.weight")]
_ENC_BLOCK = [("self_attn_layer_norm.weight", "norm_attn.weight"), ("final_layer_norm.weight", "norm_ffn.weight"),
              ("self_attn.q_proj.weight", "attn.q.weight"), ("self_attn.q_proj.bias", "attn.q.bias"),
              ("self_attn.k_proj.weight", "attn.k.weight"), ("self_attn.v_proj.weight", "attn.v.weight"),
              ("self_attn.v_proj.bias", "attn.v.bias"), ("self_attn.o_proj.weight", "attn.out.weight"),
              ("self_attn.o_proj.bias", "attn.out.bias"), ("mlp.gate_proj.weight", "ffn.gate.weight"),
              ("mlp.up_proj.weight", "ffn.up.weight"), ("mlp.down_proj.weight", "ffn.down.weight"),
              ("mlp.down_proj.bias", "ffn.down.bias")]
_PROJ = [("multi_modal_projector.linear_1.weight", "proj.linear_1.weight"),
         ("multi_modal_projector.linear_2.weight", "proj.linear_2.weight")]
_DEC_TOP = [("language_model.model.embed_tokens.weight", "dec.token_embd.weight"),
            ("language_model.model.norm.weight", "dec.output_norm.weight")]
_DEC_BLOCK = [("input_layernorm.weight", "norm_attn.weight"), ("post_attention_layernorm.weight", "norm_ffn.weight")] \
    + [(f"self_attn.{p}_proj.weight", f"attn.{p}.weight") for p in "qkvo"] \
    + [(f"mlp.{p}_proj.weight", f"ffn.{p}.weight") for p in ("gate", "up", "down")] \
    + [("ada_rms_norm.linear1.weight", "ada.linear_1.weight"), ("ada_rms_norm.linear2.weight", "ada.linear_2.weight")]
TABLES = ("frontend.mel_filterbank", "frontend.window", "dec.time_embed.inv_freq")


def tensor_names(enc_layers: int, dec_layers: int) -> list[tuple[str, str]]:
    """(our checkpoint name, the file's name) of every model tensor (save_pretrained's names, model.py's prefixes)."""
    out = list(_ENC_TOP)
    out += [(f"audio_tower.layers.{i}.{a}", f"enc.blocks.{i}.{b}") for i in range(enc_layers) for a, b in _ENC_BLOCK]
    out += _PROJ + _DEC_TOP
    out += [(f"language_model.model.layers.{i}.{a}", f"dec.blocks.{i}.{b}") for i in range(dec_layers)
            for a, b in _DEC_BLOCK]
    return out


def _tokenizer(keys, where: str):
    from ..llm.tekken import TekkenTokenizer, byte_level_decoder

    keys.expect("tokenizer.ggml.model", ("gpt2",))
    keys.expect("tokenizer.ggml.pre", ("tekken",))
    tokens = keys.require("tokenizer.ggml.tokens")
    types = keys.require("tokenizer.ggml.token_type")
    keys.require("tokenizer.ggml.merges")  # the pieces' ranks are their order: decoding needs no merges
    if not isinstance(tokens, list) or not isinstance(types, list) or len(tokens) != len(types) or not tokens:
        raise ModelError(f"{where}: tokenizer.ggml.tokens and token_type are not lists of the same length")
    n_special = next((i for i, k in enumerate(types) if k != TOKEN_CONTROL), len(types))
    if any(k != TOKEN_NORMAL for k in types[n_special:]):
        raise ModelError(f"{where}: the control tokens must come first, then the normal ones (token types 3, 1)")
    back = byte_level_decoder()
    pieces = []
    for i, t in enumerate(tokens[n_special:], n_special):
        try:
            pieces.append(bytes(back[c] for c in t))
        except (KeyError, TypeError):
            raise ModelError(f"{where}: tokenizer.ggml.tokens[{i}] is not a byte-level piece") from None
    tok = TekkenTokenizer(pieces, [str(t) for t in tokens[:n_special]], TEKKEN_PATTERN, where)
    ids = {}
    for k in ("bos", "eos", "unknown", "padding"):
        v = keys.require(f"tokenizer.ggml.{k}_token_id")
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(tokens):
            raise ModelError(f"{where}: tokenizer.ggml.{k}_token_id {v!r} is not one of the {len(tokens)} tokens")
        ids[k] = v
    keys.expect("tokenizer.ggml.add_bos_token", (True,))
    keys.expect("tokenizer.ggml.add_eos_token", (False,))
    pad = keys.require(P + "streaming_pad_token_id")
    if not tok.has("[STREAMING_PAD]") or tok.token_id("[STREAMING_PAD]") != pad:
        raise ModelError(f"{where}: {P}streaming_pad_token_id {pad!r} is not the tokenizer's [STREAMING_PAD]")
    return tok, ids


def config_from_meta(keys, where: str, bos: int, eos: int) -> VoxtralRealtimeConfig:
    r = keys.require
    e, j, d, t, f = P + "encoder.", P + "projector.", P + "decoder.", P + "time.", "stt.frontend."
    heads = r(e + "n_heads")
    if r(e + "n_kv_heads") != heads:
        raise ModelError(f"{where}: {e}n_kv_heads must equal {e}n_heads (the encoder has full attention)")
    keys.expect(e + "hidden_act", ("silu",))
    keys.get(e + "max_position_embeddings")  # bounds nothing (the rotation is computed for any position)
    enc = EncoderConfig(hidden=r(e + "d_model"), ffn=r(e + "ffn_dim"), layers=r(e + "n_layers"), heads=heads,
                        head_dim=r(e + "head_dim"), n_mels=r(e + "num_mel_bins"),
                        eps=f32_value(r(e + "rms_norm_eps")), rope_theta=f32_value(r(e + "rope_theta")),
                        window=r(e + "sliding_window"))
    downsample = r(j + "downsample_factor")
    if r(j + "input_dim") != enc.hidden * downsample:
        raise ModelError(f"{where}: {j}input_dim is not the encoder's width x downsample_factor")
    keys.expect(j + "hidden_act", ("gelu",))
    per_tok = r(j + "audio_length_per_tok")
    if per_tok != 2 * downsample:
        raise ModelError(f"{where}: {j}audio_length_per_tok {per_tok} must be twice downsample_factor {downsample}")
    keys.expect(d + "hidden_act", ("silu",))
    hidden = r(d + "hidden_size")
    if not r(d + "tie_word_embeddings"):
        raise ModelError(f"{where}: an untied head is not implemented (the converter writes none)")
    lm = LMConfig(model_type="mistral", vocab_size=r(d + "vocab_size"), hidden_size=hidden,
                  intermediate_size=r(d + "intermediate_size"), num_layers=r(d + "n_layers"),
                  num_heads=r(d + "n_heads"), num_kv_heads=r(d + "n_kv_heads"), head_dim=r(d + "head_dim"),
                  rms_norm_eps=f32_value(r(d + "rms_norm_eps")), rope_theta=f32_value(r(d + "rope_theta")),
                  max_position_embeddings=r(d + "max_position_embeddings"), tie_word_embeddings=True)
    keys.expect(t + "embed_theta", (10000.0,))
    keys.expect(t + "embed_dim", (hidden,))
    keys.expect(t + "ada_hidden", (32,))
    for key, want in (("type", "mel"), ("window", "hann_periodic"), ("normalize", "global"), ("dither", 0.0),
                      ("pre_emphasis", 0.0), ("f_min", 0.0), ("f_max", 8000.0), ("pad_mode", "reflect"),
                      ("center", True), ("mel_norm", "slaney")):
        keys.expect(f + key, (want,))
    n_fft = r(f + "n_fft")
    keys.expect(f + "win_length", (n_fft,))
    rate, hop = r(f + "sample_rate"), r(f + "hop_length")
    feats = FeatureConfig(sample_rate=rate, n_mels=r(f + "num_mels"), n_fft=n_fft, hop=hop,
                          log_mel_max=f32_value(r(f + "global_log_mel_max")))
    delay = r(t + "default_num_delay_tokens")
    frame_rate = rate / (per_tok * hop)
    layout = StreamLayout(sample_rate=rate, frame_rate=frame_rate, hop=hop, window=n_fft, n_mels=feats.n_mels,
                          delay_ms=delay * 1000.0 / frame_rate, left_pad_tokens=LEFT_PAD_TOKENS)
    if feats.n_mels != enc.n_mels:
        raise ModelError(f"{where}: {f}num_mels differs from {e}num_mel_bins")
    return VoxtralRealtimeConfig(encoder=enc, lm=lm, lm_window=r(d + "sliding_window"), features=feats, layout=layout,
                                 downsample=downsample, frames_per_token=per_tok, default_delay_tokens=delay,
                                 bos_id=bos, eos_ids=(eos,), pad_id=-1)


def _tables(f, cfg: VoxtralRealtimeConfig, where: str) -> None:
    """The stored front end and time-embedding frequencies must be ours."""
    from .frontend import LogMel

    mel = LogMel(cfg.features)
    half = cfg.lm.hidden_size // 2
    inv = torch.exp(-math.log(10000.0) * torch.arange(half).float() / half)
    for name, want in zip(TABLES, (mel.filters, mel.window, inv)):
        if name not in f.tensors:
            raise ModelError(f"{where}: tensor {name} is missing")
        got = f.tensor(name)
        if tuple(got.shape) != tuple(want.shape):
            raise ModelError(f"{where}: tensor {name} is {tuple(got.shape)}, ours is {tuple(want.shape)}")
        diff = float((got - want.float()).abs().max())
        if not diff <= FRONTEND_TOLERANCE:
            raise ModelError(f"{where}: tensor {name} differs from this package's by {diff:.3g}: not implemented")


def read_gguf(path: Path, dtype: torch.dtype = torch.float32):
    """(VoxtralRealtimeConfig, state under save_pretrained's names in `dtype`, TekkenTokenizer)."""
    from ..gguf.file import GGUFFile, missing_layers

    where = str(path)
    with GGUFFile(path) as f:
        if f.arch != ARCH:
            raise ModelError(f"{where}: general.architecture is {f.arch!r}, not {ARCH!r}")
        keys = f.keys()
        keys.accept(["general.*", "stt.variant", "stt.capability.*"])
        tok, ids = _tokenizer(keys, where)
        cfg = config_from_meta(keys, where, ids["bos"], ids["eos"])
        for key, prefix in (("encoder.n_layers", "enc.blocks."), ("decoder.n_layers", "dec.blocks.")):
            problem = missing_layers(f, prefix, keys.require(P + key))
            if problem:
                raise ModelError(f"{where}: {P}{key} = {problem}")
        _tables(f, cfg, where)
        keys.finish()
        names = tensor_names(cfg.encoder.layers, cfg.lm.num_layers)
        known = {g for _, g in names} | set(TABLES)
        unknown = [n for n in f.tensors if n not in known]
        if unknown:
            raise ModelError(f"{where}: tensors this code does not implement: {', '.join(unknown[:6])}")
        state = {}
        for ours, g in names:
            if g not in f.tensors:
                raise ModelError(f"{where}: tensor {g} is missing (our {ours})")
            t = f.tensor(g)
            state[ours] = t if t.dtype == dtype else t.to(dtype)
    return cfg, state, tok


def load_gguf(path: Path, name: str, device, dtype: Optional[torch.dtype] = None):
    """A `voxtral_realtime` GGUF file -> a recognizer on `device` (dtype None: float32; int8 as a directory's)."""
    from ..llm.model import int8_compute
    from .model import VoxtralRealtimeModel, split_tensors
    from .recognizer import VoxtralRealtimeASR

    path = Path(path)
    int8 = dtype == torch.int8
    work = torch.float32 if dtype is None or int8 else dtype
    cfg, state, tok = read_gguf(path, work)
    if len(tok) > cfg.lm.vocab_size:
        raise ModelError(f"{path}: the tokenizer has {len(tok)} tokens, more than the model's {cfg.lm.vocab_size}")
    parts = split_tensors(state, cfg, str(path))
    del state
    model = VoxtralRealtimeModel.build(cfg, parts, str(path), work, int8_compute(device) if int8 else None)
    model.eval().to(device)
    return VoxtralRealtimeASR(model, tok, name, str(device))

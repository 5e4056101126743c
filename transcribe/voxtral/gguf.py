"""Voxtral as transcribe.cpp's `voxtral` GGUF files (`scripts/convert-voxtral.py`, 0.2.1;
tests/models/gguf/voxtral/README.md): reading them (`load_gguf`).

The schema:

- tensors `enc.*` (the Whisper encoder: `enc.conv.{0,1}`, `enc.pos_emb`, `enc.blocks.{i}.{norm_attn, attn.{q,k,v,
  out}, norm_ffn, ffn.{fc1,fc2}}`, `enc.ln_post`), `proj.linear_{1,2}`, `dec.*` (the Llama LM: `dec.token_embd`,
  `dec.output_norm`, `dec.output` (the untied head), `dec.blocks.{i}.{norm_attn, norm_ffn, attn.{q,k,v,o},
  ffn.{gate,up,down}}`) and the front end's `frontend.mel_filterbank` [n_mels, 201] and `frontend.window`
  [400] (compared with ours, not used);
- the config as `stt.voxtral.{encoder,projector,decoder}.*`, `stt.voxtral.audio_token_id` and `stt.frontend.*`,
  rebuilt here into the config.json and preprocessor_config.json that `config.parse_config` checks (so a file is
  held to the same limits as a checkpoint directory);
- the tokenizer as `tokenizer.ggml.*` (model "gpt2", pre "tekken": llama.cpp's spelling of a tekken file): the
  control tokens first (tekken's special tokens, by name), then the byte-level BPE tokens in rank order (the
  first 256 the bytes). The ranks are that order, as tekken's are; the file's merges (rebuilt by the converter
  from the ranks) are not needed and not read; the split pattern is tekken's (`llm.tekken.PATTERN`).

What the file does not hold, and what this reader takes instead: generation_config.json (the stop token is
tokenizer.ggml.eos_token_id, max_new_tokens `config.DEFAULT_MAX_NEW_TOKENS`, greedy).

Weights: any ggml type `gguf.quants` reads (the converter writes BF16, F16 convolutions, F32 norms, biases and
the position table), dequantized to the dtype asked (None: float32; int8: float32, then quantized as a
directory's int8 model is). Every metadata key is read and implemented, accepted by name as not changing the
computation (`general.*`, `stt.variant`, `stt.capability.*`, `stt.translation.*`), or a ModelError names it;
so is a missing or unknown tensor."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from ..errors import ModelError
from ..gguf.hf import f32_value

ARCH = "voxtral"
P = "stt.voxtral."
FRONTEND_TOLERANCE = 1e-6
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3
FRONTEND_TENSORS = ("frontend.mel_filterbank", "frontend.window")

# (the checkpoint's name, the file's name)
_ENC_TOP = [("audio_tower.conv1.weight", "enc.conv.0.weight"), ("audio_tower.conv1.bias", "enc.conv.0.bias"),
            ("audio_tower.conv2.weight", "enc.conv.1.weight"), ("audio_tower.conv2.bias", "enc.conv.1.bias"),
            ("audio_tower.embed_positions.weight", "enc.pos_emb.weight"),
            ("audio_tower.layer_norm.weight", "enc.ln_post.weight"), ("audio_tower.layer_norm.bias", "enc.ln_post.bias"),
            ("multi_modal_projector.linear_1.weight", "proj.linear_1.weight"),
            ("multi_modal_projector.linear_2.weight", "proj.linear_2.weight")]
_ENC_BLOCK = [(f"self_attn_layer_norm.{w}", f"norm_attn.{w}") for w in ("weight", "bias")] + \
    [("self_attn.q_proj.weight", "attn.q.weight"), ("self_attn.q_proj.bias", "attn.q.bias"),
     ("self_attn.k_proj.weight", "attn.k.weight"), ("self_attn.v_proj.weight", "attn.v.weight"),
     ("self_attn.v_proj.bias", "attn.v.bias"), ("self_attn.out_proj.weight", "attn.out.weight"),
     ("self_attn.out_proj.bias", "attn.out.bias")] + \
    [(f"final_layer_norm.{w}", f"norm_ffn.{w}") for w in ("weight", "bias")] + \
    [(f"{a}.{w}", f"ffn.{a}.{w}") for a in ("fc1", "fc2") for w in ("weight", "bias")]
_DEC_TOP = [("language_model.model.embed_tokens.weight", "dec.token_embd.weight"),
            ("language_model.model.norm.weight", "dec.output_norm.weight")]
_DEC_BLOCK = [("input_layernorm.weight", "norm_attn.weight"), ("post_attention_layernorm.weight", "norm_ffn.weight")] \
    + [(f"self_attn.{p}_proj.weight", f"attn.{p}.weight") for p in "qkvo"] \
    + [(f"mlp.{p}_proj.weight", f"ffn.{p}.weight") for p in ("gate", "up", "down")]


def tensor_names(enc_layers: int, dec_layers: int, tied: bool) -> list[tuple[str, str]]:
    out = list(_ENC_TOP)
    for i in range(enc_layers):
        out += [(f"audio_tower.layers.{i}.{a}", f"enc.blocks.{i}.{b}") for a, b in _ENC_BLOCK]
    out += list(_DEC_TOP)
    if not tied:
        out.append(("language_model.lm_head.weight", "dec.output.weight"))
    for i in range(dec_layers):
        out += [(f"language_model.model.layers.{i}.{a}", f"dec.blocks.{i}.{b}") for a, b in _DEC_BLOCK]
    return out


def config_from_meta(keys, where: str) -> tuple[dict, dict]:
    """(config.json, preprocessor_config.json) the file's keys were written from."""
    r = keys.require
    e, pr, d, f = P + "encoder.", P + "projector.", P + "decoder.", "stt.frontend."
    d_model, heads = r(e + "d_model"), r(e + "n_heads")
    enc = {"model_type": "voxtral_encoder", "num_hidden_layers": r(e + "n_layers"), "hidden_size": d_model,
           "num_attention_heads": heads, "head_dim": r(e + "head_dim"), "intermediate_size": r(e + "ffn_dim"),
           "num_mel_bins": r(e + "num_mel_bins"), "max_source_positions": r(e + "max_source_positions"),
           "activation_function": r(e + "activation")}
    down, width = r(pr + "downsample_factor"), r(pr + "input_dim")
    if not isinstance(d_model, int) or down != 4 or width != 4 * d_model or width != enc["intermediate_size"]:
        raise ModelError(f"{where}: {pr}downsample_factor {down!r} / input_dim {width!r}: only the published "
                         f"stacking of 4 encoder states (input_dim = 4 * d_model = ffn_dim) is implemented")
    tie = r(d + "tie_word_embeddings")
    text = {"model_type": "llama", "num_hidden_layers": r(d + "n_layers"), "hidden_size": r(d + "hidden_size"),
            "intermediate_size": r(d + "intermediate_size"), "num_attention_heads": r(d + "n_heads"),
            "num_key_value_heads": r(d + "n_kv_heads"), "head_dim": r(d + "head_dim"),
            "hidden_act": r(d + "hidden_act"), "rms_norm_eps": f32_value(r(d + "rms_norm_eps")),
            "rope_theta": f32_value(r(d + "rope_theta")), "max_position_embeddings": r(d + "max_position_embeddings"),
            "tie_word_embeddings": tie, "vocab_size": r(d + "vocab_size")}
    cfg = {"model_type": "voxtral", "architectures": ["VoxtralForConditionalGeneration"], "audio_config": enc,
           "text_config": text, "audio_token_id": r(P + "audio_token_id"),
           "projector_hidden_act": r(pr + "hidden_act"), "tie_word_embeddings": tie}
    for key, want in (("type", "mel"), ("window", "hann_periodic"), ("normalize", "per_utterance"),
                      ("pre_emphasis", 0.0), ("f_min", 0.0), ("pad_mode", "reflect"), ("center", True),
                      ("mel_norm", "slaney")):
        keys.expect(f + key, (want,))
    rate, n_fft = r(f + "sample_rate"), r(f + "n_fft")
    keys.expect(f + "f_max", (rate / 2,))
    keys.expect(f + "win_length", (n_fft,))
    feats = {"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": r(f + "num_mels"),
             "sampling_rate": rate, "hop_length": r(f + "hop_length"), "n_fft": n_fft, "dither": r(f + "dither"),
             "chunk_length": r(f + "chunk_length"), "n_samples": r(f + "n_samples"),
             "nb_max_frames": r(f + "nb_max_frames")}
    return cfg, feats


def _tokenizer(keys, where: str):
    """(TekkenTokenizer, {bos, eos, unknown, padding} ids) of the file's tokenizer.* keys."""
    from ..llm.tekken import PATTERN, TekkenTokenizer, byte_level_decoder

    keys.expect("tokenizer.ggml.model", ("gpt2",))
    keys.expect("tokenizer.ggml.pre", ("tekken",))
    keys.expect("tokenizer.ggml.add_bos_token", (True,))  # the prompt starts with <s> (prompt.py)
    keys.expect("tokenizer.ggml.add_eos_token", (False,))
    tokens = keys.require("tokenizer.ggml.tokens")
    types = keys.require("tokenizer.ggml.token_type")
    if not isinstance(tokens, list) or not isinstance(types, list) or len(tokens) != len(types) or not tokens:
        raise ModelError(f"{where}: tokenizer.ggml.tokens and token_type are not lists of the same length")
    if not isinstance(keys.require("tokenizer.ggml.merges"), list):
        raise ModelError(f"{where}: tokenizer.ggml.merges is not a list")
    n_special = next((i for i, k in enumerate(types) if k != TOKEN_CONTROL), len(types))
    if any(k != TOKEN_NORMAL for k in types[n_special:]):
        raise ModelError(f"{where}: tokenizer.ggml.token_type is not the control tokens then normal ones (tekken's "
                         "layout)")
    decoder = byte_level_decoder()
    pieces = []
    for i, t in enumerate(tokens[n_special:], n_special):
        try:
            pieces.append(bytes(decoder[c] for c in t))
        except (KeyError, TypeError):
            raise ModelError(f"{where}: tokenizer.ggml.tokens[{i}] is not a byte-level token") from None
    specials = tokens[:n_special]
    if not all(isinstance(s, str) for s in specials):
        raise ModelError(f"{where}: a control token is not text")
    tok = TekkenTokenizer(pieces, specials, PATTERN, where)
    ids = {}
    for k in ("bos", "eos", "unknown", "padding"):
        v = keys.get(f"tokenizer.ggml.{k}_token_id")
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(tokens)):
            raise ModelError(f"{where}: tokenizer.ggml.{k}_token_id {v!r} is not one of the {len(tokens)} tokens")
        ids[k] = v
    if ids["bos"] != tok.token_id("<s>"):
        raise ModelError(f"{where}: tokenizer.ggml.bos_token_id {ids['bos']!r} is not <s> ({tok.token_id('<s>')})")
    if ids["eos"] is None:
        raise ModelError(f"{where}: tokenizer.ggml.eos_token_id is missing: no stop token")
    return tok, ids


def _frontend(f, cfg, where: str) -> None:
    """The stored front end must be ours (frontend.py): filterbank and window within FRONTEND_TOLERANCE."""
    from .frontend import LogMel

    ours = LogMel(cfg.features)
    window = torch.hann_window(cfg.features.n_fft, periodic=True)
    for name, want in (("frontend.mel_filterbank", ours.filters), ("frontend.window", window)):
        if name not in f.tensors:
            raise ModelError(f"{where}: tensor {name} is missing")
        got = f.tensor(name)
        if tuple(got.shape) != tuple(want.shape):
            raise ModelError(f"{where}: tensor {name} is {tuple(got.shape)}, our front end's is {tuple(want.shape)}")
        diff = float((got - want.float()).abs().max())
        if not diff <= FRONTEND_TOLERANCE:
            raise ModelError(f"{where}: tensor {name} differs from this package's front end by {diff:.3g} "
                             f"(more than {FRONTEND_TOLERANCE}): a different front end is not implemented")


def read_gguf(path: Path, dtype: torch.dtype = torch.float32):
    """(VoxtralConfig, tensors under the checkpoint's names in `dtype`, TekkenTokenizer, extras) of a `voxtral`
    GGUF file; extras: `token_ids`, `identity` (general.* and stt.variant), `config` / `features` (the rebuilt
    config.json and preprocessor settings)."""
    from ..gguf.file import GGUFFile, missing_layers
    from .config import DEFAULT_MAX_NEW_TOKENS, parse_config

    where = str(path)
    with GGUFFile(path) as f:
        if f.arch != ARCH:
            raise ModelError(f"{where}: general.architecture is {f.arch!r}, not {ARCH!r}")
        keys = f.keys()
        keys.accept(["general.*", "stt.variant", "stt.capability.*", "stt.translation.*"])
        raw, feats = config_from_meta(keys, where)
        for key, prefix in (("encoder.n_layers", "enc.blocks."), ("decoder.n_layers", "dec.blocks.")):
            problem = missing_layers(f, prefix, keys.require(P + key))
            if problem:
                raise ModelError(f"{where}: {P}{key} = {problem}")
        tokenizer, ids = _tokenizer(keys, where)
        gen = {"eos_token_id": ids["eos"], "max_new_tokens": DEFAULT_MAX_NEW_TOKENS}
        try:
            cfg = parse_config(raw, feats, gen, where)
        except ModelError as e:
            msg = str(e)
            raise ModelError(msg if msg.startswith(where) else f"{where}: {msg}") from None
        _frontend(f, cfg, where)
        keys.finish()
        names = tensor_names(cfg.encoder.layers, cfg.lm.num_layers, cfg.lm.tie_word_embeddings)
        known = {g for _, g in names} | set(FRONTEND_TENSORS)
        unknown = [n for n in f.tensors if n not in known]
        if unknown:
            raise ModelError(f"{where}: tensor{'s' if len(unknown) > 1 else ''} this code does not implement: "
                             f"{', '.join(unknown[:6])}")
        state: dict[str, torch.Tensor] = {}
        for ours, g in names:
            if g not in f.tensors:
                raise ModelError(f"{where}: tensor {g} is missing (our {ours})")
            t = f.tensor(g)
            state[ours] = t if t.dtype == dtype or ours.endswith("embed_positions.weight") else t.to(dtype)
        meta = {k: v for k, v in f.meta.items() if k.startswith(("general.", "stt.variant"))}
    return cfg, state, tokenizer, {"token_ids": ids, "identity": meta, "config": raw, "features": feats}


def load_gguf(path: Path, name: str, device, dtype: Optional[torch.dtype] = None):
    """A `voxtral` GGUF file -> a Voxtral recognizer on `device`."""
    from ..llm.model import int8_compute
    from .model import VoxtralModel
    from .recognizer import Voxtral

    path = Path(path)
    int8 = dtype == torch.int8
    work = torch.float32 if dtype is None or int8 else dtype
    cfg, state, tokenizer, _ = read_gguf(path, work)
    if len(tokenizer) > cfg.lm.vocab_size:
        raise ModelError(f"{path}: the tokenizer has {len(tokenizer)} tokens, more than the language model's "
                         f"{cfg.lm.vocab_size} embedding rows")
    model = VoxtralModel.from_tensors(state, cfg, str(path), work, int8_compute(device) if int8 else None)
    model.eval().to(device)
    return Voxtral(model, tokenizer, name, str(device), str(path))

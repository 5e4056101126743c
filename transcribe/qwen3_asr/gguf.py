"""Qwen3-ASR as transcribe.cpp's `qwen3_asr` GGUF files (`scripts/convert-qwen3_asr.py`, 0.2.1, which reads Qwen's
original layout; tests/models/gguf/qwen3_asr/README.md): reading them (`load_gguf`).

The schema:

- tensors `enc.*` (the audio tower: `enc.conv.{0,1,2}` = conv2d1..3, `enc.conv_out`, `enc.blocks.{i}.{norm_attn,
  attn.{q,k,v,out}, norm_ffn, ffn.{fc1,fc2}}`, `enc.ln_post`, and the projector as `enc.proj1` / `enc.proj2`),
  `dec.*` (the Qwen3 LM: `dec.token_embd`, `dec.output_norm`, `dec.blocks.{i}.{norm_attn, norm_ffn,
  attn.{q,k,v,o,q_norm,k_norm}, ffn.{gate,up,down}}`; the converter writes no head: a tied one is the
  embedding), and the front end's `frontend.mel_filterbank` [n_mels, 201] and `frontend.window` [400]
  (compared with ours, not used);
- the config as `stt.qwen3_asr.{encoder,decoder}.*`, `stt.qwen3_asr.audio_{,start_,end_}token_id` and
  `stt.frontend.*`, rebuilt here into the -hf layout's config.json and feature-extractor settings that
  `config.parse_config` checks (so a file is held to the same limits as a checkpoint directory);
- the tokenizer as `tokenizer.ggml.*` (model "gpt2": byte-level BPE, `pre` "qwen2": Qwen2's split, single
  digits), rebuilt into an `llm.tokenizer.LLMTokenizer` (`llm.gguf_tokenizer`); the chat template as `tokenizer.chat_template`
  (recognised by `prompt.check_template`, never run).

What the file does not hold, and what this reader takes instead:

- the added tokens as such: the converter writes every token with type 1 (normal) or 3 (control, the special
  ones); the tokens from the first control token on (Qwen's added tokens follow the BPE pieces: `<|endoftext|>`
  first) are read as added tokens, special when control (`<asr_text>` stays an unsplit, non-special token, as
  in the -hf tokenizer.json); the converter's fillers for ids without a token (`<|unused_{i}|>`) are plain
  vocabulary entries; the normalizer is Qwen2's NFC;
- generation_config.json: the stop tokens are tokenizer.ggml.eos_token_id (`<|im_end|>`) and `<|endoftext|>`
  (the published generation_config's pair), max_new_tokens DEFAULT_MAX_NEW_TOKENS, greedy;
- the M-RoPE settings (`rope_mrope_section_{t,h,w}`, `rope_mrope_interleaved`): with text-only positions
  (t = h = w, the only positions of an ASR prompt) M-RoPE is plain RoPE whenever the three parts cover the
  head's head_dim / 2 frequencies, which is required; `max_source_positions` (the original sinusoid table's
  rows: only the first chunk_positions are used, so at least that many are required) and `conv_chunksize`
  (how many chunks the original convolves at once) change nothing.

Weights: F32, F16, BF16 and Q8_0 (any ggml type `gguf.quants` reads, dequantized). A Q8_0 file loaded with dtype
None keeps its Q8_0 matrices compressed (`Q8_0_DEFAULT`: Q8Linear, the file's blocks bit for bit, dequantized
exactly at each call; the linear layers the quantizer leaves in another type beside them as HalfLinear; the
embedding, convolutions, norms and biases float32). dtype int8: every linear layer of the encoder, projector and
LM as Int8Linear straight from the file's bytes (as a directory's int8: the embedding and a tied head float32).
Other dtypes dequantize everything.

Every metadata key is read and implemented, accepted by name as not changing the computation (`general.*`,
`stt.variant`, `stt.capability.*`), or a ModelError names it; so is a missing or unknown tensor.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import torch

from ..errors import ModelError
from ..gguf.hf import f32_value

ARCH = "qwen3_asr"
P = "stt.qwen3_asr."
Q8_0_DEFAULT = True
# Largest absolute difference allowed between the stored filterbank / window and ours (librosa's Slaney
# filterbank and numpy's periodic Hann differ from ours by float32 rounding).
FRONTEND_TOLERANCE = 1e-6
ENDOFTEXT = "<|endoftext|>"

# (our name, the file's name): the -hf checkpoint's names (model.py's prefixes)
_ENC_TOP = [(f"model.audio_tower.conv2d{i + 1}.{w}", f"enc.conv.{i}.{w}") for i in range(3)
            for w in ("weight", "bias")] + \
    [("model.audio_tower.conv_out.weight", "enc.conv_out.weight"),
     ("model.audio_tower.ln_post.weight", "enc.ln_post.weight"),
     ("model.audio_tower.ln_post.bias", "enc.ln_post.bias")] + \
    [(f"model.multi_modal_projector.linear_{i}.{w}", f"enc.proj{i}.{w}") for i in (1, 2) for w in ("weight", "bias")]
_ENC_BLOCK = [(f"self_attn_layer_norm.{w}", f"norm_attn.{w}") for w in ("weight", "bias")] + \
    [(f"self_attn.{a}_proj.{w}", f"attn.{b}.{w}") for a, b in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "out"))
     for w in ("weight", "bias")] + \
    [(f"final_layer_norm.{w}", f"norm_ffn.{w}") for w in ("weight", "bias")] + \
    [(f"{a}.{w}", f"ffn.{a}.{w}") for a in ("fc1", "fc2") for w in ("weight", "bias")]
_DEC_TOP = [("model.language_model.embed_tokens.weight", "dec.token_embd.weight"),
            ("model.language_model.norm.weight", "dec.output_norm.weight")]
_DEC_BLOCK = [("input_layernorm.weight", "norm_attn.weight"),
              ("post_attention_layernorm.weight", "norm_ffn.weight")] + \
    [(f"self_attn.{p}_proj.weight", f"attn.{p}.weight") for p in "qkvo"] + \
    [("self_attn.q_norm.weight", "attn.q_norm.weight"), ("self_attn.k_norm.weight", "attn.k_norm.weight")] + \
    [(f"mlp.{p}_proj.weight", f"ffn.{p}.weight") for p in ("gate", "up", "down")]
FRONTEND_TENSORS = ("frontend.mel_filterbank", "frontend.window")
# The linear layers' weights (kept compressed by a Q8_0 file's default and by dtype int8): every nn.Linear of
# the encoder, the projector and the LM's blocks (an untied head too); not the embedding.
_LINEAR = re.compile(r"^(model\.audio_tower\.(conv_out|layers\.\d+\.(self_attn\.(q|k|v|out)_proj|fc1|fc2))"
                     r"|model\.multi_modal_projector\.linear_[12]"
                     r"|model\.language_model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)"
                     r"|lm_head)\.weight$")


def tensor_names(enc_layers: int, dec_layers: int, tied: bool) -> list[tuple[str, str]]:
    """(our name, the file's name) of every model tensor, in the converter's order (the front end's two tensors
    come first in a file and are not listed). An untied head would be `dec.output.weight` (llama.cpp's name; the
    converter writes none)."""
    out = list(_ENC_TOP)
    for i in range(enc_layers):
        out += [(f"model.audio_tower.layers.{i}.{a}", f"enc.blocks.{i}.{b}") for a, b in _ENC_BLOCK]
    out += list(_DEC_TOP)
    if not tied:
        out.append(("lm_head.weight", "dec.output.weight"))
    for i in range(dec_layers):
        out += [(f"model.language_model.layers.{i}.{a}", f"dec.blocks.{i}.{b}") for a, b in _DEC_BLOCK]
    return out


def module_name(ours: str) -> str:
    """A -hf tensor name -> its parameter's name in `Qwen3ASRModel` (audio_tower, multi_modal_projector,
    language_model)."""
    return "language_model.lm_head.weight" if ours == "lm_head.weight" else ours[len("model."):]




# ------------------------------------------------------------------------------------------------
# Config


def config_from_meta(keys, where: str) -> tuple[dict, dict]:
    """(config.json in the -hf layout, the feature extractor's settings) the file's keys were written from."""
    from .config import post_cnn

    r = keys.require
    e, d, f = P + "encoder.", P + "decoder.", "stt.frontend."
    n_window = r(e + "n_window")
    chunk_positions = post_cnn(2 * n_window) if isinstance(n_window, int) and n_window > 0 else 0
    rows = r(e + "max_source_positions")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < chunk_positions:
        raise ModelError(f"{where}: {e}max_source_positions {rows!r} is fewer than the {chunk_positions} positions "
                         "of a chunk")
    chunks = r(e + "conv_chunksize")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ModelError(f"{where}: {e}conv_chunksize {chunks!r} is not a whole number >= 1")
    enc = {"model_type": "qwen3_asr_encoder", "encoder_layers": r(e + "n_layers"), "d_model": r(e + "d_model"),
           "encoder_attention_heads": r(e + "n_heads"), "encoder_ffn_dim": r(e + "ffn_dim"),
           "num_mel_bins": r(e + "num_mel_bins"), "downsample_hidden_size": r(e + "downsample_hidden"),
           "output_dim": r(e + "output_dim"), "n_window": n_window, "n_window_infer": r(e + "n_window_infer"),
           "activation_function": r(e + "activation"), "max_position_embeddings": chunk_positions}
    head_dim = r(d + "head_dim")
    section = [r(d + f"rope_mrope_section_{a}") for a in "thw"]
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in section) or \
            not isinstance(head_dim, int) or 2 * sum(section) != head_dim:
        raise ModelError(f"{where}: the M-RoPE section {section} does not cover head_dim {head_dim!r} / 2 "
                         "frequencies: only text-only positions (plain RoPE) are implemented")
    if not isinstance(r(d + "rope_mrope_interleaved"), bool):
        raise ModelError(f"{where}: {d}rope_mrope_interleaved is not true or false")
    tie = r(d + "tie_word_embeddings")
    text = {"model_type": "qwen3", "num_hidden_layers": r(d + "n_layers"), "hidden_size": r(d + "hidden_size"),
            "intermediate_size": r(d + "intermediate_size"), "num_attention_heads": r(d + "n_heads"),
            "num_key_value_heads": r(d + "n_kv_heads"), "head_dim": head_dim, "hidden_act": r(d + "hidden_act"),
            "rms_norm_eps": f32_value(r(d + "rms_norm_eps")),
            "rope_parameters": {"rope_type": "default", "rope_theta": f32_value(r(d + "rope_theta"))},
            "max_position_embeddings": r(d + "max_position_embeddings"), "tie_word_embeddings": tie,
            "vocab_size": r(d + "vocab_size")}
    cfg = {"model_type": "qwen3_asr", "architectures": ["Qwen3ASRForConditionalGeneration"], "audio_config": enc,
           "text_config": text, "audio_token_id": r(P + "audio_token_id"), "tie_word_embeddings": tie}
    # the front end: Qwen3-ASR's (Whisper's) log-mel; anything else is refused
    for key, want in (("type", "mel"), ("win_length", 400), ("window", "hann_periodic"),
                      ("normalize", "per_utterance"), ("pre_emphasis", 0.0), ("f_min", 0.0), ("pad_mode", "reflect"),
                      ("center", True), ("mel_norm", "slaney")):
        keys.expect(f + key, (want,))
    rate = r(f + "sample_rate")
    keys.expect(f + "f_max", (rate / 2,))
    feats = {"feature_extractor_type": "Qwen3ASRFeatureExtractor", "feature_size": r(f + "num_mels"),
             "sampling_rate": rate, "hop_length": r(f + "hop_length"), "n_fft": r(f + "n_fft"),
             "dither": r(f + "dither"), "n_window": n_window,
             # Whisper's 30 s padding settings: the Qwen3-ASR extractor carries them too and never pads to them
             "chunk_length": r(f + "chunk_length"), "n_samples": r(f + "n_samples"),
             "nb_max_frames": r(f + "nb_max_frames")}
    return cfg, feats


def _frontend(f, cfg, where: str) -> None:
    """The stored front end must be ours (frontend.py): filterbank and window within FRONTEND_TOLERANCE."""
    from .frontend import LogMel

    ours = LogMel(cfg.features)
    for name, want in (("frontend.mel_filterbank", ours.filters), ("frontend.window", ours.window)):
        if name not in f.tensors:
            raise ModelError(f"{where}: tensor {name} is missing")
        got = f.tensor(name)
        if tuple(got.shape) != tuple(want.shape):
            raise ModelError(f"{where}: tensor {name} is {tuple(got.shape)}, our front end's is {tuple(want.shape)}")
        diff = float((got - want.float()).abs().max())
        if not diff <= FRONTEND_TOLERANCE:
            raise ModelError(f"{where}: tensor {name} differs from this package's front end by {diff:.3g} "
                             f"(more than {FRONTEND_TOLERANCE}): a different front end is not implemented")


# ------------------------------------------------------------------------------------------------
# Tokenizer


def _tokenizer(keys, where: str):
    """(LLMTokenizer, {bos, eos, padding} ids) of the file's tokenizer.* keys."""
    from ..llm.gguf_tokenizer import qwen2_tokenizer

    keys.expect("tokenizer.ggml.model", ("gpt2",))
    keys.expect("tokenizer.ggml.pre", ("qwen2",))
    tokens = keys.require("tokenizer.ggml.tokens")
    types = keys.require("tokenizer.ggml.token_type")
    merges = keys.require("tokenizer.ggml.merges")
    if not isinstance(tokens, list) or not isinstance(types, list) or len(tokens) != len(types) or not tokens:
        raise ModelError(f"{where}: tokenizer.ggml.tokens and token_type are not lists of the same length")
    if not isinstance(merges, list):
        raise ModelError(f"{where}: tokenizer.ggml.merges is not a list")
    keys.expect("tokenizer.ggml.add_bos_token", (False,))  # the prompt has no BOS (prompt.py)
    if keys.get("tokenizer.ggml.add_eos_token", False) is not False:
        raise ModelError(f"{where}: tokenizer.ggml.add_eos_token true is not implemented")
    ids = {}
    for k in ("bos", "eos", "padding"):
        v = keys.get(f"tokenizer.ggml.{k}_token_id")
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(tokens)):
            raise ModelError(f"{where}: tokenizer.ggml.{k}_token_id {v!r} is not one of the {len(tokens)} tokens")
        ids[k] = v
    template = keys.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise ModelError(f"{where}: tokenizer.chat_template is not text")
    # transformers' special set: the added tokens marked special and the named ones (eos / pad / bos)
    named = {v for v in ids.values() if v is not None}
    tok = qwen2_tokenizer(tokens, types, merges, where, special=named, chat_template=template)
    return tok, ids


# ------------------------------------------------------------------------------------------------
# Loading


def read_gguf(path: Path, dtype: torch.dtype = torch.float32, int8: Optional[str] = None):
    """(Qwen3ASRConfig, state under the -hf checkpoint's names in `dtype`, LLMTokenizer, extras) of a
    `qwen3_asr` GGUF file; extras: `token_ids` (bos / eos / padding), `identity` (general.* and stt.variant),
    `int8` (the `gguf.int8.Int8Rows` of the weights read compressed, or None), `config` / `features` (the
    rebuilt config.json and feature-extractor settings), `template` (the chat template's text or None).

    int8 "auto": "blocks" when the file stores any linear layer's weight as Q8_0, else None; "blocks": those
    weights as Q8_0 blocks (Q8Linear) or, stored otherwise, float16 (HalfLinear); "all": every one as int8 rows
    (Int8Linear). Such weights are stand-ins of no memory in the state until `Int8Rows.adopt`."""
    from ..gguf import quants
    from ..gguf.file import GGUFFile, missing_layers
    from ..gguf.int8 import Int8Rows
    from .config import DEFAULT_MAX_NEW_TOKENS, parse_config

    if int8 not in (None, "auto", "all", "blocks"):
        raise ValueError(f"int8 is None, 'auto', 'all' or 'blocks', not {int8!r}")
    where = str(path)
    with GGUFFile(path) as f:
        if f.arch != ARCH:
            raise ModelError(f"{where}: general.architecture is {f.arch!r}, not {ARCH!r}")
        keys = f.keys()
        keys.accept(["general.*", "stt.variant", "stt.capability.*"])
        raw, feats = config_from_meta(keys, where)
        for key, prefix in (("encoder.n_layers", "enc.blocks."), ("decoder.n_layers", "dec.blocks.")):
            problem = missing_layers(f, prefix, keys.require(P + key))
            if problem:
                raise ModelError(f"{where}: {P}{key} = {problem}")
        tokenizer, ids = _tokenizer(keys, where)
        if ids["eos"] is None:
            raise ModelError(f"{where}: tokenizer.ggml.eos_token_id is missing: no stop token")
        stop = [ids["eos"]]
        if tokenizer.has(ENDOFTEXT) and tokenizer.token_id(ENDOFTEXT) not in stop:
            stop.insert(0, tokenizer.token_id(ENDOFTEXT))
        gen = {"eos_token_id": stop, "max_new_tokens": DEFAULT_MAX_NEW_TOKENS}
        try:
            cfg = parse_config(raw, feats, gen, where)
        except ModelError as e:
            msg = str(e)
            raise ModelError(msg if msg.startswith(where) else f"{where}: {msg}") from None
        for key, token in (("audio_start_token_id", "<|audio_start|>"), ("audio_end_token_id", "<|audio_end|>")):
            value = keys.require(P + key)
            if not tokenizer.has(token) or value != tokenizer.token_id(token):
                raise ModelError(f"{where}: {P}{key} {value!r} is not the tokenizer's {token}")
        _frontend(f, cfg, where)
        keys.finish()

        names = tensor_names(cfg.encoder.layers, cfg.lm.num_layers, cfg.lm.tie_word_embeddings)
        known = {g for _, g in names} | set(FRONTEND_TENSORS)
        unknown = [n for n in f.tensors if n not in known]
        if unknown:
            raise ModelError(f"{where}: tensor{'s' if len(unknown) > 1 else ''} this code does not implement: "
                             f"{', '.join(unknown[:6])}")
        if int8 == "auto":
            stored = {f.tensors[g].qtype for ours, g in names if g in f.tensors and _LINEAR.match(ours)}
            int8 = "blocks" if quants.Q8_0 in stored else None
        if int8 is not None:
            dtype = torch.float32  # an int8 model's other weights
        rows = Int8Rows() if int8 is not None else None
        state: dict[str, torch.Tensor] = {}
        for ours, g in names:
            if g not in f.tensors:
                raise ModelError(f"{where}: tensor {g} is missing (our {ours})")
            if rows is not None and _LINEAR.match(ours):
                state[ours] = rows.take(f, g, module_name(ours), blocks=int8 == "blocks")
                continue
            t = f.tensor(g)
            state[ours] = t if t.dtype == dtype else t.to(dtype)
        meta = {k: v for k, v in f.meta.items() if k.startswith(("general.", "stt.variant"))}
        template = f.meta.get("tokenizer.chat_template")
    return cfg, state, tokenizer, {"token_ids": ids, "identity": meta, "int8": rows, "config": raw,
                                   "features": feats, "template": template}


def build_model(cfg, state: dict, where: str, dtype: torch.dtype):
    """The network from a state under the -hf names (model.py's parts), as `Qwen3ASRModel.load` builds it."""
    from .encoder import AudioEncoder, Projector
    from .model import ENCODER_PREFIX, HEAD, LM_PREFIX, PROJECTOR_PREFIX, Qwen3ASRModel, _load_module
    from ..llm.model import DecoderLM

    parts: dict[str, dict[str, torch.Tensor]] = {"encoder": {}, "projector": {}, "lm": {}}
    for key, t in state.items():
        if key == HEAD:
            parts["lm"]["lm_head.weight"] = t
            continue
        for part, prefix in (("encoder", ENCODER_PREFIX), ("projector", PROJECTOR_PREFIX), ("lm", LM_PREFIX)):
            if key.startswith(prefix):
                parts[part][key[len(prefix):]] = t
                break
        else:  # pragma: no cover - tensor_names makes only these
            raise ModelError(f"{where}: unexpected tensor {key!r}")
    with torch.device("meta"):
        tower = AudioEncoder(cfg.encoder)
        projector = Projector(cfg.encoder)
    _load_module(tower, parts["encoder"], "audio encoder", where, dtype)
    _load_module(projector, parts["projector"], "projector", where, dtype)
    tower.positions = AudioEncoder.table(cfg.encoder)
    lm = DecoderLM.from_tensors(cfg.lm, parts["lm"], where, dtype)
    return Qwen3ASRModel(cfg, tower, projector, lm)


def load_gguf(path: Path, name: str, device, dtype: Optional[torch.dtype] = None):
    """A `qwen3_asr` GGUF file -> a Qwen3ASR recognizer on `device` (dtype None: float32, except a Q8_0 file's
    compressed layers, see Q8_0_DEFAULT; int8: Int8Linear from the file's bytes, the rest float32)."""
    from .prompt import PromptBuilder, check_template
    from .recognizer import Qwen3ASR

    path = Path(path)
    if dtype == torch.int8:
        int8 = "all"
    else:
        int8 = "auto" if dtype is None and Q8_0_DEFAULT else None
    work = torch.float32 if dtype in (None, torch.int8) else dtype
    cfg, state, tokenizer, extra = read_gguf(path, work, int8)
    if len(tokenizer) > cfg.lm.vocab_size:
        raise ModelError(f"{path}: the tokenizer has {len(tokenizer)} tokens, more than the language model's "
                         f"{cfg.lm.vocab_size} embedding rows")
    check_template(extra["template"], f"{path} tokenizer.chat_template")
    prompts = PromptBuilder(tokenizer, cfg.audio_token_id, str(path))
    model = build_model(cfg, state, str(path), work)
    del state
    if extra["int8"] is not None:
        extra["int8"].adopt(model)
    model.eval().to(device)
    return Qwen3ASR(model, tokenizer, prompts, name, str(device))

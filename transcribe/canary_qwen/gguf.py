"""Canary-Qwen as transcribe.cpp's `canary_qwen` GGUF files (`scripts/convert-canary-qwen.py`, which loads the SALM
with NeMo and merges LoRA before writing; tests/models/gguf/canary_qwen/README.md): reading them (`load_gguf`).

The schema: `frontend.mel_filterbank` [n_mels, n_fft / 2 + 1] and `frontend.window` (the checkpoint's own values,
used as they are, as for a checkpoint directory); `enc.*` (the FastConformer, transcribe.cpp's names of NeMo's
encoder: `nemo.gguf_names.ENCODER_TABLE`) and `enc.proj.*` (the projection); `dec.*` (the Qwen3 LM with LoRA merged:
`dec.token_embd`, `dec.output_norm`, `dec.blocks.{i}.{norm_attn, norm_ffn, attn.{q,k,v,o,q_norm,k_norm},
ffn.{gate,up,down}}`; a tied head is the embedding); the config as `stt.canary_qwen.{encoder,perception,decoder}.*`
and `stt.frontend.*`; the tokenizer as `tokenizer.ggml.*` (Qwen2's byte-level BPE, read as the qwen3_asr reader
reads it: `llm.gguf_tokenizer`), the audio placeholder at `stt.canary_qwen.perception.audio_locator_id`.

What the file does not say, taken as canary-qwen-2.5b's config has it: the subsampling kind (dw_striding), xscaling
(off), relative positions with untied biases, batch norm in the convolution module, pad_to 0, the `qwen` prompt
format. Weights: any type `gguf.quants` reads (dequantized to float32, then the dtype asked for; int8 quantized
from those). Every metadata key is read, accepted by name (`general.*`, `stt.variant`, `stt.capability.*`), or a
ModelError names it; so is a missing or unknown tensor."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from ..errors import ModelError
from ..gguf.hf import f32_value
from ..nemo.gguf_names import ENCODER_TABLE, apply, rules

ARCH = "canary_qwen"
P = "stt.canary_qwen."
_DEC_BLOCK = [("input_layernorm.weight", "norm_attn.weight"), ("post_attention_layernorm.weight", "norm_ffn.weight")] + \
    [(f"self_attn.{p}_proj.weight", f"attn.{p}.weight") for p in "qkvo"] + \
    [("self_attn.q_norm.weight", "attn.q_norm.weight"), ("self_attn.k_norm.weight", "attn.k_norm.weight")] + \
    [(f"mlp.{p}_proj.weight", f"ffn.{p}.weight") for p in ("gate", "up", "down")]


def config_from_meta(keys, where: str):
    from ..llm.config import LMConfig
    from ..nemo.config import EncoderConfig, FrontEndConfig
    from .config import CanaryQwenConfig

    r = keys.require
    e, p, d, f = P + "encoder.", P + "perception.", P + "decoder.", "stt.frontend."
    for key, want in (("type", "mel"), ("window", "hann"), ("normalize", "per_feature"), ("f_min", 0.0),
                      ("pad_mode", "reflect"), ("center", True), ("mel_norm", "slaney"), ("log", True)):
        keys.expect(f + key, (want,))
    rate = r(f + "sample_rate")
    keys.expect(f + "f_max", (rate / 2,))
    keys.accept([f + "dither"])  # training only
    keys.expect(e + "use_bias", (True,))
    try:
        frontend = FrontEndConfig(sample_rate=rate, window_size=None, window_stride=None,
                                  n_window_size=r(f + "win_length"), n_window_stride=r(f + "hop_length"),
                                  n_fft=r(f + "n_fft"), preemph=f32_value(r(f + "pre_emphasis")),
                                  features=r(f + "num_mels"), pad_to=0, normalize="per_feature")
        d_model, d_ff = r(e + "d_model"), r(e + "d_ff")
        if not isinstance(d_model, int) or not isinstance(d_ff, int) or d_model <= 0 or d_ff % d_model:
            raise ValueError(f"{e}d_ff {d_ff!r} is not a multiple of d_model {d_model!r}")
        encoder = EncoderConfig(feat_in=frontend.features, n_layers=r(e + "n_layers"), d_model=d_model,
                                n_heads=r(e + "n_heads"), ff_expansion_factor=d_ff // d_model, subsampling="dw_striding",
                                subsampling_factor=r(e + "subsampling_factor"),
                                subsampling_conv_channels=r(e + "subsampling_channels"),
                                conv_kernel_size=r(e + "conv_kernel"), xscaling=False,
                                pos_emb_max_len=r(e + "pos_emb_max_len"))
    except (ValueError, TypeError) as err:
        raise ModelError(f"{where}: {err}") from None
    text = {"model_type": "qwen3", "num_hidden_layers": r(d + "n_layers"), "hidden_size": r(d + "hidden_size"),
            "intermediate_size": r(d + "intermediate_size"), "num_attention_heads": r(d + "n_heads"),
            "num_key_value_heads": r(d + "n_kv_heads"), "head_dim": r(d + "head_dim"), "hidden_act": r(d + "hidden_act"),
            "rms_norm_eps": f32_value(r(d + "rms_norm_eps")), "rope_theta": f32_value(r(d + "rope_theta")),
            "max_position_embeddings": r(d + "max_position_embeddings"),
            "tie_word_embeddings": r(d + "tie_word_embeddings"), "vocab_size": r(d + "vocab_size")}
    lm = LMConfig.from_hf(text, where)
    dim = r(p + "output_dim")
    if dim != lm.hidden_size:
        raise ModelError(f"{where}: {p}output_dim {dim!r} is not the decoder's hidden_size {lm.hidden_size}")
    keys.expect(p + "has_proj_bias", (True,))
    tag = r(p + "audio_locator_tag")
    cfg = CanaryQwenConfig(frontend, encoder, dim, lm, None, tag, "qwen", where)
    return cfg, r(p + "audio_locator_id")


def _names(cfg) -> list[tuple[str, str, str]]:
    """(part, our name, the file's name) of every tensor."""
    out = [("perception", "preprocessor.featurizer.fb", "frontend.mel_filterbank"),
           ("perception", "preprocessor.featurizer.window", "frontend.window"),
           ("perception", "proj.weight", "enc.proj.weight"), ("perception", "proj.bias", "enc.proj.bias"),
           ("lm", "embed_tokens.weight", "dec.token_embd.weight"), ("lm", "norm.weight", "dec.output_norm.weight")]
    if not cfg.lm.tie_word_embeddings:
        out.append(("lm", "lm_head.weight", "dec.output.weight"))
    for i in range(cfg.lm.num_layers):
        out += [("lm", f"layers.{i}.{a}", f"dec.blocks.{i}.{b}") for a, b in _DEC_BLOCK]
    return out


def load_gguf(path: Path, name: str, device, dtype: Optional[torch.dtype] = None):
    """A `canary_qwen` GGUF file -> a CanaryQwen recognizer on `device` (dtype None: float32)."""
    from ..gguf.file import GGUFFile, missing_layers
    from ..llm.model import int8_compute
    from ..llm.gguf_tokenizer import qwen2_tokenizer
    from .model import CanaryQwenModel
    from .prompt import PromptBuilder
    from .recognizer import CanaryQwen

    path = Path(path)
    where = str(path)
    int8 = dtype == torch.int8
    work = torch.float32 if dtype is None or int8 else dtype
    with GGUFFile(path) as f:
        if f.arch != ARCH:
            raise ModelError(f"{where}: general.architecture is {f.arch!r}, not {ARCH!r}")
        keys = f.keys()
        keys.accept(["general.*", "stt.variant", "stt.capability.*", "tokenizer.chat_template"])
        cfg, audio_id = config_from_meta(keys, where)
        for key, prefix in (("encoder.n_layers", "enc.blocks."), ("decoder.n_layers", "dec.blocks.")):
            problem = missing_layers(f, prefix, keys.require(P + key))
            if problem:
                raise ModelError(f"{where}: {P}{key} = {problem}")
        keys.expect("tokenizer.ggml.model", ("gpt2",))
        keys.expect("tokenizer.ggml.pre", ("qwen2",))
        keys.expect("tokenizer.ggml.add_bos_token", (False,))
        tokens, types = keys.require("tokenizer.ggml.tokens"), keys.require("tokenizer.ggml.token_type")
        merges = keys.require("tokenizer.ggml.merges")
        if not isinstance(tokens, list):
            raise ModelError(f"{where}: tokenizer.ggml.tokens is not a list")
        named = set()
        for k in ("eos", "padding", "bos"):
            v = keys.get(f"tokenizer.ggml.{k}_token_id")
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(tokens)):
                raise ModelError(f"{where}: tokenizer.ggml.{k}_token_id {v!r} is not one of the tokens")
            if v is not None:
                named.add(v)
        eos = keys.get("tokenizer.ggml.eos_token_id")
        if eos is None:
            raise ModelError(f"{where}: tokenizer.ggml.eos_token_id is missing: no stop token")
        tokenizer = qwen2_tokenizer(tokens, types, merges, where, special=named)
        keys.finish()
        if not tokenizer.has(cfg.audio_locator_tag) or tokenizer.token_id(cfg.audio_locator_tag) != audio_id:
            raise ModelError(f"{where}: {P}perception.audio_locator_id {audio_id!r} is not the tokenizer's "
                             f"{cfg.audio_locator_tag}")
        names = _names(cfg)
        enc_rules = rules(ENCODER_TABLE, to_transcribe_cpp=False)
        known = {g for _, _, g in names}
        parts: dict[str, dict] = {"perception": {}, "lm": {}}
        for g in f.tensors:
            if g in known:
                continue
            ours = apply(g, enc_rules)
            if ours is None:
                raise ModelError(f"{where}: tensor {g} is not implemented")
            ours = ours.replace(".conv.bn.", ".conv.batch_norm.")
            parts["perception"][ours] = f.tensor(g)
        for part, ours, g in names:
            if g not in f.tensors:
                raise ModelError(f"{where}: tensor {g} is missing")
            t = f.tensor(g)
            parts[part][ours] = t[None] if ours.endswith("featurizer.fb") else t
    model = CanaryQwenModel.build(cfg, parts["perception"], parts["lm"], where, work,
                                  int8_compute(device) if int8 else None)
    model.eval().to(device)
    prompts = PromptBuilder(tokenizer, cfg.audio_locator_tag, where)
    return CanaryQwen(model, tokenizer, prompts, [eos], name, str(device))

"""Canary as transcribe.cpp's `canary` GGUF files (its `convert-canary.py`, quantized by its
`transcribe-quantize`; the schema: tests/models/gguf/canary/README.md).

- the config as `stt.canary.{encoder,decoder}.*`, `stt.canary.tokenizer.*`, `stt.frontend.*`; the special
  tokens' ids as `stt.canary.special.*` (checked against the pieces: the prompt is built from the pieces);
- the encoder's tensors under `enc.` (Parakeet's transcribe.cpp names, `nemo/gguf_names.py`), the
  projection as `enc.proj`, the decoder's under `dec.`; no filterbank or window (NeMo's front end computes
  them from the settings, as for a `.nemo`);
- the tokenizer as one flat piece table (`tokenizer.ggml.tokens`) cut into the aggregate's sub-tokenizers by
  `stt.canary.tokenizer.lang_codes/offsets/sizes`; the rows past them are the head's padding.

**xscaling.** The schema has no key for the encoder's `xscaling` and transcribe.cpp's encoder never scales
(the published Canary models are trained without it), so a file loads without it: the same outputs as
transcribe.cpp's runtime (and as NeMo with `xscaling: false`). A `.nemo` made with `xscaling: true`
converted to GGUF is therefore another model; the upstream converter says nothing of it.

Loading reads every metadata key or accepts it by name as not changing the computation (identity, the
capability flags, language lists); an unknown key, a missing tensor or one this code does not know is a
`ModelError` naming it. Quantized weights are dequantized to float32 (Q8_0, F16)."""
from __future__ import annotations

from pathlib import Path

import torch

from ..errors import ModelError
from ..gguf.file import GGUFFile, missing_layers
from ..nemo.gguf_names import ENCODER_TABLE, apply, rules
from .tokenizer import SPECIAL_TOKENIZER, CanaryTokenizer

ARCH = "canary"
P = "stt.canary."

_TABLE = ENCODER_TABLE + (
    ("encoder_decoder_proj.", "enc.proj."),
    ("transf_decoder._embedding.token_embedding.", "dec.embed.token."),
    ("transf_decoder._embedding.position_embedding.pos_enc", "dec.embed.pos_enc"),
    ("transf_decoder._embedding.layer_norm.", "dec.embed.norm."),
    ("transf_decoder._decoder.layers.{i}.layer_norm_1.", "dec.layer.{i}.norm1."),
    ("transf_decoder._decoder.layers.{i}.layer_norm_2.", "dec.layer.{i}.norm2."),
    ("transf_decoder._decoder.layers.{i}.layer_norm_3.", "dec.layer.{i}.norm3."),
    ("transf_decoder._decoder.layers.{i}.first_sub_layer.query_net.", "dec.layer.{i}.self_attn.q."),
    ("transf_decoder._decoder.layers.{i}.first_sub_layer.key_net.", "dec.layer.{i}.self_attn.k."),
    ("transf_decoder._decoder.layers.{i}.first_sub_layer.value_net.", "dec.layer.{i}.self_attn.v."),
    ("transf_decoder._decoder.layers.{i}.first_sub_layer.out_projection.", "dec.layer.{i}.self_attn.o."),
    ("transf_decoder._decoder.layers.{i}.second_sub_layer.query_net.", "dec.layer.{i}.cross_attn.q."),
    ("transf_decoder._decoder.layers.{i}.second_sub_layer.key_net.", "dec.layer.{i}.cross_attn.k."),
    ("transf_decoder._decoder.layers.{i}.second_sub_layer.value_net.", "dec.layer.{i}.cross_attn.v."),
    ("transf_decoder._decoder.layers.{i}.second_sub_layer.out_projection.", "dec.layer.{i}.cross_attn.o."),
    ("transf_decoder._decoder.layers.{i}.third_sub_layer.dense_in.", "dec.layer.{i}.ffn.up."),
    ("transf_decoder._decoder.layers.{i}.third_sub_layer.dense_out.", "dec.layer.{i}.ffn.down."),
    ("transf_decoder._decoder.final_layer_norm.", "dec.norm."),
    ("log_softmax.mlp.layer0.", "dec.head."),
)
_TO_NEMO = rules(_TABLE, False)
# Keys that do not change what is computed: identity, what the runtime advertises, the languages it lists
# (the vocabulary's language tokens decide), the converter's copy of the dither (none at inference).
_ACCEPTED = ("general.*", "stt.capability.*", "stt.variant", "stt.translation.*", "stt.frontend.dither",
             "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.unknown_token_id",
             "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
             "tokenizer.ggml.model")


def _err(f: GGUFFile, msg: str) -> ModelError:
    return ModelError(f"{f.path}: {msg}")


class _Pieces:
    """A sub-tokenizer known by its pieces alone (the file stores no SentencePiece model)."""

    def __init__(self, pieces: list[str]):
        self.pieces = pieces

    def encode(self, text: str) -> list[int]:
        raise ValueError("a GGUF Canary vocabulary has no SentencePiece model to encode text with")


def build_config(f: GGUFFile):
    """The NeMo config of the file's model (the sections `canary.config` reads), and the keys read."""
    k = f.keys()
    k.accept(_ACCEPTED)
    fmt = k.expect("stt.canary.tokenizer.prompt_format", ("canary", "canary2"))
    sr = int(k.require("stt.frontend.sample_rate"))
    k.expect("stt.frontend.type", ("mel",))
    k.expect("stt.frontend.window", ("hann",))
    k.expect("stt.frontend.log", (True,))
    k.expect("stt.frontend.f_min", (0, 0.0))
    if float(k.get("stt.frontend.f_max", sr / 2)) != sr / 2:
        raise _err(f, f"stt.frontend.f_max = {k.get('stt.frontend.f_max')} is not implemented (only half the rate)")
    if abs(float(k.get("stt.frontend.pre_emphasis", 0.97)) - 0.97) > 1e-6:  # (a float32 in the file)
        raise _err(f, f"stt.frontend.pre_emphasis = {k.get('stt.frontend.pre_emphasis')} is not implemented (0.97)")
    if k.get("stt.frontend.pad_mode", "reflect") not in ("constant", "reflect"):  # NeMo's zero padding either way
        raise _err(f, f"stt.frontend.pad_mode = {f.meta['stt.frontend.pad_mode']!r} is not implemented")
    d_model = int(k.require("stt.canary.encoder.d_model"))
    d_ff = int(k.require("stt.canary.encoder.d_ff"))
    if d_ff % d_model:
        raise _err(f, f"{P}encoder.d_ff = {d_ff} is not a multiple of encoder.d_model = {d_model}")
    k.expect("stt.canary.encoder.use_bias", (True,))
    hidden = int(k.require("stt.canary.decoder.d_model"))
    proj = k.expect("stt.canary.decoder.encoder_decoder_proj", (True, False))
    if proj != (hidden != d_model):
        raise _err(f, f"{P}decoder.encoder_decoder_proj = {proj} disagrees with the widths ({d_model} -> {hidden})")
    return {
        "target": "nemo.collections.asr.models.EncDecMultiTaskModel",
        "sample_rate": sr,
        "prompt_format": fmt,
        "preprocessor": {
            "_target_": "AudioToMelSpectrogramPreprocessor", "sample_rate": sr,
            "features": int(k.require("stt.frontend.num_mels")), "n_fft": int(k.require("stt.frontend.n_fft")),
            "window_size": int(k.require("stt.frontend.win_length")) / sr,
            "window_stride": int(k.require("stt.frontend.hop_length")) / sr, "window": "hann",
            "normalize": k.expect("stt.frontend.normalize", ("per_feature", "all_features", "NA")), "pad_to": 0,
            "log": True,
        },
        "encoder": {
            "_target_": "ConformerEncoder", "feat_in": int(k.require("stt.frontend.num_mels")),
            "n_layers": int(k.require("stt.canary.encoder.n_layers")), "d_model": d_model,
            "n_heads": int(k.require("stt.canary.encoder.n_heads")), "ff_expansion_factor": d_ff // d_model,
            "conv_kernel_size": int(k.require("stt.canary.encoder.conv_kernel")), "subsampling": "dw_striding",
            "subsampling_factor": int(k.require("stt.canary.encoder.subsampling_factor")),
            "subsampling_conv_channels": int(k.require("stt.canary.encoder.subsampling_channels")),
            "pos_emb_max_len": int(k.require("stt.canary.encoder.pos_emb_max_len")), "xscaling": False,
            "self_attention_model": "rel_pos", "untie_biases": True, "conv_norm_type": "batch_norm",
        },
        "transf_decoder": {
            "_target_": "get_nemo_transformer", "pre_ln_final_layer_norm": True,
            "config_dict": {
                "max_sequence_length": int(k.require("stt.canary.decoder.max_position")), "hidden_size": hidden,
                "inner_size": int(k.require("stt.canary.decoder.d_ff")), "num_layers": int(k.require("stt.canary.decoder.n_layers")),
                "num_attention_heads": int(k.require("stt.canary.decoder.n_heads")),
                "hidden_act": k.expect("stt.canary.decoder.activation", ("relu", "silu", "swish", "gelu")),
                "pre_ln": k.expect("stt.canary.decoder.pre_ln", (True, False)),
                "learn_positional_encodings": k.expect("stt.canary.decoder.learn_positional_encodings", (False,)),
            },
        },
        "head": {"num_layers": 1, "num_classes": int(k.require("stt.canary.decoder.vocab_size")), "hidden_size": hidden},
        "model_defaults": {"asr_enc_hidden": d_model, "lm_dec_hidden": hidden},
        "decoding": {"strategy": "greedy"},  # transcribe.cpp decodes greedily, up to the decoder's table
    }, k


def tokenizer_of(f: GGUFFile, k, vocab: int) -> CanaryTokenizer:
    pieces = [str(p) for p in k.require("tokenizer.ggml.tokens")]
    if len(pieces) != vocab:
        raise _err(f, f"tokenizer.ggml.tokens has {len(pieces)} pieces, the decoder's head {vocab} rows")
    codes = [str(c) for c in k.require("stt.canary.tokenizer.lang_codes")]
    offsets = [int(x) for x in k.require("stt.canary.tokenizer.lang_offsets")]
    sizes = [int(x) for x in k.require("stt.canary.tokenizer.lang_sizes")]
    single = bool(k.get("stt.canary.tokenizer.single_sp", False))
    if not len(codes) == len(offsets) == len(sizes) or not codes:
        raise _err(f, f"{P}tokenizer.lang_codes/offsets/sizes disagree ({len(codes)}/{len(offsets)}/{len(sizes)})")
    start = 0
    parts = []
    for code, off, size in zip(codes, offsets, sizes):
        if off != start or size <= 0 or off + size > vocab:
            raise _err(f, f"{P}tokenizer: sub-tokenizer {code!r} at {off} (+{size}) does not follow the previous "
                          f"one at {start} within the vocabulary of {vocab}")
        parts.append((SPECIAL_TOKENIZER if code == "spl_tokens" else code, _Pieces(pieces[off:off + size])))
        start = off + size
    if single != (len(parts) == 1):
        raise _err(f, f"{P}tokenizer.single_sp = {single} disagrees with its {len(parts)} sub-tokenizers")
    try:
        tok = CanaryTokenizer(parts)
    except ValueError as e:
        raise _err(f, f"tokenizer: {e}") from None
    for key in [x for x in f.meta if x.startswith(P + "special.")]:
        name = key[len(P + "special."):]
        piece = f"<|{name[len('lang.'):-3]}|>" if name.startswith("lang.") else \
            ("<pad>" if name == "pad_id" else f"<|{name[:-3]}|>")
        if not name.endswith("_id") or tok.id_of(piece) != int(k.get(key)):
            raise _err(f, f"{key} = {f.meta[key]} is not the id of {piece} in the vocabulary")
    return tok


def load(path: Path, name: str, device, dtype):
    """`load_model` for a transcribe.cpp Canary GGUF file: a CanaryASR, as from the .nemo it was made
    from (without xscaling: see the module's docstring); weights dequantized to float32, then `dtype`."""
    from .model import CanaryModel
    from .recognizer import CanaryASR

    with GGUFFile(path) as f:
        if f.arch != ARCH:
            raise _err(f, f"a GGUF file of architecture {f.arch!r}, not {ARCH!r}")
        cfg, k = build_config(f)
        try:
            with torch.device("meta"):
                model = CanaryModel(cfg)
        except (ValueError, KeyError, TypeError) as e:
            raise _err(f, f"model config not supported ({e})") from None
        problem = missing_layers(f, "enc.blocks.", model.config.encoder.n_layers, "encoder layers") or \
            missing_layers(f, "dec.layer.", model.config.decoder.layers, "decoder layers")
        if problem:
            raise _err(f, f"the layer counts do not match the tensors: {problem}")
        tok = tokenizer_of(f, k, model.vocab_size)
        k.finish()
        sd = {}
        for t in f.tensors:
            target = apply(t, _TO_NEMO)
            if target is None:
                raise _err(f, f"tensor {t} is not part of a Canary model (transcribe.cpp schema)")
            sd[target] = f.tensor(t)
        expected = model.state_dict()
        for key, t in list(sd.items()):  # ggml drops trailing size-1 dims (leading ones in PyTorch order)
            want = expected.get(key)
            if want is not None and t.shape != want.shape and t.numel() == want.numel() and \
                    [d for d in t.shape if d != 1] == [d for d in want.shape if d != 1]:
                sd[key] = t.reshape(want.shape)
        try:
            model.load_nemo_state_dict(sd)
        except KeyError as e:
            raise _err(f, str(e.args[0] if e.args else e)) from None
    return CanaryASR.finish(model, tok, name, device, dtype)

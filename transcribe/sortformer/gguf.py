"""Sortformer as transcribe.cpp's `sortformer` GGUF files (its `convert-sortformer.py`, quantized by its
`transcribe-quantize`; the schema, key by key, and how its runtime reads it: tests/models/gguf/sortformer/README.md).

- the config as `stt.frontend.*` (the mel front end), `stt.sortformer.encoder.*` (the FastConformer),
  `stt.sortformer.transformer.*`, `stt.sortformer.max_speakers`, `stt.sortformer.frame_hop` and four of the
  streaming settings, `stt.sortformer.stream.{chunk_len,spkcache_len,fifo_len,spkcache_update_period}`;
- the tensors renamed (`tensor_table`): the encoder under `enc.` (Parakeet's transcribe.cpp names), the Transformer
  under `tf.blocks.{i}.`, the projection and head under `diar.`; no filterbank or window (the front end
  computes them from the settings, as for a `.nemo` without them), no BatchNorm counters.

What the schema leaves out, the file means what transcribe.cpp's runtime does with it, which is what
`read_sortformer_gguf` puts in the config: an encoder with `xscaling` (the runtime always scales), `rel_pos`
attention over the whole input, `dw_striding` subsampling, biases, batch norm; the streaming settings the file
has no key for at the runtime's values, which are NeMo's `SortformerModules` defaults (`chunk_left_context` 1,
`chunk_right_context` 1, `spkcache_sil_frames_per_spk` 3, the cache-scoring constants). A `.nemo` whose
`chunk_right_context` is not 1 (sortformer-tiny's is 2) therefore streams with right context 1 from its GGUF,
as in transcribe.cpp (its runtime takes other operating points at run time, not from the file).

Reading checks every metadata key: it is read, checked against the tensors or the other keys, or accepted by
name as not changing what is computed (identity, capability flags, the variant); an unknown key, a value this
code does not implement, a missing tensor, an unknown one or one of the wrong shape is a `ModelError` naming it.
Quantized weights (F16, Q8_0, ...) are dequantized to float32."""
from __future__ import annotations

import os

import numpy as np
import torch

from ..errors import ModelError
from ..gguf.file import GGUFFile, missing_layers

ARCH = "sortformer"
P = "stt.sortformer."

# The converter's tables, in its order: (NeMo state-dict name, transcribe.cpp name); per-layer suffixes.
PRE_ENCODE = tuple((f"encoder.pre_encode.conv.{i}.{w}", f"enc.pre_encode.conv.{i}.{w}")
                   for i in (0, 2, 3, 5, 6) for w in ("weight", "bias")) + (
    ("encoder.pre_encode.out.weight", "enc.pre_encode.out.weight"),
    ("encoder.pre_encode.out.bias", "enc.pre_encode.out.bias"),
)
_WB = ("weight", "bias")
CONFORMER_BLOCK = tuple(
    [(f"norm_feed_forward1.{w}", f"norm_ff1.{w}") for w in _WB]
    + [(f"feed_forward1.linear{j}.{w}", f"ff1.linear{j}.{w}") for j in (1, 2) for w in _WB]
    + [(f"norm_self_att.{w}", f"norm_attn.{w}") for w in _WB]
    + [(f"self_attn.linear_{p}.{w}", f"attn.linear_{p}.{w}") for p in ("q", "k", "v", "out") for w in _WB]
    + [("self_attn.linear_pos.weight", "attn.linear_pos.weight"), ("self_attn.pos_bias_u", "attn.pos_bias_u"),
       ("self_attn.pos_bias_v", "attn.pos_bias_v")]
    + [(f"norm_conv.{w}", f"norm_conv.{w}") for w in _WB]
    + [(f"conv.pointwise_conv1.{w}", f"conv.pointwise1.{w}") for w in _WB]
    + [(f"conv.depthwise_conv.{w}", f"conv.depthwise.{w}") for w in _WB]
    + [(f"conv.batch_norm.{w}", f"conv.bn.{w}") for w in ("weight", "bias", "running_mean", "running_var")]
    + [(f"conv.pointwise_conv2.{w}", f"conv.pointwise2.{w}") for w in _WB]
    + [(f"norm_feed_forward2.{w}", f"norm_ff2.{w}") for w in _WB]
    + [(f"feed_forward2.linear{j}.{w}", f"ff2.linear{j}.{w}") for j in (1, 2) for w in _WB]
    + [(f"norm_out.{w}", f"norm_out.{w}") for w in _WB]
)
TRANSFORMER_BLOCK = tuple(
    [(f"layer_norm_1.{w}", f"norm_1.{w}") for w in _WB]
    + [(f"first_sub_layer.{s}.{w}", f"attn.{d}.{w}")
       for s, d in (("query_net", "q"), ("key_net", "k"), ("value_net", "v"), ("out_projection", "out")) for w in _WB]
    + [(f"layer_norm_2.{w}", f"norm_2.{w}") for w in _WB]
    + [(f"second_sub_layer.dense_{s}.{w}", f"ff.{s}.{w}") for s in ("in", "out") for w in _WB]
)
HEAD = tuple((f"sortformer_modules.{s}.{w}", f"diar.{d}.{w}")
             for s, d in (("encoder_proj", "encoder_proj"), ("first_hidden_to_hidden", "fc1"),
                          ("hidden_to_spks", "spk_head"), ("single_hidden_to_spks", "single_spk_head"))
             for w in _WB)


def tensor_table(n_enc: int, n_tf: int) -> list[tuple[str, str]]:
    """Every tensor of a file with `n_enc` FastConformer and `n_tf` Transformer layers, in the converter's
    order: (NeMo name, transcribe.cpp name)."""
    out = list(PRE_ENCODE)
    out += [(f"encoder.layers.{i}.{a}", f"enc.blocks.{i}.{b}") for i in range(n_enc) for a, b in CONFORMER_BLOCK]
    out += [(f"transformer_encoder.layers.{i}.{a}", f"tf.blocks.{i}.{b}") for i in range(n_tf)
            for a, b in TRANSFORMER_BLOCK]
    return out + list(HEAD)


def expected_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """The PyTorch shape of every NeMo tensor of a model with `config` (NeMo's layout, as `read_sortformer_gguf`
    gives it)."""
    enc, tr = config["encoder"], config["transformer_encoder"]
    d, h, k = enc["d_model"], enc["n_heads"], enc["conv_kernel_size"]
    ff, c = d * enc["ff_expansion_factor"], enc["subsampling_conv_channels"]
    t, inner, s = tr["hidden_size"], tr["inner_size"], config["max_num_of_spks"]
    freq = enc["feat_in"]
    for _ in range(3):  # three stride-2 convolutions, kernel 3, padding 1
        freq = (freq - 1) // 2 + 1
    shapes = {"encoder.pre_encode.out.weight": (d, c * freq), "encoder.pre_encode.out.bias": (d,)}
    for i in (0, 2, 3, 5, 6):  # 0: 1 -> c, 3x3; 2, 5: depthwise 3x3; 3, 6: pointwise 1x1
        shapes[f"encoder.pre_encode.conv.{i}.weight"] = (c, c, 1, 1) if i in (3, 6) else (c, 1, 3, 3)
        shapes[f"encoder.pre_encode.conv.{i}.bias"] = (c,)
    block = {"feed_forward1.linear1.weight": (ff, d), "feed_forward1.linear1.bias": (ff,),
             "feed_forward1.linear2.weight": (d, ff), "feed_forward2.linear1.weight": (ff, d),
             "feed_forward2.linear1.bias": (ff,), "feed_forward2.linear2.weight": (d, ff),
             "self_attn.linear_pos.weight": (d, d), "self_attn.pos_bias_u": (h, d // h),
             "self_attn.pos_bias_v": (h, d // h), "conv.pointwise_conv1.weight": (2 * d, d, 1),
             "conv.pointwise_conv1.bias": (2 * d,), "conv.depthwise_conv.weight": (d, 1, k),
             "conv.pointwise_conv2.weight": (d, d, 1),
             **{f"self_attn.linear_{p}.weight": (d, d) for p in ("q", "k", "v", "out")}}
    tblock = {"second_sub_layer.dense_in.weight": (inner, t), "second_sub_layer.dense_in.bias": (inner,),
              "second_sub_layer.dense_out.weight": (t, inner),
              **{f"first_sub_layer.{p}.weight": (t, t) for p in ("query_net", "key_net", "value_net", "out_projection")}}
    m = "sortformer_modules."
    shapes.update({m + "encoder_proj.weight": (t, d), m + "encoder_proj.bias": (t,),
                   m + "first_hidden_to_hidden.weight": (t, t), m + "first_hidden_to_hidden.bias": (t,),
                   m + "hidden_to_spks.weight": (s, 2 * t), m + "hidden_to_spks.bias": (s,),
                   m + "single_hidden_to_spks.weight": (s, t), m + "single_hidden_to_spks.bias": (s,)})
    for nemo, _ in tensor_table(enc["n_layers"], tr["num_layers"]):
        if nemo not in shapes:  # a layer's tensor: its suffix's shape, else a vector of the layer's width
            suffix = nemo.split(".", 3)[3]
            shapes[nemo] = block.get(suffix, (d,)) if nemo.startswith("encoder.") else tblock.get(suffix, (t,))
    return shapes


# ------------------------------------------------------------------------------------------------ reading

# Keys that do not change what is computed: identity (name, license, languages, file type), the variant,
# what the runtime advertises (capability flags).
_ACCEPTED = ("general.*", "stt.variant", "stt.capability.*")
# The runtime's values of the streaming settings the file has no key for (NeMo's SortformerModules
# defaults; transcribe.cpp's SortformerStreamParams).
RUNTIME_STREAMING = {"chunk_left_context": 1, "chunk_right_context": 1, "spkcache_sil_frames_per_spk": 3,
                     "pred_score_threshold": 0.25, "max_index": 99999, "scores_boost_latest": 0.05,
                     "sil_threshold": 0.2, "strong_boost_rate": 0.75, "weak_boost_rate": 1.5,
                     "min_pos_scores_rate": 0.5}
# stt.frontend.normalize (the converter's names) -> NeMo's preprocessor.normalize
_NORMALIZE = {"per_feature": "per_feature", "global": "all_features", "none": "NA"}
WINDOWS = ("hann", "hamming", "blackman", "bartlett")
ACTIVATIONS = ("relu", "gelu", "swish", "silu")
_MAX = 1 << 20  # the largest count or size a key may give (far above any model; a hostile file is refused)


def is_sortformer_gguf(path) -> bool:
    """Whether `path` is a GGUF file of transcribe.cpp's `sortformer` architecture (its header's first key,
    read alone; a corrupt file is not one)."""
    from ..gguf import architecture

    return architecture(path) == ARCH


def _err(f: GGUFFile, msg: str) -> ModelError:
    return ModelError(f"{f.path}: {msg}")


def _uint(f: GGUFFile, k, key: str, least: int = 1, most: int = _MAX) -> int:
    value = k.require(key)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise _err(f, f"{key} = {value!r} is out of the range this code reads ({least} to {most})")
    return value


def _float(f: GGUFFile, k, key: str) -> float:
    value = k.require(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise _err(f, f"{key} = {value!r} is not a number")
    # the shortest decimal that is this float32 (0.97, not 0.9700000286): the .nemo's value
    return float(str(np.float32(value)))


def _str(f: GGUFFile, k, key: str, allowed) -> str:
    value = k.require(key)
    if value not in allowed:
        raise _err(f, f"{key} = {value!r} is not implemented ({', '.join(map(repr, allowed))})")
    return value


def _bool(f: GGUFFile, k, key: str) -> bool:
    value = k.require(key)
    if not isinstance(value, bool):
        raise _err(f, f"{key} = {value!r} is not true or false")
    return value


def build_config(f: GGUFFile) -> dict:
    """The NeMo config (`model_config.yaml`'s layout) of the file's model; every key read or accepted."""
    k = f.keys()
    k.accept(_ACCEPTED)
    sr = _uint(f, k, "stt.frontend.sample_rate", most=1 << 20)
    mels = _uint(f, k, "stt.frontend.num_mels", most=1024)
    n_fft = _uint(f, k, "stt.frontend.n_fft", most=1 << 16)
    hop = _uint(f, k, "stt.frontend.hop_length", most=1 << 16)
    win = _uint(f, k, "stt.frontend.win_length", most=n_fft)
    window = _str(f, k, "stt.frontend.window", WINDOWS)
    normalize = _NORMALIZE[_str(f, k, "stt.frontend.normalize", tuple(_NORMALIZE))]
    preemph = _float(f, k, "stt.frontend.pre_emphasis")
    dither = _float(f, k, "stt.frontend.dither")

    e = P + "encoder."
    d = _uint(f, k, e + "d_model", most=16384)
    heads = _uint(f, k, e + "n_heads", most=256)
    d_ff = _uint(f, k, e + "d_ff", most=1 << 18)
    if d % heads or d_ff % d:
        raise _err(f, f"{e}d_model = {d} is not a multiple of n_heads = {heads}, or d_ff = {d_ff} not one of d_model")
    sub = _uint(f, k, e + "subsampling_factor", most=64)
    if sub != 8:
        raise _err(f, f"{e}subsampling_factor = {sub} is not implemented (8: the schema's three stride-2 "
                      "convolutions, enc.pre_encode.conv.{0,2,3,5,6})")
    if _uint(f, k, e + "feat_in", most=1024) != mels:
        raise _err(f, f"{e}feat_in = {f.meta[e + 'feat_in']} differs from stt.frontend.num_mels = {mels}")
    hop_frames = _uint(f, k, P + "frame_hop", most=1 << 22)
    if hop_frames != hop * sub:
        raise _err(f, f"{P}frame_hop = {hop_frames} is not hop_length x subsampling_factor = {hop * sub}")
    _str(f, k, e + "conv_norm_type", ("batch_norm",))
    n_enc = _uint(f, k, e + "n_layers", most=256)
    encoder = {
        "_target_": "nemo.collections.asr.modules.ConformerEncoder", "feat_in": mels, "feat_out": -1,
        "n_layers": n_enc, "d_model": d, "subsampling": "dw_striding", "subsampling_factor": sub,
        "subsampling_conv_channels": _uint(f, k, e + "subsampling_channels", most=16384),
        "causal_downsampling": False, "ff_expansion_factor": d_ff // d, "self_attention_model": "rel_pos",
        "n_heads": heads, "att_context_size": [-1, -1], "att_context_style": "regular", "xscaling": True,
        "untie_biases": True, "pos_emb_max_len": _uint(f, k, e + "pos_emb_max_len"),
        "conv_kernel_size": _uint(f, k, e + "conv_kernel", most=1023), "conv_norm_type": "batch_norm",
        "conv_context_size": None, "use_bias": True,
    }
    if encoder["conv_kernel_size"] % 2 == 0:
        raise _err(f, f"{e}conv_kernel = {encoder['conv_kernel_size']} is not odd (a centred depthwise convolution)")

    t = P + "transformer."
    tf_d = _uint(f, k, t + "d_model", most=16384)
    tf_heads = _uint(f, k, t + "n_heads", most=256)
    if tf_d % tf_heads:
        raise _err(f, f"{t}d_model = {tf_d} is not a multiple of n_heads = {tf_heads}")
    transformer = {
        "_target_": "nemo.collections.asr.modules.transformer.transformer_encoders.TransformerEncoder",
        "num_layers": _uint(f, k, t + "n_layers", most=256), "hidden_size": tf_d,
        "inner_size": _uint(f, k, t + "d_ff", most=1 << 18), "num_attention_heads": tf_heads,
        "hidden_act": _str(f, k, t + "activation", ACTIVATIONS), "pre_ln": _bool(f, k, t + "pre_ln"),
        "pre_ln_final_layer_norm": True,
    }
    n_spk = _uint(f, k, P + "max_speakers", most=64)
    s = P + "stream."
    modules = {
        "_target_": "nemo.collections.asr.modules.sortformer_modules.SortformerModules", "num_spks": n_spk,
        "fc_d_model": d, "tf_d_model": tf_d,
        "spkcache_len": _uint(f, k, s + "spkcache_len", most=1 << 16),
        "fifo_len": _uint(f, k, s + "fifo_len", least=0, most=1 << 16),
        "chunk_len": _uint(f, k, s + "chunk_len", most=1 << 16),
        "spkcache_update_period": _uint(f, k, s + "spkcache_update_period", most=1 << 16),
        **RUNTIME_STREAMING,
    }
    k.finish()
    return {
        "sample_rate": sr,
        "max_num_of_spks": n_spk,
        "streaming_mode": True,  # the runtime always streams (its offline forward is a debugging dump)
        "model_defaults": {"fc_d_model": d, "tf_d_model": tf_d},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor", "normalize": normalize,
            "window_size": win / sr, "sample_rate": sr, "window_stride": hop / sr, "window": window,
            "features": mels, "n_fft": n_fft, "frame_splicing": 1, "dither": dither, "preemph": preemph,
        },
        "sortformer_modules": modules,
        "encoder": encoder,
        "transformer_encoder": transformer,
        "target": "nemo.collections.asr.models.sortformer_diar_models.SortformerEncLabelModel",
    }


def read_gguf(f: GGUFFile) -> tuple[dict, dict[str, torch.Tensor]]:
    """`read_sortformer_gguf` on an open file."""
    if f.arch != ARCH:
        raise _err(f, f"a GGUF file of architecture {f.arch!r}, not {ARCH!r}")
    config = build_config(f)
    n_enc, n_tf = config["encoder"]["n_layers"], config["transformer_encoder"]["num_layers"]
    problem = missing_layers(f, "enc.blocks.", n_enc, "encoder layers") or \
        missing_layers(f, "tf.blocks.", n_tf, "Transformer layers")
    if problem:
        raise _err(f, f"the layer counts do not match the tensors: {problem}")
    table = tensor_table(n_enc, n_tf)
    to_nemo = {g: n for n, g in table}
    for name in f.tensors:
        if name not in to_nemo:
            raise _err(f, f"tensor {name} is not part of a Sortformer model (transcribe.cpp schema)")
    missing = [g for _, g in table if g not in f.tensors]
    if missing:
        raise _err(f, f"tensor {missing[0]} is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    shapes = expected_shapes(config)
    state = {}
    for nemo, name in table:
        info, want = f.info(name), shapes[nemo]
        # transcribe-quantize keeps ggml's dims without trailing 1s (leading ones in PyTorch's order)
        if info.shape != want and [x for x in info.shape if x != 1] != [x for x in want if x != 1]:
            raise _err(f, f"tensor {name} has shape {list(info.shape)}, the config gives {list(want)}")
        state[nemo] = f.tensor(name).reshape(want)
    return config, state


def read_sortformer_gguf(path: str | os.PathLike) -> tuple[dict, dict[str, torch.Tensor]]:
    """A transcribe.cpp Sortformer GGUF file as NeMo's config (the `.nemo`'s `model_config.yaml` layout; what
    the file has no key for at transcribe.cpp's runtime's values, see the module's docstring) and its state dict
    under NeMo's names (float32; no `preprocessor.*` buffers: the file has none)."""
    with GGUFFile(path) as f:
        return read_gguf(f)


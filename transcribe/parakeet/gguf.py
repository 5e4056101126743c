"""Parakeet GGUF files (parakeet.cpp's and transcribe.cpp's) loaded as ordinary Parakeet models.

Both C++ engines write `general.architecture = "parakeet"` with different schemas:

* parakeet.cpp: `parakeet.*` keys, NeMo's state-dict names verbatim, the filterbank and window stored,
  both LSTM biases, a hybrid's auxiliary CTC head, `parakeet.tokenizer.pieces` (pieces only).
* transcribe.cpp: `stt.parakeet.*` and `stt.frontend.*` keys, renamed tensors (`gguf_names`), the LSTM
  biases summed, no filterbank, a hybrid shipped as TDT only, `tokenizer.ggml.*` (pieces, scores,
  types, and a `<blank>` appended at index vocab_size).

From the metadata this module writes the NeMo config sections `ParakeetModel` reads (the same network
NeMo built: FastConformer with dw_striding subsampling, rel_pos attention with untied biases, ...), maps
the tensors to NeMo names and hands both to the usual build on the meta device; the tokenizer is made
from the vocabulary in the file (`text.sentencepiece.PiecesTokenizer`). Nothing is guessed silently:
every metadata key is read, checked or explicitly accepted (any other is a ModelError naming it), every
tensor must be used and every tensor the model needs present, settings this code does not implement
are errors, and a stored filterbank or window must equal what our front end computes.

Against the upstream runtimes (tests/test_gguf_parakeet.py, jfk.wav): every F32 file of both schemas
(all six tiny models, both heads of the parakeet.cpp hybrid) gives exactly the token ids of its
`.ref.json`, and the ids, times and text of the .nemo it was made from. Quantized files are
dequantized to float32 here (the C++ runtimes multiply with quantized activations), yet gave the
runtimes' ids on every `*-fit` file; only the random-weight streaming models' 4-bit files differ a
little (agreement with the runtime 0.88 / 0.98).

What the files do not say, and what is assumed:
* `pad_to` (NeMo's padding of the feature frames to a multiple): not stored; 0, as in the tiny models
  and the published configs (it pads past the valid frames only).
* parakeet.cpp's vocabulary has no scores and no types: SentencePiece BPE is assumed (scores -k as its
  trainer writes them), `<unk>` the unknown piece, other `<...>` pieces user-defined. Decoding does not
  depend on scores, so it is exact; encoding (hotwords) is exact for BPE models and would differ for a
  unigram one. Both schemas: normalization identity with a dummy prefix (NeMo's tokenizers; a model
  trained with an NFKC map would encode non-ASCII text differently).
* transcribe.cpp's `<xx-YY>` pieces stay control pieces as the file types them (decoded as nothing).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import torch

from ..errors import ModelError
from ..gguf.file import GGUFFile, Keys, missing_layers
from ..search.transducer import DEFAULT_MAX_SYMBOLS
from ..text.sentencepiece import (BPE, CONTROL, NORMAL, UNIGRAM, UNKNOWN, USER_DEFINED, PiecesTokenizer,
                                  is_special_shape)
from . import gguf_names

PARAKEET_CPP = "parakeet.cpp"
TRANSCRIBE_CPP = "transcribe.cpp"

# The stored filterbank / window against ours: NeMo's buffer is librosa's slaney mel computed in
# float64 and stored as float32, ours is our own float64 computation of the same formulas rounded to
# float32, so they may differ in the last bits: measured on the tiny models, the window is equal and the
# filterbank differs by at most 3.7e-9 (its largest value is 0.042: about one float32 ulp). Allowed:
# 1e-7 absolute + 1e-5 relative (a few ulps). A different setting (band edges, mel scale, norm, n_fft)
# moves values by 1e-4 and more: "the stored filterbank differs".
FB_RTOL = 1e-5
FB_ATOL = 1e-7

# GGUF's general.* keys name and describe the file (name, author, license, file_type, ...): none changes
# what the model computes (general.architecture is read, general.alignment is the reader's).
_IDENTITY_KEYS = ("general.*",)


class _Keys(Keys):
    """Keys relative to the schema's prefix; names starting with "parakeet." / "stt." are absolute."""

    def _full(self, key: str) -> str:
        if key.startswith(("general.", "tokenizer.", "parakeet.", "stt.")):
            return key
        return self.prefix + key


TensorHook = Callable[[GGUFFile, str, str], Optional[torch.Tensor]]


def schema_of(f: GGUFFile) -> str:
    if f.arch != "parakeet":
        raise ModelError(f"{f.path}: a GGUF file of architecture {f.arch!r}, which this package does not read "
                         "(parakeet, canary, granite_speech_nar)")
    cpp = any(k.startswith("parakeet.") for k in f.meta)
    stt = any(k.startswith("stt.parakeet.") for k in f.meta)
    if cpp == stt:
        raise ModelError(f"{f.path}: a Parakeet GGUF file with {'both' if cpp else 'neither of'} the parakeet.cpp "
                         "(parakeet.*) and transcribe.cpp (stt.parakeet.*) metadata schemas")
    return PARAKEET_CPP if cpp else TRANSCRIBE_CPP


def _err(f: GGUFFile, msg: str) -> ModelError:
    return ModelError(f"{f.path}: {msg}")


def _pairs(f: GGUFFile, key: str, flat) -> list[list[int]]:
    flat = [int(x) for x in flat]
    if len(flat) % 2 or not flat:
        raise _err(f, f"{key} = {flat!r} is not a list of [left, right] pairs")
    return [flat[i:i + 2] for i in range(0, len(flat), 2)]


# --------------------------------------------------------------------------------------------------
# The config
# --------------------------------------------------------------------------------------------------

def _encoder(f: GGUFFile, k: Keys, schema: str) -> dict:
    cpp = schema == PARAKEET_CPP
    d_model = int(k.require("encoder.d_model"))
    ff = int(k.require("encoder.ff_dim" if cpp else "encoder.d_ff"))
    if ff % d_model:
        raise _err(f, f"encoder feed-forward size {ff} is not a multiple of d_model {d_model}")
    norm = k.require("encoder.conv_norm_type")
    if norm not in ("batch_norm", "layer_norm"):
        raise _err(f, f"encoder.conv_norm_type = {norm!r} is not implemented (batch_norm, layer_norm)")
    enc = {
        "_target_": "nemo.collections.asr.modules.ConformerEncoder",
        "n_layers": int(k.require("encoder.n_layers")), "d_model": d_model,
        "n_heads": int(k.require("encoder.n_heads")), "ff_expansion_factor": ff // d_model,
        "conv_kernel_size": int(k.require("encoder.conv_kernel")), "conv_norm_type": norm,
        "subsampling": "dw_striding", "subsampling_factor": int(k.require("encoder.subsampling_factor")),
        "subsampling_conv_channels": int(k.require("encoder.subsampling_conv_channels" if cpp
                                                    else "encoder.subsampling_channels")),
        "xscaling": bool(k.require("encoder.xscaling")), "pos_emb_max_len": int(k.require("encoder.pos_emb_max_len")),
        "use_bias": bool(k.require("encoder.use_bias")), "self_attention_model": "rel_pos", "untie_biases": True,
        "feat_out": -1,
    }
    if cpp:
        enc["feat_in"] = int(k.require("encoder.feat_in"))
        style = k.get("encoder.att_context_style", "regular")
        if style not in ("regular", "chunked_limited"):
            raise _err(f, f"parakeet.encoder.att_context_style = {style!r} is not implemented (regular, chunked_limited)")
        enc["att_context_style"] = style
        if style == "regular" and not k.has("encoder.att_context_left"):
            enc["att_context_size"] = [-1, -1]
        else:
            first = [int(k.require("encoder.att_context_left")), int(k.require("encoder.att_context_right"))]
            presets = k.get("encoder.att_context_presets")
            sizes = _pairs(f, "parakeet.encoder.att_context_presets", presets) if presets is not None else [first]
            if sizes[0] != first:
                raise _err(f, f"parakeet.encoder.att_context_presets starts with {sizes[0]}, the file's context is {first}")
            enc["att_context_size"] = sizes if len(sizes) > 1 else first
        enc["causal_downsampling"] = bool(k.get("encoder.causal_downsampling", False))
        enc["conv_context_size"] = "causal" if k.get("encoder.conv_causal", False) else None
    else:
        style = k.expect("encoder.att_context_style", ("regular", "chunked_limited"))
        enc["att_context_style"] = style
        first = [int(k.require("encoder.att_context_left")), int(k.require("encoder.att_context_right"))]
        choices = k.get("encoder.att_context_size_choices")
        if choices is not None:
            sizes = _pairs(f, "stt.parakeet.encoder.att_context_size_choices", choices)
            if sizes[0] != first:
                raise _err(f, f"stt.parakeet.encoder.att_context_size_choices starts with {sizes[0]}, the file's "
                              f"context is {first}")
            enc["att_context_size"] = sizes if len(sizes) > 1 else first
        else:
            enc["att_context_size"] = first
        left, right = int(k.require("encoder.conv_context_left")), int(k.require("encoder.conv_context_right"))
        kernel = enc["conv_kernel_size"]
        if left + right != kernel - 1:
            raise _err(f, f"conv context [{left}, {right}] does not fit the kernel size {kernel}")
        enc["conv_context_size"] = None if left == right else "causal" if right == 0 else [left, right]
        # transcribe.cpp stores no causal_downsampling flag: its streaming keys give it (the pre-encode
        # cache of NeMo's streaming_cfg exists only for causal subsampling, see `_check_streaming`).
        enc["causal_downsampling"] = k.has("encoder.streaming.pre_encode_cache_size")
    return enc


def _preprocessor(f: GGUFFile, k: Keys, schema: str) -> dict:
    pre = {"_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor", "window": "hann",
           "window_size": None, "window_stride": None,
           "frame_splicing": 1, "pad_to": 0, "dither": 0.0}
    if schema == PARAKEET_CPP:
        p = "parakeet.preprocessor."
        normalize = k.require(p + "normalize")
        if normalize not in ("per_feature", "NA"):
            raise _err(f, f"{p}normalize = {normalize!r} is not implemented (per_feature, NA)")
        pre.update(sample_rate=int(k.require(p + "sample_rate")), features=int(k.require(p + "n_mels")),
                   n_fft=int(k.require(p + "n_fft")), n_window_size=int(k.require(p + "win_length")),
                   n_window_stride=int(k.require(p + "hop_length")), preemph=float(k.require(p + "preemph")),
                   mag_power=float(k.require(p + "mag_power")), normalize=normalize,
                   log_zero_guard_value=float(k.require(p + "log_zero_guard")))
        if pre["preemph"] == 0.0:
            pre["preemph"] = None
    else:
        p = "stt.frontend."
        k.expect(p + "type", ("mel",))
        k.expect(p + "window", ("hann",))
        normalize = k.expect(p + "normalize", ("per_feature", "none", "NA"))
        sr = int(k.require(p + "sample_rate"))
        # NeMo's featurizer: pre-emphasis 0.97 (transcribe.cpp writes the constant), mel from 0 Hz to
        # sr/2 (NeMo's lowfreq 0 / highfreq None), log guard 2^-24 added; dither is training-only.
        k.accept([p + "dither"])
        preemph = float(k.require(p + "pre_emphasis"))
        if abs(preemph - 0.97) > 1e-6:
            raise _err(f, f"{p}pre_emphasis = {preemph} is not implemented (0.97, NeMo's)")
        fmin, fmax = float(k.require(p + "f_min")), float(k.require(p + "f_max"))
        if fmin != 0.0 or fmax != sr / 2:
            raise _err(f, f"{p}f_min/f_max = {fmin}/{fmax} is not implemented (0 and sample_rate/2, NeMo's)")
        pre.update(sample_rate=sr, features=int(k.require(p + "num_mels")), n_fft=int(k.require(p + "n_fft")),
                   n_window_size=int(k.require(p + "win_length")), n_window_stride=int(k.require(p + "hop_length")),
                   preemph=0.97, mag_power=2.0, log_zero_guard_value=2 ** -24,
                   normalize="per_feature" if normalize == "per_feature" else "NA")
    return pre


def build_config(f: GGUFFile, k: Keys, schema: str, joint_index: int) -> dict:
    """The NeMo config (the sections ParakeetModel reads) that the file's metadata describes."""
    cpp = schema == PARAKEET_CPP
    k.accept(_IDENTITY_KEYS)
    enc = _encoder(f, k, schema)
    pre = _preprocessor(f, k, schema)
    if cpp:
        kind = k.expect("parakeet.arch", ("ctc", "rnnt", "tdt", "hybrid_rnnt_ctc", "hybrid_tdt_ctc"))
        vocab = int(k.require("parakeet.vocab_size"))
        blank = int(k.require("parakeet.blank_id"))
    else:
        enc["feat_in"] = pre["features"]
        kind = k.expect("stt.parakeet.head_kind", ("ctc", "rnnt", "tdt"))
        k.accept(["stt.variant", "stt.capability.*"])
        blank = int(k.require("tokenizer.ggml.blank_token_id"))
        vocab = blank
    if blank != vocab:
        raise _err(f, f"blank id {blank} is not the vocabulary size {vocab} (NeMo puts the blank last)")
    if enc["feat_in"] != pre["features"]:
        raise _err(f, f"encoder.feat_in {enc['feat_in']} disagrees with the front end's {pre['features']} mel bands")
    cfg: dict = {"sample_rate": pre["sample_rate"], "preprocessor": pre, "encoder": enc}
    transducer = kind in ("rnnt", "tdt", "hybrid_rnnt_ctc", "hybrid_tdt_ctc")
    ctc = kind in ("ctc", "hybrid_rnnt_ctc", "hybrid_tdt_ctc")
    ctc_head = {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": enc["d_model"],
                "num_classes": vocab}
    if transducer:
        tdt = kind in ("tdt", "hybrid_tdt_ctc")
        if cpp:
            hidden, layers = int(k.require("decoder.pred_hidden")), int(k.require("decoder.pred_rnn_layers"))
            joint_hidden, act = int(k.require("joint.joint_hidden")), k.require("joint.activation")
            max_symbols = int(k.require("decoding.max_symbols"))
            durations = [int(d) for d in k.require("tdt.durations")] if tdt else []
        else:
            hidden, layers = int(k.require("predictor.hidden")), int(k.require("predictor.n_layers"))
            if int(k.require("predictor.vocab")) != vocab + 1:
                raise _err(f, f"stt.parakeet.predictor.vocab = {k.get('predictor.vocab')} is not the vocabulary "
                              f"{vocab} + blank")
            joint_hidden, act = int(k.require("joint.hidden")), k.require("joint.activation")
            extra = int(k.require("joint.num_extra_outputs"))
            durations = [int(d) for d in k.require("tdt.durations")] if tdt else []
            if extra != len(durations):
                raise _err(f, f"stt.parakeet.joint.num_extra_outputs = {extra} but {len(durations)} TDT durations")
            max_symbols = int(k.require("tdt.max_symbols")) if tdt else DEFAULT_MAX_SYMBOLS  # RNN-T files hold none
        cfg["decoder"] = {"_target_": "nemo.collections.asr.modules.RNNTDecoder", "vocab_size": vocab,
                          "blank_as_pad": True, "prednet": {"pred_hidden": hidden, "pred_rnn_layers": layers}}
        cfg["joint"] = {"_target_": "nemo.collections.asr.modules.RNNTJoint", "num_classes": vocab,
                        "num_extra_outputs": len(durations),
                        # the output Linear's Sequential index: 2 after a dropout, 1 without (ParakeetModel)
                        "jointnet": {"joint_hidden": joint_hidden, "activation": act, "encoder_hidden": enc["d_model"],
                                     "pred_hidden": hidden, "dropout": 0.1 if joint_index == 2 else 0.0}}
        cfg["decoding"] = {"model_type": "tdt" if tdt else "rnnt", "greedy": {"max_symbols": max_symbols}}
        if tdt:
            cfg["decoding"]["durations"] = durations
        if ctc:
            cfg["aux_ctc"] = {"decoder": ctc_head}
            cfg["target"] = "nemo.collections.asr.models.EncDecHybridRNNTCTCBPEModel"
        else:
            cfg["target"] = "nemo.collections.asr.models.EncDecRNNTBPEModel"
    else:
        cfg["decoder"] = ctc_head
        cfg["target"] = "nemo.collections.asr.models.EncDecCTCModelBPE"
    return cfg


# --------------------------------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------------------------------

def joint_index_of(f: GGUFFile, schema: str) -> int:
    """The joint output layer's Sequential index (NeMo: 2 after a dropout, 1 without). parakeet.cpp
    keeps NeMo's name, so the file says it; transcribe.cpp's `joint.out.*` does not (1: the layer sits
    right after the activation, which is what a dropout-free model is; the index only names the layer)."""
    if schema == TRANSCRIBE_CPP:
        return 1
    found = sorted({int(n.split(".")[2]) for n in f.tensors if n.startswith("joint.joint_net.")})
    if len(found) > 1:
        raise _err(f, f"joint output layers at several Sequential indices {found}")
    return found[0] if found else 1


def nemo_name(schema: str, name: str, joint_index: int) -> Optional[str]:
    """The NeMo state-dict name of a file's tensor (None: not a tensor of this schema)."""
    if schema == PARAKEET_CPP:
        return name
    return gguf_names.to_nemo(name, joint_index)


def read_state_dict(f: GGUFFile, schema: str, joint_index: int, hook: Optional[TensorHook] = None) -> dict:
    """The file's tensors as a NeMo state dict, read tensor by tensor (`GGUFFile.tensor` gives back
    each tensor's pages once copied). `hook(file, gguf_name, nemo_name)` may return the tensor itself
    (e.g. from the quantized bytes) or None to have it read here as float32. transcribe.cpp's summed
    LSTM bias becomes bias_ih = the sum and bias_hh = zeros: the predictor adds the two, so the result
    is the same bits. A name neither schema defines is a ModelError."""
    sd: dict[str, torch.Tensor] = {}
    for name in f.tensors:
        m = gguf_names.LSTM_BIAS.match(name) if schema == TRANSCRIBE_CPP else None
        target = f"decoder.prediction.dec_rnn.lstm.bias_ih_l{m.group(1)}" if m else nemo_name(schema, name, joint_index)
        if target is None:
            raise _err(f, f"tensor {name} is not part of a Parakeet model ({schema} schema)")
        t = hook(f, name, target) if hook is not None else None
        if t is None:
            t = f.tensor(name)
        if target in sd:
            raise _err(f, f"tensor {name} maps to {target}, which another tensor already gave")
        sd[target] = t
        if m:
            sd[f"decoder.prediction.dec_rnn.lstm.bias_hh_l{m.group(1)}"] = torch.zeros_like(t)
    return sd


def _check_layer_count(f: GGUFFile, k: Keys, schema: str, n_layers: int) -> None:
    """encoder.n_layers must be the number of encoder layers whose tensors the file holds
    (gguf.file.missing_layers)."""
    problem = missing_layers(f, "enc.blocks." if schema == TRANSCRIBE_CPP else "encoder.layers.", n_layers,
                             "encoder layers")
    if problem:
        raise _err(f, f"{k._full('encoder.n_layers')} = {problem}")


def _squeezed(shape) -> tuple:
    return tuple(d for d in shape if d != 1)


def fit_shapes(sd: dict, expected: dict) -> None:
    """ggml quantizers drop trailing size-1 dims (`ne`; leading ones in PyTorch order): a tensor whose
    shape differs from the expected one only by size-1 dims takes the expected shape (same data)."""
    for name, t in list(sd.items()):
        want = expected.get(name)
        if want is not None and tuple(t.shape) != tuple(want.shape) and _squeezed(t.shape) == _squeezed(want.shape):
            sd[name] = t.reshape(want.shape)


def _check_frontend(f: GGUFFile, sd: dict, model) -> None:
    """The stored filterbank and window (parakeet.cpp) must be ours for the same settings (equal within
    FB_RTOL / FB_ATOL, see there); then the model uses the stored ones, as it does a .nemo's (NeMo's
    buffers: the same bits as the checkpoint the file was made from). A file without them (transcribe.cpp)
    gets ours."""
    from ..nemo.frontend import NemoMelFrontEnd

    fresh = NemoMelFrontEnd(model.config.preprocessor)
    fit_shapes(sd, {"preprocessor.featurizer.fb": fresh.fb, "preprocessor.featurizer.window": fresh.window})
    for key, ours, what in (("preprocessor.featurizer.fb", fresh.fb, "filterbank"),
                            ("preprocessor.featurizer.window", fresh.window, "window")):
        stored = sd.get(key)
        if stored is None:
            continue
        if tuple(stored.shape) != tuple(ours.shape):
            raise _err(f, f"the stored {what} {key} has shape {tuple(stored.shape)}, ours for these settings "
                          f"{tuple(ours.shape)}")
        if not torch.allclose(stored.float(), ours.float(), rtol=FB_RTOL, atol=FB_ATOL):
            diff = float((stored.float() - ours.float()).abs().max())
            raise _err(f, f"the stored {what} differs from the one computed for the file's front-end settings "
                          f"(max difference {diff:.3g}; {key})")
    left = [n for n in sd if n.startswith("preprocessor.") and n not in (
        "preprocessor.featurizer.fb", "preprocessor.featurizer.window")]
    if left:
        raise _err(f, f"tensor {left[0]} is not part of a Parakeet model")


def _check_streaming(f: GGUFFile, k: Keys, schema: str, encoder) -> None:
    """The streaming schedule the file states must be the one our encoder derives (NeMo's streaming_cfg)."""
    from .cache_aware import check_streaming, schedule

    if schema == PARAKEET_CPP:
        keys = [x for x in f.meta if x.startswith("parakeet.streaming.")]
    else:
        keys = [x for x in f.meta if x.startswith("stt.parakeet.encoder.streaming.")]
    if not keys:
        return
    why = check_streaming(encoder)
    if why is not None:
        raise _err(f, f"{keys[0]} is stated, but the model is not cache-aware: {why}")
    s = schedule(encoder)
    if schema == PARAKEET_CPP:
        ours = s.to_dict()
        ours = {"parakeet.streaming." + a: b for a, b in ours.items()}
    else:
        p = "stt.parakeet.encoder.streaming."
        ours = {p + "pre_encode_cache_size": s.pre_encode_cache_size[1],
                p + "drop_extra_pre_encoded": s.drop_extra_pre_encoded,
                p + "sampling_frames_first": s.sampling_frames[0]}
    for key in keys:
        value = k.require(key)
        want = ours.get(key)
        if want is None:
            raise _err(f, f"metadata key {key} = {value!r} is not implemented")
        if (list(value) if isinstance(value, (list, tuple)) else value) != want:
            raise _err(f, f"{key} = {value!r} but this model's streaming schedule gives {want!r}")


# --------------------------------------------------------------------------------------------------
# The tokenizer
# --------------------------------------------------------------------------------------------------

def tokenizer_types(pieces: list, scores: list, types: list) -> tuple[list, int]:
    """SentencePiece piece types and model type from transcribe.cpp's token_type and scores. It writes
    SentencePiece's user-defined pieces (<EOU>, <EOB>...) as normal: a normal piece shaped <...> is one
    (SentencePiece's BPE never makes such a piece by merging). It calls every SentencePiece model "bpe";
    BPE scores are -k for the k-th normal piece, a unigram model's are log probabilities."""
    types = [USER_DEFINED if t == NORMAL and is_special_shape(p) else t for p, t in zip(pieces, types)]
    normal = [s for s, t in zip(scores, types) if t == NORMAL]
    return types, BPE if all(s == -i for i, s in enumerate(normal)) else UNIGRAM


def tokenizer_of(f: GGUFFile, k: Keys, schema: str, vocab: int) -> PiecesTokenizer:
    try:
        if schema == PARAKEET_CPP:
            pieces = list(k.require("parakeet.tokenizer.pieces"))
            if len(pieces) != vocab:
                raise _err(f, f"parakeet.tokenizer.pieces has {len(pieces)} pieces, the vocabulary {vocab}")
            return PiecesTokenizer(pieces)
        model = k.require("tokenizer.ggml.model")
        if model not in ("bpe", "llama"):
            raise _err(f, f"tokenizer.ggml.model = {model!r} is not implemented (bpe, llama: SentencePiece)")
        pieces = list(k.require("tokenizer.ggml.tokens"))
        scores = [float(s) for s in k.require("tokenizer.ggml.scores")]
        types = [int(t) for t in k.require("tokenizer.ggml.token_type")]
        if not len(pieces) == len(scores) == len(types) == vocab + 1:
            raise _err(f, f"tokenizer.ggml tokens/scores/token_type have {len(pieces)}/{len(scores)}/{len(types)} "
                          f"entries, the vocabulary {vocab} + the appended <blank>")
        if pieces[vocab] != "<blank>" or types[vocab] != CONTROL:
            raise _err(f, f"token {vocab} is {pieces[vocab]!r} (type {types[vocab]}), not the appended <blank>")
        pieces, scores, types = pieces[:vocab], scores[:vocab], types[:vocab]
        for key in ("unknown_token_id", "bos_token_id", "eos_token_id"):
            i = k.get("tokenizer.ggml." + key)
            if i is not None and not 0 <= int(i) < vocab:
                raise _err(f, f"tokenizer.ggml.{key} = {i} is outside the vocabulary")
        unk = k.get("tokenizer.ggml.unknown_token_id")
        if unk is not None and types[int(unk)] != UNKNOWN:
            raise _err(f, f"tokenizer.ggml.unknown_token_id = {unk} is not the unknown piece")
        types, model_type = tokenizer_types(pieces, scores, types)
        return PiecesTokenizer(pieces, scores, types, model_type)
    except ValueError as e:
        raise _err(f, f"tokenizer: {e}") from None


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------

def read(path, hook: Optional[TensorHook] = None, int8: Optional[bool] = False):
    """A Parakeet GGUF file -> (ParakeetModel with its weights, float32 on the CPU, batch norm not yet
    folded; the tokenizer; the schema). int8: the weights `quantize_int8` quantizes become int8 layers
    straight from the file's bytes (`gguf_int8`); None: a file storing them as Q8_0 keeps its encoder's
    as Q8_0 blocks (`gguf_int8`)."""
    from .gguf_int8 import Int8Reader, keeps_q8_0
    from .model import ParakeetModel

    f = GGUFFile(path)
    try:
        schema = schema_of(f)
        k = _Keys(f, "parakeet." if schema == PARAKEET_CPP else "stt.parakeet.")
        joint_index = joint_index_of(f, schema)
        cfg = build_config(f, k, schema, joint_index)
        _check_layer_count(f, k, schema, cfg["encoder"]["n_layers"])
        try:
            with torch.device("meta"):
                model = ParakeetModel(cfg)
        except (ValueError, KeyError, TypeError) as e:
            raise _err(f, f"model settings not supported ({e})") from None
        _check_streaming(f, k, schema, model.encoder)
        tokenizer = tokenizer_of(f, k, schema, model.vocab_size)
        k.finish()
        auto = int8 is None
        if auto:
            int8 = keeps_q8_0(f, lambda n: nemo_name(schema, n, joint_index))
        if int8:
            if hook is not None:
                raise ValueError("int8 reading takes no other tensor hook")
            hook = Int8Reader(q8_0_default=auto)
        sd = read_state_dict(f, schema, joint_index, hook)
        _check_frontend(f, sd, model)
        own = model.state_dict()
        ctc_as_decoder = model.decoder is None  # a CTC model's head is NeMo's decoder.decoder_layers.*
        in_model = {n: ("ctc_" + n if ctc_as_decoder and n.startswith("decoder.decoder_layers.") else n) for n in sd}
        fit_shapes(sd, {n: own.get(m) for n, m in in_model.items()})
        have = set(in_model.values())
        for n in own:
            if n not in have and not n.startswith("preprocessor.") and not n.endswith("num_batches_tracked"):
                nemo = n[len("ctc_"):] if ctc_as_decoder and n.startswith("ctc_decoder.") else n
                stored = gguf_names.to_transcribe_cpp(nemo) if schema == TRANSCRIBE_CPP else nemo
                if schema == TRANSCRIBE_CPP and stored is None and gguf_names.NEMO_LSTM_BIAS.match(nemo):
                    stored = "pred.lstm.{}.bias".format(nemo.rsplit("_l", 1)[1])
                raise _err(f, f"tensor {stored} is missing" + (f" (NeMo {nemo})" if stored != nemo else ""))
        try:
            model.load_nemo_state_dict(sd)
        except KeyError as e:
            msg = str(e.args[0] if e.args else e)
            if schema == TRANSCRIBE_CPP:
                msg += " (NeMo names; transcribe.cpp names via transcribe/parakeet/gguf_names.py)"
            raise _err(f, msg) from None
        if int8:
            hook.adopt(model)
        return model, tokenizer, schema
    finally:
        f.close()


def load(path: Path, name: str, device, dtype):
    """`load_model` for a Parakeet GGUF file: a ParakeetASR, as from the .nemo it was made from. By
    default a file's Q8_0 weights stay compressed (the encoder's as Q8_0 blocks) and the rest is float32 (`gguf_int8`);
    dtype int8 quantizes every layer a .nemo's int8 does; float32 / bfloat16 / float16 dequantize all."""
    from .recognizer import ParakeetASR

    model, tokenizer, _ = read(path, int8=None if dtype is None else dtype == torch.int8)
    return ParakeetASR.finish_load(model, tokenizer, name, device, dtype)

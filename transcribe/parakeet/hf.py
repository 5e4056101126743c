"""Parakeet as a Hugging Face transformers folder (what transformers' `convert_nemo_to_hf.py` writes for
`ParakeetForCTC` / `ParakeetForTDT`): `config.json` (`model_type` `parakeet_ctc` / `parakeet_tdt`, with an
`encoder_config` of `parakeet_encoder`), `model.safetensors`, `tokenizer.json` (+ `tokenizer_config.json`) and
the feature extractor's settings (`processor_config.json`, or `preprocessor_config.json`).

It is built as the same `ParakeetModel` / `ParakeetASR` a `.nemo` builds (as `gguf.py` does for GGUF files): the
config becomes the NeMo config it stands for, the weights are renamed back to NeMo's names, and every search,
timestamp, long-input, int8 and streaming path is the `.nemo` model's. What the layout says, and what it implies:

- the encoder is NeMo's FastConformer as transformers implements it: dw_striding subsampling (kernel 3, stride
  2), rel_pos attention with per-layer biases (`bias_u`, `bias_v`: NeMo's untied biases), full attention, batch
  norm in the convolution module, SiLU feed-forward; `intermediate_size` is d_model x NeMo's
  ff_expansion_factor; one bias switch for the linear layers and the convolutions (NeMo's `use_bias`);
- the front end is `ParakeetFeatureExtractor`'s: NeMo's log-mel (pre-emphasis, centred STFT with zero padding,
  power spectrum, slaney mel from 0 Hz to sample_rate/2, log with 2^-24 added) and always per-feature
  normalisation over `samples // hop` frames, no `pad_to`, no dither (transformers' converter drops NeMo's
  `normalize` and `pad_to`: a NeMo model with `normalize: NA` is normalised by transformers, and so here). The
  filterbank is not stored; ours is computed (transformers' differs from it in the last float32 bits);
- the vocabulary is tokenizer.json's (`ParakeetConverter`: SentencePiece BPE pieces in SentencePiece's order;
  the tokens transformers appends, `<pad>` and `<blank>`, sit at and after the blank id and are not pieces); the
  blank is the last class: `pad_token_id` for CTC (= vocab_size - 1), `blank_token_id` for TDT and RNN-T (=
  vocab_size - 1);
- TDT and RNN-T: the joint's width is `decoder_hidden_size` (the predictor's), its activation `hidden_act`, durations
  `durations` (TDT), at most `max_symbols_per_step` symbols a frame (NeMo's greedy `max_symbols`; transformers'
  own greedy TDT loop does not bound them, which changes nothing where a frame's symbols stay under it).

Every config key is read, or accepted by name as not changing inference (dropouts, initialisation, loss,
bookkeeping), or refused with a `ModelError` naming it. Loading runs no code from the folder: JSON files and
safetensors tensors.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

from ..errors import ModelError

# (torch and the tokenizer are imported where used: `detect` reads config.json through this module while the
# command checks its options, before torch is imported)

MODEL_TYPES = {"parakeet_ctc": "ctc", "parakeet_tdt": "tdt", "parakeet_rnnt": "rnnt"}
ARCHITECTURES = {"ctc": "ParakeetForCTC", "tdt": "ParakeetForTDT", "rnnt": "ParakeetForRNNT"}
CONFIG = "config.json"
MAX_JSON_BYTES = {"config.json": 1 << 20, "processor_config.json": 1 << 20, "preprocessor_config.json": 1 << 20,
                  "tokenizer.json": 64 << 20, "tokenizer_config.json": 16 << 20}
# Sizes a config may give (far above every published Parakeet), so a hostile file is refused before a module
# is built.
MAX_SIZE = {"hidden_size": 16384, "intermediate_size": 65536, "num_hidden_layers": 256, "num_attention_heads": 256,
            "max_position_embeddings": 1 << 17, "vocab_size": 1 << 20, "num_mel_bins": 1024, "conv_kernel_size": 1023,
            "subsampling_conv_channels": 16384, "subsampling_factor": 64, "decoder_hidden_size": 16384,
            "num_decoder_layers": 64, "max_symbols_per_step": 1000}

_GENERIC = "a transformers bookkeeping key; no effect at inference"
_TRAINING = "training only"
_BOOK = {k: _GENERIC for k in ("transformers_version", "dtype", "torch_dtype", "_name_or_path", "output_attentions",
                               "output_hidden_states", "return_dict", "id2label", "label2id", "chunk_size_feed_forward",
                               "problem_type", "use_cache", "tie_word_embeddings", "tokenizer_class",
                               "is_encoder_decoder", "bos_token_id", "eos_token_id", "sep_token_id",
                               "_attn_implementation_autoset", "tie_encoder_decoder")}
HARMLESS = {
    "config": {**_BOOK, "architectures": "the class transformers builds (checked against model_type)",
               "initializer_range": _TRAINING, "ctc_loss_reduction": _TRAINING, "ctc_zero_infinity": _TRAINING},
    "encoder_config": {**_BOOK, "dropout": _TRAINING, "dropout_positions": _TRAINING, "layerdrop": _TRAINING,
                       "activation_dropout": _TRAINING, "attention_dropout": _TRAINING, "initializer_range": _TRAINING,
                       "architectures": _GENERIC, "num_key_value_heads": "checked: num_attention_heads"},
    "feature_extractor": {"feature_extractor_type": "checked: ParakeetFeatureExtractor", "processor_class": _GENERIC,
                          "return_attention_mask": "the mask is always used", "padding_side": "checked: right"},
}


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- files

def _read_json(path: Path, limit: int) -> Any:
    if path.stat().st_size > limit:
        raise ModelError(f"{path}: {path.stat().st_size} bytes, more than the {limit} this code reads")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelError(f"{path}: not a JSON file ({e})") from None


def model_type_of(path: Path) -> Optional[str]:
    """"ctc" / "tdt" / "rnnt" for a folder whose config.json names a Parakeet model_type this reads; the raw model_type
    string for another parakeet_* one (refused by `load`); None otherwise (the config read alone)."""
    cfg = path / CONFIG
    if not path.is_dir() or not cfg.is_file():
        return None
    try:
        data = _read_json(cfg, MAX_JSON_BYTES[CONFIG])
    except ModelError:
        return None
    mt = data.get("model_type") if isinstance(data, dict) else None
    if not isinstance(mt, str) or not mt.startswith("parakeet_") or mt == "parakeet_encoder":
        return None
    return MODEL_TYPES.get(mt, mt)


def _json(folder: Path, name: str, required: bool = True) -> Any:
    path = folder / name
    if not path.is_file():
        if required:
            raise ModelError(f"{folder}: {name} is missing (a transformers Parakeet folder has it)")
        return None
    data = _read_json(path, MAX_JSON_BYTES[name])
    if not isinstance(data, dict):
        raise ModelError(f"{path}: not a JSON object")
    return data


class _Section:
    """A config part whose keys must each be read or accepted (`HARMLESS`); `finish` refuses the rest."""

    def __init__(self, data: dict, name: str, where: str):
        if not isinstance(data, dict):
            raise ModelError(f"{where}: {name} is not a JSON object")
        self.data, self.name, self.where, self.seen = data, name, where, set()

    def get(self, key: str, default=None):
        self.seen.add(key)
        return self.data.get(key, default)

    def require(self, key: str):
        self.seen.add(key)
        if key not in self.data:
            raise ModelError(f"{self.where}: {self.name}.{key} is missing")
        return self.data[key]

    def int(self, key: str, default=None, lo: int = 1) -> int:
        v = self.require(key) if default is None else self.get(key, default)
        hi = MAX_SIZE.get(key, 1 << 20)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ModelError(f"{self.where}: {self.name}.{key} = {_short(v)} is not an integer in [{lo}, {hi}]")
        return v

    def bool(self, key: str, default=None) -> bool:
        v = self.require(key) if default is None else self.get(key, default)
        if not isinstance(v, bool):
            raise ModelError(f"{self.where}: {self.name}.{key} = {_short(v)} is not true or false")
        return v

    def expect(self, key: str, allowed: tuple, default=None):
        v = self.get(key, default)
        if v not in allowed:
            raise ModelError(f"{self.where}: {self.name}.{key} = {_short(v)} is not implemented "
                             f"({', '.join(map(repr, allowed))})")
        return v

    def finish(self, harmless: dict, also: tuple = ()) -> None:
        for key in self.data:
            if key not in self.seen and key not in harmless and key not in also:
                raise ModelError(f"{self.where}: {self.name}.{key} = {_short(self.data[key])} is not implemented "
                                 "(a setting this code does not know)")


# -- config

def _encoder(cfg: dict, where: str) -> dict:
    e = _Section(cfg, "encoder_config", where)
    e.expect("model_type", ("parakeet_encoder",), "parakeet_encoder")
    d = e.int("hidden_size")
    heads = e.int("num_attention_heads")
    if d % heads:
        raise ModelError(f"{where}: encoder_config.hidden_size {d} is not a multiple of num_attention_heads {heads}")
    kv = e.data.get("num_key_value_heads", heads)
    if kv != heads:
        raise ModelError(f"{where}: encoder_config.num_key_value_heads = {_short(kv)} is not implemented "
                         f"(num_attention_heads, {heads})")
    ff = e.int("intermediate_size")
    if ff % d:
        raise ModelError(f"{where}: encoder_config.intermediate_size {ff} is not a multiple of hidden_size {d} "
                         "(NeMo's ff_expansion_factor)")
    e.expect("hidden_act", ("silu", "swish"), "silu")
    bias = e.bool("attention_bias", True)
    if e.bool("convolution_bias", True) != bias:
        raise ModelError(f"{where}: encoder_config.attention_bias and convolution_bias differ (NeMo has one use_bias; "
                         "not implemented)")
    e.expect("subsampling_conv_kernel_size", (3,), 3)
    e.expect("subsampling_conv_stride", (2,), 2)
    factor = e.int("subsampling_factor", 8)
    if factor & (factor - 1) or factor < 2:
        raise ModelError(f"{where}: encoder_config.subsampling_factor = {factor} is not a power of 2")
    enc = {
        "_target_": "nemo.collections.asr.modules.ConformerEncoder",
        "feat_in": e.int("num_mel_bins", 80), "n_layers": e.int("num_hidden_layers"), "d_model": d,
        "n_heads": heads, "ff_expansion_factor": ff // d, "conv_kernel_size": e.int("conv_kernel_size", 9),
        "conv_norm_type": "batch_norm", "subsampling": "dw_striding", "subsampling_factor": factor,
        "subsampling_conv_channels": e.int("subsampling_conv_channels", 256),
        "xscaling": e.bool("scale_input", True), "pos_emb_max_len": e.int("max_position_embeddings", 5000),
        "use_bias": bias, "self_attention_model": "rel_pos", "untie_biases": True, "feat_out": -1,
        "att_context_size": [-1, -1], "att_context_style": "regular", "causal_downsampling": False,
        "conv_context_size": None,
    }
    if enc["conv_kernel_size"] % 2 == 0:
        raise ModelError(f"{where}: encoder_config.conv_kernel_size = {enc['conv_kernel_size']} is even (not "
                         "implemented: transformers pads it symmetrically)")
    e.finish(HARMLESS["encoder_config"])
    return enc


def _preprocessor(folder: Path, features: int) -> dict:
    name = "processor_config.json" if (folder / "processor_config.json").is_file() else "preprocessor_config.json"
    data = _json(folder, name)
    where = str(folder / name)
    fe = data.get("feature_extractor", data) if name == "processor_config.json" else data
    if name == "processor_config.json":
        p = _Section(data, "processor", where)
        p.get("feature_extractor")
        p.expect("processor_class", ("ParakeetProcessor",), "ParakeetProcessor")
        p.get("blank_token")
        p.get("decoder_type")
        p.finish({})
    f = _Section(fe, "feature_extractor", where)
    f.expect("feature_extractor_type", ("ParakeetFeatureExtractor",), "ParakeetFeatureExtractor")
    f.expect("padding_side", ("right",), "right")
    pad = f.get("padding_value", 0.0)
    if pad != 0.0:
        raise ModelError(f"{where}: feature_extractor.padding_value = {_short(pad)} is not implemented (0.0)")
    sr = f.int("sampling_rate", 16000)
    n_mels = f.int("feature_size", 80)
    if n_mels != features:
        raise ModelError(f"{where}: feature_size {n_mels} disagrees with the encoder's num_mel_bins {features}")
    n_fft, win, hop = f.int("n_fft", 512), f.int("win_length", 400), f.int("hop_length", 160)
    if win > n_fft or hop > n_fft:
        raise ModelError(f"{where}: win_length {win} / hop_length {hop} longer than n_fft {n_fft}")
    pre = f.get("preemphasis", 0.97)
    if pre is not None and (isinstance(pre, bool) or not isinstance(pre, (int, float)) or not 0.0 <= pre < 1.0):
        raise ModelError(f"{where}: feature_extractor.preemphasis = {_short(pre)} is not a number in [0, 1)")
    f.finish(HARMLESS["feature_extractor"])
    return {"_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor", "sample_rate": sr,
            "features": n_mels, "n_fft": n_fft, "n_window_size": win, "n_window_stride": hop,
            "window_size": None, "window_stride": None, "window": "hann", "normalize": "per_feature",
            "preemph": float(pre) if pre else None, "mag_power": 2.0, "log_zero_guard_value": 2 ** -24,
            "frame_splicing": 1, "pad_to": 0, "dither": 0.0}


def build_config(folder: Path) -> tuple[dict, str, int]:
    """config.json (+ the feature extractor's) -> (the NeMo config it stands for, "ctc"/"tdt"/"rnnt", the blank
    id)."""
    where = str(folder / CONFIG)
    c = _Section(_json(folder, CONFIG), "config", where)
    mt = c.require("model_type")
    kind = MODEL_TYPES.get(mt)
    if kind is None:
        raise ModelError(f"{where}: model_type = {_short(mt)} is not implemented (parakeet_ctc, parakeet_tdt, "
                         "parakeet_rnnt)")
    arch = c.get("architectures")
    want = ARCHITECTURES[kind]
    if arch is not None and arch != [want]:
        raise ModelError(f"{where}: architectures = {_short(arch)}, not [{want!r}] as model_type {mt} says")
    enc = _encoder(c.require("encoder_config"), where)
    pre = _preprocessor(folder, enc["feat_in"])
    vocab_with_blank = c.int("vocab_size", lo=2)
    vocab = vocab_with_blank - 1
    cfg: dict = {"sample_rate": pre["sample_rate"], "preprocessor": pre, "encoder": enc}
    if kind == "ctc":
        blank = c.int("pad_token_id", lo=0)
        if blank != vocab:
            raise ModelError(f"{where}: pad_token_id (CTC's blank) = {blank} is not the last class {vocab} "
                             "(not implemented)")
        cfg["decoder"] = {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": enc["d_model"],
                          "num_classes": vocab}
        cfg["target"] = "nemo.collections.asr.models.EncDecCTCModelBPE"
    else:
        blank = c.int("blank_token_id", lo=0)
        if blank != vocab:
            raise ModelError(f"{where}: blank_token_id = {blank} is not the last class {vocab} (not implemented)")
        c.int("pad_token_id", lo=0)
        hidden = c.int("decoder_hidden_size")
        layers = c.int("num_decoder_layers")
        act = c.expect("hidden_act", ("relu", "tanh", "sigmoid", "silu", "swish"), "relu")
        durations = []
        if kind == "tdt":
            durations = c.require("durations")
            if (not isinstance(durations, list) or not durations or len(durations) > 64
                    or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 1000 for x in durations)):
                raise ModelError(f"{where}: durations = {_short(durations)} is not a list of frame counts")
            if 1 not in durations:
                raise ModelError(f"{where}: durations {durations} have no 1 (a blank must advance)")
        max_symbols = c.int("max_symbols_per_step", 10)
        cfg["decoder"] = {"_target_": "nemo.collections.asr.modules.RNNTDecoder", "vocab_size": vocab,
                          "blank_as_pad": True, "prednet": {"pred_hidden": hidden, "pred_rnn_layers": layers}}
        cfg["joint"] = {"_target_": "nemo.collections.asr.modules.RNNTJoint", "num_classes": vocab,
                        "num_extra_outputs": len(durations),
                        "jointnet": {"joint_hidden": hidden, "activation": act, "encoder_hidden": enc["d_model"],
                                     "pred_hidden": hidden, "dropout": 0.0}}
        cfg["decoding"] = {"model_type": kind, "greedy": {"max_symbols": max_symbols}}
        if kind == "tdt":
            cfg["decoding"]["durations"] = list(durations)
        cfg["target"] = "nemo.collections.asr.models.EncDecRNNTBPEModel"
    c.finish(HARMLESS["config"])
    return cfg, kind, blank


# -- weights: transformers' names -> NeMo's (the converter's renames, reversed). The joint's output layer is
# NeMo's joint_net.1 (no dropout module at inference; ParakeetModel's index for dropout 0).
_RENAMES = [
    (r"^encoder\.subsampling\.layers\.", "encoder.pre_encode.conv."),
    (r"^encoder\.subsampling\.linear\.", "encoder.pre_encode.out."),
    (r"^encoder\.layers\.(\d+)\.conv\.norm\.", r"encoder.layers.\1.conv.batch_norm."),
    (r"\.self_attn\.q_proj\.", ".self_attn.linear_q."),
    (r"\.self_attn\.k_proj\.", ".self_attn.linear_k."),
    (r"\.self_attn\.v_proj\.", ".self_attn.linear_v."),
    (r"\.self_attn\.o_proj\.", ".self_attn.linear_out."),
    (r"\.self_attn\.relative_k_proj\.", ".self_attn.linear_pos."),
    (r"\.self_attn\.bias_([uv])$", r".self_attn.pos_bias_\1"),
    (r"^ctc_head\.(weight|bias)$", r"decoder.decoder_layers.0.\1"),
    (r"^decoder\.decoder_projector\.", "joint.pred."),
    (r"^decoder\.embedding\.", "decoder.prediction.embed."),
    (r"^decoder\.lstm\.", "decoder.prediction.dec_rnn.lstm."),
    (r"^encoder_projector\.", "joint.enc."),
    (r"^joint\.head\.", "joint.joint_net.1."),
]


def nemo_name(name: str) -> str:
    for pattern, repl in _RENAMES:
        name = re.sub(pattern, repl, name)
    return name


def read_state_dict(folder: Path) -> dict:
    from ..safetensors_files import read_tensors, weight_files

    sd = {}
    for name, t in read_tensors(weight_files(folder)).items():
        target = nemo_name(name)
        if target in sd:
            raise ModelError(f"{folder}: tensor {name} maps to {target}, which another tensor already gave")
        sd[target] = t.float() if t.is_floating_point() else t
    return sd


# -- tokenizer

def tokenizer_of(folder: Path, vocab: int):
    """tokenizer.json (`ParakeetConverter`'s: a BPE model over SentencePiece's pieces, a Metaspace decoder) ->
    the first `vocab` pieces as a SentencePiece tokenizer (decoding exact; BPE scores assumed in piece order)."""
    where = str(folder / "tokenizer.json")
    data = _json(folder, "tokenizer.json")
    model = data.get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise ModelError(f"{where}: model.type = {_short(model.get('type') if isinstance(model, dict) else model)} "
                         "is not implemented (BPE, as transformers' ParakeetConverter writes)")
    table: dict[int, str] = {}
    for piece, i in model["vocab"].items():
        if isinstance(i, int) and not isinstance(i, bool):
            table[i] = str(piece)
    for tok in data.get("added_tokens") or []:
        if not isinstance(tok, dict) or not isinstance(tok.get("id"), int) or "content" not in tok:
            raise ModelError(f"{where}: added_tokens entry {_short(tok)} is malformed")
        table.setdefault(tok["id"], str(tok["content"]))
    missing = [i for i in range(vocab) if i not in table]
    if missing:
        raise ModelError(f"{where}: the vocabulary lacks ids {missing[:5]} of the model's {vocab} classes")
    dec = data.get("decoder") or {}
    if not isinstance(dec, dict) or dec.get("type") != "Metaspace" or dec.get("replacement", "▁") != "▁":
        raise ModelError(f"{where}: decoder = {_short(dec)} is not implemented (Metaspace with '▁')")
    pieces = [table[i] for i in range(vocab)]
    from ..text.sentencepiece import PiecesTokenizer

    try:
        return PiecesTokenizer(pieces)
    except ValueError as e:
        raise ModelError(f"{where}: {e}") from None


# -- loading

def read(folder: Path):
    """A transformers Parakeet folder -> (ParakeetModel with its weights, float32 on the CPU, batch norm not yet
    folded; the tokenizer; "ctc", "tdt" or "rnnt")."""
    import torch

    from .model import ParakeetModel

    cfg, kind, blank = build_config(folder)
    try:
        with torch.device("meta"):
            model = ParakeetModel(cfg)
    except (ValueError, KeyError, TypeError) as e:
        raise ModelError(f"{folder}: model settings not supported ({e})") from None
    tokenizer = tokenizer_of(folder, blank)
    sd = read_state_dict(folder)
    n = cfg["encoder"]["n_layers"]
    layers = {int(m.group(1)) for k in sd for m in [re.match(r"encoder\.layers\.(\d+)\.", k)] if m}
    if layers != set(range(n)):
        raise ModelError(f"{folder}: encoder_config.num_hidden_layers = {n}, but the weights hold encoder layers "
                         f"{sorted(layers)[:8]}")
    try:
        model.load_nemo_state_dict(sd)
    except KeyError as e:
        raise ModelError(f"{folder}: {e.args[0] if e.args else e} (NeMo names; transformers' names via "
                         "transcribe/parakeet/hf.py)") from None
    return model, tokenizer, kind


def checkpoint(folder: Path):
    """The folder as the NeMo checkpoint it stands for (`transcribe convert` writes GGUF files from it): the NeMo
    config, the weights under NeMo's names with our front end's filterbank and window (transformers stores none;
    parakeet.cpp's schema stores them), the vocabulary as a SentencePiece model (BPE scores in piece order)."""
    from ..nemo.checkpoint import NemoCheckpoint
    from ..nemo.config import frontend_config
    from ..nemo.frontend import NemoMelFrontEnd
    from ..text.sentencepiece import sentencepiece_proto

    cfg, _, blank = build_config(folder)
    tokenizer_of(folder, blank)  # checked as load checks it
    data = _json(folder, "tokenizer.json")
    table = {int(i): str(p) for p, i in data["model"]["vocab"].items() if isinstance(i, int)}
    for tok in data.get("added_tokens") or []:
        table.setdefault(tok["id"], str(tok["content"]))
    sd = read_state_dict(folder)
    front = NemoMelFrontEnd(frontend_config(cfg))
    sd["preprocessor.featurizer.fb"] = front.fb.clone()
    sd["preprocessor.featurizer.window"] = front.window.clone()
    return NemoCheckpoint(config=cfg, state_dict=sd, tokenizer=sentencepiece_proto([table[i] for i in range(blank)]),
                          source=str(folder))


def load(path: Path, name: str, device, dtype):
    """`load_model` for a transformers Parakeet folder: a ParakeetASR, as from the .nemo it was converted from."""
    from .recognizer import ParakeetASR

    model, tokenizer, _ = read(path)
    return ParakeetASR.finish_load(model, tokenizer, name, device, dtype)

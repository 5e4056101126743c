"""Canary as a Hugging Face transformers folder (what `CanaryForConditionalGeneration.save_pretrained` and
`CanaryProcessor.save_pretrained` write): `config.json` (`model_type: canary`, with `encoder_config` of
`parakeet_encoder` and `decoder_config` of `canary_decoder`), `model.safetensors`, `generation_config.json`,
`tokenizer.json` (+ `tokenizer_config.json`) and the feature extractor's settings (`processor_config.json`, or
`preprocessor_config.json`).

It is built as the same `CanaryModel` / `CanaryTokenizer` / `CanaryASR` a `.nemo` builds: the config becomes
the NeMo config it stands for, the weights are renamed to NeMo's names, and what transformers does differently
from NeMo is kept as transformers does it:

- the decoder's sinusoidal position table is not stored: transformers recomputes it with all sines, then all
  cosines (`[sin | cos] / sqrt(hidden)`), where NeMo's table interleaves them; it is computed here as
  transformers computes it and given to the decoder as its table;
- `decoder_config.head_dim` may differ from hidden / heads (the attention projections are heads x head_dim);
- there is no `encoder_decoder_proj` (the encoder and the decoder have one width); the head `proj_out` has the
  token embedding as its weight (`tie_word_embeddings`) and its own bias;
- the feature extractor (`ParakeetFeatureExtractor`) is NeMo's front end without dither and without `pad_to`
  (per-feature normalisation over `samples // hop` frames, as NeMo's); inputs are not padded to one second
  as NeMo's `transcribe()` pads them;
- the prompt is transformers' chat template's, NeMo's canary2 layout (`<|startofcontext|>
  <|startoftranscript|> <|emo:undefined|> <|src|> <|tgt|> <|pnc|>/<|nopnc|> <|noitn|> <|notimestamp|>
  <|nodiarize|>`), `decoder_start_token_id` its first token;
- the searches are `generate()`'s: greedy (argmax of the raw logits, EOS ends a row) and transformers' beam
  search (`search/hf_beam.py`: hypotheses ranked by log-probability sum / length ** length_penalty, 1.0 by
  default, where NeMo's beam ranks raw sums); `generation_config.json`'s num_beams and length_penalty are
  the defaults (beam_size 1 is transformers' greedy search);
- the length bound is `max_new_tokens` (the option, else `generation_config.json`'s `max_new_tokens` or
  `max_length`, else the decoder's position table: transformers' own fallback, 20 new tokens, is
  `generate()`'s generic default, which cuts a transcript short, and is not taken); EOS counts in it;
- the text is `batch_decode(..., skip_special_tokens=True)`'s (`hf_tokenizer.py`): special tokens dropped,
  `▁` a space, the first piece's leading space removed (the Metaspace decoder).

Word timestamps are refused (transformers' template has no timestamp switch, and its text drops the
timestamp tokens); `itn` switches the prompt's `<|itn|>` token as for NeMo's canary2 models (transformers'
template always writes `<|noitn|>`).

Every config key is read, or accepted by name as not changing inference (dropouts, initialisation, cache
switches, identity), or refused with a `ModelError` naming it. Loading runs no code from the folder: JSON
files and `safetensors.torch.load_file`.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ..errors import ModelError, OptionValueError
from ..options import MAX_BEAM
from .recognizer import CanaryASR
from .hf_tokenizer import HFCanaryTokenizer, from_tokenizer_json

MODEL_TYPE = "canary"
CONFIG = "config.json"
WEIGHTS = "model.safetensors"
# Bounds on the JSON files read (far above any published model's: canary-1b-v2's tokenizer.json is ~1 MB).
MAX_JSON_BYTES = {"config.json": 1 << 20, "generation_config.json": 1 << 20, "processor_config.json": 1 << 20,
                  "preprocessor_config.json": 1 << 20, "tokenizer_config.json": 16 << 20,
                  "tokenizer.json": 256 << 20}
START = "<|startofcontext|>"

_GENERIC = "a transformers bookkeeping key; no effect at inference"
_TRAINING = "training only"
# Keys of each config part that do not change what the model computes at inference.
HARMLESS = {
    "config": {"architectures": "the class transformers builds (checked: CanaryForConditionalGeneration)",
               "initializer_range": _TRAINING, "transformers_version": _GENERIC, "use_cache": _GENERIC,
               "dtype": "the weights' dtype (read from the safetensors file)", "torch_dtype": _GENERIC,
               "is_encoder_decoder": _GENERIC, "output_attentions": _GENERIC, "output_hidden_states": _GENERIC,
               "return_dict": _GENERIC, "_name_or_path": _GENERIC, "id2label": _GENERIC, "label2id": _GENERIC,
               "chunk_size_feed_forward": _GENERIC, "problem_type": _GENERIC, "tokenizer_class": _GENERIC,
               "sep_token_id": "not used by generation", "tie_encoder_decoder": _GENERIC},
    "encoder_config": {"dropout": _TRAINING, "dropout_positions": _TRAINING, "layerdrop": _TRAINING,
                       "activation_dropout": _TRAINING, "attention_dropout": _TRAINING,
                       "initializer_range": _TRAINING, "transformers_version": _GENERIC, "dtype": _GENERIC,
                       "torch_dtype": _GENERIC, "_name_or_path": _GENERIC, "architectures": _GENERIC,
                       "output_attentions": _GENERIC, "output_hidden_states": _GENERIC, "return_dict": _GENERIC,
                       "id2label": _GENERIC, "label2id": _GENERIC, "chunk_size_feed_forward": _GENERIC,
                       "use_cache": _GENERIC, "is_encoder_decoder": _GENERIC},
    "decoder_config": {"attention_dropout": _TRAINING, "initializer_range": _TRAINING, "use_cache": _GENERIC,
                       "is_encoder_decoder": _GENERIC, "transformers_version": _GENERIC, "dtype": _GENERIC,
                       "torch_dtype": _GENERIC, "_name_or_path": _GENERIC, "architectures": _GENERIC,
                       "output_attentions": _GENERIC, "output_hidden_states": _GENERIC, "return_dict": _GENERIC,
                       "id2label": _GENERIC, "label2id": _GENERIC, "chunk_size_feed_forward": _GENERIC,
                       "tie_word_embeddings": "the top config's decides",
                       "bos_token_id": "checked against the top config's", "eos_token_id": "checked against the "
                       "top config's", "pad_token_id": "checked against the top config's"},
    "feature_extractor": {"feature_extractor_type": "checked: ParakeetFeatureExtractor",
                          "processor_class": _GENERIC, "return_attention_mask": "the mask is always used",
                          "padding_side": "checked: right"},
    "generation_config": {"_from_model_config": _GENERIC, "transformers_version": _GENERIC, "use_cache": _GENERIC,
                          "output_attentions": _GENERIC, "output_hidden_states": _GENERIC,
                          "output_scores": _GENERIC, "output_logits": _GENERIC, "return_dict_in_generate": _GENERIC,
                          "bos_token_id": "checked against the vocabulary",
                          "pad_token_id": "checked against the vocabulary",
                          "eos_token_id": "checked against the vocabulary",
                          "decoder_start_token_id": "checked against the vocabulary"},
}
# Sizes a config may give (far above every published Canary), so a hostile file is refused before a module
# is built.
MAX_SIZE = {"hidden_size": 16384, "intermediate_size": 65536, "num_hidden_layers": 256, "num_attention_heads": 256,
            "head_dim": 4096, "max_position_embeddings": 1 << 16, "vocab_size": 1 << 20, "num_mel_bins": 1024,
            "conv_kernel_size": 1023, "subsampling_conv_channels": 16384, "subsampling_factor": 64}
_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "silu", "swish": "swish"}


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- files

def is_hf_canary(path: Path) -> bool:
    """Whether `path` is a folder whose config.json says `model_type: canary` (the config read alone)."""
    cfg = path / CONFIG
    if not path.is_dir() or not cfg.is_file():
        return False
    try:
        data = _json(path, CONFIG)
    except ModelError:
        return False
    return isinstance(data, dict) and data.get("model_type") == MODEL_TYPE


def _json(folder: Path, name: str, required: bool = True) -> Any:
    path = folder / name
    if not path.is_file():
        if required:
            raise ModelError(f"{folder}: {name} is missing (a transformers Canary folder has it)")
        return None
    limit = MAX_JSON_BYTES[name]
    if path.stat().st_size > limit:
        raise ModelError(f"{path}: {path.stat().st_size} bytes, more than the {limit} this code reads")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"{path}: not valid JSON ({e})") from None


class _Part:
    """One part of a config (a dict), read key by key: what is not read nor harmless is an error."""

    def __init__(self, name: str, data, where: str):
        if not isinstance(data, dict):
            raise ModelError(f"{where}: {name} is not a mapping")
        self.name, self.data, self.where, self.read = name, data, where, set()

    def get(self, key: str, default=None):
        self.read.add(key)
        return self.data.get(key, default)

    def require(self, key: str):
        self.read.add(key)
        if key not in self.data:
            raise ModelError(f"{self.where}: {self.name}.{key} is missing")
        return self.data[key]

    def size(self, key: str, default=None, least: int = 1) -> int:
        value = self.require(key) if default is None else self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_SIZE[key]:
            raise ModelError(f"{self.where}: {self.name}.{key} = {_short(value)} is out of the range this code "
                             f"accepts ({least} to {MAX_SIZE[key]})")
        return value

    def expect(self, key: str, allowed: tuple, default=None):
        value = self.get(key, default)
        if value not in allowed or isinstance(value, bool) != isinstance(allowed[0], bool):
            raise ModelError(f"{self.where}: {self.name}.{key} = {_short(value)} is not implemented "
                             f"(only {', '.join(map(repr, allowed))})")
        return value

    def finish(self) -> None:
        harmless = HARMLESS.get(self.name, {})
        for key, value in self.data.items():
            if key not in self.read and key not in harmless:
                raise ModelError(f"{self.where}: {self.name}.{str(key)[:80]} = {_short(value)} is a setting this "
                                 "code does not implement")


# -- config

@dataclasses.dataclass(frozen=True)
class HFSettings:
    """What a transformers folder says beyond NeMo's config: the per-head width, the special ids, the
    default search and its length bounds."""

    head_dim: int
    tied: bool
    bos: int
    eos: int
    pad: int
    decoder_start: int
    num_beams: int
    length_penalty: float
    max_new_tokens: Optional[int]
    max_length: Optional[int]


def build_config(folder: Path) -> tuple[dict, HFSettings]:
    """config.json + the feature extractor's settings + generation_config.json -> the NeMo config of the same
    model (the sections `canary.config` reads) and the settings NeMo's config has no key for."""
    where = str(folder / CONFIG)
    top = _Part("config", _json(folder, CONFIG), where)
    top.expect("model_type", (MODEL_TYPE,))
    arch = top.get("architectures")
    if arch is not None and arch != ["CanaryForConditionalGeneration"]:
        raise ModelError(f"{where}: architectures = {_short(arch)} is not implemented "
                         "(CanaryForConditionalGeneration)")
    enc = _Part("encoder_config", top.require("encoder_config"), where)
    dec = _Part("decoder_config", top.require("decoder_config"), where)
    front, sample_rate, n_mels = _frontend(folder)

    enc.expect("model_type", ("parakeet_encoder",))
    d_model = enc.size("hidden_size")
    heads = enc.size("num_attention_heads")
    if d_model % heads:
        raise ModelError(f"{where}: encoder_config.num_attention_heads = {heads} does not divide hidden_size {d_model}")
    if enc.get("num_key_value_heads", heads) != heads:
        raise ModelError(f"{where}: encoder_config.num_key_value_heads = {_short(enc.data['num_key_value_heads'])} "
                         f"is not implemented (only num_attention_heads, {heads})")
    if enc.get("head_dim", d_model // heads) != d_model // heads:
        raise ModelError(f"{where}: encoder_config.head_dim = {_short(enc.data['head_dim'])} is not implemented "
                         f"(only hidden_size / num_attention_heads, {d_model // heads})")
    inner = enc.size("intermediate_size")
    if inner % d_model:
        raise ModelError(f"{where}: encoder_config.intermediate_size = {inner} is not implemented (a multiple of "
                         f"hidden_size {d_model})")
    enc.expect("hidden_act", ("silu", "swish"))
    bias = enc.expect("attention_bias", (True, False))
    if enc.expect("convolution_bias", (True, False)) != bias:
        raise ModelError(f"{where}: encoder_config.convolution_bias = {enc.data['convolution_bias']} with "
                         f"attention_bias = {bias} is not implemented (NeMo's use_bias sets both)")
    enc.expect("subsampling_conv_kernel_size", (3,))
    enc.expect("subsampling_conv_stride", (2,))
    factor = enc.size("subsampling_factor")
    mels = enc.size("num_mel_bins")
    if mels != n_mels:
        raise ModelError(f"{where}: encoder_config.num_mel_bins = {mels} disagrees with the feature extractor's "
                         f"feature_size = {n_mels}")
    if mels % factor:
        raise ModelError(f"{where}: encoder_config.num_mel_bins = {mels} is not implemented (a multiple of "
                         f"subsampling_factor {factor}: transformers and NeMo size the subsampling's output "
                         "differently otherwise)")
    scale = enc.expect("scale_input", (True, False))
    encoder = {
        "_target_": "ConformerEncoder", "feat_in": mels, "n_layers": enc.size("num_hidden_layers"),
        "d_model": d_model, "n_heads": heads, "ff_expansion_factor": inner // d_model,
        "conv_kernel_size": enc.size("conv_kernel_size"), "subsampling": "dw_striding",
        "subsampling_factor": factor, "subsampling_conv_channels": enc.size("subsampling_conv_channels"),
        "pos_emb_max_len": enc.size("max_position_embeddings"), "xscaling": scale, "use_bias": bias,
        "self_attention_model": "rel_pos", "untie_biases": True, "conv_norm_type": "batch_norm",
    }
    enc.finish()

    dec.expect("model_type", ("canary_decoder",))
    hidden = dec.size("hidden_size")
    if hidden != d_model:
        raise ModelError(f"{where}: decoder_config.hidden_size = {hidden} differs from encoder_config.hidden_size "
                         f"= {d_model} (transformers' Canary has no projection between them)")
    dheads = dec.size("num_attention_heads")
    if hidden % dheads:
        raise ModelError(f"{where}: decoder_config.num_attention_heads = {dheads} does not divide hidden_size "
                         f"{hidden}")
    if dec.get("num_key_value_heads", dheads) != dheads:
        raise ModelError(f"{where}: decoder_config.num_key_value_heads = {_short(dec.data['num_key_value_heads'])} "
                         f"is not implemented (only num_attention_heads, {dheads})")
    head_dim = dec.size("head_dim", 128)  # transformers' default, whatever hidden_size is
    act = dec.expect("hidden_act", tuple(_ACTIVATIONS), "relu")
    dec.expect("attention_bias", (True,), True)
    vocab = dec.size("vocab_size")
    top_vocab = top.get("vocab_size", vocab)
    if top_vocab != vocab:
        raise ModelError(f"{where}: vocab_size = {_short(top_vocab)} disagrees with decoder_config.vocab_size = "
                         f"{vocab}")
    positions = dec.size("max_position_embeddings", 1024)
    if hidden < 4 or hidden % 2:
        raise ModelError(f"{where}: decoder_config.hidden_size = {hidden} is not implemented (even, at least 4: "
                         "the sinusoidal table's halves)")
    dec_inner, dec_layers = dec.size("intermediate_size"), dec.size("num_hidden_layers")
    tied = top.expect("tie_word_embeddings", (True, False), True)
    ids = {}
    for key, default in (("bos_token_id", 4), ("eos_token_id", 3), ("pad_token_id", 2), ("decoder_start_token_id", 7)):
        value = top.get(key, default)
        inner_value = dec.data.get(key, value) if key != "decoder_start_token_id" else value
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab or inner_value != value:
            raise ModelError(f"{where}: {key} = {_short(value)} is not an id of the vocabulary (or disagrees with "
                             "decoder_config's)")
        ids[key] = value
    dec.finish()
    top.finish()
    beams, penalty, gen_new, gen_len = _generation(folder, ids)
    cfg = {
        "target": "nemo.collections.asr.models.EncDecMultiTaskModel",
        "sample_rate": sample_rate,
        "prompt_format": "canary2",
        "preprocessor": front,
        "encoder": encoder,
        "transf_decoder": {
            "_target_": "get_nemo_transformer", "pre_ln_final_layer_norm": True,
            "config_dict": {"max_sequence_length": positions, "hidden_size": hidden,
                            "inner_size": dec_inner, "num_layers": dec_layers,
                            "num_attention_heads": dheads, "hidden_act": _ACTIVATIONS[act], "pre_ln": True},
        },
        "head": {"num_layers": 1, "num_classes": vocab, "hidden_size": hidden},
        "decoding": {"strategy": "greedy"},
    }
    return cfg, HFSettings(head_dim, tied, ids["bos_token_id"], ids["eos_token_id"], ids["pad_token_id"],
                           ids["decoder_start_token_id"], beams, penalty, gen_new, gen_len)


def _frontend(folder: Path) -> tuple[dict, int, int]:
    """The feature extractor's settings -> NeMo's `preprocessor` section (its sample rate, its mel bins)."""
    proc = _json(folder, "processor_config.json", required=False)
    if isinstance(proc, dict) and "feature_extractor" in proc:
        data, where = proc["feature_extractor"], str(folder / "processor_config.json")
    else:
        data, where = _json(folder, "preprocessor_config.json", required=False), str(folder / "preprocessor_config.json")
        if data is None:
            raise ModelError(f"{folder}: no feature extractor settings (processor_config.json with a "
                             "feature_extractor, or preprocessor_config.json)")
    fe = _Part("feature_extractor", data, where)
    kind = fe.get("feature_extractor_type")
    if kind != "ParakeetFeatureExtractor":
        raise ModelError(f"{where}: feature_extractor_type = {_short(kind)} is not implemented "
                         "(ParakeetFeatureExtractor)")
    if fe.data.get("padding_side", "right") != "right":
        raise ModelError(f"{where}: padding_side = {_short(fe.data['padding_side'])} is not implemented (right)")
    rate = fe.get("sampling_rate", 16000)
    mels = fe.get("feature_size", 80)
    hop = fe.get("hop_length", 160)
    n_fft = fe.get("n_fft", 512)
    win = fe.get("win_length", 400)
    for key, value, most in (("sampling_rate", rate, 192000), ("feature_size", mels, 1024), ("hop_length", hop, 65536),
                             ("n_fft", n_fft, 65536), ("win_length", win, 65536)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise ModelError(f"{where}: {key} = {_short(value)} is out of the range this code accepts (1 to {most})")
    if win > n_fft:
        raise ModelError(f"{where}: win_length = {win} is longer than n_fft = {n_fft}")
    pre = fe.get("preemphasis", 0.97)
    if pre is not None and (isinstance(pre, bool) or not isinstance(pre, (int, float)) or not 0 <= pre < 1):
        raise ModelError(f"{where}: preemphasis = {_short(pre)} is not implemented (0 to 1, or null)")
    pad = fe.get("padding_value", 0.0)
    if pad != 0.0:
        raise ModelError(f"{where}: padding_value = {_short(pad)} is not implemented (only 0.0: silence)")
    fe.finish()
    return {
        "_target_": "AudioToMelSpectrogramPreprocessor", "sample_rate": rate, "features": mels, "n_fft": n_fft,
        "n_window_size": win, "n_window_stride": hop, "window_size": None, "window_stride": None,
        "window": "hann", "normalize": "per_feature", "preemph": None if not pre else float(pre),
        "lowfreq": 0.0, "highfreq": rate / 2, "log": True, "log_zero_guard_type": "add",
        "log_zero_guard_value": 2 ** -24, "mag_power": 2.0, "pad_to": 0, "pad_value": 0.0,
    }, rate, mels


def _generation(folder: Path, ids: dict) -> tuple:
    """generation_config.json (optional): its default search (num_beams, length_penalty) and length bounds
    (max_new_tokens, max_length); a setting that changes the search otherwise (sampling, penalties,
    suppressed tokens, early stopping) is refused."""
    data = _json(folder, "generation_config.json", required=False)
    if data is None:
        return 1, 1.0, None, None
    where = str(folder / "generation_config.json")
    g = _Part("generation_config", data, where)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        if key in g.data and g.data[key] != ids[key]:
            raise ModelError(f"{where}: {key} = {_short(g.data[key])} disagrees with config.json's {ids[key]}")
    beams = g.get("num_beams", 1)
    if isinstance(beams, bool) or not isinstance(beams, int) or not 1 <= beams <= MAX_BEAM:
        raise ModelError(f"{where}: num_beams = {_short(beams)} is out of the range this code accepts (1 to {MAX_BEAM})")
    penalty = g.get("length_penalty", 1.0)
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not -10 <= penalty <= 10:
        raise ModelError(f"{where}: length_penalty = {_short(penalty)} is out of the range this code accepts (-10 to 10)")
    g.expect("early_stopping", (False,), False)
    g.expect("do_sample", (False,), False)
    g.expect("num_return_sequences", (1,), 1)
    for key in ("temperature", "top_k", "top_p"):
        g.get(key)  # used by sampling only, refused above
    out = [beams, float(penalty)]
    for key in ("max_new_tokens", "max_length"):
        value = g.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 16):
            raise ModelError(f"{where}: {key} = {_short(value)} is out of the range this code accepts (1 to 65536)")
        out.append(value)
    for key in ("min_length", "min_new_tokens"):
        if g.get(key) not in (None, 0):
            raise ModelError(f"{where}: {key} = {_short(g.data[key])} is not implemented (EOS may end a row at once)")
    g.finish()
    return tuple(out)


# -- weights

_ENCODER = (("subsampling.layers.", "pre_encode.conv."), ("subsampling.linear.", "pre_encode.out."),
            ("self_attn.q_proj.", "self_attn.linear_q."), ("self_attn.k_proj.", "self_attn.linear_k."),
            ("self_attn.v_proj.", "self_attn.linear_v."), ("self_attn.o_proj.", "self_attn.linear_out."),
            ("self_attn.relative_k_proj.", "self_attn.linear_pos."), ("self_attn.bias_u", "self_attn.pos_bias_u"),
            ("self_attn.bias_v", "self_attn.pos_bias_v"), ("conv.norm.", "conv.batch_norm."))
_DECODER = (("embed_tokens.", "_embedding.token_embedding."), ("embedding_layernorm.", "_embedding.layer_norm."),
            ("norm.", "_decoder.final_layer_norm."))
_DECODER_LAYER = (("input_layernorm.", "layer_norm_1."), ("post_attention_layernorm.", "layer_norm_2."),
                  ("final_layernorm.", "layer_norm_3."), ("self_attn.q_proj.", "first_sub_layer.query_net."),
                  ("self_attn.k_proj.", "first_sub_layer.key_net."), ("self_attn.v_proj.", "first_sub_layer.value_net."),
                  ("self_attn.o_proj.", "first_sub_layer.out_projection."),
                  ("encoder_attn.q_proj.", "second_sub_layer.query_net."),
                  ("encoder_attn.k_proj.", "second_sub_layer.key_net."),
                  ("encoder_attn.v_proj.", "second_sub_layer.value_net."),
                  ("encoder_attn.o_proj.", "second_sub_layer.out_projection."),
                  ("mlp.fc1.", "third_sub_layer.dense_in."), ("mlp.fc2.", "third_sub_layer.dense_out."))
# Tensors transformers does not load either (its buffers recomputed at load, NeMo's featurizer's).
_IGNORED = ("model.decoder.pos_emb.positional_embedding", "preprocessor.featurizer.")


def _rename(name: str) -> Optional[str]:
    """A transformers tensor name -> NeMo's (None: not part of the model)."""
    if name.startswith("model.encoder."):
        rest = name[len("model.encoder."):]
        for old, new in _ENCODER:
            rest = rest.replace(old, new, 1) if old in rest else rest
        return "encoder." + rest
    if name.startswith("model.decoder.layers."):
        rest = name[len("model.decoder.layers."):]
        i, _, rest = rest.partition(".")
        for old, new in _DECODER_LAYER:
            if rest.startswith(old):
                return f"transf_decoder._decoder.layers.{i}.{new}{rest[len(old):]}"
        return None
    if name.startswith("model.decoder."):
        rest = name[len("model.decoder."):]
        for old, new in _DECODER:
            if rest.startswith(old):
                return f"transf_decoder.{new}{rest[len(old):]}"
        return None
    if name.startswith("proj_out."):
        return "log_softmax.mlp.layer0." + name[len("proj_out."):]
    return None


def decoder_positions(length: int, channels: int) -> torch.Tensor:
    """transformers' `CanaryPositionalEmbedding` table divided by sqrt(channels) (as it divides it at use):
    [sin(p w_0..w_{c/2-1}) | cos(p w_0..w_{c/2-1})], w_i = 10000^(-2i/c), computed with its operations."""
    max_timescale = 10000 ** ((channels - 2) / channels)
    step = np.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-step * torch.arange(channels // 2).float())
    scaled = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1) / math.sqrt(channels)


def state_dict(folder: Path, settings: HFSettings, positions: int, hidden: int) -> dict:
    """model.safetensors -> NeMo's names (float32), the position table and the tied head added."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = folder / WEIGHTS
    if not path.is_file():
        raise ModelError(f"{folder}: {WEIGHTS} is missing (sharded or .bin checkpoints are not implemented)")
    try:
        raw = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise ModelError(f"{path}: not a readable safetensors file ({e})") from None
    sd = {}
    for name, t in raw.items():
        if name.startswith(_IGNORED) or name.endswith("num_batches_tracked"):
            continue
        target = _rename(name)
        if target is None:
            raise ModelError(f"{path}: tensor {name} is not part of a transformers Canary model")
        if not t.is_floating_point():
            raise ModelError(f"{path}: tensor {name} is {t.dtype}, not floating point")
        sd[target] = t.float()
    embed = "transf_decoder._embedding.token_embedding.weight"
    head = "log_softmax.mlp.layer0.weight"
    if settings.tied:
        if embed not in sd:
            raise ModelError(f"{path}: model.decoder.embed_tokens.weight is missing")
        if head in sd and not torch.equal(sd[head], sd[embed]):
            raise ModelError(f"{path}: proj_out.weight differs from the token embedding it is tied to "
                             "(tie_word_embeddings: true)")
        sd[head] = sd[embed]
    sd["transf_decoder._embedding.position_embedding.pos_enc"] = decoder_positions(positions, hidden)
    return sd


# -- tokenizer

def tokenizer_of(folder: Path) -> HFCanaryTokenizer:
    """tokenizer.json (+ tokenizer_config.json's named special tokens) -> the vocabulary."""
    named = _json(folder, "tokenizer_config.json", required=False)
    return from_tokenizer_json(_json(folder, "tokenizer.json"), named, str(folder / "tokenizer.json"))


# -- the recognizer

class CanaryHFASR(CanaryASR):
    """A Canary recognizer of a transformers folder: transformers' front-end input (no padding to one second),
    its greedy and beam searches, length bounds and text; word timestamps refused."""

    settings: Optional[HFSettings] = None
    # transformers' normalisation divides by frames - 1: an input under two hops has no statistics there
    # (NaN); such an input is padded with silence to two hops.
    MIN_HOPS = 2

    def _pad_left(self, n: int) -> int:
        return 0

    def _padded(self, pcm: np.ndarray) -> np.ndarray:
        least = self.MIN_HOPS * self.model.preprocessor.hop_length
        if len(pcm) >= least:
            return pcm
        return np.concatenate([pcm, np.zeros(least - len(pcm), np.float32)])

    def _plan(self, opts):
        if opts.word_timestamps:
            raise OptionValueError("word_timestamps", "word timestamps are not implemented for transformers-format "
                                   "Canary models (its prompt has no timestamp switch)")
        prompt, search = super()._plan(opts)
        s = self.settings or HFSettings(0, True, 0, 0, 0, 0, 1, 1.0, None, None)
        beams = opts.beam_size if opts.beam_size is not None else s.num_beams
        if opts.length_penalty is not None and beams == 1:
            raise OptionValueError("length_penalty", "length_penalty needs a beam search (beam_size 2 or more)")
        search = dataclasses.replace(
            search, beam_size=beams if beams > 1 else None,  # transformers' num_beams 1 is its greedy search
            length_penalty=s.length_penalty if opts.length_penalty is None else opts.length_penalty)
        if search.max_new is None:
            if s.max_new_tokens is not None:
                search = dataclasses.replace(search, max_new=s.max_new_tokens)
            elif s.max_length is not None:
                search = dataclasses.replace(search, max_new=max(s.max_length - len(prompt.ids), 0))
        return prompt, search

    def _beam(self, step, select, ids, search, max_new):
        from ..search.hf_beam import beam

        return beam(step, select, ids, search.beam_size, max_new, self.tokenizer.eos, search.length_penalty)

    def _nbest(self, hyps, duration, search):
        out = super()._nbest(hyps, duration, search)
        out.beam = "transformers"  # scores: sums of log-probabilities over length ** length_penalty
        return out


def load(path: Path, name: str, device, dtype) -> CanaryHFASR:
    """`load_model` for a transformers Canary folder."""
    from .config import parse_config
    from .model import CanaryModel

    cfg, settings = build_config(path)
    try:
        config = parse_config(cfg)
        config = dataclasses.replace(config, decoder=dataclasses.replace(config.decoder, head_dim=settings.head_dim))
        with torch.device("meta"):
            model = CanaryModel(cfg, config)
    except (ValueError, KeyError, TypeError) as e:
        raise ModelError(f"{path}: model config not supported ({e})") from None
    tok = tokenizer_of(path)
    if len(tok) > model.vocab_size:
        raise ModelError(f"{path}: tokenizer.json has {len(tok)} pieces, more than the decoder's {model.vocab_size}")
    for what, want, got in (("bos_token_id", tok.bos, settings.bos), ("eos_token_id", tok.eos, settings.eos),
                            ("pad_token_id", tok.pad, settings.pad),
                            ("decoder_start_token_id", tok.id_of(START), settings.decoder_start)):
        if want != got:
            raise ModelError(f"{path}: config.json's {what} = {got} is not the vocabulary's id of the token it "
                             f"names ({want})")
    sd = state_dict(path, settings, config.decoder.max_positions, config.decoder.hidden)
    try:
        model.load_nemo_state_dict(sd)
    except KeyError as e:
        raise ModelError(f"{path}: {e.args[0] if e.args else e}") from None
    asr = CanaryHFASR.finish(model, tok, name, device, dtype)
    asr.settings = settings
    return asr

"""The configuration of a Granite Speech NAR checkpoint, read from its `config.json`.

Three spellings of the same model are read into one `GraniteConfig`:

- IBM's hub layout (remote code, revision 99a4df9): `encoder_config`, `projector_config`,
  `text_config`, `blank_token_id`, `encoder_layer_indices`, `min_edit_sequence_length`;
- IBM's older layout (snapshot 7d20732d): `llm_config` instead of `text_config`, a flat `rope_theta`,
  and a BPE head one wider than the vocabulary with its blank at channel 0 (`id = channel - 1`);
- the Hugging Face native layout (`GraniteSpeechNarForCTC`): the encoder's BPE head fields renamed
  `vocabulary_size` / `pooling_window`, the projector's `num_attention_heads`, `num_hidden_layers`,
  `window_size`, `layer_norm_eps`, `attention_bias`, `intermediate_size`; the taps as
  `encoder_config.cat_hidden_layers` (the last block always appended).

Every key is either read, or listed in `_IGNORED` (it does not change what the model computes at
inference), or a `ModelError` naming it: a model is never run as something it is not.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..ibm.config import EncoderConfig  # noqa: F401  (re-exported: the NAR's encoder section)
from ..errors import ModelError

MODEL_TYPES = ("granite_speech_nar", "granite_speech_nar_ctc", "nle")

_TRAIN = "training only"
_IGNORED = {
    "": {"architectures", "auto_map", "transformers_version", "torch_dtype", "dtype", "model_type",
         "_name_or_path", "audio_token_id", "initializer_range", "use_cache", "tie_word_embeddings",
         "ctc_tokenizer_config", "pad_token_id", "bos_token_id", "eos_token_id", "output_hidden_states",
         "return_dict", "is_encoder_decoder", "id2label", "label2id", "problem_type", "sampling_rate",
         "ctc_loss_weight", "editor_loss_weight", "tokenizer_class", "use_return_dict"},
    "encoder_config": {"dropout": _TRAIN, "pred_dropout": _TRAIN, "model_type": "", "initializer_range": _TRAIN,
                       "blank_token_id": "the BPE blank, read at the top level", "architectures": "",
                       "transformers_version": "", "dtype": "", "torch_dtype": "", "layer_drop": _TRAIN,
                       "attention_dropout": _TRAIN},
    "projector_config": {"dropout_prob": _TRAIN, "dropout": _TRAIN, "model_type": "", "initializer_range": _TRAIN,
                         "transformers_version": "", "dtype": "", "torch_dtype": "", "hidden_act": "",
                         "attention_dropout": _TRAIN, "encoder_hidden_size": "the encoder width, read from it",
                         "architectures": ""},
    "text_config": {"model_type": "", "initializer_range": _TRAIN, "attention_dropout": _TRAIN,
                    "use_cache": "the LM runs once, no cache", "architectures": "", "transformers_version": "",
                    "dtype": "", "torch_dtype": "", "max_position_embeddings": "read",
                    "pretraining_tp": "tensor parallelism in training", "_name_or_path": "",
                    "tie_word_embeddings": "read", "bos_token_id": "", "eos_token_id": "read", "pad_token_id": "",
                    "output_hidden_states": "", "return_dict": "", "is_decoder": "", "label2id": "", "id2label": "",
                    "torchscript": "", "use_return_dict": "", "layer_types": "checked", "sliding_window": "checked",
                    "is_causal": "the editor is bidirectional", "rope_scaling": "checked",
                    "rope_parameters": "checked", "rope_theta": "checked", "head_dim": "checked",
                    "hidden_act": "checked", "attention_bias": "checked", "mlp_bias": "checked",
                    "num_key_value_heads": "read", "residual_dropout": _TRAIN, "embedding_dropout": _TRAIN},
}


@dataclass
class ProjectorConfig:
    num_layers: int
    num_encoder_layers: int
    hidden_size: int
    num_heads: int
    block_size: int
    downsample_rate: int
    encoder_dim: int
    llm_dim: int
    mlp_hidden: int
    mlp_bias: bool
    attn_bias: bool
    layernorm_eps: float


@dataclass
class TextConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    attention_multiplier: float
    embedding_multiplier: float
    logits_scaling: float
    residual_multiplier: float
    eos_token_id: int
    tie_word_embeddings: bool = True  # else the head is the weights' language_model.lm_head


@dataclass
class GraniteConfig:
    encoder: EncoderConfig
    projector: ProjectorConfig
    text: TextConfig
    encoder_layer_indices: list[int]
    blank_token_id: int  # the editor's blank (its template filler and the id it drops)
    bpe_blank_channel: int  # the BPE head's blank channel
    bpe_id_offset: int  # a BPE channel c is token id c - offset (1 for the older head, else 0)
    min_edit_sequence_length: int = 8
    scale_projected_embeddings: bool = True
    layout: str = "ibm"  # "ibm", "ibm-old" or "hf"
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def audio_frames_per_second(self) -> float:
        return 16000 / 320  # stacked 10 ms frames

    @property
    def bpe_frames_per_second(self) -> float:
        return self.audio_frames_per_second / self.encoder.bpe_pooling_window


def _section(cfg: dict, name: str, *aliases: str) -> dict:
    for key in (name, *aliases):
        sec = cfg.get(key)
        if sec is not None:
            if not isinstance(sec, dict):
                raise ModelError(f"config.{key} is not an object")
            return sec
    raise ModelError(f"config has no {name}")


class _Reader:
    """Reads a config section's keys (under any of their names), remembering which were read."""

    def __init__(self, sec: dict, where: str):
        self.sec, self.where, self.used = sec, where, set()

    def get(self, *names: str, default: Any = ..., kind=int):
        for n in names:
            if n in self.sec and self.sec[n] is not None:
                self.used.add(n)
                v = self.sec[n]
                try:
                    if kind is bool:
                        if not isinstance(v, bool):
                            raise ValueError
                        return v
                    if kind is int and (isinstance(v, bool) or float(v) != int(v)):
                        raise ValueError
                    return kind(v)
                except (TypeError, ValueError):
                    raise ModelError(f"config {self.where}.{n} = {v!r} is not a valid {kind.__name__}") from None
        for n in names:
            self.used.add(n)
        if default is ...:
            raise ModelError(f"config {self.where} has no {names[0]}")
        return default

    def check(self, extra_ignored: set[str] = frozenset()) -> None:
        key = self.where if self.where != "config" else ""
        ignored = set(_IGNORED.get(key, ())) | set(extra_ignored)
        unknown = sorted(k for k in self.sec if k not in self.used and k not in ignored)
        if unknown:
            raise ModelError(f"config {self.where} has settings this code does not implement: {', '.join(unknown)}")


# The largest structural size a config may give (by the key's last part; others: _MAX_SIZE): far
# above every published Granite Speech model (16 encoder blocks of 1024, 2 projector layers,
# an LM of 40 layers, 4096 wide, 12800 in its MLP, a 100k vocabulary), so a real model never meets
# them and a hostile config's `num_layers: 1073741824` is refused before a module is built.
_MAXIMA = {"num_layers": 256, "num_hidden_layers": 256, "vocab_size": 1 << 20, "output_dim": 1 << 20,
           "bpe_output_dim": 1 << 20, "intermediate_size": 65536, "max_pos_emb": 65536, "context_size": 65536,
           "max_position_embeddings": 1 << 20}
_MAX_SIZE = 16384  # widths, heads, kernel, windows, rates


def _positive(value: int, where: str) -> int:
    """value, a structural size, checked: positive and at most its _MAXIMA bound."""
    if not isinstance(value, (int, float)) or value <= 0:
        raise ModelError(f"config {where} must be positive, got {value!r:.80}")
    top = _MAXIMA.get(where.rsplit(".", 1)[-1], _MAX_SIZE)
    if value > top:
        raise ModelError(f"config {where} = {value} is more than this code accepts ({top}, far above any published model)")
    return value


def parse_config(cfg: dict, layout: Optional[str] = None) -> GraniteConfig:
    """config.json (as a dict) -> GraniteConfig; `layout` ("ibm", "ibm-old", "hf") when the weights
    already told it, else guessed from the config's own spelling."""
    if not isinstance(cfg, dict):
        raise ModelError("config.json is not an object")
    mt = cfg.get("model_type")
    if mt is not None and mt not in MODEL_TYPES:
        raise ModelError(f"config model_type {mt!r} is not a Granite Speech NAR model ({', '.join(MODEL_TYPES)})")
    top = _Reader(cfg, "config")
    enc_raw = _section(cfg, "encoder_config")
    prj_raw = _section(cfg, "projector_config")
    old_text = "text_config" not in cfg and "llm_config" in cfg
    txt_raw = _section(cfg, "text_config", "llm_config")
    top.used |= {"encoder_config", "projector_config", "text_config" if not old_text else "llm_config"}

    e = _Reader(enc_raw, "encoder_config")
    enc = _encoder(e)
    cat_layers = e.get("cat_hidden_layers", default=None, kind=list)
    p = _Reader(prj_raw, "projector_config")
    prj = _projector(p, enc)
    t = _Reader(txt_raw, "text_config")
    text = _text(t, txt_raw, cfg)
    prj.llm_dim = p.get("llm_dim", default=text.hidden_size)
    if prj.llm_dim != text.hidden_size:
        raise ModelError(f"config projector llm_dim {prj.llm_dim} differs from the LM's hidden_size {text.hidden_size}")
    indices = _taps(cfg, top, cat_layers, enc, prj)
    editor_blank, bpe_blank, offset, guessed = _blanks(top, e, enc, text)

    min_edit = top.get("min_edit_sequence_length", default=8)
    scale = top.get("scale_projected_embeddings", default=True, kind=bool)
    if layout is None:
        layout = "hf" if ("vocabulary_size" in enc_raw or cat_layers is not None) else ("ibm-old" if old_text else guessed)
    top.check()
    e.check({"cat_hidden_layers", "hidden_act"})
    p.check({"mlp_ratio", "intermediate_size"})
    t.check()
    return GraniteConfig(enc, prj, text, indices, editor_blank, bpe_blank, offset,
                         int(min_edit), scale, layout, cfg)


def _encoder(e: _Reader) -> EncoderConfig:
    """encoder_config -> EncoderConfig (the BPE blank and the taps are read by the caller)."""
    num_layers = _positive(e.get("num_layers", "num_hidden_layers"), "encoder_config.num_layers")
    hidden = _positive(e.get("hidden_dim", "hidden_size"), "encoder_config.hidden_dim")
    heads = _positive(e.get("num_heads", "num_attention_heads"), "encoder_config.num_heads")
    enc = EncoderConfig(
        num_layers=num_layers,
        hidden_dim=hidden,
        num_heads=heads,
        dim_head=_positive(e.get("dim_head", "head_dim", default=hidden // heads), "encoder_config.dim_head"),
        input_dim=_positive(e.get("input_dim", "num_mel_bins", default=160), "encoder_config.input_dim"),
        output_dim=_positive(e.get("output_dim"), "encoder_config.output_dim"),
        bpe_output_dim=_positive(e.get("bpe_output_dim", "vocabulary_size"), "encoder_config.bpe_output_dim"),
        bpe_pooling_window=_positive(e.get("bpe_pooling_window", "pooling_window", default=4),
                                     "encoder_config.bpe_pooling_window"),
        conv_kernel_size=_positive(e.get("conv_kernel_size", default=15), "encoder_config.conv_kernel_size"),
        conv_expansion_factor=_positive(e.get("conv_expansion_factor", default=2), "encoder_config.conv_expansion_factor"),
        feedforward_mult=_positive(e.get("feedforward_mult", default=4), "encoder_config.feedforward_mult"),
        max_pos_emb=_positive(e.get("max_pos_emb", default=512), "encoder_config.max_pos_emb"),
        context_size=_positive(e.get("context_size", default=200), "encoder_config.context_size"),
        self_conditioning_layer=e.get("self_conditioning_layer", default=num_layers // 2),
    )
    if enc.input_dim != 160:
        raise ModelError(f"config encoder_config.input_dim = {enc.input_dim}: the front end makes 160 (2 x 80 mels)")
    if enc.conv_kernel_size % 2 == 0:
        raise ModelError(f"config encoder_config.conv_kernel_size = {enc.conv_kernel_size}: only odd kernels are implemented")
    if not 1 <= enc.self_conditioning_layer <= enc.num_layers:
        raise ModelError(f"config encoder_config.self_conditioning_layer = {enc.self_conditioning_layer} is not a block")
    return enc


def _projector(p: _Reader, enc: EncoderConfig) -> ProjectorConfig:
    """projector_config -> ProjectorConfig (llm_dim 0 until the LM's width is known; num_encoder_layers
    0 when the config leaves it to the taps)."""
    p_hidden = _positive(p.get("hidden_size"), "projector_config.hidden_size")
    mlp_hidden = p.get("intermediate_size", default=None)
    if mlp_hidden is None:
        mlp_hidden = int(p_hidden * p.get("mlp_ratio", default=2, kind=float))
    prj = ProjectorConfig(
        num_layers=_positive(p.get("num_layers", "num_hidden_layers"), "projector_config.num_layers"),
        num_encoder_layers=p.get("num_encoder_layers", default=None) or 0,
        hidden_size=p_hidden,
        num_heads=_positive(p.get("num_heads", "num_attention_heads"), "projector_config.num_heads"),
        block_size=_positive(p.get("block_size", "window_size", default=15), "projector_config.block_size"),
        downsample_rate=_positive(p.get("downsample_rate", default=5), "projector_config.downsample_rate"),
        encoder_dim=_positive(p.get("encoder_dim", default=enc.hidden_dim), "projector_config.encoder_dim"),
        llm_dim=0,
        mlp_hidden=_positive(mlp_hidden, "projector_config.intermediate_size"),
        mlp_bias=p.get("mlp_bias", default=True, kind=bool),
        attn_bias=p.get("attn_bias", "attention_bias", default=True, kind=bool),
        layernorm_eps=p.get("layernorm_eps", "layer_norm_eps", default=1e-6, kind=float),
    )
    if prj.block_size % prj.downsample_rate:
        raise ModelError(f"config projector block_size {prj.block_size} is not a multiple of downsample_rate {prj.downsample_rate}")
    if prj.hidden_size % prj.num_heads:
        raise ModelError(f"config projector hidden_size {prj.hidden_size} is not a multiple of num_heads {prj.num_heads}")
    if prj.encoder_dim != enc.hidden_dim:
        raise ModelError(f"config projector encoder_dim {prj.encoder_dim} differs from the encoder's width {enc.hidden_dim}")
    return prj


def _check_text(txt_raw: dict) -> float:
    """The text config's settings with a single implemented value, checked; returns rope_theta."""
    rope = txt_raw.get("rope_parameters") or txt_raw.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        raise ModelError("config text_config.rope_parameters is not an object")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ModelError(f"config text_config rope_type {rope_type!r}: only the default RoPE is implemented")
    theta = rope.get("rope_theta", txt_raw.get("rope_theta"))
    if theta is None:
        raise ModelError("config text_config has no rope_theta")
    if txt_raw.get("hidden_act", "silu") != "silu":
        raise ModelError(f"config text_config.hidden_act {txt_raw['hidden_act']!r}: only silu is implemented")
    for flag in ("attention_bias", "mlp_bias"):
        if txt_raw.get(flag):
            raise ModelError(f"config text_config.{flag} = true is not implemented (Granite has no biases there)")
    if txt_raw.get("sliding_window"):
        raise ModelError("config text_config.sliding_window is not implemented (the editor attends to everything)")
    layer_types = txt_raw.get("layer_types")
    if layer_types and any(x not in ("attention", "full_attention") for x in layer_types):
        raise ModelError(f"config text_config.layer_types {sorted(set(layer_types))}: only attention layers are implemented")
    return float(theta)


def _text(t: _Reader, txt_raw: dict, cfg: dict) -> TextConfig:
    """text_config (llm_config in the older layout) -> TextConfig."""
    t_hidden = _positive(t.get("hidden_size"), "text_config.hidden_size")
    t_heads = _positive(t.get("num_attention_heads"), "text_config.num_attention_heads")
    theta = _check_text(txt_raw)
    tied = txt_raw.get("tie_word_embeddings", cfg.get("tie_word_embeddings", True)) is not False
    text = TextConfig(
        vocab_size=_positive(t.get("vocab_size"), "text_config.vocab_size"),
        hidden_size=t_hidden,
        intermediate_size=_positive(t.get("intermediate_size"), "text_config.intermediate_size"),
        num_hidden_layers=_positive(t.get("num_hidden_layers"), "text_config.num_hidden_layers"),
        num_attention_heads=t_heads,
        num_key_value_heads=_positive(t.get("num_key_value_heads", default=t_heads), "text_config.num_key_value_heads"),
        head_dim=_positive(txt_raw.get("head_dim") or t_hidden // t_heads, "text_config.head_dim"),
        rms_norm_eps=t.get("rms_norm_eps", default=1e-5, kind=float),
        rope_theta=theta,
        max_position_embeddings=_positive(t.get("max_position_embeddings", default=4096),
                                          "text_config.max_position_embeddings"),
        attention_multiplier=t.get("attention_multiplier", kind=float),
        embedding_multiplier=t.get("embedding_multiplier", kind=float),
        logits_scaling=t.get("logits_scaling", kind=float),
        residual_multiplier=t.get("residual_multiplier", kind=float),
        eos_token_id=int(txt_raw.get("eos_token_id", cfg.get("eos_token_id", 0)) or 0),
        tie_word_embeddings=tied,
    )
    if text.num_attention_heads % text.num_key_value_heads:
        raise ModelError("config text_config.num_attention_heads is not a multiple of num_key_value_heads")
    if text.head_dim * text.num_attention_heads != text.hidden_size:
        raise ModelError("config text_config.head_dim x num_attention_heads differs from hidden_size")
    return text


def _taps(cfg: dict, top: _Reader, cat_layers: Optional[list], enc: EncoderConfig, prj: ProjectorConfig) -> list[int]:
    """The taps: IBM's encoder_layer_indices (0 = the input projection, i = block i, -1 = the last),
    or the native cat_hidden_layers (+ the last block). Sets the projector's num_encoder_layers when
    the config leaves it out."""
    indices = cfg.get("encoder_layer_indices")
    top.used.add("encoder_layer_indices")
    if indices is None and cat_layers is not None:
        indices = [int(i) for i in cat_layers] + [-1]
    if indices is None:
        indices = [-1]
    if not isinstance(indices, list) or not indices or not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
        raise ModelError(f"config encoder_layer_indices {indices!r} is not a list of block numbers")
    for i in indices:
        if not -(enc.num_layers + 1) <= i <= enc.num_layers:
            raise ModelError(f"config encoder_layer_indices has {i}: the encoder has {enc.num_layers} blocks")
    if prj.num_encoder_layers == 0:
        prj.num_encoder_layers = len(indices)
    if prj.num_encoder_layers != len(indices):
        raise ModelError(f"config projector num_encoder_layers {prj.num_encoder_layers} differs from the "
                         f"{len(indices)} encoder_layer_indices")
    return [int(i) for i in indices]


def _blanks(top: _Reader, e: _Reader, enc: EncoderConfig, text: TextConfig) -> tuple[int, int, int, str]:
    """The blanks -> (the editor's blank, the BPE head's blank channel, the BPE id offset, the layout
    the head's width tells)."""
    blank = top.get("blank_token_id", default=None)
    if blank is None:
        blank = e.sec.get("blank_token_id")
        e.used.add("blank_token_id")
    if enc.bpe_output_dim == text.vocab_size + 1:
        # The older head: channel 0 is the blank, channel c is token c - 1.
        bpe_blank, offset = 0, 1
        editor_blank = text.eos_token_id if not blank else int(blank)
        guessed = "ibm-old"
    elif enc.bpe_output_dim == text.vocab_size:
        if blank is None:
            raise ModelError("config has no blank_token_id (the CTC blank of the BPE head and the editor)")
        bpe_blank, offset, editor_blank = int(blank), 0, int(blank)
        guessed = "ibm"
    else:
        raise ModelError(f"config encoder BPE head has {enc.bpe_output_dim} outputs for a vocabulary of "
                         f"{text.vocab_size}: neither the same width nor one wider (blank first)")
    if not 0 <= editor_blank < text.vocab_size:
        raise ModelError(f"config blank_token_id {editor_blank} is outside the vocabulary of {text.vocab_size}")
    return editor_blank, bpe_blank, offset, guessed

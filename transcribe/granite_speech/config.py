"""A Granite Speech checkpoint's config.json (transformers' `granite_speech` and `granite_speech_plus` model
types: granite-speech-3.3-2b/8b, granite-4.0-1b-speech, granite-speech-4.1-2b and -plus) read and checked: the
conformer encoder (`ibm.conformer`), the BLIP-2 Q-Former projector, the Granite LM (`llm.config`) and how they
are joined. Every key is implemented, harmless, or refused with a ModelError naming it."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..errors import ModelError
from ..ibm.config import EncoderConfig
from ..llm.config import LMConfig

MODEL_TYPES = ("granite_speech", "granite_speech_plus")
ENCODER_TYPES = ("granite_speech_encoder", "granite_speech_plus_encoder")
PROJECTOR_TYPE = "blip_2_qformer"
# Sizes above these are refused before a module is built (far above the published models: 16 conformer
# layers of 1024, a 2-layer Q-Former of 1024, an LM of 40 layers of 4096).
MAXIMA = {"layers": 256, "width": 1 << 15, "heads": 256, "context": 1 << 14, "vocab": 1 << 21}

_BOOKKEEPING = {"model_type", "architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
                "initializer_range", "dropout", "use_cache", "output_attentions", "output_hidden_states",
                "return_dict", "id2label", "label2id", "is_encoder_decoder", "tie_encoder_decoder", "torchscript",
                "use_bfloat16", "pruned_heads", "chunk_size_feed_forward", "problem_type", "tf_legacy_loss",
                "is_decoder", "add_cross_attention", "tokenizer_class", "_attn_implementation_autoset"}
_TOP = _BOOKKEEPING | {"text_config", "encoder_config", "projector_config", "audio_token_index", "audio_token_id",
                       "has_lora_adapter", "downsample_rate", "window_size", "tie_word_embeddings", "pad_token_id",
                       "bos_token_id", "eos_token_id"}
_ENCODER = _BOOKKEEPING | {"input_dim", "num_layers", "hidden_dim", "feedforward_mult", "num_heads", "dim_head",
                           "output_dim", "context_size", "max_pos_emb", "conv_kernel_size", "conv_expansion_factor",
                           "cat_hidden_layers"}
_PROJECTOR = _BOOKKEEPING | {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                             "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps",
                             "cross_attention_frequency", "encoder_hidden_size", "use_qformer_text_input",
                             "position_embedding_type", "max_position_embeddings", "vocab_size", "pad_token_id",
                             "bos_token_id", "eos_token_id"}


@dataclass(frozen=True)
class QFormerConfig:
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    layer_norm_eps: float
    cross_attention_frequency: int   # a layer i has cross-attention when i % frequency == 0
    encoder_hidden_size: int         # the width of what it reads (the encoder's, times the taps concatenated)
    window_size: int                 # encoder frames per window
    num_queries: int                 # queries per window (window_size // downsample_rate)


@dataclass(frozen=True)
class GraniteSpeechConfig:
    model_type: str
    encoder: EncoderConfig
    cat_hidden_layers: tuple[int, ...]  # plus: the block outputs (0: the input projection) joined to the last
    projector: QFormerConfig
    lm: LMConfig
    audio_token_id: int
    has_lora_adapter: bool


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: not a JSON object")
    return data


def _unknown(section: str, cfg: dict, known: set) -> None:
    extra = sorted(set(cfg) - known)
    if extra:
        raise ModelError(f"config {section}{extra[0]} is a setting this code does not implement")


def _int(section: str, cfg: dict, key: str, default: Any = None, least: int = 1, most: Optional[int] = None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least or (most is not None and value > most):
        bound = f" and at most {most}" if most is not None else ""
        raise ModelError(f"config {section}{key} = {value!r}: an integer of at least {least}{bound} is needed")
    return value


def _zero(section: str, cfg: dict, key: str) -> None:
    """A dropout: anything is harmless at inference, but it must be a number."""
    value = cfg.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(f"config {section}{key} = {value!r} is not a number")


def parse_config(cfg: dict) -> GraniteSpeechConfig:
    mtype = cfg.get("model_type")
    if mtype not in MODEL_TYPES:
        raise ModelError(f"config model_type {mtype!r} is not a Granite Speech model ({', '.join(MODEL_TYPES)})")
    _unknown("", cfg, _TOP)
    for key in ("encoder_config", "projector_config", "text_config"):
        if not isinstance(cfg.get(key), dict):
            raise ModelError(f"config {key} is missing or not an object")
    e, p, t = cfg["encoder_config"], cfg["projector_config"], cfg["text_config"]

    # -- the conformer encoder
    _unknown("encoder_config.", e, _ENCODER)
    if e.get("model_type", ENCODER_TYPES[0]) not in ENCODER_TYPES:
        raise ModelError(f"config encoder_config.model_type {e.get('model_type')!r} is not a Granite Speech encoder")
    _zero("encoder_config.", e, "dropout")
    layers = _int("encoder_config.", e, "num_layers", 10, most=MAXIMA["layers"])
    hidden = _int("encoder_config.", e, "hidden_dim", 1024, most=MAXIMA["width"])
    heads = _int("encoder_config.", e, "num_heads", 8, most=MAXIMA["heads"])
    dim_head = e.get("dim_head")
    dim_head = hidden // heads if dim_head is None else _int("encoder_config.", e, "dim_head", most=MAXIMA["width"])
    kernel = _int("encoder_config.", e, "conv_kernel_size", 15, most=1024)
    if kernel % 2 == 0:
        raise ModelError(f"config encoder_config.conv_kernel_size = {kernel}: only odd kernels are implemented")
    max_pos = _int("encoder_config.", e, "max_pos_emb", 512, most=MAXIMA["context"])
    context = _int("encoder_config.", e, "context_size", 200, most=MAXIMA["context"])
    if context > max_pos:
        raise ModelError(f"config encoder_config.context_size {context} exceeds max_pos_emb {max_pos}")
    input_dim = _int("encoder_config.", e, "input_dim", 160)
    if input_dim != 160:
        raise ModelError(f"config encoder_config.input_dim = {input_dim}: the front end makes 160 (2 x 80 mels)")
    encoder = EncoderConfig(
        num_layers=layers, hidden_dim=hidden, num_heads=heads, dim_head=dim_head, input_dim=input_dim,
        output_dim=_int("encoder_config.", e, "output_dim", 42, most=MAXIMA["vocab"]), bpe_output_dim=0,
        bpe_pooling_window=1, conv_kernel_size=kernel,
        conv_expansion_factor=_int("encoder_config.", e, "conv_expansion_factor", 2, most=64),
        feedforward_mult=_int("encoder_config.", e, "feedforward_mult", 4, most=64), max_pos_emb=max_pos,
        context_size=context, self_conditioning_layer=layers // 2)
    cat = e.get("cat_hidden_layers")
    if cat is None:
        cat = []
    if not isinstance(cat, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                        for i in cat):
        raise ModelError(f"config encoder_config.cat_hidden_layers = {cat!r}: indices in [0, {layers}) are needed")
    if len(set(cat)) != len(cat):
        raise ModelError(f"config encoder_config.cat_hidden_layers = {cat!r} repeats a layer")
    if cat and mtype != "granite_speech_plus":
        raise ModelError("config encoder_config.cat_hidden_layers is set but the model type is not "
                         "granite_speech_plus (transformers' granite_speech ignores it)")

    # -- the Q-Former projector
    _unknown("projector_config.", p, _PROJECTOR)
    if p.get("model_type", PROJECTOR_TYPE) != PROJECTOR_TYPE:
        raise ModelError(f"config projector_config.model_type {p.get('model_type')!r} is not implemented "
                         f"(only {PROJECTOR_TYPE})")
    for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        _zero("projector_config.", p, key)
    if p.get("hidden_act", "gelu") != "gelu":
        raise ModelError(f"config projector_config.hidden_act {p.get('hidden_act')!r} is not implemented (gelu)")
    if p.get("use_qformer_text_input", False):
        raise ModelError("config projector_config.use_qformer_text_input is not implemented (the projector "
                         "reads no text)")
    if p.get("position_embedding_type", "absolute") != "absolute":
        raise ModelError(f"config projector_config.position_embedding_type {p.get('position_embedding_type')!r} "
                         "is not implemented (the queries carry no positions: only absolute, unused)")
    q_hidden = _int("projector_config.", p, "hidden_size", 768, most=MAXIMA["width"])
    q_heads = _int("projector_config.", p, "num_attention_heads", 12, most=MAXIMA["heads"])
    if q_hidden % q_heads:
        raise ModelError(f"config projector_config.hidden_size {q_hidden} is not a multiple of its "
                         f"num_attention_heads {q_heads}")
    window = _int("", cfg, "window_size", 15, most=MAXIMA["context"])
    rate = _int("", cfg, "downsample_rate", 5, most=MAXIMA["context"])
    if window % rate:
        raise ModelError(f"config window_size {window} is not a multiple of downsample_rate {rate}")
    enc_width = _int("projector_config.", p, "encoder_hidden_size", 1408, most=MAXIMA["width"] * 64)
    if enc_width != hidden * (len(cat) + 1):
        raise ModelError(f"config projector_config.encoder_hidden_size {enc_width} is not the encoder's width "
                         f"{hidden} times {len(cat) + 1} (the final state and {len(cat)} joined layers)")
    eps = p.get("layer_norm_eps", 1e-12)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps <= 0:
        raise ModelError(f"config projector_config.layer_norm_eps = {eps!r} is not a positive number")
    projector = QFormerConfig(
        hidden_size=q_hidden, num_layers=_int("projector_config.", p, "num_hidden_layers", 12, most=MAXIMA["layers"]),
        num_heads=q_heads, intermediate_size=_int("projector_config.", p, "intermediate_size", 3072,
                                                  most=MAXIMA["width"] * 16),
        layer_norm_eps=float(eps),
        cross_attention_frequency=_int("projector_config.", p, "cross_attention_frequency", 2, most=MAXIMA["layers"]),
        encoder_hidden_size=enc_width, window_size=window, num_queries=window // rate)

    # -- the LM (transformers ties its head to the embedding by the outer config's tie_word_embeddings)
    tie = cfg.get("tie_word_embeddings", True)
    if not isinstance(tie, bool):
        raise ModelError(f"config tie_word_embeddings = {tie!r} is not true or false")
    lm = LMConfig.from_hf(t, "config text_config")
    # transformers 5's GraniteSpeechForConditionalGeneration runs the Granite body (GraniteModel) and its own head,
    # so the text config's logits_scaling is not applied (4.x ran GraniteForCausalLM, which divides by it). The
    # argmax is the same either way; beam scores are not: they follow the reference, transformers 5.
    lm = dataclasses.replace(lm, tie_word_embeddings=tie, logits_scaling=1.0)
    if lm.vocab_size > MAXIMA["vocab"] or lm.num_layers > MAXIMA["layers"] or lm.hidden_size > MAXIMA["width"]:
        raise ModelError("config text_config: sizes beyond what this code accepts")
    audio = cfg.get("audio_token_index", cfg.get("audio_token_id", 49155))
    if isinstance(audio, bool) or not isinstance(audio, int) or not 0 <= audio < lm.vocab_size:
        raise ModelError(f"config audio_token_index = {audio!r} is not a token of the LM's {lm.vocab_size}")
    lora = cfg.get("has_lora_adapter", True)
    if not isinstance(lora, bool):
        raise ModelError(f"config has_lora_adapter = {lora!r} is not true or false")
    return GraniteSpeechConfig(model_type=mtype, encoder=encoder, cat_hidden_layers=tuple(cat), projector=projector,
                               lm=lm, audio_token_id=audio, has_lora_adapter=lora)

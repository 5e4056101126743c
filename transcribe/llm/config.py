"""The settings of a decoder-only LM, read from a transformers `text_config` (Granite, Qwen3, Qwen2, Llama,
Mistral): every key is implemented, known to be harmless, or refused with a ModelError naming it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ..errors import ModelError

MODEL_TYPES = ("granite", "qwen3", "qwen2", "llama", "mistral")

# Keys that do not change what inference computes (training, sampling defaults, bookkeeping, token ids the family
# reads from its own config).
_HARMLESS = {
    "model_type", "architectures", "initializer_range", "use_cache", "attention_dropout", "dropout",
    "pad_token_id", "bos_token_id", "eos_token_id", "torch_dtype", "dtype", "transformers_version",
    "_name_or_path", "output_attentions", "output_hidden_states", "return_dict", "id2label", "label2id",
    "pretraining_tp", "tie_word_embeddings", "max_position_embeddings", "num_hidden_layers", "vocab_size",
    "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act",
    "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "attention_bias", "mlp_bias",
    "embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling",
    "use_sliding_window", "sliding_window", "max_window_layers", "layer_types", "chunk_size_feed_forward",
    "is_decoder", "add_cross_attention", "problem_type", "tokenizer_class", "prefix", "task_specific_params",
    "finetuning_task", "use_bfloat16", "tf_legacy_loss", "pruned_heads", "torchscript", "is_encoder_decoder",
    "cross_attention_hidden_size", "sep_token_id", "decoder_start_token_id", "max_length", "min_length",
    "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k",
    "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "chunk_size", "label_smoothing",
    "tie_encoder_decoder", "_attn_implementation_autoset", "quantization_config_none", "mlp_only_layers",
}


@dataclass(frozen=True)
class LMConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False                   # Qwen3: RMSNorm over each head of q and k, before the rotation
    embedding_multiplier: float = 1.0       # Granite: every input row (audio rows too) is scaled by it
    attention_scale: Optional[float] = None  # Granite's attention_multiplier; else head_dim ** -0.5
    residual_multiplier: float = 1.0        # Granite: each block's output is scaled before the residual sum
    logits_scaling: float = 1.0             # Granite: the logits are divided by it

    @property
    def scale(self) -> float:
        return self.attention_scale if self.attention_scale is not None else self.head_dim ** -0.5

    @classmethod
    def from_hf(cls, cfg: Mapping[str, Any], where: str, tie_default: bool = False) -> "LMConfig":
        """The LM of a transformers text config; `tie_default` is the outer config's tie_word_embeddings when
        the text config does not say (transformers' rule: the outer model's setting ties the head)."""
        if not isinstance(cfg, Mapping):
            raise ModelError(f"{where}: the language model's config is not an object")
        mtype = cfg.get("model_type")
        if mtype not in MODEL_TYPES:
            raise ModelError(f"{where}: a language model of type {mtype!r} is not supported "
                             f"(supported: {', '.join(MODEL_TYPES)})")
        for key in cfg:
            if key not in _HARMLESS:
                raise ModelError(f"{where}: the language model setting {key!r} is not implemented")

        def need(key: str, kind=int):
            value = cfg.get(key)
            if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
                raise ModelError(f"{where}: the language model's {key} must be a positive number (got {value!r})")
            return value

        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise ModelError(f"{where}: the language model's hidden_act {act!r} is not implemented (only silu)")
        if cfg.get("use_sliding_window"):
            raise ModelError(f"{where}: sliding-window attention (use_sliding_window) is not implemented")
        if mtype == "mistral" and cfg.get("sliding_window") is not None:
            raise ModelError(f"{where}: Mistral's sliding_window {cfg['sliding_window']} is not implemented "
                             "(only null)")
        layer_types = cfg.get("layer_types")
        if layer_types is not None and any(t != "full_attention" for t in layer_types):
            raise ModelError(f"{where}: layer_types other than full_attention are not implemented")
        if cfg.get("mlp_only_layers"):
            raise ModelError(f"{where}: mlp_only_layers is not implemented")
        theta = _rope_theta(cfg, where)
        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        kv_heads = cfg.get("num_key_value_heads") or heads
        if not isinstance(kv_heads, int) or heads % kv_heads:
            raise ModelError(f"{where}: num_key_value_heads {kv_heads!r} does not divide num_attention_heads {heads}")
        head_dim = cfg.get("head_dim") or hidden // heads
        eps = cfg.get("rms_norm_eps", 1e-6)
        granite = mtype == "granite"
        bias = bool(cfg.get("attention_bias", False))
        tie = cfg.get("tie_word_embeddings")
        return cls(
            model_type=mtype, vocab_size=need("vocab_size"), hidden_size=hidden,
            intermediate_size=need("intermediate_size"), num_layers=need("num_hidden_layers"), num_heads=heads,
            num_kv_heads=kv_heads, head_dim=int(head_dim), rms_norm_eps=float(eps), rope_theta=theta,
            max_position_embeddings=int(cfg.get("max_position_embeddings") or 0),
            tie_word_embeddings=bool(tie_default if tie is None else tie),
            qkv_bias=True if mtype == "qwen2" else bias, o_bias=False if mtype == "qwen2" else bias,
            mlp_bias=bool(cfg.get("mlp_bias", False)), qk_norm=mtype == "qwen3",
            embedding_multiplier=float(cfg.get("embedding_multiplier", 1.0)) if granite else 1.0,
            attention_scale=float(cfg.get("attention_multiplier", 1.0)) if granite else None,
            residual_multiplier=float(cfg.get("residual_multiplier", 1.0)) if granite else 1.0,
            logits_scaling=float(cfg.get("logits_scaling", 1.0)) if granite else 1.0,
        )


def _rope_theta(cfg: Mapping[str, Any], where: str) -> float:
    """The rotary base: transformers 5's `rope_parameters` ({"rope_type": "default", "rope_theta": ...}) or the
    older `rope_theta` + `rope_scaling` (null); any scaling other than the default is refused."""
    params = cfg.get("rope_parameters")
    scaling = cfg.get("rope_scaling")
    theta = cfg.get("rope_theta")
    for extra in (params, scaling):
        if extra is None:
            continue
        if not isinstance(extra, Mapping):
            raise ModelError(f"{where}: the rotary settings {extra!r} are not an object")
        kind = extra.get("rope_type", extra.get("type", "default"))
        if kind != "default":
            raise ModelError(f"{where}: rotary scaling {kind!r} is not implemented (only the default rotation)")
        unknown = set(extra) - {"rope_type", "type", "rope_theta"}
        if unknown:
            raise ModelError(f"{where}: rotary settings {sorted(unknown)} are not implemented")
        theta = extra.get("rope_theta", theta)
    if theta is None:
        theta = 10000.0
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0:
        raise ModelError(f"{where}: rope_theta must be a positive number (got {theta!r})")
    return float(theta)

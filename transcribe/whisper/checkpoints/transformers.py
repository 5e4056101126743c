"""Reading Hugging Face transformers Whisper directories (`WhisperForConditionalGeneration.save_pretrained`).

A directory holds `config.json` (model_type "whisper"), the weights (`model.safetensors`, or
`pytorch_model.bin`, either possibly sharded with a `*.index.json`), `tokenizer.json`, and usually
`generation_config.json` with `alignment_heads`, `suppress_tokens`, `begin_suppress_tokens` and
`lang_to_id`.

transformers' names map one to one onto openai-whisper's:

    model.encoder.conv1/conv2                      encoder.conv1/conv2
    model.encoder.embed_positions.weight           encoder.positional_embedding
    model.{encoder,decoder}.layers.N               {encoder,decoder}.blocks.N
        self_attn.{q,k,v,out}_proj                     attn.{query,key,value,out}
        self_attn_layer_norm                           attn_ln
        encoder_attn.{q,k,v,out}_proj                  cross_attn.{query,key,value,out}
        encoder_attn_layer_norm                        cross_attn_ln
        fc1 / fc2                                      mlp.0 / mlp.2
        final_layer_norm                               mlp_ln
    model.encoder.layer_norm                       encoder.ln_post
    model.decoder.embed_tokens.weight              decoder.token_embedding.weight
    model.decoder.embed_positions.weight           decoder.positional_embedding
    model.decoder.layer_norm                       decoder.ln
    proj_out.weight                                (must equal the token embedding; dropped)

(`WhisperModel` checkpoints lack the leading `model.`; both are read.)

Every key of config.json is read here, or listed in `HARMLESS_CONFIG` (it does not change what the
model computes), or fixed to the one value implemented (`FIXED_CONFIG`); any other is an error.
"""
from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import torch

from ...errors import ModelError
from . import CONFIG_JSON, WEIGHT_FILES
from .common import (
    alignment_heads_from,
    check_tied,
    complete_config,
    default_alignment_heads,
    drop_key_biases,
    read_text_json,
    state_dict_fits,
    torch_load,
)

log = logging.getLogger(__name__)

GENERATION_CONFIG_JSON = "generation_config.json"
TOKENIZER_JSON = "tokenizer.json"

# config.json keys read below.
READ_CONFIG = {
    "model_type", "d_model", "num_mel_bins", "max_source_positions", "encoder_attention_heads", "encoder_layers",
    "vocab_size", "max_target_positions", "decoder_attention_heads", "decoder_layers", "encoder_ffn_dim",
    "decoder_ffn_dim", "activation_function", "suppress_tokens", "begin_suppress_tokens", "tie_word_embeddings",
}
# config.json keys with one implemented value (openai-whisper's; transformers' default): another
# value is an error.
FIXED_CONFIG = {
    "scale_embedding": (False,),  # True multiplies the embeddings by sqrt(d_model)
    "median_filter_width": (7,),  # word alignment's median filter (timing.py uses 7, as openai-whisper)
    "is_encoder_decoder": (True,),
    "tie_encoder_decoder": (False,),
    "pruned_heads": ({},),
    "chunk_size_feed_forward": (0,),
}
# config.json keys that do not change what the model computes: accepted, not used.
HARMLESS_CONFIG = {
    # training only
    "dropout", "attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop", "init_std",
    "apply_spec_augment", "mask_time_prob", "mask_time_length", "mask_time_min_masks", "mask_feature_prob",
    "mask_feature_length", "mask_feature_min_masks", "gradient_checkpointing",
    # the audio-classification head (WhisperForAudioClassification; its weights would be an error)
    "use_weighted_layer_sum", "classifier_proj_size", "id2label", "label2id", "num_labels", "problem_type",
    "finetuning_task",
    # a copy of encoder_layers that no Whisper module reads
    "num_hidden_layers",
    # bookkeeping, the stored dtype (weights keep theirs), the attention kernel, the KV cache switch
    "architectures", "transformers_version", "_name_or_path", "_commit_hash", "torch_dtype", "dtype",
    "use_bfloat16", "_attn_implementation", "_attn_implementation_autoset", "attn_implementation", "use_cache",
    "output_attentions", "output_hidden_states", "return_dict", "torchscript", "tf_legacy_loss",
    "tokenizer_class", "prefix", "task_specific_params", "is_decoder", "add_cross_attention",
    "cross_attention_hidden_size",
    # special token ids: tokenizer.json gives them
    "bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "sep_token_id",
    # generate()'s defaults: the search is chosen per call here
    "forced_decoder_ids", "max_length", "min_length", "max_new_tokens", "do_sample", "early_stopping",
    "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
}

_LAYER = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(.+)$")
_ATTN = {"self_attn": "attn", "encoder_attn": "cross_attn"}
_PROJ = {"q_proj": "query", "k_proj": "key", "v_proj": "value", "out_proj": "out"}
_IN_LAYER = {
    "self_attn_layer_norm": "attn_ln", "encoder_attn_layer_norm": "cross_attn_ln",
    "fc1": "mlp.0", "fc2": "mlp.2", "final_layer_norm": "mlp_ln",
}
_TOP = {
    "encoder.conv1": "encoder.conv1", "encoder.conv2": "encoder.conv2",
    "encoder.layer_norm": "encoder.ln_post", "decoder.layer_norm": "decoder.ln",
    "encoder.embed_positions": "encoder.positional_embedding",
    "decoder.embed_positions": "decoder.positional_embedding",
    "decoder.embed_tokens": "decoder.token_embedding",
}


def weight_files(path: Path) -> list[Path]:
    """The weight files of a transformers directory, safetensors first; [] when there are none."""
    for name in WEIGHT_FILES:
        single = path / name
        if single.is_file():
            return [single]
        index = path / (name + ".index.json")
        if index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise ModelError(f"{index}: unreadable weight index ({type(e).__name__}: {str(e)[:200]})") from None
            return [path / s for s in shards]
    return []


def _load_weights(files: list[Path]) -> dict[str, torch.Tensor]:
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        if not f.is_file():
            raise ModelError(f"{f}: weight file is missing")
        if f.name.endswith(".safetensors"):
            try:
                from safetensors.torch import load_file
            except ImportError:  # pragma: no cover - a declared dependency
                raise ModelError(f"{f}: reading safetensors needs the safetensors package") from None
            try:
                part = load_file(str(f), device="cpu")
            except OSError as e:
                raise ModelError(f"{f}: cannot read the weights ({e.strerror or e})") from None
            except Exception as e:  # SafetensorError and others on a truncated/corrupt file
                raise ModelError(f"{f}: not a readable safetensors file; truncated or corrupt? "
                                 f"({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})") from None
        else:
            part = torch_load(f)
            if not isinstance(part, dict) or not all(isinstance(v, torch.Tensor) for v in part.values()):
                raise ModelError(f"{f}: not a state dict of tensors")
        sd.update(part)
    return sd


def rename_transformers(hf: dict[str, torch.Tensor], where: str, tied_config: bool = True) -> dict[str, torch.Tensor]:
    """transformers Whisper names -> openai-whisper names. proj_out must equal the token embedding
    (an untied one is an error); with tie_word_embeddings false it must be there."""
    sd: dict[str, torch.Tensor] = {}
    tied = None
    for name, t in hf.items():
        key = name[len("model."):] if name.startswith("model.") else name
        if key == "proj_out.weight":
            tied = t
            continue
        m = _LAYER.match(key)
        new = None
        if m:
            side, n, rest = m.groups()
            parts = rest.split(".")
            if len(parts) == 3 and parts[0] in _ATTN and parts[1] in _PROJ:
                new = f"{side}.blocks.{n}.{_ATTN[parts[0]]}.{_PROJ[parts[1]]}.{parts[2]}"
            elif len(parts) == 2 and parts[0] in _IN_LAYER:
                new = f"{side}.blocks.{n}.{_IN_LAYER[parts[0]]}.{parts[1]}"
        else:
            stem, _, leaf = key.rpartition(".")
            if stem in _TOP:
                target = _TOP[stem]
                new = target if target.endswith("positional_embedding") else f"{target}.{leaf}"
        if new is None:
            raise ModelError(f"{where}: unexpected weight {name}; not a transformers Whisper model")
        sd[new] = t
    emb = sd.get("decoder.token_embedding.weight")
    if emb is not None:
        if tied is None and not tied_config:
            raise ModelError(f"{where}: config.json has tie_word_embeddings = false, but the weights have no "
                             "proj_out.weight; an untied output projection is not implemented")
        check_tied(tied, emb, "proj_out.weight", where)
    return drop_key_biases(sd)


def _check_config_keys(cfg: dict, cfg_path: Path) -> None:
    """Every key read, harmless, or fixed to its implemented value; else a ModelError naming it."""
    for key, value in cfg.items():
        if key in READ_CONFIG or key in HARMLESS_CONFIG:
            continue
        if key in FIXED_CONFIG:
            if value not in FIXED_CONFIG[key] or isinstance(value, bool) != isinstance(FIXED_CONFIG[key][0], bool):
                raise ModelError(f"{cfg_path}: {key} = {value!r} is not implemented (only {FIXED_CONFIG[key][0]!r})")
            continue
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise ModelError(f"{cfg_path}: {key} = {shown} is a setting this code does not implement")


def _config_int(cfg: dict, key: str, where: str) -> int:
    v = cfg.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ModelError(f"{where}: config.json has no valid {key} ({v!r})")
    return v


def read_transformers_whisper(path: str | os.PathLike) -> tuple[dict, dict[str, torch.Tensor], str]:
    """Read a transformers Whisper directory. Returns `(config, state_dict, tokenizer_json)` as
    `read_ctranslate2` does (CTranslate2's config keys filled from generation_config.json)."""
    path = Path(path)
    if path.is_file() and path.name == CONFIG_JSON:
        path = path.parent
    if not path.is_dir():
        raise ModelError(f"{path}: a transformers Whisper model is a directory")
    cfg_path = path / CONFIG_JSON
    if not cfg_path.is_file():
        raise ModelError(f"{path}: {CONFIG_JSON} is missing; not a transformers model directory")
    cfg = json.loads(read_text_json(cfg_path))
    if not isinstance(cfg, dict) or cfg.get("model_type") != "whisper":
        kind = cfg.get("model_type") if isinstance(cfg, dict) else None
        raise ModelError(f"{cfg_path}: model_type is {kind!r}, not 'whisper'; not a Whisper model")
    where = str(path)
    _check_config_keys(cfg, cfg_path)
    d_model = _config_int(cfg, "d_model", where)
    for side in ("encoder", "decoder"):
        ffn = cfg.get(f"{side}_ffn_dim", 4 * d_model)
        if ffn != 4 * d_model:
            raise ModelError(f"{where}: {side}_ffn_dim {ffn} is not 4 x d_model ({4 * d_model}); openai-whisper's layout needs it")
    act = cfg.get("activation_function", "gelu")
    if act != "gelu":
        raise ModelError(f"{where}: activation_function {act!r} not supported (Whisper uses gelu)")
    dims = {
        "n_mels": _config_int(cfg, "num_mel_bins", where),
        "n_audio_ctx": _config_int(cfg, "max_source_positions", where),
        "n_audio_state": d_model,
        "n_audio_head": _config_int(cfg, "encoder_attention_heads", where),
        "n_audio_layer": _config_int(cfg, "encoder_layers", where),
        "n_vocab": _config_int(cfg, "vocab_size", where),
        "n_text_ctx": _config_int(cfg, "max_target_positions", where),
        "n_text_state": d_model,
        "n_text_head": _config_int(cfg, "decoder_attention_heads", where),
        "n_text_layer": _config_int(cfg, "decoder_layers", where),
    }
    files = weight_files(path)
    if not files:
        raise ModelError(f"{path}: no weights ({' or '.join(WEIGHT_FILES)}) beside {CONFIG_JSON}")
    tok_path = path / TOKENIZER_JSON
    if not tok_path.is_file():
        raise ModelError(f"{path}: {TOKENIZER_JSON} is missing (a transformers Whisper directory needs its tokenizer)")
    tokenizer_json = read_text_json(tok_path)

    sd = rename_transformers(_load_weights(files), where, cfg.get("tie_word_embeddings", True) is not False)
    state_dict_fits(sd, dims, where)

    gen = {}
    gen_path = path / GENERATION_CONFIG_JSON
    if gen_path.is_file():
        gen = json.loads(read_text_json(gen_path))
        if not isinstance(gen, dict):
            raise ModelError(f"{gen_path}: does not hold a JSON object")
    config: dict = {"dims": dims, "format": "transformers"}
    heads = gen.get("alignment_heads")
    config["alignment_heads"] = (
        alignment_heads_from(heads, dims["n_text_layer"], dims["n_text_head"], str(gen_path)) if heads
        else default_alignment_heads(dims["n_text_layer"], dims["n_text_head"]))
    suppress = gen.get("suppress_tokens") or cfg.get("suppress_tokens")
    if suppress:
        config["suppress_ids"] = sorted(int(i) for i in suppress)
    begin = gen.get("begin_suppress_tokens") or cfg.get("begin_suppress_tokens")
    if begin:
        config["suppress_ids_begin"] = [int(i) for i in begin]
    if isinstance(gen.get("lang_to_id"), dict) and gen["lang_to_id"]:
        config["lang_ids"] = sorted(int(i) for i in gen["lang_to_id"].values())
    config = complete_config(config, tokenizer_json, where)
    return config, sd, tokenizer_json

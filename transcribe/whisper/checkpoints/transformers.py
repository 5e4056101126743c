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
    proj_out.weight                                (tied to the token embedding; dropped)

(`WhisperModel` checkpoints lack the leading `model.`; both are read.)
"""
from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import torch

from ...errors import ModelError
from .common import (
    alignment_heads_from,
    complete_config,
    default_alignment_heads,
    read_text_json,
    state_dict_fits,
)

log = logging.getLogger(__name__)

CONFIG_JSON = "config.json"
GENERATION_CONFIG_JSON = "generation_config.json"
TOKENIZER_JSON = "tokenizer.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # preferred first

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


def _model_type(path: Path):
    try:
        cfg = json.loads((path / CONFIG_JSON).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return cfg.get("model_type") if isinstance(cfg, dict) else None


def is_transformers_dir(path: Path) -> bool:
    """A directory with config.json and transformers weights (of any model type: a non-Whisper
    one is then reported by the reader, not taken for a NeMo directory)."""
    if not (path / CONFIG_JSON).is_file():
        return False
    has_weights = any((path / n).is_file() or (path / (n + ".index.json")).is_file() for n in WEIGHT_FILES)
    return has_weights or _model_type(path) == "whisper"


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
            part = None
            for mmap in (True, False):
                try:
                    part = torch.load(f, weights_only=True, map_location="cpu", mmap=mmap)
                    break
                except OSError as e:
                    raise ModelError(f"{f}: cannot read the weights ({e.strerror or e})") from None
                except Exception as e:  # RuntimeError, UnpicklingError, EOFError ... on bad files
                    err = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            if part is None:
                raise ModelError(f"{f}: not a readable PyTorch checkpoint; truncated or corrupt? ({err})")
            if not isinstance(part, dict) or not all(isinstance(v, torch.Tensor) for v in part.values()):
                raise ModelError(f"{f}: not a state dict of tensors")
        sd.update(part)
    return sd


def rename_transformers(hf: dict[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    """transformers Whisper names -> openai-whisper names."""
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
    if tied is not None and emb is not None and (tied.shape != emb.shape or not torch.equal(tied, emb)):
        log.warning("%s: proj_out is not tied to the token embedding; openai-whisper's layout ties them, "
                    "so the embedding is used", where)
    return sd


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

    sd = rename_transformers(_load_weights(files), where)
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

"""Reading a Cohere Transcribe directory: config.json, the feature extractor's settings,
generation_config.json, safetensors weights (one file or an index of shards) and the tokenizer. Nothing in
it is run: safetensors holds tensors only, the JSON files are read as data.

Tensor names: transformers' `save_pretrained` writes NeMo's names with a `model.` prefix (all but the
head's), the published file the same without it; a file of transformers' in-memory names (`state_dict()`
saved directly: `model.decoder.*`, `proj_out.*`) is renamed to them (transformers' load-time table,
reversed)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ModelError
from .config import read_features, read_json

# transformers' save_pretrained puts this before every tensor name but the head's; the published file has none.
PREFIX = "model."
# Tensors transformers ignores when loading (`_keys_to_ignore_on_load_unexpected`): the NeMo front end's
# filterbank and window; the features are computed from the feature extractor's settings instead.
IGNORED = ("preprocessor.featurizer.",)


# transformers' in-memory names (its `state_dict()`, e.g. a file saved from it with safetensors directly) ->
# the checkpoint's NeMo names, the `model.` prefix removed; the first pattern that matches renames a key.
_HF_RENAMES = tuple((re.compile(a), b) for a, b in (
    (r"^encoder\.subsampling\.layers\.(\d+)\.", r"encoder.pre_encode.conv.\1."),
    (r"^encoder\.subsampling\.linear\.", "encoder.pre_encode.out."),
    (r"^(encoder\.layers\.\d+\.self_attn)\.([qkv])_proj\.", r"\1.linear_\2."),
    (r"^(encoder\.layers\.\d+\.self_attn)\.o_proj\.", r"\1.linear_out."),
    (r"^(encoder\.layers\.\d+\.self_attn)\.relative_k_proj\.", r"\1.linear_pos."),
    (r"^(encoder\.layers\.\d+\.self_attn)\.bias_([uv])$", r"\1.pos_bias_\2"),
    (r"^(encoder\.layers\.\d+\.conv)\.norm\.", r"\1.batch_norm."),
    (r"^decoder\.proj\.", "encoder_decoder_proj."),
    (r"^decoder\.embed_tokens\.", "transf_decoder._embedding.token_embedding."),
    (r"^decoder\.pos_emb\.weight$", "transf_decoder._embedding.position_embedding.pos_enc"),
    (r"^decoder\.embedding_layernorm\.", "transf_decoder._embedding.layer_norm."),
    (r"^decoder\.norm\.", "transf_decoder._decoder.final_layer_norm."),
    (r"^decoder\.layers\.(\d+)\.input_layernorm\.", r"transf_decoder._decoder.layers.\1.layer_norm_1."),
    (r"^decoder\.layers\.(\d+)\.post_attention_layernorm\.", r"transf_decoder._decoder.layers.\1.layer_norm_2."),
    (r"^decoder\.layers\.(\d+)\.final_layernorm\.", r"transf_decoder._decoder.layers.\1.layer_norm_3."),
    (r"^decoder\.layers\.(\d+)\.self_attn\.q_proj\.", r"transf_decoder._decoder.layers.\1.first_sub_layer.query_net."),
    (r"^decoder\.layers\.(\d+)\.self_attn\.k_proj\.", r"transf_decoder._decoder.layers.\1.first_sub_layer.key_net."),
    (r"^decoder\.layers\.(\d+)\.self_attn\.v_proj\.", r"transf_decoder._decoder.layers.\1.first_sub_layer.value_net."),
    (r"^decoder\.layers\.(\d+)\.self_attn\.o_proj\.",
     r"transf_decoder._decoder.layers.\1.first_sub_layer.out_projection."),
    (r"^decoder\.layers\.(\d+)\.encoder_attn\.q_proj\.",
     r"transf_decoder._decoder.layers.\1.second_sub_layer.query_net."),
    (r"^decoder\.layers\.(\d+)\.encoder_attn\.k_proj\.", r"transf_decoder._decoder.layers.\1.second_sub_layer.key_net."),
    (r"^decoder\.layers\.(\d+)\.encoder_attn\.v_proj\.",
     r"transf_decoder._decoder.layers.\1.second_sub_layer.value_net."),
    (r"^decoder\.layers\.(\d+)\.encoder_attn\.o_proj\.",
     r"transf_decoder._decoder.layers.\1.second_sub_layer.out_projection."),
    (r"^decoder\.layers\.(\d+)\.mlp\.fc1\.", r"transf_decoder._decoder.layers.\1.third_sub_layer.dense_in."),
    (r"^decoder\.layers\.(\d+)\.mlp\.fc2\.", r"transf_decoder._decoder.layers.\1.third_sub_layer.dense_out."),
    (r"^proj_out\.", "log_softmax.mlp.layer0."),
))


def nemo_name(key: str, hf: bool) -> str:
    """A tensor's name in this code's modules: the `model.` prefix removed, and transformers' in-memory
    names (`hf`) renamed to the NeMo names `save_pretrained` writes."""
    name = key[len(PREFIX):] if key.startswith(PREFIX) else key
    if hf:
        for pattern, repl in _HF_RENAMES:
            new = pattern.sub(repl, name, count=1)
            if new != name:
                return new
    return name


def is_hf_layout(keys) -> bool:
    """Whether tensor names are transformers' in-memory ones (`decoder.embed_tokens`, `proj_out`) rather
    than the NeMo names of a saved checkpoint (`transf_decoder.*`, `log_softmax.*`)."""
    names = [k[len(PREFIX):] if k.startswith(PREFIX) else k for k in keys]
    return any(n.startswith(("decoder.", "proj_out.")) for n in names) and \
        not any(n.startswith("transf_decoder.") for n in names)


@dataclass
class Checkpoint:
    config: dict
    features: dict
    generation: dict
    state_dict: dict


def weight_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelError(f"{index}: not a safetensors index ({e})") from None
        files = [path / s for s in shards]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ModelError(f"{path}: weight shards missing: {', '.join(missing[:4])}")
        return files
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    raise ModelError(f"{path}: no model.safetensors (or model.safetensors.index.json) weights")


def read_checkpoint(path: Path) -> Checkpoint:
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    cfg = read_json(path / "config.json")
    if cfg is None:
        raise ModelError(f"{path}: no config.json")
    state: dict[str, torch.Tensor] = {}
    hf = None
    for f in weight_files(path):
        try:
            with safe_open(str(f), framework="pt") as h:
                keys = list(h.keys())
                if hf is None:
                    hf = is_hf_layout(keys)
                for k in keys:
                    name = nemo_name(k, hf)
                    if name.startswith(IGNORED) or name.endswith("num_batches_tracked"):
                        continue
                    if name in state:
                        raise ModelError(f"{f.name}: tensor {k} appears twice (with and without {PREFIX!r})")
                    state[name] = h.get_tensor(k)
        except SafetensorError as e:
            raise ModelError(f"{f}: not a readable safetensors file ({e})") from None
        except OSError as e:
            raise ModelError(f"{f}: {e}") from None
    return Checkpoint(cfg, read_features(path), read_json(path / "generation_config.json") or {}, state)

"""Reading a Cohere Transcribe directory: config.json, the feature extractor's settings,
generation_config.json, safetensors weights (one file or an index of shards) and the tokenizer. Nothing in
it is run: safetensors holds tensors only, the JSON files are read as data.

Tensor names: transformers' `save_pretrained` writes NeMo's names with a `model.` prefix (all but the
head's), the published file the same without it; a file of transformers' in-memory names (`state_dict()`
saved directly: `model.decoder.*`, `proj_out.*`) is renamed to them (transformers' load-time table,
reversed)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ModelError
from ..safetensors_files import weight_files
from .config import read_features, read_json

# transformers' save_pretrained puts this before every tensor name but the head's; the published file has none.
PREFIX = "model."
# Tensors transformers ignores when loading (`_keys_to_ignore_on_load_unexpected`): the NeMo front end's
# filterbank and window; the features are computed from the feature extractor's settings instead.
IGNORED = ("preprocessor.featurizer.",)


# transformers' in-memory names (its `state_dict()`, e.g. a file saved from it with safetensors directly) ->
# the checkpoint's NeMo names (transformers' load-time table, reversed), the `model.` prefix removed.
_ATTENTION = {"q_proj": "query_net", "k_proj": "key_net", "v_proj": "value_net", "o_proj": "out_projection"}
_DECODER_LAYER = {"input_layernorm": "layer_norm_1", "post_attention_layernorm": "layer_norm_2",
                  "final_layernorm": "layer_norm_3", "mlp.fc1": "third_sub_layer.dense_in",
                  "mlp.fc2": "third_sub_layer.dense_out",
                  **{f"self_attn.{k}": f"first_sub_layer.{v}" for k, v in _ATTENTION.items()},
                  **{f"encoder_attn.{k}": f"second_sub_layer.{v}" for k, v in _ATTENTION.items()}}
_DECODER = {"proj": "encoder_decoder_proj", "embed_tokens": "transf_decoder._embedding.token_embedding",
            "embedding_layernorm": "transf_decoder._embedding.layer_norm",
            "norm": "transf_decoder._decoder.final_layer_norm"}
_ENCODER_LAYER = {"self_attn.q_proj": "self_attn.linear_q", "self_attn.k_proj": "self_attn.linear_k",
                  "self_attn.v_proj": "self_attn.linear_v", "self_attn.o_proj": "self_attn.linear_out",
                  "self_attn.relative_k_proj": "self_attn.linear_pos", "conv.norm": "conv.batch_norm"}
_MODULE = re.compile(r"^(.*)\.(weight|bias|running_mean|running_var|num_batches_tracked)$")


def _hf_to_nemo(name: str) -> str:
    if name == "decoder.pos_emb.weight":
        return "transf_decoder._embedding.position_embedding.pos_enc"
    m = re.match(r"^encoder\.layers\.(\d+)\.self_attn\.bias_([uv])$", name)
    if m:
        return f"encoder.layers.{m.group(1)}.self_attn.pos_bias_{m.group(2)}"
    m = _MODULE.match(name)
    if not m:
        return name
    module, leaf = m.groups()
    if module == "proj_out":
        return f"log_softmax.mlp.layer0.{leaf}"
    if module == "encoder.subsampling.linear":
        return f"encoder.pre_encode.out.{leaf}"
    if (k := re.match(r"^encoder\.subsampling\.layers\.(\d+)$", module)):
        return f"encoder.pre_encode.conv.{k.group(1)}.{leaf}"
    if (k := re.match(r"^encoder\.layers\.(\d+)\.(.+)$", module)) and k.group(2) in _ENCODER_LAYER:
        return f"encoder.layers.{k.group(1)}.{_ENCODER_LAYER[k.group(2)]}.{leaf}"
    if (k := re.match(r"^decoder\.layers\.(\d+)\.(.+)$", module)) and k.group(2) in _DECODER_LAYER:
        return f"transf_decoder._decoder.layers.{k.group(1)}.{_DECODER_LAYER[k.group(2)]}.{leaf}"
    if module.startswith("decoder.") and module[len("decoder."):] in _DECODER:
        return f"{_DECODER[module[len('decoder.'):]]}.{leaf}"
    return name


def nemo_name(key: str, hf: bool) -> str:
    """A tensor's name in this code's modules: the `model.` prefix removed, and transformers' in-memory
    names (`hf`) renamed to the NeMo names `save_pretrained` writes."""
    name = key[len(PREFIX):] if key.startswith(PREFIX) else key
    return _hf_to_nemo(name) if hf else name


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

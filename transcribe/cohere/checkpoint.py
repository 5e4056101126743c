"""Reading a Cohere Transcribe directory: config.json, the feature extractor's settings,
generation_config.json, safetensors weights (one file or an index of shards) and the tokenizer. Nothing in
it is run: safetensors holds tensors only, the JSON files are read as data."""
from __future__ import annotations

import json
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
    for f in weight_files(path):
        try:
            with safe_open(str(f), framework="pt") as h:
                for k in h.keys():
                    name = k[len(PREFIX):] if k.startswith(PREFIX) else k
                    if name.startswith(IGNORED) or name.endswith("num_batches_tracked"):
                        continue
                    if name in state:
                        raise ModelError(f"{f.name}: tensor {k} appears twice (with and without {PREFIX!r})")
                    state[name] = h.get_tensor(k)
        except SafetensorError as e:
            raise ModelError(f"{f}: not a readable safetensors file ({e})") from None
        except OSError as e:
            raise ModelError(f"{f}: {e}") from None
    if any(k.startswith("decoder.") for k in state) and not any(k.startswith("transf_decoder.") for k in state):
        raise ModelError(f"{path}: weights under transformers' in-memory names (decoder.*, proj_out.*) are not "
                         "implemented; transformers' save_pretrained writes NeMo's (transf_decoder.*, log_softmax.*)")
    return Checkpoint(cfg, read_features(path), read_json(path / "generation_config.json") or {}, state)

"""Reading a Granite Speech checkpoint directory: config.json, safetensors weights (one file or shards with an
index) in either layout, and a PEFT LoRA adapter when the config says the model has one.

- the published layout (what the hub repos hold, transformers 4.x's names): `encoder.*`, `projector.*`,
  `language_model.model.*`, `language_model.lm_head.weight` (absent when tied);
- transformers 5's layout (`save_pretrained` in 5.x): `model.encoder.*`, `model.projector.*`,
  `model.language_model.*`, `lm_head.weight`.

A LoRA adapter (granite-speech-3.3: `adapter_config.json` + `adapter_model.safetensors`, which transformers
enables whenever audio is given, so always for transcription) is merged into the LM's weights at load:
W + (lora_alpha / r) * B @ A, computed in float32. Adapter settings this code does not implement (DoRA, biases,
per-module ranks, ...) are refused. Nothing in a checkpoint is run: safetensors holds tensors only.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from ..errors import ModelError
from ..safetensors_files import read_tensors, weight_files
from .config import read_json

_PUBLISHED = (("encoder.", "encoder."), ("projector.", "projector."), ("language_model.model.", "lm."),
              ("language_model.lm_head.", "lm.lm_head."))
_SAVED = (("model.encoder.", "encoder."), ("model.projector.", "projector."), ("model.language_model.", "lm."),
          ("lm_head.", "lm.lm_head."))
_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(?:model\.)?language_model\.(?:model\.)?"
                       r"(layers\.\d+\.(?:self_attn\.[qkvo]_proj|mlp\.(?:gate|up|down)_proj))\.lora_([AB])\.weight$")
# adapter_config.json keys that change nothing at inference, or are checked below
_LORA_HARMLESS = {"peft_type", "r", "lora_alpha", "target_modules", "lora_dropout", "bias", "use_rslora", "use_dora",
                  "fan_in_fan_out", "modules_to_save", "base_model_name_or_path", "task_type", "inference_mode",
                  "init_lora_weights", "revision", "rank_pattern", "alpha_pattern", "layers_to_transform",
                  "layers_pattern", "megatron_config", "megatron_core", "loftq_config", "auto_mapping",
                  "use_qalora", "qalora_group_size", "exclude_modules", "target_parameters", "lora_bias",
                  "layer_replication", "trainable_token_indices", "eva_config", "corda_config", "peft_version",
                  "alora_invocation_tokens", "ensure_weight_tying", "arrow_config"}


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The weights under this family's names: `encoder.*`, `projector.*`, `lm.*` (the LM's own names below)."""
    raw = read_tensors(weight_files(path))
    keys = list(raw)
    if any(k.startswith("language_model.model.") for k in keys):
        rules = _PUBLISHED
    elif any(k.startswith("model.language_model.") for k in keys):
        rules = _SAVED
    else:
        sample = ", ".join(sorted(keys)[:5])
        raise ModelError(f"{path}: weights are not in a Granite Speech layout (encoder.* / projector.* / "
                         f"language_model.model.*, or transformers 5's model.*); first tensors: {sample}")
    state: dict[str, torch.Tensor] = {}
    for k, t in raw.items():
        if k.endswith("num_batches_tracked"):
            continue
        for old, new in rules:
            if k.startswith(old):
                state[new + k[len(old):]] = t
                break
        else:
            raise ModelError(f"{path}: unexpected tensor {k!r} (not the encoder's, the projector's or the LM's)")
    return state


def merge_lora(path: Path, lm_state: dict[str, torch.Tensor]) -> int:
    """Merge the LoRA adapter of `path` into the LM's tensors (names without the `lm.` prefix), in place;
    the number of matrices changed."""
    cfg_path = path / "adapter_config.json"
    if not cfg_path.is_file():
        raise ModelError(f"{path}: config.json says has_lora_adapter but adapter_config.json is missing")
    cfg = read_json(cfg_path)
    # a setting this code does not know is harmless while it is off (PEFT writes every feature's switch, most null)
    extra = sorted(k for k in set(cfg) - _LORA_HARMLESS if cfg[k] not in (None, False, {}, []))
    if extra:
        raise ModelError(f"{cfg_path}: the adapter setting {extra[0]!r} = {cfg[extra[0]]!r} is not implemented")
    if cfg.get("peft_type", "LORA") != "LORA":
        raise ModelError(f"{cfg_path}: peft_type {cfg.get('peft_type')!r} is not implemented (only LORA)")
    for key, harmless in (("use_dora", (False, None)), ("lora_bias", (False, None)), ("fan_in_fan_out", (False, None)),
                          ("bias", ("none", None)), ("modules_to_save", (None, [])), ("rank_pattern", ({}, None)),
                          ("alpha_pattern", ({}, None)), ("layer_replication", (None,)),
                          ("trainable_token_indices", (None,)), ("use_qalora", (False, None)),
                          ("target_parameters", (None, []))):
        if cfg.get(key) not in harmless:
            raise ModelError(f"{cfg_path}: {key} = {cfg.get(key)!r} is not implemented")
    r, alpha = cfg.get("r"), cfg.get("lora_alpha")
    if isinstance(r, bool) or not isinstance(r, int) or r <= 0:
        raise ModelError(f"{cfg_path}: r = {r!r} is not a positive integer")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise ModelError(f"{cfg_path}: lora_alpha = {alpha!r} is not a number")
    scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    adapter = read_tensors(weight_files(path, "adapter_model"))
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for k, t in adapter.items():
        m = _LORA_KEY.match(k)
        if m is None:
            raise ModelError(f"{path}/adapter_model.safetensors: tensor {k!r} is not a LoRA matrix of the language "
                             "model's layers (adapters elsewhere are not implemented)")
        pairs.setdefault(m.group(1), {})[m.group(2)] = t
    if not pairs:
        raise ModelError(f"{path}/adapter_model.safetensors holds no LoRA matrices")
    for module, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise ModelError(f"{path}: the adapter of {module} lacks lora_{'A' if 'A' not in ab else 'B'}")
        name = module + ".weight"
        w = lm_state.get(name)
        a, b = ab["A"].to(torch.float32), ab["B"].to(torch.float32)
        if w is None:
            raise ModelError(f"{path}: the adapter changes {name}, which the model does not have")
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != r or b.shape[1] != r or (b.shape[0], a.shape[1]) != tuple(w.shape):
            raise ModelError(f"{path}: the adapter of {module} has shapes {tuple(a.shape)} and {tuple(b.shape)}, "
                             f"not rank {r} over {tuple(w.shape)}")
        lm_state[name] = (w.to(torch.float32) + scale * (b @ a)).to(w.dtype)
    return len(pairs)


def lm_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k[3:]: v for k, v in state.items() if k.startswith("lm.")}

"""Reading a Granite Speech NAR checkpoint directory: config.json, safetensors weights (one file or
shards with an index), tokenizer.json; three weight layouts mapped onto IBM's names.

- IBM's hub layout: `encoder.*`, `projector.*`, `language_model.model.*` (`language_model.lm_head.*`
  when untied);
- IBM's older layout: the LM under `llm.*` (`llm.model.*` or `llm.layers.*`);
- the Hugging Face native layout (`GraniteSpeechNarForCTC`): `model.encoder.*`, `model.out_bpe.*`,
  `model.projector.{proj,qformer.{queries,pos_emb,linear,layers.{i}.cross_attn}}`,
  `model.language_model.*`, `lm_head.*`.

Nothing in a checkpoint is run: safetensors holds tensors only.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from ..errors import ModelError
from ..safetensors_files import weight_files  # noqa: F401  (gguf_export reads it here)

_HF_RENAMES = (
    (r"^model\.language_model\.", "language_model.model."),
    (r"^lm_head\.", "language_model.lm_head."),
    (r"^model\.out_bpe\.", "encoder.out_bpe."),
    (r"^model\.encoder\.", "encoder."),
    (r"^model\.projector\.proj\.", "projector.layer_projector."),
    (r"^model\.projector\.qformer\.linear\.", "projector.out_linear."),
    (r"^model\.projector\.qformer\.queries$", "projector.query"),
    (r"^model\.projector\.qformer\.pos_emb$", "projector.window_positions"),
    (r"^model\.projector\.qformer\.layers\.(\d+)\.cross_attn\.", r"projector.qformer.layers.\1.cross_attention."),
    (r"^model\.projector\.", "projector."),
)
_OLD_RENAMES = (
    (r"^llm\.model\.", "language_model.model."),
    (r"^llm\.lm_head\.", "language_model.lm_head."),
    (r"^llm\.(layers|embed_tokens|norm)\b", r"language_model.model.\1"),
)
# LayerNorms of the projector whose affine parameters must be identity (the model has none).
_IDENTITY_NORM = re.compile(r"^projector\.(layer_norms\.\d+|out_norm|qformer\.layers\.\d+\.(attn_norm|mlp_norm))\.(weight|bias)$")


@dataclass
class Checkpoint:
    config: dict
    state_dict: dict
    layout: str
    tokenizer_path: Path


def read_config(path: Path) -> dict:
    try:
        cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"{path}: no config.json") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelError(f"{path}/config.json: not readable JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ModelError(f"{path}/config.json is not an object")
    return cfg


def detect_layout(keys) -> str:
    keys = list(keys)
    if any(k.startswith("language_model.model.") for k in keys) and any(k.startswith("encoder.") for k in keys):
        return "ibm"
    if any(k.startswith("llm.") for k in keys) and any(k.startswith("encoder.") for k in keys):
        return "ibm-old"
    if any(k.startswith("model.encoder.") for k in keys) and any(k.startswith("model.language_model.") for k in keys):
        return "hf"
    sample = ", ".join(sorted(keys)[:5])
    raise ModelError("weights are not in a Granite Speech NAR layout (IBM's encoder.* / projector.* / "
                     f"language_model.model.*, the older llm.*, or the native model.*); first tensors: {sample}")


def rename(key: str, layout: str) -> str:
    rules = _HF_RENAMES if layout == "hf" else _OLD_RENAMES if layout == "ibm-old" else ()
    for pattern, repl in rules:
        new = re.sub(pattern, repl, key)
        if new != key:
            return new
    return key


def read_checkpoint(path: Path, dtype: Optional[torch.dtype] = None, identity_norms: bool = False) -> Checkpoint:
    """The config, the weights under IBM's names (as `dtype` when given) and the tokenizer's path.
    The projector's LayerNorm parameters (checked to be identity) are dropped unless identity_norms
    (a converter writes them out)."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    cfg = read_config(path)
    files = weight_files(path)
    tok = path / "tokenizer.json"
    if not tok.is_file():
        raise ModelError(f"{path}: no tokenizer.json (the Granite tokenizer the transcript is decoded with)")
    state: dict[str, torch.Tensor] = {}
    layout = None
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as h:
                keys = list(h.keys())
                if layout is None:
                    layout = detect_layout(keys)
                for k in keys:
                    if k.endswith("num_batches_tracked"):
                        continue
                    t = h.get_tensor(k)
                    name = rename(k, layout)
                    if _IDENTITY_NORM.match(name):
                        want = 1.0 if name.endswith("weight") else 0.0
                        if not bool((t == want).all()):
                            raise ModelError(f"{f.name}: {k} is not identity: affine projector LayerNorms are not "
                                             "implemented (the published model's are exactly identity)")
                        if not identity_norms:
                            continue
                    if dtype is not None and t.is_floating_point() and t.dtype != dtype:
                        t = t.to(dtype)
                    state[name] = t
        except SafetensorError as e:
            raise ModelError(f"{f}: not a readable safetensors file ({e})") from None
        except OSError as e:
            raise ModelError(f"{f}: {e}") from None
    return Checkpoint(cfg, state, layout or "ibm", tok)

"""A Kyutai STT checkpoint in transformers' layout -> the Mimi encoder and the LM (`KyutaiModel`).

The weights are read from safetensors only. Names: the published (flat) layout save_pretrained writes,
`codec_model.encoder.layers.*` / `codec_model.encoder_transformer.*` / `codec_model.downsample.*` /
`codec_model.quantizer.*`, and transformers' in-memory one (`codec_model.encoder.encoder_seanet.layers.*`,
`codec_model.encoder.encoder_transformer.*`, `codec_model.encoder.downsample.*`); the LM's `model.*` and `lm_head`.
The codec's decoder side is not read. A codebook is `embed_sum / max(cluster_usage, 1e-5)`, as transformers'."""
from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import nn

from ..errors import ModelError
from ..safetensors_files import read_tensors, weight_files
from .config import KyutaiConfig
from .lm import KyutaiLM
from .mimi import MimiEncoder

_CODEC_RENAMES = (
    (r"^codec_model\.encoder\.encoder_seanet\.", "codec_model.encoder."),
    (r"^codec_model\.encoder\.encoder_transformer\.", "codec_model.encoder_transformer."),
    (r"^codec_model\.encoder\.downsample\.", "codec_model.downsample."),
)


def _codec_name(name: str) -> str:
    for a, b in _CODEC_RENAMES:
        name = re.sub(a, b, name)
    return name


def _mimi_state(t: dict, enc: MimiEncoder, where: str) -> dict:
    """Checkpoint tensors (flat names) -> the MimiEncoder's state dict."""
    out = {}
    for name, v in t.items():
        if name.startswith("codec_model.encoder.layers."):
            rest = name[len("codec_model.encoder.layers."):]
            out["seanet.layers." + rest] = v
        elif name.startswith("codec_model.encoder_transformer.layers."):
            rest = name[len("codec_model.encoder_transformer.layers."):]
            i, sub = rest.split(".", 1)
            sub = {"self_attn_layer_scale.scale": "scale1", "mlp_layer_scale.scale": "scale2",
                   "input_layernorm.weight": "norm1.weight", "input_layernorm.bias": "norm1.bias",
                   "post_attention_layernorm.weight": "norm2.weight", "post_attention_layernorm.bias": "norm2.bias",
                   "mlp.fc1.weight": "fc1.weight", "mlp.fc2.weight": "fc2.weight"}.get(sub, sub)
            sub = re.sub(r"^self_attn\.", "", sub)
            out[f"transformer.layers.{i}.{sub}"] = v
        elif name == "codec_model.downsample.conv.weight":
            out["downsample.conv.weight"] = v
    for part, attr in (("semantic", "semantic"), ("acoustic", "acoustic")):
        prefix = f"codec_model.quantizer.{part}_residual_vector_quantizer."
        rvq = getattr(enc, attr)
        if rvq.input_proj is not None:
            w = t.get(prefix + "input_proj.weight")
            if w is None:
                raise ModelError(f"{where}: {prefix}input_proj.weight is missing")
            out[f"{attr}.input_proj.weight"] = w[..., 0]
        books = []
        for j in range(rvq.codebooks.shape[0]):
            s, u = t.get(f"{prefix}layers.{j}.codebook.embed_sum"), t.get(f"{prefix}layers.{j}.codebook.cluster_usage")
            if s is None or u is None:
                raise ModelError(f"{where}: the codebook {prefix}layers.{j} is missing")
            books.append(s.float() / u.float().clamp(min=1e-5)[:, None])
        out[f"{attr}.codebooks"] = torch.stack(books)
    return out


def _lm_state(t: dict) -> dict:
    out = {}
    for name, v in t.items():
        if name == "model.embed_tokens.embed_tokens.weight":
            out["embed.weight"] = v
        elif name in ("model.norm.weight", "lm_head.weight"):
            out[name.replace("model.", "")] = v
        elif name.startswith("model.layers."):
            sub = name[len("model."):]
            sub = sub.replace(".self_attn.", ".").replace(".linear.", ".").replace(".mlp.", ".")
            out[sub] = v
    return out


def _load(module: nn.Module, state: dict, what: str, where: str) -> None:
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    if missing:
        raise ModelError(f"{where}: the {what}'s weights are incomplete (missing {', '.join(missing[:4])})")
    for k, v in state.items():
        if k not in own:
            continue
        if tuple(v.shape) != tuple(own[k].shape):
            raise ModelError(f"{where}: {what} weight {k} has shape {tuple(v.shape)}, config.json says "
                             f"{tuple(own[k].shape)}")
    # assign: the parameters take the (private, copy-on-write) mapped tensors themselves, no second copy
    module.load_state_dict({k: v.float() for k, v in state.items() if k in own}, strict=True, assign=True)


class KyutaiModel(nn.Module):
    def __init__(self, config: KyutaiConfig):
        super().__init__()
        self.config = config
        self.mimi = MimiEncoder(config.mimi)
        self.lm = KyutaiLM(config.lm)

    @classmethod
    def load(cls, path: Path, config: KyutaiConfig) -> "KyutaiModel":
        where = str(path)
        tensors = {_codec_name(k): v for k, v in read_tensors(weight_files(Path(path))).items()}
        if any(".parametrizations." in k or k.endswith(".weight_g") for k in tensors if k.startswith("codec_model.")):
            raise ModelError(f"{where}: weight-normed codec convolutions are not implemented (save without them)")
        if "lm_head.weight" not in tensors and "model.embed_tokens.embed_tokens.weight" in tensors:
            tensors["lm_head.weight"] = tensors["model.embed_tokens.embed_tokens.weight"][: config.lm.vocab_size]
        model = cls(config)
        _load(model.mimi, _mimi_state(tensors, model.mimi, where), "codec", where)
        _load(model.lm, _lm_state(tensors), "language model", where)
        return model.eval()

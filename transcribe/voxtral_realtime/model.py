"""The Voxtral Realtime network (transformers' `VoxtralRealtimeForConditionalGeneration`) with its weights read from a
checkpoint directory: the audio encoder and projector (`encoder.py`) and the language model (`decoder.py`).

Tensor names: what `save_pretrained` writes (`audio_tower.*`, `multi_modal_projector.*`, `language_model.model.*`,
`language_model.lm_head.weight` for an untied head) or transformers' module names (`model.audio_tower.*`,
`model.multi_modal_projector.*`, `model.language_model.*`, `lm_head.weight`), the two spellings transformers loads.
A tied model's stored head, if any, is the embedding's tie and is not read. Mistral's own layout
(consolidated.safetensors with params.json) is refused with a message. Only safetensors files are read: loading
runs no code from the checkpoint."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional

import torch
from torch import nn

from ..errors import ModelError
from ..modules import checked_state
from ..safetensors_files import read_tensors, weight_files
from .config import VoxtralRealtimeConfig
from .decoder import TextModel
from .encoder import AudioEncoder, Projector

# (prefix, part) in the order they are tried; the head's names are matched whole first
_HEADS = ("lm_head.weight", "language_model.lm_head.weight")
_PREFIXES = (("model.audio_tower.", "encoder"), ("audio_tower.", "encoder"),
             ("model.multi_modal_projector.", "projector"), ("multi_modal_projector.", "projector"),
             ("model.language_model.", "lm"), ("language_model.model.", "lm"))
MISTRAL_LAYOUT = ("Mistral's own layout (consolidated.safetensors, params.json) is not read here: use the "
                  "transformers layout (config.json and model.safetensors, as save_pretrained writes it)")


def _load_module(module: nn.Module, tensors: Mapping[str, torch.Tensor], what: str, where: str,
                 dtype: Optional[torch.dtype], consume: bool = False) -> None:
    expected = {name: p.shape for name, p in module.named_parameters()}
    state = checked_state(expected, tensors, f"the {what}'s", where, dtype, consume=consume)
    module.load_state_dict(state, strict=False, assign=True)


def split_tensors(tensors: dict, cfg: VoxtralRealtimeConfig, where: str) -> dict[str, dict]:
    """The checkpoint's tensors by part ("encoder", "projector", "lm"), names below each part's prefix."""
    parts: dict[str, dict[str, torch.Tensor]] = {"encoder": {}, "projector": {}, "lm": {}}
    for key, t in tensors.items():
        if key in _HEADS:
            if not cfg.lm.tie_word_embeddings:
                parts["lm"]["lm_head.weight"] = t
            continue
        for prefix, part in _PREFIXES:
            if key.startswith(prefix):
                parts[part][key[len(prefix):]] = t
                break
        else:
            raise ModelError(f"{where}: unexpected tensor {key!r} (not of the audio encoder, the projector or the "
                             "language model)")
    return parts


class VoxtralRealtimeModel(nn.Module):
    def __init__(self, cfg: VoxtralRealtimeConfig, tower: AudioEncoder, projector: Projector, lm: TextModel):
        super().__init__()
        self.config = cfg
        self.audio_tower = tower
        self.multi_modal_projector = projector
        self.language_model = lm

    @classmethod
    def build(cls, cfg: VoxtralRealtimeConfig, parts: dict, where: str, dtype: torch.dtype = torch.float32,
              int8: Optional[torch.dtype] = None) -> "VoxtralRealtimeModel":
        """The network from the checkpoint's tensors by part (`split_tensors`), in `dtype`; `int8` (the dtype the
        LM computes in): the LM quantized from its weights as stored (`DecoderLM.quantize_int8`), the encoder's
        and the projector's linear layers made int8 products (`quant.quantize_linears`), the rest float32."""
        if int8 is not None:
            lm = TextModel.from_tensors(cfg.lm, parts["lm"], where, int8=int8, window=cfg.lm_window)
        with torch.device("meta"):
            tower = AudioEncoder(cfg.encoder)
            projector = Projector(cfg.encoder, cfg.downsample, cfg.lm.hidden_size)
        stored = None if int8 is not None else dtype
        _load_module(tower, parts["encoder"], "audio encoder", where, stored, consume=int8 is not None)
        _load_module(projector, parts["projector"], "projector", where, stored, consume=int8 is not None)
        if int8 is None:
            lm = TextModel.from_tensors(cfg.lm, parts["lm"], where, dtype, window=cfg.lm_window)
        else:
            from ..quant import quantize_linears

            for part in (tower, projector):
                quantize_linears(part)
                part.to(torch.float32)
        return cls(cfg, tower, projector, lm)

    @classmethod
    def load(cls, path: Path, cfg: VoxtralRealtimeConfig, dtype: torch.dtype = torch.float32,
             int8: Optional[torch.dtype] = None) -> "VoxtralRealtimeModel":
        where = str(path)
        if not (path / "model.safetensors").is_file() and not (path / "model.safetensors.index.json").is_file() \
                and (path / "consolidated.safetensors").is_file():
            raise ModelError(f"{where}: {MISTRAL_LAYOUT}")
        tensors = read_tensors(weight_files(path))
        parts = split_tensors(tensors, cfg, where)
        del tensors
        return cls.build(cfg, parts, where, dtype, int8)

    @property
    def dtype(self) -> torch.dtype:
        return self.language_model.dtype

    @property
    def encoder_dtype(self) -> torch.dtype:
        return self.audio_tower.dtype

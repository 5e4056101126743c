"""The Qwen3-ASR network (transformers' `Qwen3ASRForConditionalGeneration`): the audio encoder and projector
(`encoder.py`) and the Qwen3 LM (`llm.model.DecoderLM`), with its weights read from a checkpoint directory.

Tensor names are transformers' (`save_pretrained` of the -hf repos): `model.audio_tower.*`,
`model.multi_modal_projector.*`, `model.language_model.*` and, for an untied head, `lm_head.weight` (a tied
model's stored `lm_head.weight`, if any, is the embedding's tie in transformers and is not read). Only
safetensors files are read (one file or an index of shards): loading runs no code from the checkpoint."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional

import torch
from torch import nn

from ..errors import ModelError
from ..modules import checked_state
from ..safetensors_files import read_tensors, weight_files
from ..llm.model import DecoderLM
from .config import Qwen3ASRConfig
from .encoder import AudioEncoder, Projector

ENCODER_PREFIX = "model.audio_tower."
PROJECTOR_PREFIX = "model.multi_modal_projector."
LM_PREFIX = "model.language_model."
HEAD = "lm_head.weight"


def _load_module(module: nn.Module, tensors: Mapping[str, torch.Tensor], what: str, where: str,
                 dtype: Optional[torch.dtype], consume: bool = False) -> None:
    """`module`'s parameters from `tensors` (names below its prefix), every one present, of its shape
    (`consume`: taken out of the dict as they are cast)."""
    expected = {name: p.shape for name, p in module.named_parameters()}
    state = checked_state(expected, tensors, f"the {what}'s", where, dtype, consume=consume)
    module.load_state_dict(state, strict=False, assign=True)


class Qwen3ASRModel(nn.Module):
    def __init__(self, cfg: Qwen3ASRConfig, audio_tower: AudioEncoder, projector: Projector, lm: DecoderLM):
        super().__init__()
        self.config = cfg
        self.audio_tower = audio_tower
        self.multi_modal_projector = projector
        self.language_model = lm

    @classmethod
    def load(cls, path: Path, cfg: Qwen3ASRConfig, dtype: torch.dtype = torch.float32,
             int8: Optional[torch.dtype] = None) -> "Qwen3ASRModel":
        """The network with the checkpoint's weights (in `dtype`), built without a random initialisation.
        `int8` (the dtype the LM computes in): an int8 model, the LM quantized first from its weights as stored
        (`DecoderLM.quantize_int8`), then every linear layer of the encoder and the projector made an int8 product
        (`quant.quantize_linears`) from the stored weights and the rest of them cast to float32; each float weight
        freed as its copy is made."""
        where = str(path)
        tensors = read_tensors(weight_files(path))
        parts: dict[str, dict[str, torch.Tensor]] = {"encoder": {}, "projector": {}, "lm": {}}
        prefixes = (("encoder", ENCODER_PREFIX), ("projector", PROJECTOR_PREFIX), ("lm", LM_PREFIX))
        for key, t in tensors.items():
            if key == HEAD:
                if not cfg.lm.tie_word_embeddings:
                    parts["lm"]["lm_head.weight"] = t
                continue
            for part, prefix in prefixes:
                if key.startswith(prefix):
                    parts[part][key[len(prefix):]] = t
                    break
            else:
                if key.startswith("thinker."):
                    from .config import ORIGINAL_LAYOUT

                    raise ModelError(f"{where}: {ORIGINAL_LAYOUT}")
                raise ModelError(f"{where}: unexpected tensor {key!r} (not of the audio encoder, the projector or "
                                 "the language model)")
        del tensors
        if int8 is not None:
            lm = DecoderLM.from_tensors(cfg.lm, parts["lm"], where, int8=int8)
        with torch.device("meta"):
            tower = AudioEncoder(cfg.encoder)
            projector = Projector(cfg.encoder)
        # int8: the weights as stored, the linear layers quantized from them, then the rest cast to float32
        stored = None if int8 is not None else dtype
        _load_module(tower, parts["encoder"], "audio encoder", where, stored, consume=int8 is not None)
        _load_module(projector, parts["projector"], "projector", where, stored, consume=int8 is not None)
        # the sinusoid table is no checkpoint tensor: made again off the meta device
        tower.positions = AudioEncoder.table(cfg.encoder)
        if int8 is None:
            lm = DecoderLM.from_tensors(cfg.lm, parts["lm"], where, dtype)
        else:
            from ..quant import quantize_linears

            for part in (tower, projector):
                quantize_linears(part)
                part.to(torch.float32)  # the convolutions, norms and biases left float (int8 stays int8)
        return cls(cfg, tower, projector, lm)

    @property
    def dtype(self) -> torch.dtype:
        return self.language_model.dtype

    def audio_embeddings(self, feats: torch.Tensor, frames: torch.Tensor) -> list[torch.Tensor]:
        """Mel features [B, n_mels, T] and valid frames [B] -> each input's audio rows for the LM
        ([positions_b, hidden], the LM's dtype)."""
        states = self.audio_tower(feats.to(self.audio_tower.conv2d1.weight.dtype), frames)
        return [self.multi_modal_projector(s).to(self.dtype) for s in states]

"""The Voxtral network (transformers' `VoxtralForConditionalGeneration`): the Whisper audio encoder (`encoder.py`),
the projector and the Llama LM (`llm.model.DecoderLM`), with the weights of a checkpoint directory.

Tensor names are the published checkpoints' (transformers 4's layout, which transformers 5's `save_pretrained` still
writes): `audio_tower.*` (Whisper's transformers names: `whisper.checkpoints.transformers` renames them),
`multi_modal_projector.linear_{1,2}.weight`, `language_model.model.*` and `language_model.lm_head.weight`;
transformers 5's module names (`model.audio_tower.*`, `model.multi_modal_projector.*`, `model.language_model.*`,
`lm_head.weight`) are read too. Only safetensors files are read."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ModelError
from ..llm.model import DecoderLM
from ..modules import checked_state
from ..safetensors_files import read_tensors, weight_files
from .config import VoxtralConfig
from .encoder import AudioEncoder

PREFIXES = (("encoder", "audio_tower."), ("projector", "multi_modal_projector."), ("lm", "language_model."))
HEADS = ("lm_head.weight", "language_model.lm_head.weight")
POSITIONS = "embed_positions.weight"


class Projector(nn.Module):
    """Four stacked encoder states -> one LM row: Linear, GELU, Linear, no biases."""

    def __init__(self, cfg: VoxtralConfig):
        super().__init__()
        self.linear_1 = nn.Linear(cfg.encoder.ffn_dim, cfg.lm.hidden_size, bias=False)
        self.linear_2 = nn.Linear(cfg.lm.hidden_size, cfg.lm.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.gelu(self.linear_1(x)))


def _split(tensors: dict, where: str, tied: bool) -> dict[str, dict[str, torch.Tensor]]:
    parts: dict[str, dict[str, torch.Tensor]] = {"encoder": {}, "projector": {}, "lm": {}}
    for key in list(tensors):
        t = tensors.pop(key)
        name = key[len("model."):] if key.startswith("model.") else key
        if name.startswith("language_model.model."):
            name = "language_model." + name[len("language_model.model."):]
        if name in HEADS:
            if not tied:
                parts["lm"]["lm_head.weight"] = t
            continue
        for part, prefix in PREFIXES:
            if name.startswith(prefix):
                parts[part][name[len(prefix):]] = t
                break
        else:
            raise ModelError(f"{where}: unexpected tensor {key!r} (not of the audio encoder, the projector or the "
                             "language model)")
    if not tied and "lm_head.weight" not in parts["lm"]:
        raise ModelError(f"{where}: the language model's head lm_head.weight is missing (the config does not tie "
                         "it to the embedding)")
    return parts


class VoxtralModel(nn.Module):
    def __init__(self, cfg: VoxtralConfig, audio_tower: AudioEncoder, projector: Projector, lm: DecoderLM):
        super().__init__()
        self.config = cfg
        self.audio_tower = audio_tower
        self.multi_modal_projector = projector
        self.language_model = lm

    @classmethod
    def load(cls, path: Path, cfg: VoxtralConfig, dtype: torch.dtype = torch.float32,
             int8: Optional[torch.dtype] = None) -> "VoxtralModel":
        """The network with the checkpoint's weights in `dtype` (the stored position table stays float32, as
        transformers keeps it). `int8` (the dtype the LM computes in): the LM quantized from its weights as stored
        (`DecoderLM.quantize_int8`), then every linear layer of the encoder and the projector made an int8
        product (`quant.quantize_linears`), the rest float32."""
        return cls.from_tensors(read_tensors(weight_files(path)), cfg, str(path), dtype, int8)

    @classmethod
    def from_tensors(cls, tensors: dict, cfg: VoxtralConfig, where: str, dtype: torch.dtype = torch.float32,
                     int8: Optional[torch.dtype] = None) -> "VoxtralModel":
        """The network from a dict of tensors under the checkpoint's names (taken out of the dict as they are
        used)."""
        enc = cfg.encoder
        parts = _split(tensors, where, cfg.lm.tie_word_embeddings)
        if int8 is not None:
            lm = DecoderLM.from_tensors(cfg.lm, parts["lm"], where, int8=int8)
        else:
            lm = DecoderLM.from_tensors(cfg.lm, parts["lm"], where, dtype)
        encoder = parts["encoder"]
        table = encoder.pop(POSITIONS, None)
        if table is None:
            raise ModelError(f"{where}: the audio encoder's position table audio_tower.embed_positions.weight is "
                             "missing")
        if tuple(table.shape) != (enc.positions, enc.d_model):
            raise ModelError(f"{where}: audio_tower.embed_positions.weight has shape {tuple(table.shape)}, the "
                             f"config implies {(enc.positions, enc.d_model)}")
        with torch.device("meta"):
            tower = AudioEncoder(enc)
            projector = Projector(cfg)
        stored = None if int8 is not None else dtype
        for module, tensors, what in ((tower, encoder, "audio encoder's"), (projector, parts["projector"],
                                                                           "projector's")):
            expected = {name: p.shape for name, p in module.named_parameters()}
            state = checked_state(expected, tensors, f"the {what}", where, stored, consume=True)
            module.load_state_dict(state, strict=False, assign=True)
        tower.embed_positions = table.to(torch.float32).contiguous()
        if int8 is not None:
            from ..quant import quantize_linears

            for part in (tower, projector):
                quantize_linears(part)
                part.to(torch.float32)
        return cls(cfg, tower, projector, lm)

    @property
    def dtype(self) -> torch.dtype:
        return self.language_model.dtype

    def audio_rows(self, mel: torch.Tensor) -> torch.Tensor:
        """Log-mel chunks [C, n_mels, 3000] of one input -> its LM rows [C * 375, hidden] (the LM's dtype)."""
        tower = self.audio_tower
        states = tower(mel.to(tower.conv1.weight.dtype))  # [C, 1500, d]
        # the projector computes in the encoder's dtype (both float32 in an int8 model)
        rows = self.multi_modal_projector(states.reshape(-1, self.config.encoder.ffn_dim))
        return rows.to(self.dtype)

"""The Qwen3-ASR network (transformers' `Qwen3ASRForConditionalGeneration`): the audio encoder and projector
(`encoder.py`) and the Qwen3 LM (`llm.model.DecoderLM`), with its weights read from a checkpoint directory.

Tensor names are transformers' (`save_pretrained` of the -hf repos): `model.audio_tower.*`,
`model.multi_modal_projector.*`, `model.language_model.*` and, for an untied head, `lm_head.weight` (a tied
model's stored `lm_head.weight`, if any, is the embedding's tie in transformers and is not read). Only
safetensors files are read (one file or an index of shards): loading runs no code from the checkpoint."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Optional

import torch
from torch import nn

from ..errors import ModelError
from ..modules import checked_state
from ..llm.model import DecoderLM
from .config import Qwen3ASRConfig
from .encoder import AudioEncoder, Projector

ENCODER_PREFIX = "model.audio_tower."
PROJECTOR_PREFIX = "model.multi_modal_projector."
LM_PREFIX = "model.language_model."
HEAD = "lm_head.weight"


def weight_files(path: Path) -> list[Path]:
    """The checkpoint's safetensors files: the shards an index names, or model.safetensors."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelError(f"{index}: not a safetensors index ({e})") from None
        if not all(isinstance(s, str) and "/" not in s and "\\" not in s and s not in ("", ".", "..") for s in shards):
            raise ModelError(f"{index}: a shard name is not a file name of the directory")
        files = [path / s for s in shards]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ModelError(f"{path}: weight shards missing: {', '.join(missing[:4])}")
        return files
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    raise ModelError(f"{path}: no model.safetensors (or model.safetensors.index.json) weights")


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError, safe_open

    state: dict[str, torch.Tensor] = {}
    for f in weight_files(path):
        try:
            with safe_open(str(f), framework="pt") as h:
                for k in h.keys():
                    if k in state:
                        raise ModelError(f"{f.name}: tensor {k} appears in two shards")
                    state[k] = h.get_tensor(k)
        except SafetensorError as e:
            raise ModelError(f"{f}: not a readable safetensors file ({e})") from None
        except OSError as e:
            raise ModelError(f"{f}: {e}") from None
    return state


def _load_module(module: nn.Module, tensors: Mapping[str, torch.Tensor], what: str, where: str,
                 dtype: torch.dtype) -> None:
    """`module`'s parameters from `tensors` (names below its prefix), every one present, of its shape."""
    expected = {name: p.shape for name, p in module.named_parameters()}
    state = checked_state(expected, tensors, f"the {what}'s", where, dtype)
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
             lm_dtype: Optional[torch.dtype] = torch.float32) -> "Qwen3ASRModel":
        """The network with the checkpoint's weights (in `dtype`, the LM's in `lm_dtype`, None: as stored), built
        without a random initialisation."""
        where = str(path)
        tensors = read_tensors(path)
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
        with torch.device("meta"):
            tower = AudioEncoder(cfg.encoder)
            projector = Projector(cfg.encoder)
        _load_module(tower, parts["encoder"], "audio encoder", where, dtype)
        _load_module(projector, parts["projector"], "projector", where, dtype)
        # the sinusoid table is no checkpoint tensor: made again off the meta device
        tower.positions = AudioEncoder.table(cfg.encoder)
        lm = DecoderLM.from_tensors(cfg.lm, parts.pop("lm"), where, lm_dtype)
        return cls(cfg, tower, projector, lm)

    @property
    def dtype(self) -> torch.dtype:
        return self.language_model.dtype

    def audio_embeddings(self, feats: torch.Tensor, frames: torch.Tensor) -> list[torch.Tensor]:
        """Mel features [B, n_mels, T] and valid frames [B] -> each input's audio rows for the LM
        ([positions_b, hidden], the LM's dtype)."""
        states = self.audio_tower(feats.to(self.audio_tower.conv2d1.weight.dtype), frames)
        return [self.multi_modal_projector(s).to(self.dtype) for s in states]

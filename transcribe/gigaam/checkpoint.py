"""Reading a GigaAM model: the Hugging Face layout of ai-sage/GigaAM-v3 (one branch per variant: config.json
with the package's config under cfg.model.cfg, pytorch_model.bin or model.safetensors with the GigaAMASR
state dict under "model.", tokenizer.model for the e2e variants), or a `.ckpt` of the `gigaam` package
where it loads without running code from the file.

The package's own .ckpt files (~/.cache/gigaam/v3_*.ckpt) pickle an omegaconf DictConfig beside the
weights; `torch.load(weights_only=True)` refuses that object, and nothing here unpickles it any other way:
such a file gets an error naming the layout to use instead."""
from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import ModelError
from .config import GigaAMConfig, find_cfg, parse

WEIGHTS = ("model.safetensors", "pytorch_model.bin")


@dataclass
class Checkpoint:
    config: GigaAMConfig
    state_dict: dict
    tokenizer: Optional[Path]  # the SentencePiece model of an e2e variant


def is_gigaam_dir(path: Path) -> bool:
    f = path / "config.json"
    if not f.is_file() or f.stat().st_size > 1_000_000:
        return False
    try:
        return json.loads(f.read_text(encoding="utf-8")).get("model_type") == "gigaam"
    except (ValueError, UnicodeDecodeError, AttributeError):
        return False


def is_gigaam_ckpt(path: Path) -> bool:
    """A PyTorch archive whose pickle (its bytes, not unpickled) names the keys "cfg" and "state_dict", as the
    gigaam package's checkpoints do (NeMo's model_weights.ckpt is a bare state dict)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            name = next((n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if name is None or z.getinfo(name).file_size > 64 << 20:
                return False
            data = z.read(name)
    except (OSError, zipfile.BadZipFile):
        return False
    return b"state_dict" in data and b"cfg" in data


def _torch_load(path: Path) -> dict:
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ModelError(
            f"{path}: the file holds Python objects besides tensors ({str(e).splitlines()[0][:160]}); the gigaam "
            "package's .ckpt files pickle an omegaconf config, which is not loaded here (loading a model runs no "
            "code from it). Use the Hugging Face layout of the same model: ai-sage/GigaAM-v3 (short names "
            "gigaam-v3-ctc, gigaam-v3-rnnt, gigaam-v3-e2e-ctc, gigaam-v3-e2e-rnnt)") from None
    except Exception as e:
        raise ModelError(f"{path}: not a readable PyTorch file ({str(e).splitlines()[0][:160]})") from None


def _strip(sd: dict) -> dict:
    """The GigaAMASR keys: "model." (the Hugging Face wrapper's) taken off where every key has it."""
    if sd and all(k.startswith("model.") for k in sd):
        return {k[len("model."):]: v for k, v in sd.items()}
    return sd


def read(path: Path) -> Checkpoint:
    if path.is_file():
        obj = _torch_load(path)
        if not isinstance(obj, dict) or not isinstance(obj.get("cfg"), dict) or "state_dict" not in obj:
            raise ModelError(f"{path}: not a GigaAM checkpoint (a dict with cfg and state_dict)")
        cfg = parse(find_cfg(obj))
        if cfg.tokenizer is not None:
            raise ModelError(f"{path}: an e2e model's .ckpt needs its SentencePiece model beside it; use the "
                             "Hugging Face layout (a folder with tokenizer.model)")
        return Checkpoint(cfg, _strip(obj["state_dict"]), None)
    try:
        raw = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: unreadable config.json ({e})") from None
    try:
        cfg = parse(find_cfg(raw))
    except ModelError as e:
        raise ModelError(f"{path}: {e}") from None
    found = [path / w for w in WEIGHTS if (path / w).is_file()]
    if not found:
        raise ModelError(f"{path}: no weights ({' or '.join(WEIGHTS)})")
    if found[0].name.endswith(".safetensors"):
        from safetensors.torch import load_file

        try:
            sd = load_file(str(found[0]))
        except Exception as e:
            raise ModelError(f"{found[0]}: unreadable safetensors file ({e})") from None
    else:
        sd = _torch_load(found[0])
        if not isinstance(sd, dict):
            raise ModelError(f"{found[0]}: not a state dict")
    tok = None
    if cfg.tokenizer is not None:
        tok = path / "tokenizer.model"
        if not tok.is_file():
            tok = path / Path(cfg.tokenizer).name
        if not tok.is_file():
            raise ModelError(f"{path}: the model decodes with a SentencePiece model and the folder has no "
                             "tokenizer.model")
    return Checkpoint(cfg, _strip(sd), tok)

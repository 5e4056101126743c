"""Reading `.nemo` archives (and unpacked NeMo directories) without importing NeMo.

A `.nemo` file is a tar archive holding `model_config.yaml`, `model_weights.ckpt` (a torch state
dict) and the tokenizer files the config names with a `nemo:` prefix. Nothing in it is executed:
the config is parsed with `yaml.safe_load` and the weights with `torch.load(weights_only=True)`.
"""
from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import yaml

from ..errors import ModelError

CONFIG = "model_config.yaml"
WEIGHTS = "model_weights.ckpt"


@dataclass
class NemoCheckpoint:
    config: dict
    state_dict: dict
    tokenizer: Optional[bytes]  # SentencePiece model bytes
    source: str


def read_nemo(path: str | os.PathLike) -> NemoCheckpoint:
    """Read a `.nemo` archive or a directory with the same files."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: no such model file or directory")
    if path.is_dir():
        return _read_dir(path)
    try:
        tar = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ModelError(f"{path}: not a .nemo archive (not a tar file, or a corrupt one)") from None
    with tar:
        try:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ModelError(f"{path}: corrupt or truncated .nemo archive ({e})") from None
        if CONFIG not in members:
            raise ModelError(f"{path}: not a .nemo archive ({CONFIG} is missing)")
        if WEIGHTS not in members:
            raise ModelError(f"{path}: incomplete .nemo archive ({WEIGHTS} is missing)")

        def read(name: str) -> bytes:
            f = tar.extractfile(members[name])
            data = f.read() if f is not None else b""
            if len(data) != members[name].size:
                raise ModelError(f"{path}: truncated .nemo archive ({name} is cut short)")
            return data

        try:
            config = _parse_config(read(CONFIG), path)
            weights = tar.extractfile(members[WEIGHTS])
            state = _load_weights(weights, path, members[WEIGHTS].size)
            tok_name = _tokenizer_member(config)
            tokenizer = None
            if tok_name is not None:
                if tok_name not in members:
                    raise ModelError(f"{path}: tokenizer file {tok_name} named in the config is missing")
                tokenizer = read(tok_name)
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ModelError(f"{path}: corrupt or truncated .nemo archive ({e})") from None
    return NemoCheckpoint(config, state, tokenizer, str(path))


def _read_dir(path: Path) -> NemoCheckpoint:
    cfg_path = path / CONFIG
    w_path = path / WEIGHTS
    if not cfg_path.is_file():
        nemos = sorted(path.glob("*.nemo"))
        if len(nemos) == 1:
            return read_nemo(nemos[0])
        raise ModelError(f"{path}: no {CONFIG} (and not exactly one .nemo file) in this directory")
    if not w_path.is_file():
        raise ModelError(f"{path}: {WEIGHTS} is missing")
    config = _parse_config(cfg_path.read_bytes(), path)
    with open(w_path, "rb") as f:
        state = _load_weights(f, path, w_path.stat().st_size)
    tok_name = _tokenizer_member(config)
    tokenizer = None
    if tok_name is not None:
        cands = [path / tok_name] + sorted(path.glob("*" + tok_name))
        found = next((c for c in cands if c.is_file()), None)
        if found is None:
            raise ModelError(f"{path}: tokenizer file {tok_name} named in the config is missing")
        tokenizer = found.read_bytes()
    return NemoCheckpoint(config, state, tokenizer, str(path))


def _parse_config(data: bytes, path) -> dict:
    try:
        cfg = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: {CONFIG} is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict) or "encoder" not in cfg:
        raise ModelError(f"{path}: {CONFIG} has no encoder section; not a NeMo ASR model")
    return cfg


def _load_weights(f, path, size: int) -> dict:
    try:
        sd = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises RuntimeError / UnpicklingError / EOFError with long texts
        msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise ModelError(f"{path}: {WEIGHTS} is corrupt or truncated ({msg})") from None
    if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
        sd = sd["state_dict"]
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ModelError(f"{path}: {WEIGHTS} does not hold a state dict of tensors")
    return sd


def _tokenizer_member(cfg: dict) -> Optional[str]:
    tok = cfg.get("tokenizer") or {}
    mp = tok.get("model_path")
    if not mp:
        return None
    mp = str(mp)
    if mp.startswith("nemo:"):
        mp = mp[len("nemo:"):]
    return Path(mp).name

"""NVIDIA Canary (NeMo `EncDecMultiTaskModel`): a FastConformer encoder (Parakeet's), a Transformer decoder
driven by a prompt of special tokens (NeMo's `canary` and `canary2` formats), greedy and NeMo's beam search;
speech recognition and speech translation. Loads `.nemo` files, transcribe.cpp GGUF files and transformers
folders (`hf.py`). `detect` and `load` are this family's entry in
`transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "detect", "load", "export_gguf"]

# The family contract (loading.Family): the name in messages and the options of transcribe().
KIND = "Canary"
from .options import CanaryOptions as Options, CanaryStreamOptions as StreamOptions  # noqa: E402
# Batch jobs cut inputs longer than this into pieces at pauses (the decoder's 1,024 positions hold the prompt
# and about 4 minutes of fast speech; NeMo's own transcribe() cuts long audio into 40 s chunks).
PIECE_S = 40.0


def detect(path: Path) -> Optional[str]:
    """"gguf" for a transcribe.cpp GGUF file of the `canary` architecture; "hf" for a transformers folder
    whose config.json has `model_type: canary`; "nemo" for a `.nemo` archive or NeMo directory whose config is
    an AED multitask model (its config read alone); else None."""
    if path.is_file():
        from ..gguf import architecture, is_gguf

        if is_gguf(path):
            return "gguf" if architecture(path) == "canary" else None
    elif not path.is_dir():
        return None
    elif _model_type(path) == "canary":
        return "hf"
    from ..nemo.checkpoint import read_config
    from .config import is_canary

    cfg = read_config(path)
    return "nemo" if isinstance(cfg, dict) and is_canary(cfg) else None


def _model_type(folder: Path) -> Optional[str]:
    """The `model_type` of a transformers folder's config.json (read alone: no torch), or None."""
    import json

    cfg = folder / "config.json"
    try:
        if not cfg.is_file() or cfg.stat().st_size > (1 << 20):
            return None
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data.get("model_type") if isinstance(data, dict) else None


def load(path: Path, name: str, device, dtype, kind: str):
    if kind == "gguf":
        from .gguf import load as load_gguf

        return load_gguf(path, name, device, dtype)
    if kind == "hf":
        from .hf import load as load_hf

        return load_hf(path, name, device, dtype)
    from .recognizer import CanaryASR

    return CanaryASR.load(path, name, device, dtype)


def export_gguf(path: Path, out: Path, schema: Optional[str], qtype: Optional[str], meta: Optional[dict],
                name: str) -> tuple[str, str]:
    """`transcribe convert` for a Canary `.nemo`: transcribe.cpp's `canary` schema (the only one), f32 by
    default (`gguf_export.export`)."""
    from ..errors import ModelError
    from .gguf_export import export

    if schema not in (None, "transcribe.cpp"):
        raise ModelError(f"--schema {schema}: Canary GGUF files are transcribe.cpp's (its `canary` schema)")
    if qtype == "bf16":
        raise ModelError("--type bf16 is not one of transcribe.cpp's Canary types (f32, f16, q8_0, q4_0)")
    export(path, out, qtype=qtype or "f32", meta=meta)
    return "transcribe.cpp", qtype or "f32"

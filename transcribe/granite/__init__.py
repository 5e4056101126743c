"""IBM Granite Speech NAR: config, checkpoint (IBM's hub layout, its older one, the Hugging Face
native one), front end, conformer encoder, windowed Q-Former projector, bidirectional Granite editor
and the recognizer. `detect` and `load` are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from .config import MODEL_TYPES

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "detect", "load", "export_gguf"]

# The family contract (loading.Family): its name in messages and the keyword options transcribe() takes.
KIND = "Granite Speech NAR"
from .options import GraniteOptions as Options  # noqa: E402
StreamOptions = None  # no live session
# Batch jobs cut inputs longer than this into pieces at pauses (the editor's default piece (max_piece_s)).
PIECE_S = 90.0


def detect(path: Path) -> Optional[str]:
    """"granite" for a directory whose config.json names a Granite Speech NAR model (its model_type,
    or an encoder_config + projector_config + text/llm config with a BPE head); "gguf" for a GGUF
    file of transcribe.cpp's `granite_speech_nar` architecture; else None."""
    if path.is_file():
        from ..gguf import architecture

        return "gguf" if architecture(path) == "granite_speech_nar" else None
    cfg_path = path / "config.json"
    if not path.is_dir() or not cfg_path.is_file():
        return None
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    if cfg.get("model_type") in MODEL_TYPES:
        return "granite"
    enc = cfg.get("encoder_config")
    if isinstance(enc, dict) and "projector_config" in cfg and ("text_config" in cfg or "llm_config" in cfg) and (
            "bpe_output_dim" in enc or "vocabulary_size" in enc):
        return "granite"
    return None


def load(path: Path, name: str, device, dtype, kind: str):
    """The recognizer of a Granite Speech NAR checkpoint directory (see `GraniteASR.load`) or of a
    transcribe.cpp GGUF file (kind "gguf", `gguf.load_gguf`)."""
    if kind == "gguf":
        from .gguf import load_gguf

        return load_gguf(path, name, device, dtype)
    from .recognizer import GraniteASR

    return GraniteASR.load(path, name, device, dtype)


def export_gguf(path: Path, out: Path, schema: Optional[str], qtype: Optional[str], meta: Optional[dict],
                name: str) -> tuple[str, str]:
    """`transcribe convert` for a Granite Speech NAR directory (`gguf_export.export_gguf`: transcribe.cpp's
    schema, bf16 by default): writes `out`, returns the schema and type used."""
    from ..errors import ModelError
    from .gguf_export import export_gguf as export

    if schema not in (None, "transcribe.cpp"):
        raise ModelError(f"{path}: a Granite Speech NAR model has only transcribe.cpp's schema (--schema {schema})")
    qtype = qtype or "bf16"
    export(path, out, qtype, meta or None)
    return "transcribe.cpp", qtype


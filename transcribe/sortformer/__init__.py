"""NVIDIA Sortformer speaker diarizers (NeMo `SortformerEncLabelModel`): a FastConformer encoder, a Transformer
encoder and a sigmoid head giving, for every 80 ms frame, the activity of up to 4 speakers; offline
(`diar_sortformer_4spk-v1`) and streaming with the Arrival-Order Speaker Cache and FIFO
(`diar_streaming_sortformer_4spk-v2`, `-v2.1`). Loads `.nemo` files and transcribe.cpp GGUF files. A diarizer:
its transcripts have no text, only speaker turns; any recognizer runs it with `diarize=True`. `detect` and
`load` are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "DIARIZER", "detect", "load", "export_gguf"]

KIND = "Sortformer"
from .options import SortformerOptions as Options  # noqa: E402

StreamOptions = None
DIARIZER = True  # the family's models diarize; they transcribe nothing


def detect(path: Path) -> Optional[str]:
    """"gguf" for a transcribe.cpp GGUF file of the `sortformer` architecture; "nemo" for a `.nemo` archive or
    NeMo directory whose config is a Sortformer diarizer's (its config read alone); else None."""
    if path.is_file():
        from ..gguf import architecture, is_gguf

        if is_gguf(path):
            return "gguf" if architecture(path) == "sortformer" else None
    elif not path.is_dir():
        return None
    from ..nemo.checkpoint import read_config
    from .config import is_sortformer

    cfg = read_config(path)
    return "nemo" if isinstance(cfg, dict) and is_sortformer(cfg) else None


def load(path: Path, name: str, device, dtype, kind: str):
    from .recognizer import SortformerDiarizer

    if kind == "gguf":
        from .gguf import read_sortformer_gguf

        cfg, state = read_sortformer_gguf(path)
        return SortformerDiarizer.from_state(cfg, state, str(path), name, device, dtype)
    return SortformerDiarizer.load(path, name, device, dtype)


def export_gguf(path: Path, out: Path, schema: Optional[str], qtype: Optional[str], meta: Optional[dict],
                name: str) -> tuple[str, str]:
    """`transcribe convert` for a Sortformer `.nemo`: transcribe.cpp's `sortformer` schema (the only one), f32
    by default (`gguf_export.export_gguf`)."""
    from .gguf_export import export_gguf as export

    return export(path, out, schema, qtype, meta, name)

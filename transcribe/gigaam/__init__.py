"""GigaAM v3 (Sber / ai-sage, Russian): a conformer encoder with rotary attention and a CTC or RNN-T head, with
a character vocabulary (v3_ctc, v3_rnnt: lower case, no punctuation) or a SentencePiece tokenizer (v3_e2e_ctc,
v3_e2e_rnnt: cased, punctuated). The Hugging Face layout of ai-sage/GigaAM-v3 (a branch per variant) and
transcribe.cpp's GGUF files load; greedy decoding exact against the `gigaam` package. `detect` and `load` are
this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "detect", "load"]

KIND = "GigaAM"
from .options import GigaAMOptions as Options  # noqa: E402
StreamOptions = None
# Batch jobs cut inputs longer than this into pieces at pauses (gigaam transcribes at most 25 s at once).
PIECE_S = 25.0


def detect(path: Path) -> Optional[str]:
    """"hf" for a directory whose config.json has model_type "gigaam"; "ckpt" for a .ckpt file of the gigaam
    package (a PyTorch archive whose pickle names "cfg" and "state_dict", read without unpickling it; loaded only
    where it loads with weights_only=True); "gguf" for a GGUF file of architecture gigaam; else None."""
    if path.is_dir():
        from .checkpoint import is_gigaam_dir

        return "hf" if is_gigaam_dir(path) else None
    if path.is_file() and path.suffix == ".ckpt":
        from .checkpoint import is_gigaam_ckpt

        return "ckpt" if is_gigaam_ckpt(path) else None
    if path.is_file() and path.suffix == ".gguf":
        from .gguf import is_gigaam_gguf

        return "gguf" if is_gigaam_gguf(path) else None
    return None


def load(path: Path, name: str, device, dtype, kind: str):
    if kind == "gguf":
        from .gguf import load as load_gguf

        return load_gguf(path, name, device, dtype)
    from .recognizer import GigaAMASR

    return GigaAMASR.load(path, name, device, dtype)

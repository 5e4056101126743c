"""IBM Granite Speech 5 CTC (ibm-granite/granite-speech-5.0-470m-turboctc; transformers' `GraniteSpeech5ForCTC`,
model type `granite_speech5_ctc`): log-mels with deltas, IBM's block-attention conformer (`transcribe.ibm`) with
two subsampling blocks and self-conditioning, one BPE CTC head; greedy (exact against transformers) or beam
search, token, word and segment times from the CTC frames, live sessions over buffered windows. `detect` and
`load` are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "detect", "load"]

# The family contract (loading.Family): its name in messages and the keyword options transcribe() takes.
KIND = "Granite Speech 5"
from .options import GraniteSpeech5Options as Options  # noqa: E402
from .options import GraniteSpeech5StreamOptions as StreamOptions  # noqa: E402  (buffered windows)
# Batch jobs cut inputs longer than this into pieces at pauses (the default max_piece_s).
PIECE_S = 120.0


def detect(path: Path) -> Optional[str]:
    """"transformers" for a directory whose config.json has model_type "granite_speech5_ctc"; else None."""
    cfg_path = path / "config.json"
    if not path.is_dir() or not cfg_path.is_file():
        return None
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return "transformers" if isinstance(cfg, dict) and cfg.get("model_type") == "granite_speech5_ctc" else None


def load(path: Path, name: str, device, dtype, kind: str):
    from .recognizer import GraniteSpeech5ASR

    return GraniteSpeech5ASR.load(path, name, device, dtype)

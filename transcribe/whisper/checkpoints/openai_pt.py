"""Reading openai-whisper `.pt` checkpoints: `{"dims": {...}, "model_state_dict": {...}}`.

The state dict already uses the names of `transcribe.whisper.model.Whisper`. The file is read with
`torch.load(weights_only=True)` (no code runs from it), memory-mapped where its format allows.

Alignment heads: a checkpoint's own `alignment_heads` entry (a boolean [n_text_layer, n_text_head]
mask, dense or sparse, openai-whisper's gzipped base85 bytes, or [layer, head] pairs); else, for a
file named as openai-whisper names its downloads (`tiny.en.pt`, `large-v3.pt` ...), openai-whisper's
table entry for that model; else its default, every head of the last half of the decoder layers.

The tokenizer: `tokenizer.json` beside the file, else the shared one of its vocabulary
(see `checkpoints.common.reference_tokenizer_json`).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from ...errors import ModelError
from . import find_openai_pt
from ..model import WhisperDims
from .common import (
    OPENAI_ALIGNMENT_HEADS,
    alignment_heads_from,
    complete_config,
    default_alignment_heads,
    drop_key_biases,
    read_text_json,
    reference_tokenizer_json,
    state_dict_fits,
    tokenizer_beside,
    torch_load,
)

log = logging.getLogger(__name__)


def _load(path: Path) -> dict:
    return torch_load(path)


def read_openai_pt(path: str | os.PathLike) -> tuple[dict, dict[str, torch.Tensor], str]:
    """Read an openai-whisper checkpoint (a .pt file, or a directory holding one).
    Returns `(config, state_dict, tokenizer_json)` as `read_ctranslate2` does."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: no such file or directory")
    pt = find_openai_pt(path)
    if pt is None:
        raise ModelError(f"{path}: not an openai-whisper .pt checkpoint")
    ck = _load(pt)
    if not isinstance(ck, dict) or "dims" not in ck or "model_state_dict" not in ck:
        keys = list(ck)[:6] if isinstance(ck, dict) else type(ck).__name__
        raise ModelError(f"{pt}: not an openai-whisper checkpoint (expected 'dims' and 'model_state_dict', found {keys})")
    try:
        dims = WhisperDims.from_dict(ck["dims"]).__dict__.copy()
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ModelError(f"{pt}: unreadable dims ({type(e).__name__}: {e})") from None
    # openai-whisper's ModelDimensions has exactly these fields: another is a setting of some other
    # model, which this one would not implement.
    extra = {k: v for k, v in ck["dims"].items() if k not in dims}
    if extra:
        listed = ", ".join(f"{k} = {v!r}" for k, v in sorted(extra.items()))
        raise ModelError(f"{pt}: dims {listed}: not a dimension of openai-whisper's model; not implemented")
    sd = ck["model_state_dict"]
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ModelError(f"{pt}: model_state_dict is not a dict of tensors")
    sd = drop_key_biases({k: v for k, v in sd.items() if k != "alignment_heads"})
    state_dict_fits(sd, dims, str(pt))

    where = str(pt)
    if ck.get("alignment_heads") is not None:
        heads = alignment_heads_from(ck["alignment_heads"], dims["n_text_layer"], dims["n_text_head"], where)
    else:
        heads = None
        table = OPENAI_ALIGNMENT_HEADS.get(pt.name[: -len(".pt")])
        if table is not None:
            try:
                heads = alignment_heads_from(table, dims["n_text_layer"], dims["n_text_head"], where)
            except ModelError:
                log.warning("%s: named as openai-whisper's %s, but its dims differ; default alignment heads",
                            pt, pt.stem)
        if heads is None:
            heads = default_alignment_heads(dims["n_text_layer"], dims["n_text_head"])

    tok_path = tokenizer_beside(pt)
    tokenizer_json = read_text_json(tok_path) if tok_path else reference_tokenizer_json(dims["n_vocab"], where)
    config = complete_config({"dims": dims, "alignment_heads": heads, "format": "openai"}, tokenizer_json, where)
    return config, sd, tokenizer_json

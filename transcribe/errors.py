"""Errors the package raises on bad input. The CLI turns each into one line and exit code 2."""
from __future__ import annotations

import pickle
import re
from typing import Optional


class TranscribeError(Exception):
    """Base class: bad input the user can fix (audio, model, options)."""


class AudioError(TranscribeError):
    """Audio that is missing, unreadable, corrupt or empty."""


class ModelError(TranscribeError):
    """A model file or id that is missing, corrupt, truncated or of an unknown kind."""


def weights_only_refusal(e: BaseException) -> Optional[str]:
    """What `torch.load(weights_only=True)` refused to unpickle (a class or function name, or ''),
    when `e` is that refusal; None for any other error (a corrupt or truncated file)."""
    text = str(e)
    if not isinstance(e, pickle.UnpicklingError) or "Weights only load failed" not in text:
        return None
    if "GLOBAL" not in text and "allowlisted" not in text:
        return None  # the weights-only unpickler failing on bytes that are not a pickle
    m = re.search(r"GLOBAL ([\w.]+)", text) or re.search(r"but got <class '([\w.]+)'>", text)
    return m.group(1) if m else ""

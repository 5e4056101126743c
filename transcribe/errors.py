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


class OptionValueError(TranscribeError):
    """A value of an option the model takes but cannot honour (a language it does not know, a task it
    cannot do); `option` names the option, so a surface can point at its own field."""

    def __init__(self, option: str, message: str):
        self.option = option
        super().__init__(message)

    def __reduce__(self):  # raised in a worker process, re-raised in the job's
        return type(self), (self.option, str(self))


class OptionsNotTaken(TranscribeError):
    """Options a model cannot honour: every surface (the Python API, the command, the server, batch jobs,
    streaming sessions) refuses them with the same sentence, each spelling the options its own way
    (`initial_prompt`, `--initial-prompt`, the form field `prompt`)."""

    def __init__(self, model: str, kind: str, names):
        self.model, self.kind, self.names = str(model), str(kind), sorted(names)
        super().__init__(self.spelled(lambda name: name))

    def __reduce__(self):  # raised in a worker process, re-raised in the job's
        return type(self), (self.model, self.kind, self.names)

    def spelled(self, spell) -> str:
        """The message with each option written as `spell(keyword)` gives it."""
        words = list(dict.fromkeys(spell(n) for n in self.names))  # each spelling once (two names, one flag)
        listed = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
        return f"{self.model} is a {self.kind} model and does not take {listed}"

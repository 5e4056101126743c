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


# What a checkpoint whose weights are a plain pickle (pickle.dump of a state dict, not torch.save's zip
# or legacy format) is told as: unpickling it could run any code, so it is never loaded.
RAW_PICKLE = "a raw pickle checkpoint, which this package does not load: it could run code"

# torch.save's legacy (torch < 1.6) format: a protocol-2 pickle of its magic number first.
_TORCH_LEGACY_HEAD = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")


def raw_pickle(head: bytes) -> bool:
    """Whether a checkpoint starting with `head` (16 bytes or more) is a plain pickle: a pickle stream
    (protocol 2 to 5) that is neither torch's zip format nor its legacy format."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5 and not head.startswith(_TORCH_LEGACY_HEAD)


def load_failure(e: BaseException) -> str:
    """A short reason for torch.load's failure on a bad file, without torch's advice to retry with
    weights_only=False (which would run whatever code the file holds)."""
    text = str(e)
    if "Weights only load failed" in text:
        m = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
        return f"not a valid pickle stream: {m.group(1).strip()[:160]}" if m else "not a valid pickle stream"
    return text.splitlines()[0][:200] if text.strip() else type(e).__name__


class OptionValueError(TranscribeError):
    """A value of an option the model takes but cannot honour (a language it does not know, a task it
    cannot do); `option` names the option, so a surface can point at its own field."""

    def __init__(self, option: str, message: str):
        self.option = option
        super().__init__(message)

    def __reduce__(self):  # raised in a worker process, re-raised in the job's
        return type(self), (self.option, str(self))

    def spelled(self, spell) -> str:
        """The message with the option's name that begins it (`beam_size must be at most 64`) written as
        `spell(name)` gives it (`--beam-size` for the command, the form field for the server); a message
        that speaks of it in words ("cannot transcribe language 'de'") is left as it is."""
        message = str(self)
        if self.option and message.startswith(self.option + " "):
            return spell(self.option) + message[len(self.option):]
        return message


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

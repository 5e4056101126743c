"""Errors the package raises on bad input. The CLI turns each into one line and exit code 2."""


class TranscribeError(Exception):
    """Base class: bad input the user can fix (audio, model, options)."""


class AudioError(TranscribeError):
    """Audio that is missing, unreadable, corrupt or empty."""


class ModelError(TranscribeError):
    """A model file or id that is missing, corrupt, truncated or of an unknown kind."""

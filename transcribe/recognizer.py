"""The family contract's recognizer: what every loaded model (`load_model(...)`) is.

A family's recognizer derives from `Recognizer` and sets `family`, `kind` and `Options` (its frozen
options dataclass, `<family>/options.py`), and `StreamOptions` when it has a live session. It implements
`_transcribe(items, options)` (a list of inputs and the checked options -> a list of `Transcript`s) and,
when it streams, `_stream(options)`. The base class holds what is common: one input or a list, the
`sample_rate` of array inputs, grouping decoded inputs so a long list never sits in memory whole,
checking options (an unknown one names the family), refusing `stream()` where a family has none, and
running every call under the model's own thread count (`threads`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Optional

from . import options as _options
from .errors import TranscribeError
from .runtime import scoped


class Recognizer(ABC):
    """A loaded model: `transcribe(audio, **options)` takes a path, bytes, a file object or an array (at
    `sample_rate`, or at the `sample_rate=` option's rate), or a list of them, and gives a `Transcript`
    (a list for a list)."""

    family: str = ""            # the registry's name (loading.FAMILIES): "parakeet", "whisper", ...
    kind: str = ""              # the name in messages: "Parakeet", "Whisper", ...
    Options: Any = None         # the family's options dataclass for transcribe()
    StreamOptions: Any = None   # ... for stream(); None: the family has no live session
    name: str = ""
    sample_rate: int = 16000
    threads: Optional[int] = None  # CPU threads while this model runs (runtime.model_call)
    frame_s: Optional[float] = None  # seconds per frame that tokens' `frame` fields count; None: no frames

    # -- options
    def options(self, **given):
        """The checked options object of `transcribe(**given)`: unknown names raise
        `errors.OptionsNotTaken` naming the family; bad values `errors.OptionValueError`; values the
        loaded model cannot honour (a head it lacks, a language it does not know) raise through
        `check_for_model`."""
        opts = _options.build(self.Options, self.name, self.kind, given)
        self.check_for_model(opts)
        return opts

    def check_for_model(self, opts) -> None:
        """Checks of `opts` that need the loaded model (a family overrides it); raises TranscribeError."""

    def check_options(self, **given) -> None:
        """Raises TranscribeError for options `transcribe` would refuse (it transcribes nothing)."""
        self.options(**given)

    def stream_options(self, **given):
        if self.StreamOptions is None:
            raise TranscribeError(self.cannot_stream())
        return _options.build(self.StreamOptions, self.name, self.kind, given)

    def cannot_stream(self) -> str:
        """Why `stream()` is refused, for a family without a live session (a family may say more)."""
        return f"{self.name} cannot stream (its model family has no streaming session)"

    # -- calls
    @scoped
    def transcribe(self, audio, **given):
        """One input or a list of inputs -> a `Transcript` or a list of them (the family's options:
        `self.Options`)."""
        opts = self.options(**given)
        single = not isinstance(audio, (list, tuple))
        items = [audio] if single else list(audio)
        out = self._transcribe(items, opts) if items else []
        return out[0] if single else out

    def stream(self, **given):
        """A live session (`transcribe.streaming.StreamingSession`, a context manager) with the
        family's stream options (`self.StreamOptions`)."""
        return self._stream(self.stream_options(**given))

    @abstractmethod
    def _transcribe(self, items: list, opts) -> list:
        """A non-empty list of inputs and the checked options -> one `Transcript` per input, in order
        (every family implements it: a recognizer without it cannot be made)."""

    def _stream(self, opts):
        raise TranscribeError(self.cannot_stream())

    # -- what families share
    def groups(self, items: list, sample_rate: Optional[int]):
        """The inputs decoded at the model's rate, in groups of (index, pcm) that bound the audio held
        at once (`audio.load_groups`)."""
        from .audio import load_groups, model_input

        return load_groups(items, lambda a: model_input(a, self.sample_rate, sample_rate), self.sample_rate)

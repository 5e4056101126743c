"""The family contract's recognizer: what every loaded model (`load_model(...)`) is.

A family's recognizer derives from `Recognizer` and sets `family`, `kind` and `Options` (its frozen
options dataclass, `<family>/options.py`), and `StreamOptions` when it has a live session. It implements
`_transcribe(items, options)` (a list of inputs and the checked options -> a list of `Transcript`s) and,
when it streams, `_stream(options)`. The base class holds what is common: one input or a list, the
`sample_rate` of array inputs, grouping decoded inputs so a long list never sits in memory whole,
checking options (an unknown one names the family), refusing `stream()` where a family has none, and
running every call under the model's own thread count (`threads`), and `diarize=True`: any recognizer's
transcript attributed to speakers by a diarizer run beside it (`transcribe.diarization`).
"""
from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Optional

from . import options as _options
from .errors import OptionValueError, TranscribeError
from .runtime import scoped

# Guards every recognizer's table of the diarizers it loaded by name (loaded once, shared by threads).
_DIARIZERS_LOCK = threading.Lock()
# The option that asks a family to time words (a family whose Options lack it times words always, or never).
_WORD_TIMES = "word_timestamps"


@dataclass(frozen=True)
class _Diarize:
    """What a call with diarize=True runs: the diarizer, its speaker limit, the recognizer's checked
    options (array inputs at the model's rate), and the rate of the caller's arrays."""

    diarizer: Any
    num_speakers: Optional[int]
    opts: Any
    sample_rate: Optional[int]


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
    # A diarizer (Sortformer): its transcribe() gives speaker turns and no text; it has `max_speakers` and
    # `diarize()` (transcribe.diarization). It is given to a recognizer as diarizer=, never run with diarize=True.
    diarizer: bool = False

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

    def check_options(self, diarize: bool = False, diarizer=None, num_speakers=None, **given) -> None:
        """Raises TranscribeError for options `transcribe` would refuse (it transcribes nothing); with
        diarize=True the diarizer is loaded (once) and checked too."""
        self._diarize_plan(diarize, diarizer, num_speakers, given)

    def stream_options(self, **given):
        if self.StreamOptions is None:
            raise TranscribeError(self.cannot_stream())
        return _options.build(self.StreamOptions, self.name, self.kind, given)

    def cannot_stream(self) -> str:
        """Why `stream()` is refused, for a family without a live session (a family may say more)."""
        return f"{self.name} cannot stream (its model family has no streaming session)"

    # -- calls
    @scoped
    def transcribe(self, audio, diarize: bool = False, diarizer=None, num_speakers: Optional[int] = None, **given):
        """One input or a list of inputs -> a `Transcript` or a list of them (the family's options:
        `self.Options`).

        diarize=True: a diarizer runs beside the recognizer on the same audio (each input decoded once),
        and every word and segment gets a speaker (`transcribe.diarization.attribute`: segments split
        at every change of speaker; `speakers` holds the turns). The family is asked for word times
        (its `word_timestamps` option, where it has one and can time words); one that cannot gets
        speakers on its segments only. `diarizer`: None (the default diarizer, `hub.DEFAULT_DIARIZER`),
        a model name or path (loaded once on this model's device, with its threads, and kept), or a
        loaded diarizer. `num_speakers`: the most speakers the diarizer keeps (1 to its
        `max_speakers`; None: as many as it finds). A diarizer's own transcribe() takes num_speakers
        without diarize (its option); any other recognizer refuses diarizer= and num_speakers without
        diarize=True."""
        plan = self._diarize_plan(diarize, diarizer, num_speakers, given)
        single = not isinstance(audio, (list, tuple))
        items = [audio] if single else list(audio)
        if not items:
            out = []
        elif isinstance(plan, _Diarize):
            out = self._diarized(items, plan)
        else:
            out = self._transcribe(items, plan)
        return out[0] if single else out

    # -- diarize=True
    def _diarize_plan(self, diarize, diarizer, num_speakers, given: dict):
        """The checked options of a call (`_Diarize` with diarize=True), before any work."""
        if not isinstance(diarize, bool):
            raise OptionValueError("diarize", f"diarize must be True or False, got {diarize!r}")
        if not diarize:
            if diarizer is not None:
                raise TranscribeError("a diarizer (diarizer=, --diarizer) is used with diarize=True (--diarize)")
            if num_speakers is not None:
                if not self.diarizer:
                    raise TranscribeError(f"num_speakers (--num-speakers) needs diarize=True (--diarize): {self.name} "
                                          f"is a {self.kind} recognizer, not a diarizer")
                given = {**given, "num_speakers": num_speakers}
            return self.options(**given)
        if self.diarizer:
            raise TranscribeError(f"{self.name} is a diarizer: give it as diarizer=/--diarizer")
        model = self._load_diarizer(diarizer)
        from .diarization import check_num_speakers

        check_num_speakers(num_speakers, getattr(model, "max_speakers", None))
        given = dict(given)
        sample_rate = given.pop("sample_rate", None)
        if given.get("timestamps", True) is False:
            raise TranscribeError("diarize=True needs timestamps: speakers are given to words and segments by "
                                  "their times (timestamps=False was asked)")
        if _WORD_TIMES in _options.names(self.Options) and _WORD_TIMES not in given:
            try:
                opts = self.options(**given, **{_WORD_TIMES: True})
            except OptionValueError as e:
                if e.option != _WORD_TIMES:
                    raise
                opts = self.options(**given)  # a family that cannot time words: speakers on its segments
        else:
            opts = self.options(**given)
        return _Diarize(model, num_speakers, opts, sample_rate)

    def _load_diarizer(self, diarizer):
        """The diarizer a call names: a loaded one as it is, a name loaded once (on this model's device,
        with its threads) and kept; each checked to be a diarizer."""
        if diarizer is None or isinstance(diarizer, (str, os.PathLike)):
            from .hub import DEFAULT_DIARIZER

            key = os.fspath(DEFAULT_DIARIZER if diarizer is None else diarizer)
            with _DIARIZERS_LOCK:
                kept = self.__dict__.setdefault("_diarizers", {})
                model = kept.get(key)
                if model is None:
                    from .loading import load_model

                    model = load_model(key, device=str(getattr(self, "device", "cpu")), threads=self.threads)
                    _check_diarizer(model)
                    kept[key] = model
            return model
        _check_diarizer(diarizer)
        return diarizer

    def _diarized(self, items: list, plan: _Diarize) -> list:
        """Each input decoded once at the model's rate, transcribed, diarized and attributed."""
        from .diarization import attribute

        out = []
        for group in self.groups(items, plan.sample_rate):
            pcms = [pcm for _, pcm in group]
            transcripts = self._transcribe(pcms, plan.opts)
            found = plan.diarizer.diarize(pcms, sample_rate=self.sample_rate, num_speakers=plan.num_speakers)
            if len(found) != len(pcms):
                raise RuntimeError(f"the diarizer gave {len(found)} answers for {len(pcms)} inputs")
            out.extend(attribute(t, d.turns) for t, d in zip(transcripts, found))
        return out

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


def _check_diarizer(model) -> None:
    if getattr(model, "diarizer", False) is not True:
        raise TranscribeError(f"{getattr(model, 'name', model)} is a {getattr(model, 'kind', '') or 'speech'} "
                              "recognizer, not a diarizer")

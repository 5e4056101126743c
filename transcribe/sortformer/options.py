"""The options of a Sortformer diarizer's `diarize()` and `transcribe()` (`SortformerOptions`): the path
(offline or streaming, NeMo's two update rules), NeMo's post-processing parameters with NeMo's defaults, and
the number of speakers."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import boolean, integer, number, option, parse_bool, parse_positive_int, sample_rate

MODES = ("offline", "streaming")
MAX_PAD_S = 10.0
MAX_DURATION_S = 60.0
# The offline path attends over the whole input at once (time and memory grow with its square): longer inputs
# take the streaming path, which holds a bounded window.
MAX_OFFLINE_S = (1.0, 3600.0)


@dataclass(frozen=True)
class SortformerOptions:
    """mode: "offline" (the whole input at once, NeMo's `forward`) or "streaming" (NeMo's `forward_streaming`:
    chunks with the Arrival-Order Speaker Cache and FIFO, bounded memory for any length); default: the model's
    own (`streaming_mode` of its config). async_update: the streaming path's asynchronous cache update
    (NeMo's `streaming_update_async`, its real-time rule) or the synchronous one (default: the model's
    `async_streaming`, false in the published configs). onset, offset, pad_onset, pad_offset, min_duration_on, min_duration_off: NeMo's post-processing
    (`PostProcessingParams`; defaults 0.5, 0.5, 0, 0, 0, 0). num_speakers: at most this many speakers (1 to
    the model's; the least active are merged into the kept ones: `diarization.limit_speakers`).
    max_offline_s: an offline model's inputs longer than this take the streaming path (default 600 s; the
    offline path's memory grows with the square of the length)."""

    mode: Optional[str] = option(None, help="diarizer: offline (whole input) or streaming (chunks with a speaker "
                                 "cache; default: the model's)", choices=MODES, flag="--diarizer-mode", form=None)
    async_update: Optional[bool] = option(None, help="diarizer: NeMo's asynchronous speaker-cache update (its "
                                          "real-time rule) in streaming mode (default: the model's)",
                                          action=argparse.BooleanOptionalAction, parse=parse_bool, form=None)
    onset: float = option(0.5, help="diarizer: a speaker's turn starts above this probability (NeMo: 0.5)",
                          parse=float, command=False)
    offset: float = option(0.5, help="diarizer: ... and ends below this one (NeMo: 0.5)", parse=float, command=False)
    pad_onset: float = option(0.0, help="diarizer: seconds added before each turn", parse=float, command=False)
    pad_offset: float = option(0.0, help="diarizer: seconds added after each turn", parse=float, command=False)
    min_duration_on: float = option(0.0, help="diarizer: turns shorter than this are dropped (seconds)", parse=float,
                                    command=False)
    min_duration_off: float = option(0.0, help="diarizer: gaps shorter than this are closed (seconds)", parse=float,
                                     command=False)
    num_speakers: Optional[int] = option(None, help="at most N speakers", parse=parse_positive_int, command=False,
                                         form=None)
    max_offline_s: float = option(600.0, help="diarizer: longer inputs take the streaming path", parse=float,
                                  command=False, form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    timestamps: bool = option(True, help="(speaker turns are always timed)", command=False, form=None)

    def __post_init__(self):
        if self.mode is not None and self.mode not in MODES:
            raise OptionValueError("mode", f"mode must be offline or streaming, got {str(self.mode)[:40]!r}")
        if self.async_update is not None:
            boolean("async_update", self.async_update)
        for name in ("onset", "offset"):
            number(name, getattr(self, name), 0.0, 1.0, allow_none=False, why="a probability")
        for name in ("pad_onset", "pad_offset"):
            number(name, getattr(self, name), 0.0, MAX_PAD_S, allow_none=False, why="seconds")
        for name in ("min_duration_on", "min_duration_off"):
            number(name, getattr(self, name), 0.0, MAX_DURATION_S, allow_none=False, why="seconds")
        integer("num_speakers", self.num_speakers, 1, 64)
        number("max_offline_s", self.max_offline_s, *MAX_OFFLINE_S, allow_none=False, why="seconds")
        sample_rate(self.sample_rate)
        boolean("timestamps", self.timestamps)

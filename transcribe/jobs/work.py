"""The work of a batch job, wherever it runs (this process, a worker process, a Ray actor).

A `Worker` holds one loaded model (and, with diarize=True, the diarizer its recognizer loads once and
keeps: `Recognizer.check_options` loads it before any input). It decodes inputs, cuts long ones at pauses
(`transcribe.long_input.cut_spans`) into pieces of at most `piece_s` seconds, transcribes lists of
pieces in batches, and says for each what came out: a `Transcript` as a dict, or the reason it
failed. A failure is the input's alone: a batch the model refuses is retried one input at a time, so
one bad input never fails its neighbours.

`join(...)` puts the transcripts (dicts) of an input's pieces back together through
`transcribe.long_input.join`: texts joined by a space, segments, words and tokens shifted by their
piece's start. Cuts fall on multiples of 80 ms (`GRANULE_S`: Parakeet's and Granite's encoder frame,
four of Whisper's 20 ms timestamp steps), so a token's encoder frame shifts by a whole number too.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .. import long_input
from ..errors import TranscribeError
from ..long_input import GRANULE_S
from ..results import Transcript


@dataclass(frozen=True)
class Options:
    """What every worker needs to build its model and run it (picklable)."""
    model: Optional[str] = None
    device: str = "cpu"
    dtype: Optional[str] = None
    threads: Optional[int] = None
    batch_size: Optional[int] = None
    piece_s: Optional[float] = None   # cut inputs longer than this; None: the family's PIECE_S; 0: never
    detector: str = "auto"
    decoding: dict = field(default_factory=dict)  # the family's transcribe() options
    timestamps: bool = True           # False: text only (the command writing txt)
    batch_lists: bool = True          # a family that runs a list one by one (LIST_ONE_BY_ONE) gets it batched
    contain: bool = True              # any exception is the input's failure; False: only TranscribeError is


# Pieces when neither `piece_s` nor the family's PIECE_S says (and TASK_INPUTS: job.TASK_INPUTS_DEFAULT).
PIECE_S_DEFAULT = 120.0


def piece_seconds(options: Options, family) -> float:
    """`options.piece_s`, else the family's PIECE_S (`family`: a loading.Family, or None when unknown); 0 (no
    cuts) with diarize=True or a diarizer family: speaker labels do not join across pieces."""
    if options.piece_s is not None:
        return float(options.piece_s)
    if diarized(options, family):
        return 0.0
    return float(family.contract("PIECE_S", PIECE_S_DEFAULT)) if family is not None else PIECE_S_DEFAULT


def diarized(options: Options, family) -> bool:
    """Whether the job's transcripts carry speakers: diarize=True, or a diarizer as the model."""
    return options.decoding.get("diarize") is True or bool(family is not None and family.contract("DIARIZER", False))


def family_of_model(name: Optional[str]):
    """The loading.Family of the model `name` names, from its files alone (no PyTorch, no weights
    read), or None when that cannot be told here."""
    from ..hub import resolve
    from ..loading import local_family

    try:
        path, _ = resolve(name)
    except Exception:  # noqa: BLE001 - loading it will say why
        return None
    return local_family(path)


def family_of(model):
    """The loading.Family of a loaded model (its recognizer's registry name), or None."""
    from ..loading import FAMILIES

    return next((f for f in FAMILIES if f.name == getattr(model, "family", None)), None)


class Worker:
    """One loaded model and what a job asks of it."""

    def __init__(self, options: Options):
        from ..loading import load_model

        self.options = options
        self.model = load_model(options.model, device=options.device, dtype=options.dtype,
                                           threads=options.threads)
        self.model.check_options(**options.decoding)  # every recognizer has it (the family contract)
        self.rate = int(self.model.sample_rate)
        self.family = family_of(self.model)
        self.piece_s = piece_seconds(options, self.family)
        if self.piece_s and (diarized(options, self.family) or getattr(self.model, "diarizer", False)):
            raise TranscribeError(f"speaker labels do not join across pieces: a diarized input is never cut "
                                  f"(piece_s {options.piece_s:g} was given; leave it unset or give 0)")
        self.frame_s = getattr(self.model, "frame_s", None)  # what token frames count; None: no frames
        one_by_one = self.family is not None and self.family.contract("LIST_ONE_BY_ONE", False)
        self.batch_lists = options.batch_lists and bool(one_by_one)

    def fails_input(self, e: BaseException) -> bool:
        """Whether `e` is one input's failure (else it ends the run: the command's internal error)."""
        return self.options.contain or isinstance(e, TranscribeError)

    # -- audio
    def decode(self, path: str) -> np.ndarray:
        from ..audio import load_audio

        return load_audio(path, self.rate)

    def cuts(self, pcm: np.ndarray) -> list[tuple[int, int]]:
        """Contiguous sample ranges covering `pcm`: one when it is short enough (or cutting is
        off), else pieces of at most `piece_s` seconds cut at pauses, on the 80 ms grid."""
        return cut_points(pcm, self.rate, self.piece_s, self.options.detector)

    # -- transcription
    def transcribe(self, pcms: list) -> list[tuple[Optional[dict], Optional[str], float]]:
        """For each input (a 1-D float32 array at the model's rate): (transcript dict, None, seconds)
        or (None, reason, seconds). `seconds` is the model's time, shared by audio length."""
        if not pcms:
            return []
        t0 = time.perf_counter()
        try:
            kw = {} if self.options.batch_size is None else {"batch_size": self.options.batch_size}
            if not kw and self.batch_lists:  # a family that runs a list one by one unless told
                kw = {"batch_size": len(pcms)}
            results = list(self.model.transcribe(list(pcms), timestamps=self.options.timestamps, **kw,
                                                 **self.options.decoding))
            if len(results) != len(pcms):
                raise RuntimeError(f"the model gave {len(results)} transcripts for {len(pcms)} inputs")
        except Exception as e:  # noqa: BLE001 - whatever one input does, it must not fail the others
            if not self.fails_input(e):
                raise
            if len(pcms) > 1:
                return [r for pcm in pcms for r in self.transcribe([pcm])]
            return [(None, reason(e), time.perf_counter() - t0)]
        spent = time.perf_counter() - t0
        total = sum(len(p) for p in pcms) or 1
        return [(r.to_dict(), None, spent * len(p) / total) for r, p in zip(results, pcms)]

    def transcribe_whole(self, pcm: np.ndarray, spans=None) -> tuple[Optional[dict], Optional[str], float]:
        """One input of any length: cut if long (at `spans` when given), its pieces run as batches
        and joined."""
        spans = self.cuts(pcm) if spans is None else spans
        if len(spans) == 1:
            return self.transcribe([pcm])[0]
        outs = self.transcribe([pcm[a:b] for a, b in spans])
        seconds = sum(o[2] for o in outs)
        for k, (d, err, _) in enumerate(outs):
            if err is not None:
                return None, piece_error(k, len(spans), spans[k], self.rate, err), seconds
        return join([o[0] for o in outs], [a for a, _ in spans], len(pcm), self.rate, self.frame_s), None, seconds


def reason(e: BaseException) -> str:
    msg = " ".join(str(e).split())
    if isinstance(e, TranscribeError):
        return msg or type(e).__name__
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def piece_error(k: int, n: int, span: tuple[int, int], rate: int, err: str) -> str:
    return f"piece {k + 1}/{n} ({span[0] / rate:.2f}-{span[1] / rate:.2f} s): {err}"


def cut_points(pcm: np.ndarray, rate: int, piece_s: float, detector: str = "auto") -> list[tuple[int, int]]:
    """`long_input.cut_spans` on the 80 ms grid (`GRANULE_S`); piece_s 0: never cut."""
    return long_input.cut_spans(pcm, rate, piece_s, detector, grain=max(1, int(round(GRANULE_S * rate))))


def join(parts: list[dict], starts: list[int], n_samples: int, rate: int, frame_s: Optional[float] = None) -> dict:
    """One transcript (a dict) from its pieces' transcripts (dicts), each placed at its start sample;
    `frame_s`: the encoder frame's length, by which token frames shift (None: frames dropped)."""
    spans = list(zip(starts, list(starts[1:]) + [n_samples]))
    return long_input.join([Transcript.from_dict(d) for d in parts], spans, rate, n_samples, frame_s=frame_s).to_dict()

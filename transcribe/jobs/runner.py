"""`transcribe.batch(...)`: a batch job from Python (the command `transcribe batch` calls it too).

    summary = transcribe.batch(["archive/"], "out", model="parakeet-tdt-0.6b-v2", formats=["json", "srt"],
                               workers=2, resume=True)
    print(summary.ok, summary.failed, summary.results)

Writes `out/<id>.<format>` for every input and a line per input to `out/results.jsonl` (see
`job.py`), and returns a `JobSummary`. A failed input is recorded there with its reason and the job
goes on; `JobError` is raised only for a job that cannot start (bad inputs, a model that does not
load, an output folder in the way). Its keywords besides the model are a `BatchOptions`.

The executor is shared: `run_here` (a job here: this process or worker processes) and `in_order` (the
command `transcribe AUDIO...`: this process, inputs decoded as they come) both run `local.run_task` on a
`work.Worker`, and `outcomes` gives each input once whole.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple, Optional, TextIO

from ..errors import OptionsNotTaken, OptionValueError, TranscribeError
from ..writers import WRITERS, no_room
from .inputs import Item, JobError, collect, probe
from .job import (SCRATCH, Assembler, Outputs, Results, clear_scratch, drop_scratch, drop_stale_temporaries,
                  local_events, task_inputs)
from .local import cores, default_workers, model_bytes, unguarded_main_call
from .progress import Progress
from .work import Options, Worker, family_of_model, piece_seconds, reason


@dataclass
class JobSummary:
    total: int = 0             # inputs of the job
    skipped: int = 0           # already done (resume)
    ok: int = 0
    failed: int = 0
    audio_s: float = 0.0       # seconds of audio transcribed by this run
    wall_s: float = 0.0
    workers: int = 1
    threads: int = 1
    mode: str = "local"        # "local" or "ray"
    results: str = ""          # path of results.jsonl
    errors: list = field(default_factory=list)  # (id, reason) of the failed inputs

    @property
    def speed(self) -> float:
        """Audio seconds per wall second."""
        return self.audio_s / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True)
class BatchOptions:
    """`transcribe.batch`'s keywords besides the inputs, the folder and the model, checked (JobError):

    - manifest: a JSONL manifest of more inputs (`inputs.py`);
    - formats: output formats, of txt, json, srt, vtt (default: json);
    - workers: worker processes here, actors on Ray (default: the measured best here, every CPU's worth
      on Ray); threads: PyTorch threads per worker (default: cores / workers);
    - ray: None runs here; "local" starts a Ray instance on this machine; an address ("auto",
      "ray://head:10001") joins a cluster;
    - resume: go on with the job in the folder; overwrite: replace output files in the way;
    - device, dtype: as `load_model`'s; batch_size: inputs (or pieces) a model call takes (default: the
      model's choice, the family's TASK_INPUTS a task);
    - piece_s: cut inputs longer than this at pauses (None: the family's PIECE_S; 0: never; with diarize,
      or a diarizer as the model, None is 0 and another value an error); detector: the pause detector
      (auto, silero, energy);
    - max_line_width, max_line_count: srt/vtt cue layout;
    - progress: show the progress display on `stream` (default: stderr);
    - decoding: every other keyword: the family's transcribe() options, and Recognizer.transcribe's
      diarize, diarizer (a name or path: each worker loads it once), num_speakers and diarizer_options.
    """
    manifest: Optional[str] = None
    formats: tuple = ("json",)
    workers: Optional[int] = None
    threads: Optional[int] = None
    ray: Optional[str] = None
    resume: bool = False
    overwrite: bool = False
    device: str = "cpu"
    dtype: Optional[str] = None
    batch_size: Optional[int] = None
    piece_s: Optional[float] = None
    detector: str = "auto"
    max_line_width: int = 42
    max_line_count: int = 2
    progress: bool = False
    stream: Optional[TextIO] = None
    decoding: dict = field(default_factory=dict)

    @classmethod
    def of(cls, keywords: dict) -> "BatchOptions":
        """Keywords -> BatchOptions: its fields by name, every other keyword a decoding option."""
        names = {f.name for f in fields(cls)} - {"decoding"}
        given = {k: v for k, v in keywords.items() if k in names}
        if "formats" in given:
            given["formats"] = tuple(given["formats"])
        return cls(**given, decoding={k: v for k, v in keywords.items() if k not in names})

    def __post_init__(self):
        bad = [f for f in self.formats if f not in WRITERS]
        if not self.formats or bad:
            raise JobError(f"unknown format {', '.join(bad) or '(none)'}; choose from {', '.join(WRITERS)}")
        for name in ("workers", "threads"):
            n = getattr(self, name)
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
                raise JobError(f"{name} must be a positive integer, got {n!r}")
        if self.piece_s is not None and self.piece_s != 0 and not (10 <= self.piece_s <= 3600):
            raise JobError(f"piece length must be 0 (no cuts) or 10-3600 s, got {self.piece_s}")
        if (self.decoding.get("nbest") or 1) > 1 and self.piece_s != 0:
            raise JobError("nbest lists of pieces do not join: give piece_s=0 (--piece-s 0) with nbest")
        diarizer = self.decoding.get("diarizer")
        if diarizer is not None and not isinstance(diarizer, (str, os.PathLike)):
            raise JobError("diarizer: give a batch job the diarizer's name or path (each worker loads it once), "
                           f"not a loaded model ({type(diarizer).__name__})")
        if self.decoding.get("diarize") is True:
            # A diarizer numbers speakers in order of appearance within one run: the labels of two pieces
            # would not name the same people. Whole inputs then (the diarizer's streaming path bounds its
            # memory on long ones); an explicit cut length is refused rather than ignored.
            if self.piece_s is None:
                object.__setattr__(self, "piece_s", 0)
            elif self.piece_s != 0:
                raise JobError("a diarized input is not cut into pieces (speaker labels do not join across "
                               "pieces): leave piece_s unset or give 0 (--piece-s 0) with diarize")


def batch(inputs: Iterable[str] = (), output_dir: str = "transcripts", *, model: Optional[str] = None,
          **options) -> JobSummary:
    """Transcribe many inputs into `output_dir` (see the module's text) with `model`; `options`: the
    keywords of `BatchOptions` (its text says each), every other one a decoding option."""
    t0 = time.monotonic()
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    job = BatchOptions.of(options)
    from ..loading import check_options_offline

    try:  # a local model's family refuses what it does not take (a local diarizer too), before any work
        check_options_offline(model, job.decoding)
    except (OptionsNotTaken, OptionValueError):
        raise
    except TranscribeError as e:
        raise JobError(str(e)) from None
    _check_speakers(model, job)

    items = collect(inputs, job.manifest)
    out_dir = Path(output_dir)
    outputs = Outputs(out_dir, list(job.formats), dict(max_line_width=job.max_line_width,
                                                       max_line_count=job.max_line_count))
    _check_out_dir(out_dir)
    lock = _lock(out_dir)
    try:
        if lock is not None:  # a killed job's half-written files (the lock says no job is writing here)
            drop_stale_temporaries(out_dir)
        results = Results(out_dir, job.resume)
    except BaseException:
        _unlock(lock)
        raise
    summary = JobSummary(total=len(items), results=str(results.path), mode="ray" if job.ray else "local")
    try:
        _run_job(items, out_dir, model, job, outputs, results, summary)
    except OSError as e:
        if not no_room(e):
            raise
        raise JobError(f"{e.filename or out_dir}: cannot write: {e.strerror or e}; the job stopped (finished "
                       "inputs are kept: make room and run it again with --resume)") from None
    finally:
        results.close()
        shutil.rmtree(out_dir / SCRATCH, ignore_errors=True)
        _unlock(lock)
    summary.wall_s = time.monotonic() - t0
    return summary


def _run_job(items: list[Item], out_dir: Path, model: Optional[str], job: BatchOptions, outputs: Outputs,
             results: Results, summary: JobSummary) -> None:
    done = {it.id for it in items if results.done.get(it.id, {}).get("audio") == it.audio
            and all(p.is_file() for p in outputs.paths(it))}  # a format asked for now is made for all
    todo = [it for it in items if it.id not in done]
    summary.skipped = len(done)
    results.keep(done)
    if not job.overwrite and not job.resume:
        there = [str(p) for it in todo for p in outputs.paths(it) if p.exists()]
        if there:
            raise JobError(f"{there[0]} exists ({len(there)} output files in the way); "
                           "add --overwrite to replace them")
    probe(todo)
    workers, threads = job.workers, job.threads
    if job.ray is None:
        workers, threads = _local_sizes(todo, job, cores(), model)
        if workers > 1 and unguarded_main_call():
            warnings.warn(f"transcribe.batch() runs the job in this process, not in {workers} worker processes: "
                          "it is called from a script's top-level code outside `if __name__ == \"__main__\":`, "
                          "which worker processes would run again", RuntimeWarning, stacklevel=_caller_level())
            workers, threads = 1, workers * threads
    options = Options(model=model, device=job.device, dtype=job.dtype, threads=threads, batch_size=job.batch_size,
                      piece_s=job.piece_s, detector=job.detector, decoding=dict(job.decoding))
    if not todo:
        return
    shown = Progress(len(todo), total_audio(todo), enabled=job.progress, stream=job.stream)
    try:
        if job.ray:
            from .ray_run import ray_events

            events, summary.workers, summary.threads = ray_events(todo, options, job.ray, workers, threads)
        else:
            summary.workers, summary.threads = workers, threads
            events = run_here(todo, options, workers, out_dir)
        _drive(outcomes(events, todo), outputs, results, summary, shown, out_dir)
    finally:
        shown.close()


def _check_speakers(model: Optional[str], job: BatchOptions) -> None:
    """What a model known from its files (a local path, the default) tells before any work (JobError): rttm
    (speaker turns) without diarize from a model that is not a diarizer; a diarizer as the model with pieces
    asked for (its speaker labels do not join across them). A hub id's are told once it is loaded."""
    if job.decoding.get("diarize") is True or ("rttm" not in job.formats and not job.piece_s):
        return
    from ..loading import known_family
    from ..writers import NOT_DIARIZED

    found = known_family(model)
    if found is None:
        return
    diarizer = found[1].contract("DIARIZER", False)
    if "rttm" in job.formats and not diarizer:
        raise JobError(f"{NOT_DIARIZED}: {found[0]} is not a diarizer")
    if diarizer and job.piece_s:
        raise JobError(f"{found[0]} is a diarizer, whose inputs are not cut into pieces (speaker labels do not "
                       f"join across pieces): leave piece_s unset or give 0 (--piece-s 0)")


def _lock(out_dir: Path) -> Optional[int]:
    """One job at a time in a folder: a second one would rewrite the first one's results.jsonl under
    it. An exclusive lock on the folder, held until the job ends (or its process does). None where
    locks are not to be had (not POSIX, a file system without them)."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        fd = os.open(out_dir, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise JobError(f"{out_dir}: another job is running in this folder; wait for it, or give another "
                       "output folder") from None
    except OSError:
        os.close(fd)
        return None
    return fd


def _unlock(fd: Optional[int]) -> None:
    if fd is not None:
        os.close(fd)


def _caller_level() -> int:
    """warnings.warn's stacklevel that names the first frame outside this package (the user's call)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def _local_sizes(todo: list[Item], job: BatchOptions, n_cores: int, model: Optional[str]):
    """Worker processes and threads each. By default (local.default_workers) never more workers than
    the job has inputs and pieces, so a few files on a large machine get one worker of many threads."""
    workers, threads = job.workers, job.threads
    if workers is None:
        workers = default_workers(n_cores, job.device, model_bytes(model))
        long_s = piece_seconds(Options(piece_s=job.piece_s), family_of_model(model))
        units = sum(1 + int((it.duration or 0.0) // long_s) if long_s else 1 for it in todo)
        workers = max(1, min(workers, units))
    threads = threads or max(1, n_cores // workers)
    if job.device == "cpu" and workers * threads > n_cores:
        raise JobError(f"{workers} workers x {threads} threads is more than this machine's {n_cores} cores")
    return workers, threads


def _check_out_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise JobError(f"{out_dir}: cannot create the output folder: {e.strerror or e}") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise JobError(f"{out_dir}: the output folder is not writable")


def run_here(todo: list[Item], options: Options, workers: int = 1, out_dir: Optional[Path] = None,
             worker: Optional[Worker] = None) -> Iterator[dict]:
    """The events of `todo` run on this machine: in this process (one worker: `worker`, or one loaded
    here) or in `workers` worker processes. `out_dir`: where long inputs wait for their pieces (None
    only with options.piece_s == 0: nothing is cut). `transcribe batch` and `transcribe AUDIO... -o` run
    through here."""
    from . import local

    if workers == 1:
        if worker is None:
            try:
                worker = Worker(options)  # a bad model or option stops the job before any input
            except (OptionsNotTaken, OptionValueError):
                raise  # as check_options_offline raises them: each surface spells the option its own way
            except TranscribeError as e:
                raise JobError(str(e)) from None
        executor, family = local.Inline(worker), worker.family
    else:  # each worker loads the model; one that cannot says so with its first task (JobError)
        executor, family = local.Processes(options, workers), family_of_model(options.model)
    piece_s, group = piece_seconds(options, family), task_inputs(options.batch_size, family)
    scratch = clear_scratch(out_dir) if out_dir is not None else None

    def events():
        try:
            yield from local_events(todo, executor, piece_s, group, scratch)
        finally:
            executor.shutdown()

    return events()


class Outcome(NamedTuple):
    item: Item
    result: Optional[dict]    # the transcript (Transcript.to_dict()), or None
    error: Optional[str]      # why it failed, or None
    duration: Optional[float]  # seconds of audio
    seconds: float            # the model's time


def outcomes(events: Iterable[dict], todo: list[Item]) -> Iterator[Outcome]:
    """Each input of `todo` once whole (its pieces joined), as the events come."""
    by_index = {it.index: it for it in todo}
    assembler = Assembler()
    n = 0
    for ev in events:
        whole = assembler.add(ev)
        if whole is None:
            continue
        index, result, error, duration, seconds = whole
        item = by_index[index]
        n += 1
        yield Outcome(item, result, error, item.duration if duration is None else duration, seconds or 0.0)
    if n != len(todo):
        raise RuntimeError(f"the job ended with {len(todo) - n} inputs unaccounted for")


def in_order(items: list[Item], worker: Worker, group: int, audio_s: float) -> Iterator[Outcome]:
    """`transcribe AUDIO...`'s schedule, on local.Inline(worker): the inputs decoded one at a time in the
    order given, at most `audio_s` seconds of them ahead of the model (audio.load_groups: lengths are
    known once decoded; '-' can be read once), run `group` at a time; their outcomes in that order (an
    input that cannot be read as soon as its group is decoded)."""
    import numpy as np

    from ..audio import load_groups
    from .local import Inline

    executor = Inline(worker)
    unread: dict = {}

    def load(item: Item):
        try:
            return worker.decode(item.path)
        except Exception as e:  # noqa: BLE001 - that input's failure (Worker.fails_input)
            if not worker.fails_input(e):
                raise
            unread[item.index] = reason(e)
            return np.zeros(0, np.float32)

    for decoded in load_groups(items, load, worker.rate, audio_s):
        read = []
        for i, pcm in decoded:
            if items[i].index in unread:
                yield Outcome(items[i], None, unread.pop(items[i].index), None, 0.0)
            else:
                read.append((items[i], pcm))
        for k in range(0, len(read), group):
            chunk = read[k:k + group]
            try:
                events = executor.submit(("arrays", [(it.index, pcm) for it, pcm in chunk])).result()
            except Exception as e:  # noqa: BLE001 - as local_events: the task's inputs fail with the reason
                if not worker.fails_input(e):
                    raise
                events = [{"index": it.index, "error": reason(e)} for it, _ in chunk]
            yield from outcomes(events, [it for it, _ in chunk])


def total_audio(items: list[Item]) -> Optional[float]:
    """Seconds of audio of `items`, None when some length is unknown."""
    return None if any(it.duration is None for it in items) else sum(it.duration for it in items)


def _drive(done: Iterator[Outcome], outputs: Outputs, results: Results, summary: JobSummary,
           shown: Progress, out_dir: Path) -> None:
    for item, result, error, duration, seconds in done:
        written = []
        if error is None:
            try:
                written = outputs.write(item, result)
            except OSError as e:
                if no_room(e):  # every input after it would fail the same way: the job stops (batch)
                    raise
                error = f"cannot write the output: {e.strerror or e}"
            except Exception as e:  # noqa: BLE001 - a writer's failure is this input's
                error = reason(e)
        drop_scratch(out_dir, item.index)
        line = {"id": item.id, "audio": item.audio, **({} if item.manifest is None else {"manifest": item.manifest}),
                "status": "ok" if error is None else "error", "error": error,
                "duration": None if duration is None else round(duration, 3),
                "seconds": round(seconds, 3), "outputs": written}
        results.append(line)
        if error is None:
            summary.ok += 1
            summary.audio_s += duration or 0.0
        else:
            summary.failed += 1
            summary.errors.append((item.id, error))
            if shown.enabled:
                shown.write(f"{item.audio}: {error}")
        shown.update(1, duration or 0.0)

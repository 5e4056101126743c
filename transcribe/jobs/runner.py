"""`transcribe.batch(...)`: a batch job from Python (the command `transcribe batch` calls it too).

    summary = transcribe.batch(["archive/"], "out", model="parakeet-tdt-0.6b-v2", formats=["json", "srt"],
                               workers=2, resume=True)
    print(summary.ok, summary.failed, summary.results)

Writes `out/<id>.<format>` for every input and a line per input to `out/results.jsonl` (see
`job.py`), and returns a `JobSummary`. A failed input is recorded there with its reason and the job
goes on; `JobError` is raised only for a job that cannot start (bad inputs, a model that does not
load, an output folder in the way).
"""
from __future__ import annotations

import os
import shutil
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, TextIO

from ..errors import TranscribeError
from ..writers import WRITERS
from .inputs import Item, JobError, collect, probe
from .job import (SCRATCH, Assembler, Outputs, Results, clear_scratch, drop_scratch, drop_stale_temporaries,
                  local_events, task_inputs)
from .local import cores, default_workers, model_bytes, unguarded_main_call
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


def batch(inputs: Iterable[str] = (), output_dir: str = "transcripts", *, manifest: Optional[str] = None,
          model: Optional[str] = None, formats: Iterable[str] = ("json",), workers: Optional[int] = None,
          threads: Optional[int] = None, ray: Optional[str] = None, resume: bool = False,
          overwrite: bool = False, device: str = "cpu", dtype: Optional[str] = None,
          batch_size: Optional[int] = None, piece_s: Optional[float] = None, detector: str = "auto",
          max_line_width: int = 42, max_line_count: int = 2, progress: bool = False,
          stream: Optional[TextIO] = None, **decoding) -> JobSummary:
    """Transcribe many inputs into `output_dir` (see the module's text). `ray`: None runs here;
    "local" starts a Ray instance on this machine; an address ("auto", "ray://head:10001") joins a
    cluster. `workers`: worker processes here, actors on Ray (default: the measured best here, every
    CPU's worth on Ray). `threads`: PyTorch threads per worker (default: cores / workers)."""
    t0 = time.monotonic()
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    formats = list(formats)
    bad = [f for f in formats if f not in WRITERS]
    if not formats or bad:
        raise JobError(f"unknown format {', '.join(bad) or '(none)'}; choose from {', '.join(WRITERS)}")
    n_cores = cores()
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise JobError(f"workers must be a positive integer, got {workers!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise JobError(f"threads must be a positive integer, got {threads!r}")
    if piece_s is not None and piece_s != 0 and not (10 <= piece_s <= 3600):
        raise JobError(f"piece length must be 0 (no cuts) or 10-3600 s, got {piece_s}")
    if (decoding.get("nbest") or 1) > 1 and piece_s != 0:
        raise JobError("nbest lists of pieces do not join: give piece_s=0 (--piece-s 0) with nbest")
    from ..loading import check_options_offline

    check_options_offline(model, decoding)  # a local model's family refuses what it does not take, before any work

    items = collect(inputs, manifest)
    out_dir = Path(output_dir)
    outputs = Outputs(out_dir, formats, dict(max_line_width=max_line_width, max_line_count=max_line_count))
    _check_out_dir(out_dir)
    lock = _lock(out_dir)
    try:
        if lock is not None:  # a killed job's half-written files (the lock says no job is writing here)
            drop_stale_temporaries(out_dir)
        results = Results(out_dir, resume)
    except BaseException:
        _unlock(lock)
        raise
    summary = JobSummary(total=len(items), results=str(results.path), mode="ray" if ray else "local")
    try:
        done = {it.id for it in items if results.done.get(it.id, {}).get("audio") == it.audio
                and all(p.is_file() for p in outputs.paths(it))}  # a format asked for now is made for all
        todo = [it for it in items if it.id not in done]
        summary.skipped = len(done)
        results.keep(done)
        if not overwrite and not resume:
            there = [str(p) for it in todo for p in outputs.paths(it) if p.exists()]
            if there:
                raise JobError(f"{there[0]} exists ({len(there)} output files in the way); "
                               "add --overwrite to replace them")
        probe(todo)
        if ray is None:
            workers, threads = _local_sizes(todo, workers, threads, n_cores, device, model, piece_s)
            if workers > 1 and unguarded_main_call():
                warnings.warn(f"transcribe.batch() runs the job in this process, not in {workers} worker processes: "
                              "it is called from a script's top-level code outside `if __name__ == \"__main__\":`, "
                              "which worker processes would run again", RuntimeWarning, stacklevel=_caller_level())
                workers, threads = 1, workers * threads
        options = Options(model=model, device=device, dtype=dtype, threads=threads, batch_size=batch_size,
                          piece_s=piece_s, detector=detector, decoding=dict(decoding))
        if not todo:
            summary.wall_s = time.monotonic() - t0
            return summary
        shown = _Progress(todo, enabled=progress, stream=stream)
        try:
            if ray:
                from .ray_run import ray_events

                events, summary.workers, summary.threads = ray_events(todo, options, ray, workers, threads)
            else:
                summary.workers, summary.threads = workers, threads
                events = _local(todo, options, out_dir, workers)
            _drive(events, todo, outputs, results, summary, shown, out_dir)
        finally:
            shown.close()
    finally:
        results.close()
        shutil.rmtree(out_dir / SCRATCH, ignore_errors=True)
        _unlock(lock)
    summary.wall_s = time.monotonic() - t0
    return summary


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


def _local_sizes(todo: list[Item], workers, threads, n_cores: int, device: str, model, piece_s):
    """Worker processes and threads each. By default (local.default_workers) never more workers than
    the job has inputs and pieces, so a few files on a large machine get one worker of many threads."""
    if workers is None:
        workers = default_workers(n_cores, device, model_bytes(model))
        long_s = piece_s if piece_s is not None else piece_seconds(Options(), family_of_model(model))
        units = sum(1 + int((it.duration or 0.0) // long_s) if long_s else 1 for it in todo)
        workers = max(1, min(workers, units))
    threads = threads or max(1, n_cores // workers)
    if device == "cpu" and workers * threads > n_cores:
        raise JobError(f"{workers} workers x {threads} threads is more than this machine's {n_cores} cores")
    return workers, threads


def _check_out_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise JobError(f"{out_dir}: cannot create the output folder: {e.strerror or e}") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise JobError(f"{out_dir}: the output folder is not writable")


def _local(todo: list[Item], options: Options, out_dir: Path, workers: int):
    from . import local

    if workers == 1:
        try:
            worker = Worker(options)  # a bad model or option stops the job before any input
        except TranscribeError as e:
            raise JobError(str(e)) from None
        executor, family = local.Inline(worker), worker.family
    else:  # each worker loads the model; one that cannot says so with its first task (JobError)
        executor, family = local.Processes(options, workers), family_of_model(options.model)
    piece_s, group = piece_seconds(options, family), task_inputs(options.batch_size, family)
    scratch = clear_scratch(out_dir)

    def events():
        try:
            yield from local_events(todo, executor, piece_s, group, scratch)
        finally:
            executor.shutdown()

    return events()


def _drive(events, todo: list[Item], outputs: Outputs, results: Results, summary: JobSummary,
           shown: "_Progress", out_dir: Path) -> None:
    by_index = {it.index: it for it in todo}
    assembler = Assembler()
    for ev in events:
        whole = assembler.add(ev)
        if whole is None:
            continue
        index, result, error, duration, seconds = whole
        item = by_index[index]
        written = []
        if error is None:
            try:
                written = outputs.write(item, result)
            except OSError as e:
                error = f"cannot write the output: {e.strerror or e}"
            except Exception as e:  # noqa: BLE001 - a writer's failure is this input's
                error = reason(e)
        drop_scratch(out_dir, index)
        if duration is None:
            duration = item.duration
        line = {"id": item.id, "audio": item.audio, **({} if item.manifest is None else {"manifest": item.manifest}),
                "status": "ok" if error is None else "error", "error": error,
                "duration": None if duration is None else round(duration, 3),
                "seconds": round(seconds or 0.0, 3), "outputs": written}
        results.append(line)
        if error is None:
            summary.ok += 1
            summary.audio_s += duration or 0.0
        else:
            summary.failed += 1
            summary.errors.append((item.id, error))
            shown.say(f"{item.audio}: {error}")
        shown.update(1, duration or item.duration or 0.0)
    missing = summary.ok + summary.failed - len(todo)
    if missing:
        raise RuntimeError(f"the job ended with {-missing} inputs unaccounted for")


class _Progress:
    """A progress line on a terminal: files, audio hours done, audio seconds per second, ETA."""

    WIDTH = 20

    def __init__(self, todo: list[Item], enabled: bool, stream: Optional[TextIO] = None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.total = len(todo)
        self.total_audio = sum(it.duration or 0.0 for it in todo)
        self.done = 0
        self.audio = 0.0
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        if enabled:
            self._thread = threading.Thread(target=self._tick, name="transcribe-batch-progress", daemon=True)
            self._thread.start()

    def _tick(self):
        while not self._stop.wait(0.5):
            self._draw()

    def line(self) -> str:
        el = time.monotonic() - self.t0
        speed = self.audio / el if el > 0 else 0.0
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(round(frac * self.WIDTH)) + "-" * (self.WIDTH - int(round(frac * self.WIDTH)))
        left = max(0.0, self.total_audio - self.audio)
        eta = _clock(left / speed) if speed > 0 and self.done < self.total else "--:--"
        return (f"[{bar}] {self.done}/{self.total} files  {self.audio / 3600:.2f}/{self.total_audio / 3600:.2f} h "
                f"audio  {speed:.1f}x  ETA {eta}")

    def _draw(self):
        if not self.enabled:
            return
        with self._lock:
            try:
                self.stream.write("\r\033[K" + self.line())
                self.stream.flush()
            except (OSError, ValueError):
                pass

    def update(self, files: int, audio_s: float) -> None:
        self.done += files
        self.audio += audio_s
        self._draw()

    def say(self, msg: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            try:
                self.stream.write("\r\033[K" + msg + "\n")
            except (OSError, ValueError):
                pass
        self._draw()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self.enabled:
            try:
                self.stream.write("\r\033[K")
                self.stream.flush()
            except (OSError, ValueError):
                pass


def _clock(seconds: float) -> str:
    s = int(seconds)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{h}:{m:02d}:{s:02d}"

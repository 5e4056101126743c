"""Running a job's tasks on this machine: in this process (one worker), or in worker processes that
each load the model once (`--workers N`, started with `spawn`, N x threads <= cores).

Worker processes started with `spawn` run the program's main module again (as `__mp_main__`) before
they take work: a script whose call to `transcribe.batch()` is not under `if __name__ == "__main__":`
would start a job of its own in every worker. `unguarded_main_call()` tells that case, and the job
then runs in the calling process instead.

A task is a tuple; what it gives back is a list of events (dicts), each about one input or one piece
of an input (see `job.py`, which makes the tasks and reads the events):

- ``("files", [(index, path), ...])``: decode each file and transcribe them together; a file longer
  than the pieces is cut and its pieces run in the same call. One event per file.
- ``("arrays", [(index, samples), ...])``: the same for inputs decoded already (the command
  `transcribe AUDIO...` decodes as it goes: `runner.in_order`).
- ``("split", index, path, scratch)``: decode a long file and find its cuts; the samples are saved to
  `scratch` (`.npy`) for the piece tasks, so the pieces can run on every worker. One event with
  ``split``: the sample ranges (or, when it needs no cut after all, its result).
- ``("pieces", [(index, k, n, scratch, start, end), ...])``: transcribe pieces of saved inputs
  together. One event per piece.
"""
from __future__ import annotations

import ast
import multiprocessing
import os
import signal
import sys
import threading
import time
import tokenize
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Optional

import numpy as np

from .work import Options, Worker, reason

_worker: Optional[Worker] = None
_worker_error: Optional[str] = None


class WorkerSetupError(RuntimeError):
    """A worker process could not load the model."""


def run_task(worker: Worker, task: tuple) -> list[dict]:
    kind = task[0]
    base = {"rate": worker.rate, "frame_s": worker.frame_s}
    if kind == "files":
        events, cut = [], []
        for index, path in task[1]:
            try:
                pcm = worker.decode(path)
                cut.append((index, pcm, worker.cuts(pcm)))
            except Exception as e:  # noqa: BLE001 - an unreadable file is that file's failure
                if not worker.fails_input(e):
                    raise
                events.append(dict(base, index=index, error=reason(e)))
        return events + _transcribed(worker, base, cut)
    if kind == "arrays":
        return _transcribed(worker, base, [(index, pcm, worker.cuts(pcm)) for index, pcm in task[1]])
    if kind == "split":
        _, index, path, scratch = task
        try:
            pcm = worker.decode(path)
            spans = worker.cuts(pcm)
        except Exception as e:  # noqa: BLE001
            if not worker.fails_input(e):
                raise
            return [dict(base, index=index, error=reason(e))]
        duration = len(pcm) / worker.rate
        if len(spans) == 1:
            result, err, seconds = worker.transcribe([pcm])[0]
            return [dict(base, index=index, result=result, error=err, seconds=seconds, duration=duration)]
        tmp = f"{scratch}.{os.getpid()}.tmp.npy"
        np.save(tmp, pcm)
        os.replace(tmp, scratch)
        return [dict(base, index=index, split=spans, duration=duration, scratch=scratch)]
    if kind == "pieces":
        arrays: dict = {}
        pcms, events = [], []
        for index, k, n, scratch, start, end in task[1]:
            try:
                if scratch not in arrays:
                    arrays[scratch] = np.load(scratch, mmap_mode="r")
                pcms.append(np.array(arrays[scratch][start:end], dtype=np.float32))
                events.append(dict(base, index=index, piece=k, pieces=n, start=start, end=end))
            except Exception as e:  # noqa: BLE001
                if not worker.fails_input(e):
                    raise
                events.append(dict(base, index=index, piece=k, pieces=n, start=start, end=end, error=reason(e)))
        outs = iter(worker.transcribe(pcms))
        for ev in events:
            if ev.get("error") is None:
                result, err, seconds = next(outs)
                ev.update(result=result, error=err, seconds=seconds)
        return events
    raise ValueError(f"unknown task {kind!r}")


def _transcribed(worker: Worker, base: dict, cut: list) -> list[dict]:
    """An event for each (index, pcm, spans): the short ones transcribed together, each long one cut."""
    events = []
    short = [(index, pcm) for index, pcm, spans in cut if len(spans) == 1]
    outs = worker.transcribe([pcm for _, pcm in short])
    for (index, pcm), (result, err, seconds) in zip(short, outs):
        events.append(dict(base, index=index, result=result, error=err, seconds=seconds,
                           duration=len(pcm) / worker.rate))
    for index, pcm, spans in cut:
        if len(spans) > 1:
            result, err, seconds = worker.transcribe_whole(pcm, spans)
            events.append(dict(base, index=index, result=result, error=err, seconds=seconds,
                               duration=len(pcm) / worker.rate))
    return events


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_workers(n_cores: int, device: str, model_bytes: Optional[int] = None) -> int:
    """Worker processes when --workers is not given. On a GPU one (it batches). On a CPU one per
    core, as memory allows: separate processes scale better than PyTorch threads in one process,
    since much of a model call (decoding loops, small matrices) runs on one thread; on 2 cores two
    workers of one thread beat one of two threads for Whisper tiny.en and a tiny Parakeet
    (benchmarks/batch_throughput.py). Each worker holds its own copy of the model, so the count is
    bounded by half the memory available now, at about 1.5x the model's files + 400 MB a worker."""
    if device != "cpu":
        return 1
    n = max(1, n_cores)
    available = _available_memory()
    if model_bytes and available:
        n = min(n, max(1, int(0.5 * available // (1.5 * model_bytes + (400 << 20)))))
    return n


def _available_memory() -> Optional[int]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def model_bytes(name: Optional[str]) -> Optional[int]:
    """Bytes of the model's files (a proxy for its memory), without loading it; None if unknown."""
    from ..hub import resolve

    try:
        path, _ = resolve(name)
        if path.is_file():
            return path.stat().st_size
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    except Exception:  # noqa: BLE001 - unknown: no memory bound
        return None


# ------------------------------------------------------------------------------- worker processes

def _init(options: Options) -> None:
    global _worker, _worker_error
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    parent = os.getppid()
    threading.Thread(target=_orphan_watch, args=(parent,), name="transcribe-orphan-watch", daemon=True).start()
    # Whatever fails here is said to the driver with the first task: an initializer that raised would
    # end the process, and the driver would see a broken pool without the reason.
    try:
        from ..runtime import configure_process

        configure_process(options.threads)  # a process of its own: its threads, its malloc
        _worker = Worker(options)
    except Exception as e:  # noqa: BLE001
        _worker_error = reason(e)


def _orphan_watch(parent: int) -> None:
    """A worker whose driver died (kill -9) would wait for tasks forever: it ends itself."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(1)


def _run(task: tuple) -> list[dict]:
    if _worker is None:
        raise WorkerSetupError(_worker_error or "the worker has no model")
    return run_task(_worker, task)


class Inline:
    """One worker: tasks run in this process, one at a time, when submitted. What is no input's failure
    (`Worker.fails_input`: the command's internal errors) is raised here, not handed on."""

    slots = 1

    def __init__(self, worker: Worker):
        self.worker = worker

    def submit(self, task: tuple) -> Future:
        f: Future = Future()
        try:
            f.set_result(run_task(self.worker, task))
        except BaseException as e:  # noqa: BLE001 - handed to the driver as the future's exception
            if isinstance(e, KeyboardInterrupt) or (isinstance(e, Exception) and not self.worker.fails_input(e)):
                raise
            f.set_exception(e)
        return f

    def restart(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


class Processes:
    """`n` worker processes, each with the model loaded once."""

    def __init__(self, options: Options, n: int):
        self.options, self.n = options, n
        self.slots = 2 * n  # one task queued behind each running one
        self.pool = self._pool()
        self.procs: dict = {}  # pid -> Process, of this pool: their exit statuses say why it broke

    def _pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=self.n, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init, initargs=(self.options,))

    def submit(self, task: tuple) -> Future:
        f = self.pool.submit(_run, task)
        self.procs.update(getattr(self.pool, "_processes", None) or {})  # started as tasks come
        return f

    def cause(self) -> tuple[str, bool]:
        """After the pool broke: what ended a worker process, as its exit status tells, and whether it
        failed at start-up. A worker ends by itself only when it could not start: its tasks' errors,
        whatever they are, come back as errors, and it ends on its own when this process is gone. The
        pool then ends the others with SIGTERM."""
        codes = self._exit_codes()
        exited = [c for c in codes if c is not None and c >= 0]
        if exited:
            why = (f"a worker process exited with status {exited[0]} at start-up, before taking any input "
                   "(its error is on stderr)")
            main = main_reruns()
            if main:
                why += (f"; worker processes run {os.path.basename(main)} again first: its top-level code must run "
                        'there, or be under `if __name__ == "__main__":`')
            return why, True
        signals = [-c for c in codes if c is not None and c < 0]
        sig = next((n for n in signals if n != signal.SIGTERM), signals[0] if signals else None)
        if sig is None:
            return "a worker process died (how, unknown)", False
        name = _signal_name(sig)
        if sig == getattr(signal, "SIGKILL", None):
            return f"a worker process was killed ({name}: out of memory?)", False
        if sig in (signal.SIGSEGV, signal.SIGABRT, getattr(signal, "SIGBUS", None), signal.SIGILL, signal.SIGFPE):
            return f"a worker process crashed ({name})", False
        return f"a worker process was ended by {name}", False

    def _exit_codes(self, wait_s: float = 2.0) -> list:
        """The exit statuses of this pool's processes, once they are known: a process that died has
        closed its end of the pipe the pool watches a moment before its status can be read, and the
        pool ends the others as it breaks (None: one still running after `wait_s`)."""
        procs = list(self.procs.values())
        deadline = time.monotonic() + wait_s
        for p in procs:
            try:
                p.join(max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - reaped meanwhile by the pool's own thread
                pass
        codes = [p.exitcode for p in procs]
        while None in codes and time.monotonic() < deadline:  # the pool's thread may hold the status a moment
            time.sleep(0.01)
            codes = [p.exitcode for p in procs]
        return codes

    def restart(self) -> None:
        """After a worker died (the pool is broken): a fresh pool."""
        self._kill()
        self.pool = self._pool()
        self.procs = {}

    def _kill(self) -> None:
        procs = list({**self.procs, **(getattr(self.pool, "_processes", None) or {})}.values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            try:
                p.kill()
            except Exception:  # noqa: BLE001 - already gone
                pass
        for p in procs:
            try:
                p.join(timeout=5)
            except Exception:  # noqa: BLE001
                pass

    def shutdown(self) -> None:
        self._kill()


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


# ------------------------------------------------------------------ the main module, run again by spawn

def main_reruns() -> Optional[str]:
    """The file of this program's main module when worker processes started with `spawn` run it again
    (a script run by its path, a module by `python -m name`), else None (`python -m pkg` runs
    `pkg.__main__`, which they skip; an interactive session or `python -c` has no file)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path:
        return None
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return None if name == "__main__" or name.endswith(".__main__") else path
    return None if os.path.splitext(os.path.basename(path))[0] == "ipython" else path


def unguarded_main_call() -> bool:
    """Whether this call comes from the main module's top-level code outside `if __name__ ==
    "__main__":` (directly, or through functions it calls), so that worker processes, which run that
    module again, would each call it again. Read from the main thread's stack: the main module's
    outermost frame and the line it is at. When it cannot be told (no such frame, no source), False."""
    path = main_reruns()
    if path is None:
        return False
    main_globals = vars(sys.modules["__main__"])
    frame = sys._current_frames().get(threading.main_thread().ident)
    outer = None
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is main_globals:
            outer = frame
        frame = frame.f_back
    if outer is None:
        return False
    try:
        with tokenize.open(outer.f_code.co_filename) as f:
            source = f.read()
        return not under_main_guard(source, outer.f_lineno)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False


def under_main_guard(source: str, line: int) -> bool:
    """Whether `line` of the module `source` lies in the body of an `if __name__ == "__main__":` (or in
    the `else:` of an `if __name__ != "__main__":`)."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.If):
            continue
        eq = _main_test(node.test)
        block = node.body if eq is True else node.orelse if eq is False else None
        if block and block[0].lineno <= line <= block[-1].end_lineno:
            return True
    return False


def _main_test(test: ast.expr) -> Optional[bool]:
    """True for `__name__ == "__main__"`, False for `!=`, None for any other test."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
        return None
    sides = (test.left, test.comparators[0])
    name = any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides)
    main = any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides)
    return isinstance(test.ops[0], ast.Eq) if name and main else None

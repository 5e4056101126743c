"""The server's models and the one lane that runs them, with dynamic batching.

Every model call (a batch of uploads, a step of a live stream) runs on one inference thread, off
the event loop: PyTorch already spreads one call over the cores, and two calls at once would only
split them. Requests for the same model and the same decoding options that arrive while the lane
is busy, or within `wait_ms` of each other, are gathered and run as one `model.transcribe(list)`
call of at most `max_batch` inputs; each request gets its own transcript back. A request whose
client went away before its batch started is dropped from it.

Audio is decoded on a small pool of its own (decoding runs while the lane transcribes). A request
that asks who spoke carries the server's diarizer in its options (`diarize=True, diarizer=...`): it
batches with the requests that ask the same.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..errors import TranscribeError
from ..runtime import release_memory

log = logging.getLogger("transcribe.server")


# How long a batch waits for requests of its model whose audio is being decoded (at most).
INFLIGHT_WAIT_S = 0.05
# How long the models stay idle before their working memory is handed back to the system.
IDLE_TRIM_S = 1.0


class NoSuchModel(LookupError):
    """A request names no model (`name` None) or one the server does not have."""

    def __init__(self, name: Optional[str], known: list[str]):
        super().__init__(name)
        self.name, self.known = name, known


@dataclass
class Job:
    pcm: Any  # float32 numpy array at the model's rate
    options: dict
    future: asyncio.Future
    key: tuple = ()


def options_key(options: dict) -> tuple:
    """A hashable key of decoding options: requests batch together only when these are equal."""
    def frozen(v):
        if isinstance(v, (list, tuple)):
            return tuple(frozen(x) for x in v)
        if isinstance(v, dict):
            return tuple(sorted((k, frozen(x)) for k, x in v.items()))
        return v

    return tuple(sorted((k, frozen(v)) for k, v in options.items()))


def _short_names(model_id: str) -> set[str]:
    """The other names of a model given as a path: its last part and that part's stem."""
    if not os.path.exists(model_id):  # a hub id or a short name: no other names
        return set()
    last = os.path.basename(os.path.normpath(model_id))
    return {last, os.path.splitext(last)[0]} if last else set()


def public_name(model_id: str) -> str:
    """A model's name for those without the key: a local path's last part, a hub id or short name as it is."""
    if os.path.isabs(model_id) or os.path.exists(model_id) or model_id.startswith(("~", ".")) or "\\" in model_id:
        return os.path.basename(os.path.normpath(model_id.replace("\\", "/"))) or model_id
    return model_id


@dataclass
class Served:
    """One loaded model: the id clients name it by, and its batching queue."""

    id: str
    model: Any
    queue: "asyncio.Queue[Job]" = field(default_factory=asyncio.Queue)
    task: Optional[asyncio.Task] = None
    preparing: int = 0  # requests for this model whose audio is being decoded: soon in the queue

    @property
    def family(self) -> str:
        return getattr(self.model, "family", "")


class Engine:
    """Runs the models: `await engine.transcribe(served, pcm, options)` -> Transcript."""

    def __init__(self, models: dict[str, Any], max_batch: int = 8, wait_ms: float = 5.0,
                 diarizer: Any = None, diarizer_id: Optional[str] = None):
        if not models:
            raise ValueError("the server needs at least one model")
        self.models = {name: Served(name, m) for name, m in models.items()}
        # The diarizer (`--diarizer`, a Sortformer model) run beside the models for requests that ask who
        # spoke: one object shared by them all (a model keeps no per-call state on it), on the same lane.
        self.diarizer = diarizer
        self.diarizer_id = diarizer_id or getattr(diarizer, "name", None)
        self.max_batch = max(1, int(max_batch))
        self.wait_s = max(0.0, float(wait_ms)) / 1000.0
        self._lane = ThreadPoolExecutor(1, thread_name_prefix="transcribe-model")
        self._decode = ThreadPoolExecutor(2, thread_name_prefix="transcribe-audio")
        self._started = False
        self._trim: Optional[asyncio.TimerHandle] = None
        self._running = 0  # batches on the lane now
        self.requests = 0  # transcription requests received
        self.dropped = 0  # requests given up because their client went away
        self.batches = 0  # model calls run for them
        self.largest_batch = 0
        self._stat_lock = threading.Lock()

    def pick(self, name: Optional[str]) -> Served:
        """The model a request names: with one model loaded, whatever it names (clients hard-code
        'whisper-1'); with several, the one of that id. Raises NoSuchModel."""
        if len(self.models) == 1:
            return next(iter(self.models.values()))
        if name in self.models:
            return self.models[name]
        # A model given as a path is also named by its file's name and its stem (model=tiny.nemo or
        # model=tiny for --model models/tiny.nemo), where that names one model only.
        found = [s for s in self.models.values() if name and name in _short_names(s.id)]
        if len(found) != 1:
            raise NoSuchModel(name, list(self.models))
        return found[0]

    def stats(self) -> dict:
        return {"requests": self.requests, "dropped": self.dropped, "batches": self.batches,
                "largest_batch": self.largest_batch, "max_batch": self.max_batch}

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        """Starts one gathering task per model (on the running event loop)."""
        if self._started:
            return
        for served in self.models.values():
            served.queue = asyncio.Queue()
            served.task = asyncio.get_running_loop().create_task(self._gather(served))
        self._started = True

    async def stop(self) -> None:
        if self._trim is not None:
            self._trim.cancel()
            self._trim = None
        for served in self.models.values():
            if served.task is not None:
                served.task.cancel()
                try:
                    await served.task
                except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                    pass
                served.task = None
        self._started = False
        self._lane.shutdown(wait=False, cancel_futures=True)
        self._decode.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ work
    async def decode_audio(self, source, sample_rate: int):
        """Decodes an upload (a file object or bytes) off the event loop."""
        from ..audio import load_audio

        return await asyncio.get_running_loop().run_in_executor(
            self._decode, lambda: load_audio(source, sample_rate=sample_rate))

    async def check_options(self, model, options: dict) -> None:
        """Raises TranscribeError for options the model refuses (off the event loop: a model
        call sets per-call runtime modes, which must not wait on the lane's thread team)."""
        await asyncio.get_running_loop().run_in_executor(self._decode, lambda: model.check_options(**options))

    async def run(self, fn: Callable[[], Any]):
        """Runs `fn` on the inference lane (a step of a live stream)."""
        return await asyncio.get_running_loop().run_in_executor(self._lane, fn)

    def submit(self, served: Served, pcm, options: dict, prepared: bool = False) -> asyncio.Future:
        """Queues one input; the future gets its transcript, run in a batch with the requests
        gathered with it. Cancelling the future drops the request if its batch has not started.
        prepared: the request was counted in `served.preparing` (it leaves the count as it joins
        the queue, with no pause in between)."""
        job = Job(pcm, dict(options), asyncio.get_running_loop().create_future(), options_key(options))
        served.queue.put_nowait(job)
        if prepared:
            served.preparing -= 1
        return job.future

    async def transcribe(self, served: Served, pcm, options: dict, prepared: bool = False):
        """`submit`, awaited."""
        return await self.submit(served, pcm, options, prepared)

    async def _gather(self, served: Served) -> None:
        loop = asyncio.get_running_loop()
        held: list[Job] = []  # jobs taken from the queue with other options than the batch run
        while True:
            first = held.pop(0) if held else await served.queue.get()
            batch = [first]
            start = loop.time()
            deadline = start + self.wait_s
            while len(batch) < self.max_batch:
                same = [j for j in held if j.key == first.key]
                for j in same[: self.max_batch - len(batch)]:
                    held.remove(j)
                    batch.append(j)
                if len(batch) >= self.max_batch:
                    break
                try:
                    if served.queue.empty():
                        # Requests still decoding their audio are worth waiting for, a little:
                        # without that, clients whose answers just went out miss every other
                        # batch, and batches settle at half their size.
                        end = max(deadline, start + INFLIGHT_WAIT_S) if served.preparing > 0 else deadline
                        left = end - loop.time()
                        if left <= 0:
                            break
                        job = await asyncio.wait_for(served.queue.get(), left)
                    else:
                        job = served.queue.get_nowait()
                except (asyncio.TimeoutError, asyncio.QueueEmpty):
                    break
                (batch if job.key == first.key else held).append(job)
            batch = [j for j in batch if not j.future.done()]  # clients that went away
            if not batch:
                continue
            self._running += 1
            try:
                results = await loop.run_in_executor(self._lane, self._run_batch, served.model, batch)
            except Exception as e:  # noqa: BLE001 - handed to every request of the batch
                for j in batch:
                    if not j.future.done():
                        j.future.set_exception(e)
                continue
            finally:
                self._running -= 1
            for j, r in zip(batch, results):
                if j.future.done():
                    continue
                if isinstance(r, BaseException):
                    j.future.set_exception(r)
                else:
                    j.future.set_result(r)
            del results, batch, first
            if not held:
                self._trim_when_idle()

    def _trim_when_idle(self) -> None:
        """Once no request has come for IDLE_TRIM_S, the batches' working memory goes back to
        the system; while requests keep coming it is kept for the next batch, which needs it
        again (handing it back and faulting it in anew costs a CPU call about 15%)."""
        loop = asyncio.get_running_loop()
        if self._trim is not None:
            self._trim.cancel()

        def fire() -> None:
            self._trim = None
            if self._running == 0 and all(s.queue.empty() and s.preparing == 0 for s in self.models.values()):
                loop.run_in_executor(self._lane, release_memory)

        self._trim = loop.call_later(IDLE_TRIM_S, fire)

    def _run_batch(self, model, batch: list[Job]) -> list:
        """On the lane: one model call for the batch; on a refused input, each alone (so the
        others still get their transcript and the bad one its error)."""
        with self._stat_lock:
            self.batches += 1
            self.largest_batch = max(self.largest_batch, len(batch))
        options = batch[0].options
        pcms = [j.pcm for j in batch]
        if len(batch) == 1:
            try:
                return [model.transcribe(pcms[0], batch_size=1, **options)]
            except TranscribeError as e:
                return [e]
        try:
            results = list(model.transcribe(pcms, batch_size=len(batch), **options))
            if len(results) != len(batch):
                raise RuntimeError(f"model returned {len(results)} transcripts for {len(batch)} inputs")
            return results
        except TranscribeError:
            out = []
            for pcm in pcms:
                try:
                    out.append(model.transcribe(pcm, batch_size=1, **options))
                except TranscribeError as e:
                    out.append(e)
            return out

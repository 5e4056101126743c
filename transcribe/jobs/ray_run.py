"""A batch job on Ray Data (`--ray`; `pip install "transcribe[ray]"`).

The inputs left to do, longest first, become a dataset of `{index, path, probed}` rows:

1. `flat_map(_prepare)`: Ray tasks decode each file longer than the pieces (by its header) and cut
   it at pauses, a row per piece with its samples (`pcm`), so that its pieces spread over the
   actors; a shorter file passes as its path alone; one that cannot be read becomes a row with
   `error`.
2. `map_batches(_Transcriber)`: an actor pool; every actor loads the model once (with `num_cpus`
   = its threads, `num_gpus=1` on a GPU), decodes the files that came as paths, and transcribes
   batches of files and pieces.
3. The rows stream back to this process (`iter_rows`), which joins pieces, writes the files and
   `results.jsonl` exactly as a local job does (`runner._drive`): the same resume and failure rules.

`--ray` alone starts a Ray instance on this machine (all its cores); `--ray ADDRESS` joins a
running cluster (`auto`, `host:6379`, `ray://head:10001`). On a cluster every node needs this
package (and the model, or access to the Hugging Face hub), and every node must read the inputs at
the paths given (a shared file system); outputs are written by this process only.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from typing import Optional

import numpy as np

from .inputs import Item, JobError
from .job import task_inputs
from .work import Options, Worker, cut_points, family_of_model, piece_seconds, reason

MODEL_RATE = 16000  # every family's rate; each actor checks its model's


def _prepare(row: dict, piece_s: float, detector: str) -> list[dict]:
    """A file its header says is short: one row that the actor decodes itself (as a local worker
    does: no samples through the object store, no decoding beside the model). Else: decoded and cut
    here, a row per piece with its samples, so the pieces spread over the actors."""
    index, path, probed = int(row["index"]), str(row["path"]), float(row["probed"])
    empty = np.zeros(0, np.float32)
    if not piece_s or 0 <= probed <= piece_s:
        return [{"index": index, "piece": 0, "pieces": 1, "start": 0, "end": 0, "duration": -1.0,
                 "path": path, "pcm": empty, "error": ""}]
    from ..audio import load_audio

    try:
        pcm = load_audio(path, MODEL_RATE)
        spans = cut_points(pcm, MODEL_RATE, piece_s, detector)
    except Exception as e:  # noqa: BLE001 - the file's failure, recorded
        return [{"index": index, "piece": 0, "pieces": 1, "start": 0, "end": 0, "duration": -1.0,
                 "path": "", "pcm": empty, "error": reason(e)}]
    n = len(spans)
    return [{"index": index, "piece": k, "pieces": n, "start": a, "end": b, "duration": len(pcm) / MODEL_RATE,
             "path": "", "pcm": np.ascontiguousarray(pcm[a:b]), "error": ""} for k, (a, b) in enumerate(spans)]


class _Transcriber:
    def __init__(self, options: Options):
        from ..runtime import configure_process

        configure_process(options.threads)  # an actor is a process of its own
        self.worker = Worker(options)
        if self.worker.rate != MODEL_RATE:
            raise JobError(f"the model's rate is {self.worker.rate} Hz; Ray jobs read audio at {MODEL_RATE} Hz")

    def __call__(self, batch: dict) -> dict:
        w = self.worker
        n = len(batch["index"])
        errors = [str(e) for e in batch["error"]]
        result, seconds = [""] * n, [0.0] * n
        end, duration = [int(x) for x in batch["end"]], [float(x) for x in batch["duration"]]
        pcms: dict = {}
        for i in range(n):
            if errors[i]:
                continue
            path = str(batch["path"][i])
            if not path:
                pcms[i] = np.asarray(batch["pcm"][i], dtype=np.float32)
                continue
            try:
                pcm = w.decode(path)
                spans = w.cuts(pcm)
            except Exception as e:  # noqa: BLE001 - the file's failure, recorded
                errors[i] = reason(e)
                continue
            end[i], duration[i] = len(pcm), len(pcm) / w.rate
            if len(spans) == 1:
                pcms[i] = pcm
            else:  # longer than its header said: cut and joined here
                d, err, seconds[i] = w.transcribe_whole(pcm, spans)
                result[i], errors[i] = (json.dumps(d) if d is not None else ""), err or ""
        todo = sorted(pcms)
        for i, (d, err, sec) in zip(todo, w.transcribe([pcms[i] for i in todo])):
            result[i], errors[i], seconds[i] = (json.dumps(d) if d is not None else ""), err or "", sec
        return {"index": batch["index"], "piece": batch["piece"], "pieces": batch["pieces"],
                "start": batch["start"], "end": np.array(end, dtype=np.int64),
                "duration": np.array(duration, dtype=np.float64),
                "result": np.array(result, dtype=object), "error": np.array(errors, dtype=object),
                "seconds": np.array(seconds, dtype=np.float64),
                "frame_s": np.full(n, w.frame_s or 0.0, dtype=np.float64)}


def ray_events(todo: list[Item], options: Options, address: str, workers: Optional[int], threads: Optional[int]):
    """(events, actors, threads): the job's events as rows come back from Ray."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise JobError('--ray needs Ray Data: pip install "transcribe[ray]"') from None
    started = False
    if not ray.is_initialized():
        kw = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        try:
            if address == "local":
                from .local import cores

                _init_quietly(ray, num_cpus=cores(), **kw)
            else:
                _init_quietly(ray, address=address, **kw)
        except Exception as e:  # noqa: BLE001 - no cluster there, a bad address
            raise JobError(f"cannot start or join Ray at {address!r}: {reason(e)}") from None
        started = True
    # Ray Data's progress bars and notes would mix with ours: off while the job runs, then restored.
    ctx = ray.data.DataContext.get_current()
    quiet = [(logging.getLogger(n), logging.getLogger(n).level) for n in ("ray", "ray.data")]
    for logger, _ in quiet:
        logger.setLevel(logging.ERROR)
    bars = ctx.enable_progress_bars
    ctx.enable_progress_bars = False
    try:
        res = ray.cluster_resources()
        cpus, gpus = int(res.get("CPU", 1)), int(res.get("GPU", 0))
        # By default never more actors than inputs (Ray Data warns on stderr of actors without work).
        if options.device != "cpu":
            if gpus < 1:
                raise JobError(f"--device {options.device}: the Ray cluster has no GPU")
            threads = threads or 1
            actors = workers or max(1, min(gpus, len(todo)))
            per_actor = {"num_gpus": 1, "num_cpus": threads}
        else:
            threads = threads or (max(1, cpus // workers) if workers else 1)
            actors = workers or max(1, min(cpus // threads, len(todo)))  # one thread an actor, as local workers
            per_actor = {"num_cpus": threads}
        largest = max((n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")), default=0)
        if per_actor["num_cpus"] > largest:  # such an actor would wait for a node forever
            raise JobError(f"an actor of {per_actor['num_cpus']} threads needs a node with as many CPUs; "
                           f"the largest has {largest:g}")
        opts = Options(**{**options.__dict__, "threads": threads, "device": options.device})
        family = family_of_model(options.model)
        piece_s = piece_seconds(options, family)
        order = sorted(todo, key=lambda it: (it.duration is None, -(it.duration or 0.0), it.index))
        ds = ray.data.from_items([{"index": it.index, "path": it.path, "probed": -1.0 if it.duration is None
                                  else it.duration} for it in order],
                                 override_num_blocks=len(order))  # a block an input: batches form freely
        tasks = min(len(order), max(2, actors))  # more tasks than inputs: Ray Data warns on stderr
        ds = ds.flat_map(_prepare, fn_kwargs={"piece_s": piece_s, "detector": options.detector},
                         num_cpus=0, compute=ray.data.TaskPoolStrategy(size=tasks))
        # One batch in flight per actor: a batch queued behind a busy actor would wait while another idles.
        pool = ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1)

        class Transcriber(_Transcriber):  # the options travel in the class, not as constructor arguments
            def __init__(self):
                super().__init__(opts)

        ds = ds.map_batches(Transcriber, batch_size=task_inputs(options.batch_size, family),
                            batch_format="numpy", compute=pool, **per_actor)
    except BaseException:
        _end(ray, started, ctx, bars, quiet)
        raise

    def events():
        try:
            for row in ds.iter_rows():
                ev = {"index": int(row["index"]), "piece": int(row["piece"]), "pieces": int(row["pieces"]),
                      "start": int(row["start"]), "end": int(row["end"]), "rate": MODEL_RATE,
                      "duration": None if float(row["duration"]) < 0 else float(row["duration"]),
                      "seconds": float(row["seconds"]), "error": str(row["error"]) or None,
                      "frame_s": float(row["frame_s"]) or None}
                ev["result"] = json.loads(row["result"]) if row["result"] else None
                yield ev
        except JobError:
            raise
        except Exception as e:  # noqa: BLE001 - an actor that cannot start, a lost cluster
            raise JobError(f"the Ray job failed: {reason(e)}") from None
        finally:
            _end(ray, started, ctx, bars, quiet)

    return events(), actors, threads


BACKEND_LOG_LEVEL = "RAY_BACKEND_LOG_LEVEL"
_LEVEL_NOTE = b"Set ray log level from environment variable " + BACKEND_LOG_LEVEL.encode()


def _init_quietly(ray, **kw) -> None:
    """`ray.init(**kw)` without Ray's own log lines on stderr. Ray's core in this process writes its
    errors there (one for every actor Ray Data starts: its arguments are in the object store and it may
    restart) unless RAY_BACKEND_LOG_LEVEL raises the bar, and it says that it read that variable, on
    stderr too, as it starts. So, unless the variable is set already (then it is the user's, and so is
    what Ray says): it is set to `fatal` while Ray starts (the Ray processes started here keep it), and
    what reached stderr meanwhile is written back without that one line."""
    if BACKEND_LOG_LEVEL in os.environ:
        ray.init(**kw)
        return
    os.environ[BACKEND_LOG_LEVEL] = "fatal"
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no stderr to take lines from
        saved = None
    try:
        if saved is None:
            ray.init(**kw)
            return
        with tempfile.TemporaryFile() as caught:
            os.dup2(caught.fileno(), 2)
            try:
                ray.init(**kw)
            finally:
                try:
                    sys.stderr.flush()
                except (OSError, ValueError):
                    pass
                os.dup2(saved, 2)
                os.close(saved)
                caught.seek(0)
                said = b"".join(line for line in caught.read().splitlines(keepends=True) if _LEVEL_NOTE not in line)
                if said:
                    os.write(2, said)
    finally:
        os.environ.pop(BACKEND_LOG_LEVEL, None)


def _end(ray, started: bool, ctx, bars, quiet) -> None:
    if started:
        ray.shutdown()
    ctx.enable_progress_bars = bars
    for logger, level in quiet:
        logger.setLevel(level)

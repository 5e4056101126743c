"""The driver of a batch job: what is left to do, in what order, and writing what comes back.

Inputs are ordered longest first by the duration their headers give (so batches hold inputs of
similar length and the longest work starts first), and grouped into tasks of a few inputs. An input
longer than the pieces is first decoded and cut at pauses by one worker; its pieces then run as
tasks of their own on every worker, ahead of other work, and are joined here when all are back.

Each finished input is written at once: its output files atomically (a temporary file in the same
folder, then a rename), then its line in `results.jsonl` (appended, flushed and synced). A job
killed at any moment leaves complete output files and complete lines; a line cut short by the kill
is dropped by `--resume`, which skips every input with an `ok` line whose files are all there, and
rewrites `results.jsonl` without the failed inputs' lines, since they run again.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections import deque
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Iterator, Optional

from ..results import Transcript
from ..writers import render, write_atomically
from .inputs import Item, JobError
from .local import WorkerSetupError
from .work import join, piece_error, reason

RESULTS = "results.jsonl"
SCRATCH = ".transcribe-work"
_TEMPORARY = re.compile(r"^\..+\.\d+\.tmp$")  # what Outputs.write and Results write first
# A task holds at most this many inputs (or pieces) and this much audio, unless --batch-size says: a
# model call takes them together. A family may say another count (its TASK_INPUTS).
TASK_INPUTS_DEFAULT = 8
TASK_AUDIO_S = 20 * 60.0


def task_inputs(batch_size: Optional[int], family) -> int:
    """Inputs a task: `batch_size`, else the family's TASK_INPUTS (`family`: a loading.Family, or None)."""
    if batch_size:
        return batch_size
    return int(family.contract("TASK_INPUTS", TASK_INPUTS_DEFAULT)) if family is not None else TASK_INPUTS_DEFAULT


# ------------------------------------------------------------------------------------ the results

class Results:
    """`DIR/results.jsonl`: one line per input, appended as each finishes."""

    def __init__(self, out_dir: Path, resume: bool):
        self.path = out_dir / RESULTS
        self.done: dict[str, dict] = {}
        if self.path.exists():
            if not resume:
                raise JobError(f"{self.path} exists: a job ran here; add --resume to go on with it, "
                               "or give another --output-dir")
            self._load(out_dir)
        self.f = None  # opened at the first line: a job that never starts leaves no results.jsonl

    def _load(self, out_dir: Path) -> None:
        try:
            raw = self.path.read_bytes()
        except OSError as e:
            raise JobError(f"{self.path}: cannot read: {e.strerror or e}") from None
        for line in raw.split(b"\n"):
            try:
                d = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                continue  # empty, or cut short by a kill
            if not isinstance(d, dict) or d.get("status") != "ok" or not isinstance(d.get("id"), str):
                continue  # failed inputs run again
            if not all((out_dir / o).is_file() for o in d.get("outputs") or []):
                continue  # its files are gone: again
            self.done[d["id"]] = d

    def keep(self, ids: set) -> None:
        """Rewrite the file with the lines of `ids` only (the inputs skipped by a resumed job), so that
        every input ends with one line; atomically."""
        if not self.path.exists():
            return
        lines = [json.dumps(d, ensure_ascii=False) + "\n" for i, d in self.done.items() if i in ids]
        write_atomically(self.path, "".join(lines))

    def append(self, line: dict) -> None:
        if self.f is None:
            self.f = open(self.path, "a", encoding="utf-8", newline="\n")
        self.f.write(json.dumps(line, ensure_ascii=False) + "\n")
        self.f.flush()
        try:
            os.fsync(self.f.fileno())
        except OSError:
            pass

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


class Outputs:
    """Writes an input's output files: `DIR/<id>.<format>`, each atomically; `replace`: False keeps a
    file of that name that appeared meanwhile (FileExistsError)."""

    def __init__(self, out_dir: Path, formats: list[str], cue_options: dict, replace: bool = True):
        self.out_dir, self.formats, self.cue_options, self.replace = out_dir, formats, cue_options, replace

    def paths(self, item: Item) -> list[Path]:
        return [self.out_dir / f"{item.id}.{fmt}" for fmt in self.formats]

    def render(self, fmt: str, result: dict, file_id: str = "audio") -> str:
        """`result` (a transcript's dict) as `fmt`; `file_id` names the recording in rttm."""
        return render(Transcript.from_dict(result), fmt, file_id=file_id, **self.cue_options)

    def write(self, item: Item, result: dict) -> list[str]:
        written = []
        for fmt, path in zip(self.formats, self.paths(item)):
            text = self.render(fmt, result, item.id)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, text, os.replace if self.replace else _place)  # nothing left on failure
            written.append(path.relative_to(self.out_dir).as_posix())
        return written


def _place(tmp: Path, path: Path) -> None:
    """`tmp` renamed `path`, unless a file of that name exists (FileExistsError; `tmp` removed)."""
    try:
        os.link(tmp, path)  # fails on an existing name, atomically
    except FileExistsError:
        os.unlink(tmp)
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path)) from None
    except OSError:  # a file system without hard links
        if path.exists():
            os.unlink(tmp)
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path)) from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


# ------------------------------------------------------------------------------- pieces to inputs

class Assembler:
    """Collects events; gives (index, result, error, duration, seconds) once an input is whole."""

    def __init__(self):
        self.parts: dict[int, dict] = {}
        self.finished: set[int] = set()  # inputs given out: a piece still out when one failed is dropped

    def add(self, ev: dict) -> Optional[tuple]:
        whole = self._add(ev) if ev["index"] not in self.finished else None
        if whole is not None:
            self.finished.add(whole[0])
            self.parts.pop(whole[0], None)
        return whole

    def _add(self, ev: dict) -> Optional[tuple]:
        n = ev.get("pieces", 1)
        if n == 1:
            return ev["index"], ev.get("result"), ev.get("error"), ev.get("duration"), ev.get("seconds", 0.0)
        st = self.parts.setdefault(ev["index"], {"got": {}, "n": n})
        st["got"][ev["piece"]] = ev
        if len(st["got"]) < n:
            return None
        del self.parts[ev["index"]]
        evs = [st["got"][k] for k in range(n)]
        seconds = sum(e.get("seconds") or 0.0 for e in evs)
        duration = ev.get("duration")
        for k, e in enumerate(evs):
            if e.get("error") is not None:
                err = piece_error(k, n, (e["start"], e["end"]), e["rate"], e["error"])
                return ev["index"], None, err, duration, seconds
        rate = ev["rate"]
        result = join([e["result"] for e in evs], [e["start"] for e in evs], evs[-1]["end"], rate, ev.get("frame_s"))
        return ev["index"], result, None, evs[-1]["end"] / rate, seconds


# --------------------------------------------------------------------------------- local schedule

def plan(items: list[Item], piece_s: float, group: int) -> tuple[list[Item], list[list[Item]]]:
    """Long inputs (to split first) and groups of the others, longest first; unknown lengths last."""
    order = sorted(items, key=lambda it: (it.duration is None, -(it.duration or 0.0), it.index))
    long = [it for it in order if piece_s and it.duration is not None and it.duration > piece_s]
    groups, cur, held = [], [], 0.0
    for it in order:
        if it in long:
            continue
        d = it.duration or 0.0
        if cur and (len(cur) >= group or held + d > TASK_AUDIO_S):
            groups.append(cur)
            cur, held = [], 0.0
        cur.append(it)
        held += d
    if cur:
        groups.append(cur)
    return long, groups


def local_events(items: list[Item], executor, piece_s: float, group: int, scratch: Optional[Path]) -> Iterator[dict]:
    """Runs the job's tasks on `executor` (local.Inline or local.Processes) and yields their events.
    A worker that dies (killed, out of memory) is replaced and its tasks run again, one input a task;
    a task that kills a worker twice fails its inputs with the cause (the dead worker's exit status).
    Workers that fail at start-up are no input's fault: the tasks run again, but when a fresh pool
    fails at start-up too, before any task came back, every input left fails with that cause. `scratch`:
    where long inputs' samples wait for their pieces (None only when `piece_s` is 0: nothing is cut)."""
    long, groups = plan(items, piece_s, group)
    todo: deque = deque(("split", it.index, it.path, str(scratch / f"{it.index}.npy")) for it in long)
    todo.extend(("files", [(it.index, it.path) for it in g]) for g in groups)
    tries: dict = {}
    flight: dict = {}
    failed_starts = 0  # pools in a row whose workers failed at start-up

    def fill():
        while todo and len(flight) < executor.slots:
            task = todo.popleft()
            flight[executor.submit(task)] = task

    fill()
    while flight:
        done, _ = wait(list(flight), return_when=FIRST_COMPLETED)
        broken = []
        for fut in done:
            task = flight.pop(fut)
            try:
                events = fut.result()
                failed_starts = 0
            except BrokenProcessPool:
                broken.append(task)
                continue
            except WorkerSetupError as e:
                raise JobError(f"a worker could not load the model: {e}") from None
            except Exception as e:  # noqa: BLE001 - the task's inputs fail with the reason; the job goes on
                for single in _singles(task):
                    yield from _died(single, reason(e))
                continue
            for ev in events:
                if "split" in ev:
                    spans, n = ev["split"], len(ev["split"])
                    pieces = [(ev["index"], k, n, ev["scratch"], a, b) for k, (a, b) in enumerate(spans)]
                    chunks = [pieces[j:j + group] for j in range(0, n, group)]
                    todo.extendleft(("pieces", c) for c in reversed(chunks))
                    continue
                yield ev
        if broken:
            broken += [flight.pop(f) for f in list(flight)]
            why, at_start = executor.cause()
            executor.restart()
            singles = [single for task in broken for single in _singles(task)]
            failed_starts = failed_starts + 1 if at_start else 0
            if failed_starts >= 2:  # no worker can start: the inputs left fail, each with the cause
                singles += [single for task in todo for single in _singles(task)]
                todo.clear()
                for single in singles:
                    yield from _died(single, why)
            elif at_start:  # no input's fault: run again, tries not counted
                todo.extendleft(reversed(singles))
            else:
                for single in reversed(singles):
                    key = repr(single)
                    tries[key] = tries.get(key, 0) + 1
                    if tries[key] >= 2:
                        yield from _died(single, f"{why}, twice on this input")
                    else:
                        todo.appendleft(single)
        fill()


def _singles(task: tuple) -> list[tuple]:
    if task[0] == "files":
        return [("files", [f]) for f in task[1]]
    if task[0] == "pieces":
        return [("pieces", [p]) for p in task[1]]
    return [task]


def _died(task: tuple, why: str) -> Iterator[dict]:
    if task[0] == "files":
        yield {"index": task[1][0][0], "error": why}
    elif task[0] == "split":
        yield {"index": task[1], "error": why}
    else:
        index, k, n, _, a, b = task[1][0]
        yield {"index": index, "error": f"piece {k + 1}/{n}: {why}"}


def drop_stale_temporaries(out_dir: Path) -> int:
    """Removes the temporary files (`.<name>.<pid>.tmp`) a job killed while writing left in `out_dir`;
    called with the folder's lock held, so no job is writing any. Returns how many."""
    stale = [p for p in out_dir.rglob(".*.tmp") if p.is_file() and _TEMPORARY.match(p.name)]
    for p in stale:
        try:
            p.unlink()
        except OSError:
            pass
    return len(stale)


def clear_scratch(out_dir: Path) -> Path:
    scratch = out_dir / SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True, exist_ok=True)
    return scratch


def drop_scratch(out_dir: Path, index: int) -> None:
    try:
        (out_dir / SCRATCH / f"{index}.npy").unlink()
    except OSError:
        pass

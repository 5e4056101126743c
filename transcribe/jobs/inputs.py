"""What a batch job works through: inputs from paths, directories, globs or a JSONL manifest.

Every input becomes an `Item` with a stable `id`, which names its output files (`DIR/<id>.<format>`,
`/` in an id makes subdirectories) and its line in `results.jsonl`, so that `--resume` finds it again:

- a file given by name: its stem (`talk.mp3` -> `talk`);
- a file found in a directory (recursively, by audio extension, in sorted order): its path below
  that directory without the extension (`archive/2024/a.wav` given as `archive` -> `2024/a`);
- a glob (`*`, `?`, `[`, `**` recursive): each match as if given by name;
- a manifest line (`{"audio": path, "id": ...}`): its `id`, else as a file given by name; a
  relative `audio` is relative to the manifest's folder; the line's other fields are carried to the
  input's line in `results.jsonl` under `manifest` (a reference `text` never sits beside the
  transcript's fields).

An input whose derived id an earlier input has gets the first of `-2`, `-3`, ... that is no input's
own id and not yet given (a/x.wav, b/x.wav, x-2.wav -> x, x-3, x-2), so no two inputs share an output
file; `transcribe AUDIO... -o DIR` names its files by this rule too (`files`). Two manifest lines with
the same `id` are an error. An argument that names nothing (no such file, a glob without matches, a directory without
audio) and a malformed manifest are `JobError`s, raised before any work. A file that turns out to be
unreadable is not: it is recorded as failed when its turn comes.
"""
from __future__ import annotations

import glob
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable, Optional

from ..errors import TranscribeError

AUDIO_EXTENSIONS = frozenset({
    ".wav", ".wave", ".flac", ".mp3", ".m4a", ".mp4", ".aac", ".ogg", ".oga", ".opus", ".webm", ".mkv",
    ".mka", ".mov", ".wma", ".aif", ".aiff", ".aifc", ".caf", ".amr", ".3gp", ".ac3", ".au", ".snd", ".w64",
})


class JobError(TranscribeError):
    """A batch job that cannot start: bad inputs, a bad manifest, an output folder in the way."""


@dataclass
class Item:
    index: int                       # position among the job's inputs
    id: str                          # stable name: output files and results.jsonl
    audio: str                       # as given (the manifest's value, or the path as found)
    path: str                        # what is opened
    manifest: Optional[dict] = None  # a manifest line's other fields; None for an input not from a manifest
    duration: Optional[float] = None  # seconds, from the container's header; None when unknown


def collect(inputs: Iterable[str] = (), manifest: Optional[str] = None) -> list[Item]:
    """The job's inputs, in the order given (directories and globs sorted)."""
    found: list[tuple[str, str, str, Optional[dict], bool]] = []  # (audio, path, id, manifest fields, id given)
    for arg in inputs:
        arg = os.fspath(arg)
        p = Path(arg)
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in AUDIO_EXTENSIONS)
            if not files:
                raise JobError(f"{arg}: no audio files in this directory ({', '.join(sorted(AUDIO_EXTENSIONS)[:6])}, ...)")
            for f in files:
                rel = f.relative_to(p).with_suffix("")
                found.append((str(f), str(f), rel.as_posix(), None, False))
        elif p.is_file() or _is_stream(arg):
            found.append((arg, arg, p.stem or "audio", None, False))
        elif glob.has_magic(arg):
            matches = sorted(glob.glob(arg, recursive=True))
            files = []
            for m in matches:
                if Path(m).is_dir():
                    files += sorted(str(f) for f in Path(m).rglob("*")
                                    if f.is_file() and f.suffix.lower() in AUDIO_EXTENSIONS)
                elif Path(m).is_file():
                    files.append(m)
            if not files:
                raise JobError(f"{arg}: no file matches")
            found += [(f, f, Path(f).stem or "audio", None, False) for f in files]
        else:
            raise JobError(f"{arg}: {_why_not(arg)}")
    if manifest is not None:
        found += _read_manifest(manifest)
    if not found:
        raise JobError("no inputs: give audio files, directories, globs or --manifest FILE.jsonl")
    return _with_ids(found)


def _is_stream(path: str) -> bool:
    """A named pipe (or `<(...)`'s /dev/fd/N): read as a stream when its turn comes."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def _why_not(path: str) -> str:
    """Why an argument names no input: no such file or directory, a symbolic-link loop, a device..."""
    from ..audio_source import source_problem

    problem = source_problem(path)[0]
    return "no such file or directory" if problem in (None, "no such file") else problem


def _read_manifest(path: str) -> list[tuple[str, str, str, Optional[dict], bool]]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise JobError(f"{path}: no such manifest") from None
    except (OSError, UnicodeDecodeError) as e:
        raise JobError(f"{path}: cannot read the manifest: {e}") from None
    base = Path(path).parent
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise JobError(f"{path}:{n}: not a JSON object ({e.msg})") from None
        if not isinstance(d, dict):
            raise JobError(f"{path}:{n}: not a JSON object")
        audio = d.get("audio")
        if not isinstance(audio, str) or not audio:
            raise JobError(f'{path}:{n}: needs "audio": a path (a string)')
        carried = {k: v for k, v in d.items() if k not in ("audio", "id")}  # results.jsonl's "manifest"
        resolved = audio if os.path.isabs(audio) else str(base / audio)
        if "id" in d:
            ident = d["id"]
            if isinstance(ident, bool) or not isinstance(ident, (str, int)) or str(ident) == "":
                raise JobError(f'{path}:{n}: "id" must be a non-empty string or an integer')
            problem = _unsafe_id(str(ident))
            if problem:
                raise JobError(f'{path}:{n}: id {ident!r} {problem}')
            out.append((audio, resolved, str(ident), carried, True))
        else:
            out.append((audio, resolved, Path(audio).stem or "audio", carried, False))
    if not out:
        raise JobError(f"{path}: the manifest has no lines")
    return out


def _unsafe_id(ident: str) -> Optional[str]:
    """Why `ident` cannot name output files below the output folder, or None."""
    if "\\" in ident or "\0" in ident or ident.startswith("/"):
        return "cannot name a file (no absolute paths, backslashes or NUL)"
    parts = PurePosixPath(ident).parts
    if any(p in ("", ".", "..") for p in ident.split("/")) or not parts:
        return "cannot name a file below the output folder (empty, '.' or '..' parts)"
    if ident.endswith(".tmp") or PurePosixPath(ident).name.startswith("."):
        return "cannot name a file (hidden or temporary names are the job's own)"
    return None


def _with_ids(found) -> list[Item]:
    given = [ident for _, _, ident, _, is_given in found if is_given]
    dup = sorted({i for i in given if given.count(i) > 1})
    if dup:
        raise JobError(f"the manifest gives the same id to several lines: {', '.join(dup[:5])}")
    used = set(given)
    own = {ident for _, _, ident, _, _ in found}  # a number never takes another input's own id
    items = []
    for index, (audio, path, ident, carried, is_given) in enumerate(found):
        if not is_given:
            base, k = ident, 1
            while ident in used or (k > 1 and ident in own):
                k += 1
                ident = f"{base}-{k}"
            if _unsafe_id(ident):
                ident = f"input-{index + 1}"
        used.add(ident)
        items.append(Item(index, ident, audio, path, carried))
    return items


def files(names: list[str]) -> list[Item]:
    """`transcribe AUDIO...`'s inputs, each named by its stem ('stdin' for '-', standard input), as
    they are: no directory search, no glob, no check (an input that cannot be read fails when its turn
    comes)."""
    return _with_ids([(name, name, "stdin" if name == "-" else (Path(name).stem or "audio"), None, False)
                      for name in names])


def probe(items: list[Item]) -> None:
    """Fill each item's `duration` from its container's header (no decoding); None where the
    header does not say or the file cannot be opened (it fails later, when decoded)."""
    for item in items:
        item.duration = None if item.path == "-" else probe_duration(item.path)  # '-': read once, when decoded


def probe_duration(path: str) -> Optional[float]:
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # a named pipe (read once, when decoded; opening it here could wait for ever), a device
    except OSError:
        return None  # not there: decoding says why
    try:
        import soundfile

        info = soundfile.info(path)
        if info.frames > 0 and info.samplerate > 0:
            return info.frames / info.samplerate
    except Exception:  # noqa: BLE001 - not a libsndfile format: try FFmpeg
        pass
    try:
        import av

        with av.open(path) as c:
            streams = [s for s in c.streams if s.type == "audio"]
            if not streams:
                return None
            s = streams[0]
            if s.duration is not None and s.time_base is not None:
                return float(s.duration * s.time_base)
            if c.duration is not None:
                return c.duration / 1_000_000
    except Exception:  # noqa: BLE001 - unreadable here: decoding will say why
        return None
    return None

"""Turn a Transcript into text documents: txt, json, srt, vtt.

Each entry of `WRITERS` maps a format name to a function ``Transcript -> str`` that returns the
whole document, ending in a newline (srt and vtt also take the keyword options max_line_width,
max_line_count and max_duration). `write_transcript` writes one to a file (UTF-8).

Subtitles (srt, vtt) are cut into cues by `transcribe.text.cues.build_cues`, as subtitle tools cut
them: from word times when the transcript has words, else from its segments' text, else from its
text over the whole audio; each cue has at most `max_line_count` balanced lines of at most
`max_line_width` characters and, from word times, lasts at most about `max_duration` seconds,
ending at sentence punctuation, a clause mark or a pause where it can. Times stay within the
audio, cues are in order and do not overlap, no text is dropped and no cue is empty. VTT text has
& < > escaped. txt is the transcript's text; json its `to_dict()`.
"""
from __future__ import annotations

import errno
import json
import math
import os
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Callable, Optional

from .results import Transcript
from .text.cues import Cue, build_cues

__all__ = ["WRITERS", "SUBTITLE_OPTIONS", "write_transcript", "write_atomically", "no_room", "to_txt", "to_json", "to_srt", "to_vtt",
           "format_timestamp"]


def format_timestamp(seconds: float, decimal_marker: str = ",") -> str:
    """``HH:MM:SS,mmm`` (or ``.mmm``), rounded half up to the millisecond; hours may exceed 99.

    Rounding works on the number as written (1.9995 -> 00:00:02,000), carrying into seconds,
    minutes and hours. Negative or non-finite times become 0.
    """
    seconds = float(seconds)
    if not math.isfinite(seconds) or seconds < 0:
        seconds = 0.0
    ms = int((Decimal(repr(seconds)) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal_marker}{ms:03d}"


def to_txt(transcript: Transcript) -> str:
    return transcript.text.strip() + "\n"


def to_json(transcript: Transcript) -> str:
    return json.dumps(transcript.to_dict(), ensure_ascii=False) + "\n"


# The keyword options of the subtitle writers (and of write_transcript for srt and vtt).
SUBTITLE_OPTIONS = ("max_line_width", "max_line_count", "max_duration")


def _cues(transcript: Transcript, max_line_width: int, max_line_count: int,
          max_duration: Optional[float]) -> list[Cue]:
    return build_cues(transcript, max_line_width=max_line_width, max_line_count=max_line_count,
                      max_duration=max_duration)


def to_srt(transcript: Transcript, *, max_line_width: int = 42, max_line_count: int = 2,
           max_duration: Optional[float] = 7.0) -> str:
    """SubRip: numbered cues, ``HH:MM:SS,mmm`` times; "" when there is no text."""
    blocks = []
    for i, cue in enumerate(_cues(transcript, max_line_width, max_line_count, max_duration), 1):
        blocks.append(f"{i}\n{format_timestamp(cue.start, ',')} --> {format_timestamp(cue.end, ',')}\n{cue.text}\n")
    return "\n".join(blocks)


_VTT_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def to_vtt(transcript: Transcript, *, max_line_width: int = 42, max_line_count: int = 2,
           max_duration: Optional[float] = 7.0) -> str:
    """WebVTT: a ``WEBVTT`` header, then cues with ``HH:MM:SS.mmm`` times and & < > escaped."""
    blocks = ["WEBVTT\n"]
    for cue in _cues(transcript, max_line_width, max_line_count, max_duration):
        text = re.sub(r"[&<>]", lambda m: _VTT_ESCAPES[m.group()], cue.text)
        blocks.append(f"{format_timestamp(cue.start, '.')} --> {format_timestamp(cue.end, '.')}\n{text}\n")
    return "\n".join(blocks)


WRITERS: dict[str, Callable[..., str]] = {
    "txt": to_txt,
    "json": to_json,
    "srt": to_srt,
    "vtt": to_vtt,
}


def write_transcript(transcript: Transcript, fmt: str, path, **options) -> None:
    """Write `transcript` as `fmt` (a key of WRITERS) to the file `path`.

    `options` (max_line_width, max_line_count, max_duration) go to the srt and vtt writers; txt
    and json take none and ignore them. An unknown option is a TypeError whatever the format.
    """
    unknown = sorted(set(options) - set(SUBTITLE_OPTIONS))
    if unknown:
        raise TypeError(f"unknown option {', '.join(unknown)}; write_transcript takes {', '.join(SUBTITLE_OPTIONS)}")
    try:
        writer = WRITERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(WRITERS)}") from None
    text = writer(transcript, **options) if fmt in ("srt", "vtt") else writer(transcript)
    write_atomically(path, text)


# What a write that found no room raises: a full disk, a quota, a file-size limit (RLIMIT_FSIZE).
_NO_ROOM = {errno.ENOSPC, errno.EFBIG} | ({errno.EDQUOT} if hasattr(errno, "EDQUOT") else set())


def no_room(e: BaseException) -> bool:
    """Whether `e` is a write that failed for want of room (a full disk or quota, a file-size limit)."""
    return isinstance(e, OSError) and e.errno in _NO_ROOM


def write_atomically(path, text: str, place: Callable[[Path, Path], None] = os.replace) -> None:
    """`text` (UTF-8) written to `path` whole or not at all: first to `.<name>.<pid>.tmp` in the same
    folder (the name a killed job's clean-up looks for: jobs/job.py drop_stale_temporaries), synced,
    then `place(tmp, path)` (a rename); on any failure (a full disk) the temporary is removed and the
    error raised, and no file of `path`'s name is left behind."""
    path = Path(os.fspath(path))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        place(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:  # already renamed or removed (place's refusal removes it)
            pass
        if isinstance(e, OSError) and e.errno is not None and e.filename != str(path):
            raise type(e)(e.errno, e.strerror or str(e), str(path)) from e  # named by the file asked for
        raise

"""Turn a Transcript into text documents: txt, json, srt, vtt.

Each entry of `WRITERS` maps a format name to a function ``Transcript -> str`` that returns the
whole document, ending in a newline. `write_transcript` writes one to a file (UTF-8).

Subtitles are made from the transcript's segments, one cue per segment, none skipped; a transcript
without segments becomes one cue spanning the whole audio (and none if it has no text either).
"""
from __future__ import annotations

import json
import math
import os
import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Callable

from .results import Transcript

__all__ = ["WRITERS", "write_transcript", "to_txt", "to_json", "to_srt", "to_vtt", "format_timestamp"]


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


def _cues(transcript: Transcript) -> list[tuple[float, float, str]]:
    if transcript.segments:
        cues = [(s.start, s.end, s.text) for s in transcript.segments]
    elif transcript.text.strip():
        cues = [(0.0, transcript.duration, transcript.text)]
    else:
        cues = []
    out = []
    for start, end, text in cues:
        start = float(start) if math.isfinite(float(start)) else 0.0
        end = float(end) if math.isfinite(float(end)) else start
        # A blank line ends a cue in both formats: keep the cue's lines together.
        lines = [line.strip() for line in text.strip().splitlines()]
        out.append((max(0.0, start), max(start, end), "\n".join(line for line in lines if line)))
    return out


def to_srt(transcript: Transcript) -> str:
    blocks = []
    for i, (start, end, text) in enumerate(_cues(transcript), 1):
        blocks.append(f"{i}\n{format_timestamp(start, ',')} --> {format_timestamp(end, ',')}\n{text}\n")
    return "\n".join(blocks)


_VTT_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def to_vtt(transcript: Transcript) -> str:
    blocks = ["WEBVTT\n"]
    for start, end, text in _cues(transcript):
        text = re.sub(r"[&<>]", lambda m: _VTT_ESCAPES[m.group()], text)
        blocks.append(f"{format_timestamp(start, '.')} --> {format_timestamp(end, '.')}\n{text}\n")
    return "\n".join(blocks)


WRITERS: dict[str, Callable[[Transcript], str]] = {
    "txt": to_txt,
    "json": to_json,
    "srt": to_srt,
    "vtt": to_vtt,
}


def write_transcript(transcript: Transcript, fmt: str, path) -> None:
    """Write `transcript` as `fmt` (a key of WRITERS) to the file `path`."""
    try:
        writer = WRITERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(WRITERS)}") from None
    with open(os.fspath(path), "w", encoding="utf-8", newline="\n") as f:
        f.write(writer(transcript))

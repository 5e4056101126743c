"""Turn a Transcript into text documents: txt, json, srt, vtt, rttm.

Each entry of `WRITERS` maps a format name to a function ``Transcript -> str`` that returns the
whole document, ending in a newline (srt and vtt also take the keyword options max_line_width,
max_line_count and max_duration; rttm takes file_id). `render` calls one with the options it takes;
`write_transcript` writes one to a file (UTF-8).

Subtitles (srt, vtt) are cut into cues by `transcribe.text.cues.build_cues`, as subtitle tools cut
them: from word times when the transcript has words, else from its segments' text, else from its
text over the whole audio; each cue has at most `max_line_count` balanced lines of at most
`max_line_width` characters and, from word times, lasts at most about `max_duration` seconds,
ending at sentence punctuation, a clause mark or a pause where it can. Times stay within the
audio, cues are in order and do not overlap, no text is dropped and no cue is empty. VTT text has
& < > escaped. txt is the transcript's text; json its `to_dict()`.

Speakers (a diarized transcript: `transcript.speakers` is a list, and words and segments carry a
`speaker`). Cues are made for each run of consecutive segments (or words) of one speaker, so a cue
never holds two speakers; a cue with a speaker starts with a WebVTT voice tag (``<v speaker_0>``) in
vtt and with ``[speaker_0] `` in srt (its lines made shorter by the prefix's length, so the line
width holds with it). txt is one line per such run, ``speaker_0: text``; a diarizer's own transcript
(speakers but no text) is one line per turn, ``speaker_0 0.00 3.20`` (speaker, start, end in
seconds). rttm is NIST's Rich Transcription Time Marked format, one line per speaker turn:
``SPEAKER <file-id> 1 <start> <duration> <NA> <NA> <speaker> <NA> <NA>`` (seconds, 3 decimals); a
transcript that is not diarized (speakers None) cannot be written as rttm (TranscribeError).
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

from .errors import TranscribeError
from .results import Transcript
from .text.cues import Cue, build_cues

__all__ = ["WRITERS", "SUBTITLE_OPTIONS", "render", "write_transcript", "write_atomically", "no_room", "to_txt",
           "to_json", "to_srt", "to_vtt", "to_rttm", "format_timestamp", "NOT_DIARIZED"]


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
    """The text; with speakers, one line per speaker's run (``speaker_0: text``), or for a transcript with
    speakers and no text (a diarizer's), one line per turn (``speaker_0 0.00 3.20``)."""
    if transcript.speakers and not transcript.text.strip():
        return "".join(f"{t.speaker} {t.start:.2f} {t.end:.2f}\n" for t in transcript.speakers)
    runs = _speaker_runs(transcript)
    if runs is None:
        return transcript.text.strip() + "\n"
    lines = []
    for speaker, part in runs:
        text = " ".join(x for x in (_clean_text(u) for u in (part.segments or part.words)) if x)
        if text:
            lines.append(f"{speaker}: {text}" if speaker is not None else text)
    return "\n".join(lines) + "\n"


def _clean_text(unit) -> str:
    return " ".join((unit.text if hasattr(unit, "text") else unit.word).split())


def _speaker_runs(transcript: Transcript) -> "Optional[list[tuple[Optional[str], Transcript]]]":
    """A diarized transcript as runs of one speaker each, in order: (speaker, a transcript holding that
    run's segments, or its words when it has no segments); None when no segment or word has a speaker."""
    units = transcript.segments or transcript.words
    if not any(u.speaker is not None for u in units):
        return None
    runs: list[tuple[Optional[str], list]] = []
    for u in units:
        if runs and runs[-1][0] == u.speaker:
            runs[-1][1].append(u)
        else:
            runs.append((u.speaker, [u]))
    by_segments = bool(transcript.segments)
    return [(speaker, Transcript(text="", duration=transcript.duration, language=transcript.language,
                                 segments=part if by_segments else [], words=[] if by_segments else part))
            for speaker, part in runs]


def to_json(transcript: Transcript) -> str:
    return json.dumps(transcript.to_dict(), ensure_ascii=False) + "\n"


# The keyword options of the subtitle writers (and of write_transcript for srt and vtt).
SUBTITLE_OPTIONS = ("max_line_width", "max_line_count", "max_duration")


def _cues(transcript: Transcript, max_line_width: int, max_line_count: int,
          max_duration: Optional[float], prefix: Optional[Callable[[str], str]] = None) -> list[tuple[Optional[str], Cue]]:
    """(speaker, cue) in order; a speaker's cues are made from that speaker's run alone. `prefix(speaker)`:
    the text put before a cue's first line (srt), whose length the lines give up."""
    runs = _speaker_runs(transcript)
    if runs is None:
        return [(None, c) for c in build_cues(transcript, max_line_width=max_line_width,
                                               max_line_count=max_line_count, max_duration=max_duration)]
    out: list[tuple[Optional[str], Cue]] = []
    prev_end = 0.0
    for speaker, part in runs:
        width = max_line_width
        if prefix is not None and speaker is not None:
            width = max(max_line_width - len(prefix(speaker)), min(max_line_width, 10))
        for c in build_cues(part, max_line_width=width, max_line_count=max_line_count, max_duration=max_duration):
            start = max(c.start, prev_end)  # the runs' cues in order, as build_cues keeps its own
            end = max(c.end, start)
            out.append((speaker, Cue(start, end, c.lines)))
            prev_end = end
    return out


def _srt_prefix(speaker: str) -> str:
    return f"[{speaker}] "


def to_srt(transcript: Transcript, *, max_line_width: int = 42, max_line_count: int = 2,
           max_duration: Optional[float] = 7.0) -> str:
    """SubRip: numbered cues, ``HH:MM:SS,mmm`` times, ``[speaker_0] `` before a speaker's cue; "" when
    there is no text."""
    blocks = []
    cues = _cues(transcript, max_line_width, max_line_count, max_duration, _srt_prefix)
    for i, (speaker, cue) in enumerate(cues, 1):
        text = (_srt_prefix(speaker) if speaker is not None else "") + cue.text
        blocks.append(f"{i}\n{format_timestamp(cue.start, ',')} --> {format_timestamp(cue.end, ',')}\n{text}\n")
    return "\n".join(blocks)


_VTT_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def to_vtt(transcript: Transcript, *, max_line_width: int = 42, max_line_count: int = 2,
           max_duration: Optional[float] = 7.0) -> str:
    """WebVTT: a ``WEBVTT`` header, then cues with ``HH:MM:SS.mmm`` times and & < > escaped; a speaker's
    cue starts with its voice tag ``<v speaker_0>``."""
    blocks = ["WEBVTT\n"]
    for speaker, cue in _cues(transcript, max_line_width, max_line_count, max_duration):
        text = _vtt_escape(cue.text)
        if speaker is not None:
            text = f"<v {_vtt_escape(speaker)}>{text}"
        blocks.append(f"{format_timestamp(cue.start, '.')} --> {format_timestamp(cue.end, '.')}\n{text}\n")
    return "\n".join(blocks)


def _vtt_escape(text: str) -> str:
    return re.sub(r"[&<>]", lambda m: _VTT_ESCAPES[m.group()], text)


NOT_DIARIZED = "rttm needs a diarized transcript (--diarize, or a diarizer model)"


def to_rttm(transcript: Transcript, *, file_id: str = "audio") -> str:
    """RTTM: one ``SPEAKER`` line per speaker turn, in order ("" when there are none); `file_id` names
    the recording (whitespace in it becomes _). A transcript without speakers (not diarized) raises
    TranscribeError."""
    if transcript.speakers is None:
        raise TranscribeError(NOT_DIARIZED)
    fid = "_".join(str(file_id).split()) or "audio"
    return "".join(f"SPEAKER {fid} 1 {t.start:.3f} {max(t.end - t.start, 0.0):.3f} <NA> <NA> "
                   f"{'_'.join(t.speaker.split())} <NA> <NA>\n" for t in transcript.speakers)


WRITERS: dict[str, Callable[..., str]] = {
    "txt": to_txt,
    "json": to_json,
    "srt": to_srt,
    "vtt": to_vtt,
    "rttm": to_rttm,
}


def render(transcript: Transcript, fmt: str, *, file_id: str = "audio", **subtitle_options) -> str:
    """`transcript` as `fmt` (a key of WRITERS), each writer given the options it takes: srt and vtt
    `subtitle_options` (SUBTITLE_OPTIONS), rttm `file_id`; the others none."""
    try:
        writer = WRITERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(WRITERS)}") from None
    if fmt in ("srt", "vtt"):
        return writer(transcript, **subtitle_options)
    if fmt == "rttm":
        return writer(transcript, file_id=file_id)
    return writer(transcript)


def write_transcript(transcript: Transcript, fmt: str, path, **options) -> None:
    """Write `transcript` as `fmt` (a key of WRITERS) to the file `path`.

    `options` (max_line_width, max_line_count, max_duration) go to the srt and vtt writers, `file_id`
    to rttm (default: the file's stem); the other formats take none and ignore them. An unknown
    option is a TypeError whatever the format.
    """
    unknown = sorted(set(options) - set(SUBTITLE_OPTIONS) - {"file_id"})
    if unknown:
        raise TypeError(f"unknown option {', '.join(unknown)}; write_transcript takes "
                        f"{', '.join(SUBTITLE_OPTIONS + ('file_id',))}")
    options.setdefault("file_id", Path(os.fspath(path)).stem or "audio")
    write_atomically(path, render(transcript, fmt, **options))


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

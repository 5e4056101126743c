"""What a file's header promises: the seconds of audio its WAV, AIFF, AU, FLAC, MP3 (Xing/Info),
Matroska/WebM or MP4 header declares, so that audio.py can refuse a truncated file (less decodes than that)."""
from __future__ import annotations

import os
from typing import NamedTuple, Optional


class Promise(NamedTuple):
    """The audio a file's header declares: `seconds`, less than `slack` of it may be missing (rounding,
    an encoder's padding); `what` names the header in a message, `short` what a file is whose audio
    falls short of it (an MP4's sample table can be damaged as well as its data cut)."""
    seconds: float
    slack: float
    what: str
    short: str = "truncated"


# Data sizes a writer that cannot seek back leaves in a header (0, 0xFFFFFFFF; arecord's and sox's
# 0x7FFFF000-ish): no promise.
_UNKNOWN_SIZE = 0x7FFF0000
# WAV formats whose byte rate is exact: PCM, IEEE float, A-law, mu-law, extensible.
_WAV_EXACT = (1, 3, 6, 7, 0xFFFE)
# Bytes per sample of the AU encodings.
_AU_BYTES = {1: 1, 2: 1, 3: 2, 4: 3, 5: 4, 6: 4, 7: 8, 27: 1}


def header_promise(f, start: int, head: bytes) -> Optional[Promise]:
    """How long the header of a WAV, AIFF, AU or FLAC file says its audio is, when it says so (libsndfile
    reads a cut file of these as far as it goes, silently); None for any other file. Leaves `f` at `start`."""
    try:
        if head[:4] in (b"RIFF", b"RIFX", b"RF64", b"BW64") and head[8:12] == b"WAVE":
            return _wav_promise(f, start, "big" if head[:4] == b"RIFX" else "little")
        if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
            return _aiff_promise(f, start)
        if head[:4] == b".snd" and len(head) >= 24:
            size, enc, rate, channels = (int.from_bytes(head[i:i + 4], "big") for i in (8, 12, 16, 20))
            if 0 < size < _UNKNOWN_SIZE and enc in _AU_BYTES and rate > 0 and channels > 0:
                frame = _AU_BYTES[enc] * channels
                return Promise(size // frame / rate, 0.5 / rate, "its AU header")
        if head[:4] == b"fLaC" and len(head) >= 26 and head[4] & 0x7F == 0:  # STREAMINFO
            rate = (head[18] << 12) | (head[19] << 4) | (head[20] >> 4)
            total = ((head[21] & 0x0F) << 32) | int.from_bytes(head[22:26], "big")
            if rate > 0 and total > 0:
                return Promise(total / rate, 0.5 / rate, "its FLAC header")
        return None
    except (OSError, ValueError):
        return None
    finally:
        f.seek(start)


def _file_end(f) -> int:
    f.seek(0, os.SEEK_END)
    return f.tell()


def _wav_promise(f, start: int, order: str) -> Optional[Promise]:
    """The data chunk's size against the bytes the file holds after its start."""
    end = _file_end(f)
    pos, fmt, ds64_size = start + 12, None, None
    for _ in range(64):  # chunks before "data"
        f.seek(pos)
        h = f.read(8)
        if len(h) < 8:
            return None
        cid, size = h[:4], int.from_bytes(h[4:], order)
        if cid == b"ds64":  # RF64 / BW64: the real sizes, 64-bit
            body = f.read(min(size, 64))
            if len(body) >= 16:
                ds64_size = int.from_bytes(body[8:16], "little")
        elif cid == b"fmt ":
            body = f.read(16)
            if len(body) < 16:
                return None
            fmt = (int.from_bytes(body[0:2], order), int.from_bytes(body[8:12], order),
                   int.from_bytes(body[12:14], order))  # format tag, bytes a second, block align
        elif cid == b"data":
            if size == 0xFFFFFFFF and ds64_size is not None:
                size = ds64_size
            elif size == 0 or size >= _UNKNOWN_SIZE:
                return None
            if fmt is None or fmt[1] <= 0 or fmt[2] <= 0:
                return None
            tag, byte_rate, block = fmt
            held = end - (pos + 8)
            if held >= size:
                return None  # complete: nothing to check after decoding
            slack = (0.5 * block if tag in _WAV_EXACT else block + 0.01 * size) / byte_rate
            return Promise(size / byte_rate, slack, "its WAV header")
        pos += 8 + size + (size & 1)
    return None


def _aiff_promise(f, start: int) -> Optional[Promise]:
    """COMM's frame count, when the SSND chunk is cut short of its size."""
    end = _file_end(f)
    pos, frames, rate, ssnd = start + 12, None, None, None
    for _ in range(64):
        f.seek(pos)
        h = f.read(8)
        if len(h) < 8:
            break
        cid, size = h[:4], int.from_bytes(h[4:], "big")
        if cid == b"COMM":
            body = f.read(18)
            if len(body) < 18:
                return None
            frames = int.from_bytes(body[2:6], "big")
            exponent, mantissa = int.from_bytes(body[8:10], "big") & 0x7FFF, int.from_bytes(body[10:18], "big")
            rate = mantissa * 2.0 ** (exponent - 16383 - 63) if exponent else 0.0
        elif cid == b"SSND":
            ssnd = (pos, size)
            break
        pos += 8 + size + (size & 1)
    if ssnd is None or not frames or not rate or rate <= 0 or ssnd[1] == 0 or ssnd[1] >= _UNKNOWN_SIZE:
        return None
    if end - (ssnd[0] + 8) >= ssnd[1]:
        return None
    return Promise(frames / rate, 0.5 / rate, "its AIFF header")


def container_promise(container, stream, f, start: int) -> Optional[Promise]:
    """What FFmpeg read of the length from a header that tells it: an MP3's Xing/Info/VBRI frame count;
    a Matroska/WebM file's Duration (audio alone: the segment's duration is its longest stream's); an
    MP4/MOV audio track's own duration (its `mdhd`, which a damaged time-to-sample table or a cut
    `mdat` does not shorten). Not a length estimated from the bit rate and the file's size, which a
    cut file shortens too."""
    duration = container.duration
    if not duration or duration <= 0:
        return None
    name = container.format.name
    if "mp4" in name.split(","):
        track = _track_seconds(stream)
        return None if track is None else Promise(track, 0.25, "its MP4 header", "truncated or corrupt")
    if name == "mp3" and _mp3_vbr_header(f, start):
        return Promise(duration / 1e6, 0.25, "its MP3 (Xing/Info) header")
    if "matroska" in name.split(",") and len(container.streams) == 1:
        return Promise(duration / 1e6, 0.25, "its Matroska/WebM header")
    return None


def _track_seconds(stream) -> Optional[float]:
    """A stream's duration in seconds as its container declares it, or None."""
    try:
        if stream.duration and stream.duration > 0 and stream.time_base:
            return float(stream.duration * stream.time_base)
    except (TypeError, ValueError, ZeroDivisionError):
        pass
    return None


def _mp3_vbr_header(f, start: int) -> bool:
    """Whether an MP3's first frame (after an ID3v2 tag) is a Xing, Info or VBRI frame, which counts
    the frames of the file."""
    try:
        pos = f.tell()
    except (OSError, ValueError):
        return False
    try:
        f.seek(start)
        head = f.read(10)
        skip = 0
        if head[:3] == b"ID3" and len(head) == 10:
            skip = 10 + ((head[6] & 0x7F) << 21 | (head[7] & 0x7F) << 14 | (head[8] & 0x7F) << 7 | (head[9] & 0x7F))
            skip += 10 if head[5] & 0x10 else 0
        f.seek(start + skip)
        frame = f.read(200)
        if len(frame) < 4 or frame[0] != 0xFF or frame[1] & 0xE0 != 0xE0:
            return False
        return b"Xing" in frame[4:64] or b"Info" in frame[4:64] or frame[36:40] == b"VBRI"
    except (OSError, ValueError):
        return False
    finally:
        f.seek(pos)

"""Audio input: decode any common container, mix to mono, resample to the model's rate.

`load_audio` is the one entry point. It accepts

- a path (``str`` or ``os.PathLike``) to a wav, flac, ogg, mp3, m4a/mp4, webm, ... file;
  the string ``"-"`` reads standard input's binary buffer;
- ``bytes`` / ``bytearray`` / ``memoryview`` holding an encoded file;
- a binary file object (anything with ``read``);
- a numpy array or torch tensor of samples, with ``source_rate`` giving its rate.

WAV, FLAC, Ogg and AIFF go through soundfile (libsndfile); everything else, and anything
libsndfile refuses, goes through PyAV (FFmpeg). Decoding streams: the file is read in blocks, each
block is mixed to mono and fed to a streaming soxr resampler, so a long file costs little more than
its mono float32 output at the target rate.

Every failure raises `transcribe.errors.AudioError` with a one-line message that begins with the
name of the input (``"talk.mp3: ..."``). A truncated file is one: where the header tells the length
(a WAV's data size unless it is 0 or a pipe's placeholder, an AIFF's, AU's or FLAC's, an MP3's
Xing/Info frame count, a Matroska/WebM audio file's duration, an MP4 audio track's) and less of it decodes, the message
gives both. Ogg, and MP3 or FLAC written to a pipe, tell no length.

Hostile input is bounded (`check_rate`, `check_samples`, `max_seconds`): a rate outside
[MIN_RATE, MAX_RATE] is refused before any resampling, a sample beyond MAX_AMPLITUDE (or NaN / inf)
before any model work, and audio longer than a limit before or while it decodes (see `load_audio`).
"""
from __future__ import annotations

import io
import os
import sys
from typing import NamedTuple, Optional

import numpy as np

from . import audio_limits, audio_source
from .audio_header import Promise, container_promise, header_promise
from .audio_limits import (MAX_AMPLITUDE, MAX_RATE, MIN_RATE, AudioLimitError, check_rate, check_samples,  # noqa: F401
                           set_max_audio_seconds, too_long)
from .errors import AudioError

__all__ = ["load_audio", "decode_bytes", "decode_stream", "RESAMPLE_QUALITY"]

RESAMPLE_QUALITY = "HQ"

# Samples gathered before each call to the resampler (mono, at the source rate).
_BLOCK = 1 << 16

# The output grows in one buffer, by a quarter of its size at least (ndarray.resize: realloc, which
# for a buffer this large remaps its pages, no copy), so a long file's decoding holds at most 1.25x its
# output, in resident and in virtual memory, where a list of blocks joined at the end held twice it.
_GROWTH = 4

# Leading bytes of the containers that libsndfile reads well.
_SOUNDFILE_MAGIC = (b"RIFF", b"RF64", b"RIFX", b"fLaC", b"OggS", b"FORM", b".snd", b"BW64")


def model_input(source, model_rate: int, sample_rate: Optional[int] = None, *, copy: bool = True) -> np.ndarray:
    """What a model's `transcribe()` takes, as mono float32 at `model_rate`: an array or tensor is
    mono audio at `sample_rate` (the model's own rate when None), resampled when the rates differ;
    anything else (a path, bytes, a file object, "-") is decoded and resampled from its own rate.
    copy=False: a float32 mono numpy array already at `model_rate` comes back itself, checked as any
    input (for a caller that never writes it: an hour of audio is 230 MB)."""
    if _is_array(source):
        if getattr(source, "ndim", 1) != 1:
            raise AudioError(f"<array>: an audio array must be 1-D mono, got shape {tuple(source.shape)}")
        return load_audio(source, model_rate, source_rate=model_rate if sample_rate is None else sample_rate,
                          copy=copy)
    if sample_rate is not None:
        raise AudioError(f"sample_rate={sample_rate} applies to arrays only: a file carries its own rate")
    return load_audio(source, model_rate)


# Audio decoded ahead of the model at most (seconds), unless one input alone is longer.
GROUP_AUDIO_S = 30 * 60.0


def load_groups(items, load, rate: int, max_seconds: float = GROUP_AUDIO_S):
    """Decode `items` one at a time with `load(item) -> pcm` and yield them in groups of
    `(index, pcm)` holding at most `max_seconds` of audio (a longer input forms a group alone), so a
    list of long files never sits in memory whole; a caller sorts and batches within a group."""
    group: list[tuple[int, np.ndarray]] = []
    held = 0
    for i, item in enumerate(items):
        pcm = load(item)
        if group and held + len(pcm) > max_seconds * rate:
            yield group
            group, held = [], 0
        group.append((i, pcm))
        held += len(pcm)
    if group:
        yield group


def load_audio(source, sample_rate: int = 16000, *, source_rate: Optional[int] = None,
               max_seconds: Optional[float] = None, copy: bool = True) -> np.ndarray:
    """Return the audio in `source` as a mono float32 1-D numpy array at `sample_rate` Hz.

    Channels are mixed by their mean; the rate is converted with soxr at high quality.
    Silence is valid (an array of zeros); no samples at all, or NaN / infinite samples, are not.

    Arrays and tensors need `source_rate`. Integer samples are scaled to [-1, 1) (int16 by 32768,
    int32 by 2**31, int8 by 128, uint8 centred on 128); floating samples are taken as they are.
    A 1-D array is mono. A 2-D array is read with its *smaller* dimension as the channel axis,
    so both ``[samples, channels]`` (soundfile's layout) and ``[channels, samples]``
    (torchaudio's) work; a square array is taken as ``[samples, channels]``.

    Limits (AudioLimitError, an AudioError): rates (the source's and `sample_rate`) within
    [MIN_RATE, MAX_RATE], |samples| up to MAX_AMPLITUDE, and at most `max_seconds` of audio (None: the
    process's default, `set_max_audio_seconds`, itself unset, i.e. no limit, unless a server set it).
    The length is checked before decoding where the header tells it (libsndfile's frame count of a
    WAV, FLAC, AIFF, AU or Ogg file, the duration FFmpeg reads from any other container, an array's
    shape) and enforced while decoding otherwise: decoding stops once the audio passes the limit.
    Memory: the output (4 bytes a sample at `sample_rate`) and at most a quarter more while it grows;
    with copy=False a float32 mono numpy array already at `sample_rate` is returned itself (checked).
    """
    if not isinstance(sample_rate, (int, np.integer)) or isinstance(sample_rate, bool) or sample_rate <= 0:
        raise AudioError(f"sample_rate must be a positive integer, got {sample_rate!r}")
    sample_rate = int(sample_rate)
    check_rate(sample_rate, "sample_rate")
    limit = audio_limits.max_seconds_or_default(max_seconds)
    return _load(source, _Target(sample_rate, limit), source_rate, copy)


class _Target(NamedTuple):
    """What decoding produces: mono at `rate` Hz, at most `max_seconds` of it (None: no limit)."""
    rate: int
    max_seconds: Optional[float] = None


def _load(source, target: "_Target", source_rate, copy: bool = True) -> np.ndarray:
    if _is_array(source):
        return _from_array(source, target, source_rate, copy)
    if source_rate is not None:
        raise AudioError("source_rate applies only to arrays and tensors; encoded audio carries its own rate")

    if isinstance(source, str) and source == "-":
        name = "<stdin>"
        try:
            data = audio_source.read_bounded(sys.stdin.buffer, name)
        except (OSError, AttributeError, ValueError) as e:
            raise AudioError(f"{name}: cannot read standard input: {e}") from None
        return _decode(io.BytesIO(data), name, target)
    if isinstance(source, (str, os.PathLike)):
        return _from_path(os.fspath(source), target)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _decode(io.BytesIO(bytes(source)), "<bytes>", target)
    if hasattr(source, "read"):
        name = getattr(source, "name", None)
        name = name if isinstance(name, str) else "<file object>"
        return _from_fileobj(source, name, target)
    raise AudioError(
        f"cannot read audio from a {type(source).__name__}: expected a path, bytes, a binary file object, "
        "or a numpy array / torch tensor with source_rate"
    )


def decode_bytes(data: bytes, name: str, sample_rate: int = 16000, max_seconds: Optional[float] = None) -> np.ndarray:
    """An encoded file held in memory, decoded as `load_audio` decodes a file (with its limits: None is
    the process's default); errors name it `name`."""
    check_rate(sample_rate, "sample_rate")
    limit = audio_limits.max_seconds_or_default(max_seconds)
    return _decode(io.BytesIO(data), name, _Target(int(sample_rate), limit))


def decode_stream(fileobj, name: str):
    """A container read from a stream that cannot seek (a pipe), decoded with PyAV as its bytes arrive:
    yields `(mono float32 samples, their rate)` frame by frame. `fileobj` needs only `read(n)`, which may
    return fewer bytes than asked (what has arrived). Raises AudioError for what does not decode."""
    import av

    try:
        container = av.open(fileobj, mode="r")
    except (av.FFmpegError, ValueError, OSError, UnicodeDecodeError) as e:
        raise AudioError(f"{name}: not a readable audio stream ({_short(e)})") from None
    with container:
        streams = [s for s in container.streams if s.type == "audio"]
        if not streams:
            raise AudioError(f"{name}: no audio stream found")
        try:
            for frame in container.decode(streams[0]):
                if frame.samples == 0:
                    continue
                check_rate(frame.sample_rate, name)
                mono = _frame_to_mono(frame, name)
                check_samples(mono, name)
                yield mono, frame.sample_rate
        except (av.FFmpegError, ValueError, OSError) as e:
            raise AudioError(f"{name}: corrupt audio data: {_short(e)}") from None


# ---------------------------------------------------------------------------------------------
# Sources


def _from_path(path: str, target: _Target) -> np.ndarray:
    problem, stream = audio_source.source_problem(path)
    if problem:
        raise AudioError(f"{path}: {problem}")
    try:
        f = audio_source.open_pipe(path) if stream else open(path, "rb")
    except OSError as e:
        raise AudioError(f"{path}: cannot open: {e.strerror or e}") from None
    with f:
        return _from_fileobj(f, path, target) if stream else _decode(f, path, target)


def _from_fileobj(fileobj, name: str, target: _Target) -> np.ndarray:
    seekable = False
    try:
        seekable = bool(fileobj.seekable()) if hasattr(fileobj, "seekable") else False
    except (OSError, ValueError):
        seekable = False
    if seekable:
        return _decode(fileobj, name, target)
    # A pipe or socket: both decoders want to seek, so take the bytes first.
    try:
        data = audio_source.read_bounded(fileobj, name)
    except (OSError, ValueError) as e:
        raise AudioError(f"{name}: cannot read: {e}") from None
    if isinstance(data, str):
        raise AudioError(f"{name}: file object is open in text mode; open it with 'rb'")
    return _decode(io.BytesIO(data), name, target)


def _decode(f, name: str, target: _Target) -> np.ndarray:
    """Decode the seekable binary file `f`, trying soundfile for the formats it reads well."""
    try:
        start = f.tell()
        head = f.read(64)
        f.seek(start)
    except (OSError, ValueError) as e:
        raise AudioError(f"{name}: cannot read: {e}") from None
    if isinstance(head, str):
        raise AudioError(f"{name}: file object is open in text mode; open it with 'rb'")
    if not head:
        raise AudioError(f"{name}: file is empty (0 bytes)")

    promise = header_promise(f, start, head)
    sf_error = sf_empty = sf_failed = None
    if head.startswith(_SOUNDFILE_MAGIC):
        try:
            out = _decode_soundfile(f, name, target, promise)
            if out.pushed:
                return _complete(out, promise, name)
            sf_empty = out  # nothing (a WAV whose data size is 0, as written to a pipe): PyAV may read on
        except _NotDecodable as e:
            sf_error = e
        except AudioLimitError:
            raise
        except AudioError as e:  # failed midway (a FLAC written to a pipe can stump libsndfile): PyAV may not
            sf_failed = e
        f.seek(start)
    try:
        out, av_promise = _decode_av(f, name, target, promise)
    except (_NotDecodable, AudioError) as e:
        if isinstance(e, AudioLimitError):
            raise
        if sf_failed is not None:
            raise sf_failed from None
        if sf_empty is not None:
            return _complete(sf_empty, promise, name)
        if isinstance(e, AudioError):
            raise
        if _looks_like_text(head, f, start):
            raise AudioError(f"{name}: this is a text file, not audio") from None
        reason = sf_error or e
        raise AudioError(f"{name}: not a readable audio file ({reason})") from None
    return _complete(out, promise or av_promise, name)


# libsndfile's frame count when the header does not tell it (SF_COUNT_MAX: a FLAC written to a pipe).
_SF_UNKNOWN = (1 << 63) - 1


class _NotDecodable(Exception):
    """A decoder could not make sense of the data (the next one may)."""


def _decode_soundfile(f, name: str, target: _Target, promise) -> "_Collector":
    import soundfile as sf

    try:
        sfile = sf.SoundFile(f)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise _NotDecodable(_short(e)) from None
    with sfile:
        out = _Collector(name, target)
        rate = sfile.samplerate
        check_rate(rate, name)
        if 0 < sfile.frames < _SF_UNKNOWN:
            _check_declared(name, sfile.frames / rate, target)
        try:
            while True:
                block = sfile.read(_BLOCK, dtype="float32", always_2d=True)
                if block.shape[0] == 0:
                    break
                if block.shape[1] > 1:
                    check_samples(block, name)  # before mixing, which could hide or overflow a sample
                out.push(block.mean(axis=1, dtype=np.float32) if block.shape[1] > 1 else block[:, 0], rate)
        except (sf.LibsndfileError, RuntimeError) as e:
            if out.pushed == 0:
                raise _NotDecodable(_short(e)) from None
            raise _corrupt(out, promise, name, e) from None
        return out


def _check_declared(name: str, seconds: float, target: _Target) -> None:
    """Refuses, before decoding, a file whose header declares more audio than the limit: libsndfile's
    frame count (a WAV's data size, at most the bytes the file holds; a FLAC's STREAMINFO; ...) or the
    duration FFmpeg read from the container (estimated from the bit rate where the header has none: a
    file that long at its own bit rate is over the limit too)."""
    if target.max_seconds is not None and seconds > target.max_seconds:
        raise too_long(name, target.max_seconds, seconds, "its header declares")


def _decode_av(f, name: str, target: _Target, promise) -> "tuple[_Collector, Optional[Promise]]":
    """PyAV's decoding, and what the container's header promises (None when it does not tell)."""
    import av

    start = f.tell()

    try:
        container = av.open(f, mode="r")
    except (av.FFmpegError, ValueError, OSError, UnicodeDecodeError) as e:
        raise _NotDecodable(_short(e)) from None
    with container:
        streams = [s for s in container.streams if s.type == "audio"]
        if not streams:
            raise _NotDecodable("no audio stream found")
        stream = streams[0]
        stream.thread_type = "AUTO"
        try:
            rate = stream.sample_rate
        except AttributeError:  # PyAV gives a stream no codec context when FFmpeg has no decoder for it
            raise _NotDecodable("no decoder for its audio codec") from None
        promise = promise or container_promise(container, stream, f, start)
        if rate:
            check_rate(rate, name)
        if container.duration and container.duration > 0:
            _check_declared(name, container.duration / 1e6, target)
        out = _Collector(name, target)
        try:
            for frame in container.decode(stream):
                if frame.samples == 0:
                    continue
                out.push(_frame_to_mono(frame, name), frame.sample_rate)
        except (av.FFmpegError, ValueError, OSError) as e:
            if out.pushed == 0:
                raise _NotDecodable(_short(e)) from None
            raise _corrupt(out, promise, name, e) from None
        return out, promise


_INT_SCALE = {"s16": 32768.0, "s32": 2147483648.0, "s64": 9223372036854775808.0}


def _frame_to_mono(frame, name: str) -> np.ndarray:
    """One PyAV audio frame as mono float32 samples (the mean of its channels)."""
    fmt = frame.format
    channels = max(1, len(frame.layout.channels))
    arr = frame.to_ndarray()
    if fmt.is_planar:
        arr = arr.reshape(channels, -1)
    else:
        arr = arr.reshape(-1, channels).T
    base = fmt.name.rstrip("p")
    if base in ("flt", "dbl"):
        x = arr.astype(np.float32, copy=False)
    elif base == "u8":
        x = (arr.astype(np.float32) - 128.0) / 128.0
    elif base in _INT_SCALE:
        x = (arr.astype(np.float64) / _INT_SCALE[base]).astype(np.float32)
    else:
        raise AudioError(f"{name}: unsupported sample format {fmt.name!r}")
    if x.shape[0] > 1:
        check_samples(x, name)  # before mixing, which could hide or overflow a sample
    return x.mean(axis=0, dtype=np.float32) if x.shape[0] > 1 else x[0]


def _is_array(source) -> bool:
    if isinstance(source, np.ndarray):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(source, torch.Tensor)


def _from_array(source, target: _Target, source_rate, copy: bool = True) -> np.ndarray:
    name = "<array>"
    if source_rate is None:
        raise AudioError(f"{name}: source_rate is required for arrays and tensors")
    if isinstance(source_rate, bool) or not isinstance(source_rate, (int, float, np.integer, np.floating)) \
            or not np.isfinite(source_rate) or source_rate <= 0:
        raise AudioError(f"{name}: source_rate must be a positive number, got {source_rate!r}")
    check_rate(source_rate, name)

    if not isinstance(source, np.ndarray):  # torch.Tensor
        t = source.detach().cpu()
        if t.is_floating_point() and t.dtype not in (_torch_dtype("float32"), _torch_dtype("float64")):
            t = t.float()  # bfloat16 / float16 have no (or no exact) numpy twin
        if t.is_complex():
            raise AudioError(f"{name}: complex samples are not audio")
        source = t.numpy()

    x = source
    if x.ndim == 0 or x.ndim > 2:
        raise AudioError(f"{name}: expected shape [samples] or a 2-D [samples, channels] / "
                         f"[channels, samples] array, got shape {tuple(x.shape)}")
    n = x.shape[0] if x.ndim == 1 else max(x.shape)  # a 2-D array's samples are its longer axis
    if target.max_seconds is not None and n / source_rate > target.max_seconds:
        raise too_long(name, target.max_seconds, n / source_rate, "holds")
    dt = x.dtype
    if dt.kind == "f":
        x = x.astype(np.float32, copy=False)
    elif dt == np.int16:
        x = x.astype(np.float32) / 32768.0
    elif dt == np.int32:
        x = (x.astype(np.float64) / 2147483648.0).astype(np.float32)
    elif dt == np.int8:
        x = x.astype(np.float32) / 128.0
    elif dt == np.uint8:
        x = (x.astype(np.float32) - 128.0) / 128.0
    else:
        raise AudioError(f"{name}: unsupported sample type {dt}; use float32, int16 or int32")

    check_samples(x, name)  # before mixing, which could hide or overflow a sample
    if x.ndim == 2:
        channel_axis = 0 if x.shape[0] < x.shape[1] else 1
        x = x.mean(axis=channel_axis, dtype=np.float32) if x.shape[channel_axis] > 1 \
            else x.reshape(-1)
    if x.size == 0:
        raise AudioError(f"{name}: contains no audio samples")
    if not copy and x is source and x.ndim == 1 and x.flags.c_contiguous and source_rate == target.rate:
        return x  # float32 mono at the rate already: checked above, handed back as it is
    out = _Collector(name, target)
    out.push(np.ascontiguousarray(x), source_rate)
    return out.finish()


def _torch_dtype(name: str):
    return getattr(sys.modules["torch"], name)


# ---------------------------------------------------------------------------------------------
# Truncated files: what a header promises against what decodes


def _short_of(out: "_Collector", promise: Optional[Promise]) -> bool:
    """Whether less decoded than the header promises (by more than its slack, and than 10 ms: a writer
    that counts a few bytes too many is not a cut file)."""
    return promise is not None and out.seconds < promise.seconds - max(promise.slack, 0.01)


def _complete(out: "_Collector", promise: Optional[Promise], name: str) -> np.ndarray:
    """The decoded audio, or an AudioError when less of it decoded than its header promises."""
    if _short_of(out, promise):
        raise AudioError(
            f"{name}: {promise.short}: {promise.what} promises {promise.seconds:.2f} s of audio, the file holds "
            f"{out.seconds:.2f} s ({promise.seconds - out.seconds:.2f} s missing)")
    return out.finish()


def _corrupt(out: "_Collector", promise: Optional[Promise], name: str, e: BaseException) -> AudioError:
    """A decoder's error after some audio: corrupt data, or a cut file when its header promised more."""
    if _short_of(out, promise):
        return AudioError(
            f"{name}: truncated or corrupt: {promise.what} promises {promise.seconds:.2f} s of audio, decoding "
            f"stopped at {out.seconds:.2f} s ({_short(e)})")
    return AudioError(f"{name}: corrupt audio data: {_short(e)}")


# ---------------------------------------------------------------------------------------------
# Mono blocks -> resampled output


class _Collector:
    """Gathers mono blocks at a source rate and resamples them, streaming, to the target rate."""

    def __init__(self, name: str, target: _Target):
        self.name = name
        self.rate = target.rate
        self.limit = target.max_seconds
        self._step = _BLOCK
        self.seen_rate = None
        self.pushed = 0
        self.seconds = 0.0  # of audio pushed, at its own rate
        self._stream = None
        self._pending: list[np.ndarray] = []
        self._pending_n = 0
        self._out = np.empty(0, np.float32)  # the output so far: its first `_n` samples
        self._n = 0

    def push(self, mono: np.ndarray, rate) -> None:
        if mono.size == 0:
            return
        check_samples(mono, self.name)
        if self.limit is not None and self.seconds + mono.size / rate > self.limit:
            raise too_long(self.name, self.limit)
        if rate != self.seen_rate:
            check_rate(rate, self.name)
            # Source samples a resampler call takes: about _BLOCK samples out, whatever the ratio.
            self._step = max(256, min(_BLOCK, _BLOCK * int(rate) // self.rate))
            if self.seen_rate is not None:
                self._flush(last=True)  # the rate changed mid-stream: finish the old resampler
            self.seen_rate = rate
            self._stream = None
            if rate != self.rate:
                import soxr

                self._stream = soxr.ResampleStream(rate, self.rate, 1, dtype="float32",
                                                   quality=RESAMPLE_QUALITY)
        mono = np.asarray(mono, dtype=np.float32)
        self.pushed += mono.size
        self.seconds += mono.size / rate
        for i in range(0, mono.size, self._step):
            piece = mono[i:i + self._step]
            self._pending.append(piece)
            self._pending_n += piece.size
            if self._pending_n >= self._step:
                self._flush(last=False)

    def _flush(self, last: bool) -> None:
        if self._pending:
            block = self._pending[0] if len(self._pending) == 1 else np.concatenate(self._pending)
        else:
            block = np.zeros(0, np.float32)
        self._pending, self._pending_n = [], 0
        if self._stream is not None:
            block = self._stream.resample_chunk(block, last=last)
        if block.size:
            need = self._n + block.size
            if need > self._out.size:
                self._out.resize(max(need, self._out.size + self._out.size // _GROWTH), refcheck=False)
            self._out[self._n:need] = block
            self._n = need

    def finish(self) -> np.ndarray:
        if self.pushed == 0:
            raise AudioError(f"{self.name}: contains no audio samples")
        self._flush(last=True)
        if self._n == 0:
            # Fewer source samples than one output sample: still a valid, tiny input.
            return np.zeros(1, np.float32)
        out, self._out = self._out, np.empty(0, np.float32)
        out.resize(self._n, refcheck=False)  # no view of it exists yet
        return out


# ---------------------------------------------------------------------------------------------
# Helpers


def _looks_like_text(head: bytes, f, start: int) -> bool:
    """True when the data starts like a text file (UTF-8, no control bytes but whitespace)."""
    try:
        f.seek(start)
        sample = f.read(4096)
    except (OSError, ValueError):
        sample = head
    if not sample or b"\x00" in sample:
        return False
    try:
        text = sample.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(sample) - 3:  # only a multi-byte character cut at the end is allowed
            return False
        text = sample[: e.start].decode("utf-8")
    bad = sum(1 for c in text if ord(c) < 32 and c not in "\t\n\r\f\v")
    return bad == 0


def _short(e: BaseException) -> str:
    """The useful part of a decoder's exception message, on one line."""
    for attr in ("error_string", "strerror"):  # soundfile.LibsndfileError, av.FFmpegError
        detail = getattr(e, attr, None)
        if isinstance(detail, str) and detail.strip():
            return detail.strip().splitlines()[0][:200]
    msg = str(e).strip().splitlines()
    msg = msg[0] if msg else type(e).__name__
    return msg[:200]

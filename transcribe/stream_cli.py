"""`transcribe --stream FILE|-`: live transcription on the command line (`cli.py` dispatches here).

    transcribe --stream FILE|- [--model M] [--att-context L,R] [--no-eou-reset] [--realtime]
               [--format txt|jsonl] [--head H] [--threads N] [--device D] [--dtype T]
               [--diarize --diarizer M [--num-speakers N]]

The input goes through `model.stream(...)` (a `transcribe.streaming.StreamingSession`) piece by
piece: a file is decoded (any format and rate -> 16 kHz mono) and fed 100 ms at a time, at the
speed of its audio with `--realtime`; `-` reads raw s16le 16 kHz mono PCM from standard input as
it arrives (`arecord -f S16_LE -r 16000 -c 1 -t raw | transcribe --stream -`); a WAV header at its
start (arecord's default) is read and skipped, and its rate and channels are followed. Another
container on standard input (FLAC, Ogg, MP3, WebM, ...: told by its first bytes) is decoded as it
arrives; MP4/M4A is read whole, then decoded.

Output, flushed as it is decided:

- txt: the committed text as it grows, one line per utterance (a line ends at each end-of-utterance
  event, and the output ends with a newline);
- jsonl: one JSON object a line: {"type": "partial", "text"} when the current text (committed +
  tentative) changes; {"type": "word", "word", "start", "end", "confidence"} for each finished
  word; {"type": "eou"|"eob", "token", "frame", "time"} for each event; last, {"type": "final",
  "text", "tokens", "words", "events"} over the whole stream ("text": its utterances joined by a
  space).

With `--diarize` a streaming diarizer (`--diarizer M`, a Sortformer model) runs beside the session
(`StreamingSession.add_diarizer`) and each word gets a speaker once the diarizer has covered it:

- txt: the words as their speakers become known, a line per run of one speaker's words ("speaker_0:
  and so my fellow americans", as `--format txt` writes a diarized file; a word no speaker was active
  over has no prefix; a new line also at each end-of-utterance event), so the text comes a little
  later than without it (the diarizer's latency);
- jsonl: each word line carries "speaker" (null while not yet known), and {"type": "word_speakers",
  "first", "speakers"} gives the speakers of words printed before theirs were known (the word lines
  numbered first, first + 1, ..., counted from 0); the final line's words carry their speakers, and
  its "speakers" is who spoke when (the diarizer's turns: speaker, start, end).

Ctrl-C ends the input: what was fed is finalized and written, and the exit status is 130.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Iterator, Optional

from . import surfaces
from .cli_args import add_option_flags, flag, value_flag
from .errors import OptionsNotTaken, OptionValueError, TranscribeError
from .loading import FAMILIES
from .options import names
from .runtime import configure_process
from .stream_print import JsonLines, SpeakerText, Text

PROG = "transcribe"
SAMPLE_RATE = 16000
PIECE_S = 0.1  # audio fed at a time
READ_BYTES = 3200  # at most this much of standard input per read (100 ms of 16 kHz s16le)
STREAM_FORMATS = ("txt", "jsonl")
# What a WAV header on standard input may say: the rates audio.py accepts anywhere (MIN_RATE, MAX_RATE),
# and at most this many channels (averaged); beyond them the header is not a recording's.
MAX_CHANNELS = 64

# The command's diarization flags (argparse dest -> flag), taken by a stream too: never a family option here
# (a diarizer family's own `num_speakers` goes to the diarizer, not to the streaming model).
_DIARIZE_FLAGS = {"diarize": "--diarize", "diarizer": "--diarizer", "num_speakers": "--num-speakers"}

# The command's own flags (argparse dest -> flag; not family options) that a stream does not take, and
# the one a stream only takes. The family options' flags are read from the registry (transcribe.surfaces):
# a flag some family's StreamOptions gives is passed to model.stream() (the model refuses what its family
# does not take); one only a StreamOptions gives needs --stream; any other does not apply to --stream.
_COMMAND_NOT_FOR_STREAM = {"output_dir": "--output-dir", "overwrite": "--overwrite", "batch_size": "--batch-size"}
_SUBTITLE_FLAGS = {"max_line_width": "--max-line-width", "max_line_count": "--max-line-count"}
_COMMAND_STREAM_ONLY = {"realtime": "--realtime"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    s = p.add_argument_group("Streaming (live text as the audio arrives)")
    s.add_argument("--stream", metavar="FILE|-",
                   help="transcribe one input live, printing text as it is decided (--format txt or jsonl); "
                        "'-' reads stdin as it arrives: raw s16le 16 kHz mono PCM, a WAV stream, or any container "
                        "(FLAC, Ogg, MP3, WebM, ...) told by its first bytes")
    add_option_flags(s, _stream_only())
    s.add_argument("--realtime", action="store_true",
                   help="feed a file at the speed of its audio (stdin arrives at its own pace)")


def _stream_only() -> dict:
    """The family options only a stream takes (no family's transcribe() has them)."""
    return {n: d for n, d in surfaces.stream_command_options().items() if d.stream_only}


def _stream_only_flags() -> dict:
    """dest -> flag of what needs --stream."""
    return {**{n: d.flag for n, d in _stream_only().items()}, **_COMMAND_STREAM_ONLY}


def _not_for_stream() -> dict:
    """dest -> flag of what does not apply to --stream: the command's own file-mode flags, and the
    family options no family's stream takes."""
    streamed = surfaces.stream_command_options()
    family = {n: d.flag for n, d in surfaces.file_options().items() if n not in streamed and n not in _DIARIZE_FLAGS}
    return {**_COMMAND_NOT_FOR_STREAM, **family, **_SUBTITLE_FLAGS}


def usage_problem(args, parser: argparse.ArgumentParser) -> Optional[str]:
    """The usage error of the streaming options (checked before anything is loaded), or None."""
    if args.stream is None:
        given = [f for dest, f in _stream_only_flags().items()
                 if getattr(args, dest) != parser.get_default(dest)]
        if given:
            return f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --stream"
        if args.format == "jsonl":
            return "--format jsonl needs --stream (a file's transcript in JSON is --format json)"
        return None
    if args.audio:
        return (f"--stream takes its one input itself (--stream FILE, or --stream - for stdin); "
                f"remove the other input{'s' if len(args.audio) > 1 else ''} ({' '.join(args.audio)})")
    if args.format not in STREAM_FORMATS:
        return f"--stream writes txt or jsonl, not --format {args.format}"
    given = [f for dest, f in _not_for_stream().items() if getattr(args, dest) != parser.get_default(dest)]
    if given:
        return f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --stream"
    return None


# ---------------------------------------------------------------------------------------------


def run(args) -> int:
    """The stream mode of `transcribe` (usage already checked). Exit status as `cli.main`'s."""
    source = args.stream
    pcm = None
    if source != "-":
        from .audio import load_audio

        try:  # the file first: a bad input is told before the model loads
            pcm = load_audio(source, sample_rate=SAMPLE_RATE)
        except TranscribeError as e:
            _say(f"error: {_one_line(str(e))}")
            return 2

    configure_process(args.threads)
    import transcribe

    diarize = bool(getattr(args, "diarize", False))
    try:
        model = transcribe.load_model(args.model, device=args.device, dtype=args.dtype, threads=args.threads)
        diarizer = _load_diarizer(args) if diarize else None
    except TranscribeError as e:
        _say(f"error: {_one_line(str(e))}")
        return 2
    options, problem = _stream_options(args, model)
    if problem is None and not callable(getattr(model, "stream", None)):
        problem = f"{getattr(model, 'name', 'the model')} cannot stream (its model family has no streaming session)"
    if problem is None:
        try:
            session = model.stream(**options)
            if diarizer is not None:
                session.add_diarizer(diarizer, num_speakers=getattr(args, "num_speakers", None))
        except OptionsNotTaken as e:
            problem = _one_line(e.spelled(flag))
        except OptionValueError as e:
            problem = _one_line(e.spelled(value_flag))
        except TranscribeError as e:
            problem = _one_line(str(e))
    if problem is not None:
        _say(f"error: {problem}")
        return 2

    if args.format == "jsonl":
        out = JsonLines(sys.stdout)
    else:
        out = SpeakerText(sys.stdout) if diarize else Text(sys.stdout)
    pieces = _stdin_pieces(_stdin()) if source == "-" else _file_pieces(pcm, args.realtime)
    interrupted, heard = False, False
    try:
        for samples, rate in pieces:
            heard = heard or len(samples) > 0
            session.feed(samples, rate)
            out.update(session)
        if not heard:  # an empty input, a header alone, less than one whole sample: not a transcript of silence
            raise TranscribeError(f"{'<stdin>' if source == '-' else source}: no audio in the input")
    except KeyboardInterrupt:
        interrupted = True
    except TranscribeError as e:  # the input (a bad WAV header on stdin, a rate change)
        _say(f"error: {_one_line(str(e))}")
        session.finalize()
        out.update(session)
        out.close(session)
        return 2
    session.finalize()
    out.update(session)
    out.close(session)
    if interrupted:
        _say("interrupted")
        return 130
    return 0


def _load_diarizer(args):
    """The --diarizer model (a Sortformer model), loaded as the recognizer is; raises TranscribeError
    for a model that is not a diarizer."""
    import transcribe

    from .hub import DEFAULT_DIARIZER

    name = getattr(args, "diarizer", None) or DEFAULT_DIARIZER
    diarizer = transcribe.load_model(name, device=args.device, dtype=args.dtype, threads=args.threads)
    if not getattr(diarizer, "diarizer", False):
        raise TranscribeError(f"--diarizer {name}: {getattr(diarizer, 'name', name)} is a "
                              f"{getattr(diarizer, 'kind', 'speech recognition')} model, not a diarizer "
                              "(a Sortformer model)")
    return diarizer


def _stream_options(args, model) -> tuple[dict, Optional[str]]:
    """model.stream()'s options from the command line, or the usage error of options the model's
    family does not take (its StreamOptions, read from the registry; the model checks again)."""
    options = {k: v for k, v in surfaces.given(args, surfaces.stream_command_options()).items()
               if k not in _DIARIZE_FLAGS}
    family = getattr(model, "family", "")
    registered = next((f for f in FAMILIES if f.name == family), None)
    if registered is None or not options:
        return options, None
    taken = names(registered.stream_options) if registered.stream_options is not None else frozenset()
    wrong = set(options) - taken
    if wrong:  # in the words of every surface (errors.OptionsNotTaken), naming the flags
        return options, OptionsNotTaken(getattr(model, "name", "the model"),
                                        getattr(model, "kind", family or "different"), wrong).spelled(flag)
    return options, None


def _file_pieces(pcm, realtime: bool) -> Iterator[tuple[object, int]]:
    """The decoded file in PIECE_S pieces; with `realtime`, each when its audio has been 'heard'."""
    step = int(PIECE_S * SAMPLE_RATE)
    t0 = time.monotonic()
    for start in range(0, len(pcm), step):
        end = min(start + step, len(pcm))
        if realtime:
            wait = t0 + end / SAMPLE_RATE - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        yield pcm[start:end], SAMPLE_RATE


def _stdin():
    return getattr(sys.stdin, "buffer", sys.stdin)


def _stdin_pieces(stream) -> Iterator[tuple[object, int]]:
    """Standard input as it arrives: raw s16le PCM (each read returns what is there, up to
    READ_BYTES), whole samples only (a split sample waits for its other byte). A WAV header at the
    start is skipped; its rate and channel count are followed (channels are averaged), and a data size
    it gives is held to. Any other container, told by its first bytes as a file's, is decoded, never
    taken for PCM (`_container_pieces`)."""
    read = getattr(stream, "read1", None) or stream.read
    data = b""
    while len(data) < 12:  # enough to tell a WAV header or a container
        more = read(READ_BYTES)
        if not more:
            break
        data += more
    rate, channels, size = SAMPLE_RATE, 1, None
    wav = data[:4] in (b"RIFF", b"RF64") and data[8:12] == b"WAVE"
    if wav:
        data, rate, channels, size = _skip_wav_header(data, read)
    else:
        data, kind = _sniff(data, read)
        if kind is not None:
            yield from _container_pieces(data, read, kind)
            return
    frame = 2 * channels
    fed = 0  # bytes of the data chunk passed on
    while True:
        if size is not None and fed + len(data) >= size:  # the data chunk ends here: what follows is not audio
            data = data[:size - fed]
            usable = len(data) - len(data) % frame
            if usable:
                yield _mono(data[:usable], channels), rate
            fed += len(data)
            data = b""
            break
        usable = len(data) - len(data) % frame
        if usable:
            yield _mono(data[:usable], channels), rate
            data = data[usable:]
            fed += usable
        more = read(READ_BYTES)
        if not more:
            break
        data += more
    if size is not None and size - fed > 0.01 * frame * rate:  # more than 10 ms short, as audio.py's files
        raise TranscribeError(
            f"<stdin>: truncated: its WAV header promises {size / (frame * rate):.2f} s of audio, the input "
            f"ended after {fed / (frame * rate):.2f} s")
    if fed == 0:  # not one whole sample: an error, not the empty transcript of an empty input
        what = "no audio after its WAV header" if wav else "no audio" if data else "the input is empty"
        raise TranscribeError(f"<stdin>: {what}" + (f" ({len(data)} byte{'s' * (len(data) > 1)}, less than one "
                                                    f"sample of {channels} channel{'s' * (channels > 1)})" if data else ""))
    if data:
        _say(f"note: {len(data)} byte{'s' if len(data) > 1 else ''} at the end of the input "
             "(not a whole sample) ignored")


def _mono(data: bytes, channels: int):
    if channels == 1:
        return data
    import numpy as np

    return np.frombuffer(data, dtype="<i2").reshape(-1, channels).astype(np.float32).mean(axis=1) / 32768.0


def _skip_wav_header(data: bytes, read) -> tuple[bytes, int, int, Optional[int]]:
    """Reads a streamed WAV file's chunks up to its "data" chunk: (the bytes after its header, rate,
    channels, the data chunk's size). The size is None where a recorder writing to a pipe, which cannot
    know it, leaves 0 or a placeholder near 2 or 4 GiB (arecord, sox, ffmpeg)."""
    pos, rate, channels = 12, None, None
    while True:
        while len(data) < pos + 8:
            more = read(READ_BYTES)
            if not more:
                raise TranscribeError("<stdin>: WAV header ends before its audio")
            data += more
        cid, size = data[pos:pos + 4], int.from_bytes(data[pos + 4:pos + 8], "little")
        if cid == b"data":
            break
        end = pos + 8 + size + (size & 1)
        while len(data) < end:
            more = read(READ_BYTES)
            if not more:
                raise TranscribeError("<stdin>: WAV header ends before its audio")
            data += more
        if cid == b"fmt ":
            fmt, channels, rate = (int.from_bytes(data[pos + 8:pos + 10], "little"),
                                   int.from_bytes(data[pos + 10:pos + 12], "little"),
                                   int.from_bytes(data[pos + 12:pos + 16], "little"))
            bits = int.from_bytes(data[pos + 22:pos + 24], "little")
            if fmt not in (1, 0xFFFE) or bits != 16 or channels < 1 or rate < 1:
                raise TranscribeError(f"<stdin>: a WAV stream must be 16-bit PCM (format {fmt}, {bits} bits, "
                                      f"{channels} channels, {rate} Hz); or send raw s16le 16 kHz mono")
            from .audio_limits import MAX_RATE, MIN_RATE  # (here: the command's --help imports no numpy)

            if not MIN_RATE <= rate <= MAX_RATE or channels > MAX_CHANNELS:
                raise TranscribeError(f"<stdin>: its WAV header says {rate} Hz and {channels} channels; a stream "
                                      f"takes {MIN_RATE}-{MAX_RATE} Hz and 1-{MAX_CHANNELS} channels")
        pos = end
    if rate is None:
        raise TranscribeError("<stdin>: WAV stream without a format chunk before its audio")
    known = 0 < size < _UNKNOWN_WAV_SIZE and data[:4] == b"RIFF"
    return data[pos + 8:], rate, channels, size if known else None


# A WAV data size at least this large is a placeholder (0x7FFFF000, 0x7FFFFFFF, 0xFFFFFFFF), not a size.
_UNKNOWN_WAV_SIZE = 0x7FFF0000

# The first bytes of containers (at offset 0; MP4's "ftyp" is at 4), and their names.
_MAGIC = (
    (b"fLaC", "FLAC"), (b"OggS", "Ogg"), (b"ID3", "MP3"), (b"\x1a\x45\xdf\xa3", "Matroska/WebM"),
    (b"FORM", "AIFF"), (b".snd", "AU"), (b"caff", "CAF"), (b"#!AMR", "AMR"), (b"wvpk", "WavPack"),
    (b"MAC ", "APE"), (b"\x30\x26\xb2\x75\x8e\x66\xcf\x11", "ASF/WMA"), (b"RIFF", "RIFF"),
    (b"RF64", "RF64"), (b"BW64", "BW64"), (b"DSD ", "DSF"),
)


def _sniff(data: bytes, read) -> tuple[bytes, Optional[str]]:
    """(the bytes read so far, the container they start, or None for raw PCM). Bare MPEG audio or
    ADTS AAC (no tag before its first frame) is told by three frame headers in a row, each where the
    one before says, so PCM whose first sample happens to look like a frame sync stays PCM."""
    if data[4:8] == b"ftyp":
        return data, "MP4"
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return data, kind
    while len(data) >= 2 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0:
        found = _frame_chain(data)
        if found is not None:
            return data, found or None
        more = read(READ_BYTES)
        if not more:
            return data, _frame_chain(data, ended=True) or None
        data += more
    return data, None


# MPEG audio: bit rates (kbit/s) by (MPEG-1 or not, layer 1-3) and index; sample rates by version bits.
_MPEG_KBPS = {
    (True, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MPEG_HZ = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
_ADTS_HZ = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350)


def _frame(h: bytes) -> Optional[tuple[int, tuple]]:
    """(length, kind) of the MPEG audio or ADTS frame whose header `h` (7 bytes) starts, or None."""
    if len(h) < 7 or h[0] != 0xFF or h[1] & 0xE0 != 0xE0:
        return None
    version, layer = (h[1] >> 3) & 3, (h[1] >> 1) & 3
    if version in (2, 3) and h[1] & 0xF6 == 0xF0:  # 12-bit sync, layer 0: ADTS (AAC)
        rate, length = (h[2] >> 2) & 0xF, ((h[3] & 3) << 11) | (h[4] << 3) | (h[5] >> 5)
        return (length, ("adts", rate)) if rate < len(_ADTS_HZ) and length >= 7 else None
    bitrate, rate, pad = h[2] >> 4, (h[2] >> 2) & 3, (h[2] >> 1) & 1
    if version == 1 or layer == 0 or bitrate in (0, 15) or rate == 3 or h[3] & 3 == 2:
        return None
    n = 4 - layer  # layer I, II, III
    mpeg1 = version == 3
    bps = _MPEG_KBPS[(mpeg1, n if mpeg1 or n == 1 else 2)][bitrate] * 1000
    hz = _MPEG_HZ[version][rate]
    if n == 1:
        length = (12 * bps // hz + pad) * 4
    else:
        length = (72 if n == 3 and not mpeg1 else 144) * bps // hz + pad
    return length, ("mpeg", version, layer, rate)


def _frame_chain(data: bytes, ended: bool = False) -> Optional[str]:
    """"MP3"/"AAC" when `data` starts with three frames of one kind in a row (or ends after whole
    frames, at the end of the input), "" when it does not, None when more bytes are needed to tell."""
    pos, kind, count = 0, None, 0
    while count < 3:
        if pos == len(data) and ended and count:
            break
        if len(data) < pos + 7:
            return "" if ended else None
        found = _frame(data[pos:pos + 7])
        if found is None or (kind is not None and found[1] != kind):
            return ""
        kind = found[1]
        pos += found[0]
        count += 1
    return "AAC" if kind[0] == "adts" else "MP3"


class _Replay:
    """Standard input for PyAV: the bytes already read first, then reads as they come; what it hands
    out is kept until `keep` is cleared, so the input can be decoded again whole."""

    def __init__(self, data: bytes, read):
        self.head, self._read, self.keep, self.kept = data, read, True, [data]

    def read(self, n: int = -1) -> bytes:
        if self.head:
            out, self.head = (self.head, b"") if n < 0 or n >= len(self.head) else (self.head[:n], self.head[n:])
            return out
        more = self._read(READ_BYTES if n < 0 else n)
        if self.keep and more:
            self.kept.append(more)
        return more


def _container_pieces(data: bytes, read, kind: str) -> Iterator[tuple[object, int]]:
    """A container on standard input, decoded with PyAV as it arrives (mono at its own rate). MP4 (its
    index usually comes last) and a container PyAV cannot follow without seeking are read whole, then
    decoded as a file is."""
    from . import audio, audio_source

    if kind != "MP4":
        src = _Replay(data, read)
        started = False
        try:
            for samples, rate in audio.decode_stream(src, "<stdin>"):
                if not started:
                    started, src.keep, src.kept = True, False, []
                yield samples, rate
            if started:
                return
        except TranscribeError:
            if started:
                raise
        data = b"".join(src.kept)  # nothing decoded: all of it again, and the rest, as a file
    whole = data + audio_source.read_bounded(_Reader(read), "<stdin>", audio_source.MAX_STREAM_BYTES - len(data))
    pcm = audio.decode_bytes(whole, "<stdin>", SAMPLE_RATE)
    step = int(PIECE_S * SAMPLE_RATE)
    for start in range(0, len(pcm), step):
        yield pcm[start:start + step], SAMPLE_RATE


class _Reader:
    def __init__(self, read):
        self.read = read


# ---------------------------------------------------------------------------------------------


def _one_line(s: str) -> str:
    return " ".join(s.split()) or "(no message)"


def _say(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)

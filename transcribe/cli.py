"""The `transcribe` command.

    transcribe AUDIO... [--model M] [--format txt|json|srt|vtt|all] [--output-dir DIR] ...

Exit codes: 0 when every input was transcribed; 2 for a usage error, a model that cannot be
loaded, or any input that could not be read or transcribed (the others are still processed and
written); 1 for an internal error; 130 when interrupted. Every error is one line on stderr
(``transcribe: error: ...``); set TRANSCRIBE_DEBUG=1 for the traceback of an internal error.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Optional, TextIO

import transcribe

from .audio import load_audio
from .errors import TranscribeError
from .runtime import configure_process
from .writers import WRITERS

PROG = "transcribe"
FORMATS = ("txt", "json", "srt", "vtt")

# A single input at least this long (seconds of audio) gets a progress display too.
LONG_AUDIO_S = 60.0


class _UsageError(Exception):
    pass


def main(argv: Optional[list[str]] = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        _check(args)
    except SystemExit as e:  # argparse: --help, --version, usage errors (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except _UsageError as e:
        parser.print_usage(sys.stderr)
        _say(f"error: {e}")
        return 2

    progress = _Progress(len(args.audio), enabled=not args.quiet and _isatty(sys.stderr))
    try:
        return _run(args, progress)
    except KeyboardInterrupt:
        progress.close()
        _say("interrupted")
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (`| head`): stop quietly.
        progress.close()
        try:  # so that the interpreter's final flush of stdout does not fail again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 1
    except Exception as e:  # noqa: BLE001 - the one place that turns anything left into one line
        progress.close()
        _say(f"internal error: {type(e).__name__}: {_one_line(str(e))}")
        if os.environ.get("TRANSCRIBE_DEBUG") == "1":
            traceback.print_exc()
        return 1
    finally:
        progress.close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Transcribe speech in audio files with a local Parakeet or Whisper model.",
        epilog="Exit status: 0 all inputs done, 2 usage error / bad model / any bad input "
               "(the good inputs are still transcribed), 1 internal error. "
               "TRANSCRIBE_DEBUG=1 shows tracebacks.",
    )
    p.add_argument("audio", nargs="+", metavar="AUDIO",
                   help="audio or video files (wav, flac, ogg, mp3, m4a, webm, ...); '-' reads stdin")
    p.add_argument("-m", "--model", default=None,
                   help="model file, directory or id (default: Whisper tiny.en, installed with the package)")
    p.add_argument("-f", "--format", default="txt", choices=FORMATS + ("all",),
                   help="output format (default: txt); 'all' needs --output-dir")
    p.add_argument("-o", "--output-dir", metavar="DIR",
                   help="write <input stem>.<format> files here (created if needed) instead of stdout")
    p.add_argument("--head", choices=("tdt", "rnnt", "ctc"),
                   help="decoder head of a hybrid model (default: the model's own)")
    p.add_argument("--batch-size", type=_positive_int, default=8, metavar="N",
                   help="inputs decoded together (default: 8)")
    p.add_argument("--threads", type=_positive_int, metavar="N", help="CPU threads for PyTorch")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="default: cpu")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                   help="compute precision (default: the model's choice for the device)")
    w = p.add_argument_group("Whisper decoding")
    w.add_argument("--beam-size", type=_positive_int, metavar="N", help="beam search with N beams (default: greedy)")
    w.add_argument("--patience", type=float, metavar="P", help="beam search patience (default: 1.0)")
    w.add_argument("--language", metavar="LANG", help="language code of multilingual models (e.g. en, de)")
    w.add_argument("--task", choices=("transcribe", "translate"), help="default: transcribe")
    w.add_argument("--initial-prompt", metavar="TEXT", help="text that conditions the first window")
    w.add_argument("--temperature", type=_temperatures, metavar="T[,T...]",
                   help="sampling temperature; one value T falls back from T in steps of "
                        "--temperature-increment up to 1.0, a list is the whole schedule (default: 0)")
    w.add_argument("--temperature-increment", type=float, default=0.2, metavar="D",
                   help="fallback step after a failed window (default: 0.2; 0 turns fallback off)")
    w.add_argument("--word-timestamps", action="store_true",
                   help="time every word (json output; Parakeet models always give word times)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    p.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    return p


def _positive_int(s: str) -> int:
    try:
        n = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {s!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _temperatures(s: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in s.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid temperature list: {s!r}") from None
    if any(not (0.0 <= v <= 10.0) for v in values):
        raise argparse.ArgumentTypeError(f"temperatures must lie in [0, 10], got {s!r}")
    return values


def _version() -> str:
    v = getattr(transcribe, "__version__", None)
    if isinstance(v, str):
        return v
    try:
        from importlib.metadata import version

        return version("transcribe")
    except Exception:  # noqa: BLE001 - not installed: a source checkout
        return "unknown"


def _check(args) -> None:
    if args.format == "all" and not args.output_dir:
        raise _UsageError("--format all needs --output-dir")
    if args.audio.count("-") > 1:
        raise _UsageError("'-' (standard input) can be given only once")
    if args.temperature_increment < 0:
        raise _UsageError("--temperature-increment must not be negative")


# ---------------------------------------------------------------------------------------------


def _run(args, progress: "_Progress") -> int:
    formats = list(FORMATS) if args.format == "all" else [args.format]
    out_dir = None
    if args.output_dir:
        out_dir = Path(args.output_dir)
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            _say(f"error: cannot create output directory {out_dir}: {e.strerror or e}")
            return 2
    stems = _output_stems(args.audio)

    configure_process(args.threads)  # a program of its own: threads and allocator for the whole run
    try:
        model = transcribe.load_model(args.model, device=args.device, dtype=args.dtype, threads=args.threads)
    except TranscribeError as e:
        _say(f"error: {_one_line(str(e))}")
        return 2
    rate = int(model.sample_rate)
    timestamps = formats != ["txt"]

    failed = 0
    done = 0
    stdout_docs = 0
    if len(args.audio) > 1:
        progress.start()

    def emit(index: int, result) -> None:
        nonlocal failed, stdout_docs
        if out_dir is None:
            text = WRITERS[formats[0]](result)
            if stdout_docs and formats[0] in ("srt", "vtt"):
                text = "\n" + text
            progress.print(text, sys.stdout)
            stdout_docs += 1
            return
        for fmt in formats:
            path = out_dir / f"{stems[index]}.{fmt}"
            try:
                with open(path, "w", encoding="utf-8", newline="\n") as f:
                    f.write(WRITERS[fmt](result))
            except OSError as e:
                progress.error(f"error: {path}: cannot write: {e.strerror or e}")
                failed += 1

    for first in range(0, len(args.audio), args.batch_size):
        names = args.audio[first:first + args.batch_size]
        indices, pcms = [], []
        for offset, name in enumerate(names):
            try:
                pcm = load_audio(name, sample_rate=rate)
            except TranscribeError as e:
                progress.error(f"error: {_one_line(str(e))}")
                failed += 1
                done += 1
                progress.update(done)
                continue
            indices.append(first + offset)
            pcms.append(pcm)
            if len(pcm) >= LONG_AUDIO_S * rate:
                progress.start()
        if not pcms:
            continue
        progress.add_audio(sum(len(p) for p in pcms) / rate)
        results = _transcribe_batch(model, args, pcms, [args.audio[i] for i in indices], timestamps, progress)
        for index, result in zip(indices, results):
            if result is None:
                failed += 1
            else:
                emit(index, result)
            done += 1
            progress.update(done)

    progress.close()
    return 2 if failed else 0


def _transcribe_batch(model, args, pcms, names, timestamps, progress) -> list:
    """Transcripts for `pcms`, or None for an input the model refused (reported on stderr)."""
    try:
        results = list(model.transcribe(pcms, batch_size=args.batch_size, timestamps=timestamps, head=args.head,
                                        **_decoding_options(args)))
    except TranscribeError as e:
        if len(pcms) == 1:
            progress.error(f"error: {_display(names[0])}: {_one_line(str(e))}")
            return [None]
        # Find which input the model refused: one by one.
        return [r for pcm, name in zip(pcms, names)
                for r in _transcribe_batch(model, args, [pcm], [name], timestamps, progress)]
    if len(results) != len(pcms):
        raise RuntimeError(f"model returned {len(results)} transcripts for {len(pcms)} inputs")
    return results


def _decoding_options(args) -> dict:
    """The family-specific options the user gave (only those, so other families are not bothered)."""
    names = ("beam_size", "patience", "language", "task", "initial_prompt")
    out = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    if args.temperature is not None:
        out["temperature"] = _schedule(args.temperature, args.temperature_increment)
    if args.word_timestamps:
        out["word_timestamps"] = True
    return out


def _schedule(temps: tuple[float, ...], increment: float) -> tuple[float, ...]:
    """openai-whisper's fallback schedule: from T up to 1.0 in steps of `increment`."""
    if len(temps) > 1 or increment <= 0:
        return temps
    out = [temps[0]]
    while out[-1] + increment <= 1.0 + 1e-6:
        out.append(round(out[-1] + increment, 6))
    return tuple(out)


def _output_stems(inputs: list[str]) -> list[str]:
    """<input stem> per input ('stdin' for '-'); repeated stems get -2, -3, ... so none is overwritten."""
    stems, seen = [], {}
    for name in inputs:
        stem = "stdin" if name == "-" else (Path(name).stem or "audio")
        n = seen.get(stem, 0) + 1
        seen[stem] = n
        stems.append(stem if n == 1 else f"{stem}-{n}")
    return stems


def _display(name: str) -> str:
    return "<stdin>" if name == "-" else name


def _one_line(s: str) -> str:
    return " ".join(s.split()) or "(no message)"


def _say(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


# ---------------------------------------------------------------------------------------------


class _Progress:
    """A one-line progress display on stderr: files done, audio seen, time elapsed.

    Drawn only when enabled (stderr is a terminal and not --quiet) and started (several inputs,
    or a long one). A background thread redraws it twice a second so the clock moves while a long
    batch runs. Output and error lines clear it first, then it is redrawn below them.
    """

    WIDTH = 24

    def __init__(self, total: int, enabled: bool, stream: Optional[TextIO] = None):
        self.total = total
        self.enabled = enabled
        self.stream = stream
        self.done = 0
        self.audio_s = 0.0
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._shown = False
        self._stop = threading.Event()
        self._thread = None

    @property
    def _out(self) -> TextIO:
        return self.stream or sys.stderr

    def start(self) -> None:
        if not self.enabled or self._thread is not None or self._stop.is_set():
            return
        self._thread = threading.Thread(target=self._tick, name="transcribe-progress", daemon=True)
        self._thread.start()
        self._draw()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            self._draw()

    def update(self, done: int) -> None:
        self.done = done
        self._draw()

    def add_audio(self, seconds: float) -> None:
        self.audio_s += seconds

    def _line(self) -> str:
        frac = self.done / self.total if self.total else 1.0
        filled = int(round(frac * self.WIDTH))
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        return (f"[{bar}] {self.done}/{self.total} files  {_clock(self.audio_s)} audio  "
                f"{_clock(time.monotonic() - self.t0)} elapsed")

    def _draw(self) -> None:
        if self._thread is None or self._stop.is_set():
            return
        with self._lock:
            try:
                self._out.write("\r\033[K" + self._line())
                self._out.flush()
                self._shown = True
            except (OSError, ValueError):
                pass

    def _clear(self) -> None:
        if self._shown:
            try:
                self._out.write("\r\033[K")
                self._out.flush()
            except (OSError, ValueError):
                pass
            self._shown = False

    def print(self, text: str, stream: TextIO) -> None:
        """Write `text` to `stream` (stdout) without mixing it with the bar."""
        with self._lock:
            self._clear()
            stream.write(text)
            stream.flush()
        self._draw()

    def error(self, msg: str) -> None:
        with self._lock:
            self._clear()
            _say(msg)
        self._draw()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
        with self._lock:
            self._clear()


def _clock(seconds: float) -> str:
    s = int(seconds)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


if __name__ == "__main__":
    sys.exit(main())

"""The `transcribe` command.

    transcribe AUDIO... [--model M] [--format txt|json|srt|vtt|all] [--output-dir DIR] ...
    transcribe --stream FILE|- [--model M] [--format txt|jsonl] ...   (live: stream_cli.py)
    transcribe serve [--model M]... [--host H] [--port P] ...          (HTTP server: server/cli.py)
    transcribe batch INPUTS... --output-dir DIR [--workers N] [--ray]  (corpus jobs: jobs/cli.py)
    transcribe convert MODEL OUT.gguf [--schema S] [--type T]         (GGUF files: convert.py)

Exit codes: 0 when every input was transcribed; 2 for a usage error, a model that cannot be
loaded, or any input that could not be read or transcribed (the others are still processed and
written); 1 for an internal error; 130 when interrupted. Every error is one line on stderr
(``transcribe: error: ...``); set TRANSCRIBE_DEBUG=1 for the traceback of an internal error.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Optional, TextIO

import transcribe

from . import stream_cli
from .errors import OptionsNotTaken, TranscribeError
from .loading import check_options_offline
from .runtime import configure_process, openmp_waiting
from .cli_args import add_decoding_arguments, add_dtype_argument, decoding_options as _decoding_options
from .cli_args import flag, positive_int as _positive_int
from .writers import WRITERS

PROG = "transcribe"
FORMATS = ("txt", "json", "srt", "vtt")

# A single input at least this long (seconds of audio) gets a progress display too.
LONG_AUDIO_S = 60.0
# Inputs held in memory together (decoded PCM) when --batch-size is not given; the model then
# batches them as it does best (its own default batch size).
GROUP_INPUTS = 8


class _UsageError(Exception):
    pass


def main(argv: Optional[list[str]] = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    # Before anything imports PyTorch (its OpenMP runtime reads the setting once): every subcommand runs
    # models in a process of its own (runtime.openmp_waiting).
    openmp_waiting()
    if argv and argv[0] == "serve":  # `transcribe serve ...` (a file named serve: `./serve`)
        from .server.cli import main as serve

        return serve(argv[1:])
    if argv and argv[0] == "batch":  # `transcribe batch ...`: a corpus into a folder (jobs/cli.py)
        from .jobs.cli import main as run_batch

        return run_batch(argv[1:])
    if argv and argv[0] == "convert":  # `transcribe convert ...`: a checkpoint to GGUF (convert.py)
        from .convert import main as run_convert

        return run_convert(argv[1:])
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        _check(args, parser)
    except SystemExit as e:  # argparse: --help, --version, usage errors (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except _UsageError as e:
        parser.print_usage(sys.stderr)
        _say(f"error: {e}")
        return 2

    progress = _Progress(len(args.audio), enabled=not args.quiet and _isatty(sys.stderr))
    try:
        return stream_cli.run(args) if args.stream is not None else _run(args, progress)
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
        usage="%(prog)s AUDIO... [options]\n"
              "       %(prog)s --stream FILE|- [options]\n"
              "       %(prog)s serve|batch|convert ... (each with its own --help)",
        description="Transcribe speech in audio files with a local model: Whisper, Parakeet (TDT, RNN-T, CTC, "
                    "hybrids) or Granite Speech NAR (--model: a model file or folder, a short name or a hub id).",
        epilog="Other commands: 'transcribe serve' runs an OpenAI-compatible HTTP server with WebSocket "
               "streaming; 'transcribe batch' transcribes a corpus into a folder (resumable, local workers or "
               "Ray); 'transcribe convert' writes a model as a GGUF file. "
               "Exit status: 0 all inputs done, 2 usage error / bad model / any bad input "
               "(the good inputs are still transcribed), 1 internal error, 130 interrupted. "
               "TRANSCRIBE_DEBUG=1 shows tracebacks.",
    )
    p.add_argument("audio", nargs="*", metavar="AUDIO",
                   help="audio or video files (wav, flac, ogg, mp3, m4a, webm, ...); '-' reads stdin")
    p.add_argument("-m", "--model", default=None,
                   help="model file, directory or id (default: Whisper tiny.en, installed with the package)")
    p.add_argument("-f", "--format", default="txt", choices=FORMATS + ("all", "jsonl"),
                   help="output format (default: txt); 'all' needs --output-dir; --stream writes txt or jsonl")
    p.add_argument("-o", "--output-dir", metavar="DIR",
                   help="write <input stem>.<format> files here (created if needed) instead of stdout; "
                        "inputs with the same stem get -2, -3, ... and existing files are kept (see --overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace files of the same name already in --output-dir (default: refuse, before any work)")
    p.add_argument("--batch-size", type=_positive_int, metavar="N",
                   help="inputs decoded together (default: the model's choice for its device and dtype)")
    p.add_argument("--threads", type=_positive_int, metavar="N", help="CPU threads for PyTorch")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="default: cpu")
    add_dtype_argument(p)
    add_decoding_arguments(p)
    stream_cli.add_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    p.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    return p


def _version() -> str:
    v = getattr(transcribe, "__version__", None)
    if isinstance(v, str):
        return v
    try:
        from importlib.metadata import version

        return version("transcribe")
    except Exception:  # noqa: BLE001 - not installed: a source checkout
        return "unknown"


def _check(args, parser) -> None:
    problem = stream_cli.usage_problem(args, parser)
    if problem or (not args.audio and args.stream is None):
        raise _UsageError(problem or "the following arguments are required: AUDIO (or --stream FILE|-)")
    if args.format == "all" and not args.output_dir:
        raise _UsageError("--format all needs --output-dir")
    if args.audio.count("-") > 1:
        raise _UsageError("'-' (standard input) can be given only once")
    if args.temperature_increment is not None and args.temperature_increment < 0:
        raise _UsageError("--temperature-increment must not be negative")
    if args.nbest is not None and args.nbest > (args.beam_size or 1):
        raise _UsageError(f"--nbest {args.nbest} needs --beam-size of at least {args.nbest}")
    if args.hotword_weight is not None and not args.hotwords:
        raise _UsageError("--hotword-weight needs --hotwords")
    if args.lm_weight is not None and not args.lm:
        raise _UsageError("--lm-weight needs --lm")
    if args.lm and not Path(args.lm).is_file():
        raise _UsageError(f"--lm {args.lm}: no such file")


# ---------------------------------------------------------------------------------------------


def _run(args, progress: "_Progress") -> int:
    formats = list(FORMATS) if args.format == "all" else [args.format]
    out_dir = None
    stems = _output_stems(args.audio)
    if args.output_dir:
        out_dir = Path(args.output_dir)
        problem = _check_output_dir(out_dir, stems, formats, args.overwrite)
        if problem:
            _say(f"error: {problem}")
            return 2
        for name, stem in zip(args.audio, stems):
            default = "stdin" if name == "-" else (Path(name).stem or "audio")
            if stem != default:
                _say(f"note: {_display(name)} is written as {stem}.* ({default}.* is another input's)")

    # What can be told before the model loads (minutes for a large one) is told first: inputs that are not
    # there, and options a local model's family does not take.
    try:  # a local model's options, before PyTorch is imported
        check_options_offline(args.model, _decoding_options(args))
    except OptionsNotTaken as e:
        _say(f"error: {e.spelled(flag)}")
        return 2
    missing = [name for name in args.audio if name != "-" and not Path(name).exists()]
    for name in missing:
        _say(f"error: {name}: no such file")
    if missing and len(missing) == len(args.audio):
        return 2

    configure_process(args.threads)  # a program of its own: threads and allocator for the whole run
    try:
        model = transcribe.load_model(args.model, device=args.device, dtype=args.dtype, threads=args.threads)
    except TranscribeError as e:
        _say(f"error: {_one_line(str(e))}")
        return 2
    try:  # the decoding options, checked once before any input
        model.check_options(**_decoding_options(args))
    except OptionsNotTaken as e:
        _say(f"error: {e.spelled(flag)}")
        return 2
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

    cue_options = dict(max_line_width=args.max_line_width, max_line_count=args.max_line_count)

    def write(fmt: str, result) -> str:
        return WRITERS[fmt](result, **cue_options) if fmt in ("srt", "vtt") else WRITERS[fmt](result)

    def emit(index: int, result) -> None:
        nonlocal failed, stdout_docs
        if out_dir is None:
            text = write(formats[0], result)
            if stdout_docs and formats[0] in ("srt", "vtt"):
                text = "\n" + text
            progress.print(text, sys.stdout)
            stdout_docs += 1
            return
        for fmt in formats:
            path = out_dir / f"{stems[index]}.{fmt}"
            try:
                with open(path, "w" if args.overwrite else "x", encoding="utf-8", newline="\n") as f:
                    f.write(write(fmt, result))
            except FileExistsError:
                progress.error(f"error: {path}: appeared while running; not overwritten (use --overwrite)")
                failed += 1
            except OSError as e:
                progress.error(f"error: {path}: cannot write: {e.strerror or e}")
                failed += 1

    def run(group: list[tuple[int, "object"]]) -> None:
        nonlocal failed, done
        indices = [i for i, _ in group]
        results = _transcribe_batch(model, args, [p for _, p in group], [args.audio[i] for i in indices],
                                    timestamps, progress)
        for index, result in zip(indices, results):
            if result is None:
                failed += 1
            else:
                emit(index, result)
            done += 1
            progress.update(done)

    from .audio import GROUP_AUDIO_S, load_audio  # numpy and the decoders: not before the checks above

    # Inputs are decoded one at a time and run in groups of at most --batch-size (else GROUP_INPUTS) inputs and
    # GROUP_AUDIO_S seconds of audio (a longer input runs alone), so memory holds one group's PCM.
    group: list = []
    held = 0
    failed += len(missing)
    done += len(missing)
    for index, name in enumerate(args.audio):
        if name in missing:
            continue
        try:
            pcm = load_audio(name, sample_rate=rate)
        except TranscribeError as e:
            progress.error(f"error: {_one_line(str(e))}")
            failed += 1
            done += 1
            progress.update(done)
            continue
        if len(pcm) >= LONG_AUDIO_S * rate:
            progress.start()
        if group and (len(group) >= (args.batch_size or GROUP_INPUTS) or held + len(pcm) > GROUP_AUDIO_S * rate):
            run(group)
            group, held = [], 0
        progress.add_audio(len(pcm) / rate)
        group.append((index, pcm))
        held += len(pcm)
    if group:
        run(group)

    progress.close()
    return 2 if failed else 0


def _check_output_dir(out_dir: Path, stems: list[str], formats: list[str], overwrite: bool) -> Optional[str]:
    """Why the outputs cannot be written (checked before any work), or None."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"cannot create output directory {out_dir}: {e.strerror or e}"
    if not out_dir.is_dir():
        return f"output directory {out_dir} is not a directory"
    try:
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".transcribe-", suffix=".tmp"):
            pass
    except OSError as e:
        return f"cannot write in output directory {out_dir}: {e.strerror or e}"
    if not overwrite:
        taken = [out_dir / f"{stem}.{fmt}" for stem in stems for fmt in formats if (out_dir / f"{stem}.{fmt}").exists()]
        if taken:
            more = f" and {len(taken) - 3} more" if len(taken) > 3 else ""
            return (f"{', '.join(str(p) for p in taken[:3])}{more} already exist; "
                    "not overwritten (use --overwrite to replace them, or another --output-dir)")
    return None


def _transcribe_batch(model, args, pcms, names, timestamps, progress) -> list:
    """Transcripts for `pcms`, or None for an input the model refused (reported on stderr)."""
    try:
        sizing = {} if args.batch_size is None else {"batch_size": args.batch_size}
        results = list(model.transcribe(pcms, timestamps=timestamps, **sizing, **_decoding_options(args)))
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


def _output_stems(inputs: list[str]) -> list[str]:
    """An output stem per input: its own ('stdin' for '-'), or, when an earlier input has it, the
    first of stem-2, stem-3, ... that is no input's own stem and not yet given, so that no two
    inputs share an output file (a/x.wav, b/x.wav, x-2.wav -> x, x-3, x-2)."""
    own = ["stdin" if name == "-" else (Path(name).stem or "audio") for name in inputs]
    reserved, used, out = set(own), set(), []
    for stem in own:
        name, n = stem, 1
        while name in used or (n > 1 and name in reserved):
            n += 1
            name = f"{stem}-{n}"
        used.add(name)
        out.append(name)
    return out


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

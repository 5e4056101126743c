"""The `transcribe` command.

    transcribe AUDIO... [--model M] [--format txt|json|srt|vtt|rttm|all] [--output-dir DIR] ...
    transcribe AUDIO... --diarize [--diarizer MODEL] [--num-speakers N] ...  (who spoke when: cli_args.py)
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
import traceback
from pathlib import Path
from typing import Optional

import transcribe

from . import stream_cli
from .errors import OptionsNotTaken, OptionValueError, TranscribeError
from .loading import check_options_offline
from .runtime import configure_process, openmp_waiting
from .writers import no_room
from .cli_args import add_decoding_arguments, add_diarize_arguments, add_dtype_argument, decoding_options as _decoding_options
from .cli_args import diarize_options, diarize_problem, flag, lm_problem, positive_int as _positive_int, value_flag

PROG = "transcribe"
FORMATS = ("txt", "json", "srt", "vtt")  # --format all; with --diarize, rttm too
SPEAKER_FORMATS = ("rttm",)  # speaker turns: a diarized transcript's (--diarize, or a diarizer model)

# A single input at least this long (seconds of audio) gets a progress display too.
LONG_AUDIO_S = 60.0


class _UsageError(Exception):
    pass


class _BadFile(_UsageError):
    """A file an option names that is not there or not a file: one line, no usage (the command is right)."""


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
        if not isinstance(e, _BadFile):
            parser.print_usage(sys.stderr)
        _say(f"error: {e}")
        return 2

    try:
        return stream_cli.run(args) if args.stream is not None else _run(args)
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (`| head`): stop quietly.
        try:  # so that the interpreter's final flush of stdout does not fail again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 1
    except OSError as e:
        if not no_room(e):
            raise
        # stdout (a file on a full disk) or a file of --output-dir: no room is the user's to make
        _say(f"error: {e.filename or 'standard output'}: cannot write: {e.strerror or e}")
        return 2
    except Exception as e:  # noqa: BLE001 - the one place that turns anything left into one line
        _say(f"internal error: {type(e).__name__}: {_one_line(str(e))}")
        if os.environ.get("TRANSCRIBE_DEBUG") == "1":
            traceback.print_exc()
        return 1


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
    p.add_argument("-f", "--format", default="txt", choices=FORMATS + SPEAKER_FORMATS + ("all", "jsonl"),
                   help="output format (default: txt); rttm: speaker turns (--diarize, or a diarizer model); "
                        "'all' needs --output-dir; --stream writes txt or jsonl")
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
    add_diarize_arguments(p)
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
    if lm_problem(args.lm):
        raise _BadFile(lm_problem(args.lm))
    problem = diarize_problem(args)
    if problem:
        raise _UsageError(problem)


# ---------------------------------------------------------------------------------------------


def _run(args) -> int:
    """`transcribe AUDIO...`: the inputs run through the batch jobs' executor in this process
    (jobs/runner.py in_order: local.Inline, the worker's retry one by one), named by the jobs' rule
    (jobs/inputs.py files), written in the order given (jobs/job.py Outputs) as each is done: files in
    --output-dir, else documents on stdout."""
    from .jobs.inputs import files

    if args.format == "all":
        formats = list(FORMATS) + (list(SPEAKER_FORMATS) if args.diarize else [])
    else:
        formats = [args.format]
    items = files(args.audio)
    if args.output_dir:
        problem = _check_output_dir(Path(args.output_dir), [it.id for it in items], formats, args.overwrite)
        if problem:
            _say(f"error: {problem}")
            return 2
        _say_renamed(items)

    # What can be told before the model loads (minutes for a large one) is told first: inputs that are not
    # there, and options a local model's family does not take.
    try:  # a local model's options, before PyTorch is imported
        check_options_offline(args.model, diarize_options(args).family_options(_decoding_options(args)))
    except OptionsNotTaken as e:
        _say(f"error: {_one_line(e.spelled(flag))}{diarize_options(args).hint(e.names)}")
        return 2
    except OptionValueError as e:
        _say(f"error: {_one_line(e.spelled(value_flag))}")
        return 2
    from .audio_source import source_problem

    # Inputs that are not there, with the reason (no such file, a symbolic-link loop, a link to nothing);
    # stat only (a named pipe is not waited on). A directory or a device fails in its turn, saying why.
    problems = {it.index: source_problem(it.path)[0] for it in items
                if it.path != "-" and not os.path.exists(it.path)}
    todo = [it for it in items if not problems.get(it.index)]
    for it in items:
        if problems.get(it.index):  # no such file, too many levels of symbolic links, not a regular file
            _say(f"error: {it.path}: {problems[it.index]}")
    if not todo:
        return 2

    configure_process(args.threads)  # a program of its own: threads and allocator for the whole run
    worker = _worker(args, formats)
    if worker is None:
        return 2
    return _transcribe(args, worker, items, todo, formats)


def _worker(args, formats: list[str]):
    """The model, loaded, with the decoding options checked once before any input; None when it cannot
    be (said on stderr)."""
    from .jobs.work import Options, Worker

    # The command's rules: no cuts (the model takes any length), timestamps only when a format shows them, a
    # list as the model takes it, and only a TranscribeError is an input's failure (else exit 1).
    # --diarize: the diarizer's keywords ride with the decoding options (Recognizer.transcribe takes them), whole
    # inputs only (piece_s 0: a diarizer's speaker labels hold within one run), and times always (speakers go
    # to words and segments by their times).
    diarize = diarize_options(args)
    options = Options(model=args.model, device=args.device, dtype=args.dtype, threads=args.threads,
                      batch_size=args.batch_size, piece_s=0, decoding={**diarize.family_options(_decoding_options(args)), **diarize.keywords},
                      timestamps=formats != ["txt"] or diarize.on, batch_lists=False, contain=False)
    try:
        worker = Worker(options)
    except OptionsNotTaken as e:
        _say(f"error: {_one_line(e.spelled(flag))}{diarize.hint(e.names)}")
        return None
    except OptionValueError as e:
        _say(f"error: {_one_line(e.spelled(value_flag))}")
        return None
    except TranscribeError as e:
        _say(f"error: {_one_line(str(e))}")
        return None
    if set(formats) & set(SPEAKER_FORMATS) and not diarize.on and not getattr(worker.model, "diarizer", False):
        from .writers import NOT_DIARIZED

        _say(f"error: {NOT_DIARIZED}: {worker.model.name} is not a diarizer")
        return None
    return worker


def _transcribe(args, worker, items: list, todo: list, formats: list[str]) -> int:
    from . import audio
    from .jobs.inputs import probe_duration
    from .jobs.job import Outputs, task_inputs
    from .jobs.progress import Progress
    from .jobs.runner import in_order

    long = len(todo) == 1 and todo[0].path != "-" and (probe_duration(todo[0].path) or 0.0) >= LONG_AUDIO_S
    shown = (len(items) > 1 or long) and not args.quiet and _isatty(sys.stderr)
    progress = Progress(len(items), None, enabled=shown)  # lengths are known as inputs are decoded
    cues = dict(max_line_width=args.max_line_width, max_line_count=args.max_line_count)
    outputs = Outputs(Path(args.output_dir or "."), formats, cues, replace=args.overwrite)
    emit = _Emit(outputs, progress, to_stdout=not args.output_dir)
    failed = len(items) - len(todo)
    try:
        progress.update(failed, 0.0)
        for outcome in in_order(todo, worker, task_inputs(args.batch_size, worker.family), audio.GROUP_AUDIO_S):
            failed += not emit(outcome)
            progress.update(1, outcome.duration or 0.0)
    finally:
        progress.close()
    return 2 if failed else 0


class _Emit:
    """Writes an input's outcome: its files (or its document on stdout), or its error line. True when
    it was written."""

    def __init__(self, outputs, progress, to_stdout: bool):
        self.outputs, self.progress, self.to_stdout = outputs, progress, to_stdout
        self.docs = 0  # documents on stdout so far

    def __call__(self, outcome) -> bool:
        if outcome.error is not None:
            name = _display(outcome.item.path)
            why = outcome.error if outcome.error.startswith(f"{name}: ") else f"{name}: {outcome.error}"
            self.progress.write(f"{PROG}: error: {why}")
            return False
        if self.to_stdout:
            fmt = self.outputs.formats[0]
            text = self.outputs.render(fmt, outcome.result, outcome.item.id)
            self.progress.print("\n" + text if self.docs and fmt in ("srt", "vtt") else text, sys.stdout)
            self.docs += 1
            return True
        try:
            self.outputs.write(outcome.item, outcome.result)
            return True
        except FileExistsError as e:
            self.progress.write(f"{PROG}: error: {e.filename}: appeared while running; not overwritten "
                                "(use --overwrite)")
        except OSError as e:
            if no_room(e):  # a full disk: the inputs after it would fail the same way (main says it)
                raise
            self.progress.write(f"{PROG}: error: {e.filename or self.outputs.out_dir}: cannot write: "
                                f"{e.strerror or e}")
        return False


def _say_renamed(items: list) -> None:
    """A note for each input whose files are not named by its own stem (another input has it)."""
    ids = {it.id for it in items}
    for it in items:
        stem = "stdin" if it.path == "-" else (Path(it.path).stem or "audio")
        if it.id != stem:
            _say(f"note: {_display(it.path)} is written as {it.id}.*"
                 + (f" ({stem}.* is another input's)" if stem in ids else ""))


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


if __name__ == "__main__":
    sys.exit(main())

"""`transcribe batch`: transcribe a corpus into a folder, resumably, here or on a Ray cluster.

    transcribe batch INPUTS... | --manifest FILE.jsonl  --output-dir DIR [--model M] [--format json,srt]
                     [--workers N] [--threads N] [--ray [ADDRESS]] [--resume] [--overwrite]
                     [--batch-size N] [--piece-s S] [--device cpu|cuda] [--dtype T] [decoding options] [-q]
                     [--diarize [--diarizer MODEL] [--num-speakers N] [the diarizer's options]]

Exit status: 0 every input transcribed; 3 the job ran to its end but some inputs failed (each has
its reason in DIR/results.jsonl and on stderr; run again with --resume to retry them); 2 a job that
cannot start (usage error, no such input, a bad manifest, a model that does not load, an output
folder in the way); 1 an internal error; 130 interrupted (finished inputs are kept: --resume).
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Optional

from ..errors import OptionsNotTaken, OptionValueError, TranscribeError

PROG = "transcribe batch"
EXIT_SOME_FAILED = 3
FORMATS = ("txt", "json", "srt", "vtt")
SPEAKER_FORMATS = ("rttm",)  # speaker turns: with --diarize (all includes it then), or a diarizer model


def _parser() -> argparse.ArgumentParser:
    from ..cli_args import add_decoding_arguments, add_diarize_arguments, add_dtype_argument
    from ..cli_args import positive_int as _positive_int

    p = argparse.ArgumentParser(
        prog=PROG,
        description="Transcribe many files into a folder: each result is written as soon as it is done, with one "
                    "line per input in DIR/results.jsonl; --resume goes on after a crash; --ray spreads the job "
                    "over a Ray cluster.",
        epilog="Exit status: 0 all inputs done, 3 some inputs failed (see DIR/results.jsonl), 2 the job could not "
               "start, 1 internal error, 130 interrupted.")
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="audio files, directories (searched recursively for audio files) or globs ('data/**/*.flac')")
    p.add_argument("--manifest", metavar="FILE.jsonl",
                   help='JSONL, one {"audio": path, "id": ...} a line (relative paths from the manifest\'s folder); '
                        "other fields are carried to results.jsonl")
    p.add_argument("-o", "--output-dir", required=True, metavar="DIR",
                   help="where <id>.<format> files and results.jsonl go (created if needed)")
    p.add_argument("-m", "--model", default=None,
                   help="model file, directory, short name or hub id (default: Whisper tiny.en, installed)")
    p.add_argument("-f", "--format", default="json", metavar="F[,F...]",
                   help="output formats, comma-separated: txt, json, srt, vtt, rttm (speaker turns: --diarize, or a "
                        "diarizer model), or all (rttm too with --diarize) (default: json)")
    p.add_argument("--workers", type=_positive_int, metavar="N",
                   help="worker processes, each with the model loaded once (default: the fastest measured here; "
                        "with --ray: actors, default one per CPU's worth of threads)")
    p.add_argument("--threads", type=_positive_int, metavar="N",
                   help="PyTorch threads per worker (default: cores / workers; workers x threads <= cores)")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="run on Ray Data: alone, a Ray instance on this machine; with an address (auto, "
                        "host:6379, ray://head:10001), a running cluster (needs transcribe[ray]); a value that "
                        "is no address is an input")
    p.add_argument("--resume", action="store_true",
                   help="go on with the job in DIR: skip inputs already ok in results.jsonl, retry the failed")
    p.add_argument("--overwrite", action="store_true", help="replace output files already in DIR")
    p.add_argument("--batch-size", type=_positive_int, metavar="N",
                   help="inputs (or pieces) a model call takes together (default: the model's choice; 8 a task)")
    p.add_argument("--piece-s", type=float, metavar="S",
                   help="cut inputs longer than S seconds at pauses into pieces of at most S, run in parallel and "
                        "joined (default: Whisper 30, Parakeet 120, Granite 90; 0: never cut; --diarize and "
                        "diarizer models: never cut, speaker labels do not join across pieces)")
    p.add_argument("--vad", dest="detector", default="auto", choices=("auto", "silero", "energy"),
                   help="pause detector for the cuts (default: auto, Silero VAD when installed)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="default: cpu")
    add_dtype_argument(p)
    add_decoding_arguments(p)
    add_diarize_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    from ..cli_args import decoding_options, diarize_options, diarize_problem

    parser = _parser()
    try:
        args = parse(sys.argv[1:] if argv is None else argv, parser)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    if args.format == "all":
        formats = list(FORMATS) + (list(SPEAKER_FORMATS) if args.diarize else [])
    else:
        formats = [f.strip() for f in args.format.split(",") if f.strip()]
    problem = None
    if not args.inputs and not args.manifest:
        problem = "give INPUTS (files, directories, globs) or --manifest FILE.jsonl"
    elif not formats or any(f not in FORMATS + SPEAKER_FORMATS for f in formats):
        problem = f"--format {args.format}: choose from {', '.join(FORMATS + SPEAKER_FORMATS)} (comma-separated) or all"
    elif args.nbest is not None and args.nbest > (args.beam_size or 1):
        problem = f"--nbest {args.nbest} needs --beam-size of at least {args.nbest}"
    elif args.hotword_weight is not None and not args.hotwords:
        problem = "--hotword-weight needs --hotwords"
    elif args.lm_weight is not None and not args.lm:
        problem = "--lm-weight needs --lm"
    else:
        problem = diarize_problem(args)
    if problem:
        parser.print_usage(sys.stderr)
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 2
    from ..cli_args import lm_problem

    if lm_problem(args.lm):  # the command is right, the file it names is not: one line
        print(f"{PROG}: error: {lm_problem(args.lm)}", file=sys.stderr)
        return 2

    from .runner import batch

    progress = not args.quiet and _isatty(sys.stderr)
    diarize = diarize_options(args)  # --diarize: the speaker keywords and the diarizer's own options
    try:
        s = batch(args.inputs, args.output_dir, manifest=args.manifest, model=args.model, formats=formats,
                  workers=args.workers, threads=args.threads, ray=args.ray, resume=args.resume,
                  overwrite=args.overwrite, device=args.device, dtype=args.dtype, batch_size=args.batch_size,
                  piece_s=args.piece_s, detector=args.detector, max_line_width=args.max_line_width,
                  max_line_count=args.max_line_count, progress=progress,
                  **diarize.call_options(decoding_options(args)))
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted; finished inputs are in {args.output_dir} (--resume goes on)", file=sys.stderr)
        return 130
    except (OptionsNotTaken, OptionValueError) as e:  # named by the command's flags, in the words of every surface
        from ..cli_args import flag, value_flag

        hint = "" if isinstance(e, OptionValueError) else diarize.hint(e.names)
        print(f"{PROG}: error: {_one_line(e.spelled(value_flag if isinstance(e, OptionValueError) else flag))}{hint}",
              file=sys.stderr)
        return 2
    except TranscribeError as e:
        print(f"{PROG}: error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - one line, as the other commands
        import os
        import traceback

        if os.environ.get("TRANSCRIBE_DEBUG"):
            traceback.print_exc()
        print(f"{PROG}: internal error: {type(e).__name__}: {_one_line(str(e))}", file=sys.stderr)
        return 1
    if not progress:  # on a terminal the bar said them as they came
        for ident, why in s.errors:
            print(f"{PROG}: error: {ident}: {why}", file=sys.stderr)
    if not args.quiet:
        where = f"{s.workers} {'Ray actor' if s.mode == 'ray' else 'worker'}{'s' * (s.workers > 1)}"
        print(f"{PROG}: {s.ok} ok, {s.failed} failed, {s.skipped} already done; {s.audio_s / 3600:.2f} h of audio "
              f"in {s.wall_s:.1f} s ({s.speed:.1f}x real time, {where} x {s.threads} thread{'s' * (s.threads > 1)}); "
              f"{s.results}",
              file=sys.stderr)
    return EXIT_SOME_FAILED if s.failed else 0


# What `--ray VALUE` takes as a Ray address: auto, local, ray://..., host:port ([v6]:port).
_RAY_ADDRESS = re.compile(r"(auto|local|ray://\S+|(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?):[0-9]{1,5})")


def parse(argv: list[str], parser: Optional[argparse.ArgumentParser] = None) -> argparse.Namespace:
    """The command's arguments. `--ray` takes an optional address, so argparse gives it the input that
    follows (`--ray archive/ -o out`): a value that is not an address is put back among the inputs,
    where it stood, and Ray runs on this machine."""
    args = (parser or _parser()).parse_args(argv)
    if args.ray is not None and not _RAY_ADDRESS.fullmatch(args.ray):
        value, before = args.ray, 0
        for k, tok in enumerate(argv):  # the inputs given before it stay before it
            opt, eq, attached = tok.partition("=")
            if eq and attached == value and _is_ray_option(opt):
                start = k  # --ray=VALUE
            elif tok == value and k > 0 and _is_ray_option(argv[k - 1]):
                start = k - 1  # --ray VALUE
            else:
                continue
            before = _count_in_order(args.inputs, argv[:start])
            break
        args.inputs.insert(before, value)
        args.ray = "local"
    return args


def _is_ray_option(tok: str) -> bool:
    return len(tok) >= 4 and "--ray".startswith(tok)  # argparse takes --ra for --ray


def _count_in_order(inputs: list[str], tokens: list[str]) -> int:
    """How many of `inputs` (in order) are among `tokens`."""
    n = 0
    for tok in tokens:
        if n < len(inputs) and tok == inputs[n]:
            n += 1
    return n


def _one_line(s: str) -> str:
    return " ".join(s.split()) or "(no message)"


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False

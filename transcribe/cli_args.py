"""The command line's shared options: decoding and subtitle arguments, and what they become as
`transcribe()` keywords (used by `transcribe` and `transcribe batch`)."""
from __future__ import annotations

import argparse


def add_decoding_arguments(p: argparse.ArgumentParser) -> None:
    """The decoding and subtitle options (shared with `transcribe batch`)."""
    b = p.add_argument_group("Beam search")
    b.add_argument("--beam-size", type=positive_int, metavar="N", help="beam search with N beams (default: greedy)")
    b.add_argument("--nbest", type=positive_int, metavar="N",
                   help="Parakeet: return the N best hypotheses, ranked, in the json output (N <= --beam-size)")
    b.add_argument("--beam", choices=("malsd", "default", "maes"),
                   help="Parakeet transducer search: malsd (batched, fast; the default), default or maes "
                        "(NeMo's algorithms); the CTC head has one beam search")
    b.add_argument("--no-score-norm", dest="score_norm", action="store_false", default=None,
                   help="Parakeet: rank hypotheses by total score, not score per token")
    b.add_argument("--hotwords", metavar="A,B,...",
                   help="Parakeet: comma-separated words or phrases to boost in the beam search")
    b.add_argument("--hotword-weight", type=float, metavar="W",
                   help="Parakeet: log-probability bonus per matched hotword token (default: 1.5)")
    b.add_argument("--lm", metavar="FILE.arpa",
                   help="Parakeet CTC: word n-gram language model (ARPA) for the beam search")
    b.add_argument("--lm-weight", type=float, metavar="W", help="weight of --lm (default: 0.5)")
    w = p.add_argument_group("Whisper decoding")
    w.add_argument("--patience", type=float, metavar="P", help="beam search patience (default: 1.0)")
    w.add_argument("--language", metavar="LANG", help="language code of multilingual models (e.g. en, de)")
    w.add_argument("--task", choices=("transcribe", "translate"), help="default: transcribe")
    w.add_argument("--initial-prompt", metavar="TEXT", help="text that conditions the first window")
    w.add_argument("--temperature", type=temperatures, metavar="T[,T...]",
                   help="sampling temperature; one value T falls back from T in steps of "
                        "--temperature-increment up to 1.0, a list is the whole schedule (default: 0)")
    w.add_argument("--temperature-increment", type=float, default=None, metavar="D",
                   help="fallback step after a failed window (default: 0.2; 0 turns fallback off)")
    w.add_argument("--word-timestamps", action="store_true",
                   help="time every word (json output; Parakeet models always give word times)")
    w.add_argument("--batched", action="store_true", default=None,
                   help="cut each input at pauses into windows of at most 30 s and decode them together "
                        "(faster on long audio; no text carried from one window to the next)")
    c = p.add_argument_group("Subtitles (srt, vtt)")
    c.add_argument("--max-line-width", type=positive_int, default=42, metavar="N",
                   help="characters a subtitle line holds at most (default: 42)")
    c.add_argument("--max-line-count", type=positive_int, default=2, metavar="N",
                   help="lines a subtitle cue holds at most (default: 2)")


def flag(option: str) -> str:
    """The command's flag of a decoding option (`initial_prompt` -> `--initial-prompt`), to name an
    option a model refuses (errors.OptionsNotTaken.spelled)."""
    return "--no-score-norm" if option == "score_norm" else "--" + option.replace("_", "-")


def positive_int(s: str) -> int:
    try:
        n = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {s!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def temperatures(s: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in s.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid temperature list: {s!r}") from None
    if any(not (0.0 <= v <= 10.0) for v in values):
        raise argparse.ArgumentTypeError(f"temperatures must lie in [0, 10], got {s!r}")
    return values


def decoding_options(args) -> dict:
    """The family-specific options the user gave (only those, so other families are not bothered)."""
    names = ("beam_size", "patience", "language", "task", "initial_prompt", "head", "nbest", "beam", "score_norm",
             "hotwords", "hotword_weight", "lm", "lm_weight", "batched")
    out = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    if args.temperature is not None or args.temperature_increment is not None:
        increment = 0.2 if args.temperature_increment is None else args.temperature_increment
        out["temperature"] = schedule(args.temperature or (0.0,), increment)
    if args.word_timestamps:
        out["word_timestamps"] = True
    return out


def schedule(temps: tuple[float, ...], increment: float) -> tuple[float, ...]:
    """openai-whisper's fallback schedule: from T up to 1.0 in steps of `increment`."""
    if len(temps) > 1 or increment <= 0:
        return temps
    out = [temps[0]]
    while out[-1] + increment <= 1.0 + 1e-6:
        out.append(round(out[-1] + increment, 6))
    return tuple(out)


DTYPES = ("float32", "bfloat16", "float16", "int8", "auto")


def add_dtype_argument(p) -> None:
    """--dtype, as the command, the server and batch jobs take it (load_model's dtype)."""
    p.add_argument("--dtype", choices=DTYPES,
                   help="compute precision (default: the model's choice for the device, float32 on a CPU; "
                        "auto: the fastest measured for this CPU, which changes results slightly: README)")

"""Options of a family's `transcribe()` and `stream()`, each declared once: a field of the family's frozen
dataclass (`<family>/options.py`), made with `option(...)`, which says how the command line and the
server's form spell it (`Surface`). The command's flags, `--stream`'s, the server's extra form fields, the
WebSocket's session options and batch jobs are all built from these declarations (`loading.FAMILIES`
exposes each family's classes); nothing outside a family's folder lists option names.

A family's dataclass checks the values that do not depend on a loaded model in `__post_init__`
(raising `errors.OptionValueError`); its recognizer checks the rest (a head the model has, a language
it knows)."""
from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .audio_limits import MAX_RATE, MIN_RATE
from .errors import OptionsNotTaken, OptionValueError


@dataclass(frozen=True)
class Surface:
    """How an option is given from outside Python.

    help: the command's help text. parse: text (a flag's or a form field's value) -> the option's value
    (None: the text itself). flag: the command's flag (default `--name-with-dashes`). action: argparse's
    action for a flag without a value ("store_true", "store_false"). form: the server's form field
    ("" the option's name; None: not a form field). command: whether the command has a flag for it.
    implies: options the command also passes, when the flag is given and they are not (the command's
    own defaults, e.g. Whisper's temperature fallback step)."""

    help: str
    parse: Optional[Callable[[str], Any]] = None
    flag: Optional[str] = None
    action: Optional[str] = None
    choices: Optional[tuple] = None
    metavar: Optional[str] = None
    form: Optional[str] = ""
    command: bool = True
    implies: tuple = ()

    def flag_of(self, name: str) -> str:
        return self.flag or "--" + name.replace("_", "-")

    def form_of(self, name: str) -> Optional[str]:
        return None if self.form is None else (self.form or name)


def option(default: Any = None, **surface) -> Any:
    """A field of a family's options dataclass, with its `Surface` (keywords as `Surface`'s)."""
    return dataclasses.field(default=default, metadata={"surface": Surface(**surface)})


def names(options_class) -> frozenset:
    """The option names a family's options dataclass takes."""
    return frozenset(f.name for f in dataclasses.fields(options_class))


def surfaces(options_class) -> dict[str, Surface]:
    """name -> Surface of every field of an options dataclass that has one (in declaration order)."""
    return {f.name: f.metadata["surface"] for f in dataclasses.fields(options_class) if "surface" in f.metadata}


def build(options_class, model_name: str, kind: str, given: dict):
    """`options_class(**given)`, refusing the names it does not take with `errors.OptionsNotTaken` (which
    names the family) and a value it rejects with `errors.OptionValueError`."""
    refused = set(given) - names(options_class)
    if refused:
        raise OptionsNotTaken(model_name, kind, refused)
    try:
        return options_class(**given)
    except (TypeError, ValueError) as e:  # a check in __post_init__ that raised a plain error
        raise OptionValueError("", str(e)) from None


# ------------------------------------------------------------------------------ value checks

# Bounds every family shares (each family's own maxima are in its options.py, said in its help texts).
# An array input's rate (the WebSocket's bounds too): the rates any file is accepted at (audio_limits.py: no
# recording is below 1 kHz or above 768 kHz); a rate far outside is a wrong argument, and resampling 1 Hz
# "audio" to 16 kHz multiplies its size 16,000 times.
SAMPLE_RATES = (MIN_RATE, MAX_RATE)
# Inputs (or windows) a call decodes together: far above what fills any accelerator (8-64 are usual); a larger
# batch only asks for memory at once.
MAX_BATCH_SIZE = 512
# Beams (and Whisper's samples per window): openai-whisper decodes with 5, NeMo's beams are 4-8; accuracy stops
# improving by about 10, while a search's time and memory grow with each (Whisper's 1,000 beams: 291 s for 11 s
# of audio; Parakeet's 10^9: 9 GB in 4 s).
MAX_BEAM = 64
WHY_BEAM = "accuracy stops improving by about 10; time and memory grow with each"


def positive_int(name: str, value, allow_none: bool = True, most: Optional[int] = None, why: str = "") -> None:
    """Raises OptionValueError unless `value` is an integer of at least 1 and at most `most` (None: no
    maximum), or None when allowed; `why` says why the maximum is what it is."""
    integer(name, value, 1, most, allow_none, why)


def integer(name: str, value, least: int, most: Optional[int] = None, allow_none: bool = True,
            why: str = "") -> None:
    """Raises OptionValueError unless `value` is an integer (not a bool) in [least, most] (None: no
    maximum), or None when allowed; `why` says why the maximum is what it is."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise OptionValueError(name, f"{name} must be an integer, got {_shown(value)}")
    if value < least:
        word = "a positive integer" if least == 1 else f"at least {least}"
        raise OptionValueError(name, f"{name} must be {word}{_because(why)}, got {value}")
    if most is not None and value > most:
        raise OptionValueError(name, f"{name} must be at most {most}{_because(why)}, got {value}")


def number(name: str, value, least: Optional[float] = None, most: Optional[float] = None, allow_none: bool = True,
           above: bool = False, why: str = "") -> float:
    """`value` as a float, or None when allowed: raises OptionValueError unless it is a finite real number
    (not a bool, NaN or infinity) in [least, most] ((least, most] with `above`; a None bound is no bound);
    `why` says why the bounds are what they are."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OptionValueError(name, f"{name} must be a number, got {_shown(value)}")
    v = float(value)
    if not math.isfinite(v):
        raise OptionValueError(name, f"{name} must be a finite number, got {v}")
    low = least is not None and (v <= least if above else v < least)
    if low or (most is not None and v > most):
        raise OptionValueError(name, f"{name} must lie in {_interval(least, most, above)}{_because(why)}, "
                               f"got {value:g}")
    return v


def sample_rate(value) -> None:
    """The `sample_rate` of array inputs: None (the model's) or a whole number of Hz in SAMPLE_RATES."""
    integer("sample_rate", value, SAMPLE_RATES[0], SAMPLE_RATES[1],
            why=" (no recording is below 1 kHz or above 768 kHz; a rate far outside is a wrong argument)")


def text(name: str, value, most: int, allow_none: bool = True, why: str = "") -> None:
    """Raises OptionValueError unless `value` is a string of at most `most` characters (or None when allowed)."""
    if value is None and allow_none:
        return
    if not isinstance(value, str):
        raise OptionValueError(name, f"{name} must be text, got {_shown(value)}")
    if len(value) > most:
        raise OptionValueError(name, f"{name} must be at most {most} characters{_because(why)}, got {len(value)}")


def _interval(least, most, above: bool) -> str:
    if most is None:
        return f"{'>' if above else '>='} {least:g}" if least is not None else "any"
    if least is None:
        return f"<= {most:g}"
    return f"{'(' if above else '['}{least:g}, {most:g}]"


def _because(why: str) -> str:
    return why if not why or why.startswith(" ") else f" ({why})"


def _shown(value) -> str:
    """A value in a message, cut short (a hostile value may be long)."""
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def boolean(name: str, value) -> None:
    if not isinstance(value, bool):
        raise OptionValueError(name, f"{name} must be True or False, got {value!r}")


# ------------------------------------------------------------------------------ text parsers

def parse_positive_int(s: str) -> int:
    try:
        n = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {s!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def parse_bool(s: str) -> bool:
    """A form's or flag's text as a boolean: true/false, 1/0, yes/no, on/off (any case)."""
    t = str(s).strip().lower()
    if t in ("true", "1", "yes", "on"):
        return True
    if t in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {s!r}")


# ------------------------------------------------------------------------------ utterance sessions

MAX_PAUSE_S = 10.0
DEFAULT_PAUSE_S = 0.5


@dataclass(frozen=True)
class UtteranceStreamFields:
    """The options of a live session cut at pauses (transcribe/utterances.py), for a family whose model gives
    no word times: pause_s (the silence that ends an utterance, default 0.5 s), partial_s (decode the open
    utterance every N seconds for the tentative text; default off); the family's transcribe() options decode
    every utterance (its max_piece_s bounds an utterance without a pause). A family's stream options are
    `class XStreamOptions(UtteranceStreamFields, XOptions)` (this class first, so its fields win)."""

    pause_s: Optional[float] = option(None, help="seconds of silence that end an utterance (default 0.5)",
                                      parse=float, command=False)
    partial_s: Optional[float] = option(None, help="decode the open utterance every N seconds for the tentative "
                                        "text (default: off)", parse=float, command=False)
    # transcribe()'s options that the command's --stream does not pass (it refuses their flags); the library's
    # stream() takes the decoding ones
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM})",
                                      parse=parse_positive_int, command=False)
    nbest: Optional[int] = option(None, help="(not for a stream)", parse=parse_positive_int, command=False, form=None)
    word_timestamps: bool = option(False, help="(a stream times every word itself)", command=False, form=None)

    def __post_init__(self):
        super().__post_init__()
        if self.nbest is not None:
            raise OptionValueError("nbest", "nbest does not apply to a stream (it commits one text)")
        number("pause_s", self.pause_s, 0.05, MAX_PAUSE_S)
        number("partial_s", self.partial_s, 0.0, 60.0, above=True)
        pause = DEFAULT_PAUSE_S if self.pause_s is None else self.pause_s
        if 3 * pause > self.max_piece_s:
            raise OptionValueError("pause_s", f"max_piece_s ({self.max_piece_s:g} s) must hold three pauses of "
                                   f"pause_s ({pause:g} s)")

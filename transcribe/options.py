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
from dataclasses import dataclass
from typing import Any, Callable, Optional

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

def positive_int(name: str, value, allow_none: bool = True) -> None:
    """Raises OptionValueError unless `value` is an integer of at least 1 (or None when allowed)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OptionValueError(name, f"{name} must be a positive integer, got {value!r}")


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

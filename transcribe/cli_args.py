"""The command line's shared options: the decoding flags, generated from every registered family's
options (`transcribe.surfaces`: one flag per option name that some family's Surface gives the command),
the subtitle arguments, and what the flags given become as `transcribe()` keywords (used by `transcribe`
and `transcribe batch`)."""
from __future__ import annotations

import argparse

from . import surfaces
from .options import parse_positive_int as positive_int

DECODING_GROUP = "Decoding (each model family takes its own options; a model refuses the others')"


def add_decoding_arguments(p: argparse.ArgumentParser) -> None:
    """The decoding and subtitle options (shared with `transcribe batch`)."""
    add_option_flags(p.add_argument_group(DECODING_GROUP), surfaces.file_options())
    c = p.add_argument_group("Subtitles (srt, vtt)")
    c.add_argument("--max-line-width", type=positive_int, default=42, metavar="N",
                   help="characters a subtitle line holds at most (default: 42)")
    c.add_argument("--max-line-count", type=positive_int, default=2, metavar="N",
                   help="lines a subtitle cue holds at most (default: 2)")


def add_option_flags(group, declared: dict) -> None:
    """One flag per declared option (`surfaces.Declared`), its value None unless given; the help names
    the families that take it when not all do."""
    every = surfaces.kinds()
    for name, d in declared.items():
        s = d.surface
        kwargs = dict(dest=name, default=None, help=d.help(every).replace("%", "%%"))
        if s.action is not None:
            kwargs["action"] = s.action
        else:
            if s.parse is not None:
                kwargs["type"] = s.parse
            if s.choices is not None:
                kwargs["choices"] = s.choices
            if s.metavar is not None:
                kwargs["metavar"] = s.metavar
        group.add_argument(d.flag, **kwargs)


def flag(option: str) -> str:
    """The command's flag of a decoding option (`initial_prompt` -> `--initial-prompt`), to name an
    option a model refuses (errors.OptionsNotTaken.spelled)."""
    return surfaces.flag(option)


def value_flag(option: str) -> str:
    """The command's flag that sets a decoding option, to name it where its value is refused
    (errors.OptionValueError.spelled)."""
    return surfaces.own_flag(option)


def decoding_options(args) -> dict:
    """The family-specific options the user gave (only those, so other families are not bothered), with
    what their flags imply (Surface.implies)."""
    return surfaces.given(args, surfaces.file_options())


DTYPES = ("float32", "bfloat16", "float16", "int8", "auto")


def add_dtype_argument(p) -> None:
    """--dtype, as the command, the server and batch jobs take it (load_model's dtype)."""
    p.add_argument("--dtype", choices=DTYPES,
                   help="compute precision (default: the model's choice for the device, float32 on a CPU; "
                        "auto: the fastest measured for this CPU, which changes results slightly: README)")


def lm_problem(lm) -> "str | None":
    """Why --lm's value cannot be read as a language model file (one line, said without the usage), or
    None: a directory, no such file, a symbolic-link loop, a device."""
    import os

    if not lm or os.path.isfile(lm):
        return None
    if os.path.isdir(lm):
        return f"--lm {lm}: is a directory, not a language model file"
    from .audio_source import source_problem

    return f"--lm {lm}: {source_problem(lm)[0] or 'not a regular file'}"

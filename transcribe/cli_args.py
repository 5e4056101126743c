"""The command line's shared options: the decoding flags, generated from every registered family's
options (`transcribe.surfaces`: one flag per option name that some family's Surface gives the command),
the subtitle arguments, and what the flags given become as `transcribe()` keywords (used by `transcribe`
and `transcribe batch`); and the command's speaker flags (--diarize, --diarizer, --num-speakers: `transcribe`
only, since batch jobs cut long inputs into pieces, across which a diarizer's speaker labels do not hold)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Optional

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


# ------------------------------------------------------------------------------------- speakers

# Recognizer.transcribe's keyword for the diarizer's speaker limit, which a diarizer's own transcribe() takes
# as its family option: one flag, --num-speakers, for both.
NUM_SPEAKERS = "num_speakers"


def add_diarize_arguments(p: argparse.ArgumentParser) -> None:
    """--diarize, --diarizer, --num-speakers (the last declared here unless a family declares it)."""
    from .hub import DEFAULT_DIARIZER

    g = p.add_argument_group("Speakers (who spoke when)")
    g.add_argument("--diarize", action="store_true",
                   help="run a diarizer beside the model: every word and segment gets a speaker, segments are "
                        "split where the speaker changes; --format rttm writes the speaker turns")
    g.add_argument("--diarizer", metavar="MODEL",
                   help=f"the diarizer --diarize runs: a model file, short name or hub id (default: {DEFAULT_DIARIZER})")
    try:
        g.add_argument("--num-speakers", type=positive_int, metavar="N", default=None,
                       help="the most speakers the diarizer keeps, 1 to its own (4 for Sortformer; default: as many "
                            "as it finds): with --diarize, or with a diarizer as --model")
    except argparse.ArgumentError:  # a diarizer family declares it among its options: one flag serves both
        pass


@dataclass(frozen=True)
class Diarize:
    """What the speaker flags ask: `on` (--diarize), `keywords` (what Recognizer.transcribe takes for it),
    and the speaker limit given (`num_speakers`)."""

    on: bool
    num_speakers: Optional[int] = None
    keywords: dict = field(default_factory=dict)

    def family_options(self, decoding: dict) -> dict:
        """The model's own options: without --diarize, --num-speakers is the model's (a diarizer's); with it,
        the diarizer's (in `keywords`)."""
        if self.on:
            return {k: v for k, v in decoding.items() if k != NUM_SPEAKERS}
        if self.num_speakers is None:
            return dict(decoding)
        return {**decoding, NUM_SPEAKERS: self.num_speakers}

    def hint(self, refused) -> str:
        """What to add to a model's refusal of `refused` options: --num-speakers without --diarize."""
        if not self.on and NUM_SPEAKERS in set(refused):
            return " (it is not a diarizer: add --diarize to run one beside it)"
        return ""


def diarize_options(args) -> Diarize:
    n = getattr(args, NUM_SPEAKERS, None)
    if not args.diarize:
        return Diarize(False, n)
    return Diarize(True, n, dict(diarize=True, diarizer=args.diarizer, num_speakers=n))


def diarize_problem(args) -> Optional[str]:
    """The usage error of the speaker flags (checked before anything is loaded), or None."""
    if args.diarizer is not None and not args.diarize:
        return "--diarizer needs --diarize"
    if getattr(args, "stream", None) is not None:
        given = [f for f, on in (("--diarize", args.diarize), ("--num-speakers", getattr(args, NUM_SPEAKERS, None)
                                                                is not None)) if on]
        if given:
            return f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --stream (a live session " \
                   "has no diarizer yet)"
    return None

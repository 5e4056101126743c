"""Every registered family's options as the command and the server spell them, read from the families'
options dataclasses through `loading.FAMILIES` (each option is declared once, in its family's folder,
with its `options.Surface`). The command's decoding and streaming flags (cli_args.py, stream_cli.py),
the server's extra form fields (server/openai_api.py) and the WebSocket's session options
(server/websocket.py) are all built from here; no module outside a family's folder lists option names.

An option name two families both declare is one flag and one form field: the families must spell it
alike (the same flag, parser and action; `Disagreement` otherwise)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Optional

from .options import Surface, surfaces


class Disagreement(TypeError):
    """Two families declare an option of one name that a surface cannot spell once."""


@dataclass(frozen=True)
class Declared:
    """One option name as a surface sees it: its Surface (the first family's), the families (their KIND)
    whose transcribe() takes it, those whose stream() takes it, and each family's help text."""

    name: str
    surface: Surface
    kinds: tuple = ()
    stream_kinds: tuple = ()
    helps: tuple = ()  # ((kind, help), ...) in registry order, a kind once

    @property
    def flag(self) -> str:
        return self.surface.flag_of(self.name)

    @property
    def stream_only(self) -> bool:
        return not self.kinds

    def help(self, all_kinds: tuple) -> str:
        """The help text: the family's own where every family takes the option alike, else each help
        after the families that take it ("Parakeet: ...; Whisper: ...")."""
        texts: dict[str, list[str]] = {}
        for kind, text in self.helps:
            # a family that takes it in its stream only, where others take it in transcribe(): "(--stream)"
            label = kind if kind in self.kinds or self.stream_only else f"{kind} (--stream)"
            texts.setdefault(text, []).append(label)
        if len(texts) == 1 and set(self.kinds) >= set(all_kinds):
            return next(iter(texts))
        return "; ".join(f"{', '.join(kinds)}: {text}" for text, kinds in texts.items())


def _classes(families) -> list[tuple[str, Any, bool]]:
    """(kind, options class, whether it is the stream's) of every family, in registry order."""
    out = []
    for family in families:
        out.append((family.kind, family.options, False))
        if family.stream_options is not None:
            out.append((family.kind, family.stream_options, True))
    return out


def _spelling(surface: Surface, name: str) -> tuple:
    return (surface.flag_of(name), surface.parse, surface.action, surface.choices)


def command_options(families=None) -> dict[str, Declared]:
    """name -> Declared of every option some family's command surface has (Surface.command), in
    registry and declaration order; kinds and stream_kinds count the families that give it a flag.
    Raises Disagreement where two families spell one name differently on the command line."""
    return _command_options(_families(families))


@lru_cache(maxsize=None)
def _command_options(families: tuple) -> dict[str, Declared]:
    found: dict[str, dict] = {}
    for kind, cls, stream in _classes(families):
        for name, surface in surfaces(cls).items():
            if not surface.command:
                continue
            entry = found.setdefault(name, {"surface": surface, "by": kind, "kinds": [], "stream_kinds": [],
                                            "helps": []})
            if _spelling(surface, name) != _spelling(entry["surface"], name):
                raise Disagreement(
                    f"option {name}: {entry['by']} and {kind} spell it differently on the command line (flag, "
                    f"parser, action, choices: {_spelling(entry['surface'], name)} != {_spelling(surface, name)})")
            if entry["surface"].metavar is None and surface.metavar is not None:
                entry["surface"] = surface
            lst = entry["stream_kinds" if stream else "kinds"]
            if kind not in lst:
                lst.append(kind)
            if all(k != kind for k, _ in entry["helps"]):
                entry["helps"].append((kind, surface.help))
    return {name: Declared(name, e["surface"], tuple(e["kinds"]), tuple(e["stream_kinds"]), tuple(e["helps"]))
            for name, e in found.items()}


def file_options(families=None) -> dict[str, Declared]:
    """The command's flags of transcribe() options (some family's Options gives it a flag)."""
    return {n: d for n, d in command_options(families).items() if d.kinds}


def stream_command_options(families=None) -> dict[str, Declared]:
    """The command's flags that `--stream` passes to model.stream() (some family's StreamOptions gives
    it a flag)."""
    return {n: d for n, d in command_options(families).items() if d.stream_kinds}


def kinds(families=None) -> tuple:
    """Every registered family's KIND."""
    return tuple(f.kind for f in _families(families))


def own_flag(name: str, families=None) -> str:
    """The flag that sets the option itself (`temperature_increment` -> `--temperature-increment`), to name
    an option whose value is refused: the user typed that one, where another flag may imply it too."""
    d = command_options(families).get(name)
    return d.flag if d is not None else flag(name, families)


def flag(name: str, families=None) -> str:
    """The command's flag of an option (`initial_prompt` -> `--initial-prompt`). An option the command
    passes because another flag implies it (Surface.implies) is named by that flag: the user typed that
    one (Whisper's fallback step is part of its --temperature)."""
    declared = command_options(families)
    for other, d in declared.items():
        if any(name == implied for implied, _ in d.surface.implies):
            return d.flag
    d = declared.get(name)
    return d.flag if d is not None else "--" + name.replace("_", "-")


def given(args, declared: dict[str, Declared]) -> dict:
    """The options of `declared` given on the command line (argparse's `args`; a flag not given is None),
    with what their Surfaces imply when not given themselves."""
    out = {n: getattr(args, n) for n in declared if getattr(args, n, None) is not None}
    for name in list(out):
        for implied, value in declared[name].surface.implies:
            out.setdefault(implied, value)
    return out


@dataclass(frozen=True)
class Field:
    """An extra form field of the server: the option it gives and how its text becomes the value."""

    option: str
    parse: Optional[Callable[[str], Any]]


def form_fields(families=None) -> dict[str, Field]:
    """form name -> Field of every option some family's transcribe() takes as a form field
    (Surface.form_of). Raises Disagreement where two families parse one field differently."""
    return _form_fields(_families(families))


@lru_cache(maxsize=None)
def _form_fields(families: tuple) -> dict[str, Field]:
    out: dict[str, Field] = {}
    for family in families:
        for name, surface in surfaces(family.options).items():
            form = surface.form_of(name)
            if form is None:
                continue
            field = Field(name, surface.parse)
            if out.setdefault(form, field) != field:
                raise Disagreement(f"form field {form}: the families take it as different options or parse it "
                                   f"differently ({out[form]} != {field})")
    return out


def form_name(option: str, families=None) -> str:
    """How the server's form names an option (its own name unless a family says otherwise)."""
    return next((form for form, f in form_fields(families).items() if f.option == option), option)


def stream_fields(families=None) -> dict[str, Optional[Callable[[str], Any]]]:
    """name -> parser (None: the text) of every option some family's stream() takes: the WebSocket's
    session options."""
    return _stream_fields(_families(families))


@lru_cache(maxsize=None)
def _stream_fields(families: tuple) -> dict:
    out: dict = {}
    for family in families:
        if family.stream_options is None:
            continue
        for field in dataclasses.fields(family.stream_options):
            surface = field.metadata.get("surface")
            out.setdefault(field.name, surface.parse if surface is not None else None)
    return out


def partial_options(families=None) -> frozenset:
    """The option names (transcribe()'s or stream()'s) that some registered family takes and another
    does not: what a surface may not list by hand (tests/test_layout.py)."""
    families = _families(families)
    taken = [_names(f.options) | (_names(f.stream_options) if f.stream_options else frozenset()) for f in families]
    every = frozenset.intersection(*taken) if taken else frozenset()
    return frozenset().union(*taken) - every


def _names(cls) -> frozenset:
    return frozenset(f.name for f in dataclasses.fields(cls))


def _families(families) -> tuple:
    if families is None:
        from .loading import FAMILIES

        return FAMILIES
    return tuple(families)

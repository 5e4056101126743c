"""The surfaces read the families' options (transcribe/surfaces.py): the command has a flag for every
option a family gives one, the server a form field for every option a family gives one, the WebSocket
every stream option; two families declaring one name must spell it alike."""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Optional

import pytest

from transcribe import surfaces
from transcribe.loading import FAMILIES
from transcribe.options import option, parse_positive_int, surfaces as surfaces_of


@dataclass(frozen=True)
class _FakeFamily:
    name: str
    kind: str
    options: type
    stream_options: Optional[type] = None


@dataclass(frozen=True)
class _A:
    beam_size: Optional[int] = option(None, help="beams", parse=parse_positive_int, metavar="N")
    only_a: Optional[str] = option(None, help="A's own")


@dataclass(frozen=True)
class _B:
    beam_size: Optional[int] = option(None, help="beams", parse=int, metavar="N")  # parsed differently


@dataclass(frozen=True)
class _C:
    beam_size: Optional[int] = option(None, help="beams of C", parse=parse_positive_int, metavar="N")


@dataclass(frozen=True)
class _CStream:
    knob: Optional[float] = option(None, help="C's stream knob", parse=float)
    only_a: Optional[str] = option(None, help="A's own")


def test_the_registry_s_families_agree_on_every_shared_option():
    surfaces.command_options()  # raises Disagreement otherwise
    surfaces.form_fields()


def test_two_families_spelling_one_option_differently_is_refused():
    a, b = _FakeFamily("a", "A", _A), _FakeFamily("b", "B", _B)
    with pytest.raises(surfaces.Disagreement, match="beam_size: A and B"):
        surfaces.command_options((a, b))
    with pytest.raises(surfaces.Disagreement, match="form field beam_size"):
        surfaces.form_fields((a, b))


def test_an_option_some_families_take_says_which_in_its_help():
    a, c = _FakeFamily("a", "A", _A), _FakeFamily("c", "C", _C, stream_options=_CStream)
    declared = surfaces.command_options((a, c))
    assert declared["beam_size"].kinds == ("A", "C") and declared["beam_size"].help(("A", "C")) == \
        "A: beams; C: beams of C"
    assert declared["only_a"].kinds == ("A",) and declared["only_a"].stream_kinds == ("C",)
    assert declared["only_a"].help(("A", "C")) == "A, C (--stream): A's own"
    assert declared["knob"].stream_only and declared["knob"].help(("A", "C")) == "C: C's stream knob"
    assert surfaces.command_options((a,))["beam_size"].help(("A",)) == "beams"  # every family alike: no names


def _parser():
    from transcribe.cli import _parser

    return _parser()


def test_the_command_has_a_flag_for_every_option_a_family_gives_one():
    p = _parser()
    flags = {s: a for a in p._actions for s in a.option_strings}
    for family in FAMILIES:
        for cls in (family.options, family.stream_options):
            if cls is None:
                continue
            for name, s in surfaces_of(cls).items():
                if not s.command:
                    continue
                action = flags.get(s.flag_of(name))
                assert action is not None and action.dest == name, (family.name, name)
                assert action.default is None  # not given: not passed
                if s.action is None:
                    assert action.type is s.parse and action.choices == s.choices, (family.name, name)
                else:
                    kinds = {"store_true": argparse._StoreTrueAction, "store_false": argparse._StoreFalseAction}
                    assert isinstance(action, kinds.get(s.action, s.action))  # or an action class (--pnc/--no-pnc)


def test_the_command_passes_only_what_is_given_and_what_it_implies():
    from transcribe.cli import _decoding_options

    p = _parser()
    assert _decoding_options(p.parse_args(["x.wav"])) == {}
    given = _decoding_options(p.parse_args(["x.wav", "--no-score-norm", "--beam-size", "2", "--head", "ctc"]))
    assert given == {"score_norm": False, "beam_size": 2, "head": "ctc"}
    with_implies = [d for d in surfaces.file_options().values() if d.surface.implies]
    assert with_implies  # Whisper's --temperature implies its fallback step
    for d in with_implies:
        args = p.parse_args(["x.wav", d.flag, "0.5"])
        got = _decoding_options(args)
        assert got[d.name] is not None and all(got[k] == v for k, v in d.surface.implies)
        for k, _ in d.surface.implies:  # given, the implied option is the user's
            given = p.parse_args(["x.wav", d.flag, "0.5", surfaces.command_options()[k].flag, "0"])
            assert _decoding_options(given)[k] == 0


def test_a_refused_implied_option_is_named_by_the_flag_that_implies_it():
    from transcribe.cli_args import flag
    from transcribe.errors import OptionsNotTaken

    for d in surfaces.file_options().values():
        for k, _ in d.surface.implies:
            assert flag(k) == d.flag
            assert OptionsNotTaken("m", "K", [d.name, k]).spelled(flag) == f"m is a K model and does not take {d.flag}"


def test_the_server_takes_a_form_field_for_every_option_a_family_gives_one():
    from transcribe.server.openai_api import field_name

    for family in FAMILIES:
        for name, s in surfaces_of(family.options).items():
            form = s.form_of(name)
            if form is None:
                continue
            assert field_name(name) == form
            field = surfaces.form_fields()[form]
            assert field.option == name and field.parse is s.parse


def test_form_fields_are_parsed_as_declared():
    from transcribe.server.openai_api import ApiError, request_options

    options, *_ = request_options({"beam_size": ["3"], "prompt": ["Kennedy"], "hotwords": [" "]}, "transcribe")
    assert options == {"beam_size": 3, "initial_prompt": "Kennedy"}
    with pytest.raises(ApiError, match="beam_size: invalid value '0'"):
        request_options({"beam_size": ["0"]}, "transcribe")
    options, *_ = request_options({"temperature": ["0.5"]}, "transcribe")
    assert options == {"temperature": pytest.approx((0.5, 0.7, 0.9))}


def test_the_websocket_takes_every_family_s_stream_options():
    from transcribe.server.websocket import SOCKET_OPTIONS, stream_options

    known = set(stream_options())
    for family in FAMILIES:
        if family.stream_options is not None:
            names = {f.name for f in dataclasses.fields(family.stream_options)}
            assert names - set(SOCKET_OPTIONS) <= known, family.name

"""End-of-utterance events with tests/models/tiny-eou-streaming.nemo (tools/train_tiny_eou.py: a
tiny cache-aware RNN-T trained to emit <EOU> and <EOB>) against NeMo's streaming of it
(tests/references/nemo_streaming/tiny-eou-streaming.json); token parity itself is in
test_parakeet_streaming.py."""
from __future__ import annotations

import json
import random

import pytest

from transcribe import load_model
from transcribe.audio import load_audio

from .conftest import REPO, reference_audio, two_utterances_wav

REF = json.loads((REPO / "tests/references/nemo_streaming/tiny-eou-streaming.json").read_text())
TWO = two_utterances_wav()


@pytest.fixture(scope="module")
def asr():
    return load_model(REPO / REF["model"])


def _runs(clip):
    return [r for r in REF["runs"] if r["clip"] == clip]


def _utterances(run):
    """NeMo's text cut at its end-of-utterance tokens -> the utterances' texts."""
    text = run["text"].replace(REF["eob_token"], "")
    return [u.strip() for u in text.split(REF["eou_token"]) if u.strip()]


def _events_of(run):
    kinds = {REF["eou_id"]: "eou", REF["eob_id"]: "eob"}
    return [(kinds[run["tokens"][i]], run["token_frames"][i]) for i in run["eou_positions"]]


def _feed(s, audio, seed):
    rng = random.Random(seed)
    i = 0
    while i < len(audio):
        n = rng.choice([1, 100, 160, 1000, 3333, 16000])
        s.feed(audio[i:i + n])
        i += n
    s.finalize()


def test_vocabulary_events(asr):
    from transcribe.parakeet.streaming import event_tokens

    assert event_tokens(asr.tokenizer.pieces) == {REF["eou_id"]: "eou", REF["eob_id"]: "eob"}
    assert asr.model.blank == REF["blank_id"]


@pytest.mark.parametrize("reset", [False, True])
def test_two_utterances_give_two_events_and_both_texts(asr, reset):
    audio = load_audio(TWO)
    for run in _runs("two-utterances"):
        want_events = _events_of(run)
        assert [k for k, _ in want_events] == ["eou", "eou"]
        s = asr.stream(att_context_size=run["att_context_size"], eou_reset=reset)
        _feed(s, audio, run["att_context_size"][1])
        items = s.drain()
        events = [x for x in items if hasattr(x, "type")]
        # NeMo never resets; with a reset the first utterance decodes identically, and the second one
        # (decoded from the start state after the first <EOU>) gives the same text and end here.
        assert [(e.type, e.frame) for e in events] == want_events
        assert [e.token for e in events] == ["<EOU>", "<EOU>"]
        assert all(e.time == pytest.approx(asr.model.frame_seconds(e.frame)) for e in events)
        assert s.take_new_text() == "\n".join(_utterances(run)) + "\n"
        # Each utterance's words come before its event; the event is after its last word's start.
        first_eou = items.index(events[0])
        words1 = [w.word for w in items[:first_eou]]
        assert " ".join(words1) == _utterances(run)[0]
        assert items[first_eou - 1].start <= events[0].time
        assert " ".join(w.word for w in items[first_eou + 1: items.index(events[1])]) == _utterances(run)[1]
        assert s.text() == ""  # both utterances are over and released


def test_reset_changes_the_decoder_state_not_the_encoder(asr):
    """After <EOU> the decoder restarts: with a reset, the tokens after the first <EOU> are those of
    decoding the rest from the start state; the encoder (its caches) goes on either way, so both
    runs see the same encoder frames and the first utterance is identical."""
    audio = load_audio(TWO)
    run = _runs("two-utterances")[0]
    out = {}
    for reset in (False, True):
        s = asr.stream(att_context_size=run["att_context_size"], eou_reset=reset)
        s.feed(audio)
        s.finalize()
        out[reset] = [(t.id, t.frame) for t in s.take_new_tokens()]
        assert s.latency.committed_ms == pytest.approx(s.latency.received_ms)
    cut = run["eou_positions"][0] + 1
    assert out[True][:cut] == out[False][:cut]
    assert [i for i, _ in out[False]] == run["tokens"]


def test_backchannel_is_an_event_not_a_turn_end(asr):
    run = _runs("cv_17767698")[0]
    s = asr.stream(att_context_size=run["att_context_size"])
    s.feed(load_audio(reference_audio(run["path"])))
    s.finalize()
    events = s.drain_events()
    assert [(e.type, e.token, e.frame) for e in events] == [("eob", "<EOB>", f) for _, f in _events_of(run)]
    assert s.text() == _utterances(run)[0]  # the utterance goes on: <EOB> releases nothing


def test_an_eou_with_nothing_said_is_no_event(asr):
    run = _runs("cv_20005990")[0]
    assert run["tokens"] == [REF["eou_id"]]  # the model says only <EOU>
    s = asr.stream(att_context_size=run["att_context_size"], eou_reset=False)
    s.feed(load_audio(reference_audio(run["path"])))
    s.finalize()
    assert [t.id for t in s.take_new_tokens()] == run["tokens"]  # the token is reported...
    assert s.drain_events() == [] and s.take_new_text() == ""  # ...but ends no utterance


def test_finalize_never_invents_an_eou(asr):
    audio = load_audio(TWO)
    s = asr.stream()
    s.feed(audio[: len(audio) // 3])  # inside the first utterance
    s.finalize()
    assert s.drain_events() == []
    text = s.take_new_text()
    assert text and "\n" not in text  # the utterance is not over

"""Live speakers: a streaming session with a diarizer (`StreamingSession.add_diarizer`) labels its words
as the diarizer's final frames cover them, by the offline rule (`diarization.speaker_at`), once each, in
order, never changing a label; `transcribe --stream --diarize` prints them.

Most tests run a real session (the tiny Parakeet models: their words are real words on jfk.wav) beside a
stand-in streaming diarizer whose turns are scripted and whose lag is set, so every order of "word
finished" and "word covered" happens. The last ones run the tiny streaming Sortformer itself."""
from __future__ import annotations

import json

import numpy as np
import pytest

import transcribe
from transcribe import cli, stream_cli
from transcribe.audio import load_audio
from transcribe.diarization import speaker_at
from transcribe.errors import OptionValueError, TranscribeError
from transcribe.results import SpeakerTurn
from transcribe.streaming import StreamMessages

from .conftest import AUDIO, MODELS, SHARED, TINY

OFFLINE = TINY / "tiny-tdt-fit.nemo"  # buffered windows: real words on jfk.wav
JFK = AUDIO / "jfk.wav"
SORTFORMER = SHARED / "models" / "sortformer-tiny" / "sortformer-tiny.nemo"
MIX0 = SHARED / "models" / "sortformer-tiny" / "mix0.wav"
EOU = MODELS / "tiny-eou-streaming.nemo"  # cache-aware: a few words on mix0.wav

# Who speaks when in the stand-in's script: turns that cover the whole of jfk.wav, so every word
# overlaps one (a word in silence goes to the nearest turn, which may lie past what a live diarizer has
# seen: the one case where a live label can differ from the offline one).
SCRIPT = [SpeakerTurn("speaker_0", 0.0, 4.0), SpeakerTurn("speaker_1", 4.0, 7.5), SpeakerTurn("speaker_0", 7.5, 12.0)]


class FakeStream:
    """A streaming diarizer's contract (feed, finish, frames_done, frame_s, turns) over a script: its
    final frames trail the audio fed by `lag` frames; `turns` are the script's, cut at them."""

    frame_s = 0.08

    def __init__(self, script, lag: int, settle_s=None):
        self.script, self.lag, self.samples, self.frames_done = script, lag, 0, 0
        self.edges: list[float] = []  # where the final frames ended at each turns() call
        if settle_s is not None:
            self.settle_s = settle_s

    def _rows(self, n: int):
        k, self.frames_done = n - self.frames_done, n
        return np.zeros((k, 4), np.float32)

    def feed(self, pcm):
        self.samples += len(pcm)
        return self._rows(max(self.frames_done, self.samples // 1280 - self.lag))

    def finish(self):
        return self._rows(-(-self.samples // 1280))

    def turns(self, final: bool):
        edge = self.frames_done * self.frame_s
        self.edges.append(edge)
        return [SpeakerTurn(t.speaker, t.start, min(t.end, edge)) for t in self.script if t.start < edge]


class FakeDiarizer:
    """A loaded diarizer's contract for live sessions: `diarizer`, `max_speakers`, `stream_diarizer`."""

    diarizer = True
    max_speakers = 4
    name = "stand-in-sortformer"
    kind = "Sortformer"

    def __init__(self, script=SCRIPT, lag: int = 10, settle_s=None):
        self.script, self.lag, self.settle_s = script, lag, settle_s
        self.made: list[dict] = []
        self.streams: list[FakeStream] = []

    def stream_diarizer(self, **options):
        self.made.append(options)
        self.streams.append(FakeStream(self.script, self.lag, self.settle_s))
        return self.streams[-1]


@pytest.fixture(scope="module")
def offline():
    return transcribe.load_model(str(OFFLINE))


@pytest.fixture(scope="module")
def jfk():
    return load_audio(JFK, sample_rate=16000)


def run_session(session, pcm, piece=1600):
    """Feeds `pcm` a piece at a time, as a client would, and records what comes out: (words in drain
    order, the speaker each carried when drained, the label updates, whether each update came after its
    words were drained and once they were covered)."""
    words, carried, updates = [], [], []
    stream = session._speakers.stream

    def take(final: bool):
        known = session.labelled_words
        for w in session.drain_words():
            words.append(w)
            carried.append(w.speaker)
        for u in session.take_word_speakers():
            assert u.first + len(u.speakers) <= len(words), "a label for a word not handed out yet"
            updates.append(u)
        # every word labelled so far is covered by the diarizer's final frames (or the stream is over)
        edge = stream.frames_done * stream.frame_s
        if not final:
            for w in words[:known]:
                assert w.end <= edge + 1e-6

    for i in range(0, len(pcm), piece):
        session.feed(pcm[i:i + piece])
        take(False)
    session.finalize()
    take(True)
    return words, carried, updates


@pytest.mark.parametrize("lag", [0, 6, 40, 1000])
def test_every_word_gets_the_offline_rule_s_speaker_once_in_order(offline, jfk, lag):
    diarizer = FakeDiarizer(lag=lag)
    session = offline.stream().add_diarizer(diarizer)
    words, carried, updates = run_session(session, jfk)
    assert len(words) > 10
    # Each word's label comes once: on the word when drained, or later in one update, never both; the
    # updates follow each other in word order without gaps.
    labels = list(carried)
    expected_next = None
    for u in updates:
        assert expected_next is None or u.first >= expected_next
        for i, speaker in enumerate(u.speakers, u.first):
            assert carried[i] is None, "a word drained with its speaker got it again"
            labels[i] = speaker
        expected_next = u.first + len(u.speakers)
    assert [w.speaker for w in words] == labels  # the Word objects handed out got their label too
    assert labels == [speaker_at(SCRIPT, w.start, w.end) for w in words]  # the offline rule
    assert set(labels) == {"speaker_0", "speaker_1"}
    assert session.labelled_words == len(words)
    if lag >= 40:  # the diarizer far behind: words go out before their label
        assert updates and None in carried
    if lag == 1000:  # nothing covered before the end: the labels come with finalize(), in one update for
        # the words handed out before it (those it finished come out labelled)
        assert len(updates) == 1 and updates[0].first == 0 and carried[0] is None
        assert all(c is not None for c in carried[len(updates[0].speakers):])


def test_settle_time_holds_labels_back(offline, jfk):
    """A stream diarizer's settle_s (the span its post-processing may still change) delays labels."""
    diarizer = FakeDiarizer(lag=0, settle_s=1.5)
    session = offline.stream().add_diarizer(diarizer)
    stream = diarizer.streams[0]
    seen = []
    for i in range(0, len(jfk), 1600):
        session.feed(jfk[i:i + 1600])
        words = session.drain_words()
        seen += words
        known = session.labelled_words
        for w in seen[:known]:
            assert w.end <= stream.frames_done * stream.frame_s - 1.5 + 1e-6
    session.finalize()
    seen += session.drain_words()
    assert all(w.speaker is not None for w in seen)


def test_messages_carry_speakers_and_updates(offline, jfk):
    diarizer = FakeDiarizer(lag=40)
    session = offline.stream().add_diarizer(diarizer)
    m = StreamMessages(session)
    out = []
    for i in range(0, len(jfk), 1600):
        session.feed(jfk[i:i + 1600])
        out += m.take()
    session.finalize()
    out += m.take()
    sent = []  # word messages in order, with their labels as the messages give them
    for msg in out:
        if msg["type"] == "word":
            assert "speaker" in msg
            sent.append(dict(msg))
        elif msg["type"] == "word_speakers":
            assert set(msg) == {"type", "first", "speakers"}
            assert msg["first"] + len(msg["speakers"]) <= len(sent)
            for i, speaker in enumerate(msg["speakers"], msg["first"]):
                assert sent[i]["speaker"] is None
                sent[i]["speaker"] = speaker
    assert any(msg["type"] == "word_speakers" for msg in out)
    assert [w["speaker"] for w in sent] == [speaker_at(SCRIPT, w["start"], w["end"]) for w in sent]
    assert [w["speaker"] for w in m.words] == [w["speaker"] for w in sent]  # the final line's words


def test_add_diarizer_refusals_and_options(offline, jfk):
    with pytest.raises(TranscribeError, match="not a diarizer"):
        offline.stream().add_diarizer(offline)
    for n in (0, 5, True):
        with pytest.raises(OptionValueError, match="num_speakers"):
            offline.stream().add_diarizer(FakeDiarizer(), num_speakers=n)
    session = offline.stream()
    session.feed(jfk[:1600])
    with pytest.raises(TranscribeError, match="before the first feed"):
        session.add_diarizer(FakeDiarizer())
    diarizer = FakeDiarizer()
    session = offline.stream().add_diarizer(diarizer, num_speakers=2)
    with pytest.raises(TranscribeError, match="has a diarizer already"):
        session.add_diarizer(diarizer)
    assert diarizer.made == [{"num_speakers": 2}]
    assert session.diarizing and not offline.stream().diarizing
    assert offline.stream().take_word_speakers() == [] and offline.stream().speaker_turns() == []


def test_reset_starts_the_diarizer_over(offline, jfk):
    diarizer = FakeDiarizer(lag=0)
    session = offline.stream().add_diarizer(diarizer, num_speakers=3)
    run_session(session, jfk[:16000 * 5])
    session.reset()
    assert diarizer.made == [{"num_speakers": 3}, {"num_speakers": 3}]
    words, carried, updates = run_session(session, jfk)
    assert words and all(w.speaker is not None for w in words)
    assert all(u.first < len(words) for u in updates)  # numbering started over
    turns = session.speaker_turns()
    assert [t.speaker for t in turns] == ["speaker_0", "speaker_1", "speaker_0"]


def test_a_session_without_a_diarizer_is_unchanged(offline, jfk):
    session = offline.stream()
    m = StreamMessages(session)
    out = []
    for i in range(0, len(jfk), 1600):
        session.feed(jfk[i:i + 1600])
        out += m.take()
    session.finalize()
    out += m.take()
    assert not any(msg["type"] == "word_speakers" for msg in out)
    assert all(msg.get("speaker") is None for msg in out if msg["type"] == "word")


# ---------------------------------------------------------------------------------------- the command


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def stand_in(monkeypatch):
    """--diarizer loads the stand-in (its name is ignored)."""
    diarizer = FakeDiarizer(lag=60)  # behind the words: some labels come after their words
    monkeypatch.setattr(stream_cli, "_load_diarizer", lambda args: diarizer)
    return diarizer


def test_stream_jsonl_prints_speakers(capsys, stand_in):
    code, out, err = run(capsys, "--stream", JFK, "--model", OFFLINE, "--diarize", "--diarizer", "x",
                         "--num-speakers", "2", "--format", "jsonl")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    final = lines[-1]
    assert final["type"] == "final"
    edge = stand_in.streams[0].frames_done * FakeStream.frame_s  # the end of the audio, in whole frames
    assert final["speakers"] == [SpeakerTurn(t.speaker, t.start, min(t.end, edge)).to_dict() for t in SCRIPT]
    assert [w["speaker"] for w in final["words"]] == [speaker_at(SCRIPT, w["start"], w["end"]) for w in final["words"]]
    assert any(line["type"] == "word_speakers" for line in lines)
    assert stand_in.made == [{"num_speakers": 2}]


def test_stream_txt_prints_a_line_per_speaker_turn(capsys, stand_in, offline, jfk):
    code, out, err = run(capsys, "--stream", JFK, "--model", OFFLINE, "--diarize", "--diarizer", "x")
    assert code == 0, err
    words = run_session(offline.stream().add_diarizer(FakeDiarizer(lag=60)), jfk)[0]
    expected, line = [], None
    for w in words:
        if line is None or line[0] != w.speaker:
            line = [w.speaker, []]
            expected.append(line)
        line[1].append(w.word)
    assert out == "".join(f"{speaker}: {' '.join(ws)}\n" for speaker, ws in expected)


def test_stream_diarize_errors(capsys, monkeypatch):
    code, out, err = run(capsys, "--stream", JFK, "--model", OFFLINE, "--diarize", "--diarizer", OFFLINE)
    assert code == 2 and "not a diarizer" in err and err.count("\n") == 1, err
    monkeypatch.setattr(stream_cli, "_load_diarizer", lambda args: FakeDiarizer())
    code, out, err = run(capsys, "--stream", JFK, "--model", OFFLINE, "--diarize", "--num-speakers", "9")
    assert code == 2 and "--num-speakers" in err and err.count("\n") == 1, err


# ---------------------------------------------------------------------------------------- the real models


@pytest.fixture(scope="module")
def sortformer():
    model = transcribe.load_model(str(SORTFORMER))
    assert model.diarizer is True
    return model


def test_cache_aware_parakeet_with_the_streaming_sortformer(sortformer):
    """mix0 (two speakers) through a cache-aware model and the tiny streaming Sortformer: every word is
    labelled, by the offline rule over the diarizer's own streaming turns."""
    pcm = load_audio(MIX0, sample_rate=16000)
    asr = transcribe.load_model(str(EOU))
    session = asr.stream().add_diarizer(sortformer)
    words, carried, updates = run_session(session, pcm, piece=2560)
    assert words
    turns = session.speaker_turns()
    assert turns and all(isinstance(t, SpeakerTurn) for t in turns)
    assert [w.speaker for w in words] == [speaker_at(turns, w.start, w.end) for w in words]
    # the streaming diarizer run alone on the same audio gives the same turns
    alone = sortformer.stream_diarizer()
    for i in range(0, len(pcm), 2560):
        alone.feed(pcm[i:i + 2560])
    alone.finish()
    assert alone.turns(True) == turns
    # at most one speaker: the diarizer merges the others into it
    one = asr.stream().add_diarizer(sortformer, num_speakers=1)
    words = run_session(one, pcm, piece=2560)[0]
    assert {w.speaker for w in words} == {"speaker_0"} and {t.speaker for t in one.speaker_turns()} == {"speaker_0"}


def test_stream_command_with_the_streaming_sortformer(capsys, sortformer):
    code, out, err = run(capsys, "--stream", MIX0, "--model", EOU,
                         "--diarize", "--diarizer", SORTFORMER, "--format", "jsonl")
    assert code == 0, err
    final = json.loads(out.splitlines()[-1])
    assert final["speakers"] and all(w["speaker"] is not None for w in final["words"])
    assert {w["speaker"] for w in final["words"]} <= {t["speaker"] for t in final["speakers"]}


def test_model_stream_with_diarize_labels_words(sortformer):
    """`model.stream(diarize=True, diarizer=...)` is `stream()` plus `add_diarizer`: the same labels."""
    asr, sf = transcribe.load_model(str(OFFLINE)), sortformer
    pcm = load_audio(str(MIX0), 16000)

    def words(session):
        with session as s:
            got = []
            for i in range(0, len(pcm), 8000):
                s.feed(pcm[i:i + 8000])
                got += s.drain_words()
            s.finalize()
            got += s.drain_words()
            return [(w.word, w.speaker) for w in got]  # the drained Word objects get their labels too

    a = words(asr.stream(diarize=True, diarizer=sf))
    b = words(asr.stream().add_diarizer(sf))
    assert a == b and a and all(sp is not None for _, sp in a)
    with pytest.raises(transcribe.TranscribeError):
        asr.stream(num_speakers=2)
    with pytest.raises(transcribe.TranscribeError):
        sf.stream(diarize=True, diarizer=sf)

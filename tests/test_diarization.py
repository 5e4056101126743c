"""Speakers: the schema's round trip, the speaker limit (`limit_speakers`: the rule on hand-made tables),
attribution (`attribute`: overlap, straddling words, ties, gaps, no turns; seeded random transcripts for the
properties: every word kept in order, segments never spanning a change, times monotonic), and
`diarize=True` through the recognizer contract with a fake diarizer (each input decoded once, the diarizer
loaded once and shared, every refusal before any work). The real Sortformer runs in the end-to-end tests
at the bottom (skipped until its family is registered)."""
from __future__ import annotations

import copy
import io
import json
import random
import threading
from dataclasses import dataclass

import numpy as np
import pytest
import soundfile as sf

import transcribe
from transcribe import hub
from transcribe.diarization import Diarization, attribute, check_num_speakers, limit_speakers, speaker_at
from transcribe.errors import OptionValueError, TranscribeError
from transcribe.options import option
from transcribe.recognizer import Recognizer
from transcribe.results import Segment, SpeakerTurn, Transcript, Word
from transcribe.writers import to_rttm

from .conftest import SHARED

SR = 16000
T = SpeakerTurn


# ------------------------------------------------------------------------------------------- fakes

@dataclass(frozen=True)
class FakeOptions:
    timestamps: bool = option(True, help="segment times", command=False, form=None)
    word_timestamps: bool = option(False, help="word times", command=False, form=None)
    sample_rate: int = option(None, help="rate", command=False, form=None)
    batch_size: int = option(None, help="batch", command=False, form=None)


@dataclass(frozen=True)
class NoWordTimes(FakeOptions):
    """A family that cannot time words (as Cohere): word_timestamps=True is an OptionValueError."""

    def __post_init__(self):
        if self.word_timestamps:
            raise OptionValueError("word_timestamps", "word_timestamps: this model cannot time words")


class FakeASR(Recognizer):
    """One word every 0.5 s of audio ("w0 w1 ..."), 0.4 s long, in segments of 4 words; without word times
    (word_timestamps False) segments only. Records what it was given."""

    family, kind, Options = "fake", "Fake", FakeOptions

    def __init__(self, name="fake-asr"):
        self.name = name
        self.seen = []

    def _transcribe(self, items, opts):
        out = []
        for group in self.groups(items, opts.sample_rate):
            for _, pcm in group:
                self.seen.append((type(items[0]).__name__, len(pcm), opts))
                dur = len(pcm) / SR
                words = [Word(f"w{i}.", i * 0.5, i * 0.5 + 0.4) if i % 4 == 3 else Word(f"w{i}", i * 0.5, i * 0.5 + 0.4)
                         for i in range(int(dur / 0.5))]
                segments = [Segment(" ".join(w.word for w in words[k:k + 4]), words[k].start, words[min(k + 3, len(words) - 1)].end,
                                    list(words[k:k + 4]), avg_logprob=-0.25) for k in range(0, len(words), 4)]
                if not opts.word_timestamps:
                    segments = [Segment(s.text, s.start, s.end, avg_logprob=-0.25) for s in segments]
                    words = []
                out.append(Transcript(" ".join(s.text for s in segments), dur, segments, words, model=self.name))
        return out


class NoWordsASR(FakeASR):
    Options = NoWordTimes


@dataclass(frozen=True)
class FakeDiarizerOptions:
    num_speakers: int = option(None, help="speakers", command=False, form=None)
    sample_rate: int = option(None, help="rate", command=False, form=None)
    timestamps: bool = option(True, help="times", command=False, form=None)


class FakeDiarizer(Recognizer):
    """The diarizer contract: speaker_0 in the first 40 % of the audio, speaker_1 after, overlapping by
    0.1 s; `num_speakers=1`: speaker_0 throughout (limit_speakers on its probabilities)."""

    family, kind, Options = "fakediar", "FakeDiar", FakeDiarizerOptions
    diarizer = True
    max_speakers = 4
    frame_s = 0.08

    def __init__(self, name="fake-diar"):
        self.name = name
        self.calls = []

    def diarize(self, audio, sample_rate=None, num_speakers=None):
        check_num_speakers(num_speakers, self.max_speakers)
        single = not isinstance(audio, (list, tuple))
        items = [audio] if single else list(audio)
        out = []
        for group in self.groups(items, sample_rate):
            for _, pcm in group:
                self.calls.append((type(items[0]).__name__, len(pcm), sample_rate, num_speakers))
                out.append(self._one(len(pcm) / SR, num_speakers))
        return out[0] if single else out

    def _one(self, dur, n):
        frames = int(round(dur / self.frame_s))
        t = (np.arange(frames) + 0.5) * self.frame_s
        probs = np.zeros((frames, 4), np.float32)
        probs[:, 0] = np.where(t < 0.4 * dur, 0.9, 0.1)
        probs[:, 1] = np.where(t >= 0.4 * dur - 0.1, 0.8, 0.05)
        if n is not None:
            probs = limit_speakers(probs, n)
        turns = []
        for k in range(probs.shape[1]):
            on = probs[:, k] > 0.5
            i = 0
            while i < frames:
                if on[i]:
                    j = i
                    while j < frames and on[j]:
                        j += 1
                    turns.append(T(f"speaker_{k}", round(i * self.frame_s, 2), round(j * self.frame_s, 2)))
                    i = j
                else:
                    i += 1
        return Diarization(probs, self.frame_s, dur, sorted(turns, key=lambda x: (x.start, x.speaker)))

    def _transcribe(self, items, opts):
        ds = self.diarize(items, opts.sample_rate, opts.num_speakers)
        return [Transcript("", d.duration, speakers=d.turns, model=self.name) for d in ds]


def wav_bytes(seconds: float) -> bytes:
    rng = np.random.default_rng(1)
    buf = io.BytesIO()
    sf.write(buf, (0.1 * rng.standard_normal(int(seconds * SR))).astype(np.float32), SR, format="WAV")
    return buf.getvalue()


class OneShot(io.RawIOBase):
    """A pipe-like file object: read once, no seeking; a second read gets nothing."""

    def __init__(self, data: bytes):
        self.data, self.reads = data, 0

    def readable(self):
        return True

    def seekable(self):
        return False

    def readinto(self, b):
        self.reads += 1
        n = min(len(b), len(self.data))
        b[:n], self.data = self.data[:n], self.data[n:]
        return n


# ------------------------------------------------------------------------------------------ schema

def test_schema_round_trips_and_old_documents_load():
    w = Word("hi", 0.0, 0.4, 0.9, speaker="speaker_1")
    t = Transcript("hi", 1.0, [Segment("hi", 0.0, 0.4, [w], speaker="speaker_1")], [w],
                   speakers=[T("speaker_0", 0.0, 0.2), T("speaker_1", 0.1, 1.0)])
    d = t.to_dict()
    assert d["speakers"] == [{"speaker": "speaker_0", "start": 0.0, "end": 0.2},
                             {"speaker": "speaker_1", "start": 0.1, "end": 1.0}]
    assert d["words"][0]["speaker"] == d["segments"][0]["speaker"] == "speaker_1"
    assert Transcript.from_dict(d) == t and Transcript.from_dict(d).to_dict() == d
    plain = Transcript("x", 1.0, [Segment("x", 0, 1, [Word("x", 0, 1)])], [Word("x", 0, 1)]).to_dict()
    assert plain["speakers"] is None and plain["words"][0]["speaker"] is None and plain["segments"][0]["speaker"] is None
    old = {k: copy.deepcopy(v) for k, v in plain.items() if k != "speakers"}  # a document from before speakers
    for x in old["segments"] + old["words"] + old["segments"][0]["words"]:
        x.pop("speaker")
    assert Transcript.from_dict(old).to_dict() == plain
    empty = Transcript("", 1.0, speakers=[])
    assert Transcript.from_dict(empty.to_dict()).speakers == []  # [] (diarized, no one) is not None


# --------------------------------------------------------------------------------- limit_speakers

def test_limit_speakers_keeps_the_largest_and_merges_into_the_most_overlapping():
    p = np.array([  # columns: sums 2.6, 0.6, 1.8, 0.9 -> keep 0 and 2 (n=2)
        [0.9, 0.0, 0.0, 0.0],
        [0.9, 0.0, 0.0, 0.0],
        [0.1, 0.6, 0.9, 0.0],   # speaker 1 active here, where speaker 2 is the larger: merged into 2
        [0.0, 0.0, 0.9, 0.6],   # speaker 3 active here and next, where speaker 2 (0.9) beats 0 (0.7)
        [0.7, 0.0, 0.0, 0.3],
        [0.0, 0.0, 0.0, 0.0],
    ], np.float32)
    got = limit_speakers(p, 2)
    assert got.dtype == np.float32 and got.shape == (6, 2)
    want2 = np.maximum(np.maximum(p[:, 2], p[:, 1]), p[:, 3])
    np.testing.assert_array_equal(got, np.stack([p[:, 0], want2], 1))  # arrival: 0 (frame 0), then 2 (frame 2)


def test_limit_speakers_orders_kept_speakers_by_arrival_and_never_active_last():
    p = np.array([
        [0.0, 0.0, 0.45, 0.0],
        [0.0, 0.9, 0.45, 0.0],
        [0.8, 0.9, 0.45, 0.0],
        [0.8, 0.0, 0.45, 0.0],
    ], np.float32)  # sums 1.6, 1.8, 1.8, 0: keep 1, 2 (tie by column) and 0; 2 never above 0.5
    got = limit_speakers(p, 3)
    np.testing.assert_array_equal(got, p[:, [1, 0, 2]])  # 1 arrives at frame 1, 0 at frame 2, 2 never: last
    # one kept (1, the tie going to the earlier column): every other merged into it
    np.testing.assert_array_equal(limit_speakers(p, 1), p.max(axis=1, keepdims=True))


def test_limit_speakers_merge_targets_use_the_probabilities_as_given():
    # two dropped speakers: each target is chosen on the original table, so order does not matter
    p = np.array([
        [0.9, 0.0, 0.6, 0.0],
        [0.9, 0.0, 0.0, 0.6],
        [0.0, 0.9, 0.0, 0.6],
        [0.0, 0.9, 0.0, 0.0],
        [0.9, 0.9, 0.0, 0.0],
    ], np.float32)  # sums 2.7, 2.7, 0.6, 1.2: keep 0 and 1; 2 -> 0 (frame 0); 3 -> frames 1, 2: 0.9 vs 0.9 tie ->
    # the larger total (a tie too: 2.7 each) -> the earlier column, 0
    got = limit_speakers(p, 2)
    np.testing.assert_array_equal(got[:, 0], np.maximum(p[:, 0], np.maximum(p[:, 2], p[:, 3])))
    np.testing.assert_array_equal(got[:, 1], p[:, 1])


def test_limit_speakers_at_or_above_the_speakers_changes_nothing_and_bad_n_is_refused():
    p = np.random.default_rng(0).random((7, 4)).astype(np.float32)
    np.testing.assert_array_equal(limit_speakers(p, 4), p)
    np.testing.assert_array_equal(limit_speakers(p.astype(np.float64), 9), p)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(OptionValueError, match="num_speakers"):
            limit_speakers(p, bad)
    with pytest.raises(OptionValueError, match="num_speakers must be at most 4"):
        check_num_speakers(5, 4)
    check_num_speakers(None, 4)
    check_num_speakers(4, 4)


# --------------------------------------------------------------------------------------- attribute

@pytest.mark.parametrize("start, end, turns, want", [
    (1.0, 2.0, [T("a", 0, 1.4), T("b", 1.4, 3)], "b"),                # straddles: the larger overlap
    (1.0, 2.0, [T("a", 0, 1.6), T("b", 1.6, 3)], "a"),
    (1.0, 2.0, [T("a", 0, 1.5), T("b", 1.5, 3)], "a"),                # an exact half: both hold the middle: earlier
    (1.0, 2.0, [T("b", 1, 2), T("a", 1, 2)], "a"),                    # overlapping speech, the same turn: by name
    (0.0, 4.0, [T("a", 0, 1), T("b", 3, 4)], "a"),                    # a tie, the middle in neither: earlier turn
    (0.0, 4.0, [T("a", 0, 1), T("b", 1.5, 2.5), T("a", 3, 4)], "a"),  # a speaker's turns add up
    (1.0, 2.0, [T("a", 0, 3), T("b", 1.2, 1.8)], "a"),                # overlapping turns: the most time
    (5.0, 6.0, [T("a", 0, 1), T("b", 7, 8)], "b"),                    # no overlap: the nearest
    (5.0, 6.0, [T("a", 0, 4), T("b", 7, 8)], "a"),                    # equal gaps: the earlier turn
    (5.0, 6.0, [T("a", 0, 5), T("b", 6, 8)], "a"),                    # touching both: gap 0 each, the earlier
    (2.0, 2.0, [T("a", 0, 1), T("b", 1, 3)], "b"),                    # a point word inside a turn
    (2.0, 2.0, [T("a", 0, 2), T("b", 2, 3)], "a"),                    # a point word on a change: the earlier
    (9.0, 9.0, [T("a", 0, 2), T("b", 2, 3)], "b"),                    # a point word after every turn
    (1.0, 0.5, [T("a", 0, 0.8), T("b", 0.9, 3)], "b"),                # end before start: a point at its start
    (1.0, 2.0, [], None),
])
def test_the_attribution_rule(start, end, turns, want):
    assert speaker_at(turns, start, end) == want
    t = attribute(Transcript("x", 10.0, words=[Word("x", start, end)]), turns)
    assert t.words[0].speaker == want


def test_segments_split_at_speaker_changes_with_their_text_and_fields():
    words = [Word("Hello", 0.0, 0.4), Word("there.", 0.5, 0.9), Word("How", 1.1, 1.3), Word("are", 1.4, 1.6),
             Word("you?", 1.7, 2.0)]
    seg = Segment(" Hello there. How are you?", 0.0, 2.0, words, avg_logprob=-0.3, temperature=0.0)
    t = Transcript(seg.text, 3.0, [seg], list(words), model="m", language="en")
    got = attribute(t, [T("speaker_0", 0.0, 1.0), T("speaker_1", 1.0, 2.5)])
    assert [(s.text, s.start, s.end, s.speaker, s.avg_logprob, s.temperature) for s in got.segments] == [
        ("Hello there.", 0.0, 0.9, "speaker_0", -0.3, 0.0), ("How are you?", 1.1, 2.0, "speaker_1", -0.3, 0.0)]
    assert [w.speaker for w in got.words] == ["speaker_0"] * 2 + ["speaker_1"] * 3
    assert [w.speaker for s in got.segments for w in s.words] == [w.speaker for w in got.words]
    assert (got.text, got.model, got.language, got.duration) == (t.text, "m", "en", 3.0)
    assert got.speakers == [T("speaker_0", 0.0, 1.0), T("speaker_1", 1.0, 2.5)]
    assert t.words[0].speaker is None and t.speakers is None  # the transcript given is left alone
    # a segment that does not change speaker keeps its own text; words the text does not hold are joined
    same = attribute(t, [T("speaker_0", 0.0, 3.0)])
    assert [(s.text, s.speaker) for s in same.segments] == [(seg.text, "speaker_0")]
    odd = Transcript("x", 3.0, [Segment("NOT THE WORDS", 0.0, 2.0, words)], list(words))
    got = attribute(odd, [T("speaker_0", 0.0, 1.0), T("speaker_1", 1.0, 2.5)])
    assert [s.text for s in got.segments] == ["Hello there.", "How are you?"]


def test_text_without_spaces_is_cut_where_the_words_are():
    words = [Word("今日", 0.0, 0.5), Word("は", 0.5, 0.8), Word("晴れ", 1.2, 1.6), Word("です。", 1.6, 2.0)]
    t = Transcript("今日は晴れです。", 2.0, [Segment("今日は晴れです。", 0.0, 2.0, words)], list(words))
    got = attribute(t, [T("speaker_0", 0.0, 1.0), T("speaker_1", 1.0, 2.0)])
    assert [(s.text, s.speaker) for s in got.segments] == [("今日は", "speaker_0"), ("晴れです。", "speaker_1")]


def test_segments_without_words_get_a_speaker_and_are_not_split():
    t = Transcript("a b", 4.0, [Segment("a", 0.0, 1.9), Segment("b", 2.0, 4.0), Segment("c", 5.0, 5.5)])
    got = attribute(t, [T("speaker_0", 0.0, 1.2), T("speaker_1", 1.2, 4.0)])
    assert [(s.text, s.speaker) for s in got.segments] == [("a", "speaker_0"), ("b", "speaker_1"), ("c", "speaker_1")]


def test_no_turns_at_all_leaves_every_speaker_none():
    words = [Word("a", 0, 1), Word("b", 1, 2)]
    got = attribute(Transcript("a b", 2.0, [Segment("a b", 0, 2, words)], list(words)), [])
    assert got.speakers == [] and got.to_dict()["speakers"] == []
    assert [w.speaker for w in got.words] == [None, None] and [s.speaker for s in got.segments] == [None]
    assert [s.text for s in got.segments] == ["a b"]


def _random_case(rng: random.Random):
    n_words = rng.randint(0, 40)
    t, words = 0.0, []
    for i in range(n_words):
        t += rng.choice([0.0, 0.05, 0.3, 1.2])
        length = rng.choice([0.0, 0.1, 0.4, 0.9])
        words.append(Word(f"w{i}" + ("." if rng.random() < 0.2 else ""), round(t, 3), round(t + length, 3)))
        t += length
    segments, k = [], 0
    while k < len(words):
        n = rng.randint(1, 6)
        part = words[k:k + n]
        segments.append(Segment(" " + " ".join(w.word for w in part), part[0].start, part[-1].end, part,
                                avg_logprob=-rng.random()))
        k += n
    turns, s = [], 0.0
    for _ in range(rng.randint(0, 12)):
        s += rng.choice([0.0, 0.2, 1.0, 3.0])
        e = s + rng.choice([0.08, 0.5, 2.0, 5.0])
        turns.append(T(f"speaker_{rng.randint(0, 3)}", round(s, 2), round(e, 2)))
        s = e - rng.choice([0.0, 0.3, 1.0])  # some overlap
    return Transcript(" ".join(w.word for w in words), t + 1.0, segments, list(words)), turns


def test_properties_on_random_transcripts():
    rng = random.Random(30)
    for _ in range(400):
        t, turns = _random_case(rng)
        got = attribute(t, turns)
        # nothing dropped or reordered; the words in segments are the transcript's words
        assert [(w.word, w.start, w.end) for w in got.words] == [(w.word, w.start, w.end) for w in t.words]
        assert [(w.word, w.start, w.end) for s in got.segments for w in s.words] == \
               [(w.word, w.start, w.end) for w in t.words]
        assert " ".join(s.text.strip() for s in got.segments) == " ".join(s.text.strip() for s in t.segments)
        # every word has a speaker when there are turns; a segment's words share its speaker; a change of speaker
        # between two words of one original segment starts a new segment
        for w in got.words:
            assert (w.speaker is None) == (not turns)
            assert w.speaker == speaker_at(turns, w.start, w.end)
        for s in got.segments:
            assert s.words and {w.speaker for w in s.words} == {s.speaker}
            assert (s.start, s.end) == (s.words[0].start, s.words[-1].end)
        # times monotonic, segments in order
        starts = [s.start for s in got.segments]
        assert starts == sorted(starts) and all(s.start <= s.end for s in got.segments)
        assert got.speakers == sorted(turns, key=lambda x: (x.start, x.speaker, x.end))
        assert Transcript.from_dict(got.to_dict()) == got  # round trip


# ------------------------------------------------------------------------------- diarize=True (API)

def test_diarize_attributes_words_and_decodes_each_input_once():
    asr, diar = FakeASR(), FakeDiarizer()
    src = OneShot(wav_bytes(5.0))
    got = asr.transcribe(src, diarize=True, diarizer=diar)
    assert diar.calls == [("ndarray", 5 * SR, SR, None)]  # arrays at the model's rate, not the file again
    assert asr.seen[0][0] == "ndarray" and asr.seen[0][2].word_timestamps is True  # word times asked for
    assert got.speakers == [T("speaker_0", 0.0, 2.0), T("speaker_1", 1.92, 4.96)]
    assert [w.speaker for w in got.words] == ["speaker_0"] * 4 + ["speaker_1"] * 6
    assert [(s.text, s.speaker) for s in got.segments] == [
        ("w0 w1 w2 w3.", "speaker_0"), ("w4 w5 w6 w7.", "speaker_1"), ("w8 w9", "speaker_1")]
    # a list gives a list; arrays at their own rate are decoded (resampled) once
    pcm = np.zeros(8000 * 3, np.float32)
    out = asr.transcribe([pcm, pcm[:8000]], diarize=True, diarizer=diar, sample_rate=8000, num_speakers=1)
    assert diar.calls[-2:] == [("ndarray", 3 * SR, SR, 1), ("ndarray", SR, SR, 1)]
    assert [x[1] for x in asr.seen[-2:]] == [3 * SR, SR] and len(out) == 2 and all(w.speaker == "speaker_0" for t in out for w in t.words)
    assert asr.transcribe([], diarize=True, diarizer=diar) == []


def test_a_family_that_cannot_time_words_gets_speakers_on_segments():
    got = NoWordsASR().transcribe(wav_bytes(5.0), diarize=True, diarizer=FakeDiarizer())
    assert got.words == [] and [s.speaker for s in got.segments] == ["speaker_0", "speaker_1", "speaker_1"]
    # asked for explicitly, the family's refusal stands
    with pytest.raises(OptionValueError, match="cannot time words"):
        NoWordsASR().transcribe(wav_bytes(1.0), diarize=True, diarizer=FakeDiarizer(), word_timestamps=True)


def test_the_diarizer_by_name_is_loaded_once_and_shared_by_threads(monkeypatch):
    loads = []

    def load_model(name, device="cpu", dtype=None, threads=None):
        loads.append((name, device, threads))
        return FakeDiarizer(name) if name != "an-asr" else FakeASR(name)

    monkeypatch.setattr(transcribe.loading, "load_model", load_model)
    asr = FakeASR()
    asr.threads = 1
    results, errors = [], []

    def work():
        try:
            results.append(asr.transcribe(wav_bytes(2.0), diarize=True, diarizer="my-diar"))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == [] and len(results) == 4 and all(r.to_dict() == results[0].to_dict() for r in results)
    assert loads == [("my-diar", "cpu", 1)]
    asr.transcribe(wav_bytes(1.0), diarize=True)  # the default diarizer, by its short name
    assert loads[-1][0] == hub.DEFAULT_DIARIZER == "sortformer-v2.1"
    with pytest.raises(TranscribeError, match="^an-asr is a Fake recognizer, not a diarizer$"):
        asr.transcribe(wav_bytes(1.0), diarize=True, diarizer="an-asr")


def test_refusals_come_before_any_work():
    asr, diar = FakeASR(), FakeDiarizer()
    cases = [
        (asr, dict(diarize=True, diarizer=FakeASR("other")), TranscribeError, "other is a Fake recognizer, not a diarizer"),
        (diar, dict(diarize=True, diarizer=FakeDiarizer()), TranscribeError, "fake-diar is a diarizer: give it as "
                                                                                 "diarizer=/--diarizer"),
        (asr, dict(num_speakers=2), TranscribeError, r"num_speakers \(--num-speakers\) needs diarize=True"),
        (asr, dict(diarizer=diar), TranscribeError, "diarize=True"),
        (asr, dict(diarize=True, diarizer=diar, num_speakers=5), OptionValueError, "num_speakers must be at most 4"),
        (asr, dict(diarize=True, diarizer=diar, num_speakers=0), OptionValueError, "num_speakers must be a positive"),
        (asr, dict(diarize=True, diarizer=diar, timestamps=False), TranscribeError, "needs timestamps"),
        (asr, dict(diarize="yes", diarizer=diar), OptionValueError, "diarize must be True or False"),
    ]
    for model, kw, err, msg in cases:
        with pytest.raises(err, match=msg):
            model.check_options(**kw)
        with pytest.raises(err, match=msg):
            model.transcribe(OneShot(b"never read"), **kw)
    assert asr.seen == [] and diar.calls == []
    # a diarizer's own option, without diarize
    got = diar.transcribe(np.zeros(SR * 5, np.float32), num_speakers=1)
    assert got.text == "" and got.words == [] and got.speakers == [T("speaker_0", 0.0, 4.96)]
    diar.check_options(num_speakers=2)


def test_the_sortformer_short_names(monkeypatch, tmp_path):
    for alias, repo in (("sortformer-v2.1", "nvidia/diar_streaming_sortformer_4spk-v2.1"),
                        ("sortformer-v2", "nvidia/diar_streaming_sortformer_4spk-v2"),
                        ("sortformer-v1", "nvidia/diar_sortformer_4spk-v1"),
                        ("diar_streaming_sortformer_4spk-v2.1", "nvidia/diar_streaming_sortformer_4spk-v2.1"),
                        ("diar_sortformer_4spk-v1", "nvidia/diar_sortformer_4spk-v1")):
        asked = []
        monkeypatch.setattr(hub, "from_hub", lambda r: asked.append(r) or tmp_path)
        assert hub.resolve(alias) == (tmp_path, alias)
        assert asked == [repo]
    assert hub.ALIASES[hub.DEFAULT_DIARIZER] == "nvidia/diar_streaming_sortformer_4spk-v2.1"


# ------------------------------------------------------------------------------------ the command

@pytest.fixture
def fakes(monkeypatch, tmp_path):
    """load_model gives a FakeASR for "asr", a FakeDiarizer for "diar"; a 5 s WAV in tmp_path."""
    made = []

    def load_model(name=None, device="cpu", dtype=None, threads=None):
        if name not in ("asr", "diar"):
            raise transcribe.ModelError(f"unknown model {name!r}")
        model = FakeASR(name) if name == "asr" else FakeDiarizer(name)
        made.append(model)
        return model

    monkeypatch.setattr(transcribe, "load_model", load_model, raising=False)
    monkeypatch.setattr(transcribe.loading, "load_model", load_model)
    wav = tmp_path / "mix.wav"
    wav.write_bytes(wav_bytes(5.0))
    return made, wav


def cli(capsys, *argv):
    from transcribe import cli as command

    code = command.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_diarizes_to_json_rttm_txt_and_files(fakes, capsys, tmp_path):
    made, wav = fakes
    code, out, err = cli(capsys, wav, "--model", "asr", "--diarize", "--diarizer", "diar", "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert [w["speaker"] for w in doc["words"]] == ["speaker_0"] * 4 + ["speaker_1"] * 6
    for s in doc["segments"]:
        assert {w["speaker"] for w in s["words"]} == {s["speaker"]}
    assert doc["speakers"][0] == {"speaker": "speaker_0", "start": 0.0, "end": 2.0}
    code, out, err = cli(capsys, wav, "--model", "asr", "--diarize", "--diarizer", "diar", "-f", "rttm")
    assert code == 0 and out.splitlines() == ["SPEAKER mix 1 0.000 2.000 <NA> <NA> speaker_0 <NA> <NA>",
                                              "SPEAKER mix 1 1.920 3.040 <NA> <NA> speaker_1 <NA> <NA>"]
    code, out, _ = cli(capsys, wav, "--model", "asr", "--diarize", "--diarizer", "diar")  # txt: times asked for all the same
    assert code == 0 and out == "speaker_0: w0 w1 w2 w3.\nspeaker_1: w4 w5 w6 w7. w8 w9\n"
    code, out, err = cli(capsys, wav, "--model", "asr", "--diarize", "--diarizer", "diar", "--num-speakers", "1",
                         "-f", "all", "-o", tmp_path / "out")
    assert (code, err) == (0, "")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mix.json", "mix.rttm", "mix.srt", "mix.txt", "mix.vtt"]
    assert (tmp_path / "out" / "mix.rttm").read_text() == "SPEAKER mix 1 0.000 4.960 <NA> <NA> speaker_0 <NA> <NA>\n"
    assert "<v speaker_0>" in (tmp_path / "out" / "mix.vtt").read_text()
    # a diarizer as the model: its turns, and its own --num-speakers
    code, out, err = cli(capsys, wav, "--model", "diar", "--num-speakers", "2", "-f", "txt")
    assert (code, err) == (0, "") and out == "speaker_0 0.00 2.00\nspeaker_1 1.92 4.96\n"
    code, out, _ = cli(capsys, wav, "--model", "diar", "-f", "rttm")
    assert code == 0 and len(out.splitlines()) == 2


@pytest.mark.parametrize("argv, said", [
    (["--model", "asr", "-f", "rttm"], "rttm needs a diarized transcript (--diarize, or a diarizer model): asr is not a diarizer"),
    (["--model", "asr", "--diarizer", "diar"], "--diarizer needs --diarize"),
    (["--model", "asr", "--num-speakers", "2"], "num_speakers (--num-speakers) needs diarize=True (--diarize): asr is a "
                                                "Fake recognizer, not a diarizer"),
    (["--model", "asr", "--diarize", "--diarizer", "diar", "--num-speakers", "5"],
     "--num-speakers must be at most 4 (the diarizer's speakers), got 5"),
    (["--model", "asr", "--diarize", "--diarizer", "asr"], "asr is a Fake recognizer, not a diarizer"),
    (["--model", "diar", "--diarize", "--diarizer", "diar"], "diar is a diarizer: give it as diarizer=/--diarizer"),
    (["--model", "asr", "--diarize", "--num-speakers", "0"], "--num-speakers: "),
])
def test_the_command_s_refusals_are_one_line_and_exit_2(fakes, capsys, argv, said):
    made, wav = fakes
    code, out, err = cli(capsys, wav, *argv)
    assert code == 2 and out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith("transcribe: error: ") and said in last, err
    assert all(not getattr(m, "seen", None) and not getattr(m, "calls", None) for m in made)  # no work done


def test_stream_and_batch_have_no_diarize(fakes, capsys, tmp_path):
    _, wav = fakes
    code, _, err = cli(capsys, "--stream", wav, "--model", "asr", "--diarize")
    assert code == 2 and "--diarize does not apply to --stream" in err
    code, _, err = cli(capsys, "batch", wav, "--output-dir", tmp_path / "b", "--diarize")
    assert code == 2 and "--diarize" in err.strip().splitlines()[-1]


# ---------------------------------------------------------------- end to end: the tiny Sortformer

SF = SHARED / "models" / "sortformer-tiny"
SF_MODEL = SF / "sortformer-tiny.nemo"
MIX0 = SF / "mix0.wav"
PARAKEET = SHARED / "models" / "parakeet-tiny" / "tiny-tdt-fit.nemo"
real = pytest.mark.skipif(not (SF_MODEL.is_file() and PARAKEET.is_file()),
                          reason="the shared tiny Sortformer and Parakeet models are not in ../shared/models")


def _check_attributed(doc: dict) -> None:
    """Every word has a speaker consistent with the turns; segments hold one speaker each; times monotonic."""
    turns = [T(**t) for t in doc["speakers"]]
    assert turns and doc["words"]
    for w in doc["words"]:
        assert w["speaker"] is not None and w["speaker"] == speaker_at(turns, w["start"], w["end"])
    assert [w for s in doc["segments"] for w in s["words"]] == doc["words"]  # nothing dropped, in order
    for s in doc["segments"]:
        assert {w["speaker"] for w in s["words"]} == {s["speaker"]}
    starts = [w["start"] for w in doc["words"]]
    assert starts == sorted(starts)


@real
def test_the_must_show_command_with_the_tiny_sortformer(capsys):
    code, out, err = cli(capsys, MIX0, "--model", PARAKEET, "--diarize", "--diarizer", SF_MODEL, "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    _check_attributed(doc)
    diarizer = transcribe.load_model(str(SF_MODEL))
    assert doc["speakers"] == [t.to_dict() for t in diarizer.transcribe(str(MIX0)).speakers]
    # the same through the API, with the diarizer loaded or named, and each input decoded once
    asr = transcribe.load_model(str(PARAKEET))
    by_object = asr.transcribe(OneShot(MIX0.read_bytes()), diarize=True, diarizer=diarizer)
    assert by_object.to_dict() == asr.transcribe(str(MIX0), diarize=True, diarizer=str(SF_MODEL)).to_dict()
    assert by_object.to_dict()["words"] == doc["words"]
    one = asr.transcribe(str(MIX0), diarize=True, diarizer=diarizer, num_speakers=1)
    assert {w.speaker for w in one.words} == {"speaker_0"} and {t.speaker for t in one.speakers} == {"speaker_0"}
    assert one.text == by_object.text  # the recognizer's text is left as it was


@real
@pytest.mark.parametrize("argv, said", [
    (["--model", SF_MODEL, "--diarize", "--diarizer", SF_MODEL], "sortformer-tiny.nemo is a diarizer: give it as "
                                                                 "diarizer=/--diarizer"),
    (["--model", PARAKEET, "--diarize", "--diarizer", PARAKEET], "tiny-tdt-fit.nemo is a Parakeet recognizer, not a "
                                                                 "diarizer"),
    (["--model", PARAKEET, "--diarize", "--diarizer", SF_MODEL, "--num-speakers", "5"],
     "--num-speakers must be at most 4 (the diarizer's speakers), got 5"),
    (["--model", PARAKEET, "--num-speakers", "2"], "tiny-tdt-fit.nemo is a Parakeet model and does not take "
                                                   "--num-speakers (it is not a diarizer: add --diarize"),
    (["--model", SF_MODEL, "--num-speakers", "5"], "--num-speakers must be at most 4"),
    (["--model", PARAKEET, "-f", "rttm"], "rttm needs a diarized transcript"),
])
def test_bad_pairings_with_the_real_models_are_one_line_exit_2(capsys, argv, said):
    code, out, err = cli(capsys, MIX0, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and said in err, err


@real
def test_a_sortformer_model_writes_rttm_from_the_command(capsys):
    code, out, err = cli(capsys, MIX0, "--model", SF_MODEL, "--format", "rttm", "--num-speakers", "2")
    assert (code, err) == (0, "")
    turns = transcribe.load_model(str(SF_MODEL)).transcribe(str(MIX0), num_speakers=2).speakers
    assert out == to_rttm(Transcript("", 0.0, speakers=turns), file_id="mix0")


def test_speaker_usage_errors_import_neither_torch_nor_numpy():
    import subprocess
    import sys

    code = ("import sys\nfrom transcribe.cli import main\n"
            "rcs = [main(['x.wav', '--diarizer', 'm']), main(['x.wav', '--diarize', '--num-speakers', '0']),\n"
            "       main(['--stream', 'x.wav', '--diarize']), main(['x.wav', '-f', 'all', '--diarize'])]\n"
            "assert rcs == [2, 2, 2, 2], rcs\n"
            "import transcribe.diarization, transcribe.writers\n"
            "heavy = sorted(m for m in ('torch', 'numpy', 'soundfile', 'av') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr

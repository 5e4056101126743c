"""The writers of a diarized transcript: rttm (its lines parse back to the turns), VTT voice tags, the SRT
speaker prefix, cues that never hold two speakers, txt by speaker and a diarizer's turns as txt."""
from __future__ import annotations

import json
import random
import re

import pytest

from transcribe.diarization import attribute
from transcribe.errors import TranscribeError
from transcribe.results import Segment, SpeakerTurn, Transcript, Word
from transcribe.writers import WRITERS, render, to_json, to_rttm, to_srt, to_txt, to_vtt, write_transcript

T = SpeakerTurn


def diarized(n_words: int = 30, seed: int = 0) -> Transcript:
    """Words every 0.3 s, speakers changing every few words (turns by hand), attributed."""
    rng = random.Random(seed)
    words = [Word(f"word{i}" + ("." if i % 7 == 6 else ""), i * 0.3, i * 0.3 + 0.25) for i in range(n_words)]
    segments, k = [], 0
    while k < n_words:
        part = words[k:k + 7]
        segments.append(Segment(" ".join(w.word for w in part), part[0].start, part[-1].end, part))
        k += 7
    turns, t, spk = [], 0.0, 0
    while t < n_words * 0.3:
        d = rng.choice([0.6, 0.9, 1.5, 2.4])
        turns.append(T(f"speaker_{spk}", round(t, 2), round(t + d, 2)))
        t += d
        spk = (spk + 1) % 3
    return attribute(Transcript(" ".join(w.word for w in words), n_words * 0.3, segments, list(words)), turns)


def parse_rttm(text: str) -> list[tuple]:
    out = []
    for line in text.splitlines():
        f = line.split()
        assert len(f) == 10 and f[0] == "SPEAKER" and f[2] == "1" and f[5:7] == ["<NA>", "<NA>"] and f[8:] == ["<NA>", "<NA>"]
        out.append((f[1], f[7], float(f[3]), float(f[4])))
    return out


def test_rttm_lines_parse_back_to_the_turns():
    t = diarized()
    text = to_rttm(t, file_id="mix0")
    got = parse_rttm(text)
    assert len(got) == len(t.speakers) and text.endswith("\n")
    for (fid, spk, start, dur), turn in zip(got, t.speakers):
        assert fid == "mix0" and spk == turn.speaker
        assert start == pytest.approx(turn.start, abs=5e-4) and start + dur == pytest.approx(turn.end, abs=1e-3)
    assert to_rttm(Transcript("", 1.0, speakers=[])) == ""
    assert to_rttm(Transcript("", 1.0, speakers=[T("speaker_0", 0.5, 1.25)]), file_id="my file") == \
        "SPEAKER my_file 1 0.500 0.750 <NA> <NA> speaker_0 <NA> <NA>\n"
    with pytest.raises(TranscribeError, match=r"^rttm needs a diarized transcript \(--diarize, or a diarizer model\)$"):
        to_rttm(Transcript("text", 1.0))


def test_write_transcript_names_the_rttm_recording_by_the_file_stem(tmp_path):
    t = Transcript("", 2.0, speakers=[T("speaker_0", 0.0, 1.0), T("speaker_1", 0.5, 2.0)])
    write_transcript(t, "rttm", tmp_path / "mix0.rttm")
    assert [r[0] for r in parse_rttm((tmp_path / "mix0.rttm").read_text())] == ["mix0", "mix0"]
    write_transcript(t, "rttm", tmp_path / "x.rttm", file_id="rec")
    assert (tmp_path / "x.rttm").read_text().startswith("SPEAKER rec 1 0.000 1.000")
    assert render(t, "rttm", file_id="z", max_line_width=10) == to_rttm(t, file_id="z")
    with pytest.raises(TypeError, match="unknown option"):
        write_transcript(t, "rttm", tmp_path / "y.rttm", speaker="x")


def _cue_words(text: str) -> list[str]:
    return re.sub(r"<v [^>]*>|^\[speaker_\d\] ", "", text).split()


def test_cues_never_hold_two_speakers_and_carry_their_tag():
    for seed in range(8):
        t = diarized(40, seed)
        speaker_of = {w.word: w.speaker for w in t.words}
        vtt = to_vtt(t, max_line_width=30)
        blocks = vtt.split("\n\n")[1:]
        assert blocks
        ends = []
        all_words = []
        for b in blocks:
            times, text = b.split("\n", 1)
            m = re.match(r"<v (speaker_\d)>", text)
            assert m, b
            words = _cue_words(text)
            assert words and {speaker_of[w] for w in words} == {m.group(1)}, b
            all_words += words
            a, z = times.split(" --> ")
            ends.append((a, z))
        assert all_words == [w.word for w in t.words]  # nothing dropped, in order
        assert ends == sorted(ends)
        srt = to_srt(t, max_line_width=30)
        for b in srt.strip().split("\n\n"):
            _, times, text = b.split("\n", 2)
            m = re.match(r"\[(speaker_\d)\] ", text)
            assert m, b
            assert {speaker_of[w] for w in _cue_words(text)} == {m.group(1)}
            assert max(len(line) for line in text.split("\n")) <= 30 or len(_cue_words(text)) == 1


def test_srt_and_vtt_with_speakers_by_hand():
    w = [Word("Hi", 0.0, 0.4), Word("there.", 0.5, 0.9), Word("Hello", 1.2, 1.6), Word("<you>", 1.7, 2.0)]
    t = attribute(Transcript("Hi there. Hello <you>", 2.0, [Segment("Hi there. Hello <you>", 0.0, 2.0, w)], list(w)),
                  [T("speaker_0", 0.0, 1.0), T("speaker_1", 1.0, 2.0)])
    assert to_srt(t) == ("1\n00:00:00,000 --> 00:00:00,900\n[speaker_0] Hi there.\n\n"
                         "2\n00:00:01,200 --> 00:00:02,000\n[speaker_1] Hello <you>\n")
    assert to_vtt(t) == ("WEBVTT\n\n00:00:00.000 --> 00:00:00.900\n<v speaker_0>Hi there.\n\n"
                         "00:00:01.200 --> 00:00:02.000\n<v speaker_1>Hello &lt;you&gt;\n")
    assert to_txt(t) == "speaker_0: Hi there.\nspeaker_1: Hello <you>\n"
    plain = Transcript("Hi there.", 1.0, [Segment("Hi there.", 0.0, 0.9, w[:2])], w[:2])
    assert "<v " not in to_vtt(plain) and "[speaker" not in to_srt(plain) and to_txt(plain) == "Hi there.\n"


def test_txt_of_segments_without_words_and_of_no_one_heard():
    t = attribute(Transcript("a b c", 3.0, [Segment("a", 0, 1), Segment("b", 1, 2), Segment("c", 2, 3)]),
                  [T("speaker_0", 0.0, 2.0), T("speaker_1", 2.0, 3.0)])
    assert to_txt(t) == "speaker_0: a b\nspeaker_1: c\n"
    nobody = attribute(Transcript("a", 1.0, [Segment("a", 0, 1, [Word("a", 0, 1)])], [Word("a", 0, 1)]), [])
    assert to_txt(nobody) == "a\n" and "<v " not in to_vtt(nobody)
    words_only = attribute(Transcript("a b", 2.0, words=[Word("a", 0, 1), Word("b", 1, 2)]),
                           [T("speaker_0", 0.0, 1.0), T("speaker_1", 1.0, 2.0)])
    assert to_txt(words_only) == "speaker_0: a\nspeaker_1: b\n"
    assert "<v speaker_1>b" in to_vtt(words_only)


def test_a_diarizer_transcript_as_txt_json_and_rttm():
    t = Transcript("", 3.3, speakers=[T("speaker_0", 0.0, 3.2), T("speaker_1", 1.04, 3.3)], model="sf")
    assert to_txt(t) == "speaker_0 0.00 3.20\nspeaker_1 1.04 3.30\n"
    assert Transcript.from_dict(json.loads(to_json(t))) == t
    assert len(parse_rttm(WRITERS["rttm"](t))) == 2
    assert to_srt(t) == "" and to_vtt(t) == "WEBVTT\n"

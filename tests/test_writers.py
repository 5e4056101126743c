import json

import pytest

from transcribe.results import Segment, Token, Transcript, Word
from transcribe.writers import WRITERS, format_timestamp, to_json, to_srt, to_txt, to_vtt, write_transcript


def sample():
    return Transcript(
        text="Hello there. Café & co <b>.",
        duration=3725.25,
        segments=[
            Segment(text=" Hello there.", start=0.0, end=1.9995,
                    words=[Word("Hello", 0.0, 0.5, 0.9), Word("there.", 0.6, 1.9995)]),
            Segment(text="Café & co <b>.", start=3599.9996, end=3725.25),
        ],
        words=[Word("Hello", 0.0, 0.5, 0.9)],
        tokens=[Token(id=5, text="▁Hello", start=0.0, end=0.5, confidence=0.9, frame=0, duration_frames=6)],
        model="test-model",
    )


@pytest.mark.parametrize("seconds,srt", [
    (0, "00:00:00,000"),
    (1.0, "00:00:01,000"),
    (1.9995, "00:00:02,000"),
    (0.9994, "00:00:00,999"),
    (0.0005, "00:00:00,001"),
    (59.9995, "00:01:00,000"),
    (3599.9995, "01:00:00,000"),
    (3599.9994, "00:59:59,999"),
    (3725.25, "01:02:05,250"),
    (36000 * 10 + 0.1, "100:00:00,100"),
    (-0.5, "00:00:00,000"),
    (float("nan"), "00:00:00,000"),
])
def test_format_timestamp(seconds, srt):
    assert format_timestamp(seconds) == srt
    assert format_timestamp(seconds, ".") == srt.replace(",", ".")


def test_txt():
    assert to_txt(sample()) == "Hello there. Café & co <b>.\n"
    assert to_txt(Transcript(text="", duration=1.0)) == "\n"


def test_json_is_one_line_of_to_dict():
    t = sample()
    out = to_json(t)
    assert out.endswith("\n") and out.count("\n") == 1
    assert "Café" in out  # ensure_ascii=False
    assert out == json.dumps(t.to_dict(), ensure_ascii=False) + "\n"
    assert Transcript.from_dict(json.loads(out)) == t


def test_srt():
    assert to_srt(sample()) == (
        "1\n"
        "00:00:00,000 --> 00:00:02,000\n"
        "Hello there.\n"
        "\n"
        "2\n"
        "01:00:00,000 --> 01:02:05,250\n"
        "Café & co <b>.\n"
    )


def test_vtt():
    assert to_vtt(sample()) == (
        "WEBVTT\n"
        "\n"
        "00:00:00.000 --> 00:00:02.000\n"
        "Hello there.\n"
        "\n"
        "01:00:00.000 --> 01:02:05.250\n"
        "Café &amp; co &lt;b&gt;.\n"
    )


def test_no_segments_falls_back_to_one_cue():
    t = Transcript(text="Whole text here.", duration=4.5)
    assert to_srt(t) == "1\n00:00:00,000 --> 00:00:04,500\nWhole text here.\n"
    assert to_vtt(t) == "WEBVTT\n\n00:00:00.000 --> 00:00:04.500\nWhole text here.\n"


def test_empty_transcript_has_no_cues():
    t = Transcript(text="", duration=2.0)
    assert to_srt(t) == ""
    assert to_vtt(t) == "WEBVTT\n"


def test_no_segment_is_skipped_and_bad_times_are_tamed():
    t = Transcript(text="a b c", duration=3.0, segments=[
        Segment(text="a", start=0.0, end=1.0),
        Segment(text="", start=1.0, end=1.5),           # empty text: still a cue
        Segment(text="line one\n\nline two", start=2.0, end=1.8),  # end before start; blank line
    ])
    srt = to_srt(t)
    assert [line for line in srt.splitlines() if "-->" in line] == [
        "00:00:00,000 --> 00:00:01,000",
        "00:00:01,000 --> 00:00:01,500",
        "00:00:02,000 --> 00:00:02,000",
    ]
    assert "line one\nline two\n" in srt
    assert srt.startswith("1\n") and "\n2\n" in srt and "\n3\n" in srt
    assert to_vtt(t).count("-->") == 3


def test_write_transcript(tmp_path):
    t = sample()
    for fmt, fn in WRITERS.items():
        p = tmp_path / f"out.{fmt}"
        write_transcript(t, fmt, p)
        assert p.read_text(encoding="utf-8") == fn(t)
    assert set(WRITERS) == {"txt", "json", "srt", "vtt"}
    with pytest.raises(ValueError, match="unknown format"):
        write_transcript(t, "doc", tmp_path / "x.doc")

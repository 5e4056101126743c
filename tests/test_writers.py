import json

import pytest

from transcribe.errors import TranscribeError
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


def test_no_text_is_skipped_and_bad_times_are_tamed():
    # Subtitles now come from transcribe.text.cues.build_cues, not one cue per segment: a segment
    # with no text makes no cue (an empty cue would end the block early in SRT and VTT), and a
    # segment's text is re-wrapped into balanced lines, so its own line breaks do not survive.
    t = Transcript(text="a b c", duration=3.0, segments=[
        Segment(text="a", start=0.0, end=1.0),
        Segment(text="", start=1.0, end=1.5),           # empty text: no cue
        Segment(text="line one\n\nline two", start=2.0, end=1.8),  # end before start; blank line
        Segment(text="late", start=float("nan"), end=float("inf")),  # non-finite times
    ])
    srt = to_srt(t)
    assert [line for line in srt.splitlines() if "-->" in line] == [
        "00:00:00,000 --> 00:00:01,000",
        "00:00:02,000 --> 00:00:02,000",
        "00:00:02,000 --> 00:00:02,000",
    ]
    assert srt == (
        "1\n00:00:00,000 --> 00:00:01,000\na\n\n"
        "2\n00:00:02,000 --> 00:00:02,000\nline one line two\n\n"
        "3\n00:00:02,000 --> 00:00:02,000\nlate\n"
    )
    assert "\n\n\n" not in srt
    assert to_vtt(t).count("-->") == 3


def long_unpunctuated_transcript(seconds=75.0):
    """Parakeet-like: words with times and no sentence punctuation, hence a single segment."""
    words, t, i = [], 0.0, 0
    while t < seconds - 0.5:
        w = ["word", "another", "speech", "and", "so", "on", "recognition"][i % 7]
        words.append(Word(w, round(t, 2), round(t + 0.3, 2)))
        t += 0.35
        i += 1
    text = " ".join(w.word for w in words)
    return Transcript(text=text, duration=seconds, segments=[Segment(text, 0.0, words[-1].end, words)], words=words)


def test_long_segment_becomes_many_short_cues():
    t = long_unpunctuated_transcript()
    srt = to_srt(t)
    blocks = srt.split("\n\n")
    assert len(blocks) >= 75 / 7
    for n, block in enumerate(blocks, 1):
        lines = block.strip("\n").split("\n")
        assert lines[0] == str(n)
        start, end = lines[1].split(" --> ")
        assert start <= end <= "00:01:15,000"
        assert 1 <= len(lines[2:]) <= 2 and all(0 < len(x) <= 42 for x in lines[2:])
    vtt = to_vtt(t)
    assert vtt.startswith("WEBVTT\n\n") and vtt.count("-->") == len(blocks)


def test_subtitle_options():
    t = long_unpunctuated_transcript(30.0)
    narrow = to_srt(t, max_line_width=20, max_line_count=1)
    text_lines = [x for x in narrow.splitlines() if x and "-->" not in x and not x.isdigit()]
    assert all(len(x) <= 20 for x in text_lines)
    assert narrow.count("-->") == len(text_lines)  # one line per cue
    assert narrow.count("-->") > to_srt(t).count("-->")
    assert to_vtt(t, max_duration=2.0).count("-->") > to_vtt(t).count("-->")
    with pytest.raises(TypeError):
        to_srt(t, 30)  # options are keyword-only
    # VTT escaping applies to wrapped lines too.
    amp = Transcript(text="x", duration=2.0, segments=[Segment("fish & chips <and> peas " * 3, 0.0, 2.0)])
    out = to_vtt(amp, max_line_width=20, max_line_count=4)
    assert "&amp;" in out and "&lt;and&gt;" in out and "<" not in out.replace("-->", "")


def test_write_transcript(tmp_path):
    t = sample()
    for fmt, fn in WRITERS.items():
        p = tmp_path / f"out.{fmt}"
        if fmt == "rttm":  # speaker turns: a transcript that is not diarized has none (test_writers_speakers.py)
            with pytest.raises(TranscribeError, match="rttm needs a diarized transcript"):
                write_transcript(t, fmt, p)
            assert not p.exists()
            continue
        write_transcript(t, fmt, p)
        assert p.read_text(encoding="utf-8") == fn(t)
    assert set(WRITERS) == {"txt", "json", "srt", "vtt", "rttm"}
    with pytest.raises(ValueError, match="unknown format"):
        write_transcript(t, "doc", tmp_path / "x.doc")


def test_write_transcript_passes_options_to_subtitles_only(tmp_path):
    t = long_unpunctuated_transcript(20.0)
    opts = dict(max_line_width=20, max_line_count=1, max_duration=3.0)
    for fmt in ("srt", "vtt"):
        write_transcript(t, fmt, tmp_path / f"o.{fmt}", **opts)
        assert (tmp_path / f"o.{fmt}").read_text(encoding="utf-8") == WRITERS[fmt](t, **opts)
        assert WRITERS[fmt](t, **opts) != WRITERS[fmt](t)
    write_transcript(t, "txt", tmp_path / "o.txt", **opts)
    assert (tmp_path / "o.txt").read_text(encoding="utf-8") == to_txt(t)
    write_transcript(t, "json", tmp_path / "o.json", **opts)
    assert (tmp_path / "o.json").read_text(encoding="utf-8") == to_json(t)
    for fmt in ("txt", "srt"):
        with pytest.raises(TypeError, match="max_lines"):
            write_transcript(t, fmt, tmp_path / "bad", max_lines=3)

"""Subtitle cues (transcribe.text.cues.build_cues): size limits, where cues end, times, no text lost."""
import json
import math
import random

import pytest

from transcribe.results import Segment, Transcript, Word
from transcribe.text.cues import Cue, build_cues

from .conftest import REPO

WHISPER_REFS = REPO / "tests" / "references" / "whisper"


def check(cues, duration, width=42, line_count=2, max_duration=None, long_words=()):
    """The invariants every list of cues must satisfy."""
    assert all(isinstance(c, Cue) for c in cues)
    prev_end = 0.0
    for c in cues:
        assert math.isfinite(c.start) and math.isfinite(c.end)
        assert prev_end <= c.start <= c.end, (prev_end, c)
        if duration > 0:
            assert c.end <= duration, c
        assert 1 <= len(c.lines) <= line_count, c
        for line in c.lines:
            assert line and line == line.strip() and "\n" not in line, c
            assert len(line) <= width or line in long_words, c
        if max_duration is not None and " " in c.text.replace("\n", " "):
            assert c.end - c.start <= max_duration + 1e-9, c
        prev_end = c.end


def words_of(cues):
    return " ".join(" ".join(c.lines) for c in cues).split()


def parakeet_like(seconds=75.0, seed=0, commas=(), pause_after=None, pause=1.5):
    """Words with times as Parakeet gives them: no sentence punctuation, so one segment for all."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words, t, i = [], 0.0, 0
    while True:
        w = "".join(rng.choice(letters) for _ in range(rng.randint(2, 9)))
        if i in commas:
            w += ","
        dur = 0.08 + 0.035 * len(w)
        if t + dur > seconds:
            break
        words.append(Word(w, round(t, 2), round(t + dur, 2), 0.9))
        t += dur + rng.choice([0.0, 0.0, 0.04, 0.08, 0.16])
        if i == pause_after:
            t += pause
        i += 1
    text = " ".join(w.word for w in words)
    seg = Segment(text, words[0].start, words[-1].end, list(words))
    return Transcript(text=text, duration=seconds, segments=[seg], words=list(words), model="parakeet-like")


def test_75_seconds_of_unpunctuated_words_become_many_short_cues():
    t = parakeet_like(commas={40, 90, 150, 210})
    assert len(t.words) > 200 and len(t.segments) == 1
    cues = build_cues(t)
    check(cues, t.duration, max_duration=7.0)
    assert len(cues) >= 75 / 7
    assert all(c.end - c.start <= 7.0 for c in cues)
    # Every word exactly once, in order, never cut.
    assert words_of(cues) == [w.word for w in t.words]
    # The few commas are where cues end.
    assert sum(c.text.endswith(",") for c in cues) == 4


def test_custom_width_and_line_count():
    t = parakeet_like(seconds=40.0, seed=3)
    for width, count in [(20, 1), (30, 3), (60, 2)]:
        cues = build_cues(t, max_line_width=width, max_line_count=count)
        check(cues, t.duration, width=width, line_count=count, max_duration=7.0)
        assert words_of(cues) == [w.word for w in t.words]
    one_line = build_cues(t, max_line_width=20, max_line_count=1)
    assert all(len(c.lines) == 1 and len(c.lines[0]) <= 20 for c in one_line)
    # Narrower cues mean more of them.
    assert len(one_line) > len(build_cues(t))


def test_max_duration_is_honoured():
    t = parakeet_like(seconds=60.0, seed=5)
    cues = build_cues(t, max_duration=3.0)
    check(cues, t.duration, max_duration=3.0)
    assert words_of(cues) == [w.word for w in t.words]
    assert len(cues) > len(build_cues(t))


def timed(text, gaps=None, per_char=0.05):
    """Words of `text` back to back (`gaps`: index -> seconds of silence after that word)."""
    gaps = gaps or {}
    words, t = [], 0.0
    for i, w in enumerate(text.split()):
        words.append(Word(w, round(t, 3), round(t + per_char * len(w) + 0.05, 3)))
        t = words[-1].end + gaps.get(i, 0.0)
    return Transcript(text=text, duration=t + 1.0, words=words)


def test_cues_end_at_clause_marks_when_they_must_be_cut():
    # Clauses of about 50 characters: two never fit in one cue (84), so each cue is one clause.
    clause = "alpha bravo charlie delta echo foxtrot golf hotel"
    text = ", ".join([clause] * 6) + "."
    t = timed(text)
    cues = build_cues(t)
    check(cues, t.duration)
    assert len(cues) == 6
    assert all(c.text.endswith(",") for c in cues[:-1]) and cues[-1].text.endswith(".")


def test_sentence_end_is_preferred_to_a_clause_mark():
    text = ("we walked along the river, past the old mill and the bridge. "
            "then it began to rain and everyone ran for the trees and the shelter")
    t = timed(text)
    cues = build_cues(t)
    check(cues, t.duration)
    assert cues[0].text.replace("\n", " ") == "we walked along the river, past the old mill and the bridge."
    assert words_of(cues) == text.split()


def test_cut_lands_at_a_pause_when_there_is_no_punctuation():
    words = ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
             "fifteen sixteen seventeen eighteen nineteen twenty").split()
    i = words.index("eleven")
    t = timed(" ".join(words), gaps={i: 0.3})  # a short pause (not enough to force a cut) after "eleven"
    cues = build_cues(t)
    check(cues, t.duration)
    assert len(cues) == 2
    assert cues[0].text.replace("\n", " ").endswith("ten eleven")


def test_a_long_pause_always_splits():
    t = timed("so here we are again and then we left", gaps={4: 0.6})
    cues = build_cues(t)
    check(cues, t.duration)
    assert [c.text for c in cues] == ["so here we are again", "and then we left"]
    # The same words without the pause fit one cue.
    t2 = timed("so here we are again and then we left")
    assert [c.text for c in build_cues(t2)] == ["so here we are again and then we left"]
    # A single word before a short pause stays with what follows; a long pause splits even that.
    assert len(build_cues(timed("well I think we should go", gaps={0: 0.7}))) == 1
    assert len(build_cues(timed("well I think we should go", gaps={0: 2.5}))) == 2


def test_pause_in_the_75_second_stream_splits_there():
    t = parakeet_like(pause_after=100, pause=1.5)
    cues = build_cues(t)
    check(cues, t.duration, max_duration=7.0)
    ends = {round(c.end, 6) for c in cues}
    starts = {round(c.start, 6) for c in cues}
    assert round(t.words[100].end, 6) in ends and round(t.words[101].start, 6) in starts


def test_times_are_clamped_to_the_duration():
    t = timed("the last words run on past the end of the audio as models sometimes do")
    t.duration = t.words[5].end
    cues = build_cues(t)
    check(cues, t.duration)
    assert cues[-1].end == t.duration
    assert words_of(cues) == [w.word for w in t.words]
    seg = Transcript(text="a b", duration=2.0, segments=[Segment("a", 0.0, 1.5), Segment("b", 1.0, 9.0)])
    cues = build_cues(seg)
    check(cues, 2.0)
    assert [(c.start, c.end, c.text) for c in cues] == [(0.0, 1.5, "a"), (1.5, 2.0, "b")]


def test_non_finite_times_are_safe():
    nan, inf = float("nan"), float("inf")
    t = Transcript(text="x", duration=5.0, words=[
        Word("first", nan, nan), Word("second", 1.0, inf), Word("third", -inf, 2.0), Word("fourth", 3.0, 2.5)])
    cues = build_cues(t)
    check(cues, 5.0)
    assert words_of(cues) == ["first", "second", "third", "fourth"]
    s = Transcript(text="x", duration=nan, segments=[Segment("one", nan, 1.0), Segment("two", 2.0, nan)])
    cues = build_cues(s)
    check(cues, 0.0)
    assert [(c.start, c.end, c.text) for c in cues] == [(0.0, 1.0, "one"), (2.0, 2.0, "two")]


def test_no_empty_cues_and_nothing_with_text_dropped():
    t = Transcript(text="a b", duration=4.0, segments=[
        Segment("", 0.0, 1.0), Segment("  \n ", 1.0, 2.0), Segment("kept", 2.0, 2.5),
        Segment("line one\n\nline two", 2.5, 3.0)])
    cues = build_cues(t)
    check(cues, 4.0)
    assert [c.text for c in cues] == ["kept", "line one line two"]
    w = Transcript(text="a", duration=2.0, words=[Word("", 0.0, 0.1), Word("a", 0.1, 0.2), Word(" ", 0.2, 0.3)])
    assert [c.text for c in build_cues(w)] == ["a"]
    assert build_cues(Transcript(text="", duration=3.0)) == []
    assert build_cues(Transcript(text="  ", duration=3.0, segments=[Segment(" ", 0, 1)])) == []


def test_segments_without_words_wrap_and_split_in_proportion_to_characters():
    short = "this segment is long enough to need two lines on screen"
    long = ("and this one goes on and on, far longer than any two lines of subtitles could ever hold, "
            "so it has to become several cues, each with its own share of the time. the end")
    t = Transcript(text=short + " " + long, duration=30.0,
                   segments=[Segment(short, 0.0, 4.0), Segment(long, 10.0, 20.0)])
    cues = build_cues(t)
    check(cues, 30.0)
    assert words_of(cues) == (short + " " + long).split()
    # The short one: one cue, two balanced lines (a greedy wrap would give 42 + 13).
    assert (cues[0].start, cues[0].end) == (0.0, 4.0) and len(cues[0].lines) == 2
    assert abs(len(cues[0].lines[0]) - len(cues[0].lines[1])) <= 8
    # The long one: several cues that share out 10..20 s by characters, back to back.
    rest = cues[1:]
    assert len(rest) >= 3
    assert rest[0].start == 10.0 and rest[-1].end == pytest.approx(20.0)
    total = sum(len(c.text.replace("\n", "").replace(" ", "")) for c in rest)
    for a, b in zip(rest, rest[1:]):
        assert a.end == pytest.approx(b.start)
    for c in rest:
        share = len(c.text.replace("\n", "").replace(" ", "")) / total
        assert c.end - c.start == pytest.approx(10.0 * share)


def test_text_only_spans_the_whole_duration():
    text = " ".join(["a sentence of some words that goes on."] * 8)
    t = Transcript(text=text, duration=40.0)
    cues = build_cues(t)
    check(cues, 40.0)
    assert len(cues) >= 4 and cues[0].start == 0.0 and cues[-1].end == pytest.approx(40.0)
    assert words_of(cues) == text.split()


def test_lines_are_balanced():
    text = "the quick brown fox jumps over the lazy dog and keeps running"  # 61 characters
    cues = build_cues(Transcript(text=text, duration=3.0))
    assert len(cues) == 1 and len(cues[0].lines) == 2
    a, b = map(len, cues[0].lines)
    assert abs(a - b) <= 6
    assert build_cues(Transcript(text="short text", duration=1.0))[0].lines == ["short text"]


def test_cjk_text_breaks_between_characters():
    text = ("我们今天去公园玩了一整天，天气非常好。"
            "然后我们吃了晚饭，看了一部很长的电影「星球大战」，非常有意思！大家都很开心。")
    t = Transcript(text=text, duration=12.0, language="zh")
    cues = build_cues(t, max_line_width=16)
    check(cues, 12.0, width=16)
    assert len(cues) >= 2
    assert "".join("".join(c.lines) for c in cues) == text  # no spaces added, nothing lost
    for c in cues:
        for line in c.lines:
            assert line[0] not in "，。！」" and line[-1] != "「"
    # Default width: still broken by characters, not left as one 60-character line.
    cues = build_cues(t)
    check(cues, 12.0)
    assert "".join("".join(c.lines) for c in cues) == text


def test_cjk_words_are_joined_without_spaces():
    chars = "今日は東京に行きます。明日は大阪です。"
    words = [Word(ch, i * 0.2, i * 0.2 + 0.2) for i, ch in enumerate(chars)]
    t = Transcript(text=chars, duration=5.0, words=words, language="ja")
    cues = build_cues(t, max_line_width=8, max_line_count=1)
    check(cues, 5.0, width=8, line_count=1)
    assert "".join(c.text for c in cues) == chars  # no spaces between the words
    assert cues[-1].text == "明日は大阪です。"  # the second sentence is a cue of its own
    assert all(c.text[0] != "。" for c in cues)
    assert [c.text for c in build_cues(t)] == [chars]


def test_a_word_longer_than_a_line_stands_alone_uncut():
    long_word = "pneumonoultramicroscopicsilicovolcanoconiosis-like"
    t = timed(f"he said {long_word} twice")
    cues = build_cues(t, max_line_width=20)
    check(cues, t.duration, width=20, long_words=(long_word,))
    assert any(line == long_word for c in cues for line in c.lines)
    assert words_of(cues) == ["he", "said", long_word, "twice"]
    s = Transcript(text="x", duration=2.0, segments=[Segment(f"a {long_word} b", 0.0, 2.0)])
    cues = build_cues(s, max_line_width=20, max_line_count=1)
    check(cues, 2.0, width=20, line_count=1, long_words=(long_word,))
    assert [c.text for c in cues] == ["a", long_word, "b"]


def test_split_words_and_leading_spaces():
    # openai-whisper style: words keep their leading space; "-hearted" continues "cold".
    raw = [Word(" rather", 0.0, 0.3), Word(" cold", 0.3, 0.6), Word("-hearted", 0.6, 0.9), Word(" indeed", 0.9, 1.2)]
    assert [c.text for c in build_cues(Transcript(text="x", duration=2.0, words=raw))] == ["rather cold-hearted indeed"]
    # Ours: stripped words; a hyphen or a lone punctuation mark still joins the word before.
    ours = [Word("rather", 0.0, 0.3), Word("cold", 0.3, 0.6), Word("-hearted", 0.6, 0.9), Word(",", 0.9, 0.9),
            Word("indeed", 0.9, 1.2)]
    cues = build_cues(Transcript(text="x", duration=2.0, words=ours))
    assert [c.text for c in cues] == ["rather cold-hearted, indeed"]


def test_segments_with_and_without_words_mixed():
    t = Transcript(text="x", duration=10.0, segments=[
        Segment("Hello there.", 0.0, 2.0, [Word("Hello", 0.0, 0.5), Word("there.", 0.6, 2.0)]),
        Segment("No words here.", 3.0, 4.0),
        Segment("More words.", 5.0, 6.0, [Word("More", 5.0, 5.4), Word("words.", 5.5, 6.0)]),
    ])
    cues = build_cues(t)
    check(cues, 10.0)
    assert [(c.start, c.end, c.text) for c in cues] == [
        (0.0, 2.0, "Hello there."), (3.0, 4.0, "No words here."), (5.0, 6.0, "More words.")]


def test_bad_options_are_refused():
    t = Transcript(text="a", duration=1.0)
    with pytest.raises(ValueError):
        build_cues(t, max_line_width=0)
    with pytest.raises(ValueError):
        build_cues(t, max_line_count=0)
    with pytest.raises(TypeError):
        build_cues(t, max_line_width=4.5)
    with pytest.raises(ValueError):
        build_cues(t, max_duration=0)
    with pytest.raises(ValueError):
        build_cues(t, max_duration=float("nan"))
    assert build_cues(t, max_duration=None)[0].text == "a"


def whisper_words_transcript():
    """The committed openai-whisper long-form reference with word times, as our recognizer builds it."""
    clip = json.loads((WHISPER_REFS / "words.json").read_text())["clips"]["longform75"]
    segments = [Segment(s["text"].strip(), s["start"], s["end"],
                        [Word(w["word"].strip(), w["start"], w["end"], w["probability"]) for w in s["words"]])
                for s in clip["segments"]]
    return Transcript(text=clip["text"], duration=clip["num_samples"] / 16000, segments=segments,
                      words=[w for s in segments for w in s.words], model="whisper tiny.en")


def test_real_whisper_words_transcript():
    t = whisper_words_transcript()
    assert t.duration == 75.0 and len(t.words) > 150
    cues = build_cues(t)
    check(cues, t.duration, max_duration=7.0)
    assert 12 <= len(cues) <= 40
    # Nothing lost or reordered (hyphenated pieces like "-hearted" rejoin their word).
    assert "".join(c.text.replace("\n", "").replace(" ", "") for c in cues) == "".join(w.word for w in t.words)
    # Most cues end at punctuation (the text is well punctuated) and none spans a long pause.
    assert sum(c.text[-1] in ".,!?" for c in cues) >= 0.8 * len(cues)
    for c in cues:
        inside = [w for w in t.words if c.start <= w.start and w.end <= c.end]
        assert all(b.start - a.end < 0.5 for a, b in zip(inside, inside[1:]))


def test_real_whisper_segments_without_words():
    d = json.loads((WHISPER_REFS / "longform.json").read_text())
    segments = [Segment(s["text"], s["start"], s["end"]) for s in d["segments"]]
    t = Transcript(text=d["text"], duration=d["num_samples"] / 16000, segments=segments)
    cues = build_cues(t)
    check(cues, t.duration)
    assert len(cues) >= len(segments)
    assert words_of(cues) == d["text"].split()
    # Every cue lies within the segment its text came from.
    spans = [(s.start, s.end) for s in segments]
    for c in cues:
        assert any(a - 1e-9 <= c.start and c.end <= b + 1e-9 for a, b in spans), c


# --- where lines and cues break: phrases, pauses, balance (issue 26, item 11) --------------------

JFK = json.loads((REPO / "tests" / "fixtures" / "jfk_words.json").read_text())["runs"]
JFK_PUNCTUATED = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."


def jfk_transcript(run, punctuated=False):
    """jfk.wav as a real run timed its words; `punctuated`: the same times, the words written as the
    reference punctuates them (as larger models write them)."""
    r = JFK[run]
    texts = [w for w, _, _ in r["words"]]
    if punctuated:
        texts = JFK_PUNCTUATED.split()
        assert [w.strip(",.").lower() for w in texts] == [w.lower() for w in r["text"].split()]
    words = [Word(text, start, end) for text, (_, start, end) in zip(texts, r["words"])]
    return Transcript(text=" ".join(texts), duration=r["duration"], language=r["language"], words=words)


def breaks_of(cues):
    """Word indices after which a line or a cue ends (not the last one), and which of them end cues."""
    lines, cue_ends, n = [], set(), 0
    for c in cues:
        for line in c.lines:
            n += len(line.split())
            lines.append(n)
        cue_ends.add(n)
    return set(lines[:-1]), cue_ends - {n}


@pytest.mark.parametrize("punctuated", [False, True], ids=["as-recognized", "punctuated"])
@pytest.mark.parametrize("run", sorted(JFK))
def test_jfk_breaks_only_between_phrases(run, punctuated):
    t = jfk_transcript(run, punctuated)
    words = [w.word for w in t.words]
    cues = build_cues(t)
    check(cues, t.duration, max_duration=7.0)
    assert words_of(cues) == words  # nothing lost or reordered
    assert len(cues) >= 2  # 10.5 s of speech: more than one cue of at most 7 s
    breaks, cue_breaks = breaks_of(cues)
    # Never inside "your country", "ask not", "what your", "can do", "for you", "my fellow".
    assert 9 not in breaks and words[8:10] == ["your", "country"]
    for i in (5, 7, 10, 12, 2):
        assert i + 1 not in breaks, (words[i:i + 2], [c.lines for c in cues])
    # Every line ends at a comma or where a phrase ends: "...Americans," "ask not" "...for you,".
    assert breaks <= {5, 7, 14}, [c.lines for c in cues]
    if punctuated:
        assert all(words[i - 1].endswith(",") for i in breaks), [c.lines for c in cues]


@pytest.mark.parametrize("text,lines", [
    ("we drove all night long to reach the small town before the storm arrived",
     ["we drove all night long to reach", "the small town before the storm arrived"]),
    ("please send a copy of the new contract to your lawyer before friday",
     ["please send a copy of the new contract", "to your lawyer before friday"]),
])
def test_a_line_does_not_end_inside_a_phrase_when_another_break_fits(text, lines):
    # The most even split ends a line with "the" (36/35) or "new" (29/37); subtitle guidelines
    # break before the noun phrase or the preposition instead, even at some imbalance.
    cues = build_cues(Transcript(text=text, duration=5.0, language="en"))
    assert [c.lines for c in cues] == [lines]


def test_english_word_lists_apply_to_english_or_unknown_language_only():
    text = "the committee will announce its decision about the new library next week"
    expected = ["the committee will announce its decision", "about the new library next week"]
    for language in ("en", "en-GB", None):
        assert build_cues(Transcript(text=text, duration=5.0, language=language))[0].lines == expected
    # Another language: only punctuation, pauses and balance count ("its" is nothing special).
    other = build_cues(Transcript(text=text, duration=5.0, language="fr"))[0].lines
    assert other == ["the committee will announce its", "decision about the new library next week"]


def test_two_lines_of_equal_balance_are_bottom_heavy():
    # Without words that say where a phrase ends, 19/24 and 24/19 are equally even: the shorter
    # on top.
    t = Transcript(text="aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii", duration=3.0, language="xx")
    cues = build_cues(t)
    assert cues[0].lines == ["aaaa bbbb cccc dddd", "eeee ffff gggg hhhh iiii"]


WAITED = ("we waited for the bus in the cold rain for almost an hour "
          "and nobody came to tell us anything at all")


def test_the_longer_pause_ends_the_cue():
    # 100 characters without punctuation: two cues. Two short pauses (both too short to force a
    # cut, both before a preposition); the cue ends at the longer one, whichever it is.
    text = WAITED
    words = text.split()
    bus, rain = words.index("bus"), words.index("rain")
    for longer, shorter in [(bus, rain), (rain, bus)]:
        t = timed(text, gaps={longer: 0.24, shorter: 0.12})
        cues = build_cues(t)
        check(cues, t.duration, max_duration=7.0)
        assert words_of(cues) == words
        assert len(cues) == 2
        assert cues[0].text.replace("\n", " ").split()[-1] == words[longer], [c.lines for c in cues]


def test_a_pause_outweighs_a_phrase_boundary():
    # No pause: the cue ends before a preposition ("rain / for almost"). A 0.3 s pause after "hour"
    # (below split_pause, so not forced) moves the end there.
    text = WAITED
    words = text.split()
    plain = build_cues(timed(text))
    assert plain[0].text.replace("\n", " ") == "we waited for the bus in the cold rain"
    t = timed(text, gaps={words.index("hour"): 0.3})
    cues = build_cues(t)
    check(cues, t.duration, max_duration=7.0)
    assert cues[0].text.replace("\n", " ").endswith("for almost an hour")
    assert words_of(cues) == words


def test_two_line_search_finds_the_best_wrapping():
    """The quick search for two-line cues (Knuth's speed-up) agrees with trying every wrapping."""
    from transcribe.text import cues as cues_module

    rng = random.Random(7)
    zh = "".join(rng.choice("我们今天去公园玩了一整天天气非常好然后吃晚饭")
                 + ("，" if rng.random() < 0.08 else "") for _ in range(300))
    t_en = whisper_words_transcript()
    cases = [(cues_module._word_units(t_en.words, 42), True, True, 42),
             (cues_module._split_text(zh), False, False, 16)]
    for units, is_timed, english, width in cases:
        if not is_timed:
            units = cues_module._spread(units, 0.0, 60.0)
        g = cues_module._Grouper(width, 2, 7.0, 0.5, english)
        g.group_run(units, is_timed)  # sets the tables the searches read
        n, below, compared = len(units), None, 0
        for i in range(n - 1, -1, -1):
            last = i + 1
            while last < n and cues_module._count_lines(units[i:last + 1], width) <= 2:
                last += 1
            row, split = g._two_line_row(i, last, below)
            below = split
            dp = g._wrap_table(i, last, 2)[0][2]
            for e in range(i + 2, last + 1):
                assert row[e - i] == pytest.approx(dp[e - i], abs=1e-12), (i, e)
                compared += 1
        assert compared > 1000

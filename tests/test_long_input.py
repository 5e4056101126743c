"""transcribe.long_input: cuts on a grid, joins of piece transcripts, batches by length (no model)."""
from __future__ import annotations

import numpy as np

from transcribe import long_input
from transcribe.results import Segment, Token, Transcript, Word


def test_cuts_on_a_grid_cover_the_input():
    assert long_input.on_grid([0, 1000, 2500], 4000, 320) == [(0, 960), (960, 2240), (2240, 4000)]
    # a last piece under one grain joins the one before; starts that snap together are one
    assert long_input.on_grid([0, 700, 3900], 4000, 320) == [(0, 640), (640, 4000)]
    assert long_input.on_grid([0, 650, 700], 4000, 320) == [(0, 640), (640, 4000)]
    assert long_input.on_grid([0, 1000], 4000) == [(0, 1000), (1000, 4000)]
    x = np.zeros(16000 * 5, np.float32)
    assert long_input.cut_spans(x, 16000, 10.0) == [(0, len(x))]
    assert long_input.cut_spans(x, 16000, 0) == long_input.cut_spans(x, 16000, None) == [(0, len(x))]


def test_join_shifts_rounds_clips_and_keeps_shared_words_one_object():
    w = Word("a", 0.12345, 1.9)
    a = Transcript("a", 2.0, segments=[Segment("a", 0.0, 1.9, [w])], words=[w],
                   tokens=[Token(1, " a", 0.1, 2.5, frame=1)], model="m", language="en")
    b = Transcript("", 1.0, tokens=[Token(2, "b", 0.2, 0.4, frame=2)])
    t = long_input.join([a, b], [(0, 32000), (32000, 48000)], 16000, 48000, frame_s=0.08, digits=3, clip=True)
    assert t.text == "a" and t.duration == 3.0 and t.model == "m" and t.language == "en"
    assert [(k.start, k.end, k.frame) for k in t.tokens] == [(0.1, 2.0, 1), (2.2, 2.4, 27)]
    assert t.words[0].start == 0.123 and t.segments[0].words[0] is t.words[0]
    u = long_input.join([a, b], [(0, 32000), (32000, 48000)], 16000, 48000, text="a b")
    assert u.text == "a b" and u.tokens[0].end == 2.5 and [k.frame for k in u.tokens] == [None, None]


def test_batches_longest_first_bounded_in_count_and_padded_audio():
    lengths = [10, 30, 20, 30, 5]
    got = list(long_input.batches(range(5), lambda k: lengths[k], 2))
    assert got == [[1, 3], [2, 0], [4]]
    # at most 60 samples of padded audio at rate 1: 30 * 2 fits, 20 * 3 fits, 5 alone
    got = list(long_input.batches(range(5), lambda k: lengths[k], 8, 60.0, 1))
    assert got == [[1, 3], [2, 0, 4]]
    got = list(long_input.batches(range(5), lambda k: lengths[k], 8, 50.0, 1))
    assert got == [[1], [3], [2, 0], [4]]
    assert list(long_input.batches("abcde", len, 2, longest_first=False)) == [["a", "b"], ["c", "d"], ["e"]]
    assert list(long_input.batches(range(4), lambda k: 1, 8, same=lambda k: k // 2)) == [[0, 1], [2, 3]]

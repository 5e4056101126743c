"""Incremental word grouping (text/words.IncrementalWords): for every way of cutting a token stream
into chunks, the words equal offline grouping (group_words) of all the tokens, and the grouper
keeps only the open word."""
from __future__ import annotations

import itertools
import random

import pytest

from transcribe.text.words import IncrementalWords, TokenSpan, group_words

MARK = "\u2581"
PIECES = [MARK + "the", MARK + "and", MARK + "'", "in", MARK + "a", "b", ",", ".", "'", MARK, MARK + ",", "?"]
PUNCT = {",", ".", "'", "?"}  # what punctuation_in finds in these pieces


def sp_decode(ids):
    """SentencePiece's decoding: marks become spaces, the leading one dropped (a lone mark -> "")."""
    text = "".join(PIECES[i] for i in ids).replace(MARK, " ")
    return text[1:] if text.startswith(" ") else text


def spaced_decode(ids):
    """A tokenizer whose lone mark decodes to " " (group_words' other branch)."""
    if len(ids) == 1 and PIECES[ids[0]] == MARK:
        return " "
    return sp_decode(ids)


def spans(ids, decode, rng=None):
    out, t = [], 0
    for i in ids:
        d = rng.randint(0, 3) if rng else 1
        out.append(TokenSpan(i, PIECES[i], decode([i]), t, t + d, rng.random() if rng else None))
        t += d
    return out


def key(words):
    return [(w.word, w.start, w.end, w.confidence, w.first, w.last) for w in words]


def incremental(tokens, cuts, decode):
    g = IncrementalWords(decode, PUNCT)
    words, prev = [], 0
    for c in list(cuts) + [len(tokens)]:
        words += g.add(tokens[prev:c])
        prev = c
    return words + g.finish()


def test_the_issues_example_in_two_chunks():
    """`▁the ▁and ▁' in` in any chunks groups as offline: "the", then one word of `▁and ▁' in`
    (a punctuation piece does not start a word; a split at `▁'` would drop "and"). Its text is
    the tokenizer's decoding of the three pieces ("and 'in" here: this decoding keeps the mark's
    space)."""
    ids = [PIECES.index(p) for p in (MARK + "the", MARK + "and", MARK + "'", "in")]
    tokens = spans(ids, sp_decode)
    offline = group_words(tokens, sp_decode, PUNCT)
    assert [(w.first, w.last) for w in offline] == [(0, 0), (1, 3)]
    assert offline[1].word == sp_decode(ids[1:]) and "and" in offline[1].word
    for cuts in ([1], [2], [3], [1, 2], [2, 3], [1, 2, 3], []):
        assert key(incremental(tokens, cuts, sp_decode)) == key(offline)


@pytest.mark.parametrize("decode", [sp_decode, spaced_decode], ids=["sentencepiece", "spaced-mark"])
def test_every_chunking_of_short_streams_equals_offline(decode):
    rng = random.Random(0)
    for _ in range(150):
        ids = [rng.randrange(len(PIECES)) for _ in range(rng.randint(0, 7))]
        tokens = spans(ids, decode, rng)
        want = key(group_words(tokens, decode, PUNCT))
        for r in range(len(tokens)):
            for cuts in itertools.combinations(range(1, len(tokens)), r):
                assert key(incremental(tokens, cuts, decode)) == want, (ids, cuts)


@pytest.mark.parametrize("decode", [sp_decode, spaced_decode], ids=["sentencepiece", "spaced-mark"])
def test_random_chunkings_of_long_streams_equal_offline(decode):
    rng = random.Random(1)
    for _ in range(60):
        ids = [rng.randrange(len(PIECES)) for _ in range(rng.randint(20, 120))]
        tokens = spans(ids, decode, rng)
        want = key(group_words(tokens, decode, PUNCT))
        cuts = sorted(rng.sample(range(1, len(tokens)), rng.randint(0, len(tokens) - 1)))
        assert key(incremental(tokens, cuts, decode)) == want


def test_only_the_open_word_is_kept():
    """10,000 tokens one at a time: the grouper never holds more than the open word's tokens."""
    rng = random.Random(2)
    word_pieces = [MARK + "the", MARK + "and", MARK + "a", "in", "b", ","]
    ids = [PIECES.index(rng.choice(word_pieces)) for _ in range(10000)]
    tokens = spans(ids, sp_decode)
    g = IncrementalWords(sp_decode, PUNCT)
    held, words = 0, []
    for tok in tokens:
        words += g.add([tok])
        held = max(held, len(g._tokens))
    words += g.finish()
    assert key(words) == key(group_words(tokens, sp_decode, PUNCT))
    longest = max(w.last - w.first + 1 for w in words)
    assert held <= longest + 1

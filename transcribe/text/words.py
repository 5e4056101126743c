"""Tokens -> words -> segments, with NeMo's rules for subword vocabularies.

- A word starts at a piece that begins with the word mark `▁` (its text differs from its piece).
- A punctuation piece never starts a word: it joins the word before it.
- A segment ends at a word that ends with one of the segment marks (`.`, `?`, `!` by default).
Times stay in frames here; the caller turns them into seconds in one place.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

SEGMENT_MARKS = (".", "?", "!")


@dataclass
class TokenSpan:
    id: int
    piece: str
    text: str  # the piece decoded alone
    start: int  # frames
    end: int
    confidence: Optional[float] = None


@dataclass
class WordSpan:
    word: str
    start: int
    end: int
    confidence: Optional[float]
    first: int  # index of its first token
    last: int  # index of its last token (inclusive)


@dataclass
class SegmentSpan:
    text: str
    start: int
    end: int
    words: list[WordSpan]


def join_punctuation(text: str, punctuation: set[str]) -> str:
    """Drop the space before a punctuation mark ("word ," -> "word,"), as NeMo does for its text."""
    if not punctuation:
        return text
    pattern = "|".join(re.escape(p) for p in sorted(punctuation))
    return re.sub(r"\s(" + pattern + ")", r"\1", text)


def snap_punctuation(tokens: list[TokenSpan], punctuation: set[str]) -> None:
    """TDT: a punctuation token takes no time; it sits at the end of the token before it."""
    for i in range(1, len(tokens)):
        if tokens[i].text in punctuation:
            tokens[i].start = tokens[i].end = tokens[i - 1].end


def group_words(
    tokens: Sequence[TokenSpan], decode: Callable[[list[int]], str], punctuation: set[str]
) -> list[WordSpan]:
    words: list[WordSpan] = []
    built: list[int] = []  # token indices of the word being built
    first = 0

    def conf(a: int, b: int) -> Optional[float]:
        vals = [tokens[k].confidence for k in range(a, b + 1) if tokens[k].confidence is not None]
        return min(vals) if vals else None

    def close(upto: int) -> None:
        ids = [tokens[k].id for k in built]
        words.append(WordSpan(decode(ids), tokens[first].start, tokens[upto].end, conf(first, upto), first, upto))

    for i, tok in enumerate(tokens):
        is_punct = tok.text in punctuation and tok.text != " "
        starts = tok.piece != tok.text or (tok.text == " " and not _next_is_punct(tokens, i, punctuation))
        if starts and not is_punct:
            if built:
                close(i - 1)
            built = []
            if tok.text != " ":
                built.append(i)
                first = i
        elif is_punct and not built and words:
            w = words[-1]
            w.end = tok.end
            w.word = w.word.rstrip(" ") + tok.text
            w.last = i
            if tok.confidence is not None:
                w.confidence = tok.confidence if w.confidence is None else min(w.confidence, tok.confidence)
        elif is_punct and built:
            # A lone word mark before punctuation is dropped from the text, but the word still
            # starts where the mark was.
            if tokens[built[-1]].piece in (" ", "_", "\u2581"):
                built.pop()
            built.append(i)
        else:
            if not built:
                first = i
            built.append(i)
    if built:
        close(len(tokens) - 1)
    if words:
        words[0].start = tokens[0].start
    return words


def _next_is_punct(tokens: Sequence[TokenSpan], i: int, punctuation: set[str]) -> bool:
    for tok in tokens[i + 1 :]:
        if tok.text != " " and tok.text:
            return tok.text in punctuation
    return False


def group_segments(words: Sequence[WordSpan], marks: Sequence[str] = SEGMENT_MARKS) -> list[SegmentSpan]:
    segments: list[SegmentSpan] = []
    cur: list[WordSpan] = []
    for w in words:
        cur.append(w)
        if w.word and (w.word[-1] in marks or w.word in marks):
            segments.append(_segment(cur))
            cur = []
    if cur:
        segments.append(_segment(cur))
    return segments


def _segment(words: list[WordSpan]) -> SegmentSpan:
    return SegmentSpan(" ".join(w.word for w in words), words[0].start, words[-1].end, list(words))


class IncrementalWords:
    """Word grouping as tokens arrive (a stream): the words it finishes are exactly those that
    `group_words` gives for all the tokens at once, at a constant cost per call.

    Only the open word is regrouped. A word is finished once the word after it has started: no
    later token can change it (the one rule that reaches back, punctuation after a lone word mark
    joining the word before, reaches only the last word). So the tokens from the first token of
    the last word on are kept and regrouped with the next ones; the earlier words are handed out.
    `first`/`last` of the words handed out count tokens from the start of the stream.
    """

    def __init__(self, decode: Callable[[list[int]], str], punctuation: set[str]):
        self._decode = decode
        self._punctuation = punctuation
        self._tokens: list[TokenSpan] = []  # from the first token of the open word on
        self._offset = 0  # stream index of self._tokens[0]

    def add(self, tokens: Sequence[TokenSpan]) -> list[WordSpan]:
        """Takes the next tokens -> the words they finish (possibly none)."""
        self._tokens.extend(tokens)
        words = self._group()
        if len(words) < 2:
            return []
        cut = words[-1].first - self._offset
        done = words[:-1]
        self._tokens = self._tokens[cut:]
        self._offset += cut
        return done

    def open_start(self) -> Optional[int]:
        """Where the open word starts (its first token's start), or None when no word is open."""
        return self._tokens[0].start if self._tokens else None

    def open_words(self) -> list[WordSpan]:
        """The words not finished yet (the open word, and one that punctuation may still join),
        as they stand now."""
        return self._group()

    def finish(self) -> list[WordSpan]:
        """The end of the stream: every word not handed out yet. The grouper starts over."""
        words = self._group()
        self._offset += len(self._tokens)
        self._tokens = []
        return words

    def _group(self) -> list[WordSpan]:
        words = group_words(self._tokens, self._decode, self._punctuation) if self._tokens else []
        for w in words:
            w.first += self._offset
            w.last += self._offset
        return words

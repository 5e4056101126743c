"""Subtitle cues from a Transcript: short, readable, in order, inside the audio.

`build_cues` returns a list of `Cue` (start, end, lines), where each cue has at most
`max_line_count` lines of at most `max_line_width` characters (counted with ``len``, so a
Chinese or Japanese character counts as one; pass a smaller width for those languages).

Where the text comes from, first match wins:

1. Segments with words (Parakeet; Whisper with word timestamps). Consecutive segments with words
   form one stream of timed words, so a cue may span a segment boundary; a segment without words
   among them is handled as in 3.
2. Words without segments: the transcript's own `words`.
3. Segments without words (Whisper without word timestamps): each segment's text, over the
   segment's times; a segment whose text needs more lines than a cue holds becomes several cues,
   its time shared out in proportion to their characters.
4. Text only: the text over the whole duration, split the same way.

Where a line or a cue may end, best first: after sentence punctuation (. ? ! and the CJK ones);
after a clause mark (, ; : and the like); at a pause between word times (the longer, the better; half
of `split_pause` counts as much as a clause mark); between phrases; anywhere else; and worst,
inside a phrase. Phrases are told by small lists of English function words, used when the
transcript's language is English or not given: a phrase opens at a conjunction, a preposition or
a question word ("ask not / what your country", "... / for you") and closes after an object
pronoun ("for you / ask"); a line never willingly ends with an article, a possessive, a
preposition, an auxiliary, a subject pronoun or a title ("Mr."), nor starts with "not", nor
splits a name written in capitals ("Valencia / Creek"). Other languages break at punctuation and
pauses, and by balance.

Cutting a run of words into cues. A pause of `split_pause` seconds or more between two words
always ends a cue, unless only one word comes before it since the last such cut (a pause of 2 s
or more ends even that). Between such pauses, the cuts are chosen together (dynamic programming)
as the cheapest among those where every cue fits: at most `max_line_count` lines when wrapped and
at most `max_duration` seconds from its first word's start to its last word's end (a cue of one
word always fits, however long). Each cue costs one, plus the cost of where it ends (above: from
nothing after a sentence to 3.5 inside a phrase); plus a little for a sentence that ends inside
the cue, more when the next sentence runs on past the cue's end; plus a little for a cue less
than half full; plus the cost of its lines (below). So cues are as few as punctuation allows, end
at sentence ends when they can, then at clause marks, pauses and phrase boundaries, and avoid
short leftovers; no cue is filled to the width at the price of a line or cue ending inside a
phrase when another cut fits. Text without word times is cut the same way, without the pauses
and the duration limit (its times are only estimates).

Lines: a cue's text is wrapped into as few lines as possible, and among those wrappings the
cheapest is chosen: each line break costs as its place is good (a comma is worth about 20
characters of imbalance, a phrase boundary 13; a break inside a phrase is made only to save some
27 characters, or when nothing else fits), plus the spread of the lines' lengths, plus a little for
a top line longer than the one below (bottom-heavy, as subtitle guidelines ask). Lines break at
spaces; text written without spaces (Chinese, Japanese, Thai...) breaks between characters,
never before closing punctuation or after an opening one. A word is never cut: one longer than a
line stands alone on its own line (a word written without spaces that is longer than a line is
split into characters, its time shared out).

Times: non-finite times are replaced (a start by the previous end, an end by its start), every time
is clamped to [0, duration] (when the duration is positive and finite), each cue starts no earlier
than the previous one ends and ends no earlier than it starts. No text is dropped and no cue is
empty.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Optional

from .cue_units import (_ALWAYS_SPLIT_PAUSE, _SENTENCE, _Unit, _clean, _is_title, _punct_level, _segment_span,
                        _split_text, _spread, _time, _word_units)

__all__ = ["Cue", "build_cues"]


@dataclass
class Cue:
    """One subtitle: shown from `start` to `end` (seconds), `lines` one per screen line."""

    start: float
    end: float
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


# --- where a line or a cue may end -------------------------------------------------------------

# English function words, used only when the transcript's language is English or not given (other
# languages break at punctuation and pauses, and by balance). Kept small on purpose: each word
# here is nearly always what its list says. Left out because they are as often something else:
# "so", "yet", "as", "like" (adverbs, verbs), "that", "this", "her" (pronouns that end a phrase),
# "you", "it" (subject or object), "have", "be", "do" (main verbs too), and up, down, out, off,
# over, back, away, around, through (verb particles: "give up / the").
_EN_PREPOSITIONS = frozenset(
    "about above across after against along among at before behind below beneath beside between "
    "beyond by despite during except for from in inside into near on onto outside than toward "
    "towards to under until upon via with within without".split())
_EN_CONJUNCTIONS = frozenset(
    "and but or nor because although though unless whereas while whether if when where since".split())
_EN_RELATIVES = frozenset("who whom whose which what why how".split())
# A line or cue may well start with one of these: it opens a phrase.
_EN_OPENS_PHRASE = _EN_PREPOSITIONS | _EN_CONJUNCTIONS | _EN_RELATIVES
# Never end a line or cue with one of these: it belongs with what follows (Netflix and BBC: do
# not separate an article, possessive or preposition from its noun, an auxiliary from its verb, a
# subject pronoun from its verb, a conjunction or question word from its clause).
_EN_BINDS_NEXT = _EN_OPENS_PHRASE | frozenset(
    "a an the my your his its our their of "
    "can could will would shall should may might must i we they he she "
    "can't cannot won't don't doesn't didn't isn't aren't wasn't weren't "
    "wouldn't couldn't shouldn't".split())
# (Nor, in English, between two capitalized words inside a sentence: a name, "Valencia Creek".)
# Never start a line or cue with one of these: it belongs with what comes before ("ask not").
_EN_BINDS_PREVIOUS = frozenset({"not"})
# These close a phrase (a line or cue may well end after them): an object pronoun, and "you" or
# "it" right after a preposition ("for you", "of it").
_EN_OBJECTS = frozenset("me him us them".split())
_EN_OBJECTS_AFTER_PREPOSITION = _EN_OBJECTS | {"you", "it"}

# Kinds of places to end a line or a cue (after the word before it), best first.
_AT_SENTENCE, _AT_CLAUSE, _AT_PHRASE, _AT_PLAIN, _AT_BOUND = range(5)
# What ending a cue costs there, in units of one cue: after . ? ! (and the CJK ones); after , ; :
# (and the like); between phrases (English: before a conjunction, preposition or question word,
# after an object pronoun); anywhere else; inside a phrase (English: after an article,
# possessive, preposition, auxiliary, subject pronoun or a title such as "Mr.", before "not",
# inside a name).
_CUE_END_COST = (0.0, 0.4, 2.1, 2.4, 3.5)
# A pause of half `split_pause` or more costs this much (a shorter one less, by the square of its
# share), or the cost above where that is less; inside a phrase (a hesitation "the ...") more.
_CUE_END_PAUSE, _CUE_END_PAUSE_BOUND = 0.6, 1.6
# What breaking a line there costs. A cue's lines are also charged for the spread of their
# lengths (the sum of squares of each line's distance from the mean, over the width squared), so
# a line break at a comma rather than anywhere else is worth about 20 characters of imbalance, at
# a phrase boundary about 13, and one inside a phrase is made only to save some 27 (or when
# nothing else fits). None is negative, so a cue is never cheaper in two lines than in one.
_LINE_BREAK_COST = (0.0, 0.03, 0.1, 0.15, 0.35)
_LINE_BREAK_PAUSE, _LINE_BREAK_PAUSE_BOUND = 0.05, 0.25
# And a little for a top line longer than the one below it (a bottom-heavy pair is preferred).
_TOP_HEAVY = 0.05

# Trimmed from a word before looking it up in the lists above.
_EDGE_MARKS = "\"'“”‘’«»‹›()[]{}.,;:!?…—–-"


def _en_key(text: str) -> str:
    return text.strip(_EDGE_MARKS).replace("’", "'").lower()


def _capitalized(text: str) -> bool:
    text = text.lstrip(_EDGE_MARKS)
    return text[:1].isupper()


def _break_costs(units: list[_Unit], timed: bool, split_pause: float,
                 english: bool) -> tuple[list[float], list[float]]:
    """(cue_cost, line_cost): cue_cost[j] what ending a cue after units[j - 1] costs, line_cost[j]
    what breaking a line there costs (0 < j < n)."""
    n = len(units)
    cue_cost, line_cost = [0.0] * (n + 1), [0.0] * (n + 1)
    half = split_pause / 2
    keys = [_en_key(u.text) for u in units] if english else None
    for j in range(1, n):
        prev = units[j - 1].text
        level = _punct_level(prev)
        if level:
            kind = _AT_SENTENCE if level == _SENTENCE else _AT_CLAUSE
        elif _is_title(prev):
            kind = _AT_BOUND
        elif english:
            if (keys[j - 1] in _EN_BINDS_NEXT or keys[j] in _EN_BINDS_PREVIOUS
                    or (_capitalized(prev) and _capitalized(units[j].text) and keys[j - 1] != "i"
                        and j > 1 and _punct_level(units[j - 2].text) != _SENTENCE)):
                kind = _AT_BOUND
            elif (keys[j] in _EN_OPENS_PHRASE or keys[j - 1] in _EN_OBJECTS
                  or (keys[j - 1] in _EN_OBJECTS_AFTER_PREPOSITION and j > 1
                      and keys[j - 2] in _EN_PREPOSITIONS)):
                kind = _AT_PHRASE
            else:
                kind = _AT_PLAIN
        else:
            kind = _AT_PLAIN
        cue, line = _CUE_END_COST[kind], _LINE_BREAK_COST[kind]
        if timed and kind >= _AT_PHRASE and math.isfinite(half):
            gap = units[j].start - units[j - 1].end
            if gap > 0:
                strength = min(gap / half, 1.0) ** 2
                bound = kind == _AT_BOUND
                target = _CUE_END_PAUSE_BOUND if bound else _CUE_END_PAUSE
                cue += (target - cue) * strength
                target = _LINE_BREAK_PAUSE_BOUND if bound else _LINE_BREAK_PAUSE
                line += (target - line) * strength
        cue_cost[j], line_cost[j] = cue, line
    return cue_cost, line_cost


# --- grouping and wrapping ---------------------------------------------------------------------


def _count_lines(units: list[_Unit], width: int) -> int:
    """The fewest lines `units` wrap into (greedy filling is optimal for that)."""
    lines, cur = 0, -1
    for u in units:
        if cur >= 0:
            grown = cur + (1 if u.space else 0) + len(u.text)
            if grown <= width:
                cur = grown
                continue
        lines += 1
        cur = len(u.text)
    return lines


# Costs of a cue, in units of one cue: fewer cues first, then better places to end them.
# A sentence that ends inside a cue rather than at its end: a little when the cue ends at a
# sentence end too (short sentences together), more when the next sentence runs on past the cue.
_INNER_SENTENCE_COST = (0.25, 0.75)
_SHORT_COST = 0.6  # a cue with no text scores this much more; one half full or more, nothing


class _Grouper:
    """Cuts a run of units into cues and each cue into lines: the cheapest way (dynamic
    programming) among those where every cue fits, a cue costing one, plus the cost of the place
    where it ends, plus a little for a sentence ending inside it and for being short, plus the cost
    of its best wrapping into lines (the places where its lines break, their balance)."""

    def __init__(self, width: int, max_lines: int, max_duration: float, split_pause: float,
                 english: bool):
        self.width = width
        self.max_lines = max_lines
        self.max_duration = max_duration
        self.split_pause = split_pause
        self.english = english
        self.target = width * max_lines / 2

    def runs(self, units: list[_Unit], timed: bool) -> list[list[_Unit]]:
        """Split at pauses of `split_pause` or more (not after a lone unit unless the pause is long)."""
        if not timed:
            return [units]
        out, cur = [], [units[0]]
        for u in units[1:]:
            gap = u.start - cur[-1].end
            if gap >= self.split_pause and (len(cur) > 1 or gap >= _ALWAYS_SPLIT_PAUSE):
                out.append(cur)
                cur = []
            cur.append(u)
        out.append(cur)
        return out

    def group(self, units: list[_Unit], timed: bool) -> list[tuple[list[_Unit], list[str]]]:
        """(units, lines) for every cue, in order."""
        out = []
        for run in self.runs(units, timed):
            out.extend(self.group_run(run, timed))
        return out

    def _wrap_table(self, i: int, last: int, max_k: int):
        """dp[l][e - i]: the least cost of units i..e-1 in exactly l lines (i < e <= last), the
        l-th ending at e; back[l][e - i]: where that line starts. A line's cost is (length /
        width)^2 - _TOP_HEAVY * l * length / width; each break adds its line_cost."""
        w, pre_len, pre_sp, line_cost = self.width, self.pre_len, self.pre_sp, self.line_cost
        inf = math.inf
        size = last - i + 1
        dp = [[inf] * size for _ in range(max_k + 1)]
        back = [[i] * size for _ in range(max_k + 1)]
        top = _TOP_HEAVY / w
        for e in range(i + 1, last + 1):
            ln = pre_len[e] - pre_len[i] + pre_sp[e] - pre_sp[i + 1]
            if ln <= w or e == i + 1:
                x = ln / w
                dp[1][e - i] = x * x - top * ln
            for l in range(2, max_k + 1):
                prev_row = dp[l - 1]
                best, arg = inf, i
                s = e - 1
                while s > i:
                    ln = pre_len[e] - pre_len[s] + pre_sp[e] - pre_sp[s + 1]
                    if ln > w and s < e - 1:
                        break
                    p = prev_row[s - i]
                    if p < inf:
                        x = ln / w
                        c = p + line_cost[s] + x * x - top * l * ln
                        if c < best:
                            best, arg = c, s
                    s -= 1
                dp[l][e - i], back[l][e - i] = best, arg
        return dp, back

    def _two_line_row(self, i: int, last: int, below: Optional[list[int]]) -> tuple[list[float], list[int]]:
        """The best wrapping of units i..e-1 into exactly two lines for every e in i+2..last: its
        cost (as in _wrap_table) and where its second line starts. `below`: those starts for units
        i+1.. (the row before, as this is called for i downwards), or None.

        The cost of a split is f(length of line 1) + line_cost + g(length of line 2) with f and g
        convex, so the best split moves right as e grows and as i grows (Knuth's speed-up): it is
        looked for between the best split for e - 1 and the best split of units i+1..e-1, which
        makes a row cost about as much as its length instead of its length times a line's."""
        w, pre_len, pre_sp, line_cost = self.width, self.pre_len, self.pre_sp, self.line_cost
        inf = math.inf
        top = _TOP_HEAVY / w
        w2 = w * w
        size = last - i + 1
        cost = [inf] * size
        split = [0] * size
        # Line 1 (units i..s-1) is x1[s] - y_i long, line 2 (units s..e-1) x_e - y2[s].
        y_i = pre_len[i] + pre_sp[i + 1]
        lo = i + 1
        nb = len(below) if below is not None else 0
        for e in range(i + 2, last + 1):
            x_e = pre_len[e] + pre_sp[e]
            hi = e - 1
            if e - i - 1 < nb and below[e - i - 1]:
                hi = min(hi, below[e - i - 1])
            best, arg = inf, 0
            while True:
                for s in range(lo, hi + 1):
                    l1 = pre_len[s] + pre_sp[s] - y_i
                    l2 = x_e - pre_len[s] - pre_sp[s + 1]
                    if l1 <= w and l2 <= w:
                        c = (l1 * l1 + l2 * l2) / w2 - top * (l1 + 2 * l2) + line_cost[s]
                        if c <= best:  # the rightmost of equals, so that the bounds hold
                            best, arg = c, s
                if best < inf or (lo == i + 1 and hi == e - 1):
                    break
                lo, hi = i + 1, e - 1  # rounding broke the bounds: look everywhere
            cost[e - i], split[e - i] = best, arg
            if arg:
                lo = arg
        return cost, split

    def _join(self, units: list[_Unit], starts: list[int], j: int) -> list[str]:
        lines = []
        for s, e in zip(starts, starts[1:] + [j]):
            parts = [units[s].text]
            for u in units[s + 1:e]:
                parts.append((" " if u.space else "") + u.text)
            lines.append("".join(parts))
        return lines

    def group_run(self, units: list[_Unit], timed: bool) -> list[tuple[list[_Unit], list[str]]]:
        n = len(units)
        lens = [len(u.text) for u in units]
        spaces = [1 if u.space else 0 for u in units]
        starts = [u.start for u in units]
        ends = [u.end for u in units]
        self.pre_len, self.pre_sp = [0], [0]
        for ln, sp in zip(lens, spaces):
            self.pre_len.append(self.pre_len[-1] + ln)
            self.pre_sp.append(self.pre_sp[-1] + sp)
        cue_cost, self.line_cost = _break_costs(units, timed, self.split_pause, self.english)
        width, max_lines, target = self.width, self.max_lines, self.target
        max_duration = self.max_duration if timed else math.inf
        # Two-line cues by Knuth's speed-up, unless a unit is longer than a line (the costs are
        # then not convex) or cues may have more lines (then every wrapping is tried).
        knuth = max_lines == 2 and max(lens) <= width
        # end_cost[j]: ending a cue after units[j - 1]; nothing at the end of the run.
        end_cost = cue_cost[:n] + [0.0]
        sentence_end = [False] * (n + 1)
        for j in range(1, n):
            sentence_end[j] = _punct_level(units[j - 1].text) == _SENTENCE
        sentence_end[n] = True
        inner_costs = _INNER_SENTENCE_COST
        w2, top = width * width, _TOP_HEAVY / width
        # best[i]: the least cost of units i.. as cues; nxt[i]: where the first of them ends;
        # split[i]: where its second line starts, for a two-line cue found by Knuth's speed-up.
        best = [math.inf] * (n + 1)
        nxt = [n] * (n + 1)
        split = [0] * (n + 1)
        best[n] = 0.0
        below = None
        for i in range(n - 1, -1, -1):
            # Every cue that starts at units[i] and fits: its end, lines, characters, inner sentence ends.
            fits = []
            line_len, lines, chars, inner = lens[i], 1, lens[i], 0
            j = i + 1
            while True:
                fits.append((j, lines, chars, inner))
                if j == n or ends[j] - starts[i] > max_duration:
                    break
                # Add units[j] to the cue.
                if sentence_end[j]:
                    inner += 1
                grown = line_len + spaces[j] + lens[j]
                if grown <= width:
                    line_len = grown
                else:
                    lines += 1
                    if lines > max_lines:
                        break
                    line_len = lens[j]
                chars += spaces[j] + lens[j]
                j += 1
            last, max_k = fits[-1][0], fits[-1][1]
            if knuth:
                row, row_split = self._two_line_row(i, last, below)
                below = row_split
            elif max_k > 1:
                dp = self._wrap_table(i, last, max_k)[0]
            for j, k, chars, inner in fits:
                cost = 1.0 + end_cost[j] + inner * inner_costs[0 if sentence_end[j] else 1] + best[j]
                short = 1.0 - chars / target
                if short > 0:
                    cost += short * short * _SHORT_COST
                if k > 1:
                    # The wrapping's cost made comparable between cues: the spread of the line
                    # lengths rather than their sum of squares, the top-heavy term centred.
                    t = chars - (k - 1)
                    cost += ((row[j - i] if knuth else dp[k][j - i]) - t * t / (k * w2)
                             + top * (k + 1) * t / 2)
                if cost < best[i] - 1e-12:
                    best[i], nxt[i] = cost, j
                    split[i] = row_split[j - i] if knuth and k > 1 else 0
        out, i = [], 0
        while i < n:
            j = nxt[i]
            if split[i]:
                line_starts = [i, split[i]]
            else:
                k = _count_lines(units[i:j], width)
                line_starts = [i]
                if k > 1:
                    back = self._wrap_table(i, j, k)[1]
                    e = j
                    for l in range(k, 1, -1):
                        e = back[l][e - i]
                        line_starts.insert(1, e)
            out.append((units[i:j], self._join(units, line_starts, j)))
            i = j
        return out


# --- the whole transcript ----------------------------------------------------------------------


def _blocks(transcript, width: int, duration: float) -> list[tuple[list[_Unit], bool]]:
    """(units, timed) runs in order: timed runs come from words, the others from text."""
    segments = list(transcript.segments or [])

    def has_words(seg) -> bool:
        return any(_clean(w.word) for w in (seg.words or []))

    blocks: list[tuple[list[_Unit], bool]] = []
    if any(has_words(s) for s in segments):
        run: list = []
        prev_end = 0.0
        for s in segments:
            if has_words(s):
                run.extend(s.words)
                continue
            if run:
                blocks.append((_word_units(run, width), True))
                prev_end = blocks[-1][0][-1].end if blocks[-1][0] else prev_end
                run = []
            start, prev_end = _segment_span(s, prev_end)
            pieces = _split_text(_clean(s.text))
            if pieces:
                blocks.append((_spread(pieces, start, prev_end), False))
        if run:
            blocks.append((_word_units(run, width), True))
    elif any(_clean(w.word) for w in (transcript.words or [])):
        blocks.append((_word_units(transcript.words, width), True))
    elif segments:
        prev_end = 0.0
        for s in segments:
            start, prev_end = _segment_span(s, prev_end)
            pieces = _split_text(_clean(s.text))
            if pieces:
                blocks.append((_spread(pieces, start, prev_end), False))
    else:
        pieces = _split_text(_clean(transcript.text))
        if pieces:
            blocks.append((_spread(pieces, 0.0, duration), False))
    return [(units, timed) for units, timed in blocks if units]


def _is_english(language) -> bool:
    """Whether the English word lists apply: the language is English or not given."""
    if not language:
        return True
    language = str(language).strip().lower()
    return language in ("en", "eng", "english") or language.startswith(("en-", "en_"))


def _positive_int(name: str, value) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def _positive_seconds(name: str, value) -> float:
    if value is None:
        return math.inf
    value = float(value)
    if math.isnan(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds (or None for no limit), got {value}")
    return value


def build_cues(
    transcript,
    max_line_width: int = 42,
    max_line_count: int = 2,
    max_duration: Optional[float] = 7.0,
    *,
    split_pause: Optional[float] = 0.5,
) -> list[Cue]:
    """Subtitle cues for `transcript` (a `transcribe.results.Transcript`), in order.

    Each cue has at most `max_line_count` lines of at most `max_line_width` characters (a line
    holding a single word longer than that excepted) and, when made from word times, lasts at
    most `max_duration` seconds (None: no limit; a single longer word excepted). A pause of
    `split_pause` seconds or more between words ends a cue (None: pauses end no cue). See the
    module docstring for the rules.
    """
    width = _positive_int("max_line_width", max_line_width)
    max_lines = _positive_int("max_line_count", max_line_count)
    max_dur = _positive_seconds("max_duration", max_duration)
    pause = _positive_seconds("split_pause", split_pause)
    duration = _time(transcript.duration)
    duration = duration if duration is not None and duration > 0 else 0.0

    grouper = _Grouper(width, max_lines, max_dur, pause, _is_english(getattr(transcript, "language", None)))
    raw: list[Cue] = []
    for units, timed in _blocks(transcript, width, duration):
        for group, lines in grouper.group(units, timed):
            raw.append(Cue(group[0].start, max(u.end for u in group), lines))

    cues = []
    prev_end = 0.0
    for c in raw:
        start, end = c.start, c.end
        if duration > 0:
            start, end = min(start, duration), min(end, duration)
        start = max(start, prev_end, 0.0)
        end = max(end, start)
        cues.append(Cue(start, end, c.lines))
        prev_end = end
    return cues

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

Cutting a run of words into cues. A pause of `split_pause` seconds or more between two words
always ends a cue, unless only one word comes before it since the last such cut (a pause of 2 s
or more ends even that). Between such pauses, the cuts are chosen together (dynamic programming) as the cheapest
among those where every cue fits: at most `max_line_count` lines when wrapped and at most
`max_duration` seconds from its first word's start to its last word's end (a cue of one word always
fits, however long). Each cue costs one, plus the cost of where it ends: nothing after sentence
punctuation (. ? ! and the CJK ones), a little after a clause mark (, ; : and the like), a bit more
at a shorter pause (half of `split_pause`), most anywhere else (more again just after a title such
as "Mr."); plus a little for a sentence that ends inside the cue, more when the next sentence runs
on past the cue's end; plus a little for a cue less than half full. So cues are as few as
punctuation allows, end at sentence ends when they can, then at clause marks, then at pauses, and
avoid short leftovers. Text without word times is cut the same way, without the pauses and the
duration limit (its times are only estimates).

Lines are balanced: a cue's text is wrapped into as few lines as possible, and among those
wrappings the one with lines of the most similar length is chosen, with a mild preference for a
line ending at punctuation. Lines break at spaces; text written without spaces (Chinese,
Japanese, Thai...) breaks between characters, never before closing punctuation or after an
opening one. A word is never cut: one longer than a line stands alone on its own line (a word
written without spaces that is longer than a line is split into characters, its time shared out).

Times: non-finite times are replaced (a start by the previous end, an end by its start), every time
is clamped to [0, duration] (when the duration is positive and finite), each cue starts no earlier
than the previous one ends and ends no earlier than it starts. No text is dropped and no cue is
empty.
"""
from __future__ import annotations

import math
import operator
import unicodedata
from dataclasses import dataclass, field
from typing import Iterable, Optional

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


# --- characters -------------------------------------------------------------------------------

# Scripts written without spaces between words: a line may break between any two characters.
_NO_SPACE_RANGES = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x2FF0, 0x312F),  # ideographic description, CJK symbols and punctuation, kana, Bopomofo
    (0x31A0, 0x31FF),  # Bopomofo extended, CJK strokes, Katakana phonetic extensions
    (0x3200, 0x4DBF),  # enclosed CJK, CJK compatibility, CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFE30, 0xFE4F),  # CJK compatibility forms
    (0xFF00, 0xFFEF),  # halfwidth and fullwidth forms
    (0x20000, 0x3FFFF),  # CJK extensions B and later
)

# Never at the start of a line: attach to what comes before.
_CLOSING = frozenset(
    ",.;:!?%)]}"
    "、。，．・：；？！）］｝〕〉》」』】〙〗〟’”｠»›…‥"
    "ーぁぃぅぇぉっゃゅょゎゕゖァィゥェォッャュョヮヵヶ々〻゛゜ヽヾゝゞ"
    "％｡｣､･"
)
# Never at the end of a line: attach to what comes after.
_OPENING = frozenset("([{（［｛〔〈《「『【〘〖〝‘“｟«‹｢")

_SENTENCE_END = frozenset(".?!。？！‼⁇⁈⁉…‥｡؟۔।॥")
_CLAUSE_END = frozenset(",;:、，；：､،؛—–")
# Closing quotes and brackets that may follow the punctuation that ends a sentence or clause.
_TRAILERS = "\"'”’»›)]}）］｝」』】〕〉》〙〗〟｣"
# A word ending in "." that does not end a sentence (a title before a name, mostly).
_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "mt", "e.g", "i.e"})

_SENTENCE, _CLAUSE, _PAUSE = 3, 2, 1
_ALWAYS_SPLIT_PAUSE = 2.0  # seconds: a pause this long ends even a one-word cue


def _no_space(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _NO_SPACE_RANGES)


def _combining(ch: str) -> bool:
    return unicodedata.category(ch) in ("Mn", "Mc", "Me")


def _glues_left(ch: str) -> bool:
    return ch in _CLOSING or _combining(ch)


def _split_chunk(chunk: str) -> list[str]:
    """Pieces of a run of text without spaces: each character of a no-space script on its own,
    runs of other characters together; punctuation kept on the side it belongs to."""
    pieces: list[str] = []
    buf = ""
    glue_next = False
    for ch in chunk:
        if not buf or glue_next or _glues_left(ch):
            buf += ch
        elif _no_space(ch) or _no_space(buf[-1]):
            pieces.append(buf)
            buf = ch
        else:
            buf += ch
        glue_next = ch in _OPENING
    if buf:
        pieces.append(buf)
    return pieces


def _split_text(text: str) -> list[tuple[str, bool]]:
    """(piece, preceded by a space) for every breakable piece of `text`."""
    out = []
    for chunk in text.split():
        for i, piece in enumerate(_split_chunk(chunk)):
            out.append((piece, i == 0))
    return out


def _space_between(prev: str, nxt: str) -> bool:
    """Whether two words (stripped of spaces) are written with a space between them."""
    if not prev:
        return True
    if nxt[0] in _CLOSING or prev[-1] in _OPENING:
        return False
    if nxt[0] == "-" and nxt[1:2].isalpha():  # "cold" "-hearted"
        return False
    return not (_no_space(prev[-1]) and _no_space(nxt[0]))


def _breakable(prev: str, nxt: str) -> bool:
    """Whether a line may break between two pieces written with no space between them."""
    return (_no_space(prev[-1]) and _no_space(nxt[0]) and not _glues_left(nxt[0])
            and prev[-1] not in _OPENING)


def _is_abbreviation(stem: str) -> bool:
    stem = stem.lstrip("\"'“‘«‹([{")
    return stem.lower() in _ABBREVIATIONS or (len(stem) == 1 and stem.isalpha() and stem.isupper())


def _is_title(text: str) -> bool:
    """Whether `text` is an abbreviation such as "Mr." that belongs with the word after it."""
    return text.endswith(".") and not text.endswith("..") and _is_abbreviation(text[:-1])


def _punct_level(text: str) -> int:
    """_SENTENCE, _CLAUSE or 0 for the punctuation that `text` ends with."""
    t = text.rstrip(_TRAILERS)
    if not t:
        return 0
    ch = t[-1]
    if ch in _SENTENCE_END:
        if _is_title(t):
            return 0
        return _SENTENCE
    return _CLAUSE if ch in _CLAUSE_END else 0


def _time(x) -> Optional[float]:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


# --- units: the pieces a cue is made of ----------------------------------------------------------


@dataclass
class _Unit:
    text: str
    space: bool  # written with a space before it (when not first on its line)
    start: float
    end: float


def _clean(text) -> str:
    return " ".join(str(text or "").split())


def _word_units(words: Iterable, width: int) -> list[_Unit]:
    words = list(words)
    # Words that keep their leading space (openai-whisper's style) say where the spaces are;
    # stripped words (ours) get them back by script.
    raw = any(str(w.word or "")[:1].isspace() for w in words)
    units: list[_Unit] = []
    prev_end = 0.0
    for w in words:
        text = _clean(w.word)
        if not text:
            continue
        start = _time(w.start)
        start = prev_end if start is None else max(start, 0.0)
        end = _time(w.end)
        end = start if end is None else max(end, start)
        prev_end = end
        if raw:
            space = str(w.word)[:1].isspace()
        else:
            space = _space_between(units[-1].text if units else "", text)
        if units and not space and not _breakable(units[-1].text, text):
            # One written word given as several ("cold" "-hearted", a lone ","): keep it whole.
            units[-1].text += text
            units[-1].end = max(units[-1].end, end)
            continue
        if len(text) > width and any(_no_space(ch) for ch in text):
            pieces = _split_text(text)
            first = True
            for u in _spread(pieces, start, end):
                u.space = space if first else u.space
                first = False
                units.append(u)
            continue
        units.append(_Unit(text, space, start, end))
    return units


def _spread(pieces: list[tuple[str, bool]], start: float, end: float) -> list[_Unit]:
    """Units for `pieces` over [start, end], each given time in proportion to its characters."""
    total = sum(len(p) for p, _ in pieces)
    span = max(end - start, 0.0)
    units = []
    done = 0
    for p, sp in pieces:
        a = start + span * done / total
        done += len(p)
        b = end if done == total else start + span * done / total
        units.append(_Unit(p, sp, a, b))
    return units


def _segment_span(seg, prev_end: float) -> tuple[float, float]:
    start = _time(seg.start)
    start = prev_end if start is None else max(start, 0.0)
    end = _time(seg.end)
    end = start if end is None else max(end, start)
    return start, end


# --- grouping and wrapping ---------------------------------------------------------------------


def _line_lengths(units: list[_Unit]) -> tuple[list[int], list[int]]:
    pre_len, pre_sp = [0], [0]
    for u in units:
        pre_len.append(pre_len[-1] + len(u.text))
        pre_sp.append(pre_sp[-1] + (1 if u.space else 0))
    return pre_len, pre_sp


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


def _wrap(units: list[_Unit], width: int) -> list[str]:
    """Balanced lines: the fewest lines, then the most even lengths (least sum of squares), with a
    small reward for a line that ends at punctuation."""
    n = len(units)
    k = _count_lines(units, width)
    pre_len, pre_sp = _line_lengths(units)
    bonus = (0.2 * width) ** 2

    def length(i: int, j: int) -> int:  # units i..j-1 on one line
        return pre_len[j] - pre_len[i] + pre_sp[j] - pre_sp[i + 1]

    inf = math.inf
    cost = [[inf] * (n + 1) for _ in range(k + 1)]
    back = [[0] * (n + 1) for _ in range(k + 1)]
    cost[0][0] = 0.0
    for m in range(1, k + 1):
        for j in range(m, n - (k - m) + 1):
            reward = 0.0
            if j < n:
                if _punct_level(units[j - 1].text):
                    reward = bonus
                elif _is_title(units[j - 1].text):
                    reward = -bonus
            for i in range(j - 1, m - 2, -1):
                ln = length(i, j)
                if ln > width and j - i > 1:
                    break  # longer still for smaller i
                if cost[m - 1][i] == inf:
                    continue
                c = cost[m - 1][i] + ln * ln - reward
                if c < cost[m][j]:
                    cost[m][j], back[m][j] = c, i
    lines = []
    j = n
    for m in range(k, 0, -1):
        i = back[m][j]
        parts = [units[i].text]
        for u in units[i + 1:j]:
            parts.append((" " if u.space else "") + u.text)
        lines.append("".join(parts))
        j = i
    return lines[::-1]


# Costs of a cue, in units of one cue: fewer cues first, then better places to end them.
_CUT_COST = {_SENTENCE: 0.0, _CLAUSE: 0.4, _PAUSE: 0.6, 0: 2.0}
# A sentence that ends inside a cue rather than at its end: a little when the cue ends at a
# sentence end too (short sentences together), more when the next sentence runs on past the cue.
_INNER_SENTENCE_COST = (0.25, 0.75)
_SHORT_COST = 0.6  # a cue with no text scores this much more; one half full or more, nothing


class _Grouper:
    """Cuts a run of units into cues: the cheapest way (dynamic programming) among those where
    every cue fits, a cue costing one, plus the cost of where it ends, plus a little for a
    sentence ending inside it, plus a little for being short."""

    def __init__(self, width: int, max_lines: int, max_duration: float, split_pause: float):
        self.width = width
        self.max_lines = max_lines
        self.max_duration = max_duration
        self.split_pause = split_pause
        self.target = width * max_lines / 2

    def cut_level(self, units: list[_Unit], j: int, timed: bool) -> int:
        """How good a place the end of units[j - 1] is to end a cue."""
        level = _punct_level(units[j - 1].text)
        if not level and timed and units[j].start - units[j - 1].end >= self.split_pause / 2:
            level = _PAUSE
        return level

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

    def group(self, units: list[_Unit], timed: bool) -> list[list[_Unit]]:
        groups = []
        for run in self.runs(units, timed):
            groups.extend(self.group_run(run, timed))
        return groups

    def group_run(self, units: list[_Unit], timed: bool) -> list[list[_Unit]]:
        n = len(units)
        lens = [len(u.text) for u in units]
        spaces = [1 if u.space else 0 for u in units]
        starts = [u.start for u in units]
        ends = [u.end for u in units]
        width, max_lines, target = self.width, self.max_lines, self.target
        max_duration = self.max_duration if timed else math.inf
        # end_cost[j]: ending a cue after units[j - 1]; nothing at the end of the run.
        end_cost = [0.0] * (n + 1)
        sentence_end = [False] * (n + 1)
        for j in range(1, n):
            level = self.cut_level(units, j, timed)
            end_cost[j] = _CUT_COST[level] + (1.0 if _is_title(units[j - 1].text) else 0.0)
            sentence_end[j] = level == _SENTENCE
        sentence_end[n] = True
        inner_costs = _INNER_SENTENCE_COST
        best = [math.inf] * (n + 1)
        back = [0] * (n + 1)
        best[0] = 0.0
        for i in range(n):
            base = best[i] + 1.0
            line_len, lines, chars, inner = lens[i], 1, lens[i], 0
            j = i + 1
            while True:
                short = 1.0 - chars / target
                cost = base + end_cost[j] + inner * inner_costs[0 if sentence_end[j] else 1]
                if short > 0:
                    cost += short * short * _SHORT_COST
                if cost < best[j] - 1e-12:
                    best[j], back[j] = cost, i
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
        cuts = []
        j = n
        while j > 0:
            cuts.append(j)
            j = back[j]
        groups, i = [], 0
        for j in reversed(cuts):
            groups.append(units[i:j])
            i = j
        return groups


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

    grouper = _Grouper(width, max_lines, max_dur, pause)
    raw: list[Cue] = []
    for units, timed in _blocks(transcript, width, duration):
        for group in grouper.group(units, timed):
            raw.append(Cue(group[0].start, max(u.end for u in group), _wrap(group, width)))

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

"""The units subtitle cues are made of: the transcript's words (or its text cut into words, and into
characters for scripts written without spaces) with their times and the punctuation they end with
(used by text/cues.py, which decides where lines and cues break)."""
from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Optional


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

_SENTENCE, _CLAUSE = 2, 1
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

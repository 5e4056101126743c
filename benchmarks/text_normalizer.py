"""A small English text normalizer for word error rate, written for these benchmarks.

Both the reference and the hypothesis go through `normalize` before words are compared, so that
WER counts recognition errors, not differences of casing, punctuation or spelling convention.
The steps, in order:

1. Unicode NFKC; curly quotes and apostrophes become straight ones; lowercase.
2. Symbols with a spoken form: ``%`` -> ``percent``, ``&`` -> ``and``.
3. Numbers: thousands separators between digits are dropped (``1,000`` -> ``1000``); a decimal
   point between digits is spoken (``2.5`` -> ``2 point 5``).
4. Hyphens, dashes, slashes and colons become spaces (``semi-prehensile`` -> ``semi prehensile``,
   ``3:2`` -> ``3 2``).
5. Every other character that is not a letter, a digit, whitespace or an apostrophe is removed
   (``.``, ``,``, ``?``, ``!``, ``"`` ...). An apostrophe is kept only between two letters
   (``don't``, ``linnell's``); leading or trailing ones are dropped (``'em`` -> ``em``).
6. Contractions whose expansion is unambiguous are expanded: ``won't`` -> ``will not``,
   ``can't`` -> ``can not``, ``shan't`` -> ``shall not``, other ``n't`` -> `` not``, ``'m`` ->
   `` am``, ``'re`` -> `` are``, ``'ve`` -> `` have``, ``'ll`` -> `` will``. ``'s`` and ``'d``
   (is/has/possessive, had/would) are left as written.
7. Titles: ``mr`` -> ``mister``, ``mrs`` -> ``missus``, ``dr`` -> ``doctor``.
8. Whole numbers 0 to 99 written in digits are spelled out (``25`` -> ``twenty five``);
   larger numbers stay as digits. Ordinals are not handled.
9. Hesitations carrying no words are removed: ``uh``, ``um``, ``umm``, ``uhm``, ``er``, ``erm``,
   ``hmm``, ``mm``, ``mhm``.
10. Runs of whitespace collapse to one space; leading/trailing space is stripped.

No spelling variants (British/American) are merged.
"""
from __future__ import annotations

import re
import unicodedata

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()

_TITLES = {"mr": "mister", "mrs": "missus", "dr": "doctor"}
_HESITATIONS = frozenset("uh um umm uhm er erm hmm mm mhm".split())
_IRREGULAR_NOT = {"won't": "will not", "can't": "can not", "shan't": "shall not"}
_SUFFIXES = (("n't", " not"), ("'m", " am"), ("'re", " are"), ("'ve", " have"), ("'ll", " will"))


def spell_number(n: int) -> str:
    """English words for 0 <= n <= 99."""
    if not 0 <= n <= 99:
        raise ValueError(n)
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] if ones == 0 else f"{_TENS[tens]} {_ONES[ones]}"


def _expand_contraction(word: str) -> str:
    if word in _IRREGULAR_NOT:
        return _IRREGULAR_NOT[word]
    for suffix, expansion in _SUFFIXES:
        if word.endswith(suffix) and len(word) > len(suffix):
            return word[: -len(suffix)] + expansion
    return word


def _strip_apostrophes(word: str) -> str:
    # keep an apostrophe only with a letter on each side
    word = word.strip("'")
    return re.sub(r"(?<![a-z])'|'(?![a-z])", "", word)


def normalize(text: str) -> str:
    t = unicodedata.normalize("NFKC", text)
    t = t.replace("\u2019", "'").replace("\u2018", "'").replace("\u02bc", "'").replace("`", "'")
    t = t.lower()
    t = t.replace("%", " percent ").replace("&", " and ")
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)
    t = re.sub(r"(?<=\d)\.(?=\d)", " point ", t)
    t = re.sub(r"[-\u2010-\u2015/:]", " ", t)
    t = "".join(c if (c.isalnum() or c.isspace() or c == "'") else " " for c in t)
    words: list[str] = []
    for raw in t.split():
        w = _strip_apostrophes(raw)
        if not w:
            continue
        for part in _expand_contraction(w).split():
            part = _TITLES.get(part, part)
            if part.isdigit() and part.isascii() and int(part) <= 99:
                words.extend(spell_number(int(part)).split())
            elif part in _HESITATIONS:
                continue
            else:
                words.append(part)
    return " ".join(words)


if __name__ == "__main__":
    import sys

    for line in sys.stdin:
        print(normalize(line))

"""A word n-gram language model with backoff, read from an ARPA file.

The ARPA file holds log10 probabilities and backoff weights; this module scores in natural log
(`score`, `end_score`, `sentence_logprob`) and also exposes the log10 values (`log10_prob`).

Scoring (the standard backoff rule, as SRILM and KenLM define it): for a word w after the context
h = (h1 .. hk) (most recent last, k < order),

    log P(w | h) = log p(h, w)                         if the n-gram (h, w) is listed,
                 = backoff(h) + log P(w | h2 .. hk)    otherwise (backoff(h) = 0 when h is not listed),

ending at the unigram p(w). A word missing from the unigrams is `<unk>`: it gets `<unk>`'s unigram
probability when the file lists `<unk>`, else log10 `oov_log10` (default -100, KenLM's substitute),
and it enters later contexts as `<unk>`. A sentence starts in the context ("<s>",) and ends by
predicting `</s>`; `<s>` itself is never predicted.

Parsing is strict and bounded: the `\\data\\` header, one `ngram N=count` line per order (orders 1..N,
N <= `max_order`), then each `\\N-grams:` section with exactly the declared number of entries
(`log10prob w1 .. wN [backoff]`, no backoff at the highest order), then `\\end\\`. Anything else -
missing header or section, counts that do not match, a bad or non-finite number, a probability above
1, a duplicate n-gram, a missing `<s>` or `</s>` unigram - raises ValueError naming the line.
"""
from __future__ import annotations

import math
import os
import re
from typing import Iterable, Optional, Sequence, Union

__all__ = ["NGramLM", "load_arpa", "BOS", "EOS", "UNK", "LN10"]

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
LN10 = math.log(10.0)
MAX_ORDER = 10

_COUNT_RE = re.compile(r"^ngram\s+(\d+)\s*=\s*(\d+)$")
_SECTION_RE = re.compile(r"^\\(\d+)-grams:$")


def _number(text: str, what: str, where: str, allow_neg_inf: bool = False) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{where}: bad {what} {text!r}") from None
    if math.isnan(v) or v == math.inf or (v == -math.inf and not allow_neg_inf):
        raise ValueError(f"{where}: non-finite {what} {text!r}")
    return v


class NGramLM:
    """Backoff word n-gram LM. Build with `NGramLM.from_arpa(path)` or `NGramLM.from_arpa_text(text)`.

    Attributes: `order` (n), `counts` (entries per order), `has_unk`, `oov_log10`.
    A state is a tuple of at most order-1 words (most recent last), as returned by `begin` / `score`.
    """

    def __init__(self, grams: Sequence[dict], oov_log10: float = -100.0):
        if not grams or not grams[0]:
            raise ValueError("an n-gram LM needs at least the unigrams")
        self._grams = [dict(g) for g in grams]  # order n-1: {(w1..wn): (log10 prob, log10 backoff)}
        self.order = len(self._grams)
        self.counts = [len(g) for g in self._grams]
        for sym in (BOS, EOS):
            if (sym,) not in self._grams[0]:
                raise ValueError(f"the LM has no {sym} unigram")
        self.has_unk = (UNK,) in self._grams[0]
        if not math.isfinite(oov_log10):
            raise ValueError(f"oov_log10 must be finite, got {oov_log10}")
        self.oov_log10 = float(oov_log10)
        self._unk_log10 = self._grams[0][(UNK,)][0] if self.has_unk else self.oov_log10

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_arpa(cls, path: Union[str, os.PathLike], max_order: int = MAX_ORDER, oov_log10: float = -100.0) -> "NGramLM":
        """Reads an ARPA file (UTF-8)."""
        try:
            with open(path, encoding="utf-8") as f:
                return cls(_parse_arpa(f, str(path), max_order), oov_log10=oov_log10)
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 text ({e})") from None

    @classmethod
    def from_arpa_text(cls, text: str, max_order: int = MAX_ORDER, oov_log10: float = -100.0) -> "NGramLM":
        """Parses ARPA text."""
        return cls(_parse_arpa(text.splitlines(), "<arpa text>", max_order), oov_log10=oov_log10)

    # -- scoring --------------------------------------------------------------------------------

    def __contains__(self, word: str) -> bool:
        return (word,) in self._grams[0]

    def word(self, word: str) -> str:
        """The word as the model sees it: itself if in the vocabulary, else `<unk>`."""
        return word if (word,) in self._grams[0] else UNK

    def begin(self) -> tuple:
        """The state at the start of a sentence."""
        return (BOS,) if self.order > 1 else ()

    def log10_prob(self, context: Sequence[str], word: str) -> float:
        """log10 P(word | context) by backoff; `context` holds the preceding words, most recent last
        (only the last order-1 count; unknown words count as `<unk>`)."""
        w = self.word(word)
        k = self.order - 1
        h = tuple(self.word(x) for x in (tuple(context)[-k:] if k else ()))
        total = 0.0
        while True:
            hit = self._grams[len(h)].get(h + (w,))
            if hit is not None:
                return total + hit[0]
            if not h:
                return total + self._unk_log10  # only `<unk>` without its own unigram gets here
            ctx = self._grams[len(h) - 1].get(h)
            if ctx is not None:
                total += ctx[1]
            h = h[1:]

    def _advance(self, state: tuple, word: str) -> tuple:
        k = self.order - 1
        return (state + (self.word(word),))[-k:] if k else ()

    def score(self, state: tuple, word: str) -> tuple[float, tuple]:
        """(ln P(word | state), the state after it)."""
        return self.log10_prob(state, word) * LN10, self._advance(state, word)

    def end_score(self, state: tuple) -> float:
        """ln P(</s> | state)."""
        return self.log10_prob(state, EOS) * LN10

    def sentence_log10(self, words: Iterable[str], bos: bool = True, eos: bool = True) -> float:
        """log10 probability of a word sequence (from `<s>` when bos, with `</s>` when eos)."""
        state = self.begin() if bos else ()
        total = 0.0
        for w in words:
            total += self.log10_prob(state, w)
            state = self._advance(state, w)
        if eos:
            total += self.log10_prob(state, EOS)
        return total

    def sentence_logprob(self, words: Iterable[str], bos: bool = True, eos: bool = True) -> float:
        """Natural-log probability of a word sequence (see `sentence_log10`)."""
        return self.sentence_log10(words, bos=bos, eos=eos) * LN10

    def __repr__(self) -> str:
        return f"NGramLM(order={self.order}, counts={self.counts}, has_unk={self.has_unk})"


def load_arpa(path: Union[str, os.PathLike], max_order: int = MAX_ORDER, oov_log10: float = -100.0) -> NGramLM:
    """`NGramLM.from_arpa(path)`."""
    return NGramLM.from_arpa(path, max_order=max_order, oov_log10=oov_log10)


def _parse_arpa(lines: Iterable[str], name: str, max_order: int) -> list[dict]:
    """ARPA lines -> one dict per order {(w1..wn): (log10 prob, log10 backoff)}."""
    it = iter(lines)
    lineno = 0

    def nxt() -> Optional[str]:
        nonlocal lineno
        for raw in it:
            lineno += 1
            line = raw.strip()
            if line:
                return line
        return None

    # Header: anything before \data\ is ignored (some writers put comments there).
    line = nxt()
    while line is not None and line != "\\data\\":
        line = nxt()
    if line is None:
        raise ValueError(f"{name}: not an ARPA file (no \\data\\ line)")

    counts: list[int] = []
    line = nxt()
    while line is not None and line.startswith("ngram"):
        m = _COUNT_RE.match(line)
        if not m:
            raise ValueError(f"{name}:{lineno}: bad count line {line!r} (expected 'ngram N=count')")
        order, count = int(m.group(1)), int(m.group(2))
        if order != len(counts) + 1:
            raise ValueError(f"{name}:{lineno}: count for order {order} where order {len(counts) + 1} was expected")
        if order > max_order:
            raise ValueError(f"{name}:{lineno}: order {order} is above the limit {max_order}")
        counts.append(count)
        line = nxt()
    if not counts:
        raise ValueError(f"{name}:{lineno}: no 'ngram N=count' lines after \\data\\")
    if counts[0] == 0:
        raise ValueError(f"{name}: no unigrams declared")

    grams: list[dict] = []
    n_max = len(counts)
    for n, count in enumerate(counts, start=1):
        m = _SECTION_RE.match(line) if line is not None else None
        if m is None or int(m.group(1)) != n:
            found = "the end of the file" if line is None else repr(line)
            raise ValueError(f"{name}:{lineno}: expected the \\{n}-grams: section, found {found}")
        table: dict = {}
        while True:
            line = nxt()
            if line is None or line.startswith("\\"):
                break
            where = f"{name}:{lineno}"
            if len(table) >= count:
                raise ValueError(f"{where}: more {n}-grams than the {count} declared")
            fields = line.split()
            if len(fields) not in (n + 1, n + 2):
                raise ValueError(f"{where}: a {n}-gram line needs a probability, {n} words and an optional backoff: {line!r}")
            if len(fields) == n + 2 and n == n_max:
                raise ValueError(f"{where}: a backoff weight on a highest-order ({n}) n-gram")
            prob = _number(fields[0], "log10 probability", where, allow_neg_inf=True)
            if prob > 0.0:
                raise ValueError(f"{where}: log10 probability {prob} is above 0 (a probability above 1)")
            backoff = _number(fields[n + 1], "backoff weight", where) if len(fields) == n + 2 else 0.0
            key = tuple(fields[1: n + 1])
            if key in table:
                raise ValueError(f"{where}: duplicate {n}-gram {' '.join(key)!r}")
            table[key] = (prob, backoff)
        if len(table) != count:
            raise ValueError(f"{name}:{lineno}: {count} {n}-grams declared, {len(table)} found")
        grams.append(table)
    if line != "\\end\\":
        found = "the end of the file" if line is None else repr(line)
        raise ValueError(f"{name}:{lineno}: expected \\end\\, found {found}")
    return grams

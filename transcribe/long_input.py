"""Long inputs, one path for every family and for batch jobs: cut at pauses into pieces a model
takes whole (`split_at_pauses`, `cut_spans`), run the pieces in batches by length (`batches`), join
the pieces' transcripts back into one (`join`). Voice detection (the energy and Silero detectors)
is `transcribe.pauses`'; this module places the cuts.

`split_at_pauses(pcm, sample_rate, max_s=90, min_s=10)` returns contiguous `Piece`s (sample ranges)
that cover the whole input: nothing is dropped, silence stays in, each piece is at most `max_s` long.
IBM Granite Speech NAR's editor holds 4096 positions (about 3.5-4 minutes of speech), so its pieces
of at most 60-120 s sit well inside it; batched Whisper cuts windows of at most 30 s; batch jobs cut
every family's long inputs.

Where a cut goes, for a piece that starts at sample `s` (times from `s`):

1. Pauses (runs of frames without speech, found by a detector) in the window `[min_s, max_s]`.
   A cut in a pause goes at its middle; in a pause longer than 1 s it goes 0.5 s before the pause's
   end (so this piece keeps most of the silence and the next begins with half a second of it), as
   late as the window allows. Each candidate scores its position in seconds plus 10 s per second of
   silence kept on both sides of the cut (twice the nearer side), counted up to 1 s: a one-second
   pause wins over a 0.3 s one up to 7 s later, and a later pause wins over an equal earlier one, so
   pieces are long and few. A pause of at least 0.2 s as detected (about 0.3 s of silence, since
   the detectors widen speech by 60 ms on each side) always wins over shorter ones.
2. No pause in the window: the quietest point of its last third (the lowest energy averaged over
   150 ms, the latest on a tie), which in speech is most likely a gap between words.
3. Last resort (no frame there): at `max_s` exactly.

When the rest of the audio allows it, the window ends `min_s` before the end of the audio, so the
last piece is not a sliver.

Bad input (not 1-D, empty, NaN or infinite samples, impossible limits, an unknown detector) raises
`transcribe.errors.TranscribeError`.

`cut_spans(pcm, rate, max_s, detector, grain=...)` gives (start, end) samples of the pieces, each cut
moved down to a multiple of `grain` samples: a model's frame (Granite: 20 ms), or batch jobs' 80 ms
grid (`GRANULE_S`: Parakeet's and Granite's encoder frame, four of Whisper's 20 ms timestamp steps),
on which a token's encoder frame shifts by a whole number when its piece is joined.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence, TypeVar

import numpy as np

from . import pauses
from .errors import TranscribeError
from .results import Transcript

__all__ = ["Piece", "split_at_pauses", "cut_spans", "on_grid", "join", "batches", "in_pieces", "GRANULE_S"]

log = logging.getLogger(__name__)

GRANULE_S = 0.08        # batch jobs' grid of cuts (see the module's docstring)

# Cut choice.
GOOD_PAUSE_S = 0.2      # a pause this long (after hangover: ~0.3 s of silence) beats any shorter one
FULL_PAUSE_S = 1.0      # silence counted in a pause's score up to this much
PAUSE_WEIGHT = 10.0     # seconds of position worth one second of silence
QUIET_SPAN_S = 0.150    # the fallback cut minimizes energy averaged over this span


@dataclass(frozen=True)
class Piece:
    """Samples `[start, end)` of the input."""
    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start

    def seconds(self, sample_rate: int) -> tuple[float, float]:
        """(start, end) in seconds."""
        return self.start / sample_rate, self.end / sample_rate


# ------------------------------------------------------------------------------------------ cuts

def _pause_cut(a: np.ndarray, b: np.ndarray, lo: int, hi: int, s: int, sr: int):
    """The best cut in pauses [a, b) (samples, sorted, apart) within [lo, hi], or None if none."""
    i0, i1 = int(np.searchsorted(b, lo, "right")), int(np.searchsorted(a, hi, "left"))
    if i1 <= i0:
        return None
    a, b = a[i0:i1], b[i0:i1]
    half_full = int(FULL_PAUSE_S * sr) // 2
    cut = np.clip(np.maximum((a + b) // 2, b - half_full), np.maximum(a, lo), np.minimum(b, hi))
    quiet = 2 * np.minimum(cut - a, b - cut) / sr  # seconds of silence around the cut
    score = (cut - s) / sr + PAUSE_WEIGHT * np.minimum(quiet, FULL_PAUSE_S)
    good = quiet >= GOOD_PAUSE_S
    if good.any():
        score = np.where(good, score, -np.inf)
    return int(cut[int(np.argmax(score))])


def _quiet_cut(level: np.ndarray, hop: int, lo: int, hi: int):
    """The quietest frame centre in the last third of [lo, hi] (the latest on a tie), or None."""
    start = hi - (hi - lo) // 3
    f0 = max(0, -(-(start - hop // 2) // hop))   # first frame whose centre is >= start
    f1 = min(len(level), (hi - hop // 2) // hop + 1)
    if f1 <= f0:
        return None
    seg = level[f0:f1]
    f = f1 - 1 - int(np.argmin(seg[::-1]))
    return int(min(hi, max(start, f * hop + hop // 2)))


def _check_limits(max_s, min_s) -> None:
    for name, v in (("max_s", max_s), ("min_s", min_s)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v):
            raise TranscribeError(f"{name} must be a finite number of seconds, got {v!r}")
    if max_s < 1.0:
        raise TranscribeError(f"max_s must be at least 1 second, got {max_s}")
    if min_s < 0 or max_s <= min_s:
        raise TranscribeError(f"need 0 <= min_s < max_s, got min_s={min_s}, max_s={max_s}")


def split_at_pauses(pcm, sample_rate: int = 16000, *, max_s: float = 90.0, min_s: float = 10.0,
                    detector: str = "auto") -> list[Piece]:
    """Contiguous pieces covering all of `pcm`, each at most `max_s` seconds, cut at pauses in
    `[min_s, max_s]` from each piece's start where there are any (see the module's docstring)."""
    x = pauses.check_audio(pcm, sample_rate, detector)
    _check_limits(max_s, min_s)
    scan = pauses.Scan(x, sample_rate, detector)
    n = len(x)
    max_n = int(max_s * sample_rate)
    min_n = max(1, int(min_s * sample_rate))
    if n <= max_n:
        return [Piece(0, n)]
    a, b = scan.pauses()
    level = scan.level(QUIET_SPAN_S)
    out = []
    s = 0
    while n - s > max_n:
        lo, hi = s + min_n, s + max_n
        if n - min_n >= lo:
            hi = min(hi, n - min_n)  # leave the last piece at least min_s long
        cut = _pause_cut(a, b, lo, hi, s, sample_rate)
        if cut is None:
            cut = _quiet_cut(level, scan.hop, lo, hi)
        if cut is None:
            cut = s + max_n
        out.append(Piece(s, cut))
        s = cut
    out.append(Piece(s, n))
    log.debug("split %.1f s into %d pieces (%s detector)", n / sample_rate, len(out), scan.detector)
    return out


def on_grid(starts: Sequence[int], n: int, grain: int = 1) -> list[tuple[int, int]]:
    """Contiguous (start, end) ranges covering `n` samples from pieces' start samples, each start
    moved down to a multiple of `grain` (so a piece never grows past its end, and the next takes in
    what it gives up); a last piece under one grain (only the input's very end) joins the one before."""
    bounds = sorted({s - s % grain for s in starts} | {0})
    if len(bounds) > 1 and n - bounds[-1] < grain:
        bounds.pop()
    return list(zip(bounds, bounds[1:] + [n]))


def cut_spans(pcm, rate: int, max_s: Optional[float], detector: str = "auto", *, min_s: Optional[float] = None,
              grain: int = 1) -> list[tuple[int, int]]:
    """(start, end) samples of the pieces of `pcm`, contiguous and covering it: one when it is at most
    `max_s` seconds long (or `max_s` is 0 or None: never cut), else `split_at_pauses`'s pieces (min_s
    None: min(10 s, max_s / 3)) with their cuts on a grid of `grain` samples (`on_grid`)."""
    n = len(pcm)
    if not max_s or n <= max_s * rate:
        return [(0, n)]
    if min_s is None:
        min_s = min(10.0, max_s / 3)
    pieces = split_at_pauses(pcm, rate, max_s=max_s, min_s=min_s, detector=detector)
    return on_grid([p.start for p in pieces], n, grain)


# ----------------------------------------------------------------------------------------- joins

def join(parts: Sequence[Transcript], spans: Sequence[tuple[int, int]], rate: int, n_samples: int, *,
         frame_s: Optional[float] = None, digits: int = 6, clip: bool = False,
         text: Optional[str] = None) -> Transcript:
    """One input's transcript from its pieces' transcripts (times from each piece's start), piece k
    covering samples `spans[k]` of `n_samples` at `rate`.

    Segments, words and tokens are shifted by their piece's start and rounded to `digits` decimals;
    with `clip`, no time passes its piece's end. Token frames shift by the start in frames of `frame_s`
    seconds (None: frames are dropped). The text is the pieces' texts joined by a space, or `text` when
    the caller has the whole (a byte-level BPE decodes all the ids at once); language and model are
    the first piece's that has one. A word that a segment shares with the transcript's words stays
    one object."""
    segments, words, tokens, texts = [], [], [], []
    language, model = None, ""
    for part, (a, b) in zip(parts, spans):
        off = a / rate
        end = off + (b - a) / rate if clip else None

        def at(x: float) -> float:
            t = round(float(x + off), digits)
            return t if end is None else min(t, end)

        moved: dict = {}

        def word(w):
            if id(w) not in moved:
                moved[id(w)] = dataclasses.replace(w, start=at(w.start), end=at(w.end))
            return moved[id(w)]

        if part.text:
            texts.append(part.text)
        model = model or part.model
        language = language or part.language
        segments += [dataclasses.replace(s, start=at(s.start), end=at(s.end), words=[word(w) for w in s.words])
                     for s in part.segments]
        words += [word(w) for w in part.words]
        shift = int(round(off / frame_s)) if frame_s else 0
        tokens += [dataclasses.replace(t, start=at(t.start), end=at(t.end),
                                       frame=None if t.frame is None or not frame_s else t.frame + shift)
                   for t in part.tokens]
    whole = " ".join(texts).strip() if text is None else text
    return Transcript(text=whole, duration=n_samples / rate, segments=segments, words=words, tokens=tokens,
                      model=model, language=language)


# --------------------------------------------------------------------------------------- batches

T = TypeVar("T")


def batches(items: Sequence[T], samples: Callable[[T], int], batch_size: int, max_audio_s: Optional[float] = None,
            rate: int = 16000, same: Optional[Callable[[T], object]] = None,
            longest_first: bool = True) -> Iterator[list[T]]:
    """`items` in batches: longest first (`samples(item)` long; equal lengths keep their order), or in
    the order given (`longest_first=False`); at most `batch_size` in a batch; with `max_audio_s`, at
    most that many seconds of padded audio (the batch's first item's samples at `rate` times its
    size: with the longest first, what the batch's tensors hold; one item alone may be longer); with
    `same`, the items of a batch share `same(item)`."""
    order = sorted(items, key=lambda x: -samples(x)) if longest_first else list(items)
    batch: list = []
    for item in order:
        padded_s = samples(batch[0] if batch else item) * (len(batch) + 1) / rate
        if batch and (len(batch) >= batch_size or (same is not None and same(item) != same(batch[0]))
                      or (max_audio_s is not None and padded_s > max_audio_s)):
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


def in_pieces(group: Sequence[tuple[int, np.ndarray]], run: Callable[[list[np.ndarray]], list[Transcript]], *,
              rate: int, max_piece_s: Optional[float], detector: str, grain: int, batch_size: int,
              max_batch_s: Optional[float], separator: Callable[[list[Transcript]], str] = lambda parts: " ") \
        -> dict[int, Transcript]:
    """The transcripts of a group of (input index, pcm): each input cut at pauses into pieces of at most
    `max_piece_s` (`cut_spans`, cuts on a grid of `grain` samples), the pieces run `batch_size` at a time
    (at most `max_batch_s` of padded audio, longest first) through `run(pcms) -> transcripts`, and each
    input's pieces joined (`join`: times rounded to 1 ms and clipped to their piece; texts joined by
    `separator(parts)`). An input of one piece is its piece's transcript as it is."""
    pieces = []  # (input index, start sample, pcm)
    for i, pcm in group:
        spans = cut_spans(pcm, rate, max_piece_s, detector, grain=grain)
        if len(spans) > 1:
            log.info("input %d: %.1f s cut at pauses into %d pieces", i + 1, len(pcm) / rate, len(spans))
        pieces += [(i, a, pcm[a:b]) for a, b in spans]
    results: list = [None] * len(pieces)
    for batch in batches(range(len(pieces)), lambda k: len(pieces[k][2]), batch_size, max_batch_s, rate):
        for k, t in zip(batch, run([pieces[k][2] for k in batch])):
            results[k] = t
    out = {}
    for i, pcm in group:
        mine = [(p, r) for p, r in zip(pieces, results) if p[0] == i]
        if len(mine) == 1:
            out[i] = mine[0][1]
            continue
        parts = [r for _, r in mine]
        sep = separator(parts)
        text = sep.join(r.text.strip() for r in parts if r.text.strip())
        out[i] = join(parts, [(a, a + len(x)) for (_, a, x), _ in mine], rate, len(pcm), digits=3, clip=True,
                      text=text)
    return out

"""Who spoke when, joined to what was said: the diarizer contract (`Diarization`), the speaker limit a
diarizer applies to its probabilities (`limit_speakers`), and the attribution of a transcript's words
and segments to speakers (`attribute`). Any recognizer's transcript can be attributed; a diarizer (a
loaded model with `diarizer = True`: Sortformer) gives the turns.

A diarizer's contract: `diarizer = True`, `max_speakers` (the speakers its head has), `sample_rate`,
and `diarize(audio, sample_rate=None, num_speakers=None, **options) -> Diarization` (a list for a list,
as `transcribe`). Its `transcribe(audio)` gives a `Transcript` with no text, words or segments, and
`speakers` = the turns.

Attribution (`attribute`), for every word:
- the word goes to the speaker whose turns overlap it most in time (the overlaps of one speaker's
  turns added up);
- a tie between speakers goes to the speaker whose turn holds the word's midpoint, then to the
  speaker of the earliest-starting turn among the tied ones (so a word straddling a change goes to
  the speaker it overlaps more, and an exact half to the one at its middle);
- a word that overlaps no turn (or has no length) goes to the speaker of the turn holding it, else of
  the nearest turn (the smallest gap; a tie goes to the earlier turn);
- no turns at all: every word's speaker is None (and the transcript's `speakers` is []).

Segments are then split at every change of speaker between consecutive words: each piece keeps the
segment's other fields (avg_logprob, ...), takes its times from its words and its text from the
segment's text (the stretch that holds its words, when the words are found in it in order; else the
words joined by a space, as the families build a segment's text from its words), and gets its
words' speaker. A segment without words (a family or a call that does not time words: Whisper
without word timestamps, Cohere) is not split: it gets the speaker that overlaps it most, by the
same rule. Nothing is dropped or reordered: every word stays, in order, and the transcript's text is
left as it was.

numpy is imported by `limit_speakers` alone, when called (the command's help imports this module's
neighbours without it); PyTorch never.
"""
from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from .errors import OptionValueError
from .results import Segment, SpeakerTurn, Transcript, Word

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

__all__ = ["Diarization", "limit_speakers", "check_num_speakers", "attribute", "speaker_at", "ACTIVE"]

# A speaker is active in a frame where its probability is above this (NeMo's onset and offset defaults).
ACTIVE = 0.5


@dataclass
class Diarization:
    """A diarizer's answer for one input: `probs` float32 [n_frames, n_speakers], each speaker's activity
    per frame (Sortformer: 80 ms frames, speakers in order of first appearance), `frame_s` seconds per
    frame, `duration` seconds of audio, and `turns` after post-processing, sorted by (start, speaker)."""

    probs: "np.ndarray"
    frame_s: float
    duration: float
    turns: list[SpeakerTurn] = dataclasses.field(default_factory=list)


# ------------------------------------------------------------------------------ the speaker limit

def check_num_speakers(value, most: Optional[int]) -> None:
    """Raises OptionValueError unless `value` is None or an integer from 1 to `most` (the diarizer's
    speakers; None: no maximum)."""
    from .options import integer

    integer("num_speakers", value, 1, most, why="the diarizer's speakers" if most is not None else "")


def limit_speakers(probs: "np.ndarray", n: int) -> "np.ndarray":
    """`probs` [n_frames, n_speakers] limited to the `n` speakers with the largest summed probability,
    float32 [n_frames, min(n, n_speakers)].

    Each dropped speaker is merged (elementwise max) into the kept speaker with the largest summed
    probability over the frames where the dropped one is active (above 0.5); a tie (a dropped speaker
    never active: every kept one sums to 0 there) goes to the kept speaker with the larger total, then
    the earlier column. Targets are chosen on the probabilities as given, so the merges do not depend
    on each other's order. The kept speakers are then put in order of arrival: by their first active
    frame (after the merges), a kept speaker never active last, ties by column. With `n` at least the
    number of speakers nothing is dropped and `probs` comes back unchanged (as float32). `n` below 1 is
    an OptionValueError (so is one above the diarizer's speakers, where the diarizer checks it:
    `check_num_speakers`)."""
    import numpy as np

    check_num_speakers(n, None)
    p = np.asarray(probs, dtype=np.float32)
    if p.ndim != 2:
        raise ValueError(f"probs must be [n_frames, n_speakers], got shape {p.shape}")
    n_spk = p.shape[1]
    if n >= n_spk:
        return p.copy()
    sums = p.astype(np.float64).sum(axis=0)
    order = sorted(range(n_spk), key=lambda k: (-sums[k], k))
    kept, dropped = sorted(order[:n]), order[n:]
    merged = {k: p[:, k].copy() for k in kept}
    for d in dropped:
        active = p[:, d] > ACTIVE
        over = {k: float(p[active, k].astype(np.float64).sum()) for k in kept}
        target = min(kept, key=lambda k: (-over[k], -sums[k], k))
        np.maximum(merged[target], p[:, d], out=merged[target])

    def arrival(k: int) -> tuple:
        on = np.flatnonzero(merged[k] > ACTIVE)
        return (0, int(on[0]), k) if on.size else (1, 0, k)

    out = np.stack([merged[k] for k in sorted(kept, key=arrival)], axis=1) if kept else p[:, :0]
    return np.ascontiguousarray(out, dtype=np.float32)


# ------------------------------------------------------------------------------ attribution

class _Turns:
    """Turns sorted by start, with what finding the ones near a time needs."""

    def __init__(self, turns: Sequence[SpeakerTurn]):
        self.turns = sorted(turns, key=lambda t: (t.start, t.end, t.speaker))
        self.starts = [t.start for t in self.turns]
        self.max_end = []  # max_end[i]: the latest end among turns[:i + 1]
        latest = float("-inf")
        for t in self.turns:
            latest = max(latest, t.end)
            self.max_end.append(latest)

    def speaker(self, start: float, end: float) -> Optional[str]:
        if not self.turns:
            return None
        end = max(end, start)
        mid = (start + end) / 2
        right = bisect.bisect_left(self.starts, end) if end > start else bisect.bisect_right(self.starts, end)
        # turns starting before the word ends (or at a point word's time); those that end after it starts overlap
        near = []
        i = right - 1
        while i >= 0 and self.max_end[i] >= start:
            t = self.turns[i]
            if t.end > start or (end == start and t.end >= start):
                near.append(t)
            i -= 1
        if end > start:
            overlap: dict[str, float] = {}
            for t in near:
                o = min(end, t.end) - max(start, t.start)
                if o > 0:
                    overlap[t.speaker] = overlap.get(t.speaker, 0.0) + o
            if overlap:
                best = max(overlap.values())
                tied = {s for s, o in overlap.items() if o == best}
                if len(tied) == 1:
                    return next(iter(tied))
                holding = [t for t in near if t.speaker in tied and t.start <= mid <= t.end]
                pool = holding or [t for t in near if t.speaker in tied and min(end, t.end) > max(start, t.start)]
                return min(pool, key=lambda t: (t.start, t.speaker)).speaker
        else:
            holding = [t for t in near if t.start <= start <= t.end]
            if holding:
                return min(holding, key=lambda t: (t.start, t.speaker)).speaker
        return self._nearest(start, end, right)

    def _nearest(self, start: float, end: float, right: int) -> str:
        """The speaker of the turn nearest to [start, end], which overlaps none (a tie: the earlier turn)."""
        best = None  # (gap, start, speaker)
        if right > 0:  # turns starting before the word ends all end by its start: the latest end is nearest
            latest = self.max_end[right - 1]
            for t in self.turns[:right]:
                if t.end == latest:
                    key = (start - t.end, t.start, t.speaker)
                    best = key if best is None or key < best else best
        if right < len(self.turns):  # the first turn starting at or after the word's end
            after = self.starts[right]
            for t in self.turns[right:]:
                if t.start != after:
                    break
                key = (t.start - end, t.start, t.speaker)
                best = key if best is None or key < best else best
        return best[2]


def speaker_at(turns: Sequence[SpeakerTurn], start: float, end: float) -> Optional[str]:
    """The speaker a stretch [start, end] of audio goes to, by `attribute`'s rule (None: no turns)."""
    return _Turns(turns).speaker(start, end)


def attribute(transcript: Transcript, turns: Sequence[SpeakerTurn]) -> Transcript:
    """A copy of `transcript` with a speaker on every word and segment (segments split at every change
    of speaker: the module docstring says how) and `speakers` = `turns` sorted by (start, speaker).
    The transcript given is left as it is."""
    index = _Turns(turns)
    speakers = sorted((SpeakerTurn(t.speaker, float(t.start), float(t.end)) for t in turns),
                      key=lambda t: (t.start, t.speaker, t.end))
    memo: dict[int, Word] = {}  # id(word) -> its attributed copy: a word in a segment and the list is one

    def word(w: Word) -> Word:
        got = memo.get(id(w))
        if got is None:
            got = memo[id(w)] = dataclasses.replace(w, speaker=index.speaker(float(w.start), float(w.end)))
        return got

    segments = []
    for s in transcript.segments:
        if not s.words:
            segments.append(dataclasses.replace(s, words=[], speaker=index.speaker(float(s.start), float(s.end))))
            continue
        segments.extend(_split(s, [word(w) for w in s.words]))
    words = [word(w) for w in transcript.words]
    return dataclasses.replace(transcript, segments=segments, words=words, tokens=list(transcript.tokens),
                               speakers=speakers)


def _split(s: Segment, words: list[Word]) -> list[Segment]:
    """A segment cut at every change of speaker between its (attributed) words."""
    runs: list[list[Word]] = [[words[0]]]
    for w in words[1:]:
        if w.speaker == runs[-1][-1].speaker:
            runs[-1].append(w)
        else:
            runs.append([w])
    if len(runs) == 1:
        return [dataclasses.replace(s, words=words, speaker=words[0].speaker)]
    texts = _texts(s.text, words, [len(r) for r in runs])
    return [dataclasses.replace(s, text=text, start=run[0].start, end=run[-1].end, words=run, speaker=run[0].speaker)
            for run, text in zip(runs, texts)]


def _texts(text: str, words: list[Word], sizes: list[int]) -> list[str]:
    """The text of each run of `sizes` words: the stretch of the segment's `text` from the run's first
    word to the next run's first (stripped), when every word is found in the text in order; else each
    run's words joined by a space."""
    at, places = 0, []
    for w in words:
        found = text.find(w.word.strip(), at) if w.word.strip() else at
        if found < 0:
            places = None
            break
        places.append(found)
        at = found + len(w.word.strip())
    cuts, k = [], 0
    for n in sizes:
        cuts.append(k)
        k += n
    if places is None:
        return [" ".join(w.word.strip() for w in words[a:a + n] if w.word.strip()) for a, n in zip(cuts, sizes)]
    bounds = [0] + [places[c] for c in cuts[1:]] + [len(text)]
    return [text[a:b].strip() for a, b in zip(bounds, bounds[1:])]

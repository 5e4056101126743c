"""Who spoke, live: a streaming session's diarizer (`StreamingSession.add_diarizer`) labels the session's words
with speakers, in order, as the diarizer's final frames cover them; labels of words handed out before they were
known come later as `WordSpeakers` (the rules: `transcribe.streaming`'s docstring)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional

from .results import Word


@dataclass
class WordSpeakers:
    """Speakers of words handed out before they were known: the words numbered `first`,
    `first + 1`, ... (from 0, in the order `drain()` / `drain_words()` gave them) were said by
    `speakers` (None: no speaker was active over the word)."""

    first: int
    speakers: list

    def to_dict(self) -> dict:
        return {"type": "word_speakers", "first": self.first, "speakers": list(self.speakers)}


class LiveSpeakers:
    """A session's live diarizer: labels the session's words, in order, as the diarizer's final
    frames cover them (module docstring). Holds only the words not yet labelled (the diarizer's
    latency's worth)."""

    def __init__(self, diarizer, options: dict):
        self.model = diarizer
        self.options = dict(options)
        self.restart()

    def restart(self) -> None:
        self.stream = self.model.stream_diarizer(**self.options)
        self.settle_s = settle_seconds(self.stream)
        self.pending: deque = deque()  # (number, Word) of the words not yet labelled, in order
        self.count = 0  # words queued so far (the next one's number)
        self.drained = 0  # words handed out so far
        self.first: Optional[int] = None  # the first word of the labels to hand out
        self.labels: list = []
        self.final = False

    def add(self, word: Word) -> None:
        """A word the session finished (labelled once the diarizer has been fed the same audio: `feed`,
        `finish`; the turns are worked out once a step, not once a word)."""
        word.speaker = None
        self.pending.append((self.count, word))
        self.count += 1

    def feed(self, samples) -> None:
        self.stream.feed(samples)
        self.label()

    def finish(self) -> None:
        self.stream.finish()
        self.final = True
        self.label()

    def label(self) -> None:
        if not self.pending:
            return
        if self.final:
            limit = float("inf")
        else:
            limit = self.stream.frames_done * float(self.stream.frame_s) - self.settle_s + 1e-6
            if self.pending[0][1].end > limit:
                return
        from .diarization import speaker_at

        turns = self.stream.turns(self.final)
        while self.pending and self.pending[0][1].end <= limit:
            number, word = self.pending.popleft()
            word.speaker = speaker_at(turns, word.start, word.end)
            if number < self.drained:  # handed out without its speaker: its label goes out now
                if self.first is None:
                    self.first = number
                self.labels.append(word.speaker)

    def take(self) -> list[WordSpeakers]:
        if self.first is None:
            return []
        out = [WordSpeakers(self.first, self.labels)]
        self.first, self.labels = None, []
        return out


def settle_seconds(stream) -> float:
    """How far behind the diarizer's final frames a word must end for its speaker to be decided: the
    stream diarizer's `settle_s` (the span over which its post-processing may still change a turn
    already seen: a later turn padded back over it, a short turn kept or dropped, a short gap filled),
    0 where it gives none (post-processing that looks at no later frame: NeMo's defaults)."""
    return max(0.0, float(getattr(stream, "settle_s", 0.0) or 0.0))

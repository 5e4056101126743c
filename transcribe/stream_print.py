"""What `transcribe --stream` prints as a live session goes (`stream_cli.py`): the committed text (`Text`), the
words with their speakers (`SpeakerText`, with --diarize) or JSON lines (`JsonLines`); each has `update(session)`
after every piece fed and `close(session)` at the end (the formats: `stream_cli`'s docstring)."""
from __future__ import annotations

import json

from .results import Word
from .streaming import StreamMessages
from .text.words import join_punctuation


class Text:
    """txt: the committed text as it is added; a newline at the end."""

    def __init__(self, out):
        self.out = out
        self.last = "\n"  # nothing written yet: no newline needed at the end

    def update(self, session) -> None:
        new = session.take_new_text()
        if new:
            self.out.write(new)
            self.out.flush()
            self.last = new[-1]

    def close(self, session) -> None:
        if self.last != "\n":
            self.out.write("\n")
            self.last = "\n"
        self.out.flush()


class SpeakerText:
    """txt with --diarize: the words as their speakers become known, "speaker_N: " at the start of
    each line (none for words of no speaker); a new line at each change of speaker and at each
    end-of-utterance event."""

    def __init__(self, out):
        self.out = out
        self.items: list = []  # words and events drained, not yet written
        self.number = 0  # the stream's number of the first word in `items`
        self.speaker: object = _NOBODY  # the open line's speaker
        self.line: list[str] = []  # the open line's words (joined with the session's punctuation rule)
        self.written = ""  # what of the open line is written

    def update(self, session) -> None:
        session.take_new_text()  # (the words carry the text)
        session.take_word_speakers()  # (the words carry their speakers)
        self.items += session.drain()
        known = session.labelled_words
        done = 0
        for item in self.items:
            if isinstance(item, Word):
                if self.number >= known:
                    break
                self.number += 1
                self._word(item, session)
            elif item.type == "eou":
                self._end_line()
            done += 1
        del self.items[:done]
        self.out.flush()

    def _word(self, word, session) -> None:
        speaker = getattr(word, "speaker", None)
        if speaker != self.speaker:
            self._end_line()
            self.speaker = speaker
        if not self.line:
            self.out.write(f"{speaker}: " if speaker is not None else "")
        self.line.append(word.word)
        text = join_punctuation(" ".join(self.line), session.punctuation)  # "word ," -> "word,"
        self.out.write(text[len(self.written):] if text.startswith(self.written) else " " + word.word)
        self.written = text

    def _end_line(self) -> None:
        if self.line:
            self.out.write("\n")
        self.line, self.written, self.speaker = [], "", _NOBODY

    def close(self, session) -> None:
        self.update(session)
        self._end_line()
        self.out.flush()


_NOBODY = object()


class JsonLines:
    """jsonl: partial / word / event lines as they come (streaming.StreamMessages: each word after a
    partial that contains it, an utterance's whole text before its end), then the final line of the
    whole stream."""

    def __init__(self, out):
        self.out = out
        self.messages = None

    def _line(self, obj: dict) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")

    def update(self, session) -> None:
        if self.messages is None:
            self.messages = StreamMessages(session)
        for obj in self.messages.take():
            self._line(obj)
        self.out.flush()

    def close(self, session) -> None:
        if self.messages is None:
            self.messages = StreamMessages(session)
        m = self.messages
        final = {"type": "final", "text": m.final_text(), "tokens": m.tokens, "words": m.words, "events": m.events}
        if getattr(session, "diarizing", False):
            final["speakers"] = [t.to_dict() for t in session.speaker_turns()]
        self._line(final)
        self.out.flush()

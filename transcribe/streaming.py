"""`StreamingSession`: live transcription, one interface for every model family.

Audio goes in as it arrives (`feed`, any length), text comes out as it is decided:

- committed text is append-only: once handed out it never changes (`take_new_text()` gives what
  was added since the last call, with a "\n" at each end-of-utterance event); tentative text is
  the model's current guess for the audio after it and may still change (`text()` = committed +
  tentative);
- finished words (a word is finished when the next one starts, at an event, or at `finalize()`)
  come out of `drain_words()`, end-of-utterance / end-of-backchannel events out of
  `drain_events()` (both together out of `drain()`, in time order: an event comes after every
  word said before it, and the word open when it came is finished by it); an `<EOU>` with no text
  since the last one (a model repeating it in a silence) ends no utterance and makes no event,
  though its token is reported;
- word times are monotonic and do not overlap: a word starts no earlier than the one before it
  ended, and ends no later than the next word (or the event after it) starts (the tokens keep the
  model's own times);
- `finalize()` ends the input: the audio held back is decoded and the last word finished; what it
  added is then there to take (`take_new_text()`, `drain()`), inside or after a `with` block;
- `latency` says how much audio came in and how much of it is committed.

Memory stays bounded over hours: drained words and events are released; the text and tokens the
session keeps (`text()`, `committed_text()`, `tokens()`) are those of the current utterance (since
the last end-of-utterance event, or since the start for a model without such events), kept in
compact arrays. A concrete session (cache-aware Parakeet, buffered windows for offline models)
implements `_accept(samples)`, `_flush()` and `_restart()`, and reports its results through
`_commit`, `_set_tentative`, `_add_event` and `_end_utterance`.

Who spoke (`add_diarizer(diarizer, num_speakers=None)`, before the first `feed`): a streaming
diarizer (`diarizer.stream_diarizer(...)`, a Sortformer model) runs beside the session on the same
audio, and each word gets a speaker ("speaker_0", "speaker_1", ... in order of first appearance) by
the rule of offline transcripts (`transcribe.diarization.speaker_at` over the diarizer's turns so
far) once the diarizer's final frames cover it (its end, plus the stream diarizer's `settle_s`: the
span over which its post-processing may still change a turn). Words are never held back for it,
and a label, once given, never changes:

- a word drained after its speaker is known carries it (`Word.speaker`);
- a word drained before that comes out with `speaker` None, and its label comes later, out of
  `take_word_speakers()`: `WordSpeakers(first, speakers)`, the speakers of the words numbered
  `first`, `first + 1`, ... (words count from 0 in the order `drain()` / `drain_words()` handed them
  out; labels come in that order, each word's once). The `Word` objects handed out get it too;
- `finalize()` labels every word (the diarizer's last frames come with it); `speaker_turns()` is
  "who spoke when" so far (final turns after `finalize()`).

A UI renders words as they come and colours each once its label comes: nothing it showed changes.
"""
from __future__ import annotations

import threading
from array import array
from collections import deque
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence, Union

from .errors import TranscribeError
from .live_speakers import LiveSpeakers, WordSpeakers
from .results import Token, Word
from .text.detok import IncrementalText
from .text.words import IncrementalWords, TokenSpan, WordSpan, join_punctuation

# numpy is imported where samples are handled, so that importing the package stays light.

SAMPLE_RATE = 16000


@dataclass
class StreamEvent:
    """A turn event: `type` "eou" (end of utterance) or "eob" (end of a backchannel such as
    "uh-huh", not a turn end); the token that made it, the encoder frame it was emitted at (from
    the start of the stream) and that frame's time in seconds."""

    type: str
    token: str
    frame: int
    time: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Latency:
    """chunk_ms: audio per model step; lookahead_ms: future audio a step waits for beyond its own
    chunk; received_ms: audio fed so far; committed_ms: audio whose text is committed."""

    chunk_ms: float
    lookahead_ms: float
    received_ms: float
    committed_ms: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CommitToken:
    """A token as a concrete session commits it: frames count from the start of the stream."""

    id: int
    start_frame: int
    end_frame: int
    frame: int
    duration: Optional[int] = None
    confidence: Optional[float] = None


class StreamingSession:
    """Base of every streaming session (see the module docstring). Not safe to feed from two
    threads at once; the model behind it is shared safely between sessions."""

    def __init__(
        self,
        *,
        decode: Callable[[list[int]], str],
        piece: Callable[[int], str],
        punctuation: set[str],
        frame_seconds: Callable[[float], float],
        chunk_ms: float,
        lookahead_ms: float,
        special: Optional[dict[int, str]] = None,
    ):
        self._decode = decode
        self._piece = piece
        self._punctuation = punctuation
        self._sec = frame_seconds
        self._chunk_ms = float(chunk_ms)
        self._lookahead_ms = float(lookahead_ms)
        self._special = dict(special or {})  # token id -> event type ("eou"/"eob"): not text
        self._lock = threading.Lock()
        self._resampler = None
        self._resample_rate: Optional[int] = None
        self._speakers: Optional[LiveSpeakers] = None  # add_diarizer()
        self._clear()

    # ------------------------------------------------------------------ state
    def _clear(self) -> None:
        self._finished = False
        self._received = 0  # samples at 16 kHz
        self._committed_seconds = 0.0
        self._text = IncrementalText(self._decode)
        self._words = IncrementalWords(self._decode, self._punctuation)
        self._utt_text: list[str] = []  # committed text of the current utterance, in pieces
        self._utt_ids = array("i")
        self._utt_frames = array("i")
        self._utt_starts = array("i")
        self._utt_ends = array("i")
        self._utt_durs = array("i")
        self._utt_conf = array("f")
        self._new_text: list[str] = []
        self._new_tokens: list[Token] = []
        self._tentative = ""
        # Words and events in the order they happened: (sequence number, item).
        self._seq = 0
        self._word_queue: deque[tuple[int, Word]] = deque()
        self._event_queue: deque[tuple[int, StreamEvent]] = deque()
        self._at_utterance_start = True
        self._last_word_end = 0  # frame where the last word handed out (or the last event) ends

    # ------------------------------------------------------------------ public API
    def feed(self, pcm, sample_rate: int = SAMPLE_RATE) -> None:
        """Takes the next audio: a 1-D array of float samples in [-1, 1] or int16 PCM (or raw s16le
        `bytes`), of any length, at `sample_rate` (resampled to 16 kHz as it streams). Raises AudioError
        for NaN or infinite samples, one beyond audio.MAX_AMPLITUDE, or a rate outside the accepted."""
        if self._finished:
            raise TranscribeError("this stream is finalized: call reset() to start a new one")
        from .audio_limits import check_rate, check_samples

        samples = _as_float32(pcm)
        # As every input is (audio.py): NaN / inf, or a sample beyond audio.MAX_AMPLITUDE, is refused
        # before the model sees it; so is a rate outside [MIN_RATE, MAX_RATE] before resampling.
        check_samples(samples, "<stream>")
        if sample_rate != SAMPLE_RATE:
            check_rate(sample_rate, "<stream>")
            samples = self._resample(samples, int(sample_rate), last=False)
        if samples.size:
            with self._lock:
                self._received += int(samples.size)
                self._accept(samples)
                if self._speakers is not None:
                    self._speakers.feed(samples)

    def finalize(self) -> str:
        """The end of the input: decodes the audio still held back and finishes the open word.
        Never invents an end-of-utterance event. Returns the final text of the current utterance
        (`text()`: for a model without end-of-utterance events, the whole stream's); it takes
        nothing: the text and words it added still come out of `take_new_text()` and `drain()`.
        Called again (or by the `with` block's end after it), it changes nothing."""
        if self._finished:
            return self.text()
        with self._lock:
            if self._resampler is not None:
                import numpy as np

                tail = self._resample(np.zeros(0, np.float32), self._resample_rate, last=True)
                if tail.size:
                    self._received += int(tail.size)
                    self._accept(tail)
                    if self._speakers is not None:
                        self._speakers.feed(tail)
            self._flush()
            self._set_tentative("")
            rest = self._text.flush()
            if rest:
                self._append_text(rest)
                self._new_text.append(rest)
            self._emit_words(self._words.finish())
            if self._speakers is not None:
                self._speakers.finish()
            self._committed_seconds = self._received / SAMPLE_RATE
            self._finished = True
        return self.text()

    def reset(self) -> None:
        """Forgets everything: a new stream starts (the model stays loaded)."""
        with self._lock:
            self._resampler = None
            self._resample_rate = None
            self._restart()
            self._clear()
            if self._speakers is not None:
                self._speakers.restart()

    def __enter__(self) -> "StreamingSession":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # The end of a `with` block finalizes; what that adds stays to be taken after the block.
        if exc_type is None:
            self.finalize()

    def text(self) -> str:
        """Committed + tentative text of the current utterance."""
        return join_punctuation("".join(self._utt_text) + self._tentative, self._punctuation)

    def committed_text(self) -> str:
        return join_punctuation("".join(self._utt_text), self._punctuation)

    def tentative_text(self) -> str:
        return self._tentative

    @property
    def punctuation(self) -> frozenset:
        """The marks that join the word before them ("word ," -> "word,"), as `text()` joins them."""
        return frozenset(self._punctuation)

    def take_new_text(self) -> str:
        """The committed text added since the last call (append-only, never rewritten); a "\n"
        ends each utterance (one per end-of-utterance event)."""
        out = "".join(self._new_text)
        self._new_text = []
        return out

    def take_new_tokens(self) -> list[Token]:
        """The committed tokens added since the last call, event tokens (<EOU>, <EOB>: no text)
        included: the model's output as it came."""
        out = self._new_tokens
        self._new_tokens = []
        return out

    def tokens(self) -> list[Token]:
        """The committed tokens of the current utterance."""
        return [self._token(i) for i in range(len(self._utt_ids))]

    def drain_words(self) -> list[Word]:
        """Finished words since the last call (released once drained)."""
        out = [w for _, w in self._word_queue]
        self._word_queue.clear()
        self._drained(len(out))
        return out

    def drain_events(self) -> list[StreamEvent]:
        """End-of-utterance / backchannel events since the last call (released once drained)."""
        out = [e for _, e in self._event_queue]
        self._event_queue.clear()
        return out

    def drain(self) -> list[Union[Word, StreamEvent]]:
        """Finished words and events together, in time order: a word's start and an event's time
        never decrease, and an event comes after every word said before it (the word open when
        the event came is finished by it: the last word of an utterance comes before its
        end-of-utterance event, the word before an `<EOB>` before that event)."""
        items = sorted(list(self._word_queue) + list(self._event_queue), key=lambda x: x[0])
        self._drained(len(self._word_queue))
        self._word_queue.clear()
        self._event_queue.clear()
        return [item for _, item in items]

    # ------------------------------------------------------------------ who spoke
    def add_diarizer(self, diarizer, num_speakers: Optional[int] = None, **options) -> "StreamingSession":
        """Labels the words with speakers (see the module docstring): `diarizer` is a loaded
        diarizer (a Sortformer model: `diarizer.diarizer` is True), run live beside this session
        (`diarizer.stream_diarizer(num_speakers=..., **options)`; `num_speakers`: at most that many,
        1 to `diarizer.max_speakers`; None: as many as it finds). Before the first `feed()`;
        returns the session."""
        if not getattr(diarizer, "diarizer", False) or not callable(getattr(diarizer, "stream_diarizer", None)):
            raise TranscribeError(f"{getattr(diarizer, 'name', None) or type(diarizer).__name__} is not a "
                                  "diarizer (a Sortformer model): it cannot label speakers")
        if self._speakers is not None:
            raise TranscribeError("this session has a diarizer already")
        if self._received or self._finished or self._word_queue or self._seq:
            raise TranscribeError("add_diarizer() comes before the first feed()")
        if num_speakers is not None:
            from .diarization import check_num_speakers

            check_num_speakers(num_speakers, getattr(diarizer, "max_speakers", None))
            options["num_speakers"] = num_speakers
        self._speakers = LiveSpeakers(diarizer, options)
        return self

    @property
    def diarizing(self) -> bool:
        """Whether the session labels its words with speakers (add_diarizer)."""
        return self._speakers is not None

    @property
    def labelled_words(self) -> int:
        """How many of the words (counted from the stream's first, in drain order) have their speaker
        decided: words are labelled in order, so those numbered below this have it (0 without a diarizer)."""
        if self._speakers is None:
            return 0
        return self._speakers.count - len(self._speakers.pending)

    def take_word_speakers(self) -> list["WordSpeakers"]:
        """The speakers of words handed out (drain, drain_words) before their speaker was known,
        since the last call, in word order (at most one WordSpeakers a call); [] without a diarizer."""
        if self._speakers is None:
            return []
        return self._speakers.take()

    def speaker_turns(self) -> list:
        """Who spoke when, so far (`SpeakerTurn`s of the diarizer's final frames; after `finalize()`
        the whole stream's); [] without a diarizer."""
        if self._speakers is None:
            return []
        return list(self._speakers.stream.turns(self._finished))

    def _drained(self, n: int) -> None:
        if self._speakers is not None:
            self._speakers.drained += n

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def latency(self) -> Latency:
        return Latency(self._chunk_ms, self._lookahead_ms, 1000.0 * self._received / SAMPLE_RATE,
                       1000.0 * self._committed_seconds)

    # ------------------------------------------------------------------ for concrete sessions
    def _accept(self, samples) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _flush(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _restart(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _commit(self, tokens: Sequence[CommitToken], committed_seconds: Optional[float] = None) -> None:
        """Appends decided tokens (text tokens and event tokens, in order)."""
        for t in tokens:
            kind = self._special.get(t.id)
            if kind is not None:
                # An event token is a token of the stream (take_new_tokens) but not text.
                self._new_tokens.append(Token(t.id, "", self._sec(t.start_frame), self._sec(t.end_frame),
                                              t.confidence, t.frame, t.duration, None, self._piece(t.id)))
                self._add_event(kind, t.id, t.frame)
                continue
            self._utt_ids.append(t.id)
            self._utt_frames.append(t.frame)
            self._utt_starts.append(t.start_frame)
            self._utt_ends.append(t.end_frame)
            self._utt_durs.append(-1 if t.duration is None else t.duration)
            self._utt_conf.append(float("nan") if t.confidence is None else t.confidence)
            delta = self._text.add([t.id])
            if delta:
                if self._at_utterance_start:
                    delta = delta.lstrip(" ")
                if delta:
                    self._at_utterance_start = False
                    self._append_text(delta)
                    self._new_text.append(delta)
            tok = self._token(len(self._utt_ids) - 1)
            self._new_tokens.append(tok)
            piece = self._piece(t.id)
            span = TokenSpan(t.id, piece, self._decode([t.id]), t.start_frame, t.end_frame, t.confidence)
            self._emit_words(self._words.add([span]), next_start=self._words.open_start())
        if committed_seconds is not None:
            self._committed_seconds = max(self._committed_seconds, committed_seconds)

    def _set_tentative(self, text: str) -> None:
        self._tentative = text

    def _add_event(self, kind: str, token_id: int, frame: int) -> None:
        frame = int(frame)
        if kind == "eou":
            if not len(self._utt_ids):
                return  # no utterance to end (an <EOU> again in the silence after one): no event
            self._end_utterance(frame)  # its last word is finished before the event
        else:
            # The word open when the event came was said before it: finished now, so that it
            # comes before the event (it would otherwise wait for the next word).
            self._emit_words(self._words.finish(), next_start=frame)
        self._last_word_end = max(self._last_word_end, frame)  # the words after it start after it
        self._seq += 1
        self._event_queue.append((self._seq, StreamEvent(kind, self._piece(token_id), frame, self._sec(frame))))

    def _end_utterance(self, frame: Optional[int] = None) -> None:
        """The current utterance is over (at `frame`, its event's): its last word is finished, its
        text and tokens released (they were handed out by take_new_text / take_new_tokens /
        drain_words); a "\n" ends its text."""
        rest = self._text.flush()
        if rest:
            self._new_text.append(rest)
        self._emit_words(self._words.finish(), next_start=frame)
        self._new_text.append("\n")
        self._utt_text = []
        for a in (self._utt_ids, self._utt_frames, self._utt_starts, self._utt_ends, self._utt_durs):
            del a[:]
        del self._utt_conf[:]
        self._at_utterance_start = True

    # ------------------------------------------------------------------ helpers
    def _append_text(self, text: str) -> None:
        """Keeps the utterance's text as a few strings: pieces are joined every 256, so an
        hours-long utterance (a model without end-of-utterance events) costs a constant amortized
        time per token and one string of memory."""
        self._utt_text.append(text)
        if len(self._utt_text) >= 256:
            self._utt_text = ["".join(self._utt_text)]

    def _token(self, i: int) -> Token:
        tid = self._utt_ids[i]
        conf = self._utt_conf[i]
        dur = self._utt_durs[i]
        piece = self._piece(tid)
        text = self._decode([tid])
        if piece.startswith("\u2581"):
            text = " " + text
        return Token(tid, text, self._sec(self._utt_starts[i]), self._sec(self._utt_ends[i]),
                     None if conf != conf else float(conf), self._utt_frames[i], None if dur < 0 else dur,
                     None, piece)

    def _emit_words(self, words: Sequence[WordSpan], next_start: Optional[int] = None) -> None:
        """Queues finished words (frames from the start of the stream) with monotonic times: a word
        starts no earlier than the last one handed out ended, and ends no later than what comes
        after it starts (the next of `words`, else `next_start`: the open word's start or an
        event's frame). The models' own spans may overlap: RNN-T gives a token one frame although
        the next may come on the same frame, two windows may place neighbouring words apart."""
        for i, w in enumerate(words):
            word = w.word.strip()
            if not word:
                continue
            after = words[i + 1].start if i + 1 < len(words) else next_start
            start = max(int(w.start), self._last_word_end)
            end = int(w.end) if after is None else min(int(w.end), int(after))
            end = max(end, start)
            self._last_word_end = end
            self._seq += 1
            item = Word(word, self._sec(start), self._sec(end), w.confidence)
            self._word_queue.append((self._seq, item))
            if self._speakers is not None:
                self._speakers.add(item)

    def _resample(self, samples, rate: int, last: bool):
        import numpy as np
        import soxr

        if self._resampler is None or self._resample_rate != rate:
            if self._resampler is not None:
                raise TranscribeError(f"the sample rate changed mid-stream ({self._resample_rate} -> {rate})")
            self._resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
            self._resample_rate = rate
        return np.asarray(self._resampler.resample_chunk(samples, last=last), dtype=np.float32).reshape(-1)


def _as_float32(pcm):
    """Any accepted piece of audio -> a 1-D float32 numpy array."""
    import numpy as np

    if isinstance(pcm, (bytes, bytearray, memoryview)):
        b = bytes(pcm)
        if len(b) % 2:
            raise TranscribeError("raw PCM must be whole 16-bit samples (s16le): got an odd number of bytes")
        return np.frombuffer(b, dtype="<i2").astype(np.float32) / 32768.0
    if hasattr(pcm, "detach") and hasattr(pcm, "numpy"):  # a torch tensor (torch is not imported here)
        pcm = pcm.detach().cpu().numpy()
    a = np.asarray(pcm)
    if a.ndim == 2 and 1 in a.shape:
        a = a.reshape(-1)
    if a.ndim != 1:
        raise TranscribeError(f"feed() takes mono audio (a 1-D array), got shape {tuple(a.shape)}")
    if a.dtype == np.int16:
        return a.astype(np.float32) / 32768.0
    if a.dtype.kind == "f":
        return np.ascontiguousarray(a, dtype=np.float32)
    if a.dtype.kind in "iu" and a.size == 0:
        return np.zeros(0, np.float32)
    raise TranscribeError(f"feed() takes float samples or int16 PCM, got dtype {a.dtype}")


class StreamMessages:
    """A session's news as the messages `transcribe --stream --format jsonl` prints and the WebSocket
    sends, in order: `partial` (the current utterance's text, when it changes), `word`, `eou`/`eob`.

    A word comes after a partial that contains it, and an utterance's last partial (its whole text)
    before its end-of-utterance event: the session hands out the words and events of one update in time
    order, and the utterances that ended in it (one "\\n" of the committed text per end-of-utterance
    event) are gone from `text()` by then, so their partials are made here from the committed text.
    `final()` is the closing message of the whole stream (its utterances joined by a space).

    A session with a diarizer (`add_diarizer`): each word carries `speaker` (null while not yet known),
    and `{"type": "word_speakers", "first", "speakers"}` (after the words of its update) gives the
    speakers of words sent before theirs were known: those numbered `first`, `first + 1`, ... counting
    the `word` messages from 0. Each word's speaker is given once, in word order, and never changes."""

    def __init__(self, session: "StreamingSession", keep: bool = True):
        self.session = session
        self.keep = keep  # keep tokens, words and events for final() (the command's final line has them)
        self.partial: Optional[str] = ""  # the last partial sent (None: none since the last end of utterance)
        self.utterance: list[str] = []  # committed text of the current utterance, as take_new_text gave it
        self.text: list[str] = []
        self.tokens: list[dict] = []
        self.words: list[dict] = []
        self.events: list[dict] = []

    def take(self) -> list[dict]:
        """The messages of what the session decided since the last call."""
        session, out = self.session, []

        def show(text: str) -> None:
            if text != self.partial:
                self.partial = text
                out.append({"type": "partial", "text": text})

        new = session.take_new_text()
        self.text.append(new)
        *done, rest = new.split("\n")
        ended = []  # the whole text of each utterance that ended in this update, as text() showed it
        for piece in done:
            ended.append(join_punctuation("".join(self.utterance) + piece, getattr(session, "punctuation", ())))
            self.utterance = []
        if rest:
            self.utterance.append(rest)
        for t in session.take_new_tokens():
            if self.keep:
                self.tokens.append({"id": t.id, "text": t.text, "frame": t.frame, "start": t.start, "end": t.end,
                                    "confidence": t.confidence})
        current = session.text()
        diarizing = getattr(session, "diarizing", False)
        for item in session.drain():  # words and events in time order
            # The text of the utterance this item belongs to: an ended one's whole text, or the current.
            show(ended[0] if ended else current)
            if isinstance(item, Word):
                word = item.to_dict()
                if diarizing:
                    word["speaker"] = getattr(item, "speaker", None)
                obj = {"type": "word", **word}
                if self.keep:
                    self.words.append(word)
            else:
                obj = item.to_dict()
                if self.keep:
                    self.events.append(obj)
                if obj["type"] == "eou" and ended:
                    ended.pop(0)
            out.append(obj)
            if obj["type"] == "eou":  # the next utterance's text is news even where it repeats this one's
                self.partial = None
        for text in ended:  # (an ended utterance without words or events here: none)
            show(text)
        show(current)
        for labels in session.take_word_speakers() if diarizing else ():
            if self.keep:
                for i, speaker in enumerate(labels.speakers, labels.first):
                    self.words[i]["speaker"] = speaker
            out.append(labels.to_dict())
        return out

    def final_text(self) -> str:
        """The whole stream's text: its utterances joined by a space."""
        lines = "".join(self.text).split("\n")
        return " ".join(u.strip() for u in lines if u.strip())

"""Result types shared by every model family: plain dataclasses with to_dict / from_dict."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Optional


@dataclass
class Token:
    """One output token. `text` is its decoded text (with its leading space, if any), `piece` the
    vocabulary's raw entry (SentencePiece's "▁the", Whisper's byte-level "Ġthe"). Times in seconds;
    `frame` and `duration_frames` in encoder frames (Parakeet)."""

    id: int
    text: str
    start: float
    end: float
    confidence: Optional[float] = None
    frame: Optional[int] = None
    duration_frames: Optional[int] = None
    logprob: Optional[float] = None
    piece: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Token":
        return cls(**_known(cls, d))


@dataclass
class Word:
    """One word, its times in seconds, and `speaker` (a diarizer's label, "speaker_0", ...; None when the
    transcript is not diarized)."""

    word: str
    start: float
    end: float
    confidence: Optional[float] = None
    speaker: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Word":
        return cls(**_known(cls, d))


@dataclass
class Segment:
    text: str
    start: float
    end: float
    words: list[Word] = field(default_factory=list)
    # Filled by model families that compute them (Whisper); None elsewhere.
    avg_logprob: Optional[float] = None
    no_speech_prob: Optional[float] = None
    compression_ratio: Optional[float] = None
    temperature: Optional[float] = None
    # A diarized transcript's segments are split at every change of speaker: this is their one speaker
    # (None when not diarized).
    speaker: Optional[str] = None
    # The model's tags of the audio this segment came from (see Transcript.tags); None elsewhere.
    tags: Optional[dict[str, str]] = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["words"] = [w.to_dict() for w in self.words]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Segment":
        d = _known(cls, d)
        d["words"] = [Word.from_dict(w) for w in d.get("words", [])]
        return cls(**d)


@dataclass
class SpeakerTurn:
    """One stretch of one speaker's speech, as a diarizer finds it ("who spoke when"): times in seconds.
    Labels are "speaker_0", "speaker_1", ... in order of first appearance."""

    speaker: str
    start: float
    end: float

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SpeakerTurn":
        return cls(**_known(cls, d))


@dataclass
class HypothesisToken:
    """One token of an N-best hypothesis: its id, the encoder frame it was emitted at, its
    duration in frames (TDT: predicted; RNN-T: 1; CTC: its run), and its times in seconds."""

    id: int
    frame: int
    duration_frames: Optional[int]
    start: float
    end: float

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "HypothesisToken":
        return cls(**_known(cls, d))


@dataclass
class Hypothesis:
    """One entry of an N-best list: its text, its score (the search's total log-probability, with
    any hotword or language-model terms), its score per token, score / (tokens + 1) (NeMo's length
    normalization, its start symbol counted: the list's ranking when `NBest.score_norm` is true),
    and its tokens."""

    text: str
    score: float
    normalized_score: float
    tokens: list[HypothesisToken] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"text": self.text, "score": self.score, "normalized_score": self.normalized_score,
                "tokens": [t.to_dict() for t in self.tokens]}

    @classmethod
    def from_dict(cls, d: dict) -> "Hypothesis":
        d = _known(cls, d)
        d["tokens"] = [HypothesisToken.from_dict(t) for t in d.get("tokens", [])]
        return cls(**d)


@dataclass
class NBest:
    """The ranked alternatives of a beam search, best first (the transcript is the first).
    `beam` names the search (Parakeet: "malsd", "default", "maes" or "ctc")."""

    beam_size: int
    score_norm: bool
    hypotheses: list[Hypothesis] = field(default_factory=list)
    beam: Optional[str] = None

    def to_dict(self) -> dict:
        return {"beam": self.beam, "beam_size": self.beam_size, "score_norm": self.score_norm,
                "hypotheses": [h.to_dict() for h in self.hypotheses]}

    @classmethod
    def from_dict(cls, d: dict) -> "NBest":
        d = _known(cls, d)
        d["hypotheses"] = [Hypothesis.from_dict(h) for h in d.get("hypotheses", [])]
        return cls(**d)


@dataclass
class Transcript:
    """What every model family returns, serialized with the same keys whatever the family:
    text (no leading or trailing space), language (None when the model does not say), duration
    (seconds of audio), model (the name it was loaded by), segments, words, tokens, nbest (the
    ranked alternatives of a Parakeet beam search; None otherwise), speakers (a diarized transcript's
    speaker turns, sorted by start then speaker; None when not diarized: then every word's and
    segment's `speaker` is None too), tags (what a model that tags its audio says of it besides the words,
    by kind: SenseVoice's {"emotion": "NEUTRAL", "event": "Speech"}, its own labels; never in the text; a
    long input's segments carry the tags of the piece they came from; None for every other family)."""

    text: str
    duration: float
    segments: list[Segment] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    tokens: list[Token] = field(default_factory=list)
    model: str = ""
    # The spoken language: given, or detected by a multilingual model; None when the model
    # does not say (Parakeet).
    language: Optional[str] = None
    nbest: Optional[NBest] = None
    speakers: Optional[list[SpeakerTurn]] = None
    tags: Optional[dict[str, str]] = None

    def __post_init__(self) -> None:
        self.text = self.text.strip()

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "language": self.language,
            "duration": self.duration,
            "model": self.model,
            "segments": [s.to_dict() for s in self.segments],
            "words": [w.to_dict() for w in self.words],
            "tokens": [t.to_dict() for t in self.tokens],
            "nbest": self.nbest.to_dict() if self.nbest is not None else None,
            "speakers": [t.to_dict() for t in self.speakers] if self.speakers is not None else None,
            "tags": dict(self.tags) if self.tags is not None else None,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Transcript":
        return cls(
            text=d["text"],
            duration=d["duration"],
            segments=[Segment.from_dict(s) for s in d.get("segments", [])],
            words=[Word.from_dict(w) for w in d.get("words", [])],
            tokens=[Token.from_dict(t) for t in d.get("tokens", [])],
            model=d.get("model", ""),
            language=d.get("language"),
            nbest=NBest.from_dict(d["nbest"]) if d.get("nbest") else None,
            speakers=[SpeakerTurn.from_dict(t) for t in d["speakers"]] if d.get("speakers") is not None else None,
            tags=dict(d["tags"]) if d.get("tags") is not None else None,
        )


def _known(cls, d: dict) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}

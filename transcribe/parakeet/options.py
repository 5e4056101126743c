"""The options of a Parakeet recognizer's `transcribe()` (`ParakeetOptions`) and `stream()`
(`ParakeetStreamOptions`), declared once with how the command and the server spell them
(`transcribe.options`). Checks that need the loaded model (its heads, its tokenizer for hotwords) are
the recognizer's."""
from __future__ import annotations

import argparse
import numbers
from dataclasses import dataclass
from typing import Optional, Sequence, Union

from ..options import (MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, boolean, number, option, parse_bool, parse_positive_int,
                       positive_int, sample_rate)
from ..errors import OptionValueError

HEADS = ("tdt", "rnnt", "ctc")
BEAMS = ("malsd", "default", "maes")
CONFIDENCE = ("entropy", "max_prob")
ATTENTION = ("auto", "full", "local")
# ParakeetStreamOptions that one kind of session takes and the other refuses (when given, i.e. not None):
CACHE_AWARE_ONLY = ("att_context_size", "eou_reset", "drop_short_tail")  # a cache-aware model's session
BUFFERED_ONLY = ("chunk_s", "left_s", "right_s")  # any other model's buffered windows

# The maxima of the sizes and weights (said in the help texts; checked before any work); the beam's are
# transcribe.options' (MAX_BEAM, shared with Whisper).
MAX_HOTWORDS = 1000  # phrases; each of at most MAX_HOTWORD_CHARS characters
MAX_HOTWORD_CHARS = 100
MAX_HOTWORD_WEIGHT = 20.0  # a log-probability bonus per token: 20 outweighs any acoustic evidence already
MAX_LM_WEIGHT = 10.0  # 0.3-2 are usual; beyond 10 the language model alone decides
MAX_WINDOW_PART_S = 60.0  # a buffered stream's chunk, left and right context each (the defaults: 2, 4, 2 s)


def parse_att_context(s: str) -> list[int]:
    """`--att-context L,R` -> [L, R]."""
    parts = s.split(",")
    try:
        values = [int(x) for x in parts]
    except ValueError:
        values = []
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"expected two integers LEFT,RIGHT (e.g. 70,13), got {s!r}")
    return values


@dataclass(frozen=True)
class ParakeetOptions:
    """batch_size: inputs encoded together (sorted by length, so a batch pads little); None: the model's
    default for its device and dtype. head: "tdt"/"rnnt" (the transducer, default) or "ctc" (CTC models
    and hybrids). confidence: "entropy" (NeMo's default measure) or "max_prob". attention: "auto" (full;
    local for an input over 20 minutes), "full" or "local"; decided for each input alone. sample_rate: the
    rate of array inputs (default: the model's). word_timestamps (Whisper's option) is accepted: words and
    their times are part of the timestamps here.

    Beam search (default: greedy): beam_size N keeps N hypotheses; nbest (<= beam_size) of them come back,
    ranked, in `Transcript.nbest`. beam: the transducer search, "malsd" (batched, the fast one; default),
    "default" or "maes" (NeMo's semantics); the CTC head has one (prefix) beam search. score_norm ranks by
    score per token (NeMo's default). hotwords: phrases (a list, or one comma-separated string) boosted by
    hotword_weight (default 1.5) per matched token. lm: a word n-gram ARPA file for the CTC beam, weighted
    by lm_weight (default 0.5)."""

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    timestamps: bool = option(True, help="segment, word and token times", command=False, form=None)
    head: Optional[str] = option(None, help="decoder head of a hybrid model (default: the model's own)",
                                 choices=HEADS)
    confidence: str = option("entropy", help="token confidence measure (default: entropy)", choices=CONFIDENCE,
                             command=False)
    attention: str = option("auto", help="encoder attention: auto (local over 20 minutes), full or local",
                            choices=ATTENTION, command=False)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM}: "
                                      f"{WHY_BEAM})", parse=parse_positive_int, metavar="N")
    nbest: Optional[int] = option(None, help="return the N best hypotheses, ranked, in the json output "
                                  "(N <= --beam-size)", parse=parse_positive_int, metavar="N")
    beam: Optional[str] = option(None, help="transducer search: malsd (batched, fast; the default), default or "
                                 "maes (NeMo's algorithms); the CTC head has one beam search", choices=BEAMS)
    score_norm: bool = option(True, help="rank hypotheses by total score, not score per token",
                              flag="--no-score-norm", action="store_false", parse=parse_bool)
    hotwords: Union[None, str, Sequence[str]] = option(None, help="comma-separated words or phrases to boost in "
                                                       f"the beam search (at most {MAX_HOTWORDS}, each of at most "
                                                       f"{MAX_HOTWORD_CHARS} characters)", metavar="A,B,...")
    hotword_weight: Optional[float] = option(None, help="log-probability bonus per matched hotword token "
                                             f"(default: 1.5; 0 to {MAX_HOTWORD_WEIGHT:g})", parse=float, metavar="W")
    lm: Optional[str] = option(None, help="CTC: word n-gram language model (ARPA) for the beam search",
                               metavar="FILE.arpa", form=None)
    lm_weight: Optional[float] = option(None, help=f"weight of --lm (default: 0.5; 0 to {MAX_LM_WEIGHT:g})",
                                        parse=float, metavar="W", form=None)
    word_timestamps: bool = option(False, help="(words always come with Parakeet's timestamps)", command=False,
                                   form=None)

    def __post_init__(self):
        positive_int("batch_size", self.batch_size, most=MAX_BATCH_SIZE)
        boolean("timestamps", self.timestamps)
        check_confidence(self.confidence)
        if self.attention not in ATTENTION:
            raise OptionValueError("attention", f"attention must be auto, full or local, got {self.attention!r}")
        sample_rate(self.sample_rate)
        positive_int("beam_size", self.beam_size, most=MAX_BEAM, why=WHY_BEAM)
        positive_int("nbest", self.nbest, most=MAX_BEAM, why=WHY_BEAM)
        boolean("score_norm", self.score_norm)
        check_hotwords(self.hotwords)
        number("hotword_weight", self.hotword_weight, 0.0, MAX_HOTWORD_WEIGHT)
        number("lm_weight", self.lm_weight, 0.0, MAX_LM_WEIGHT)
        boolean("word_timestamps", self.word_timestamps)
        if self.beam is not None and self.beam not in BEAMS:
            raise OptionValueError("beam", f"unknown beam {self.beam!r} (one of {', '.join(BEAMS)})")
        if (self.nbest or 1) > (self.beam_size or 1):
            size = self.beam_size or 1
            raise OptionValueError("nbest", f"nbest ({self.nbest}) cannot exceed beam_size ({size}): a beam of "
                                   f"{size} keeps {size} hypotheses")


def check_hotwords(hotwords) -> None:
    """At most MAX_HOTWORDS phrases (a list, or one comma-separated string), each of at most
    MAX_HOTWORD_CHARS characters (whether the tokenizer spells them is the recognizer's check)."""
    if hotwords is None:
        return
    if isinstance(hotwords, str):
        hotwords = hotwords.split(",")
    if not isinstance(hotwords, (list, tuple)):
        raise OptionValueError("hotwords", f"hotwords must be a list of phrases or one comma-separated string, "
                               f"got {type(hotwords).__name__}")
    if len(hotwords) > MAX_HOTWORDS:
        raise OptionValueError("hotwords", f"hotwords takes at most {MAX_HOTWORDS} phrases, got {len(hotwords)}")
    for phrase in hotwords:
        if isinstance(phrase, str) and len(phrase) > MAX_HOTWORD_CHARS:
            raise OptionValueError("hotwords", f"a hotword is at most {MAX_HOTWORD_CHARS} characters, got one of "
                                   f"{len(phrase)}")


def check_confidence(confidence) -> None:
    if confidence not in CONFIDENCE:
        raise OptionValueError("confidence", f"unknown confidence method {confidence!r} (one of "
                               f"{', '.join(CONFIDENCE)})")


@dataclass(frozen=True)
class ParakeetStreamOptions:
    """A cache-aware model streams chunk by chunk with its caches (att_context_size: one of the model's
    [left, right] lookaheads; head; eou_reset: start the decoder afresh after an end-of-utterance token;
    confidence; drop_short_tail; language); any other model streams through buffered windows (chunk_s,
    left_s, right_s, head, confidence). An option counts as given when it is not None: a cache-aware
    session refuses the BUFFERED_ONLY ones given, a buffered one the CACHE_AWARE_ONLY ones and language
    (`parakeet.streaming.open_session`)."""

    att_context_size: Optional[Sequence[int]] = option(
        None, help="cache-aware Parakeet: the attention context [left, right], one of the model's (e.g. 70,13: "
        "1.12 s chunks; 70,1: 160 ms); default: the model's first", flag="--att-context", parse=parse_att_context,
        metavar="L,R")
    head: Optional[str] = option(None, help="decoder head of a hybrid model (default: the model's own)",
                                 choices=HEADS)
    eou_reset: Optional[bool] = option(None, help="cache-aware Parakeet: keep the decoder state across "
                                       "end-of-utterance events", flag="--no-eou-reset", action="store_false",
                                       parse=parse_bool)
    confidence: str = option("entropy", help="token confidence measure", choices=CONFIDENCE, command=False)
    drop_short_tail: Optional[bool] = option(None, help="drop a final chunk too short to decode", command=False,
                                             parse=parse_bool)
    language: Optional[str] = option(None, help="a locale of the model's language prompt (models that have one)")
    chunk_s: Optional[float] = option(None, help="buffered streaming: seconds decided per step (above 0, "
                                      f"at most {MAX_WINDOW_PART_S:g})", parse=float, command=False)
    left_s: Optional[float] = option(None, help="buffered streaming: seconds of context before a chunk (0 to "
                                     f"{MAX_WINDOW_PART_S:g})", parse=float, command=False)
    right_s: Optional[float] = option(None, help="buffered streaming: seconds of lookahead after a chunk (0 to "
                                      f"{MAX_WINDOW_PART_S:g})", parse=float, command=False)

    def __post_init__(self):
        check_confidence(self.confidence)
        if self.eou_reset is not None:
            boolean("eou_reset", self.eou_reset)
        if self.drop_short_tail is not None:
            boolean("drop_short_tail", self.drop_short_tail)
        check_att_context(self.att_context_size)
        number("chunk_s", self.chunk_s, 0.0, MAX_WINDOW_PART_S, above=True)
        number("left_s", self.left_s, 0.0, MAX_WINDOW_PART_S)
        number("right_s", self.right_s, 0.0, MAX_WINDOW_PART_S)


def check_att_context(value) -> None:
    """att_context_size: None or two integers [left, right] (which pairs the model has is its check)."""
    if value is None:
        return
    pair = list(value) if isinstance(value, (list, tuple)) else None
    if pair is None or len(pair) != 2 or any(isinstance(x, bool) or not isinstance(x, numbers.Integral) for x in pair):
        raise OptionValueError("att_context_size", f"att_context_size must be two integers [left, right], got "
                               f"{str(value)[:60]}")

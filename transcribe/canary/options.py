"""The options of a Canary recognizer's `transcribe()` (`CanaryOptions`), declared once with how the
command and the server spell them (`transcribe.options`). Checks that need the loaded model (a language in
its vocabulary, a translation it can do, timestamp tokens) are the recognizer's (`prompt.PromptBuilder`)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import (MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, boolean, integer, number, option, parse_bool, parse_positive_int,
                       positive_int, sample_rate)
from .prompt import TASKS

MAX_LENGTH_PENALTY = 10.0  # Google NMT's alpha: 0-1 are usual
# max_new_tokens: the largest decoder table of any Canary config this code accepts (prompt and output share it).
MAX_NEW_TOKENS = 1 << 16
# Pieces of a long input: the published models are trained on utterances of up to 40 s (NeMo's own
# transcribe() cuts long audio into 40 s chunks); the encoder's position table holds 400 s.
MAX_PIECE_S = (10.0, 200.0)


@dataclass(frozen=True)
class CanaryOptions:
    """language: the spoken language (default: the model's, English); target_language: the output's
    (default: the spoken one; another one is speech translation); task: "transcribe" or "translate" (to
    target_language, English by default); pnc: punctuation and capitals (default: the model's, on); itn:
    inverse text normalization (canary2 models; default: the model's, off); word_timestamps: the model's
    timestamp tokens around each word (canary2 models that have them; they change the prompt, so the text
    may differ from a run without them); timestamps: segment times (one segment over the input without word
    times). Search: greedy, or NeMo's beam search with beam_size N (nbest <= N of its hypotheses come back
    in `Transcript.nbest`), length_penalty NeMo's alpha (default: the model's, 0; a transformers-format
    model runs transformers' beam search, and this is its exponent, default 1.0: scores are sums over
    length ** penalty); max_generation_delta bounds the output by the encoder's frames + delta tokens (-1:
    only by the decoder's position table; default: the delta of the model's decoding config, 50 in the
    published ones); max_new_tokens caps the tokens generated per input (EOS counted, as transformers'
    `generate(max_new_tokens=)` counts it; default: none beyond the other bounds; a transformers-format
    model's `generation_config.json` may set one). Long inputs: cut at pauses (detector) into pieces of at
    most max_piece_s (default 40 s), decoded in batches and joined (times shifted to the input's; an N-best
    list comes only with an input decoded in one piece)."""

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    timestamps: bool = option(True, help="segment times", command=False, form=None)
    language: Optional[str] = option(None, help="language code of multilingual models (e.g. en, de)",
                                     metavar="LANG")
    target_language: Optional[str] = option(None, help="Canary: the output's language (another than --language "
                                            "translates; default: --language)", metavar="LANG")
    task: Optional[str] = option(None, help="transcribe (default) or translate (Whisper: into English; Canary: "
                                 "into --target-language, English by default)", choices=TASKS, form=None)
    pnc: Optional[bool] = option(None, help="punctuation and capitals (default: the model's, on)",
                                 action=argparse.BooleanOptionalAction, parse=parse_bool)
    itn: Optional[bool] = option(None, help="canary2 models: inverse text normalization, numbers as digits "
                                 "(default: the model's, off)", action=argparse.BooleanOptionalAction,
                                 parse=parse_bool)
    word_timestamps: bool = option(False, help="time every word (json output; Parakeet models always give word "
                                   "times)", action="store_true", parse=parse_bool, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM}: "
                                      f"{WHY_BEAM})", parse=parse_positive_int, metavar="N")
    nbest: Optional[int] = option(None, help="return the N best hypotheses, ranked, in the json output "
                                  "(N <= --beam-size)", parse=parse_positive_int, metavar="N")
    length_penalty: Optional[float] = option(None, help="beam length penalty (default: none, length-normalized; 0 "
                                             f"to 2; Canary: NeMo's alpha, 0 to {MAX_LENGTH_PENALTY:g})", parse=float,
                                             command=False)
    max_generation_delta: Optional[int] = option(None, help="Canary: at most encoder frames + N tokens (-1: up "
                                                 "to the decoder's table; default: the model's)", parse=int,
                                                 command=False, form=None)
    max_new_tokens: Optional[int] = option(None, help=f"Canary: at most N tokens generated per input (1 to "
                                           f"{MAX_NEW_TOKENS}; default: the model's bounds alone)",
                                           parse=parse_positive_int, command=False, form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    max_piece_s: float = option(40.0, help="cut inputs longer than this at pauses (10-200 s)", parse=float,
                                command=False)
    detector: str = option("auto", help="the pause detector: auto, energy or silero", command=False, form=None)

    def __post_init__(self):
        from ..pauses import DETECTORS

        number("max_piece_s", self.max_piece_s, *MAX_PIECE_S, allow_none=False,
               why="seconds; Canary models are trained on utterances of up to 40 s")
        if self.detector not in DETECTORS:
            raise OptionValueError("detector", f"unknown pause detector {self.detector!r} (one of "
                                   f"{', '.join(DETECTORS)})")
        integer("max_generation_delta", self.max_generation_delta, -1, 1 << 16)
        positive_int("max_new_tokens", self.max_new_tokens, most=MAX_NEW_TOKENS,
                     why="the largest decoder position table accepted")
        positive_int("batch_size", self.batch_size, most=MAX_BATCH_SIZE)
        boolean("timestamps", self.timestamps)
        boolean("word_timestamps", self.word_timestamps)
        for name in ("pnc", "itn"):
            if getattr(self, name) is not None:
                boolean(name, getattr(self, name))
        for name in ("language", "target_language"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 16):
                raise OptionValueError(name, f"{name} must be a language code such as en or de, got {str(value)[:40]!r}")
        if self.task is not None and self.task not in TASKS:
            raise OptionValueError("task", f"task must be transcribe or translate, got {self.task!r}")
        positive_int("beam_size", self.beam_size, most=MAX_BEAM, why=WHY_BEAM)
        positive_int("nbest", self.nbest, most=MAX_BEAM, why=WHY_BEAM)
        number("length_penalty", self.length_penalty, 0.0, MAX_LENGTH_PENALTY)
        sample_rate(self.sample_rate)
        if (self.nbest or 1) > (self.beam_size or 1):
            size = self.beam_size or 1
            raise OptionValueError("nbest", f"nbest ({self.nbest}) cannot exceed beam_size ({size}): a beam of "
                                   f"{size} keeps {size} hypotheses")


MAX_WINDOW_S = 40.0  # a stream's window (chunk, left and right context together)


@dataclass(frozen=True)
class CanaryStreamOptions(CanaryOptions):
    """A live session over windows of the stream (transcribe/canary/streaming.py): chunk_s (seconds decided
    per window), left_s (context before), right_s (lookahead after), and transcribe's decoding options for
    every window (the session times words itself: word_timestamps and timestamps are its own)."""

    chunk_s: Optional[float] = option(None, help=f"seconds decided per window (above 0; with left_s and right_s at "
                                      f"most {MAX_WINDOW_S:g})", parse=float, command=False)
    left_s: Optional[float] = option(None, help="seconds of context before a window (0 or more)", parse=float,
                                     command=False)
    right_s: Optional[float] = option(None, help="seconds of lookahead after a window (0 or more)", parse=float,
                                      command=False)
    # transcribe()'s options that the command's --stream does not pass (it refuses their flags); the library's
    # stream() takes the decoding ones
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM})",
                                      parse=parse_positive_int, command=False)
    nbest: Optional[int] = option(None, help="(not for a stream)", parse=parse_positive_int, command=False, form=None)
    word_timestamps: bool = option(False, help="(a stream times every word itself)", command=False, form=None)

    def __post_init__(self):
        super().__post_init__()
        if self.nbest is not None:
            raise OptionValueError("nbest", "nbest does not apply to a stream (it commits one text)")
        number("chunk_s", self.chunk_s, 0.0, MAX_WINDOW_S, above=True)
        number("left_s", self.left_s, 0.0, MAX_WINDOW_S)
        number("right_s", self.right_s, 0.0, MAX_WINDOW_S)

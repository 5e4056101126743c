"""The options of a Granite Speech recognizer's `transcribe()` (`GraniteSpeechOptions`), declared once with how
the command and the server spell them (`transcribe.options`); a name another family also declares is spelled
as there. Checks that need the loaded model (a prompt its chat template can carry) are the recognizer's."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import (MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, boolean, number, option, parse_bool, parse_positive_int,
                       positive_int, sample_rate, text)

TASKS = ("transcribe", "translate")
MAX_LENGTH_PENALTY = 10.0
# At most this many generated tokens (the LM's position table, prompt included, is the real bound: 4,096 in
# the published models).
MAX_NEW_TOKENS = 1 << 16
# Pieces of a long input: the models are trained on utterances of up to about 30 s; the LM reads 10 audio
# embeddings a second, so its table holds far more.
MAX_PIECE_S = (10.0, 120.0)
MAX_INSTRUCTION = 2000  # characters


@dataclass(frozen=True)
class GraniteSpeechOptions:
    """task: "transcribe" (default) or "translate" (into target_language: the speech translation the model cards
    show, English speech into French, German, Spanish, Portuguese, Japanese; whether a model was trained for a
    pair is the model's business); instruction: the request after the audio in the user turn, replacing the
    task's (default: the model card's "can you transcribe the speech into a written format?"); timestamps: one
    segment over each input (the model emits no times); word_timestamps: not available (True is an error: the
    model gives no times and no alignment is implemented). Search: greedy (transformers' generate with
    num_beams=1), or transformers' beam search with beam_size N (nbest <= N hypotheses come back in
    `Transcript.nbest`; length_penalty its exponent, default 1.0); max_new_tokens caps the tokens generated
    per input (default: 16 a second of audio plus 64, within the LM's position table). Long inputs: cut at
    pauses (detector) into pieces of at most max_piece_s (default 30 s), decoded in batches and joined."""

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    timestamps: bool = option(True, help="segment times", command=False, form=None)
    target_language: Optional[str] = option(None, help="Granite Speech: the language --task translate translates "
                                            "into (e.g. fr, de)", metavar="LANG")
    task: Optional[str] = option(None, help="Granite Speech: transcribe (default) or translate (into "
                                 "--target-language)", choices=TASKS, form=None)
    instruction: Optional[str] = option(None, help="Granite Speech: the request after the audio (default: the "
                                        "model card's transcription request)", metavar="TEXT")
    word_timestamps: bool = option(False, help="time every word (json output; Parakeet models always give word "
                                   "times)", action="store_true", parse=parse_bool, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM}: "
                                      f"{WHY_BEAM})", parse=parse_positive_int, metavar="N")
    nbest: Optional[int] = option(None, help="return the N best hypotheses, ranked, in the json output "
                                  "(N <= --beam-size)", parse=parse_positive_int, metavar="N")
    length_penalty: Optional[float] = option(None, help="Granite Speech: transformers' beam length exponent "
                                             "(default 1.0)", parse=float, command=False)
    max_new_tokens: Optional[int] = option(None, help=f"Granite Speech: at most N tokens generated per input (1 to "
                                           f"{MAX_NEW_TOKENS})", parse=parse_positive_int, command=False, form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)
    max_piece_s: float = option(30.0, help="cut inputs longer than this at pauses (10-120 s)", parse=float,
                                command=False)
    detector: str = option("auto", help="the pause detector: auto, energy or silero", command=False, form=None)

    def __post_init__(self):
        from ..pauses import DETECTORS

        number("max_piece_s", self.max_piece_s, *MAX_PIECE_S, allow_none=False,
               why="seconds; Granite Speech models are trained on utterances of up to about 30 s")
        if self.detector not in DETECTORS:
            raise OptionValueError("detector", f"unknown pause detector {self.detector!r} (one of "
                                   f"{', '.join(DETECTORS)})")
        positive_int("batch_size", self.batch_size, most=MAX_BATCH_SIZE)
        positive_int("max_new_tokens", self.max_new_tokens, most=MAX_NEW_TOKENS)
        boolean("timestamps", self.timestamps)
        boolean("word_timestamps", self.word_timestamps)
        if self.word_timestamps:
            raise OptionValueError("word_timestamps", "Granite Speech models cannot time words here (the model "
                                   "gives no times and no alignment is implemented); a transcript has one "
                                   "segment per input")
        if self.task is not None and self.task not in TASKS:
            raise OptionValueError("task", f"task must be transcribe or translate, got {self.task!r}")
        value = self.target_language
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 16):
            raise OptionValueError("target_language", f"target_language must be a language code such as fr or de, "
                                   f"got {str(value)[:40]!r}")
        if self.task == "translate" and value is None:
            raise OptionValueError("target_language", "task translate needs target_language (e.g. fr)")
        if value is not None and self.task != "translate":
            raise OptionValueError("target_language", "target_language is the language of a translation: give "
                                   "task translate too (Granite Speech transcribes in the spoken language)")
        text("instruction", self.instruction, MAX_INSTRUCTION)
        if self.instruction is not None and not self.instruction.strip():
            raise OptionValueError("instruction", "instruction is empty")
        if self.instruction is not None and self.task == "translate":
            raise OptionValueError("instruction", "give either an instruction or task translate, not both (the "
                                   "instruction replaces the task's request)")
        positive_int("beam_size", self.beam_size, most=MAX_BEAM, why=WHY_BEAM)
        positive_int("nbest", self.nbest, most=MAX_BEAM, why=WHY_BEAM)
        number("length_penalty", self.length_penalty, 0.0, MAX_LENGTH_PENALTY)
        sample_rate(self.sample_rate)
        if (self.nbest or 1) > (self.beam_size or 1):
            size = self.beam_size or 1
            raise OptionValueError("nbest", f"nbest ({self.nbest}) cannot exceed beam_size ({size}): a beam of "
                                   f"{size} keeps {size} hypotheses")
        if self.length_penalty is not None and (self.beam_size or 1) == 1:
            raise OptionValueError("length_penalty", "length_penalty needs a beam search (beam_size 2 or more)")


MAX_PAUSE_S = 10.0


@dataclass(frozen=True)
class GraniteSpeechStreamOptions(GraniteSpeechOptions):
    """A live session cut at pauses (transcribe/utterances.py): pause_s (the silence that ends an utterance,
    default 0.5 s), partial_s (decode the open utterance every N seconds for the tentative text; default off),
    and transcribe's decoding options for every utterance (max_piece_s bounds an utterance without a pause)."""

    pause_s: Optional[float] = option(None, help="seconds of silence that end an utterance (default 0.5)",
                                      parse=float, command=False)
    partial_s: Optional[float] = option(None, help="decode the open utterance every N seconds for the tentative "
                                        "text (default: off)", parse=float, command=False)
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
        number("pause_s", self.pause_s, 0.05, MAX_PAUSE_S)
        number("partial_s", self.partial_s, 0.0, 60.0, above=True)

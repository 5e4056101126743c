"""The options of a Whisper recognizer's `transcribe()` (`WhisperOptions`) and `stream()`
(`WhisperStreamOptions`), declared once with how the command and the server spell them
(`transcribe.options`). Checks that need the loaded model (a language it knows, a task an English-only
model cannot do, alignment heads for word times) are the recognizer's."""
from __future__ import annotations

import argparse
import numbers
from dataclasses import dataclass
from typing import Optional, Sequence, Union

from ..errors import OptionValueError
from ..options import (MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, boolean, integer, number, option, parse_bool,
                       parse_positive_int, positive_int, sample_rate, text)

# openai-whisper's word-timing defaults: punctuation joined to the next word, and to the word before.
PREPEND_PUNCTUATION = "\"'“¿([{-"
APPEND_PUNCTUATION = "\"'.。,，!！?？:：”)]}、"
DEFAULT_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
TASKS = ("transcribe", "translate")
BATCHED_WINDOWS = 8  # windows decoded together by batched=True unless batch_size says

# The maxima of the sizes (said in the help texts; checked before any work); the beam's and best_of's are
# transcribe.options' MAX_BEAM (shared with Parakeet).
MAX_PATIENCE = 10.0  # finished candidates kept: round(beam_size * patience); 1-2 are usual
MAX_LENGTH_PENALTY = 2.0  # Google NMT's alpha: 0.6-1 are usual
MAX_TEMPERATURE = 10.0  # a schedule runs to 1.0; far above, sampling is uniform noise
MAX_TEMPERATURES = 21  # a schedule's steps (openai-whisper's has 6; 0 to 1 in steps of 0.05 has 21)
MAX_PROMPT_CHARS = 10000  # a window's prompt holds its last 223 tokens (about 1,000 characters) anyway
MAX_WINDOW_S = 30.0  # a stream's window (chunk, left and right context together; the stream checks the sum)


def parse_temperatures(s: str) -> tuple[float, ...]:
    """`--temperature T[,T...]` -> the temperatures."""
    try:
        values = tuple(float(x) for x in s.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid temperature list: {s!r}") from None
    if any(not (0.0 <= v <= MAX_TEMPERATURE) for v in values):
        raise argparse.ArgumentTypeError(f"temperatures must lie in [0, {MAX_TEMPERATURE:g}], got {s!r}")
    return values


def schedule(temps: Sequence[float], increment: float) -> tuple[float, ...]:
    """openai-whisper's fallback schedule: from T up to 1.0 in steps of `increment` (a list of more than
    one temperature, or no step, is the schedule as given)."""
    temps = tuple(temps)
    if len(temps) > 1 or increment <= 0:
        return temps
    out = [temps[0]]
    while out[-1] + increment <= 1.0 + 1e-6:
        out.append(round(out[-1] + increment, 6))
    return tuple(out)


@dataclass(frozen=True)
class WhisperOptions:
    """openai-whisper's `transcribe` options (see `WhisperASR._transcribe`), and:

    temperature: one temperature or the whole schedule (default openai-whisper's, 0 to 1 in steps of 0.2);
    temperature_increment: with one temperature T (or none, T = 0), the schedule runs from T up to 1.0 in
    these steps (the command's --temperature-increment; 0 turns fallback off). batched: cut each input at
    pauses into windows of at most 30 s and decode them together (no text carried between windows).
    batch_size: inputs in lockstep (sequential mode) or windows together (batched mode)."""

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    batched: bool = option(False, help="cut each input at pauses into windows of at most 30 s and decode them "
                           "together (faster on long audio; no text carried from one window to the next)",
                           action="store_true", parse=parse_bool, form=None)
    timestamps: bool = option(True, help="segment times", command=False, form=None)
    language: Optional[str] = option(None, help="language code of multilingual models (e.g. en, de)",
                                     metavar="LANG")
    task: str = option("transcribe", help="default: transcribe", choices=TASKS, form=None)
    condition_on_previous_text: bool = option(True, help="give each window the text before it as a prompt",
                                              parse=parse_bool, command=False)
    initial_prompt: Optional[str] = option(None, help="text that conditions the first window", metavar="TEXT",
                                           form="prompt")
    prefix: Optional[str] = option(None, help="text the first window's transcript starts with", command=False,
                                   form=None)
    no_speech_threshold: Optional[float] = option(0.6, help="no-speech probability above which a window is "
                                                  "silence", parse=float, command=False)
    logprob_threshold: Optional[float] = option(-1.0, help="average log-probability below which a window is "
                                                "decoded again", parse=float, command=False)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM}: "
                                      f"{WHY_BEAM})", parse=parse_positive_int, metavar="N")
    patience: Optional[float] = option(None, help=f"beam search patience (default: 1.0; above 0, at most "
                                       f"{MAX_PATIENCE:g})", parse=float, metavar="P")
    length_penalty: Optional[float] = option(None, help="beam length penalty (default: none, length-normalized; 0 "
                                             f"to {MAX_LENGTH_PENALTY:g})", parse=float, command=False)
    temperature: Union[float, Sequence[float], None] = option(
        None, help="sampling temperature; one value T falls back from T in steps of --temperature-increment up "
        "to 1.0, a list is the whole schedule (default: 0; each 0 to "
        f"{MAX_TEMPERATURE:g}, at most {MAX_TEMPERATURES} in a schedule)", parse=parse_temperatures, metavar="T[,T...]",
        form=None, implies=(("temperature_increment", 0.2),))
    temperature_increment: Optional[float] = option(
        None, help="fallback step after a failed window (default: 0.2; 0 turns fallback off; at most 1, "
        f"at least 1/{MAX_TEMPERATURES - 1} of the way to 1.0)", parse=float,
        metavar="D", form=None)
    best_of: int = option(5, help=f"samples per window at a temperature above 0 (at most {MAX_BEAM}: {WHY_BEAM})",
                          parse=int, command=False)
    compression_ratio_threshold: Optional[float] = option(2.4, help="compression ratio above which a window is "
                                                          "decoded again", parse=float, command=False)
    seed: Optional[int] = option(0, help="the sampling generator's seed", command=False, form=None)
    word_timestamps: bool = option(False, help="time every word (json output; Parakeet models always give word "
                                   "times)", action="store_true", parse=parse_bool, form=None)
    prepend_punctuations: str = option(PREPEND_PUNCTUATION, help="punctuation joined to the next word",
                                       command=False, form=None)
    append_punctuations: str = option(APPEND_PUNCTUATION, help="punctuation joined to the word before",
                                      command=False, form=None)
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)

    def __post_init__(self):
        if self.task not in TASKS:
            raise OptionValueError("task", f"task must be transcribe or translate, got {self.task!r}")
        positive_int("batch_size", self.batch_size, most=MAX_BATCH_SIZE)
        for name in ("batched", "timestamps", "condition_on_previous_text", "word_timestamps"):
            boolean(name, getattr(self, name))
        if self.batched and self.prefix:
            raise OptionValueError("prefix", "prefix forces the start of the first window of the sequential "
                                   "loop; batched=True has no first window to force it on (use initial_prompt)")
        for name in ("initial_prompt", "prefix"):  # text, or token ids
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):
                if len(value) > MAX_PROMPT_CHARS:
                    raise OptionValueError(name, f"{name} must be at most {MAX_PROMPT_CHARS} tokens, got {len(value)}")
            else:
                text(name, value, MAX_PROMPT_CHARS, why="a window's prompt holds its last 223 tokens")
        for name in ("prepend_punctuations", "append_punctuations"):
            text(name, getattr(self, name), 1000, allow_none=False)
        sample_rate(self.sample_rate)
        self._check_search()
        self._check_fallback()

    def _check_search(self) -> None:
        """The beam's and the sampler's sizes and weights."""
        positive_int("beam_size", self.beam_size, most=MAX_BEAM, why=WHY_BEAM)
        positive_int("best_of", self.best_of, allow_none=False, most=MAX_BEAM, why=WHY_BEAM)
        patience = number("patience", self.patience, 0.0, MAX_PATIENCE, above=True)
        if patience is not None and self.beam_size is not None and round(self.beam_size * patience) < 1:
            raise OptionValueError("patience", f"patience {patience:g} with beam_size {self.beam_size} keeps no "
                                   f"finished candidate (beam_size * patience rounds to 0)")
        number("length_penalty", self.length_penalty, 0.0, MAX_LENGTH_PENALTY)
        integer("seed", self.seed, 0, 2**63 - 1)

    def _check_fallback(self) -> None:
        """The temperatures, the fallback step and the thresholds that start a fallback."""
        t = self.temperature
        temps = [t] if t is None or isinstance(t, numbers.Real) else t
        if not isinstance(temps, (list, tuple)) or not temps:
            raise OptionValueError("temperature", "temperature must be a number or a non-empty list of numbers")
        if len(temps) > MAX_TEMPERATURES:
            raise OptionValueError("temperature", f"a temperature schedule has at most {MAX_TEMPERATURES} steps, got "
                                   f"{len(temps)}")
        for v in temps:
            number("temperature", v, 0.0, MAX_TEMPERATURE)
        step = number("temperature_increment", self.temperature_increment, 0.0, 1.0)
        if step and len(temps) == 1 and (1.0 - float(temps[0] or 0.0)) / step > MAX_TEMPERATURES - 1 + 1e-6:
            raise OptionValueError("temperature_increment", f"temperature_increment {step:g} makes a schedule of "
                                   f"more than {MAX_TEMPERATURES} temperatures (the most a schedule has)")
        number("no_speech_threshold", self.no_speech_threshold, 0.0, 1.0, why="a probability")
        number("logprob_threshold", self.logprob_threshold, None, 0.0, why="an average log-probability")
        number("compression_ratio_threshold", self.compression_ratio_threshold, 0.0, None, above=True)

    @property
    def temperatures(self) -> tuple[float, ...]:
        """The fallback schedule the options say."""
        t = self.temperature
        if t is None:
            return DEFAULT_TEMPERATURES if self.temperature_increment is None else \
                schedule((0.0,), self.temperature_increment)
        temps = (float(t),) if isinstance(t, numbers.Real) else tuple(float(x) for x in t)
        return temps if self.temperature_increment is None else schedule(temps, self.temperature_increment)

    @property
    def windows_at_once(self) -> int:
        """batch_size as given, or its default: 8 windows in batched mode, else 1 input at a time."""
        if self.batch_size is not None:
            return self.batch_size
        return BATCHED_WINDOWS if self.batched else 1


@dataclass(frozen=True)
class WhisperStreamOptions(WhisperOptions):
    """A live session over windows of the stream (transcribe/whisper/streaming.py): chunk_s (seconds
    decided per window), left_s (context before), right_s (lookahead after), and transcribe's decoding
    options for every window."""

    chunk_s: Optional[float] = option(None, help=f"seconds decided per window (above 0; with left_s and right_s at "
                                      f"most {MAX_WINDOW_S:g})", parse=float, command=False)
    # transcribe()'s options that the command's --stream does not pass (it refuses their flags); the
    # library's stream() takes the decoding ones
    batched: bool = option(False, help="(not for a stream)", parse=parse_bool, command=False, form=None)
    beam_size: Optional[int] = option(None, help=f"beam search with N beams (default: greedy; at most {MAX_BEAM})",
                                      parse=parse_positive_int, command=False)
    patience: Optional[float] = option(None, help=f"beam search patience (default: 1.0; at most {MAX_PATIENCE:g})",
                                       parse=float, command=False)
    temperature: Union[float, Sequence[float], None] = option(None, help="sampling temperature",
                                                              parse=parse_temperatures, command=False, form=None)
    temperature_increment: Optional[float] = option(None, help="fallback step after a failed window",
                                                    parse=float, command=False, form=None)
    word_timestamps: bool = option(False, help="(a stream times every word itself)", command=False, form=None)
    left_s: Optional[float] = option(None, help="seconds of context before a window (0 or more)", parse=float,
                                     command=False)
    right_s: Optional[float] = option(None, help="seconds of lookahead after a window (0 or more)", parse=float,
                                      command=False)

    def __post_init__(self):
        super().__post_init__()
        number("chunk_s", self.chunk_s, 0.0, MAX_WINDOW_S, above=True)
        number("left_s", self.left_s, 0.0, MAX_WINDOW_S)
        number("right_s", self.right_s, 0.0, MAX_WINDOW_S)

"""The options of a Voxtral Realtime recognizer's `transcribe()` (`VoxtralRealtimeOptions`) and `stream()`
(`VoxtralRealtimeStreamOptions`), declared once with how the command and the server spell them (`transcribe.options`);
a name another family also declares is spelled as there (batch_size, timestamps, word_timestamps, sample_rate)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import OptionValueError
from ..options import MAX_BATCH_SIZE, boolean, number, option, parse_bool, positive_int, sample_rate

# mistral-common's range of transcription delays the published model is trained for: multiples of 80 ms from 80 to
# 1200, and 2400 (its model card); other multiples of 80 ms up to 2400 are taken too (the model conditions on any).
MIN_DELAY_MS, MAX_DELAY_MS, DELAY_STEP_MS = 80.0, 2400.0, 80.0


def check_delay(value) -> None:
    number("delay_ms", value, MIN_DELAY_MS, MAX_DELAY_MS, why="milliseconds of audio the text runs behind")
    if value is not None and abs(value / DELAY_STEP_MS - round(value / DELAY_STEP_MS)) > 1e-9:
        raise OptionValueError("delay_ms", f"delay_ms must be a multiple of {DELAY_STEP_MS:g} ms (one text token's "
                               f"audio), got {value:g}")


_DELAY_HELP = (f"Voxtral Realtime: how far the text runs behind the audio, in ms (a multiple of 80 from "
               f"{MIN_DELAY_MS:g} to {MAX_DELAY_MS:g}; default: the model's, 480)")


@dataclass(frozen=True)
class VoxtralRealtimeOptions:
    """delay_ms: the transcription delay the model is conditioned on (tekken.json's transcription_delay_ms by
    default): the prompt's delay tokens, the time embedding of every layer, and the right padding. timestamps: one
    segment over each input; word_timestamps: each word at the position the model emitted its first token, less
    the delay (the model's own alignment of text to audio, 80 ms steps). Search: greedy (transformers' generate:
    one token per 80 ms of audio, in lockstep with it; beam search is not offered, see the recognizer). Inputs of
    any length are decoded whole: the encoder and the LM attend within sliding windows, so memory and cost per
    second stay bounded. batch_size: accepted, the inputs are decoded one after another."""

    batch_size: Optional[int] = option(None, help="inputs decoded together", command=False, form=None)
    timestamps: bool = option(True, help="segment times", command=False, form=None)
    word_timestamps: bool = option(False, help="time every word (json output; Parakeet models always give word "
                                   "times)", action="store_true", parse=parse_bool, form=None)
    delay_ms: Optional[float] = option(None, help=_DELAY_HELP, parse=float, metavar="MS")
    sample_rate: Optional[int] = option(None, help="the rate of array inputs", command=False, form=None)

    def __post_init__(self):
        positive_int("batch_size", self.batch_size, most=MAX_BATCH_SIZE)
        boolean("timestamps", self.timestamps)
        boolean("word_timestamps", self.word_timestamps)
        check_delay(self.delay_ms)
        sample_rate(self.sample_rate)


@dataclass(frozen=True)
class VoxtralRealtimeStreamOptions:
    """A live session through the model's own streaming path (transformers' streaming generate): delay_ms as
    for transcribe()."""

    delay_ms: Optional[float] = option(None, help=_DELAY_HELP, parse=float, metavar="MS")

    def __post_init__(self):
        check_delay(self.delay_ms)

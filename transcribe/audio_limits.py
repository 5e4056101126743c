"""The limits every audio input is held to (issue 36): sample rates, sample magnitudes, and the decoded
duration a process accepts when its caller gives none. A limit passed raises AudioLimitError, after which
no other decoder is tried. No numpy at import: the options and the command's --help take the bounds."""
from __future__ import annotations

import math
import numbers
from typing import Optional

from .errors import AudioError

# Sample rates accepted, of a file, an array or a stream, and as a target (Hz). Below 1 kHz no
# speech survives (narrow-band telephony, the lowest rate speech is recorded at, is 8 kHz), and a header
# that says 1 Hz is a damaged or hostile file whose resampling would multiply it x16,000 in memory;
# 768 kHz is the highest rate any recorder, interface or PCM format in use offers (DXD-class studio
# PCM is 352.8/384 kHz, the top DACs 768 kHz): a header beyond it is not a recording.
MIN_RATE = 1_000
MAX_RATE = 768_000

# The largest |sample| accepted (after integer formats are scaled to [-1, 1)): 2**24. Floating-point
# audio is nominally in [-1, 1]; a float array of unscaled int16 or int24 PCM (a common slip) is at most
# 2**24, the largest integer float32 holds exactly, and still decodes: Parakeet's features are
# normalized (its text on such input is unchanged even at 1e12), Whisper's are not (its text degrades
# from about 100x full scale on) but it runs. Beyond 2**24 a sample is in no audio scale (unscaled int32
# PCM: scale it), and from about 1e17 the power spectra overflow float32: Whisper failed in its sampling
# (inf/nan probabilities, not a TranscribeError), Parakeet emitted noise tokens. Refused at load time.
MAX_AMPLITUDE = float(1 << 24)

# The default limit on decoded audio, in seconds, for `load_audio` calls that give none (None: no
# limit). The library, the CLI and the API leave it unset: a user transcribes long files on purpose,
# and decoding costs memory linear in the duration (4 bytes a sample at the target rate, no more).
# A server sets it once at start-up (`set_max_audio_seconds`), so that one small upload that decodes
# to hours of audio is refused before or while it decodes, not after filling memory.
_max_seconds: Optional[float] = None


class AudioLimitError(AudioError):
    """Audio refused by a limit (duration, rate, amplitude): no other decoder is tried. No numpy at import: the options and the command's --help take the bounds."""


def set_max_audio_seconds(seconds: Optional[float]) -> None:
    """Sets the process-wide limit on decoded audio that `load_audio` applies when its caller gives
    none (None or inf: no limit, the default). A server calls it once, at start-up."""
    global _max_seconds
    _max_seconds = positive_seconds(seconds)


def max_seconds_or_default(seconds) -> Optional[float]:
    """The limit a call applies: its own `seconds` (checked), or the process's default when None."""
    return _max_seconds if seconds is None else positive_seconds(seconds)


def positive_seconds(seconds) -> Optional[float]:
    if seconds is None or seconds == float("inf"):  # inf: no limit, as None
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) \
            or not math.isfinite(seconds) or seconds <= 0:
        raise AudioError(f"max_seconds must be a positive number of seconds or None, got {seconds!r}")
    return float(seconds)


def check_rate(rate, name: str) -> None:
    """An AudioLimitError unless `rate` (Hz) is within [MIN_RATE, MAX_RATE]."""
    if not (MIN_RATE <= rate <= MAX_RATE):
        shown = f"{int(rate):,}" if float(rate).is_integer() else f"{rate:g}"
        raise AudioLimitError(f"{name}: a sample rate of {shown} Hz is outside the rates accepted "
                              f"({MIN_RATE:,} to {MAX_RATE:,} Hz)")


_CHECK_BLOCK = 1 << 20  # samples


def check_samples(x, name: str) -> None:
    """An AudioError for NaN or infinite samples, an AudioLimitError for one beyond MAX_AMPLITUDE."""
    if x.size == 0:
        return
    import numpy as np

    # block by block: no temporary as large as the audio (an hour at 16 kHz is 230 MB); NaN propagates through max
    flat = x.reshape(-1)
    peak = float(np.max([np.max(np.abs(flat[i:i + _CHECK_BLOCK])) for i in range(0, flat.size, _CHECK_BLOCK)]))
    if not math.isfinite(peak):
        raise AudioError(f"{name}: contains NaN or infinite samples")
    if peak > MAX_AMPLITUDE:
        raise AudioLimitError(f"{name}: a sample of magnitude {peak:.3g} is beyond the largest accepted "
                              f"({MAX_AMPLITUDE:,.0f}): floating-point audio is expected in [-1, 1]")


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.2f} s"
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def too_long(name: str, limit: float, seconds: Optional[float] = None, what: str = "declares") -> AudioLimitError:
    """The error for audio over `limit` seconds: `what` (its header, an array) says `seconds` of it, or
    (seconds None) decoding passed the limit and stopped there."""
    if seconds is None:
        return AudioLimitError(f"{name}: longer than the limit of {_duration(limit)} of audio (decoding stopped there)")
    return AudioLimitError(f"{name}: {what} {_duration(seconds)} of audio, over the limit of {_duration(limit)}")



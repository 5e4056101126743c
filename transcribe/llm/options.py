"""The option checks every audio-LLM family's `transcribe()` options share (each family declares its fields in its
own options.py and calls `check_search` from its `__post_init__`, then checks its own)."""
from __future__ import annotations

from ..errors import OptionValueError
from ..options import MAX_BATCH_SIZE, MAX_BEAM, WHY_BEAM, boolean, number, positive_int, sample_rate


def check_search(opts, *, piece_s: tuple[float, float], piece_why: str, max_new_tokens: int,
                 max_length_penalty: float, no_words: str) -> None:
    """batch_size, max_piece_s (within `piece_s`; `piece_why` says why), detector, max_new_tokens (at most
    `max_new_tokens`), beam_size, nbest (at most beam_size), length_penalty, timestamps, word_timestamps (refused
    when true: `no_words` says why) and sample_rate of `opts`."""
    from ..pauses import DETECTORS

    number("max_piece_s", opts.max_piece_s, *piece_s, allow_none=False, why=piece_why)
    if opts.detector not in DETECTORS:
        raise OptionValueError("detector", f"unknown pause detector {opts.detector!r} (one of {', '.join(DETECTORS)})")
    positive_int("batch_size", opts.batch_size, most=MAX_BATCH_SIZE)
    positive_int("max_new_tokens", opts.max_new_tokens, most=max_new_tokens)
    positive_int("beam_size", opts.beam_size, most=MAX_BEAM, why=WHY_BEAM)
    positive_int("nbest", opts.nbest, most=MAX_BEAM, why=WHY_BEAM)
    number("length_penalty", opts.length_penalty, 0.0, max_length_penalty)
    boolean("timestamps", opts.timestamps)
    boolean("word_timestamps", opts.word_timestamps)
    if opts.word_timestamps:
        raise OptionValueError("word_timestamps", no_words)
    sample_rate(opts.sample_rate)
    if (opts.nbest or 1) > (opts.beam_size or 1):
        size = opts.beam_size or 1
        raise OptionValueError("nbest", f"nbest ({opts.nbest}) cannot exceed beam_size ({size}): a beam of {size} "
                               f"keeps {size} hypotheses")

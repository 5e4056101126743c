"""Incremental detokenization: text as tokens arrive, equal to decoding them all at once.

A tokenizer's `decode` is not a sum of per-token texts: SentencePiece drops the word mark of the
first piece only, and byte pieces (`<0xE2>`, Whisper's byte-level BPE) make a character only
together. `IncrementalText` decodes a short window of the last tokens with the new ones and hands
out what the window's own text does not already cover, so the cost of a call does not grow with
the stream, and the concatenation of everything it hands out is `decode(all ids)`.
"""
from __future__ import annotations

from typing import Callable, Sequence

_REPLACEMENT = "\ufffd"  # what a decoder shows for an incomplete UTF-8 sequence


class IncrementalText:
    """`add(ids)` -> the new text; `"".join(all returned) == decode(all ids)`.

    context: tokens kept before the new ones so that spacing rules that look one token back
    (SentencePiece's leading word mark) decode as they would in the full sequence. Text that ends
    in an incomplete multi-byte character is held back until the character is complete (at most
    `max_pending` tokens, then it is handed out as the decoder shows it).
    """

    def __init__(self, decode: Callable[[list[int]], str], context: int = 4, max_pending: int = 8):
        self._decode = decode
        self._context = context
        self._max_pending = max_pending
        self._window: list[int] = []  # context tokens already handed out + pending ones
        self._done = 0  # how many of _window are already handed out
        self._done_text = ""  # decode(_window[:_done])

    def add(self, ids: Sequence[int]) -> str:
        if not len(ids):
            return ""
        self._window.extend(int(i) for i in ids)
        full = self._decode(self._window)
        held: list[int] = []
        if full.endswith(_REPLACEMENT):
            # Hold back the trailing tokens of an incomplete character (a few at most).
            pending = len(self._window) - self._done
            for k in range(1, min(pending, self._max_pending) + 1):
                text = self._decode(self._window[:-k])
                if not text.endswith(_REPLACEMENT):
                    held = self._window[-k:]
                    self._window = self._window[:-k]
                    full = text
                    break
        if full.startswith(self._done_text):
            new = full[len(self._done_text):]
        else:  # a decoder whose text for a prefix is not a prefix of the whole: hand out the difference
            k = 0
            while k < min(len(full), len(self._done_text)) and full[k] == self._done_text[k]:
                k += 1
            new = full[k:]
        keep = self._window[-self._context:] if self._context else []
        text = self._decode(keep) if keep else ""
        while keep and text.startswith(_REPLACEMENT):  # a window must not start inside a character
            keep = keep[1:]
            text = self._decode(keep) if keep else ""
        self._window = keep + held
        self._done = len(keep)
        self._done_text = text
        return new

    def flush(self) -> str:
        """Hands out held-back text (an incomplete character at the end of the stream) and starts over."""
        out = ""
        if len(self._window) > self._done:
            full = self._decode(self._window)
            out = full[len(self._done_text):] if full.startswith(self._done_text) else full
        self.reset()
        return out

    def reset(self) -> None:
        self._window = []
        self._done = 0
        self._done_text = ""

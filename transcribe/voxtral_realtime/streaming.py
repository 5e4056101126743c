"""A live Voxtral Realtime session: the model's own streaming path (transformers' streaming generate over its
processor's chunks, as its documentation runs it), on the shared `StreamingSession` contract.

Audio goes in as it comes (`feed`, any length, any cut); the mel frames come out one token's group (80 ms) at a
time once the samples their windows read have arrived (`frontend.StreamMel`: the first group is the prompt's,
left pad + delay + 1 tokens, as the processor's first chunk); each group runs through the convolution stem with
its carried frames and the encoder with its sliding-window cache (`decode.Run.audio_rows`), and the LM chooses one
token per group with its own cache. `finalize()` adds the right padding (delay + 1 + 10 tokens of silence) the
offline request adds, and decodes the groups it completes, stopping where transformers' streaming example stops
(its last chunk must end strictly inside the padded audio). A stop token ends the stream's text.

Every chosen token is final (the model never revises it): the text is all committed, the tentative text always
empty. The committed audio is what lies `delay` tokens behind the last decision: `latency.lookahead_ms` is the
delay (plus the 10 ms the processor's chunks read past their last frame). Tokens and words carry the 80 ms step
the model placed them at (`recognizer.token_frame`). Each step costs the same however long the stream has run:
the caches are sliding windows, the front end keeps a few windows of samples. The tokens equal transformers'
streaming generate on the same audio however it is cut into pieces."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ..runtime import model_call
from ..streaming import CommitToken, StreamingSession
from .decode import LiveDecoder, Step
from .frontend import StreamMel


class VoxtralRealtimeSession(StreamingSession):
    def __init__(self, asr, delay_ms: Optional[float] = None):
        self._asr = asr
        self.delay_ms, self.delay_tokens = asr.delay(delay_ms)
        layout = asr.config.layout
        frame_s = asr.frame_s
        super().__init__(decode=asr.decode_ids, piece=asr.piece, punctuation=set(asr.punctuation),
                         frame_seconds=lambda f: f * frame_s, chunk_ms=1000.0 * frame_s,
                         lookahead_ms=self.delay_ms + 1000.0 * asr.config.features.hop / asr.sample_rate)
        self._right_pad = layout.samples_per_token * layout.right_pad_tokens(self.delay_ms)
        self._start()

    def _start(self) -> None:
        asr = self._asr
        run = asr.new_run(self.delay_tokens)
        front = StreamMel(asr.frontend, asr.config.layout, len(run.prompt))
        self._live = LiveDecoder(run, front, self._right_pad)

    @property
    def run(self):
        """The decoding state (its `steps`: every token chosen so far, pads and special tokens included)."""
        return self._live.run

    @property
    def token_ids(self) -> list[int]:
        """Every token chosen so far, as transformers' generate returns them after the prompt."""
        return self._live.run.ids

    def _token(self, i: int):
        # the base marks a word's first token with a space before its decoded text, which tekken's decoding of a
        # word's first token already starts with
        t = super()._token(i)
        if t.text.startswith("  "):
            t = replace(t, text=t.text[1:])
        return t

    # -- StreamingSession hooks
    def _accept(self, samples) -> None:
        with model_call(self._asr.threads):
            self._decided(self._live.feed(samples))

    def _flush(self) -> None:
        with model_call(self._asr.threads):
            self._decided(self._live.finish())

    def _restart(self) -> None:
        self._start()

    def _decided(self, steps: list[Step]) -> None:
        asr = self._asr
        special = asr.tokenizer.special
        out = []
        for s in steps:
            if s.id in special:
                continue
            frame = asr.token_frame(s.position, self.delay_tokens)
            out.append(CommitToken(s.id, frame, frame + 1, frame, None, float(2.718281828459045 ** s.logprob)))
        run = self._live.run
        done = max(0, run.position - asr.config.layout.left_pad_tokens - self.delay_tokens) * asr.frame_s
        self._commit(out, committed_seconds=min(done, self._received / 16000.0))

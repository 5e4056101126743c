"""A live Kyutai STT session on the shared `StreamingSession` contract, in lockstep with the audio.

Audio goes in as it comes (`feed`: 16 kHz, any length, any cut); it is resampled to 24 kHz as it streams (soxr, the
quality `transcribe.audio` reads files with, so the samples equal a file's), preceded by the processor's silence
prefix; each whole 80 ms frame is encoded as it completes (`decode.Decoder`: the codec's causal convolutions and
sliding-window transformer carry their state) and the LM chooses one token per frame. `finalize()` adds the
processor's padding after the audio (delay + 1 s of silence) and decodes as many positions as transformers'
generate decodes on the whole padded input. The tokens equal `transcribe()` on the same audio.

Every chosen token is final: the text is all committed, the tentative text always empty. What the model has decided
runs `delay` behind the audio (`latency.lookahead_ms`). Each frame costs the same however long the stream has run:
the codec and the LM keep sliding windows, the resampler and the pending samples less than a frame."""
from __future__ import annotations

import math

import numpy as np

from ..audio import RESAMPLE_QUALITY
from ..runtime import model_call
from ..streaming import SAMPLE_RATE, CommitToken, StreamingSession
from .config import SAMPLE_RATE as MODEL_RATE
from .decode import Decoder, Step


class KyutaiSession(StreamingSession):
    def __init__(self, asr):
        self._asr = asr
        super().__init__(decode=asr.decode_ids, piece=asr.piece, punctuation=set(asr.punctuation),
                         frame_seconds=asr.frame_seconds, chunk_ms=1000.0 * asr.frame_s,
                         lookahead_ms=1000.0 * asr.config.delay_s)
        self._start()

    def _start(self) -> None:
        import soxr

        self._to24 = soxr.ResampleStream(SAMPLE_RATE, MODEL_RATE, 1, dtype="float32", quality=RESAMPLE_QUALITY)
        self._dec = Decoder(self._asr.model)
        self._samples = 0  # padded samples pushed
        self._push(np.zeros(self._asr.config.prefix_samples(), np.float32))

    @property
    def decoder(self) -> Decoder:
        return self._dec

    @property
    def token_ids(self) -> list[int]:
        """Every token chosen so far, as transformers' generate returns them after the initial one."""
        return [s.id for s in self._dec.steps]

    def _push(self, samples: np.ndarray) -> None:
        samples = np.asarray(samples, np.float32).reshape(-1)
        self._samples += samples.size
        self._dec.push(samples)

    # -- StreamingSession hooks
    def _accept(self, samples) -> None:
        with model_call(self._asr.threads):
            self._push(self._to24.resample_chunk(np.asarray(samples, np.float32), last=False))
            self._decided(self._dec.run())

    def _flush(self) -> None:
        with model_call(self._asr.threads):
            self._push(self._to24.resample_chunk(np.zeros(0, np.float32), last=True))
            self._push(np.zeros(self._asr.config.suffix_samples(), np.float32))
            n = self._samples // self._dec.frame
            self._decided(self._dec.run(n - 1) if n > 0 else [])

    def _restart(self) -> None:
        self._start()

    def _decided(self, steps: list[Step]) -> None:
        asr = self._asr
        out = []
        for s in steps:
            if s.id in asr.not_text:
                continue
            frame = asr.token_frame(s.position)
            out.append(CommitToken(s.id, frame, frame + 1, frame, None, math.exp(s.logprob)))
        done = asr.frame_seconds(asr.token_frame(self._dec.position))
        self._commit(out, committed_seconds=min(done, self._received / SAMPLE_RATE))

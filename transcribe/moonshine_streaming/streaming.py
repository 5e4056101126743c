"""A live Moonshine Streaming session on the shared `StreamingSession` contract: the model's streaming path (as
transcribe.cpp runs it; transformers has no streaming generate), the encoder run on audio as it comes.

The encoder is streaming by construction: causal convolutions, no positions, and sliding windows, so an encoder
frame (20 ms) depends only on the front-end frames from `left_context` before it (90 in the published windows)
to `lookahead` after it (12: 240 ms). After each `feed`, the frames whose lookahead has arrived are final: the
incremental encoder (`stream_encoder`: every front-end frame and every layer's output computed once) makes them,
and their adapted states (learned position by frame number) and every decoder layer's cross-attention keys and
values are appended. Every `decode_every_ms` of new final frames, the decoder
decodes the segment's text greedily from the start over the frames so far: that text is tentative (it may
change as audio comes). A segment ends after `segment_s` seconds, at the quietest 20 ms block of its last 2 s,
or at `finalize()`: its last frames are encoded with the audio padded to whole 5 ms frames, its text decoded
over the whole segment (what an offline call on that audio gives) and committed, and a new segment starts with
the audio after the cut. So the text is committed segment by segment, and never changes once committed.

Cost per feed is bounded however long the stream: the encoder keeps a few frames of each layer's input (its
window), the keys and values and the audio kept are those of one segment (at most `segment_s`), and a decode
reads at most that (a decode re-runs from the segment's start: its cost grows with the segment's text, up to
`segment_s`; `decode_every_ms` spaces them). The partial and final texts equal the reference path's
(tools/moonshine_streaming_reference.py) on the same audio cut into the same chunks."""
from __future__ import annotations

import math

import numpy as np
import torch

from ..modules import kv_append
from ..runtime import model_call
from ..streaming import CommitToken, StreamingSession
from .model import DecoderState
from .options import TOKENS_PER_S
from .stream_encoder import StreamEncoder

# Convolution history: an encoder frame's front end reads 5 ms frames 12 back (two stride-2 kernels of 5), so
# the first three front-end frames of a window that does not start the segment are not the segment's.
CONV_HISTORY = 3
# A segment is cut at the quietest block of its last this many seconds.
CUT_TAIL_S = 2.0


class MoonshineStreamingSession(StreamingSession):
    def __init__(self, asr, decode_every_ms: float = 240.0, segment_s: float = 20.0):
        self._asr = asr
        c = asr.config.encoder
        self._frame_len = c.frame_len
        self._enc_samples = asr.model.frame_samples
        self._left = c.left_context
        self._ahead = c.lookahead
        self._every = max(1, int(round(decode_every_ms / (1000.0 * asr.frame_s))))
        # a segment never outgrows the adapter's position table
        most = (asr.max_frames - 1) * self._enc_samples
        self._seg_len = min(int(round(segment_s * asr.sample_rate)), most)
        super().__init__(decode=asr.decode_ids, piece=asr.piece, punctuation=set(asr.punctuation),
                         frame_seconds=lambda f: f * asr.frame_s, chunk_ms=1000.0 * asr.frame_s,
                         lookahead_ms=1000.0 * asr.frame_s * self._ahead)
        self._start_stream()

    # -- state
    def _start_stream(self) -> None:
        self._seg_start = 0                        # the segment's first sample, from the stream's start
        self.decodes = 0                           # partial decodes so far
        self.last_partial: list = []               # the token ids of the last partial decode
        self._new_segment()

    def _new_segment(self) -> None:
        asr = self._asr
        self._encoder = StreamEncoder(asr.model.encoder, asr.device, asr._dtype())
        self._fed = 0                              # samples of the segment given to the encoder
        self._pcm = np.zeros(0, np.float32)        # the segment's audio
        self._emitted = 0                          # final encoder frames of the segment
        self._decoded = 0                          # frames the last partial decode read
        self._cross_held: list = []                # per decoder layer (keys, values) buffers of the final frames
        self._draft: list = []                     # the segment's last partial ids: the next decode's draft

    @property
    def cache_frames(self) -> int:
        """Encoder frames whose keys and values the session holds (the current segment's)."""
        return self._emitted

    @property
    def encoder_frames(self) -> int:
        """Frames the incremental encoder holds (convolution inputs and each layer's window)."""
        return self._encoder.held_frames

    @property
    def held_samples(self) -> int:
        """Samples of audio the session holds (the current segment's)."""
        return int(self._pcm.size)

    # -- StreamingSession hooks
    def _accept(self, samples) -> None:
        with model_call(self._asr.threads), torch.inference_mode():
            self._pcm = np.concatenate([self._pcm, np.asarray(samples, np.float32)])
            while self._pcm.size >= self._seg_len:
                cut = self._quiet_cut(self._pcm[:self._seg_len])
                rest = self._pcm[cut:]
                self._pcm = self._pcm[:cut]
                # frames that read audio past the cut (their lookahead) are encoded again without it
                keep = max(0, min(self._emitted, cut // self._enc_samples - self._ahead))
                self._emitted = keep
                self._end_segment()
                self._pcm = rest
            self._advance(final=False)
            if self._emitted - self._decoded >= self._every and self._emitted > 0:
                ids = self._asr.greedy(self._state(), self._bound(self._emitted * self._enc_samples),
                                       draft=self._draft).ids
                self._draft = ids
                self._decoded = self._emitted
                self.decodes += 1
                self.last_partial = ids
                self._set_tentative(self._asr.decode_ids(ids))

    def _flush(self) -> None:
        with model_call(self._asr.threads), torch.inference_mode():
            if self._pcm.size:
                self._end_segment()

    def _restart(self) -> None:
        self._start_stream()

    # -- the segment
    def _bound(self, samples: int) -> int:
        return max(1, math.ceil(TOKENS_PER_S * samples / self._asr.sample_rate))

    def _quiet_cut(self, seg: np.ndarray) -> int:
        """The start of the quietest 20 ms block (sum of squares on the segment's 320-sample grid) of its last 2 s."""
        e = self._enc_samples
        blocks = seg.size // e
        first = max(0, blocks - int(round(CUT_TAIL_S * self._asr.sample_rate / e)))
        tail = seg[first * e:blocks * e].astype(np.float64).reshape(-1, e)
        return (first + int(np.argmin((tail ** 2).sum(axis=1)))) * e

    def _state(self) -> DecoderState:
        n = self._emitted  # the buffers' first n frames are the segment's final ones
        return DecoderState([(k[:, :, :n], v[:, :, :n]) for k, v in self._cross_held])

    def _advance(self, final: bool) -> None:
        """Encodes the segment's frames that became final (all of them when `final`: the audio zero-padded to
        whole 5 ms frames) and appends their cross-attention keys and values. As the audio comes, the incremental
        encoder (`stream_encoder`) makes them; at the segment's end, a window of its audio from the first frame
        not yet made (less the frames' context) is encoded whole."""
        if not final:
            new = self._encoder.feed(self._pcm[self._fed:])
            self._fed = self._pcm.size
            if new.shape[1]:
                self._append(new)
            return
        asr = self._asr
        fl = self._frame_len
        pcm = self._pcm
        if final and pcm.size % fl:
            pcm = np.concatenate([pcm, np.zeros(fl - pcm.size % fl, np.float32)])
        frames = pcm.size // fl
        avail = -(-frames // 4)
        stable = avail if final else max(0, avail - self._ahead)
        if stable <= self._emitted:
            return
        first = max(0, self._emitted - self._left - CONV_HISTORY)
        x = torch.from_numpy(np.ascontiguousarray(pcm[first * self._enc_samples:frames * fl]))[None]
        enc = asr.model.encoder(x.to(asr.device, asr._dtype()))
        self._append(enc[:, self._emitted - first:stable - first])

    def _append(self, new: torch.Tensor) -> None:
        """Final encoder frames (the next of the segment) -> their cross-attention keys and values, appended."""
        d = self._asr.model.decoder
        kv = d.cross_kv(d.adapt(new, self._emitted))
        held = self._cross_held or [None] * len(kv)
        for i, (k, v) in enumerate(kv):  # written into buffers that grow by doubling (no copy of the whole cache)
            held[i] = kv_append(held[i], self._emitted, k, v)[0]
        self._cross_held = held
        self._emitted += int(new.shape[1])

    def _end_segment(self) -> None:
        """Decodes the whole segment (its audio is `self._pcm`), commits its text, starts the next segment."""
        asr = self._asr
        n = self._pcm.size
        self._advance(final=True)
        ids = asr.greedy(self._state(), self._bound(n), draft=self._draft).ids if self._emitted else []
        first = self._seg_start // self._enc_samples
        last = (self._seg_start + n + self._enc_samples - 1) // self._enc_samples
        self._set_tentative("")
        self._commit([CommitToken(int(i), first, last, first) for i in ids],
                     committed_seconds=(self._seg_start + n) / asr.sample_rate)
        self._seg_start += n
        self._new_segment()

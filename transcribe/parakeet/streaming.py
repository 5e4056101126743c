"""Live transcription with a cache-aware streaming Parakeet model (`CacheAwareSession`).

Raw PCM of any length goes in; the log-mel features are computed as the samples arrive
(`LiveMelFeatures`), cut into NeMo's chunks (`cache_aware.Chunker`), run through the encoder one
chunk at a time with its caches (`cache_aware.stream_step`) and decoded greedily across chunks
(`search.stream_greedy`). Every step costs the same however long the stream has run: the caches
have fixed sizes, the decoders carry only their last state, text and words are built
incrementally (`StreamingSession`).

Exactness: the tokens equal NeMo's `conformer_stream_step` over `CacheAwareStreamingAudioBuffer`
for the same audio (with `eou_reset=False`; NeMo never resets its decoder), however the audio is
cut into pieces. Two NeMo habits are kept so that they agree: the whole-signal features NeMo
streams include the centred STFT's last frame, which lies past the valid length and is set to 0;
it is streamed as a last zero frame at `finalize()`. NeMo's buffer drops a last chunk shorter
than the subsampling factor (up to 70 ms); we run it (`drop_short_tail=True` drops it as NeMo).

End of utterance: a model whose vocabulary has `<EOU>` / `<EOB>` emits them as tokens; they
become events (not text). After `<EOU>` the decoder starts over (`eou_reset=True`, as
parakeet.cpp does); the encoder's caches are never reset by an event.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from ..errors import OptionsNotTaken, TranscribeError
from ..options import names as option_names
from ..runtime import model_call
from ..search import stream_greedy
from ..streaming import CommitToken, StreamingSession
from . import cache_aware
from ..nemo.live_features import LiveMelFeatures
from .options import BUFFERED_ONLY, CACHE_AWARE_ONLY, ParakeetStreamOptions

EVENT_PIECES = {"<EOU>": "eou", "<EOB>": "eob"}

# `asr` below is a ParakeetASR (parakeet.recognizer), which imports this module: named, not imported.


def event_tokens(pieces: Sequence[str]) -> dict[int, str]:
    """Token id -> event type for a vocabulary's end-of-utterance / backchannel pieces."""
    return {i: EVENT_PIECES[p] for i, p in enumerate(pieces) if p in EVENT_PIECES}


def is_cache_aware(asr) -> bool:
    return cache_aware.check_streaming(asr.model.encoder) is None


class CacheAwareSession(StreamingSession):
    """A live stream through a cache-aware streaming Parakeet model (see the module docstring).

    att_context_size: the lookahead, one of the model's `[left, right]` choices (default: the
    model's first); e.g. [70, 13] = 1120 ms chunks, [70, 1] = 160 ms.
    head: "tdt"/"rnnt" or "ctc" (a hybrid's auxiliary head). confidence: "entropy" or "max_prob".
    language: for a model with a language prompt (Nemotron 3.5 ASR): a locale of its prompt
    dictionary or "auto" (the default, as its offline transcription), applied to every chunk's
    encoder output (NeMo's `set_inference_prompt` + `conformer_stream_step`).
    """

    def __init__(
        self,
        asr,
        *,
        att_context_size: Optional[Sequence[int]] = None,
        head: Optional[str] = None,
        eou_reset: bool = True,
        confidence: str = "entropy",
        drop_short_tail: bool = False,
        language=None,
    ):
        m = asr.model
        self._language = None
        if m.prompt_kernel is not None:
            try:
                self._language = m.prompt_index("auto" if language is None else language)
            except ValueError as e:
                raise TranscribeError(f"{asr.name}: {e}") from None
        elif language is not None:
            raise NoLanguagePrompt(asr.name, asr.kind, ["language"])
        try:
            self._sched = cache_aware.schedule(m.encoder, att_context_size)
        except ValueError as e:
            raise TranscribeError(f"{asr.name}: {e}") from None
        try:
            self._features = LiveMelFeatures(m.preprocessor)
        except ValueError as e:
            raise TranscribeError(f"{asr.name}: cannot stream: {e}") from None
        self._asr = asr
        self._head = asr._resolve_head(head)
        self._confidence = confidence
        self._eou_reset = bool(eou_reset)
        self._drop_short_tail = bool(drop_short_tail)
        self._special = event_tokens(asr.tokenizer.pieces)
        self._reset_ids = frozenset(i for i, k in self._special.items() if k == "eou") if eou_reset else frozenset()
        self._steps = asr.transducer_steps() if self._head != "ctc" else None
        frame_ms = 1000.0 * m.frame_seconds(1)
        la = self._sched.att_context_size[1]
        super().__init__(
            decode=asr.tokenizer.decode, piece=asr.tokenizer.piece, punctuation=asr.punctuation,
            frame_seconds=m.frame_seconds, chunk_ms=(la + 1) * frame_ms, lookahead_ms=la * frame_ms,
            special=self._special,
        )
        self._start_stream()

    @property
    def schedule(self) -> cache_aware.Schedule:
        return self._sched

    @property
    def head(self) -> str:
        return self._head

    # ------------------------------------------------------------------ StreamingSession hooks
    def _start_stream(self) -> None:
        m = self._asr.model
        self._features.reset()
        self._chunker = cache_aware.Chunker(self._sched, m.preprocessor.n_mels)
        dtype = next(m.encoder.parameters()).dtype
        device = next(m.encoder.parameters()).device
        self._cache = cache_aware.EncoderCache(m.encoder, self._sched, device, dtype)
        self._frames = 0  # encoder frames decoded
        self._last_end = 0  # end frame of the last committed token (TDT punctuation)
        self._last_onset: Optional[int] = None  # frame of the last CTC token (CTC spans)
        if self._steps is not None:
            with torch.inference_mode():
                self._carry = stream_greedy.initial_carry(self._steps)
        else:
            self._carry = stream_greedy.CTCCarry()

    def _restart(self) -> None:
        self._start_stream()

    def _accept(self, samples: np.ndarray) -> None:
        with model_call(self._asr.threads):
            frames = self._features.push(samples)
            for feats, drop in self._chunker.push(frames):
                self._run(feats, drop, keep_all=False, final=False)

    def _flush(self) -> None:
        with model_call(self._asr.threads):
            samples = self._features.samples
            frames = self._features.finish()
            for feats, drop in self._chunker.push(frames):
                self._run(feats, drop, keep_all=False, final=False)
            pad = _stft_frames(self._asr.model.preprocessor, samples) - self._features.frames
            last = self._chunker.finish(pad_frames=max(0, pad), drop_short=self._drop_short_tail)
            if last is not None:
                self._run(last[0], last[1], keep_all=True, final=True)
            elif self._steps is None:
                self._run(None, 0, keep_all=True, final=True)

    # ------------------------------------------------------------------ one chunk
    def _run(self, feats: Optional[torch.Tensor], drop: int, *, keep_all: bool, final: bool) -> None:
        m = self._asr.model
        if feats is not None:
            device = next(m.encoder.parameters()).device
            enc = cache_aware.stream_step(m.encoder, feats.to(device), self._cache, self._sched,
                                          drop_extra_pre_encoded=drop, keep_all_outputs=keep_all)
            if self._language is not None:
                with torch.inference_mode():
                    enc = m.apply_prompt(enc[None], self._language)[0]
        else:
            enc = None
        offset = self._frames
        n = 0 if enc is None else enc.shape[1]
        with torch.inference_mode():
            if self._steps is not None:
                if n == 0:
                    return
                proj = self._asr.project_encoder(enc[None])[0]
                toks, self._carry = stream_greedy.transducer_chunk(
                    proj, self._steps, self._carry, confidence=self._confidence, reset_ids=self._reset_ids)
                for t in toks:
                    t.frame += offset
            else:
                if n:
                    logp = m.ctc_decoder(enc[None].to(next(m.ctc_decoder.parameters()).dtype))[0]
                else:
                    logp = torch.zeros(0, m.blank + 1)
                toks, self._carry = stream_greedy.ctc_chunk(logp, m.blank, self._carry,
                                                            confidence=self._confidence, final=final)
        self._frames += n
        self._commit(self._spans(toks), committed_seconds=m.frame_seconds(self._frames))

    def _spans(self, toks: list[stream_greedy.Emitted]) -> list[CommitToken]:
        out = []
        punct = self._asr.punctuation
        for t in toks:
            if self._head == "tdt":
                start, end = t.frame, t.frame + (t.duration or 0)
                if self._special.get(t.id) is None and self._asr.tokenizer.decode([t.id]) in punct:
                    start = end = self._last_end  # TDT: punctuation takes no time (as offline)
            elif self._head == "rnnt":
                start, end = t.frame, t.frame + 1
            else:  # CTC: from the previous token's onset to its own (NeMo's convention, token_offsets)
                start = max(0, t.frame - 1) if self._last_onset is None else self._last_onset
                end = t.frame
                self._last_onset = t.frame
            out.append(CommitToken(t.id, start, end, t.frame, t.duration, t.confidence))
            self._last_end = end
        return out


def _stft_frames(frontend, samples: int) -> int:
    """Frames of the front end's STFT for `samples` (valid ones and those past the valid length)."""
    if samples == 0:
        return 0
    if frontend.exact_pad:
        p = (frontend.n_fft - frontend.hop_length) // 2
        return (samples + 2 * p - frontend.n_fft) // frontend.hop_length + 1
    return samples // frontend.hop_length + 1


class NoLanguagePrompt(OptionsNotTaken):
    """`language` for a model without a language prompt: refused as every surface refuses an option (each
    spelling it its own way), saying why."""

    def spelled(self, spell) -> str:
        return f"{super().spelled(spell)} (it has no language prompt)"


class CacheAwareOptionsNotTaken(OptionsNotTaken):
    """Options a cache-aware session does not take (a name no Parakeet stream takes, or the buffered
    windows' chunk_s, left_s, right_s), said with the options it does take."""

    def spelled(self, spell) -> str:
        words = [spell(n) for n in self.names]
        taken = sorted(option_names(ParakeetStreamOptions) - set(BUFFERED_ONLY))
        return (f"unknown streaming option{'s' if len(words) > 1 else ''} for a cache-aware model: "
                f"{', '.join(words)} (options: {', '.join(spell(n) for n in taken)})")


def refuse_for_cache_aware(asr, names: Sequence[str]) -> None:
    """Raises CacheAwareOptionsNotTaken for `names` (when there are any) if `asr` is cache-aware."""
    if names and is_cache_aware(asr):
        raise CacheAwareOptionsNotTaken(asr.name, asr.kind, names)


def open_session(asr, opts: ParakeetStreamOptions) -> StreamingSession:
    """`ParakeetASR.stream(...)`: a cache-aware session for a cache-aware model (which refuses the
    buffered windows' options), else buffered windows (`parakeet.buffered`, which refuse the cache-aware
    session's options). An option counts as given when it is not None."""
    if is_cache_aware(asr):
        refuse_for_cache_aware(asr, [n for n in BUFFERED_ONLY if getattr(opts, n) is not None])
        return CacheAwareSession(asr, att_context_size=opts.att_context_size, head=opts.head,
                                 eou_reset=True if opts.eou_reset is None else opts.eou_reset,
                                 confidence=opts.confidence, drop_short_tail=bool(opts.drop_short_tail),
                                 language=opts.language)
    if opts.att_context_size is not None:
        why = cache_aware.check_streaming(asr.model.encoder)
        raise TranscribeError(f"{asr.name} is not a cache-aware streaming model ({why}): att_context_size does not "
                              "apply; it streams through buffered windows")
    for key in CACHE_AWARE_ONLY:
        if getattr(opts, key) is not None:
            raise TranscribeError(f"{key} applies to cache-aware streaming models only; {asr.name} streams through "
                                  "buffered windows")
    if opts.language is not None:
        if asr.model.prompt_kernel is None:
            raise NoLanguagePrompt(asr.name, asr.kind, ["language"])
        raise TranscribeError(f"language applies to cache-aware streaming models only; {asr.name} streams through "
                              "buffered windows")
    from .buffered import buffered_session

    return buffered_session(asr, chunk_s=opts.chunk_s, left_s=opts.left_s, right_s=opts.right_s, head=opts.head,
                            confidence=opts.confidence)

"""Batched long-form Whisper (`transcribe(audio, batched=True)`): the audio is cut at pauses into
windows of at most 30 s, and the windows are decoded together, as one batch.

openai-whisper's long-form loop (transcribe/whisper/sequential.py) decodes one 30 s window after
the other: where a window starts depends on the timestamps the previous one ended with, and each
window is conditioned on the text before it, so nothing can run ahead. Here (as faster-whisper's
BatchedInferencePipeline does) the windows are fixed first:

- `transcribe.long_input.cut_spans(max_s=30, min_s=...)` cuts the audio at pauses (Silero VAD
  when the silero-vad package is installed, else an energy detector) into contiguous pieces of at
  most 30 s that cover it whole; silence stays in.
- Up to `batch_size` pieces go through the encoder (on a CPU window by window, see
  batched.encode_windows) and their greedy decodings are one batched search
  (batched.batched_greedy); beam search, and the temperature fallback of a window whose text is
  too repetitive or too unlikely, run per window, as in the sequential loop.
- No window sees the text of another (there is no previous text to condition on); an
  `initial_prompt` is given to every window.
- Each window's timestamp pairs cut it into segments; times are the piece's start plus the
  timestamps, clipped to the piece. A window judged silent (no-speech probability above
  `no_speech_threshold` and average log-prob below `logprob_threshold`) gives no segment.
- Word timestamps align each window's words to its own cross-attention.

The text may differ from the sequential loop's where that loop would have cut elsewhere or used
the previous text; benchmarks/whisper_batched_longform.py measures both (WER and speed).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from ..long_input import batches, cut_spans
from ..results import Segment, Transcript
from .lockstep import batched_greedy, encode_windows, row
from .frontend import WHISPER_CHUNK_FRAMES, WHISPER_CHUNK_SAMPLES, whisper_log_mel
from .options import WhisperOptions
from .sequential import WindowRequest, add_words, decode_with_fallback, window_segments

MAX_WINDOW_S = 30.0
MIN_WINDOW_S = 15.0  # a cut is looked for between 15 and 30 s into each window (long_input.py)


def windows_of(pcm: np.ndarray, sample_rate: int, detector: str = "auto") -> list[tuple[int, int]]:
    """(start, end) samples of the windows: pieces cut at pauses, at most 30 s each, covering all."""
    return cut_spans(pcm, sample_rate, MAX_WINDOW_S, detector, min_s=MIN_WINDOW_S)


def transcribe_pieces(asr, pcm: np.ndarray, opts: WhisperOptions, generator) -> Transcript:
    """One input (mono float32 at the model's rate) -> its Transcript, its windows decoded
    `opts.windows_at_once` (batch_size) at a time. opts: WhisperASR's checked options, its language
    the model's code (or None: detected); generator: what fallbacks sample from."""
    language, task, batch_size = opts.language, opts.task, opts.windows_at_once
    no_speech_threshold, logprob_threshold = opts.no_speech_threshold, opts.logprob_threshold
    t = asr.tokenizer
    sr = asr.sample_rate
    duration = len(pcm) / sr
    spans = windows_of(pcm, sr)
    if language is None:
        language = "en" if not asr.multilingual else asr.detect_language(window_mel(asr, pcm[: spans[0][1]]))[0]
    opts = replace(opts, language=language)
    prompt = t.encode(" " + opts.initial_prompt.strip()) if opts.initial_prompt else []
    greedy = opts.temperatures[0] == 0 and opts.beam_size is None
    segments: list[Segment] = []
    all_tokens: list[int] = []
    token_list: list = []
    last_speech = 0.0
    for group in batches(spans, lambda s: s[1] - s[0], batch_size, longest_first=False):  # in time order
        mels = [window_mel(asr, pcm[a:b]) for a, b in group]
        cross = encode_windows(asr, mels)
        firsts = [None] * len(group)
        if greedy and len(group) > 1:
            initial, sot_index = asr.initial_tokens(language, task, prompt, True, ())
            firsts = batched_greedy(asr, [initial] * len(group), [sot_index] * len(group), cross)
        for j, (a, b) in enumerate(group):
            offset = a / sr
            size = min(WHISPER_CHUNK_FRAMES, -(-(b - a) // 160))  # frames of audio in the window
            rows = row(cross, j)
            r, avg, ratio, temp = decode_with_fallback(asr, WindowRequest(mels[j], opts, prompt, generator), rows,
                                                       first=firsts[j])
            tokens = r.tokens[0]
            if no_speech_threshold is not None and r.no_speech_probs[0] > no_speech_threshold:
                if logprob_threshold is None or avg <= logprob_threshold:
                    continue  # silence
            stats = dict(avg_logprob=avg, no_speech_prob=r.no_speech_probs[0], compression_ratio=ratio,
                         temperature=temp)
            current, _, _ = window_segments(asr, tokens, offset, 0, size, stats)
            end_s = b / sr
            for seg, _ in current:  # timestamps past the window's audio are clipped to it
                seg.start = float(min(max(seg.start, offset), end_s))
                seg.end = float(min(max(seg.end, seg.start), end_s))
            if opts.word_timestamps:
                add_words(asr, current, rows, size, offset, opts, last_speech, token_list)
                ends = [s.words[-1].end for s, _ in current if s.words]
                if ends:
                    last_speech = ends[-1]
            for seg, toks in current:
                if seg.start == seg.end or not seg.text.strip():
                    continue
                segments.append(seg)
                all_tokens.extend(toks)
        del cross, mels
    text = t.decode([x for x in all_tokens if x < t.eot])
    words = [w for s in segments for w in s.words]
    return Transcript(text=text, duration=duration, segments=segments,
                      words=words, tokens=token_list, model=asr.name, language=language)


def window_mel(asr, pcm: np.ndarray) -> torch.Tensor:
    """A window's log-mel [n_mels, 3000]: its audio, then zeros (openai-whisper's padding)."""
    mel = whisper_log_mel(pcm, asr.model.dims.n_mels, padding=WHISPER_CHUNK_SAMPLES)
    return mel[:, :WHISPER_CHUNK_FRAMES]

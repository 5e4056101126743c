"""openai-whisper's sequential window loop (its `transcribe`) over audio of any length: what
`WhisperASR.transcribe` runs by default (batched=False).

The audio is cut into 30 s windows, seeking by the predicted timestamps; each window is decoded
conditioned on the earlier text, again at the next temperature when its text is too repetitive
or too unlikely, and cut into segments at its timestamp pairs; with word timestamps, its words
are aligned to the audio and the next window starts after the last word.

The loop of one input is a generator (`window_loop`): for each window it yields a `WindowRequest`
and is sent back the window's audio features and its first decoding (at the first temperature of
the schedule); the rest (fallback, segments, words, seeking) it does itself. `transcribe_one`
answers each request at once, one window at a time; transcribe/whisper/lockstep.py answers the
requests of several inputs together (one encoder pass, one batched greedy search).

The functions take the recognizer (`WhisperASR`) as their first argument and use only its public
surface (tokenizer, model, sample_rate, multilingual, device, encode, decode_window, detect_language,
alignment_heads, name), and the call's checked options (`WhisperOptions`, its language resolved to the
model's code); this module does not import the recognizer's (which imports this one).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from typing import Generator, Optional

import torch

from ..results import Segment, Token, Transcript, Word
from .frontend import WHISPER_CHUNK_FRAMES, WHISPER_CHUNK_SAMPLES, whisper_log_mel
from .decoding import WindowResult
from .options import WhisperOptions
from .timing import add_word_timestamps, find_alignment

TIME_PRECISION = 0.02  # seconds per timestamp token
INPUT_STRIDE = 2  # mel frames per encoder position


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


@dataclass
class WindowRequest:
    """A window of one input waiting for its audio features and its first decoding: what
    `first_decoding` and `decode_with_fallback` decode."""

    window: torch.Tensor  # [n_mels, 3000] log-mel, padded
    opts: WhisperOptions  # the call's options, with the input's language and the window's prefix
    prompt: list[int]  # earlier text tokens (conditioning)
    generator: Optional[torch.Generator]  # the input's sampling generator

    @property
    def temperature(self) -> float:
        """The first temperature of the fallback schedule."""
        return self.opts.temperatures[0]


def sampling_generator(asr, seed: Optional[int]) -> Optional[torch.Generator]:
    """The generator fallbacks sample from, seeded with `seed` (None: torch's global one)."""
    return None if seed is None else torch.Generator(device=asr.device).manual_seed(seed)


def first_decoding(asr, req: WindowRequest, cross) -> WindowResult:
    """The first decoding of a requested window (the one the fallback starts from)."""
    return asr.decode_window(req.window, req.opts, prompt=req.prompt, temperature=req.temperature,
                             generator=req.generator, cross=cross)


def decode_with_fallback(asr, req: WindowRequest, cross, first: Optional[WindowResult] = None):
    """Decode at each temperature of `req.opts.temperatures` in turn until the result passes the
    checks; returns the result, its average log-prob, its compression ratio and the temperature
    used. first: the decoding at the first temperature, when the caller has it already."""
    t = asr.tokenizer
    o = req.opts
    for i, temp in enumerate(o.temperatures):
        if i == 0 and first is not None:
            r = first
        else:
            r = asr.decode_window(req.window, o, prompt=req.prompt, temperature=temp, generator=req.generator,
                                  cross=cross)
        tokens = r.tokens[0]
        avg = r.sum_logprobs[0] / (len(tokens) + 1)
        ratio = compression_ratio(t.decode(tokens).strip())
        retry = (o.compression_ratio_threshold is not None and ratio > o.compression_ratio_threshold) or (
            o.logprob_threshold is not None and avg < o.logprob_threshold
        )
        if (o.no_speech_threshold is not None and r.no_speech_probs[0] > o.no_speech_threshold
                and o.logprob_threshold is not None and avg < o.logprob_threshold):
            retry = False  # silence: no point in sampling
        if not retry:
            break
    return r, avg, ratio, temp


def transcribe_one(asr, pcm, opts: WhisperOptions, generator: Optional[torch.Generator]) -> Transcript:
    """One input (mono float32 at the model's rate) -> its Transcript. opts: WhisperASR's checked
    options, its language the model's code (or None: detected); generator: what fallbacks sample from."""
    loop = window_loop(asr, pcm, opts, generator)
    try:
        req = next(loop)
        while True:
            cross = asr.encode(req.window)
            req = loop.send((cross, first_decoding(asr, req, cross)))
    except StopIteration as done:
        return done.value


def window_loop(asr, pcm, opts: WhisperOptions,
                generator: Optional[torch.Generator]) -> Generator[WindowRequest, tuple, Transcript]:
    """openai-whisper's window loop over one input, as a generator: it yields a `WindowRequest`
    per window and must be sent (cross-attention keys and values of the window, with one row;
    `first_decoding` of the request, or its equal); it returns the input's Transcript."""
    t = asr.tokenizer
    duration = len(pcm) / asr.sample_rate
    mel = whisper_log_mel(pcm, asr.model.dims.n_mels, padding=WHISPER_CHUNK_SAMPLES)
    content = mel.shape[-1] - WHISPER_CHUNK_FRAMES
    if opts.language is None:
        # English-only models speak English; a multilingual one detects the language in the
        # first 30 s (the mel of the audio itself, not zero-padded) and keeps it throughout.
        opts = replace(opts, language="en" if not asr.multilingual else
                       asr.detect_language(mel[:, :WHISPER_CHUNK_FRAMES])[0])
    prompt_tokens = t.encode(" " + opts.initial_prompt.strip()) if opts.initial_prompt else []
    all_tokens = list(prompt_tokens)
    reset_since = 0
    seek = 0
    last_speech = 0.0
    segments: list[Segment] = []
    token_list: list[Token] = []
    while seek < content:
        offset = seek * 160 / asr.sample_rate
        size = min(WHISPER_CHUNK_FRAMES, content - seek)
        # As openai-whisper: the window ends with the audio, then zeros (in log-mel units).
        window = mel[:, seek : seek + size]
        if window.shape[-1] < WHISPER_CHUNK_FRAMES:
            window = torch.nn.functional.pad(window, (0, WHISPER_CHUNK_FRAMES - window.shape[-1]))
        req = WindowRequest(window, opts, all_tokens[reset_since:], generator)
        cross = None  # the last window's features are not kept while the next ones are made
        cross, first = yield req
        r, avg_logprob, ratio, temp = decode_with_fallback(asr, req, cross, first=first)
        if opts.prefix:
            opts = replace(opts, prefix=None)  # the prefix starts the first window only
        tokens = r.tokens[0]
        no_speech = r.no_speech_probs[0]
        if opts.no_speech_threshold is not None and no_speech > opts.no_speech_threshold:
            if opts.logprob_threshold is None or avg_logprob <= opts.logprob_threshold:
                seek += size
                continue
        stats = dict(avg_logprob=avg_logprob, no_speech_prob=no_speech, compression_ratio=ratio, temperature=temp)
        current, next_seek, single_ending = window_segments(asr, tokens, offset, seek, size, stats)
        if opts.word_timestamps:
            add_words(asr, current, cross, size, offset, opts, last_speech, token_list)
            end = last_end(current)
            if not single_ending and end is not None and end > offset:
                next_seek = round(end * 100)
            if end is not None:
                last_speech = end
        seek = next_seek
        for seg, toks in current:
            if seg.start == seg.end or not seg.text.strip():
                seg.text, toks[:], seg.words = "", [], []
            segments.append(seg)
            all_tokens.extend(toks)
        if not opts.condition_on_previous_text or temp > 0.5:
            reset_since = len(all_tokens)
    text = t.decode(all_tokens[len(prompt_tokens):])
    words = [w for s in segments for w in s.words]
    return Transcript(text=text, duration=duration, segments=segments, words=words, tokens=token_list,
                      model=asr.name, language=opts.language)


def add_words(asr, current, cross, size: int, offset: float, opts: WhisperOptions, last_speech: float,
              token_list: list) -> None:
    """Word (and token) times for one window's segments (`size` mel frames of audio from `offset`
    seconds), from the cross-attention alignment; opts: the language (resolved), task and
    punctuation rules."""
    t = asr.tokenizer
    text_tokens = [[x for x in toks if x < t.eot] for _, toks in current]
    aligned = find_alignment(asr, cross, [x for tt in text_tokens for x in tt], size, opts)
    views = [dict(start=seg.start, end=seg.end, text_tokens=tt) for (seg, _), tt in zip(current, text_tokens)]
    add_word_timestamps(aligned, views, offset, last_speech, opts.prepend_punctuations, opts.append_punctuations)
    for (seg, _), v in zip(current, views):
        seg.start, seg.end = float(v["start"]), float(v["end"])
        seg.words = [Word(w["word"].strip(), float(w["start"]), float(w["end"]), float(w["probability"]))
                     for w in v["words"]]
        for w in v["words"]:
            for tok, (a, b, p) in zip(w["tokens"], w["token_times"]):
                token_list.append(Token(int(tok), t.token_text(tok), round(a, 2), round(b, 2), confidence=p,
                                        piece=t.piece(tok)))


def window_segments(asr, tokens: list[int], offset: float, seek: int, size: int, stats: dict):
    """Cut one window's tokens into segments at timestamp pairs; returns them, the next seek,
    and whether the window ended on a single timestamp (its speech ran to the end)."""
    t = asr.tokenizer
    tb = t.timestamp_begin
    is_ts = [x >= tb for x in tokens]
    single_ending = is_ts[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(tokens) - 1) if is_ts[i] and is_ts[i + 1]]
    out = []

    def seg(toks, start, end):
        text = t.decode([x for x in toks if x < t.eot])
        return (Segment(text, start, end, **stats), list(toks))

    if cuts:
        if single_ending:
            cuts.append(len(tokens))
        last = 0
        for c in cuts:
            piece = tokens[last:c]
            out.append(seg(piece, offset + (piece[0] - tb) * TIME_PRECISION, offset + (piece[-1] - tb) * TIME_PRECISION))
            last = c
        if single_ending:
            seek += size
        else:
            seek += (tokens[last - 1] - tb) * INPUT_STRIDE
    else:
        dur = size * 160 / asr.sample_rate
        stamps = [x for x in tokens if x >= tb]
        if stamps and stamps[-1] != tb:
            dur = (stamps[-1] - tb) * TIME_PRECISION
        out.append(seg(tokens, offset, offset + dur))
        seek += size
    return out, seek, single_ending


def last_end(current) -> Optional[float]:
    """The end of the last word of a window's segments, or of its last segment."""
    for seg, _ in reversed(current):
        if seg.words:
            return seg.words[-1].end
    return current[-1][0].end if current else None

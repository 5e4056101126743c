"""Long-form Whisper transcription: openai-whisper's `transcribe` over audio of any length.

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
surface (tokenizer, model, sample_rate, multilingual, encode, decode_window, detect_language,
alignment_heads, name); this module does not import the recognizer's (which imports this one).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Generator, Optional

import torch

from ..results import Segment, Token, Transcript, Word
from .frontend import WHISPER_CHUNK_FRAMES, WHISPER_CHUNK_SAMPLES, whisper_log_mel
from .decoding import WindowResult
from .timing import add_word_timestamps, find_alignment

TIME_PRECISION = 0.02  # seconds per timestamp token
INPUT_STRIDE = 2  # mel frames per encoder position


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


@dataclass
class WindowRequest:
    """A window of one input waiting for its audio features and its first decoding: the arguments
    of `first_decoding`."""

    window: torch.Tensor  # [n_mels, 3000] log-mel, padded
    language: Optional[str]
    task: str
    prompt: list[int]  # earlier text tokens (conditioning)
    search_opts: dict  # decode_window's search options (beam_size, patience, ..., prefix)
    temperature: float  # the first temperature of the fallback schedule
    generator: Optional[torch.Generator]


def first_decoding(asr, req: WindowRequest, cross) -> WindowResult:
    """The first decoding of a requested window (the one the fallback starts from)."""
    return asr.decode_window(req.window, True, req.language, req.task, req.prompt, temperature=req.temperature,
                             generator=req.generator, cross=cross, **req.search_opts)


def decode_with_fallback(asr, window, cross, language, task, prompt, search_opts, temperatures,
                         compression_ratio_threshold, logprob_threshold, no_speech_threshold, generator,
                         first: Optional[WindowResult] = None):
    """Decode at each temperature in turn until the result passes the checks; returns the
    result, its average log-prob, its compression ratio and the temperature used. first: the
    decoding at the first temperature, when the caller has it already."""
    t = asr.tokenizer
    for i, temp in enumerate(temperatures):
        if i == 0 and first is not None:
            r = first
        else:
            r = asr.decode_window(window, True, language, task, prompt, temperature=temp, generator=generator,
                                  cross=cross, **search_opts)
        tokens = r.tokens[0]
        avg = r.sum_logprobs[0] / (len(tokens) + 1)
        ratio = compression_ratio(t.decode(tokens).strip())
        retry = (compression_ratio_threshold is not None and ratio > compression_ratio_threshold) or (
            logprob_threshold is not None and avg < logprob_threshold
        )
        if (no_speech_threshold is not None and r.no_speech_probs[0] > no_speech_threshold
                and logprob_threshold is not None and avg < logprob_threshold):
            retry = False  # silence: no point in sampling
        if not retry:
            break
    return r, avg, ratio, temp


def transcribe_one(asr, pcm, language, task, condition, initial_prompt, no_speech_threshold, logprob_threshold,
                   search_opts, fallback, words_opts) -> Transcript:
    """One input (mono float32 at the model's rate) -> its Transcript. The options are
    WhisperASR.transcribe's, checked there: search_opts go to decode_window, fallback to
    `decode_with_fallback`, words_opts is (prepended, appended punctuation) or None (no words)."""
    loop = window_loop(asr, pcm, language, task, condition, initial_prompt, no_speech_threshold, logprob_threshold,
                       search_opts, fallback, words_opts)
    try:
        req = next(loop)
        while True:
            cross = asr.encode(req.window)
            req = loop.send((cross, first_decoding(asr, req, cross)))
    except StopIteration as done:
        return done.value


def window_loop(asr, pcm, language, task, condition, initial_prompt, no_speech_threshold, logprob_threshold,
                search_opts, fallback, words_opts) -> Generator[WindowRequest, tuple, Transcript]:
    """openai-whisper's window loop over one input, as a generator: it yields a `WindowRequest`
    per window and must be sent (cross-attention keys and values of the window, with one row;
    `first_decoding` of the request, or its equal); it returns the input's Transcript."""
    t = asr.tokenizer
    duration = len(pcm) / asr.sample_rate
    mel = whisper_log_mel(pcm, asr.model.dims.n_mels, padding=WHISPER_CHUNK_SAMPLES)
    content = mel.shape[-1] - WHISPER_CHUNK_FRAMES
    if language is None:
        # English-only models speak English; a multilingual one detects the language in the
        # first 30 s (the mel of the audio itself, not zero-padded) and keeps it throughout.
        language = "en" if not asr.multilingual else asr.detect_language(mel[:, :WHISPER_CHUNK_FRAMES])[0]
    prompt_tokens = t.encode(" " + initial_prompt.strip()) if initial_prompt else []
    all_tokens = list(prompt_tokens)
    reset_since = 0
    seek = 0
    last_speech = 0.0
    segments: list[Segment] = []
    token_list: list[Token] = []
    temperatures = fallback["temperatures"]
    while seek < content:
        offset = seek * 160 / asr.sample_rate
        size = min(WHISPER_CHUNK_FRAMES, content - seek)
        # As openai-whisper: the window ends with the audio, then zeros (in log-mel units).
        window = mel[:, seek : seek + size]
        if window.shape[-1] < WHISPER_CHUNK_FRAMES:
            window = torch.nn.functional.pad(window, (0, WHISPER_CHUNK_FRAMES - window.shape[-1]))
        prompt = all_tokens[reset_since:]
        cross = None  # the last window's features are not kept while the next ones are made
        cross, first = yield WindowRequest(window, language, task, prompt, search_opts,
                                           temperatures[0], fallback["generator"])
        r, avg_logprob, ratio, temp = decode_with_fallback(
            asr, window, cross, language, task, prompt, search_opts, **fallback, first=first)
        search_opts = {**search_opts, "prefix": ()}  # the prefix starts the first window only
        tokens = r.tokens[0]
        no_speech = r.no_speech_probs[0]
        if no_speech_threshold is not None and no_speech > no_speech_threshold:
            if logprob_threshold is None or avg_logprob <= logprob_threshold:
                seek += size
                continue
        stats = dict(avg_logprob=avg_logprob, no_speech_prob=no_speech, compression_ratio=ratio, temperature=temp)
        current, next_seek, single_ending = window_segments(asr, tokens, offset, seek, size, stats)
        if words_opts is not None:
            add_words(asr, current, cross, size, offset, language, task, last_speech, words_opts, token_list)
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
        if not condition or temp > 0.5:
            reset_since = len(all_tokens)
    text = t.decode(all_tokens[len(prompt_tokens):])
    words = [w for s in segments for w in s.words]
    return Transcript(text=text, duration=duration, segments=segments, words=words, tokens=token_list,
                      model=asr.name, language=language)


def add_words(asr, current, cross, size, offset, language, task, last_speech, opts, token_list) -> None:
    """Word (and token) times for one window's segments, from the cross-attention alignment."""
    t = asr.tokenizer
    text_tokens = [[x for x in toks if x < t.eot] for _, toks in current]
    sot = t.sot_sequence(language, task, asr.multilingual)
    aligned = find_alignment(asr.model.decoder, cross, t, sot, [x for tt in text_tokens for x in tt], size,
                             asr.alignment_heads(), language=language)
    views = [dict(start=seg.start, end=seg.end, text_tokens=tt) for (seg, _), tt in zip(current, text_tokens)]
    add_word_timestamps(aligned, views, offset, last_speech, *opts)
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

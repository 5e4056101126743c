"""Word timestamps for Whisper: cross-attention alignment, as openai-whisper computes them.

For one 30 s window, the decoded text is run through the decoder once more (after the
<|notimestamps|> prompt), and the cross-attention scores of the model's alignment heads give a
token-by-frame matrix: a softmax over the frames of speech, each frame standardized across the
tokens, a median filter along time, the mean over heads. Dynamic time warping through that matrix
gives each token the frame where the path reaches it; words take the times of their first token
and of the next word's first token. Punctuation then joins its neighbouring word, and words that
run too long at sentence and segment boundaries are cut back (openai-whisper's heuristics).
"""
from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

FRAMES_PER_TOKEN_TIME = 50  # encoder positions per second (20 ms each)
from .options import APPEND_PUNCTUATION, PREPEND_PUNCTUATION  # noqa: F401 - (as openai-whisper's defaults)
SENTENCE_END = ".。!！?？"
MEDIAN_WIDTH = 7  # openai-whisper's median filter over the alignment matrix
QK_SCALE = 1.0  # and its scale of the attention scores before the softmax
# Languages written without spaces between words: words are cut at whole characters instead.
NO_SPACE_LANGUAGES = {"zh", "ja", "th", "lo", "my", "yue"}


@dataclass
class WordTiming:
    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float
    # Per token of the word: (start, end, probability), in window seconds.
    token_times: list[tuple[float, float, float]] = field(default_factory=list)


def median_filter(x: torch.Tensor, width: int) -> torch.Tensor:
    """Median over a sliding window of odd `width` along the last axis, edges reflected."""
    if width < 1 or width % 2 == 0:
        raise ValueError(f"the median filter width must be odd and positive, got {width}")
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    shape = x.shape
    y = F.pad(x.reshape(-1, 1, shape[-1]), (pad, pad), mode="reflect")
    return y.unfold(-1, width, 1).sort(dim=-1).values[..., pad].reshape(shape)


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through `cost` [N, M] from (0, 0) to (N-1, M-1), moving by
    one token, one frame or both. Returns (token indices, frame indices) along the path.

    Accumulated costs are kept in float32 and ties go to the frame step, then the token step,
    exactly as openai-whisper's implementation, so that equal matrices give equal paths. The
    recursion runs one anti-diagonal at a time (every cell of a diagonal depends only on the two
    before it), so numpy does the inner loop.
    """
    x = np.asarray(cost, dtype=np.float64)
    n, m = x.shape
    acc = np.full((n + 1, m + 1), np.inf, dtype=np.float32)
    acc[0, 0] = 0.0
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    for d in range(2, n + m + 1):
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        c0 = acc[i - 1, j - 1]
        c1 = acc[i - 1, j]
        c2 = acc[i, j - 1]
        diag = (c0 < c1) & (c0 < c2)
        up = ~diag & (c1 < c0) & (c1 < c2)
        best = np.where(diag, c0, np.where(up, c1, c2))
        acc[i, j] = (x[i - 1, j - 1] + best.astype(np.float64)).astype(np.float32)
        trace[i, j] = np.where(diag, 0, np.where(up, 1, 2))
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    path = []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        t = trace[i, j]
        if t == 0:
            i, j = i - 1, j - 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    path = np.array(path[::-1])
    return path[:, 0], path[:, 1]


def split_on_characters(tokenizer, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
    """Group tokens into the shortest runs that decode to whole characters (a multi-byte
    character may span tokens)."""
    bad = "\ufffd"
    full = tokenizer.decode_with_timestamps(tokens)
    words, groups, current, offset = [], [], [], 0
    for tok in tokens:
        current.append(tok)
        text = tokenizer.decode_with_timestamps(current)
        if bad not in text or (offset + text.index(bad) < len(full) and full[offset + text.index(bad)] == bad):
            words.append(text)
            groups.append(current)
            current = []
            offset += len(text)
    return words, groups


def split_words(tokenizer, tokens: Sequence[int], language: Optional[str]) -> tuple[list[str], list[list[int]]]:
    """Words as openai-whisper splits them: a new word at a leading space, at punctuation and at
    a special token; whole characters for languages without spaces."""
    pieces, groups = split_on_characters(tokenizer, tokens)
    if language in NO_SPACE_LANGUAGES:
        return pieces, groups
    words: list[str] = []
    out: list[list[int]] = []
    for piece, group in zip(pieces, groups):
        if group[0] >= tokenizer.eot or piece.startswith(" ") or piece.strip() in string.punctuation or not words:
            words.append(piece)
            out.append(list(group))
        else:
            words[-1] += piece
            out[-1].extend(group)
    return words, out


def merge_punctuation(words: list[WordTiming], prepended: str, appended: str) -> None:
    """Opening punctuation joins the word after it, closing punctuation the word before; the
    emptied entries stay (with no text and no tokens) so token counts still line up."""
    i, j = len(words) - 2, len(words) - 1
    while i >= 0:
        prev, nxt = words[i], words[j]
        if prev.word.startswith(" ") and prev.word.strip() in prepended:
            nxt.word = prev.word + nxt.word
            nxt.tokens = prev.tokens + nxt.tokens
            nxt.token_times = prev.token_times + nxt.token_times
            prev.word, prev.tokens, prev.token_times = "", [], []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(words):
        prev, nxt = words[i], words[j]
        if not prev.word.endswith(" ") and nxt.word in appended:
            prev.word = prev.word + nxt.word
            prev.tokens = prev.tokens + nxt.tokens
            prev.token_times = prev.token_times + nxt.token_times
            nxt.word, nxt.tokens, nxt.token_times = "", [], []
        else:
            i = j
        j += 1


@torch.inference_mode()
def find_alignment(asr, cross: list, text_tokens: Sequence[int], num_frames: int, opts) -> list[WordTiming]:
    """Words of `text_tokens` (one window's text, timestamps left out) with their times in
    seconds from the window's start. asr: the recognizer (its decoder, tokenizer and alignment
    heads); cross: the window's cross-attention keys and values; num_frames: mel frames of speech
    in the window; opts: the call's options (`WhisperOptions`: the resolved language and the task)."""
    decoder, tokenizer, heads = asr.model.decoder, asr.tokenizer, asr.alignment_heads()
    language = opts.language
    sot_sequence = tokenizer.sot_sequence(language, opts.task, asr.multilingual)
    text_tokens = [int(t) for t in text_tokens]
    if not text_tokens:
        return []
    if not heads:
        raise ValueError("the model names no alignment heads")
    tokens = list(sot_sequence) + [tokenizer.no_timestamps] + text_tokens + [tokenizer.eot]
    layers = sorted({int(layer) for layer, _ in heads})
    device = cross[0][0].device
    logits, _, scores = decoder(torch.tensor([tokens], device=device), cross, None, cross_scores=layers)
    first = len(sot_sequence)
    probs = logits[0, first : first + len(text_tokens), : tokenizer.eot].float().softmax(dim=-1)
    token_probs = probs[torch.arange(len(text_tokens), device=device), torch.tensor(text_tokens, device=device)].tolist()

    w = torch.stack([scores[int(layer)][0, int(head)] for layer, head in heads])  # [heads, tokens, frames]
    w = (w[:, :, : num_frames // 2] * QK_SCALE).softmax(dim=-1)
    std, mean = torch.std_mean(w, dim=-2, keepdim=True, unbiased=False)
    w = median_filter((w - mean) / std, MEDIAN_WIDTH)
    matrix = w.mean(dim=0)[first:-1]
    text_idx, time_idx = dtw(-matrix.double().cpu().numpy())

    words, groups = split_words(tokenizer, text_tokens + [tokenizer.eot], language)
    if len(groups) <= 1:
        return []
    jumps = np.concatenate([[True], np.diff(text_idx) != 0])
    times = time_idx[jumps] / FRAMES_PER_TOKEN_TIME  # the time each token row is first reached
    bounds = np.concatenate([[0], np.cumsum([len(g) for g in groups[:-1]])])
    out = []
    for k, (word, group) in enumerate(zip(words[:-1], groups[:-1])):
        a, b = int(bounds[k]), int(bounds[k + 1])
        out.append(WordTiming(
            word, list(group), float(times[a]), float(times[b]), float(np.mean(token_probs[a:b])),
            [(float(times[t]), float(times[t + 1]), float(token_probs[t])) for t in range(a, b)],
        ))
    return out


def add_word_timestamps(
    window_words: list[WordTiming],
    segments: list[dict],
    time_offset: float,
    last_speech: float,
    prepended: str = PREPEND_PUNCTUATION,
    appended: str = APPEND_PUNCTUATION,
) -> float:
    """Give one window's segments their words (openai-whisper's `add_word_timestamps`).

    window_words: find_alignment's result for the window's text tokens, segment after segment.
    segments: dicts with "start", "end" and "text_tokens" (the segment's text tokens); "words"
    is set to dicts (word, start, end, probability, tokens, token_times) in absolute seconds, and
    start/end move to the words where openai-whisper moves them. Returns the new end of speech.
    """
    durations = np.array([w.end - w.start for w in window_words])
    durations = durations[durations.nonzero()]
    median = min(0.7, float(np.median(durations))) if len(durations) else 0.0
    longest = median * 2
    if len(durations):
        # A word at a sentence boundary may not last more than twice the median.
        for i in range(1, len(window_words)):
            w = window_words[i]
            if w.end - w.start > longest:
                if w.word in SENTENCE_END:
                    w.end = w.start + longest
                elif window_words[i - 1].word in SENTENCE_END:
                    w.start = w.end - longest
    merge_punctuation(window_words, prepended, appended)

    k = 0
    for seg in segments:
        n_text = len(seg["text_tokens"])
        saved = 0
        words = []
        while k < len(window_words) and saved < n_text:
            w = window_words[k]
            if w.word:
                words.append(dict(
                    word=w.word, start=round(time_offset + w.start, 2), end=round(time_offset + w.end, 2),
                    probability=w.probability, tokens=list(w.tokens),
                    token_times=[(time_offset + s, time_offset + e, p) for s, e, p in w.token_times],
                ))
            saved += len(w.tokens)
            k += 1
        if words:
            first, last = words[0], words[-1]
            # After a pause, the first (and second) word may not run longer than the median allows.
            if first["end"] - last_speech > median * 4 and (
                first["end"] - first["start"] > longest
                or (len(words) > 1 and words[1]["end"] - first["start"] > longest * 2)
            ):
                if len(words) > 1 and words[1]["end"] - words[1]["start"] > longest:
                    boundary = max(words[1]["end"] / 2, words[1]["end"] - longest)
                    first["end"] = words[1]["start"] = boundary
                first["start"] = max(0, first["end"] - longest)
            # The segment's own timestamps win over a first or last word that runs too long.
            if seg["start"] < first["end"] and seg["start"] - 0.5 > first["start"]:
                first["start"] = max(0, min(first["end"] - median, seg["start"]))
            else:
                seg["start"] = first["start"]
            if seg["end"] > last["start"] and seg["end"] + 0.5 < last["end"]:
                last["end"] = max(last["start"] + median, seg["end"])
            else:
                seg["end"] = last["end"]
            last_speech = seg["end"]
        seg["words"] = words
    return last_speech

"""Long-form Whisper over several inputs at once: their window loops run in lockstep.

Each input keeps openai-whisper's own loop (transcribe/whisper/sequential.py `window_loop`:
seeking, prompt conditioning, temperature fallback, segments, word timestamps); what is shared is
the work of the windows pending at the same time, one per input:

- the encoder runs once on the stacked windows [B, n_mels, 3000] (on a GPU; on a CPU window by
  window, see `encode_windows`);
- their first decodings, when that is greedy at temperature 0 (the default), are one batched
  greedy search whose rows are the inputs, each reading its own cross-attention keys and values.
  Rows whose forced tokens (start of transcript, the prompt from the earlier text, a prefix) differ
  in length are run through the decoder in groups of one length, then left-padded into one
  self-attention cache (`KVCache.pad`: padding is never attended to, positions stay each row's
  own). A row leaves the batch when it ends, so the others no longer carry it.
- the rest (a fallback at a higher temperature, beam search, best-of sampling, word alignment)
  runs per input, as in the single-input path, on that input's row of the features. (Beam
  searches of several windows as one `decoding.beam_search` gave the same results but no gain on
  2 CPU cores, 7 inputs: 10.1 s vs 10.8 s at beam 5, 8.7 s vs 7.3 s at beam 3, since a window
  whose search has ended keeps its beams in the batch until the last one ends.)

Up to `batch_size` inputs run together; when one ends the next waiting input takes its place
(an input's audio is read when it joins). The batch's cross-attention keys and values are held
together: per window 2 x layers x 1500 x d_model values (18 MB for tiny.en, 491 MB for a large
model in float32), so batch_size bounds that memory.
Each input's result is the one it gets alone, up to float rounding: batched products round
differently in the last bits (tests/test_whisper_batched.py states the tolerances). Each input
samples its fallbacks from its own generator seeded with `seed`, as it would alone.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from ..results import Transcript
from .decoding import ApplyTimestampRules, SuppressBlank, SuppressTokens, WindowResult
from .model import KVCache
from .options import WhisperOptions
from .sequential import WindowRequest, first_decoding, sampling_generator, window_loop


def transcribe_batch(asr, inputs: Sequence, load: Callable, opts: WhisperOptions) -> list[Transcript]:
    """Transcripts of `inputs` (each turned into PCM by `load` when it joins the batch), at most
    `opts.windows_at_once` (batch_size) running at a time. opts: as `window_loop`'s; each input
    samples its fallbacks from its own generator seeded with `opts.seed`."""
    batch_size = opts.windows_at_once
    results: list[Optional[Transcript]] = [None] * len(inputs)
    waiting = deque(range(len(inputs)))
    running: dict[int, tuple] = {}  # input -> (its loop, its pending WindowRequest)

    def advance(i, loop, answer=None):
        try:
            running[i] = (loop, next(loop) if answer is None else loop.send(answer))
        except StopIteration as done:
            running.pop(i, None)
            results[i] = done.value

    while waiting or running:
        while waiting and len(running) < batch_size:
            i = waiting.popleft()
            advance(i, window_loop(asr, load(inputs[i]), opts, sampling_generator(asr, opts.seed)))
        if not running:
            continue
        order = list(running)
        requests = [running[i][1] for i in order]
        cross = encode_windows(asr, [r.window for r in requests])
        answers = first_decodings(asr, requests, cross)
        for i, answer in zip(order, answers):
            advance(i, running[i][0], answer)
        del cross, answers  # nothing holds this round's features while the next round's are made
    return results


def encode_windows(asr, windows: Sequence[torch.Tensor]) -> list:
    """The cross-attention keys and values of the windows, one row each. On a GPU the encoder
    runs on the stacked windows; on a CPU it runs window by window (a batch gains no speed
    there: its activations leave the caches, 8 windows of tiny.en took 2.4 s stacked against
    2.0 s one by one) and the rows are joined, so each row is exactly the single path's."""
    if len(windows) == 1 or asr.device.type != "cpu":
        return asr.encode(torch.stack(list(windows)))
    parts = [asr.encode(w) for w in windows]
    return [(torch.cat([p[layer][0] for p in parts]), torch.cat([p[layer][1] for p in parts]))
            for layer in range(len(parts[0]))]


def row(cross: list, j: int) -> list:
    """Row j of batched cross-attention keys and values (views, one row each)."""
    return [(k[j : j + 1], v[j : j + 1]) for k, v in cross]


def greedy_request(req: WindowRequest) -> bool:
    """Whether a window's first decoding is a plain greedy search (batched across inputs)."""
    return req.temperature == 0 and req.opts.beam_size is None and req.opts.language is not None


def first_decodings(asr, requests: Sequence[WindowRequest], cross: list) -> list[tuple[list, WindowResult]]:
    """(cross-attention row, first decoding) of each request: the greedy ones in one batched
    search, the others one by one as in the single-input path."""
    rows = [row(cross, j) for j in range(len(requests))]
    firsts: list[Optional[WindowResult]] = [None] * len(requests)
    greedy_rows = [j for j, r in enumerate(requests) if greedy_request(r)]
    if len(greedy_rows) > 1:
        forced = [asr.initial_tokens(requests[j].opts.language, requests[j].opts.task, requests[j].prompt, True,
                                     requests[j].opts.prefix or ()) for j in greedy_rows]
        if greedy_rows != list(range(len(requests))):
            index = torch.tensor(greedy_rows, device=cross[0][0].device)
            sub = [(k.index_select(0, index), v.index_select(0, index)) for k, v in cross]
        else:
            sub = cross
        for j, r in zip(greedy_rows, batched_greedy(asr, [f[0] for f in forced], [f[1] for f in forced], sub)):
            firsts[j] = r
    for j, req in enumerate(requests):
        if firsts[j] is None:
            firsts[j] = first_decoding(asr, req, rows[j])
    return list(zip(rows, firsts))


@torch.inference_mode()
def batched_greedy(asr, initials: Sequence[Sequence[int]], sot_indexes: Sequence[int], cross: list) -> list[WindowResult]:
    """openai-whisper's greedy decoding (temperature 0, timestamps on, its logit rules) of several
    windows at once: row r starts from the forced tokens initials[r] (<|startoftranscript|> at
    sot_indexes[r]) and reads row r of `cross`. Each row's result is `decoding.greedy`'s for
    that row alone: its tokens until end-of-text (or until it holds more than the decoder's
    context, or n_text_ctx // 2 tokens were sampled), their summed log-probs and the no-speech
    probability at its first step.

    The rows step together; the logit rules see each row's sampled tokens only (all rows have
    sampled as many), so rows whose forced tokens differ in length share them. Rules built for
    sample_begin 0 on the sampled tokens act as the ones for sample_begin len(initial) on the
    whole row: SuppressBlank and ApplyTimestampRules read nothing before sample_begin."""
    m, t = asr.model, asr.tokenizer
    dec = m.decoder
    device = cross[0][0].device
    n_rows = len(initials)
    n_ctx = m.dims.n_text_ctx
    sample_len = n_ctx // 2
    rules = asr.logit_rules(0, True)
    if not all(isinstance(r, (SuppressBlank, SuppressTokens, ApplyTimestampRules)) for r in rules):
        raise TypeError("batched_greedy knows SuppressBlank, SuppressTokens and ApplyTimestampRules only")

    # First step: the forced tokens, in groups of one length (and one <|startoftranscript|> index),
    # each group one decoder call with no padding.
    groups: dict[tuple[int, int], list[int]] = {}
    for r, (ini, si) in enumerate(zip(initials, sot_indexes)):
        groups.setdefault((len(ini), si), []).append(r)
    longest = max(len(x) for x in initials)
    logits = [None] * n_rows
    no_speech = [float("nan")] * n_rows
    caches: list[tuple[list[int], KVCache]] = []
    for (length, si), members in groups.items():
        if len(members) == n_rows:
            gcross = cross
        else:
            index = torch.tensor(members, device=device)
            gcross = [(k.index_select(0, index), v.index_select(0, index)) for k, v in cross]
        positions = sorted({si, length - 1}) if t.no_speech is not None else [length - 1]
        out, cache, _ = dec(torch.tensor([list(initials[r]) for r in members], device=device), gcross, None,
                            positions=positions)
        if t.no_speech is not None:
            ns = torch.softmax(out[:, positions.index(si)].float(), dim=-1)[:, t.no_speech].tolist()
            for r, p in zip(members, ns):
                no_speech[r] = p
        last = out[:, -1].float()
        for k, r in enumerate(members):
            logits[r] = last[k]
        caches.append((members, cache))
    cache = merge_caches(caches, n_rows, longest, device)
    logits = torch.stack(logits).clone()

    alive = list(range(n_rows))  # the input row of each batch row
    sampled: list[list[int]] = [[] for _ in range(n_rows)]
    sampled_t = torch.empty((n_rows, 0), dtype=torch.long, device=device)
    sums = torch.zeros(n_rows, device=device)
    new = None  # the tokens of the last step, one per batch row
    for i in range(sample_len):
        if i:
            out, cache, _ = dec(new, cross, cache, positions=[0])
            logits = out[:, -1].float().clone()
        seqs = [sampled[r] for r in alive]
        for rule in rules:
            if getattr(rule, "reads_rows", False):
                rule.apply(logits, sampled_t, seqs)
            else:
                rule.apply(logits, sampled_t)
        nxt = logits.argmax(dim=-1)
        logprobs = F.log_softmax(logits, dim=-1)
        index = torch.tensor(alive, device=device)
        sums[index] += logprobs[torch.arange(len(alive), device=device), nxt]
        keep = []
        for k, (r, tok) in enumerate(zip(alive, nxt.tolist())):
            sampled[r].append(tok)
            if tok != t.eot and len(initials[r]) + i + 1 <= n_ctx:
                keep.append(k)
        if not keep:
            break
        sampled_t = torch.cat([sampled_t, nxt[:, None]], dim=1)
        new = nxt[:, None]
        if len(keep) < len(alive):  # rows that ended leave the batch
            kidx = torch.tensor(keep, device=device)
            alive = [alive[k] for k in keep]
            sampled_t, new = sampled_t.index_select(0, kidx), new.index_select(0, kidx)
            cross = [(a.index_select(0, kidx), b.index_select(0, kidx)) for a, b in cross]
            cache = keep_rows(cache, kidx, keep)
    sums_out = sums.tolist()
    out_rows = []
    for r in range(n_rows):
        seq = sampled[r]
        out_rows.append(WindowResult([seq[: seq.index(t.eot)] if t.eot in seq else seq], [sums_out[r]], [no_speech[r]]))
    return out_rows


def merge_caches(caches: list[tuple[list[int], KVCache]], n_rows: int, longest: int, device) -> KVCache:
    """Group caches (rows `members` each) -> one cache of n_rows rows in input order, each row
    left-padded to `longest` slots."""
    if len(caches) == 1:
        members, cache = caches[0]
        if members == list(range(n_rows)):
            return cache
    first = caches[0][1]
    keys, values = [], []
    for layer in range(len(first.keys)):
        for store, src in ((keys, first.keys), (values, first.values)):
            _, h, _, d = src[layer].shape
            store.append(torch.zeros(n_rows, h, longest, d, dtype=src[layer].dtype, device=device))
    pad = [0] * n_rows
    for members, cache in caches:
        index = torch.tensor(members, device=device)
        length = cache.length
        for layer in range(len(keys)):
            keys[layer][:, :, longest - length :].index_copy_(0, index, cache.keys[layer])
            values[layer][:, :, longest - length :].index_copy_(0, index, cache.values[layer])
        for r in members:
            pad[r] = longest - length
    return KVCache(keys, values, torch.arange(n_rows, device=device), list(range(n_rows)),
                   pad if any(pad) else None)


def keep_rows(cache: KVCache, kidx: torch.Tensor, keep: list[int]) -> KVCache:
    """The cache of rows `keep` (index tensor `kidx`), each reading its own row of the features;
    padding slots that no row needs any more are cut off."""
    pad = None if cache.pad is None else [cache.pad[k] for k in keep]
    cut = min(pad) if pad else 0
    keys = [k.index_select(0, kidx)[:, :, cut:] for k in cache.keys]
    values = [v.index_select(0, kidx)[:, :, cut:] for v in cache.values]
    if pad is not None:
        pad = [p - cut for p in pad]
        pad = pad if any(pad) else None
    n = len(keep)
    return KVCache(keys, values, torch.arange(n, device=kidx.device), list(range(n)), pad)

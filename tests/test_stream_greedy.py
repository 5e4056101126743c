"""Greedy decoding across chunks (search.stream_greedy) equals decoding the whole at once, for
every way of cutting the frames into chunks; the decoder reset after an end-of-utterance token."""
from __future__ import annotations

import random
from dataclasses import replace

import torch

from transcribe.search import ctc, stream_greedy
from transcribe.search.transducer import greedy_batch

from .table_steps import table_steps


def _cuts(n, rng):
    cuts, i = [], 0
    while i < n:
        k = rng.choice([1, 1, 2, 3, 5, 8])
        cuts.append((i, min(n, i + k)))
        i += k
    return cuts


def _whole(enc, steps, max_symbols):
    return greedy_batch(enc[None], torch.tensor([enc.shape[0]]), replace(steps, max_symbols=max_symbols), "entropy")[0]


def _chunked(enc, steps, cuts, max_symbols, reset_ids=frozenset()):
    steps = replace(steps, max_symbols=max_symbols)
    carry = stream_greedy.initial_carry(steps)
    out = []
    for a, b in cuts:
        toks, carry = stream_greedy.transducer_chunk(enc[a:b], steps, carry, reset_ids=reset_ids)
        out += [(t.id, t.frame + a, t.duration, round(t.confidence, 5)) for t in toks]
    return out


def test_transducer_chunks_equal_whole_decoding():
    gen = torch.Generator().manual_seed(0)
    rng = random.Random(0)
    for trial in range(60):
        tdt = trial % 2 == 0
        vocab, n_frames = 5, rng.randrange(3, 25)
        durations = (0, 1, 2, 3, 4) if tdt else None
        table = torch.randn(n_frames, vocab + 1, vocab + 1 + (5 if tdt else 0), generator=gen) * 2
        table[:, :, vocab] += 0.5  # some blanks
        enc, steps = table_steps(table, vocab, durations)
        ms = rng.choice([1, 2, 10])
        whole = _whole(enc, steps, ms)
        want = [(i, f, d if tdt else None, round(c, 5)) for i, f, d, c in
                zip(whole.ids, whole.frames, whole.durations if tdt else [None] * len(whole.ids), whole.confidences)]
        for _ in range(4):
            assert _chunked(enc, steps, _cuts(n_frames, rng), ms) == want, trial


def test_reset_after_end_of_utterance():
    # RNN-T, vocabulary {0: "a", 1: "b", 2: <EOU>}, blank 3. Frame 0 emits <EOU> (from the start
    # state too: a reset moves on to the next frame, or it would loop); on frame 1 the decoder
    # prefers "b" after <EOU> but "a" after nothing (the start of an utterance).
    table = torch.zeros(3, 4, 4)
    table[:, :, 3] = 1.0  # blank by default
    table[0, 3, 2] = 5.0  # <EOU> first
    table[1, 2, 1] = 5.0  # after <EOU>: "b"
    table[1, 3, 0] = 5.0  # after a reset: "a"
    enc, steps = table_steps(table, 3)
    cuts = [(0, 1), (1, 3)]
    no_reset = [i for i, *_ in _chunked(enc, steps, cuts, 10)]
    reset = [i for i, *_ in _chunked(enc, steps, cuts, 10, reset_ids=frozenset({2}))]
    assert no_reset == [2, 1]
    assert reset == [2, 0]
    # The same within one chunk.
    assert [i for i, *_ in _chunked(enc, steps, [(0, 3)], 10, reset_ids=frozenset({2}))] == [2, 0]


def test_ctc_chunks_equal_whole_decoding():
    gen = torch.Generator().manual_seed(1)
    rng = random.Random(1)
    for trial in range(60):
        n, v = rng.randrange(1, 30), 4
        logits = torch.randn(n, v + 1, generator=gen) * 2
        logits[:, v] += rng.choice([0.0, 1.0])
        logp = torch.log_softmax(logits, -1)
        whole = ctc.greedy(logp, n, v, "entropy")
        want = [(i, f, d, round(c, 5)) for i, f, d, c in zip(whole.ids, whole.frames, whole.durations, whole.confidences)]
        for _ in range(4):
            carry = stream_greedy.CTCCarry()
            got = []
            cuts = _cuts(n, rng)
            for k, (a, b) in enumerate(cuts):
                toks, carry = stream_greedy.ctc_chunk(logp[a:b], v, carry, final=k == len(cuts) - 1)
                got += [(t.id, t.frame, t.duration, round(t.confidence, 5)) for t in toks]
            assert got == want, trial

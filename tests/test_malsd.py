"""search.malsd: batched modified ALSD beam search (NeMo's `malsd_batch`) for TDT and RNN-T.

Parity: NeMo 3.0.0's N-best lists (tests/references/nemo_beam/, made by
tools/nemo_beam_reference.py) replayed on NeMo's own encoder frames: the same token sequences in
the same order, the same number of hypotheses, the same token frames and TDT durations, scores
within 1e-4. Why 1e-4: a score is a float32 sum of ~140-200 log-probabilities (one per step over
~140 frames plus the tokens), each carrying its own rounding (our predictor step is written as one
matrix product where NeMo calls nn.LSTM; matrix products block differently); measured differences
are <= 2e-6, the gaps between the references' hypotheses >= 2e-3.

The model-independent tests run on hand-written tables: a "model" whose predictor state is the last
token and whose joint looks the logits up by (frame, last token), so every score below can be
written down by hand.
"""
from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from transcribe.search.hotwords import HotwordTrie
from transcribe.search.malsd import malsd_batch, malsd_durations
from transcribe.search.steps import DEFAULT_MAX_SYMBOLS, TransducerSteps

from . import beam_refs as br


# -- a table model ----------------------------------------------------------------------------
def table_steps(table: torch.Tensor, blank: int, durations=None) -> TransducerSteps:
    """table [rows, contexts = V+1 (blank: start of sequence), V+1(+D)] of logits; an encoder frame
    is one number, its row in the table."""

    def predict(labels, state):
        return labels.to(table.dtype)[:, None], labels.clone()

    def joint(enc, pred):
        return table[enc[..., 0].long(), pred[..., 0].long()]

    return TransducerSteps(predict, joint, lambda n: torch.full((n,), blank, dtype=torch.long, device=table.device),
                           lambda s, idx: s.index_select(0, idx), lambda ss: torch.cat(list(ss)), blank,
                           tuple(durations) if durations is not None else None)


def decode_tables(tables: list[torch.Tensor], blank: int, durations=None, max_symbols=DEFAULT_MAX_SYMBOLS, **kw):
    """One utterance per table [T_u, V+1, V+1(+D)], decoded as one batch."""
    t_max = max(1, max(t.shape[0] for t in tables))
    width = tables[0].shape[-1]
    rows = torch.cat([t.reshape(-1, blank + 1, width) for t in tables] + [torch.zeros(1, blank + 1, width)])
    enc = torch.zeros(len(tables), t_max, 1)
    start = 0
    for u, t in enumerate(tables):
        enc[u, :t.shape[0], 0] = torch.arange(start, start + t.shape[0], dtype=torch.float32)
        start += t.shape[0]
    lengths = torch.tensor([t.shape[0] for t in tables])
    return malsd_batch(enc, lengths, replace(table_steps(rows, blank, durations), max_symbols=max_symbols), **kw)


def logp_row(**probs) -> list[float]:
    return [math.log(p) for p in probs.values()]


def summary(nbest):
    return [(h.ids, h.frames, h.durations) for h in nbest]


# -- parity with NeMo -----------------------------------------------------------------------------
TRANSDUCERS = [("tiny-tdt-fit", "tdt"), ("tiny-rnnt-fit", "rnnt"), ("tiny-hybrid-tdt-ctc-fit", "tdt"),
               ("tiny-tdt-random", "tdt")]
RUNS = [(stem, head, i) for stem, head in TRANSDUCERS for i in range(len(br.runs(stem, head, "malsd_batch")))]


def test_references_cover_both_settings():
    assert len(RUNS) == 16
    settings = {(r["beam_size"], r["score_norm"]) for stem, head in TRANSDUCERS
                for r in br.runs(stem, head, "malsd_batch")}
    assert settings == {(4, True), (2, False)}


@pytest.mark.parametrize("stem,head,i", RUNS, ids=[f"{s}-{i}" for s, _, i in RUNS])
def test_nemo_parity(stem, head, i):
    run = br.runs(stem, head, "malsd_batch")[i]
    assert run["options"].get("max_symbols", 10) == 10
    enc = br.projected(stem, run["clip"])[None]
    got = malsd_batch(enc, torch.tensor([enc.shape[1]]), replace(br.steps(stem), max_symbols=10),
                      beam_size=run["beam_size"], score_norm=run["score_norm"])[0]
    ref = run["hypotheses"]
    assert [h.ids for h in got] == [r["tokens"] for r in ref]
    for h, r in zip(got, ref):
        assert h.score == pytest.approx(r["score"], abs=1e-4)
        assert h.frames == r["timestamp"]
        if head == "tdt":
            assert h.durations == r["token_duration"]
        else:
            assert r["token_duration"] is None and h.durations == [1] * len(h.ids)
        assert h.normalized_score == pytest.approx(h.score / (len(h.ids) + 1), rel=1e-6)
        assert h.confidences == [] and len(h.logprobs) == len(h.ids)  # confidences only when asked


@pytest.mark.parametrize("stem,head", TRANSDUCERS)
@pytest.mark.parametrize("beam,norm", [(4, True), (2, False)])
def test_batch_of_both_clips_equals_each_alone(stem, head, beam, norm):
    clips = [c["name"] for c in br.reference(stem)["clips"]]
    encs = [br.projected(stem, c) for c in clips]
    t_max = max(e.shape[0] for e in encs)
    batch = torch.stack([torch.cat([e, torch.full((t_max - e.shape[0], e.shape[1]), 7.0)]) for e in encs])
    lengths = torch.tensor([e.shape[0] for e in encs])
    together = malsd_batch(batch, lengths, br.steps(stem), beam_size=beam, score_norm=norm)
    for enc, nbest in zip(encs, together):
        alone = malsd_batch(enc[None], torch.tensor([enc.shape[0]]), br.steps(stem), beam_size=beam, score_norm=norm)[0]
        assert summary(nbest) == summary(alone)
        assert [h.score for h in nbest] == pytest.approx([h.score for h in alone], abs=1e-5)
    for r in br.runs(stem, head, "malsd_batch"):
        if (r["beam_size"], r["score_norm"]) == (beam, norm):
            assert [h.ids for h in together[clips.index(r["clip"])]] == [h["tokens"] for h in r["hypotheses"]]


# -- hand-written tables --------------------------------------------------------------------------
# tokens a = 0, b = 1, blank = 2; one frame; after a token the blank is likely only after b
# (a table's contexts are indexed by the last token: a, b, then blank = the start)
PRUNE = torch.tensor([[logp_row(a=.45, b=.45, blank=.1),    # context: a
                       logp_row(a=.05, b=.05, blank=.9),    # context: b
                       logp_row(a=.5, b=.4, blank=.1)]])    # context: start


@pytest.mark.parametrize("beam,ranked", [
    (1, [([0], .5 * .1)]),
    (2, [([1], .4 * .9), ([0], .5 * .1)]),
    (3, [([1], .4 * .9), ([0], .5 * .1), ([], .1)]),
    (5, [([1], .4 * .9), ([0], .5 * .1), ([], .1)]),  # more slots than candidates: the rest stay empty
])
def test_pruning_keeps_the_beam_best_prefixes(beam, ranked):
    """max_symbols 1: a token, then a forced blank. Beam 1 keeps only "a" (0.5 > 0.4) and ends at
    0.05; beam 2 also keeps "b", which wins (0.36); beam 3 keeps the empty hypothesis too."""
    got = decode_tables([PRUNE], 2, beam_size=beam, max_symbols=1)[0]
    assert [h.ids for h in got] == [ids for ids, _ in ranked]
    assert [h.score for h in got] == pytest.approx([math.log(p) for _, p in ranked], abs=1e-6)
    assert all(h.frames == [0] * len(h.ids) and h.durations == [1] * len(h.ids) for h in got)


def test_score_norm_ranks_by_score_over_tokens_plus_one():
    """Raw: b (0.36), "" (0.1), a (0.05). Normalized by tokens + 1: b -0.51, a -1.50, "" -2.30."""
    normed = decode_tables([PRUNE], 2, beam_size=3, max_symbols=1, score_norm=True)[0]
    raw = decode_tables([PRUNE], 2, beam_size=3, max_symbols=1, score_norm=False)[0]
    assert [h.ids for h in normed] == [[1], [0], []]
    assert [h.ids for h in raw] == [[1], [], [0]]
    for h in normed + raw:
        assert h.normalized_score == pytest.approx(h.score / (len(h.ids) + 1), rel=1e-6)
    assert sorted(h.score for h in normed) == pytest.approx(sorted(h.score for h in raw))


def test_rnnt_merges_equal_hypotheses_and_keeps_the_best_copy():
    """a = 0, blank = 1, two frames, max_symbols 1. After two steps "a" is reached twice on frame 1:
    a@0 + forced blank (0.6 * 0.5 = 0.30, one label on frame 1 so far: none) and blank + a@1
    (0.4 * 0.7 = 0.28). They merge into 0.58, kept by the better copy: its token frame (0) and
    its label count on frame 1 (0, so it may still emit "aa" there)."""
    table = torch.tensor([[logp_row(a=.5, blank=.5), logp_row(a=.6, blank=.4)],    # frame 0: a, start
                          [logp_row(a=.2, blank=.8), logp_row(a=.7, blank=.3)]])   # frame 1
    got = decode_tables([table], 1, beam_size=4, max_symbols=1)[0]
    assert [(h.ids, h.frames) for h in got] == [([0], [0]), ([0, 0], [0, 1]), ([], [])]
    assert [h.score for h in got] == pytest.approx([math.log(x) for x in (.58 * .8, .58 * .2 * .8, .4 * .3)], abs=1e-6)
    raw = decode_tables([table], 1, beam_size=4, max_symbols=1, score_norm=False)[0]
    assert [h.ids for h in raw] == [[0], [], [0, 0]]


def tdt_row(tokens: dict, durs: dict) -> list[float]:
    return logp_row(**tokens) + logp_row(**durs)


def test_tdt_blank_of_duration_zero_moves_one_frame_and_merges():
    """a = 0, blank = 1, durations (0, 1, 2), three frames. a with duration 2 (0.81), then on frame
    2 blank with duration 0 (counted as 1) and blank with duration 1 both end on frame 3: one
    hypothesis, 0.81 * 0.9 * (0.5 + 0.4)."""
    table = torch.tensor([
        [tdt_row(dict(a=.9, blank=.1), dict(d0=.05, d1=.05, d2=.9))] * 2,
        [tdt_row(dict(a=.5, blank=.5), dict(d0=.3, d1=.3, d2=.4))] * 2,
        [tdt_row(dict(a=.1, blank=.9), dict(d0=.5, d1=.4, d2=.1)),    # after a
         tdt_row(dict(a=.6, blank=.4), dict(d0=.2, d1=.2, d2=.6))],   # start (the other hypothesis)
    ])
    got = decode_tables([table], 1, (0, 1, 2), beam_size=2)[0]
    assert summary(got) == [([0], [0], [2])]
    assert got[0].score == pytest.approx(math.log(.81 * .9 * .9), abs=1e-6)


def test_tdt_forced_blank_keeps_the_best_pairs_duration():
    """max_symbols 1: after a with duration 0 the hypothesis must take blank, scored by the blank's
    log-prob plus the best duration log-prob (0.3 * 0.7), moving by the duration of its best
    (label, duration) pair, here (a, 2): it lands on frame 2."""
    table = torch.tensor([
        [tdt_row(dict(a=.7, blank=.3), dict(d0=.1, d1=.2, d2=.7)),    # after a
         tdt_row(dict(a=.9, blank=.1), dict(d0=.8, d1=.1, d2=.1))],   # start
        [tdt_row(dict(a=.5, blank=.5), dict(d0=.1, d1=.8, d2=.1))] * 2,
        [tdt_row(dict(a=.1, blank=.9), dict(d0=.05, d1=.9, d2=.05)),
         tdt_row(dict(a=.5, blank=.5), dict(d0=.1, d1=.8, d2=.1))],
    ])
    got = decode_tables([table], 1, (0, 1, 2), beam_size=1, max_symbols=1)[0]
    assert summary(got) == [([0], [0], [0])]
    assert got[0].score == pytest.approx(math.log(.72 * (.3 * .7) * .81), abs=1e-6)


def one_frame_scores(table: torch.Tensor, blank: int, max_symbols: int, hot=None) -> dict:
    """Every token sequence of a one-frame RNN-T utterance (at most max_symbols tokens, then blank)
    with its log-probability (plus hotword bonuses)."""
    out = {}

    def walk(seq, lp, state):
        ctx = seq[-1] if seq else blank
        extra = float(hot.final[state]) if hot is not None else 0.0
        out[tuple(seq)] = lp + float(table[0, ctx, blank]) + extra
        if len(seq) < max_symbols:
            for k in range(blank):
                bonus = float(hot.bonus[state, k]) if hot is not None else 0.0
                nxt = int(hot.next_state[state, k]) if hot is not None else 0
                walk(seq + [k], lp + float(table[0, ctx, k]) + bonus, nxt)

    walk([], 0.0, 0)
    return out


@pytest.mark.parametrize("norm", [True, False])
def test_one_frame_enumeration(norm):
    """A beam wider than the number of sequences keeps them all, each scored exactly."""
    g = torch.Generator().manual_seed(3)
    table = torch.log_softmax(torch.randn(1, 3, 3, generator=g) * 2, dim=-1)
    want = one_frame_scores(table, 2, 2)
    got = decode_tables([table], 2, beam_size=len(want) + 1, max_symbols=2, score_norm=norm)[0]
    assert sorted(tuple(h.ids) for h in got) == sorted(want)
    for h in got:
        assert h.score == pytest.approx(want[tuple(h.ids)], abs=1e-5)
    key = [h.normalized_score if norm else h.score for h in got]
    assert key == sorted(key, reverse=True)


# -- hotwords -------------------------------------------------------------------------------------
HOT = torch.tensor([[logp_row(a=.1, b=.1, blank=.8), logp_row(a=.1, b=.1, blank=.8),
                     logp_row(a=.5, b=.3, blank=.2)]])
GAP = math.log(.5 / .3)  # a over b on the first token; either is then followed by blank (0.8)


@pytest.mark.parametrize("delta,winner", [(-1e-3, 0), (1e-3, 1)])
def test_hotword_boost_changes_the_winner_when_it_crosses_the_gap(delta, winner):
    w = GAP + delta
    trie = HotwordTrie([[1]], weight=w, n_tokens=3)  # boost "b"
    got = decode_tables([HOT], 2, beam_size=2, max_symbols=1, hotwords=trie)[0]
    assert [h.ids for h in got] == [[winner], [1 - winner]]
    scores = {tuple(h.ids): h.score for h in got}
    assert scores[(0,)] == pytest.approx(math.log(.5 * .8), abs=1e-6)
    assert scores[(1,)] == pytest.approx(math.log(.3 * .8) + w, abs=1e-6)


def test_hotword_state_follows_the_hypotheses_and_final_is_added():
    """Phrase "b a": the bonus of a depends on the trie state left by b, an unfinished "b" is taken
    back by `final`; every sequence of a one-frame utterance is kept and scored exactly."""
    trie = HotwordTrie([[1, 0]], weight=0.7, n_tokens=3)
    want = one_frame_scores(HOT, 2, 2, trie)
    got = decode_tables([HOT], 2, beam_size=len(want), max_symbols=2, hotwords=trie)[0]
    assert len(got) == len(want)
    for h in got:
        assert h.score == pytest.approx(want[tuple(h.ids)], abs=1e-5)
    plain = one_frame_scores(HOT, 2, 2)
    assert want[(1, 0)] == pytest.approx(plain[(1, 0)] + 2 * 0.7)
    assert want[(1,)] == pytest.approx(plain[(1,)])
    zero = decode_tables([HOT], 2, beam_size=7, max_symbols=2, hotwords=HotwordTrie([[1, 0]], 0.0, 3))[0]
    assert [h.score for h in zero] == pytest.approx([h.score for h in decode_tables([HOT], 2, beam_size=7,
                                                                                   max_symbols=2)[0]])


def hotword_tables(weight: float):
    nxt = torch.zeros(2, 2, dtype=torch.long)
    nxt[:, 1] = 1
    bonus = torch.zeros(2, 2)
    bonus[:, 1] = weight
    return SimpleNamespace(next_state=nxt, bonus=bonus, final=torch.zeros(2))


def test_hotword_tables_are_checked():
    bad = hotword_tables(1.0)
    bad.bonus = torch.zeros(2, 1)
    with pytest.raises(ValueError, match="hotword"):
        decode_tables([HOT], 2, hotwords=bad)
    bad = hotword_tables(1.0)
    bad.next_state[0, 0] = 5
    with pytest.raises(ValueError, match="outside"):
        decode_tables([HOT], 2, hotwords=bad)


# -- batches, invariants, devices -----------------------------------------------------------------
def random_tables(lengths, n_tok, width, seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(t, n_tok, width, generator=g) * scale for t in lengths]


@pytest.mark.parametrize("durations,hot", [(None, False), ((0, 1, 2, 3), False), ((1, 2, 4), False),
                                          (None, True), ((0, 1, 2, 3), True)])
def test_batch_results_do_not_depend_on_the_batch(durations, hot):
    blank = 3
    width = blank + 1 + (len(durations) if durations else 0)
    tables = random_tables([6, 0, 11, 1, 9], blank + 1, width, seed=7)
    kw = dict(beam_size=3, max_symbols=2, hotwords=HotwordTrie([[0, 1], [2]], 0.5, blank + 1) if hot else None)
    together = decode_tables(tables, blank, durations, **kw)
    for table, nbest in zip(tables, together):
        alone = decode_tables([table], blank, durations, **kw)[0]
        assert summary(nbest) == summary(alone)
        assert [h.score for h in nbest] == pytest.approx([h.score for h in alone], abs=1e-6)
        if table.shape[0] == 0:
            assert summary(nbest) == [([], [], [])] and nbest[0].score == 0.0
        for h in nbest:  # time only moves forward; a TDT token's duration passes before the next
            assert all(0 <= f < table.shape[0] for f in h.frames)
            if durations is None:
                assert h.frames == sorted(h.frames)
                assert all(h.frames.count(f) <= 2 for f in set(h.frames))
            else:
                # NeMo's malsd moves by a duration's index in the table (search.malsd docstring):
                # (1, 2, 4) moves 0, 1 or 2 frames
                assert all(d in malsd_durations(durations) for d in h.durations)
                assert all(f + d <= nf for f, d, nf in zip(h.frames, h.durations, h.frames[1:]))


def test_beam_one_and_wide_beams():
    blank = 3
    tables = random_tables([8], blank + 1, blank + 1 + 3, seed=11)
    for beam in (1, 2, 16, 40):  # 16 x 4 candidates, 40 > the 16 (token, duration) pairs
        got = decode_tables(tables, blank, (0, 1, 2), beam_size=beam)[0]
        assert 1 <= len(got) <= beam
        key = [h.normalized_score for h in got]
        assert key == sorted(key, reverse=True)
        assert len({tuple(h.ids) + tuple(h.frames) + tuple(h.durations) for h in got}) == len(got)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_equals_cpu():
    blank = 5
    for durations in (None, (0, 1, 2, 3, 4)):
        width = blank + 1 + (len(durations) if durations else 0)
        tables = random_tables([40, 17, 33], blank + 1, width, seed=5)
        rows = torch.cat([t for t in tables])
        enc = torch.zeros(3, 40, 1)
        start = 0
        for u, t in enumerate(tables):
            enc[u, :t.shape[0], 0] = torch.arange(start, start + t.shape[0], dtype=torch.float32)
            start += t.shape[0]
        lengths = torch.tensor([t.shape[0] for t in tables])
        cpu = malsd_batch(enc, lengths, table_steps(rows, blank, durations), beam_size=4)
        gpu = malsd_batch(enc.cuda(), lengths.cuda(), table_steps(rows.cuda(), blank, durations), beam_size=4)
        for a, b in zip(cpu, gpu):
            assert summary(a) == summary(b)
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_long_input_of_frames():
    """4 minutes at 12.5 frames/s (3,000 frames), TDT durations (0..4), beam 4: one pass, token
    rate like speech (blank favoured). It ends; no timing is asserted. The search has no
    threshold on the input's length (one loop step per hypothesis move, the trail traced back
    once at the end); 3,000 frames are past Python's recursion limit (1,000) for anything
    recursive per frame, and the packed hash wraps its 64 bits within a few tokens. 30 minutes
    (22,500 frames) ran the same steps 7.5 times longer."""
    t_max, blank = 4 * 60 * 25 // 2, 8
    g = torch.Generator().manual_seed(0)
    table = torch.randn(t_max, blank + 1, blank + 1 + 5, generator=g) * 2
    table[..., blank] += 5.0
    enc = torch.arange(t_max, dtype=torch.float32)[None, :, None]
    got = malsd_batch(enc, torch.tensor([t_max]), table_steps(table, blank, (0, 1, 2, 3, 4)), beam_size=4)[0]
    best = got[0]
    assert 0 < len(best.ids) < t_max and best.frames[-1] < t_max
    assert all(f + d <= nf for f, d, nf in zip(best.frames, best.durations, best.frames[1:]))
    assert math.isfinite(best.score)


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("beam", [0, -1, 2.5, True])
def test_beam_size_must_be_a_positive_integer(beam):
    with pytest.raises(ValueError, match="beam_size"):
        decode_tables([PRUNE], 2, beam_size=beam)


def test_max_symbols_must_be_positive_or_none():
    with pytest.raises(ValueError, match="max_symbols"):
        decode_tables([PRUNE], 2, max_symbols=0)


@pytest.mark.parametrize("durations,match", [
    ((0,), "no positive"), ((0, 0), "repeat"), ((-1, 1, 2), "negative"), ((0, 1, 1), "repeat"),
    ((), "empty"), ((0, 1.5), "integer"),
])
def test_malformed_duration_tables(durations, match):
    table = torch.zeros(2, 3, 3 + len(durations))
    with pytest.raises(ValueError, match=match):
        decode_tables([table], 2, durations)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("durations", [None, (0, 1, 2)])
def test_non_finite_log_probabilities(bad, durations):
    width = 3 + (3 if durations else 0)
    table = torch.zeros(4, 3, width)
    table[2, 2, 1] = bad  # read: frame 2, context start (the blank path gets there)
    table[..., 2] += 3.0
    with pytest.raises(ValueError, match="non-finite"):
        decode_tables([table], 2, durations, beam_size=2)


def test_lengths_are_checked():
    enc = torch.zeros(1, 3, 1)
    st = table_steps(torch.zeros(3, 3, 3), 2)
    with pytest.raises(ValueError, match="lengths"):
        malsd_batch(enc, torch.tensor([4]), st)
    with pytest.raises(ValueError, match="lengths"):
        malsd_batch(enc, torch.tensor([3, 3]), st)

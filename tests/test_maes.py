"""search.maes: modified adaptive expansion search (NeMo's `maes` for TDT and RNN-T).

Parity: NeMo 3.0.0's N-best lists (tests/references/nemo_beam/, made by
tools/nemo_beam_reference.py) replayed on NeMo's own encoder frames: the same token sequences in
the same order, the same number of hypotheses, frames and durations that give NeMo's timestamps,
scores within 1e-4. Why 1e-4: a score is a float64 sum of ~140-280 float32 log-probabilities (a
blank or label per frame over ~140 frames, plus prefix-search terms), each carrying its own float32
rounding (our predictor runs batched over a step's hypotheses, NeMo's one cached sequence at a time,
and matrix products block differently); measured differences are <= 7e-6, while the references'
neighbouring hypotheses differ by >= 1.4e-5 in normalized score and >= 2e-3 in raw score.

The model-independent tests run on hand-written tables: a "model" whose predictor state is the last
token and whose joint looks the logits up by (frame, last token), so each score below is written
down from the table.
"""
from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from transcribe.search import hotwords
from transcribe.search.maes import MaesOptions, maes
from transcribe.search.steps import TransducerSteps

from . import beam_refs as br

NEG = -20.0


@pytest.fixture(autouse=True)
def one_thread():
    """The search's steps are tiny tensor operations over a handful of hypotheses, where OpenMP
    hand-offs between threads (on a shared machine) would cost more than the work."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# -- a table model ----------------------------------------------------------------------------
def table_steps(table: torch.Tensor, durations=None) -> TransducerSteps:
    """table [frames, contexts = V+1 (blank: start of sequence), V+1(+D)] of logits; the blank is the
    last token; encoder frame t is the number t."""
    blank = table.shape[1] - 1

    def predict(labels, state):
        return labels.to(table.dtype)[:, None], labels.clone()

    def joint(enc, pred):
        return table[enc[..., 0].long(), pred[..., 0].long()]

    return TransducerSteps(predict, joint, lambda n: torch.full((n,), blank, dtype=torch.long),
                           lambda s, idx: s.index_select(0, idx), lambda ss: torch.cat(list(ss)), blank,
                           tuple(durations) if durations is not None else None)


def frames(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32)[:, None]


def run(table, durations=None, **kw):
    knobs = {k: kw.pop(k) for k in ("num_steps", "prefix_alpha", "expansion_beta", "expansion_gamma") if k in kw}
    return maes(frames(table.shape[0]), table.shape[0], table_steps(table, durations), options=MaesOptions(**knobs), **kw)


def blank_table(n_frames: int, n_labels: int, n_durations: int = 0) -> torch.Tensor:
    """Every row: blank certain (logit 0, labels NEG), durations uniform."""
    t = torch.full((n_frames, n_labels + 1, n_labels + 1 + n_durations), NEG)
    t[:, :, n_labels] = 0.0
    t[:, :, n_labels + 1:] = 0.0
    return t


def lsm(row) -> torch.Tensor:
    return torch.log_softmax(torch.as_tensor(row, dtype=torch.float32), dim=-1)


def lp(table, t, ctx, tok, n_tok):
    """float32 log-prob of token `tok` (TDT: among the tokens only) at frame t after `ctx`."""
    return float(lsm(table[t, ctx, :n_tok])[tok])


def ld(table, t, ctx, d_idx, n_tok):
    return float(lsm(table[t, ctx, n_tok:])[d_idx])


def logaddexp(a, b):
    return max(a, b) + math.log1p(math.exp(-abs(a - b)))


# -- parity with NeMo -----------------------------------------------------------------------------
TRANSDUCERS = [("tiny-tdt-fit", "tdt"), ("tiny-rnnt-fit", "rnnt"), ("tiny-hybrid-tdt-ctc-fit", "tdt"),
               ("tiny-tdt-random", "tdt")]
RUNS = [(stem, head, i) for stem, head in TRANSDUCERS for i in range(len(br.runs(stem, head, "maes")))]


def test_references_cover_both_settings():
    assert len(RUNS) == 16
    opts = {(r["beam_size"], tuple(sorted(r["options"].items()))) for stem, head in TRANSDUCERS
            for r in br.runs(stem, head, "maes")}
    assert opts == {
        (4, (("maes_expansion_beta", 2), ("maes_expansion_gamma", 2.3), ("maes_num_steps", 2), ("maes_prefix_alpha", 1))),
        (2, (("maes_expansion_beta", 1), ("maes_expansion_gamma", 4.0), ("maes_num_steps", 3), ("maes_prefix_alpha", 2))),
    }


@pytest.mark.parametrize("stem,head,i", RUNS)
def test_nemo_parity(stem, head, i):
    r = br.runs(stem, head, "maes")[i]
    o = r["options"]
    enc = br.projected(stem, r["clip"])
    knobs = MaesOptions(num_steps=o["maes_num_steps"], prefix_alpha=o["maes_prefix_alpha"],
                        expansion_beta=o["maes_expansion_beta"], expansion_gamma=o["maes_expansion_gamma"])
    nbest = maes(enc, enc.shape[0], br.steps(stem), beam_size=r["beam_size"], options=knobs, score_norm=r["score_norm"])
    ref = r["hypotheses"]
    assert [h.ids for h in nbest] == [h["tokens"] for h in ref]
    for ours, theirs in zip(nbest, ref):
        assert ours.score == pytest.approx(theirs["score"], abs=1e-4)
        assert ours.normalized_score == pytest.approx(ours.score / (len(ours.ids) + 1), abs=1e-12)
        if head == "tdt":
            # NeMo's TDT mAES timestamp is the emission frame plus the label's duration.
            assert [f + d for f, d in zip(ours.frames, ours.durations)] == theirs["timestamp"]
        else:
            # NeMo's RNN-T mAES timestamp is the emission frame.
            assert ours.frames == theirs["timestamp"]
            assert ours.durations == [1] * len(ours.ids)


# -- prefix search --------------------------------------------------------------------------------
def test_prefix_search_rnnt():
    # Labels 0..3, blank 4. Frame 0: from the start, label 0 and blank are equally likely; after 0,
    # blank is certain. So after frame 0 the beam holds [] and [0]. At frame 1 only blank passes gamma,
    # and the prefix search adds to [0] the path [] -> 0 at frame 1.
    V, B = 4, 4
    tab = blank_table(2, V)
    tab[0, B, 0] = 0.0
    tab[1, B, 0] = -3.0
    s_empty = lp(tab, 0, B, B, 5)
    s_0 = lp(tab, 0, B, 0, 5) + lp(tab, 0, 0, B, 5)
    kw = dict(beam_size=2, expansion_beta=1, expansion_gamma=1.0, num_steps=2, score_norm=False)
    without = run(tab, prefix_alpha=0, **kw)
    with_ = run(tab, prefix_alpha=1, **kw)
    expected_0 = logaddexp(s_0, s_empty + lp(tab, 1, B, 0, 5)) + lp(tab, 1, 0, B, 5)
    assert {tuple(h.ids): h.score for h in with_}[(0,)] == pytest.approx(expected_0, abs=1e-6)
    assert {tuple(h.ids): h.score for h in without}[(0,)] == pytest.approx(s_0 + lp(tab, 1, 0, B, 5), abs=1e-6)
    # the prefix itself is not changed
    for nb in (with_, without):
        assert {tuple(h.ids): h.score for h in nb}[()] == pytest.approx(s_empty + lp(tab, 1, B, B, 5), abs=1e-6)
    assert [h.frames for h in with_ if h.ids] == [[0]]


def test_prefix_search_tdt_uses_zero_duration():
    # Durations (0, 1). Frame 0 from the start: label 0 and blank equally likely, duration 0 likelier.
    # Blank with duration 0 moves one frame (NeMo), scored with duration 0's log-prob; label 0 stays
    # on the frame and is closed by a blank of duration 1. At frame 1 the prefix search adds the
    # path [] -> 0 with duration 0.
    V, B, N = 4, 4, 5
    tab = blank_table(2, V, 2)
    tab[0, B, 0] = 0.0
    tab[0, B, N:] = torch.tensor([3.0, 0.0])
    tab[0, 0, N:] = torch.tensor([0.0, 5.0])
    tab[1, B, :N] = torch.tensor([0.0, NEG, NEG, NEG, 3.0])
    tab[1, :, N:] = torch.tensor([2.0, 5.0])
    s_empty = lp(tab, 0, B, B, N) + ld(tab, 0, B, 0, N)
    s_0 = lp(tab, 0, B, 0, N) + ld(tab, 0, B, 0, N) + lp(tab, 0, 0, B, N) + ld(tab, 0, 0, 1, N)
    prefix = s_empty + float(lsm(tab[1, B, :N])[0] + lsm(tab[1, B, N:])[0])
    kw = dict(beam_size=2, expansion_beta=1, expansion_gamma=1.0, num_steps=2, score_norm=False)
    with_ = {tuple(h.ids): h for h in run(tab, (0, 1), prefix_alpha=1, **kw)}
    without = {tuple(h.ids): h for h in run(tab, (0, 1), prefix_alpha=0, **kw)}
    close_0 = lp(tab, 1, 0, B, N) + ld(tab, 1, 0, 1, N)
    assert with_[(0,)].score == pytest.approx(logaddexp(s_0, prefix) + close_0, abs=1e-6)
    assert without[(0,)].score == pytest.approx(s_0 + close_0, abs=1e-6)
    assert with_[()].score == pytest.approx(s_empty + lp(tab, 1, B, B, N) + ld(tab, 1, B, 1, N), abs=1e-6)
    assert (with_[(0,)].frames, with_[(0,)].durations) == ([0], [0])


def test_tdt_without_zero_duration_skips_prefix_search():
    # NeMo runs the TDT prefix search only when 0 is a duration; with (1, 2) a label always leaves
    # the frame. Two frames; after frame 0 the beam holds [] and [0], both due at frame 1.
    V, B, N = 4, 4, 5
    tab = blank_table(2, V, 2)
    tab[0, B, 0] = 0.0
    tab[:, :, N:] = torch.tensor([0.0, NEG])
    tab[1, B, 0] = -3.0
    kw = dict(beam_size=2, expansion_beta=1, expansion_gamma=1.0, num_steps=2, score_norm=False)
    a = run(tab, (1, 2), prefix_alpha=1, **kw)
    b = run(tab, (1, 2), prefix_alpha=0, **kw)
    assert [(h.ids, h.score) for h in a] == [(h.ids, h.score) for h in b]
    assert sorted(h.ids for h in a) == [[], [0]]


def test_tdt_blank_of_duration_zero_merges_with_duration_one():
    # NeMo: a blank with duration 0 moves by the smallest positive duration, so (blank, 0) and
    # (blank, 1) reach the same hypothesis and are merged: log(p0 + p1) of the durations = 0 here.
    V, B, N = 4, 4, 5
    tab = blank_table(1, V, 2)
    tab[0, B, :N] = torch.tensor([NEG, NEG, NEG, NEG, 5.0])
    nbest = run(tab, (0, 1), beam_size=2, expansion_beta=1, expansion_gamma=1.0)
    assert len(nbest) == 1 and nbest[0].ids == []
    assert nbest[0].score == pytest.approx(lp(tab, 0, B, B, N), abs=1e-6)


# -- gamma, num_steps, score_norm --------------------------------------------------------------
def test_gamma_prunes_candidates_by_value():
    V, B = 4, 4
    tab = blank_table(1, V)
    tab[0, B, :5] = torch.tensor([0.0, -1.5, NEG, NEG, 0.3])
    kw = dict(beam_size=3, expansion_beta=1, num_steps=2)
    # gamma 1: label 1 (1.8 below blank) is pruned; gamma 2: it is kept
    assert sorted(h.ids for h in run(tab, expansion_gamma=1.0, **kw)) == [[], [0]]
    assert sorted(h.ids for h in run(tab, expansion_gamma=2.0, **kw)) == [[], [0], [1]]
    tdt = blank_table(1, V, 2)
    tdt[0, B, :5] = torch.tensor([0.0, -1.5, NEG, NEG, 0.3])
    tdt[0, :, 5:] = torch.tensor([NEG, 0.0])
    assert sorted(h.ids for h in run(tdt, (0, 1), expansion_gamma=1.0, **kw)) == [[], [0]]
    assert sorted(h.ids for h in run(tdt, (0, 1), expansion_gamma=2.0, **kw)) == [[], [0], [1]]


def chain_table(n_durations=0):
    """One frame where 0 follows the start, 1 follows 0, 2 follows 1, then blank: labels want to
    stay on the frame (TDT: duration 0)."""
    V, B = 4, 4
    tab = torch.full((1, V + 1, V + 1 + n_durations), NEG)
    tab[0, B, 0] = 10.0
    tab[0, 0, 1] = 10.0
    tab[0, 1, 2] = 10.0
    tab[0, 2, B] = 10.0
    tab[0, 3, B] = 10.0
    if n_durations:
        tab[0, :, V + 1:] = 0.0
        tab[0, :, V + 1] = 4.0  # duration 0 likeliest everywhere
    return tab


@pytest.mark.parametrize("num_steps,expected", [(1, [0]), (2, [0, 1]), (3, [0, 1, 2]), (4, [0, 1, 2])])
def test_num_steps_bounds_labels_per_frame_rnnt(num_steps, expected):
    tab = chain_table()
    best = run(tab, beam_size=1, expansion_beta=1, expansion_gamma=1.0, num_steps=num_steps)[0]
    assert best.ids == expected and best.frames == [0] * len(expected)
    # the last round closes the frame with a blank whatever its probability
    n = len(expected)
    want = sum(lp(tab, 0, c, k, 5) for c, k in zip([4] + expected, expected)) + lp(tab, 0, expected[-1], 4, 5)
    assert best.score == pytest.approx(want, abs=1e-5) and n <= num_steps


@pytest.mark.parametrize("num_steps,expected", [(1, [0]), (2, [0, 1]), (3, [0, 1, 2])])
def test_num_steps_bounds_zero_duration_labels_tdt(num_steps, expected):
    tab = chain_table(n_durations=3)
    best = run(tab, (0, 1, 2), beam_size=1, expansion_beta=1, expansion_gamma=1.0, num_steps=num_steps)[0]
    assert best.ids == expected
    assert best.frames == [0] * len(expected) and best.durations == [0] * len(expected)
    # NeMo: the closing blank takes the likeliest duration (0 here), replaced by the smallest positive
    # one, 1, and scored with the log-prob of duration 1.
    n_tok = 5
    want = sum(lp(tab, 0, c, k, n_tok) + ld(tab, 0, c, 0, n_tok) for c, k in zip([4] + expected, expected))
    want += lp(tab, 0, expected[-1], 4, n_tok) + ld(tab, 0, expected[-1], 1, n_tok)
    assert best.score == pytest.approx(want, abs=1e-5)


def test_score_norm_ranks_by_score_per_token():
    V, B = 4, 4
    tab = blank_table(1, V)
    tab[0, B, 0] = -0.3
    raw = run(tab, beam_size=2, expansion_beta=1, score_norm=False)
    norm = run(tab, beam_size=2, expansion_beta=1, score_norm=True)
    assert [h.ids for h in raw] == [[], [0]]
    assert [h.ids for h in norm] == [[0], []]
    assert raw[0].score > raw[1].score
    assert norm[0].normalized_score > norm[1].normalized_score
    for h in norm:
        assert h.normalized_score == pytest.approx(h.score / (len(h.ids) + 1))
    assert sorted((h.ids, h.score) for h in raw) == sorted((h.ids, h.score) for h in norm)


def test_empty_input():
    tab = blank_table(3, 6)
    for durations, t in ((None, tab), ((0, 1), blank_table(3, 6, 2))):
        out = maes(frames(3), 0, table_steps(t, durations))
        assert len(out) == 1 and out[0].ids == [] and out[0].score == 0.0 and out[0].normalized_score == 0.0


def test_beam_limits_the_list():
    g = torch.Generator().manual_seed(3)
    tab = torch.randn(20, 7, 7 + 3, generator=g)
    for beam in (1, 2, 4):
        for durations, t in ((None, tab[..., :7].contiguous()), ((0, 1, 2), tab)):
            out = run(t, durations, beam_size=beam, expansion_beta=2, expansion_gamma=3.0)
            assert 1 <= len(out) <= beam
            key = [h.normalized_score for h in out]
            assert key == sorted(key, reverse=True)
            assert all(len(h.frames) == len(h.ids) == len(h.durations) for h in out)
            assert all(a <= b for h in out for a, b in zip(h.frames, h.frames[1:]))


# -- validation ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,match", [
    (dict(beam_size=0), "beam_size"),
    (dict(num_steps=0), "maes_num_steps"),
    (dict(prefix_alpha=-1), "maes_prefix_alpha"),
    (dict(expansion_beta=-1), "maes_expansion_beta"),
    (dict(expansion_gamma=-0.5), "maes_expansion_gamma"),
    (dict(expansion_gamma=float("nan")), "maes_expansion_gamma"),
    (dict(beam_size=3, expansion_beta=2), "vocabulary size"),
])
def test_bad_options(kw, match):
    with pytest.raises(ValueError, match=match):
        run(blank_table(2, 4), **kw)


@pytest.mark.parametrize("durations,match", [
    ((0,), "positive"), ((-1, 1), "negative"), ((1, 1), "distinct"),
])
def test_bad_durations(durations, match):
    with pytest.raises(ValueError, match=match):
        run(blank_table(2, 6, len(durations)), durations)


@pytest.mark.parametrize("durations", [None, (0, 1)])
def test_non_finite_logits(durations):
    tab = blank_table(3, 4, 0 if durations is None else 2)
    tab[1, 4, 4] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        run(tab, durations, beam_size=2, expansion_beta=1)


def test_bad_shapes():
    with pytest.raises(ValueError, match=r"\[T, H\]"):
        maes(frames(3)[None], 3, table_steps(blank_table(3, 4)))
    with pytest.raises(ValueError, match="length"):
        maes(frames(3), 4, table_steps(blank_table(3, 4)))


# -- long input ------------------------------------------------------------------------------------
def test_thirty_minutes_tdt_terminates():
    """22500 frames (30 min at 80 ms) of a random table where, in every period of 101 frames, 20
    frames make every context want labels of duration 0 (a model stuck on a frame): the rounds per
    frame (num_steps) bound them, and the search ends. Elsewhere long durations are likely."""
    g = torch.Generator().manual_seed(0)
    V, P, T = 6, 101, 22500
    tab = torch.randn(P, V + 1, V + 1 + 5, generator=g) * 2
    tab[20:, :, V + 1 + 4] += 3.0
    tab[:20, :, V] -= 10.0
    tab[:20, :, V + 1] += 12.0
    enc = (torch.arange(T) % P).float()[:, None]
    out = maes(enc, T, table_steps(tab, (0, 1, 2, 3, 4)), beam_size=4, options=MaesOptions(num_steps=2))
    assert 1 <= len(out) <= 4
    for h in out:
        per_frame = Counter(h.frames)
        assert max(per_frame.values()) == 2
        assert sum(1 for f, n in per_frame.items() if n == 2 and f % P < 20) > 3000
        assert all(0 <= f < T for f in h.frames)


def test_long_rnnt_bounds_labels_per_frame():
    g = torch.Generator().manual_seed(1)
    V, P, T = 6, 53, 600
    tab = torch.randn(P, V + 1, V + 1, generator=g) * 2
    tab[::5, :, V] -= 10.0  # labels everywhere on every 5th row
    enc = (torch.arange(T) % P).float()[:, None]
    out = maes(enc, T, table_steps(tab), beam_size=4, options=MaesOptions(num_steps=3))
    for h in out:
        assert max(Counter(h.frames).values()) == 3


# -- hotwords --------------------------------------------------------------------------------------
def test_hotword_flips_the_winner_exactly_past_the_acoustic_gap():
    V, B = 4, 4
    for durations in (None, (0, 1)):
        tab = blank_table(2, V, 0 if durations is None else 2)
        tab[0, B, :5] = torch.tensor([1.0, 0.4, NEG, NEG, -1.0])
        if durations is not None:
            tab[:, :, 5:] = torch.tensor([NEG, 0.0])
        kw = dict(beam_size=3, expansion_beta=1, expansion_gamma=4.0, score_norm=False)
        base = {tuple(h.ids): h.score for h in run(tab, durations, **kw)}
        gap = base[(0,)] - base[(1,)]
        assert gap > 0.1 and run(tab, durations, **kw)[0].ids == [0]
        for w, winner in ((gap - 1e-3, [0]), (gap + 1e-3, [1])):
            trie = hotwords.HotwordTrie([[1]], weight=w, n_tokens=V)
            out = run(tab, durations, hotwords=trie, **kw)
            assert out[0].ids == winner
            boosted = {tuple(h.ids): h.score for h in out}
            assert boosted[(1,)] == pytest.approx(base[(1,)] + w, abs=1e-5)
            assert boosted[(0,)] == pytest.approx(base[(0,)], abs=1e-6)
        # a partial match left at the end is taken back by `final`
        trie = hotwords.HotwordTrie([[1, 2]], weight=5.0, n_tokens=V)
        out = {tuple(h.ids): h.score for h in run(tab, durations, hotwords=trie, **kw)}
        assert out[(1,)] == pytest.approx(base[(1,)], abs=1e-5)

"""The default TDT and RNN-T beams (search/transducer_beam.py): parity with NeMo's N-best lists on
the tiny models, and model-independent checks on hand-written tables (tests/table_steps.py)."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from . import beam_refs
import transcribe.search.transducer_beam as tb
from transcribe.search import transducer
from .table_steps import table_steps, uniform_table

# Scores: NeMo sums float32 log-probabilities (TDT) over at most ~140 frames; our joint runs the
# same float32 arithmetic in another order, which moves each log-prob by ~1e-6 at most, so the
# sums agree within 1e-4 (measured: <= 6e-5, on the random model's -140 scores where one float32
# ulp is 1.5e-5).
SCORE_TOL = 1e-4


def _cases():
    out = []
    for stem in beam_refs.STEMS:
        for head in ("tdt", "rnnt"):
            for i, r in enumerate(beam_refs.runs(stem, head, "beam")):
                out.append(pytest.param(stem, head, i, id=f"{stem}-{head}-{r['clip']}-b{r['beam_size']}-{'norm' if r['score_norm'] else 'raw'}"))
    return out


_LIFTED: dict = {}


def _search(head, enc, steps, run, **kw):
    if head == "tdt":
        # NeMo's blank fallback at beam 1 (the smallest positive duration); ours differs on purpose,
        # see test_beam1_blank_takes_the_best_positive_duration.
        return tb.tdt_beam(enc, enc.shape[0], steps, beam_size=run["beam_size"], score_norm=run["score_norm"],
                           blank_fallback="smallest", **kw)
    return tb.rnnt_beam(enc, enc.shape[0], steps, beam_size=run["beam_size"], score_norm=run["score_norm"], **kw)


@pytest.mark.parametrize("stem,head,index", _cases())
def test_default_beam_matches_nemo(stem, head, index, monkeypatch):
    run = beam_refs.runs(stem, head, "beam")[index]
    want = run["hypotheses"]
    enc = beam_refs.projected(stem, run["clip"])
    steps = beam_refs.steps(stem)
    pathological = len(want) > 64 * run["beam_size"]
    if pathological:
        # NeMo never prunes its list of finished hypotheses while a frame ends early: on the random
        # model it grows to 2159 for this clip, through ~1300 expansions on one frame. Our search
        # caps a frame's expansions at MAX_POPS_PER_BEAM * beam (a bound NeMo lacks); lifted, it
        # reproduces NeMo's whole list.
        got_capped = _search(head, enc, steps, run)
        assert len(got_capped) <= tb.MAX_POPS_PER_BEAM * run["beam_size"] * 2
        monkeypatch.setattr(tb, "MAX_POPS_PER_BEAM", 10**6)
        # The search does not depend on score_norm (only the final ranking does): one run serves both.
        key = (stem, run["clip"], run["beam_size"])
        if key not in _LIFTED:
            _LIFTED[key] = _search(head, enc, steps, run)
        got = sorted(_LIFTED[key], key=lambda d: d.normalized_score if run["score_norm"] else d.score, reverse=True)
    if head == "rnnt" and run["beam_size"] == 1:
        # NeMo's RNN-T beam 1 is its greedy search (at most 5 symbols a frame; the score sums the
        # tokens' log-probs, blanks left out), and so is ours: the recognizer runs the greedy search.
        lengths = torch.tensor([enc.shape[0]])
        (g,) = transducer.greedy_batch(enc[None], lengths, replace(steps, durations=None, max_symbols=5),
                                       confidence=None)
        assert g.ids == want[0]["tokens"] and g.frames == want[0]["timestamp"]
        assert g.score == pytest.approx(want[0]["score"], abs=SCORE_TOL)
        return
    if not pathological:
        got = _search(head, enc, steps, run)
    assert len(got) == len(want)
    key = "normalized_score" if run["score_norm"] else "score"
    for rank, (g, w) in enumerate(zip(got, want)):
        assert g.score == pytest.approx(w["score"], abs=SCORE_TOL)
        if g.ids != w["tokens"]:
            # Only where hypotheses tie within float32 rounding may their order differ (seen only in
            # the random model's 2159-long list): NeMo's hypothesis at this rank is one of ours, with
            # its score, and ranks by the same value as ours here.
            assert pathological, f"rank {rank}: tokens differ"
            twin = [o for o in got if o.ids == w["tokens"] and abs(o.score - w["score"]) < SCORE_TOL]
            assert twin and abs(getattr(twin[0], key) - getattr(g, key)) < SCORE_TOL
            continue
        if head == "tdt":
            # NeMo's default TDT beam records time + duration as the token's timestamp.
            assert [f + d for f, d in zip(g.frames, g.durations)] == w["timestamp"]
        else:
            assert g.frames == w["timestamp"] and g.durations == [1] * len(g.ids)
    norm = [getattr(g, key) for g in got]
    assert norm == sorted(norm, reverse=True)


# ---------------------------------------------------------------------------------------------
# Hand-written tables


def test_beam1_blank_takes_the_best_positive_duration():
    """Durations [0, 1, 2, 3]: duration 0 ranks first, duration 1 is the smallest legal one and
    duration 2 the best legal one. At beam 1 only duration 0 is in the duration beam: blank takes
    2 (NeMo takes 1). The frame where the next token is emitted shows which."""
    vocab, durs = 3, [0, 1, 2, 3]
    tab = uniform_table(4, vocab, len(durs), fill=-10.0)
    tab[:, :, vocab] = 5.0  # blank dominates every frame ...
    tab[:, :, vocab + 1 :] = torch.tensor([3.0, 0.0, 1.0, -1.0])  # ... with duration 0, then 2, then 1
    tab[1, vocab, 0] = 20.0  # token 0 is certain at frame 1,
    tab[2, vocab, 1] = 20.0  # token 1 at frame 2
    tab[1:3, vocab, vocab + 1 :] = torch.tensor([-5.0, 5.0, 0.0, 0.0])  # and lasts one frame
    enc, steps = table_steps(tab, vocab, durs)
    best = tb.tdt_beam(enc, 4, steps, beam_size=1)
    assert best[0].ids[:1] == [1] and best[0].frames[:1] == [2]
    nemo = tb.tdt_beam(enc, 4, steps, beam_size=1, blank_fallback="smallest")
    assert nemo[0].ids[:1] == [0] and nemo[0].frames[:1] == [1]


def _blank_only_table(durs, blank_logp_rows, dur_rows, vocab=3):
    tab = uniform_table(len(blank_logp_rows), vocab, len(durs), fill=-30.0)
    for t, (b, d) in enumerate(zip(blank_logp_rows, dur_rows)):
        tab[t, :, vocab] = b
        tab[t, :, vocab + 1 :] = torch.tensor(d)
    return table_steps(tab, vocab, durs)


def test_merging_sums_the_paths_to_the_same_frame():
    """Tokens are all but impossible: the hypotheses are blank paths. Paths that reach the same
    frame with the same (empty) tokens merge: the score is the log of the summed probabilities."""
    durs = [1, 2]
    dur_rows = [[0.0, -0.5], [0.3, 0.0], [0.0, 0.0]]
    enc, steps = _blank_only_table(durs, [0.0, 0.0, 0.0], dur_rows)
    got = tb.tdt_beam(enc, 3, steps, beam_size=3, score_norm=False)
    lp = [torch.log_softmax(torch.tensor([-30.0] * 3 + [0.0]), 0)[3].item()] * 3
    dl = [torch.log_softmax(torch.tensor(r), 0).tolist() for r in dur_rows]
    a1 = lp[0] + dl[0][0]
    a2 = math.log(math.exp(a1 + lp[1] + dl[1][0]) + math.exp(lp[0] + dl[0][1]))
    a3 = math.log(math.exp(a1 + lp[1] + dl[1][1]) + math.exp(a2 + lp[2] + dl[2][0]))
    a4 = a2 + lp[2] + dl[2][1]
    empty = sorted((g.score for g in got if not g.ids), reverse=True)
    assert empty[:2] == pytest.approx(sorted([a3, a4], reverse=True), abs=1e-5)


def test_score_norm_ranks_by_score_per_token_counting_the_sentinel():
    """Two finished hypotheses: a long one with the better score per token and a short one with
    the better total. score_norm ranks the long one first; without it, the short one."""
    vocab = 3
    tab = uniform_table(2, vocab, 0, fill=-30.0)
    # frame 0: blank (p ~ 0.6) or token 0 (p ~ 0.4) then token 1 ...
    tab[0, vocab, vocab] = 0.0
    tab[0, vocab, 0] = math.log(0.4 / 0.6)
    tab[0, 0, 1] = 0.0  # after token 0, token 1 is certain on the same frame
    tab[0, 1, vocab] = 0.0  # then blank
    tab[0, 0, vocab] = -30.0
    tab[1, :, vocab] = 0.0  # frame 1: blank everywhere
    enc, steps = table_steps(tab, vocab)
    raw = tb.rnnt_beam(enc, 2, steps, beam_size=2, score_norm=False)
    norm = tb.rnnt_beam(enc, 2, steps, beam_size=2, score_norm=True)
    assert {tuple(h.ids) for h in raw} == {(), (0, 1)}
    assert raw[0].ids == [] and norm[0].ids == [0, 1]
    for h in norm:
        assert h.normalized_score == pytest.approx(h.score / (len(h.ids) + 1))


def test_pruning_keeps_beam_hypotheses_per_frame():
    vocab = 5
    g = torch.Generator().manual_seed(0)
    tab = torch.randn(30, vocab + 1, vocab + 1, generator=g) * 2
    enc, steps = table_steps(tab, vocab)
    for beam in (1, 2, 3):
        got = tb.rnnt_beam(enc, 30, steps, beam_size=beam, score_norm=False)
        assert 1 <= len(got) <= 30 * beam + beam
        scores = [h.score for h in got]
        assert scores == sorted(scores, reverse=True)
    # a wider beam never finds a worse best hypothesis on this table
    assert tb.rnnt_beam(enc, 30, steps, beam_size=3, score_norm=False)[0].score >= \
        tb.rnnt_beam(enc, 30, steps, beam_size=1, score_norm=False)[0].score - 1e-9


@pytest.mark.parametrize("durs,msg", [([0], "no positive"), ([0, -1, 2], "negative"), ([0, 1, 1], "duplicate"), ([], "empty")])
def test_malformed_duration_tables_are_refused(durs, msg):
    tab = uniform_table(2, 3, max(1, len(durs)))
    enc, steps = table_steps(tab, 3, durs)
    with pytest.raises(ValueError, match=msg):
        tb.tdt_beam(enc, 2, steps)


def test_non_finite_log_probabilities_are_refused():
    tab = uniform_table(3, 3, 2)
    tab[1, :, 0] = float("nan")
    enc, steps = table_steps(tab, 3, [0, 1])
    with pytest.raises(ValueError, match="non-finite"):
        tb.tdt_beam(enc, 3, steps)
    tab = uniform_table(3, 3)
    tab[2, :, 1] = float("inf")
    enc, steps = table_steps(tab, 3)
    with pytest.raises(ValueError, match="non-finite"):
        tb.rnnt_beam(enc, 3, steps)


def test_bad_arguments_are_refused():
    enc, steps = table_steps(uniform_table(2, 3, 2), 3, [0, 1])
    with pytest.raises(ValueError, match="beam_size"):
        tb.tdt_beam(enc, 2, steps, beam_size=0)
    with pytest.raises(ValueError, match="blank_fallback"):
        tb.tdt_beam(enc, 2, steps, blank_fallback="nearest")
    with pytest.raises(ValueError, match="RNN-T"):
        tb.tdt_beam(enc, 2, table_steps(uniform_table(2, 3), 3)[1])
    with pytest.raises(ValueError, match="TDT"):
        tb.rnnt_beam(enc, 2, steps)


def test_a_saturated_zero_duration_token_does_not_loop():
    """A token of probability 1 with duration 0 on every frame: each expansion leaves the score
    unchanged, so nothing ends a frame but the bound of max_symbols tokens per frame."""
    vocab, durs = 2, [0, 1]
    tab = uniform_table(5, vocab, 2, fill=-200.0)
    tab[:, :, 0] = 200.0  # token 0 certain, with duration 0 certain
    tab[:, :, vocab + 1] = 200.0
    enc, steps = table_steps(tab, vocab, durs)
    got = tb.tdt_beam(enc, 5, replace(steps, max_symbols=4), beam_size=2)
    assert got and all(h.ids.count(0) <= 4 * 5 for h in got)
    got = tb.rnnt_beam(enc, 5, replace(table_steps(tab[:, :, : vocab + 1].contiguous(), vocab)[1], max_symbols=3),
                       beam_size=2)
    assert got and all(len(h.ids) <= 3 * 5 for h in got)


def test_long_input_of_frames_decodes_without_error():
    """3,000 encoder frames (4 min at 80 ms), a table that mixes ordinary frames with frames
    whose duration-0 token saturates: the TDT beam finishes with timestamps inside the input.
    The bounds that end a saturated frame (max_symbols tokens, MAX_POPS_PER_BEAM * beam
    expansions) act per frame and the search has no threshold on the input's length; the table
    repeats every 16 frames, so 3,000 frames meet a saturated frame 600 times (a loop there would
    hang on the first) and 3,000 frames are past Python's recursion limit (1,000) for anything
    recursive per frame. 30 minutes (22,500 frames) ran the same frames 7.5 times over."""
    n, vocab, durs = 3000, 4, [0, 1, 2, 3, 4]
    g = torch.Generator().manual_seed(1)
    base = torch.randn(16, vocab + 1, vocab + 1 + len(durs), generator=g)
    base[:, :, vocab] += 2.0  # mostly blank, as speech is
    base[::5, :, 1] = 60.0  # every fifth pattern row: token 1 certain ...
    base[::5, :, vocab + 1] = 60.0  # ... with duration 0 certain
    frames = torch.arange(n) % 16
    enc = torch.nn.functional.one_hot(frames, 16).float()
    _, steps = table_steps(base, vocab, durs)
    got = tb.tdt_beam(enc, n, replace(steps, max_symbols=3), beam_size=2)
    best = got[0]
    assert best.ids and all(0 <= f < n for f in best.frames)
    assert best.frames == sorted(best.frames)

"""CTC forced alignment (search.ctc.forced_align): hand-built tables with known answers, agreement
with an exhaustive search over every label path on small tables and with a plain per-state dynamic
programme on larger ones, path properties, agreement with greedy CTC on peaky tables, and errors."""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
import torch

from transcribe.search.ctc import Alignment, Run, collapse, forced_align, greedy

NEG = math.log(1e-4)


def _table(rows: list[list[float]]) -> torch.Tensor:
    """Probabilities per frame -> float64 log-probs (each row normalized)."""
    p = torch.tensor(rows, dtype=torch.float64)
    return (p / p.sum(dim=1, keepdim=True)).log()


def _random_logp(gen: torch.Generator, frames: int, vocab: int, scale: float = 2.0) -> torch.Tensor:
    return (torch.randn(frames, vocab, generator=gen, dtype=torch.float64) * scale).log_softmax(-1)


def _labels(al: Alignment, ids: list[int], blank: int, frames: int) -> list[int]:
    """The label of each frame on the path the alignment implies."""
    out = [blank] * frames
    for k, s, e in zip(ids, al.starts, al.ends):
        out[s:e] = [k] * (e - s)
    return out


def _collapse(labels, blank: int) -> tuple:
    return tuple(k for k, _ in itertools.groupby(labels) if k != blank)


def _path_score(logp: torch.Tensor, labels: list[int]) -> float:
    return float(sum(logp[t, k] for t, k in enumerate(labels)))


def _check_alignment(al: Alignment, logp: torch.Tensor, ids: list[int], blank: int) -> None:
    """Every property an alignment must have, recomputed from the table."""
    frames = logp.shape[0]
    n = len(ids)
    assert len(al.starts) == len(al.ends) == len(al.logprobs) == len(al.confidences) == n
    for i in range(n):
        assert 0 <= al.starts[i] < al.ends[i] <= frames
        if i:
            assert al.ends[i - 1] <= al.starts[i]
            if ids[i] == ids[i - 1]:
                assert al.ends[i - 1] < al.starts[i], "equal neighbours need a blank between them"
    labels = _labels(al, ids, blank, frames)
    assert _collapse(labels, blank) == tuple(ids)
    assert al.score == pytest.approx(_path_score(logp, labels), abs=1e-6)
    for i in range(n):
        run = logp[al.starts[i]:al.ends[i], ids[i]].double()
        assert al.logprobs[i] == pytest.approx(float(run.sum()), abs=1e-6)
        assert al.confidences[i] == pytest.approx(math.exp(float(run.mean())), rel=1e-9)
        assert 0.0 < al.confidences[i] <= 1.0


# ---------------------------------------------------------------- hand-built tables


def test_peak_at_known_frames():
    # blank 0; token 2 is likely on frames 3 and 4, blank elsewhere.
    rows = [[0.9, 0.05, 0.05]] * 8
    rows[3] = rows[4] = [0.1, 0.1, 0.8]
    logp = _table(rows)
    al = forced_align(logp, [2], blank=0)
    assert (al.starts, al.ends) == ([3], [5])
    assert al.logprobs[0] == pytest.approx(2 * math.log(0.8))
    assert al.confidences[0] == pytest.approx(0.8)
    assert al.score == pytest.approx(6 * math.log(0.9) + 2 * math.log(0.8))


def test_two_peaks_two_tokens_with_blank_elsewhere():
    rows = [[0.8, 0.1, 0.1]] * 10
    rows[2] = [0.1, 0.8, 0.1]
    rows[6] = rows[7] = [0.1, 0.1, 0.8]
    al = forced_align(_table(rows), [1, 2], blank=0)
    assert (al.starts, al.ends) == ([2, 6], [3, 8])


def test_identical_neighbours_forced_apart_by_a_blank():
    # Token 1 is the likeliest label on every frame and blank is poor: "1 1" still needs a blank
    # between its two runs, so exactly one frame goes to blank, the one where blank costs least.
    rows = [[0.02, 0.96, 0.02]] * 6
    rows[3] = [0.3, 0.68, 0.02]
    logp = _table(rows)
    al = forced_align(logp, [1, 1], blank=0)
    assert (al.starts, al.ends) == ([0, 4], [3, 6])
    _check_alignment(al, logp, [1, 1], 0)
    # Without the repeat rule the best path would be all token 1 frames and collapse to one token.
    single = forced_align(logp, [1], blank=0)
    assert (single.starts, single.ends) == ([0], [6])


def test_repeat_fits_exactly():
    logp = _table([[0.5, 0.3, 0.2]] * 3)
    al = forced_align(logp, [1, 1], blank=0)
    assert (al.starts, al.ends) == ([0, 2], [1, 3])
    assert forced_align(logp, [1, 1, 1], blank=0) is None        # needs 5 frames


def test_infeasible_gives_none():
    logp = _table([[0.5, 0.25, 0.25]] * 3)
    assert forced_align(logp, [1, 2, 1, 2], blank=0) is None     # 4 tokens, 3 frames
    assert forced_align(logp, [1, 1], blank=0, length=2) is None  # repeat needs a third frame
    assert forced_align(logp[:0], [1], blank=0) is None
    assert forced_align(logp, [1, 2, 1], blank=0) is not None


def test_zero_probability_everywhere_gives_none():
    logp = _table([[0.5, 0.5, 0.0]] * 4)                          # token 2 has probability 0
    assert forced_align(logp, [2], blank=0) is None
    assert forced_align(logp, [1], blank=0) is not None


def test_empty_ids():
    logp = _table([[0.7, 0.2, 0.1]] * 5)
    al = forced_align(logp, [], blank=0)
    assert al == Alignment(starts=[], ends=[], logprobs=[], confidences=[], score=pytest.approx(5 * math.log(0.7)))
    al = forced_align(logp[:0], [], blank=0)
    assert (al.starts, al.score) == ([], 0.0)


def test_ties_enter_each_state_earliest():
    """The documented tie rule on a flat table, where every path of a length scores the same."""
    flat = torch.full((5, 4), math.log(0.25), dtype=torch.float64)
    al = forced_align(flat, [1, 2], blank=0)
    assert (al.starts, al.ends) == ([0, 1], [1, 5])
    al = forced_align(flat, [1, 1], blank=0)
    assert (al.starts, al.ends) == ([0, 2], [1, 5])
    al = forced_align(flat, [3], blank=0)
    assert (al.starts, al.ends) == ([0], [5])
    # A strictly better final blank wins over ending on the last token; the paths that end on it
    # tie, and the one that enters the final blank earliest wins.
    lower = flat.clone()
    lower[4, 0] = math.log(0.5)
    al = forced_align(lower, [3], blank=0)
    assert (al.starts, al.ends) == ([0], [1])
    # Break the tie on frame 2: the token keeps the frames up to it.
    lower[2, 3] = math.log(0.3)
    al = forced_align(lower, [3], blank=0)
    assert (al.starts, al.ends) == ([0], [3])


def test_blank_last_in_vocabulary():
    rows = [[0.05, 0.05, 0.9]] * 6
    rows[1] = [0.8, 0.1, 0.1]
    rows[4] = [0.1, 0.8, 0.1]
    al = forced_align(_table(rows), [0, 1], blank=2)
    assert (al.starts, al.ends) == ([1, 4], [2, 5])


# ---------------------------------------------------------------- exhaustive search


@functools.lru_cache(maxsize=None)
def _all_paths(frames: int, vocab: int, blank: int):
    """Every label sequence of `frames` frames and what it collapses to."""
    paths = np.array(list(itertools.product(range(vocab), repeat=frames)), dtype=np.int64).reshape(-1, frames)
    collapsed = [_collapse(p.tolist(), blank) for p in paths]
    return paths, collapsed


def _brute_force(logp: torch.Tensor, ids: list[int], blank: int):
    frames, vocab = logp.shape
    paths, collapsed = _all_paths(frames, vocab, blank)
    keep = np.array([c == tuple(ids) for c in collapsed])
    if not keep.any():
        return None, None
    table = logp.numpy()
    scores = table[np.arange(frames)[None, :], paths[keep]].sum(axis=1)
    best = int(np.argmax(scores))
    return float(scores[best]), paths[keep][best].tolist()


def _small_cases():
    gen = torch.Generator().manual_seed(1234)
    cases = []
    for frames in range(1, 8):
        for n in range(0, 4):
            for rep in range(3):
                ids = torch.randint(1, 4, (n,), generator=gen).tolist()
                if rep == 0 and n >= 2:
                    ids[1] = ids[0]                                  # make sure repeats occur
                cases.append((frames, ids, _random_logp(gen, frames, 4)))
    return cases


@pytest.mark.parametrize("blank", [0, 3])
def test_agrees_with_exhaustive_search(blank):
    checked = feasible = 0
    for frames, ids, logp in _small_cases():
        if blank == 3:
            ids = [k - 1 for k in ids]                               # tokens 0..2, blank 3
        best, path = _brute_force(logp, ids, blank)
        al = forced_align(logp, ids, blank)
        checked += 1
        if best is None:
            assert al is None, (frames, ids)
            continue
        feasible += 1
        assert al is not None, (frames, ids)
        assert al.score == pytest.approx(best, abs=1e-5)
        labels = _labels(al, ids, blank, frames)
        assert _collapse(labels, blank) == tuple(ids)
        # Continuous random values: the best path is unique, so it is the same path.
        assert labels == path
        _check_alignment(al, logp, ids, blank)
    assert checked == 84 and feasible > 40


# ---------------------------------------------------------------- larger random tables


def _reference_viterbi(logp: torch.Tensor, ids: list[int], blank: int) -> float:
    """Best path score by a plain dynamic programme, one state at a time."""
    ext = [blank]
    for k in ids:
        ext += [k, blank]
    table = logp.tolist()
    ninf = float("-inf")
    alpha = [ninf] * len(ext)
    alpha[0] = table[0][ext[0]]
    if len(ext) > 1:
        alpha[1] = table[0][ext[1]]
    for t in range(1, len(table)):
        new = [ninf] * len(ext)
        for s in range(len(ext)):
            best = alpha[s]
            if s >= 1:
                best = max(best, alpha[s - 1])
            if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                best = max(best, alpha[s - 2])
            new[s] = best + table[t][ext[s]]
        alpha = new
    return max(alpha[-1], alpha[-2]) if len(ext) > 1 else alpha[-1]


@pytest.mark.parametrize("seed", range(6))
def test_random_tables_properties_and_reference(seed):
    gen = torch.Generator().manual_seed(seed)
    frames = int(torch.randint(20, 120, (1,), generator=gen))
    vocab = int(torch.randint(3, 30, (1,), generator=gen))
    blank = int(torch.randint(0, vocab, (1,), generator=gen))
    logp = _random_logp(gen, frames, vocab)
    tokens = [k for k in range(vocab) if k != blank]
    n = int(torch.randint(1, frames // 2, (1,), generator=gen))
    ids = [tokens[int(i)] for i in torch.randint(0, len(tokens), (n,), generator=gen)]
    al = forced_align(logp, ids, blank)
    assert al is not None
    _check_alignment(al, logp, ids, blank)
    assert al.score == pytest.approx(_reference_viterbi(logp, ids, blank), abs=1e-6)


def test_length_limits_the_frames():
    gen = torch.Generator().manual_seed(7)
    logp = _random_logp(gen, 40, 6)
    ids = [1, 2, 2, 5, 3]
    al = forced_align(logp, ids, blank=0, length=25)
    assert al == forced_align(logp[:25].clone(), ids, blank=0)
    assert max(al.ends) <= 25
    assert forced_align(logp, ids, blank=0, length=40) == forced_align(logp, ids, blank=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_input_is_computed_in_double(dtype):
    gen = torch.Generator().manual_seed(11)
    logp = _random_logp(gen, 60, 12).to(dtype)
    ids = [3, 4, 4, 9, 1, 7]
    al = forced_align(logp, ids, blank=0)
    assert al == forced_align(logp.double(), ids, blank=0)
    _check_alignment(al, logp.double(), ids, 0)


# ---------------------------------------------------------------- agreement with greedy CTC


def _peaky(gen: torch.Generator, frames: int, vocab: int, blank: int) -> torch.Tensor:
    """A CTC-like table: each frame has one clear winner, blank winning about half the frames."""
    logits = torch.randn(frames, vocab, generator=gen, dtype=torch.float64)
    winners = torch.randint(0, vocab, (frames,), generator=gen)
    winners[torch.rand(frames, generator=gen) < 0.5] = blank
    logits[torch.arange(frames), winners] += 8.0
    return logits.log_softmax(-1)


@pytest.mark.parametrize("seed", range(5))
def test_greedy_output_aligns_onto_greedy_frames(seed):
    gen = torch.Generator().manual_seed(100 + seed)
    frames, vocab, blank = 200, 16, seed % 16
    logp = _peaky(gen, frames, vocab, blank)
    hyp = greedy(logp, frames, blank, confidence=None)
    assert len(hyp.ids) > 10
    al = forced_align(logp, hyp.ids, blank)
    _check_alignment(al, logp, hyp.ids, blank)
    for i, frame in enumerate(hyp.frames):
        assert al.starts[i] <= frame < al.ends[i]
    # The greedy path is the best of all paths, so it is also the best path of its own tokens.
    assert al.starts == hyp.frames
    assert al.ends == [f + d for f, d in zip(hyp.frames, hyp.durations)]
    assert al.score == pytest.approx(float(logp.max(dim=-1).values.sum()), abs=1e-6)


# ---------------------------------------------------------------- torchaudio, when it is there


def test_agrees_with_torchaudio_forced_align():
    torchaudio = pytest.importorskip("torchaudio")
    functional = getattr(torchaudio, "functional", None)
    if functional is None or not hasattr(functional, "forced_align"):
        pytest.skip("this torchaudio has no functional.forced_align")
    gen = torch.Generator().manual_seed(5)
    for frames, vocab, n in [(30, 8, 5), (80, 20, 25), (50, 5, 20)]:
        logp = _random_logp(gen, frames, vocab).float()
        ids = torch.randint(1, vocab, (n,), generator=gen).tolist()
        labels, scores = functional.forced_align(logp[None], torch.tensor([ids], dtype=torch.int32), blank=0)
        al = forced_align(logp, ids, blank=0)
        assert _labels(al, ids, 0, frames) == labels[0].tolist()
        assert al.score == pytest.approx(float(scores[0].double().sum()), abs=1e-3)


# ---------------------------------------------------------------- errors


def test_bad_input_errors():
    logp = _table([[0.5, 0.3, 0.2]] * 4)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        forced_align(logp, [1, 3], blank=0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        forced_align(logp, [-1], blank=0)
    with pytest.raises(ValueError, match="blank id"):
        forced_align(logp, [1, 0], blank=0)
    with pytest.raises(ValueError, match="blank 3 is outside"):
        forced_align(logp, [1], blank=3)
    with pytest.raises(ValueError, match="2-D"):
        forced_align(logp[0], [1], blank=0)
    with pytest.raises(ValueError, match="2-D"):
        forced_align(logp[None], [1], blank=0)
    with pytest.raises(ValueError, match="length 5 is outside"):
        forced_align(logp, [1], blank=0, length=5)
    bad = logp.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        forced_align(bad, [1], blank=0)


def test_collapse_runs():
    """search.ctc.collapse: repeats merge into one run (first frame, length), blanks and negative
    labels drop out and end a run, and a run of `previous` at the start is marked continued."""
    assert collapse([], 0) == []
    assert collapse([0, 0, 0], 0) == []
    assert collapse([3, 3, 0, 3, 5, 5, 5, 0, 0, 2], 0) == [
        Run(3, 0, 2), Run(3, 3, 1), Run(5, 4, 3), Run(2, 9, 1)]
    assert collapse([1, 1, 4, 4], 4) == [Run(1, 0, 2)]  # the blank last in the vocabulary
    assert collapse([2, -1, 2, 2], 0) == [Run(2, 0, 1), Run(2, 2, 2)]  # no label ends a run
    # streaming: the frame before the path had label 2
    assert collapse([2, 2, 0, 2], 0, previous=2) == [Run(2, 0, 2, continued=True), Run(2, 3, 1)]
    assert collapse([3, 2], 0, previous=2) == [Run(3, 0, 1), Run(2, 1, 1)]
    assert collapse([0, 0], 0, previous=2) == []
    assert collapse([2, 2], 2, previous=2) == []  # previous was the blank
    # every run agrees with a plain reading of the path
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        path = torch.randint(0, 4, (30,), generator=gen).tolist()
        runs = collapse(path, 0)
        assert [r.id for r in runs] == [k for i, k in enumerate(path) if k and (i == 0 or path[i - 1] != k)]
        for r in runs:
            assert set(path[r.frame:r.frame + r.frames]) == {r.id} and not r.continued
            assert r.frame == 0 or path[r.frame - 1] != r.id
            assert r.frame + r.frames == len(path) or path[r.frame + r.frames] != r.id

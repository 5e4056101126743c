"""CTC beam search (search.ctc_beam): parity with NeMo's `beam_batch` N-best lists, the algorithm's
semantics on hand-made tables, batching, and argument errors."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from tests import beam_refs as br
from transcribe.search.ctc_beam import CtcBeamOptions, beam_search, beam_search_batch

CTC_STEMS = ["tiny-ctc-fit", "tiny-hybrid-tdt-ctc-fit"]


def _ctc_runs():
    out = []
    for stem in CTC_STEMS:
        for i, run in enumerate(br.runs(stem, "ctc", "beam_batch")):
            out.append(pytest.param(stem, i, id=f"{stem}-{run['clip']}-k{run['beam_size']}-beta{run['options']['beam_beta']}"))
    return out


def _clip_length(stem: str, clip: str) -> int:
    return next(c["length"] for c in br.reference(stem)["clips"] if c["name"] == clip)


@pytest.mark.parametrize("stem,i", _ctc_runs())
def test_nemo_beam_batch_parity(stem, i):
    """Same hypotheses, in the same order, as many as NeMo returns, scores within 1e-4.

    The tolerance: both searches add the same float32 log-probs (our CTC head on NeMo's own encoder
    frames) in the same order (score + logp, then + beam_beta), so the scores come out bit-equal here;
    1e-4 leaves room for a last-ulp difference in the log-probs, which summed over ~140 frames of
    scores around 50 (float32 spacing ~4e-6) stays well below it.

    NeMo quirks this replicates: hypotheses are alignment paths keyed by (tokens, last frame label),
    so "x" ending on blank and "x" ending on its last token stay apart (the list may repeat a token
    sequence; none of these references happen to); merges keep the max, not the log-sum-exp;
    candidates at or below best - beam_threshold are dropped, so the list can be shorter than the
    beam (the jfk run with beam_beta 0 / threshold 5 returns one hypothesis for beam 4); the ranking
    is by raw score (score_norm is irrelevant to beam_batch's N-best: it exports with score_norm=False).
    """
    run = br.runs(stem, "ctc", "beam_batch")[i]
    ref = br.reference(stem)
    logp = br.ctc_logp(stem, run["clip"])
    length = _clip_length(stem, run["clip"])
    opts = run["options"]
    out = beam_search(logp, length, ref["blank"], CtcBeamOptions(beam_size=run["beam_size"], beam_beta=opts["beam_beta"],
                                                                 beam_threshold=opts["beam_threshold"]))
    hyps = run["hypotheses"]
    assert [h.ids for h in out] == [h["tokens"] for h in hyps]
    assert len(out) == len(hyps)
    for h, r in zip(out, hyps):
        assert h.score == pytest.approx(r["score"], abs=1e-4)
        # NeMo's CTC timestamp: the frame each token is emitted at on the hypothesis' path.
        assert h.frames == r["timestamp"]
        assert len(h.durations) == len(h.ids) == len(h.logprobs)
        assert all(d >= 1 for d in h.durations)
        assert all(f + d <= g for f, d, g in zip(h.frames, h.durations, h.frames[1:] + [length]))
        # score = acoustic along the path (token runs + blank frames) + beam_beta per token.
        path_blank = sum(float(logp[t, ref["blank"]]) for t in _blank_frames(h, length))
        assert sum(h.logprobs) + path_blank + opts["beam_beta"] * len(h.ids) == pytest.approx(h.score, abs=1e-3)
        assert h.normalized_score is None


def _blank_frames(h, length):
    covered = set()
    for f, d in zip(h.frames, h.durations):
        covered.update(range(f, f + d))
    return [t for t in range(length) if t not in covered]


def test_batch_matches_single_utterances():
    """Two clips of different lengths in one batch (padding filled with NaN, never read) give exactly
    the single-utterance results."""
    stem = "tiny-ctc-fit"
    blank = br.reference(stem)["blank"]
    clips = [c["name"] for c in br.reference(stem)["clips"]]
    lps = [br.ctc_logp(stem, c) for c in clips]
    lens = [_clip_length(stem, c) for c in clips]
    batch = torch.full((2, max(lens), lps[0].shape[1]), float("nan"))
    for b, lp in enumerate(lps):
        batch[b, : lens[b]] = lp[: lens[b]]
    for k in (1, 4, 8):
        together = beam_search_batch(batch, torch.tensor(lens), blank, CtcBeamOptions(beam_size=k))
        for b in range(2):
            alone = beam_search(lps[b], lens[b], blank, CtcBeamOptions(beam_size=k))
            assert [(h.ids, h.frames, h.durations, h.score) for h in together[b]] == \
                   [(h.ids, h.frames, h.durations, h.score) for h in alone]


def _table(rows):
    """Probabilities per frame -> log-prob tensor [T, V+1]."""
    return torch.tensor(rows, dtype=torch.float64).log().float()


def _brute_force(logp, blank, beta):
    """Every alignment path; per (tokens, last label) the best path score; sorted best first."""
    T, L = logp.shape
    best: dict = {}
    for path in itertools.product(range(L), repeat=T):
        toks, prev, score = [], -1, 0.0
        for t, k in enumerate(path):
            score += float(logp[t, k])
            if k != blank and k != prev:
                toks.append(k)
                score += beta
            prev = k
        key = (tuple(toks), path[-1])
        if key not in best or score > best[key][0]:
            best[key] = (score, path)
    return sorted(best.values(), key=lambda v: -v[0])


def test_wide_beam_is_the_exact_viterbi_over_path_groups():
    """With a beam wider than the number of (tokens, last label) groups and no pruning, the N-best is
    every group's best path (max merge), ranked by score; frames/durations/logprobs follow that path."""
    torch.manual_seed(0)
    T, L, blank = 4, 3, 2
    logp = torch.randn(T, L).log_softmax(-1)
    want = _brute_force(logp, blank, beta=0.7)
    out = beam_search(logp, T, blank, CtcBeamOptions(beam_size=64, beam_beta=0.7, beam_threshold=1e9))
    assert len(out) == len(want)
    for h, (score, path) in zip(out, want):
        assert h.score == pytest.approx(score, abs=1e-5)
        toks, frames, durs, prev = [], [], [], -1
        for t, k in enumerate(path):
            if k != blank and k != prev:
                toks.append(k)
                frames.append(t)
                durs.append(1)
            elif k != blank:
                durs[-1] += 1
            prev = k
        assert (h.ids, h.frames, h.durations) == (toks, frames, durs)
        assert sum(h.logprobs) == pytest.approx(sum(float(logp[t, k]) for t, k in enumerate(path) if k != blank), abs=1e-5)
    # The same token sequence twice: once ending on blank, once on its last token (NeMo keeps both).
    seqs = [tuple(h.ids) for h in out]
    assert len(set(seqs)) < len(seqs)


def test_repeat_needs_a_blank_and_beta_counts_tokens():
    # Frames: a, a, blank, a. Greedy-style collapse gives "a a" only through the blank.
    a, blank = 0, 1
    logp = _table([[0.9, 0.1], [0.9, 0.1], [0.1, 0.9], [0.9, 0.1]])
    best = beam_search(logp, 4, blank, CtcBeamOptions(beam_size=4, beam_beta=0.0))[0]
    assert best.ids == [a, a]
    assert best.frames == [0, 3] and best.durations == [2, 1]
    acoustic = float(logp[0, 0] + logp[1, 0] + logp[2, 1] + logp[3, 0])
    assert best.score == pytest.approx(acoustic, abs=1e-6)
    with_beta = beam_search(logp, 4, blank, CtcBeamOptions(beam_size=4, beam_beta=2.5))[0]
    assert with_beta.ids == [a, a] and with_beta.score == pytest.approx(acoustic + 5.0, abs=1e-5)


def test_threshold_prunes_and_beam_one_is_greedy_with_beta():
    logp = _table([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
    # A tiny threshold: only the best candidate survives each frame.
    out = beam_search(logp, 2, 2, CtcBeamOptions(beam_size=4, beam_threshold=1e-3))
    assert len(out) == 1
    one = beam_search(logp, 2, 2, CtcBeamOptions(beam_size=1, beam_beta=0.0))
    assert [h.ids for h in one] == [[0]]


def test_empty_utterance_and_confidences():
    logp = _table([[0.5, 0.5]])
    (h,) = beam_search(logp, 0, 1)
    assert h.ids == [] and h.score == 0.0
    (h, *_) = beam_search(logp.new_tensor([[0.0, -5.0], [0.0, -5.0]]).log_softmax(-1), 2, 1, CtcBeamOptions(confidence="entropy"))
    assert h.ids == [0] and len(h.confidences) == 1 and 0.0 <= h.confidences[0] <= 1.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(beam_size=0), "beam_size"),
    (dict(beam_size=2.5), "beam_size"),
    (dict(beam_beta=float("nan")), "beam_beta"),
    (dict(beam_threshold=-1.0), "beam_threshold"),
    (dict(beam_threshold=0.0), "beam_threshold"),  # `<= best - 0` would drop the best itself
    (dict(blank=7), "blank"),
    (dict(lm=object()), "pieces"),
])
def test_argument_errors(kwargs, match):
    logp = _table([[0.5, 0.5], [0.5, 0.5]])
    kw = dict(blank=1)
    kw.update(kwargs)
    blank = kw.pop("blank")
    with pytest.raises(ValueError, match=match):
        beam_search(logp, 2, blank, CtcBeamOptions(**kw))


def test_non_finite_and_shape_errors():
    logp = _table([[0.5, 0.5], [0.5, 0.5]])
    bad = logp.clone()
    bad[1, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        beam_search(bad, 2, 1)
    beam_search(bad, 1, 1)  # the bad frame lies past the length: never read
    bad[0, 1] = math.inf
    with pytest.raises(ValueError, match="non-finite"):
        beam_search(bad, 1, 1)
    with pytest.raises(ValueError, match=r"\[T, V\+1\]"):
        beam_search(logp[None], 2, 1)
    with pytest.raises(ValueError, match="lengths"):
        beam_search_batch(logp[None], [3], 1)
    with pytest.raises(ValueError, match="lengths"):
        beam_search_batch(logp[None], [2, 2], 1)


def test_batch_independence_with_lm_and_hotwords():
    """With an LM and hotwords too, each utterance of a padded batch gets its single-utterance result."""
    from pathlib import Path

    from transcribe.search.hotwords import HotwordTrie
    from transcribe.search.ngram import load_arpa

    lm = load_arpa(Path(__file__).resolve().parent / "fixtures" / "lm" / "tiny3.arpa")
    pieces = ["\u2581the", "\u2581cat", "at", "\u2581sat", "s"]
    trie = HotwordTrie([[1, 2], [3, 4]], weight=0.8, n_tokens=5)
    torch.manual_seed(1)
    lps = [torch.randn(T, 6).log_softmax(-1) for T in (9, 4, 7)]
    batch = torch.zeros(3, 9, 6)
    for b, lp in enumerate(lps):
        batch[b, : len(lp)] = lp
    kw = dict(beam_size=5, lm=lm, pieces=pieces, hotwords=trie, lm_weight=0.7, word_bonus=0.5)
    together = beam_search_batch(batch, [len(lp) for lp in lps], 5, CtcBeamOptions(**kw))
    for b, lp in enumerate(lps):
        alone = beam_search(lp, len(lp), 5, CtcBeamOptions(**kw))
        assert [(h.ids, h.frames, h.score) for h in together[b]] == [(h.ids, h.frames, h.score) for h in alone]
        assert len(alone) >= 2
        for h in alone:  # the score is the documented sum of its terms
            words = "".join(pieces[i] for i in h.ids).replace("\u2581", " ").split()
            state, boost = trie.root, 0.0
            for i in h.ids:
                state, bonus = trie.step(state, i)
                boost += bonus
            boost += trie.final_score(state)
            acoustic = sum(h.logprobs) + sum(float(lp[t, 5]) for t in _blank_frames(h, len(lp)))
            want = acoustic + 1.0 * len(h.ids) + 0.7 * lm.sentence_logprob(words) + 0.5 * len(words) + boost
            assert h.score == pytest.approx(want, abs=1e-4)


def test_long_input_of_frames_decodes_without_error():
    """3,000 frames (4 min at 80 ms) of a peaked random table, beam 4: the search ends with four
    hypotheses whose tokens lie inside the input, frames in order. The search has no threshold on
    the input's length (one step per frame, the same tensors whatever T): 3,000 frames and the
    ~2,900 tokens of the best path are past Python's recursion limit (1,000) for a recursive
    trace-back, and the token hash wraps its 64 bits within a few tokens. 30 minutes (22,500
    frames) ran the same code 7.5 times longer."""
    g = torch.Generator().manual_seed(0)
    n, vocab = 3000, 32
    logp = torch.log_softmax(torch.randn(n, vocab + 1, generator=g) * 3, dim=-1)
    got = beam_search(logp, n, vocab, CtcBeamOptions(beam_size=4))
    assert len(got) == 4
    best = got[0]
    assert best.ids and all(0 <= f < n for f in best.frames) and best.frames == sorted(best.frames)
    assert [h.score for h in got] == sorted((h.score for h in got), reverse=True)

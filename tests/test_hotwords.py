"""Hotword boosting (search.hotwords.HotwordTrie) on hand-written phrases, and in the CTC beam."""
from __future__ import annotations

import math
import random

import pytest
import torch

from transcribe.search.ctc_beam import CtcBeamOptions, beam_search
from transcribe.search.hotwords import HotwordTrie, phrases_to_ids

A, B, C, D, X = 0, 1, 2, 3, 4


def _walk(trie, tokens):
    """(per-token bonuses, total with final, end state)."""
    state, bonuses = trie.root, []
    for t in tokens:
        state, bonus = trie.step(state, t)
        bonuses.append(bonus)
    return bonuses, sum(bonuses) + trie.final_score(state), state


def test_tables_shapes_and_overlapping_phrases_through_failure_links():
    w = 1.5
    trie = HotwordTrie([[A, B], [B, C]], weight=w, n_tokens=5)
    assert trie.root == 0 and trie.n_states == 5  # root, a, ab, b, bc
    assert trie.next_state.dtype == torch.long and trie.next_state.shape == (5, 5)
    assert trie.bonus.dtype == torch.float32 and trie.bonus.shape == (5, 5)
    assert trie.final.dtype == torch.float32 and trie.final.shape == (5,)
    ab = trie.step(trie.step(0, A)[0], B)[0]
    # "ab" is complete (kept: final 0); "c" fails over to "b" and completes "bc": +2w on that arc.
    assert trie.final[ab] == 0.0
    bc, bonus = trie.step(ab, C)
    assert trie.depth[bc] == 2 and bonus == pytest.approx(2 * w)
    assert _walk(trie, [A, B, C])[0] == pytest.approx([w, w, 2 * w])
    assert _walk(trie, [A, B, C])[1] == pytest.approx(4 * w)  # both occurrences, "b" in each
    # "b" alone is a partial match of "bc": pending, then taken back by final.
    assert _walk(trie, [X, B])[0] == pytest.approx([0.0, w])
    assert _walk(trie, [X, B])[1] == pytest.approx(0.0)
    # "a" then "a": the partial match "a" breaks and restarts on the second "a" (net 0 on that arc).
    assert _walk(trie, [A, A])[0] == pytest.approx([w, 0.0])


def test_partial_match_taken_back_and_final():
    w = 2.0
    trie = HotwordTrie([[A, B, C]], weight=w, n_tokens=5)
    bonuses, total, state = _walk(trie, [A, B, X])
    assert bonuses == pytest.approx([w, w, -2 * w]) and total == pytest.approx(0.0) and state == 0
    bonuses, total, state = _walk(trie, [A, B])
    assert bonuses == pytest.approx([w, w]) and trie.final[state] == pytest.approx(-2 * w) and total == 0.0
    # A break that re-matches the suffix: "a b a" -> the second "a" restarts the match (+w pending).
    bonuses, _, state = _walk(trie, [A, B, A])
    assert bonuses == pytest.approx([w, w, -w]) and trie.depth[state] == 1
    # Complete phrase kept, then more tokens: nothing taken back.
    bonuses, total, _ = _walk(trie, [A, B, C, X, X])
    assert bonuses == pytest.approx([w, w, w, 0.0, 0.0]) and total == pytest.approx(3 * w)
    assert float(trie.final[0]) == 0.0


def test_nested_and_inner_phrases():
    w = 1.0
    trie = HotwordTrie([[A, B], [A, B, C]], weight=w, n_tokens=5)
    # "ab" completes (kept), "abc" completes too: both occurrences count.
    assert _walk(trie, [A, B, C])[0] == pytest.approx([w, w, 3 * w])
    assert _walk(trie, [A, B, X])[1] == pytest.approx(2 * w)
    # "ab" inside the partial "cab" of "cabd": reported through the failure chain.
    trie = HotwordTrie([[C, A, B, D], [A, B]], weight=w, n_tokens=5)
    assert _walk(trie, [C, A, B, X])[1] == pytest.approx(2 * w)
    assert _walk(trie, [C, A, B, D])[1] == pytest.approx(6 * w)


def _occurrence_credit(phrases, tokens, w):
    total = 0.0
    for p in {tuple(p) for p in phrases}:
        for i in range(len(tokens) - len(p) + 1):
            if tuple(tokens[i: i + len(p)]) == p:
                total += w * len(p)
    return total


def test_total_boost_is_weight_times_occurrence_lengths():
    rnd = random.Random(0)
    for _ in range(200):
        phrases = [[rnd.randrange(3) for _ in range(rnd.randint(1, 4))] for _ in range(rnd.randint(1, 4))]
        trie = HotwordTrie(phrases, weight=0.75, n_tokens=4)
        tokens = [rnd.randrange(4) for _ in range(rnd.randint(0, 12))]
        assert _walk(trie, tokens)[1] == pytest.approx(_occurrence_credit(phrases, tokens, 0.75), abs=1e-5)


def test_batched_lookups_match_step():
    trie = HotwordTrie([[A, B, C], [B, D], [C]], weight=0.5, n_tokens=5)
    states = torch.arange(trie.n_states).repeat_interleave(5)
    tokens = torch.arange(5).repeat(trie.n_states)
    nxt, bon = trie.next_state[states, tokens], trie.bonus[states, tokens]
    for s, t, n, b in zip(states.tolist(), tokens.tolist(), nxt.tolist(), bon.tolist()):
        assert trie.step(s, t) == (n, pytest.approx(b))


def test_errors_and_phrases_to_ids():
    with pytest.raises(ValueError, match="empty"):
        HotwordTrie([[A], []], weight=1.0, n_tokens=5)
    with pytest.raises(ValueError, match="outside"):
        HotwordTrie([[A, 5]], weight=1.0, n_tokens=5)
    with pytest.raises(ValueError, match="finite"):
        HotwordTrie([[A]], weight=math.nan, n_tokens=5)
    with pytest.raises(ValueError, match="outside"):
        HotwordTrie([[A]], weight=1.0, n_tokens=5).step(0, 9)
    assert HotwordTrie([], weight=1.0, n_tokens=3).n_states == 1

    def encode(text):
        return [ord(ch) - ord("a") for ch in text if ch != " "]

    assert phrases_to_ids(["ab", " c "], encode) == [[0, 1], [2]]
    for bad in (["ab", ""], ["  "], "ab"):
        with pytest.raises(ValueError):
            phrases_to_ids(bad, encode)
    with pytest.raises(ValueError, match="no tokens"):
        phrases_to_ids(["ab"], lambda text: [])


# CTC beam: tokens a=0, b=1, c=2, blank=3. Frame 0 says "a"; frame 1 prefers "c" over "b" by
# gap = ln(0.7 / 0.2). The hotword "ab" gives "ab" +w per token (2w); "ac" gets +w on "a" and has it
# taken back on "c" (0). So "ab" wins exactly when 2w > gap: w* = ln(3.5) / 2 = 0.6264.
CTC_TABLE = [[0.9, 0.03, 0.03, 0.04], [0.02, 0.2, 0.7, 0.08]]
W_STAR = math.log(0.7 / 0.2) / 2


def _ctc(weight, phrases=((A, B),), **kw):
    logp = torch.tensor(CTC_TABLE, dtype=torch.float64).log().float()
    trie = HotwordTrie(phrases, weight=weight, n_tokens=3) if weight is not None else None
    return logp, beam_search(logp, 2, 3, CtcBeamOptions(beam_size=4, hotwords=trie, **kw))


@pytest.mark.parametrize("beta", [1.0, 0.0])
def test_boost_flips_the_ctc_winner_at_the_acoustic_gap(beta):
    logp, plain = _ctc(None, beam_beta=beta)
    assert plain[0].ids == [A, C]
    _, below = _ctc(W_STAR - 0.01, beam_beta=beta)
    assert below[0].ids == [A, C]
    _, above = _ctc(W_STAR + 0.01, beam_beta=beta)
    assert above[0].ids == [A, B]
    w = W_STAR + 0.01
    acoustic = float(logp[0, A] + logp[1, B]) + 2 * beta
    assert above[0].score == pytest.approx(acoustic + 2 * w, abs=1e-5)
    ac = next(h for h in above if h.ids == [A, C])
    assert ac.score == pytest.approx(float(logp[0, A] + logp[1, C]) + 2 * beta, abs=1e-5)


def test_unfinished_hotword_is_taken_back_at_the_end():
    """Hotword "abc" is never completed: "ab" is boosted by 2w during the search, but final takes it
    back, so even a large weight leaves the acoustic winner first and its score unboosted."""
    logp, out = _ctc(5.0, phrases=((A, B, C),))
    assert out[0].ids == [A, C]
    ab = next(h for h in out if h.ids == [A, B])
    assert ab.score == pytest.approx(float(logp[0, A] + logp[1, B]) + 2.0, abs=1e-5)
    # "a" alone is a partial match too (ending on blank, and ending on a repeated "a": the same
    # tokens twice in the N-best, as NeMo keeps them): no boost either.
    singles = sorted((h.durations[0], h.score) for h in out if h.ids == [A])
    assert [d for d, _ in singles] == [1, 2]
    assert singles[0][1] == pytest.approx(float(logp[0, A] + logp[1, 3]) + 1.0, abs=1e-5)
    assert singles[1][1] == pytest.approx(float(logp[0, A] + logp[1, A]) + 1.0, abs=1e-5)


def test_hotword_tables_must_fit_the_vocabulary():
    logp = torch.tensor(CTC_TABLE).log()
    with pytest.raises(ValueError, match="hotword"):
        beam_search(logp, 2, 3, CtcBeamOptions(hotwords=HotwordTrie([[A]], weight=1.0, n_tokens=9)))

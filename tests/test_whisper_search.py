"""Whisper's logit rules and greedy search on hand-written tables (vocabulary of 20: text 0-9,
end-of-text 10, no-timestamps 11, timestamps 12-19)."""
from __future__ import annotations

import math

import pytest
import torch

from transcribe.whisper.decoding import ApplyTimestampRules, SearchSetup, SuppressBlank, SuppressTokens, greedy

V, EOT, NOTS, TB = 20, 10, 11, 12
SB = 2  # sample_begin: a prompt of two tokens


def rules(max_initial=2):
    return ApplyTimestampRules(TB, EOT, NOTS, SB, max_initial)


def allowed(logits):
    return [i for i in range(V) if logits[0, i] != float("-inf")]


def test_first_token_is_an_early_timestamp():
    lg = torch.zeros(1, V)
    rules(max_initial=2).apply(lg, torch.tensor([[0, 1]]))
    assert allowed(lg) == [12, 13, 14]


def test_timestamp_after_text_closes_a_segment():
    lg = torch.zeros(1, V)
    lg[0, EOT] = 5.0  # likelier than all timestamps together, so the mass rule keeps it
    rules().apply(lg, torch.tensor([[0, 1, 3, 15]]))  # text, then timestamp 15 (closing)
    # Next: the opening timestamp of the next segment (not before 15) or the end; no text.
    assert allowed(lg) == [EOT] + list(range(15, V))


def test_after_a_pair_no_timestamp():
    lg = torch.zeros(1, V)
    rules().apply(lg, torch.tensor([[0, 1, 12, 4, 15, 15]]))
    assert all(i < TB for i in allowed(lg))


def test_after_an_opening_timestamp_text_is_forbidden():
    lg = torch.zeros(1, V)
    rules().apply(lg, torch.tensor([[0, 1, 12, 4, 15]]))  # "12 text 15": 15 opens nothing, closes
    # last is a timestamp, penultimate is text: the next cannot be normal text.
    assert all(i >= EOT for i in allowed(lg))
    assert min(i for i in allowed(lg) if i >= TB) == 15  # not before the last timestamp


def test_timestamp_mass_beats_best_text():
    lg = torch.full((1, V), -10.0)
    lg[0, 3] = 1.0  # the best text token
    lg[0, TB:] = 0.5  # eight timestamps, together likelier than token 3
    rules().apply(lg, torch.tensor([[0, 1, 12, 4, 5]]))
    assert all(i >= TB for i in allowed(lg))


def test_suppress_blank_and_tokens():
    lg = torch.zeros(1, V)
    SuppressBlank([5], EOT, SB).apply(lg, torch.tensor([[0, 1]]))
    SuppressTokens([7, 7, 8]).apply(lg, torch.tensor([[0, 1]]))
    assert set(range(V)) - set(allowed(lg)) == {5, 7, 8, EOT}
    lg = torch.zeros(1, V)
    SuppressBlank([5], EOT, SB).apply(lg, torch.tensor([[0, 1, 3]]))  # only at the first position
    assert allowed(lg) == list(range(V))


def test_greedy_follows_the_table_and_sums_logprobs():
    script = [3, 4, EOT]
    calls = []

    def step(new, positions=None):
        calls.append(new.shape[1])
        n = len(calls) - 1
        lg = torch.zeros(new.shape[0], new.shape[1], V)
        lg[:, -1, script[min(n, 2)]] = 5.0
        if new.shape[1] > 1:
            lg[:, 0, 9] = 2.0  # the "no speech" token, read at the prompt's first position
        return lg

    r = greedy(step, torch.tensor([[0, 1]]), SearchSetup(EOT, [], sample_len=10, no_speech=9, sot_index=0))
    assert r.tokens == [[3, 4]]
    assert calls == [2, 1, 1]  # the prompt once, then one token a step
    lp = 5.0 - math.log(math.exp(5.0) + V - 1)
    assert abs(r.sum_logprobs[0] - 3 * lp) < 1e-5
    p_ns = math.exp(2.0) / (math.exp(2.0) + V - 1)
    assert abs(r.no_speech_probs[0] - p_ns) < 1e-6


def test_greedy_rows_that_ended_stay_ended():
    def step(new, positions=None):
        lg = torch.zeros(2, new.shape[1], V)
        lg[0, -1, EOT] = 9.0  # row 0 ends at once
        lg[1, -1, 3] = 9.0  # row 1 never ends
        return lg

    r = greedy(step, torch.tensor([[0, 1], [0, 1]]), SearchSetup(EOT, [], sample_len=4))
    assert r.tokens == [[], [3, 3, 3, 3]]


# --- beam search -------------------------------------------------------------------------------

from transcribe.whisper.decoding import beam_search, rank_by_likelihood  # noqa: E402


class TableModel:
    """A fake decoder: each row's next-token distribution comes from `table[prefix]`, prefix being
    the row's tokens after the prompt (first token of the prompt picks a table when several).
    Tokens not listed share what mass is left. The model keeps each row's history as a cache
    would, so a wrong `reorder` gives wrong distributions."""

    def __init__(self, tables, prompt_len=SB):
        self.tables = tables
        self.prompt_len = prompt_len
        self.rows = None
        self.reorders = 0

    def dist(self, hist):
        table = self.tables[hist[0]] if isinstance(self.tables, dict) and hist[0] in self.tables else self.tables
        probs = table.get(tuple(hist[self.prompt_len :]), {EOT: 1.0})
        p = torch.full((V,), max(1.0 - sum(probs.values()), 1e-6) / (V - len(probs)))
        for tok, q in probs.items():
            p[tok] = q
        return p.log()

    def step(self, new, positions=None):
        if self.rows is None:
            self.rows = [[] for _ in range(new.shape[0])]
        out = torch.empty(new.shape[0], new.shape[1], V)
        for r, toks in enumerate(new.tolist()):
            for k, tok in enumerate(toks):
                self.rows[r].append(tok)
                out[r, k] = self.dist(self.rows[r])
        return out

    def reorder(self, src):
        self.reorders += 1
        self.rows = [list(self.rows[int(s)]) for s in src]


# Greedy takes 3 (0.6) and then can only reach 0.34; 4 (0.4) leads to a near-certain 5.
FORK = {(): {3: 0.6, 4: 0.4}, (3,): {5: 0.34, 6: 0.33, 7: 0.33}, (4,): {5: 0.99}}


def test_beam_two_finds_what_greedy_misses():
    prompt = torch.tensor([[0, 1]])
    g = TableModel(FORK)
    assert greedy(g.step, prompt, SearchSetup(EOT, [], sample_len=10)).tokens == [[3, 5]]
    m = TableModel(FORK)
    r = beam_search(m.step, m.reorder, prompt, SearchSetup(EOT, [], sample_len=10), beam_size=2)
    assert r.tokens == [[4, 5]]
    assert r.sum_logprobs[0] == pytest.approx(math.log(0.4) + math.log(0.99), abs=1e-4)
    assert m.reorders > 0
    # beam 1 is greedy
    m1 = TableModel(FORK)
    r1 = beam_search(m1.step, m1.reorder, prompt, SearchSetup(EOT, [], sample_len=10), beam_size=1)
    assert r1.tokens == [[3, 5]]
    assert r1.sum_logprobs[0] == pytest.approx(math.log(0.6) + math.log(0.34), abs=1e-4)


# Two short endings come first; searching on finds 3 6 8, whose mean log-prob is better.
LONG = {
    (): {3: 0.5, 4: 0.3, 5: 0.2},
    (3,): {EOT: 0.55, 6: 0.45},
    (4,): {EOT: 0.55, 7: 0.45},
    (3, 6): {8: 0.99},
}


def test_patience_keeps_searching():
    prompt = torch.tensor([[0, 1]])
    m = TableModel(LONG)
    r = beam_search(m.step, m.reorder, prompt, SearchSetup(EOT, [], sample_len=10), beam_size=2)
    assert r.tokens == [[3]]  # two finished after the second token: the search stops there
    assert r.sum_logprobs[0] == pytest.approx(math.log(0.5 * 0.55), abs=1e-4)
    m = TableModel(LONG)
    r = beam_search(m.step, m.reorder, prompt, SearchSetup(EOT, [], sample_len=10), beam_size=2, patience=2.0)
    assert r.tokens == [[3, 6, 8]]  # four finished wanted: 4 7 and 3 6 8 also end
    assert r.sum_logprobs[0] == pytest.approx(math.log(0.5 * 0.45 * 0.99), abs=1e-4)


def test_length_penalty_changes_the_ranking():
    prompt = torch.tensor([[0, 1]])
    picks = {}
    for lp in (None, 0.0, 1.0):
        m = TableModel(LONG)
        r = beam_search(m.step, m.reorder, prompt, SearchSetup(EOT, [], sample_len=10), beam_size=2, patience=2.0,
                        length_penalty=lp)
        picks[lp] = r.tokens[0]
    # None: sum / length; 0: the raw sum (the short one wins); 1: sum / ((5 + length) / 6)
    assert picks == {None: [3, 6, 8], 0.0: [3], 1.0: [3, 6, 8]}
    assert rank_by_likelihood([1, 3], [-1.29, -1.50], None) == 1
    assert rank_by_likelihood([1, 3], [-1.29, -1.50], 0.0) == 0
    assert rank_by_likelihood([1, 3], [-1.29, -1.50], 1.0) == 1
    assert rank_by_likelihood([2, 2], [-1.0, -1.0], None) == 0  # a tie goes to the first


def test_beam_without_a_finished_sequence_takes_the_best_unfinished():
    table = {(): {3: 0.7, 4: 0.3}, (3,): {5: 0.9}, (4,): {6: 0.9}}
    m = TableModel(table)
    r = beam_search(m.step, m.reorder, torch.tensor([[0, 1]]), SearchSetup(EOT, [], sample_len=2), beam_size=2)
    assert r.tokens == [[3, 5]]
    assert r.sum_logprobs[0] == pytest.approx(math.log(0.7 * 0.9), abs=1e-4)


def test_beam_rows_are_grouped_per_audio_with_no_speech_and_rules():
    # Audio 0 (prompt starts with 0) forks as FORK; audio 1 (prompt starts with 1) is certain.
    tables = {0: FORK, 1: {(): {7: 0.9}, (7,): {EOT: 0.9}}}
    m = TableModel(tables)
    seen = []

    class Spy:
        def apply(self, logits, tokens):
            seen.append(tuple(tokens.shape))

    prompt = torch.tensor([[0, 2], [1, 2]])
    r = beam_search(m.step, m.reorder, prompt,
                    SearchSetup(EOT, [Spy(), SuppressTokens([6])], sample_len=10, no_speech=9, sot_index=0), beam_size=2)
    assert r.tokens == [[4, 5], [7]]
    assert seen[0] == (4, 2)  # two audios, two beams each
    assert len(r.no_speech_probs) == 2
    p_ns = math.exp(TableModel(tables).dist([0, 2])[9].item())
    assert r.no_speech_probs[0] == pytest.approx(p_ns, rel=1e-4)
    with pytest.raises(ValueError):
        beam_search(m.step, m.reorder, prompt, SearchSetup(EOT, [], sample_len=10), beam_size=2, patience=0.1)

"""Whisper's logit rules and greedy search on hand-written tables (vocabulary of 20: text 0-9,
end-of-text 10, no-timestamps 11, timestamps 12-19)."""
from __future__ import annotations

import math

import torch

from transcribe.search.whisper import ApplyTimestampRules, SuppressBlank, SuppressTokens, greedy

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

    def step(new):
        calls.append(new.shape[1])
        n = len(calls) - 1
        lg = torch.zeros(new.shape[0], new.shape[1], V)
        lg[:, -1, script[min(n, 2)]] = 5.0
        if new.shape[1] > 1:
            lg[:, 0, 9] = 2.0  # the "no speech" token, read at the prompt's first position
        return lg

    r = greedy(step, torch.tensor([[0, 1]]), EOT, [], sample_len=10, no_speech=9, sot_index=0)
    assert r.tokens == [[3, 4]]
    assert calls == [2, 1, 1]  # the prompt once, then one token a step
    lp = 5.0 - math.log(math.exp(5.0) + V - 1)
    assert abs(r.sum_logprobs[0] - 3 * lp) < 1e-5
    p_ns = math.exp(2.0) / (math.exp(2.0) + V - 1)
    assert abs(r.no_speech_probs[0] - p_ns) < 1e-6


def test_greedy_rows_that_ended_stay_ended():
    def step(new):
        lg = torch.zeros(2, new.shape[1], V)
        lg[0, -1, EOT] = 9.0  # row 0 ends at once
        lg[1, -1, 3] = 9.0  # row 1 never ends
        return lg

    r = greedy(step, torch.tensor([[0, 1], [0, 1]]), EOT, [], sample_len=4)
    assert r.tokens == [[], [3, 3, 3, 3]]

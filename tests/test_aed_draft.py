"""search.aed.greedy_from_draft: greedy search given a draft of its ids gives greedy's ids and scores whatever the
draft (right, partly right, wrong, too long, with EOS), in fewer decoder calls when the draft is right.

The decoder here is a toy with exact arithmetic (each position's logits a function of the ids before it, in
float64 integers), so the one-call verification and the one-at-a-time steps agree bit for bit."""
from __future__ import annotations

import pytest
import torch

from transcribe.search import aed

VOCAB, EOS, PAD = 11, 10, 0


class Toy:
    """Logits of the next id: a fixed function of the whole prefix; EOS after 9 ids."""

    def __init__(self):
        self.fed: list[int] = []
        self.calls = 0

    def logits_after(self, prefix: list[int]) -> torch.Tensor:
        nxt = EOS if len(prefix) > 9 else 1 + (sum(prefix) * 7 + len(prefix)) % 9
        out = torch.arange(VOCAB, dtype=torch.float64) * 0.01
        out[nxt] = 5.0
        return out

    def step(self, ids: torch.Tensor, every: bool = False) -> torch.Tensor:
        self.calls += 1
        rows = []
        for i in ids[0].tolist():
            self.fed.append(i)
            rows.append(self.logits_after(self.fed))
        x = torch.stack(rows)[None]
        return x if every else x[:, -1]

    def cut(self, n: int) -> None:
        self.fed = self.fed[:n]


def _greedy(max_new):
    toy = Toy()
    return aed.greedy(toy.step, torch.tensor([[3]]), max_new, EOS, PAD)[0], toy.calls, toy.fed


@pytest.mark.parametrize("max_new", [1, 4, 20])
def test_any_draft_gives_greedys_ids_and_scores(max_new):
    ref, calls, fed = _greedy(max_new)
    full = ref.ids
    drafts = [[], full, full[:3], full[:3] + [5, 5, 5], [5] * 12, full + [1, 2, 3] * 5, full[:2] + [EOS, 4]]
    for draft in drafts:
        toy = Toy()
        h = aed.greedy_from_draft(toy.step, toy.cut, torch.tensor([[3]]), draft, max_new, EOS, PAD)
        assert h.ids == ref.ids, draft
        assert h.logprobs == pytest.approx(ref.logprobs) and h.score == pytest.approx(ref.score)
        assert toy.fed == fed  # the state holds what greedy's holds (the prompt and every id but the last)
    toy = Toy()
    aed.greedy_from_draft(toy.step, toy.cut, torch.tensor([[3]]), full, max_new, EOS, PAD)
    assert toy.calls <= 2 < calls or max_new == 1  # a right draft: one call (and one for EOS), not one a token

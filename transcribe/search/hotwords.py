"""Hotword (context) boosting: an Aho-Corasick automaton over token-id phrases, as dense tables.

A search advances one automaton state per hypothesis on every token it *emits* (never on blank,
never on a CTC repeat that emits nothing) and adds the arc's bonus to the hypothesis score. When a
hypothesis ends, `final[state]` is added.

Scoring rule (w = `weight`). The state is a trie node: the longest suffix of the emitted tokens that
is a prefix of some phrase (the usual Aho-Corasick state). Each node n carries

- `pending(n)` = w * (depth(n) - depth of the deepest phrase that is a prefix of n's path, n included;
  0 when there is none): credit for the partial match that is not yet backed by a complete phrase;
- `locked(n)` = w * (sum of the lengths of the phrases that end at n: n itself if it ends a phrase,
  and every phrase reached through its failure links) - each phrase occurrence is reported once, at
  the token that completes it, as Aho-Corasick reports matches.

The arc n --token--> m (m = goto(n, token), through failure links) adds
`bonus[n, token] = pending(m) - pending(n) + locked(m)`, and `final[n] = -pending(n)`. So:

- a token that extends a partial match adds +w;
- a token that breaks a partial match takes back the pending credit (a negative bonus) and credits
  the suffix that the failure links re-match, if any;
- a token that completes a phrase turns its pending credit into a kept one (the arc adds w for that
  token, and nothing is taken back later);
- `final` takes back a partial match left unfinished when the hypothesis ends.

Summed over a whole hypothesis and its `final`, the boost is exactly w times the total length of all
the phrase occurrences in its token sequence (overlapping and nested occurrences each count: with
phrases "ab" and "abc", the tokens a b c get w * (2 + 3)).
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Sequence

import torch

__all__ = ["HotwordTrie", "phrases_to_ids"]


class HotwordTrie:
    """Aho-Corasick automaton over token-id phrases with a score `weight` per matched token.

    Args:
        phrases: token-id sequences (each non-empty, ids in [0, n_tokens)); duplicates are merged.
        weight: the bonus per matched token (a log-score added to the hypothesis score); finite.
        n_tokens: the number of token ids the tables cover (columns). The searches never pass the
            blank id, so its column (if it lies inside) is simply unused.

    Attributes:
        root: 0, the state every hypothesis starts in.
        n_states: the number of states (trie nodes, root included).
        n_tokens: as given.
        weight: as given.
        next_state: LongTensor [n_states, n_tokens], the state after emitting a token (failure links
            already folded in: one lookup per emitted token).
        bonus: FloatTensor (float32) [n_states, n_tokens], the score added on that arc (see the
            module docstring: +weight per token extending a match, the pending credit taken back
            when a match breaks, kept when a phrase completes).
        final: FloatTensor (float32) [n_states], added when a hypothesis ends (-pending credit: an
            unfinished partial match is taken back; 0 at the root and after a complete phrase).
        depth: LongTensor [n_states], the trie depth of each state.

    Batched searches look up `next_state[states, tokens]` and `bonus[states, tokens]` (move the
    tables once with `to(device)`); per-hypothesis searches call `step(state, token)`.
    """

    def __init__(self, phrases: Sequence[Sequence[int]], weight: float, n_tokens: int):
        weight = float(weight)
        if weight != weight or weight in (float("inf"), float("-inf")):
            raise ValueError(f"hotword weight must be finite, got {weight}")
        if int(n_tokens) != n_tokens or n_tokens < 1:
            raise ValueError(f"n_tokens must be a positive integer, got {n_tokens!r}")
        n_tokens = int(n_tokens)
        self.weight = weight
        self.n_tokens = n_tokens
        self.root = 0

        # The trie: children[n] maps token -> node; parent, depth, is_end per node.
        children: list[dict[int, int]] = [{}]
        depth = [0]
        is_end = [False]
        for i, phrase in enumerate(phrases):
            ids = list(phrase)
            if not ids:
                raise ValueError(f"hotword phrase {i} is empty")
            node = 0
            for tok in ids:
                if isinstance(tok, bool) or int(tok) != tok:
                    raise ValueError(f"hotword phrase {i}: token {tok!r} is not an integer id")
                tok = int(tok)
                if not 0 <= tok < n_tokens:
                    raise ValueError(f"hotword phrase {i}: token id {tok} is outside [0, {n_tokens})")
                nxt = children[node].get(tok)
                if nxt is None:
                    nxt = len(children)
                    children[node][tok] = nxt
                    children.append({})
                    depth.append(depth[node] + 1)
                    is_end.append(False)
                node = nxt
            is_end[node] = True
        n_states = len(children)
        self.n_states = n_states

        # Breadth-first: failure links, pending credit (via the deepest phrase end on the path),
        # locked credit (own end + the failure target's), and the full goto rows.
        fail = [0] * n_states
        end_depth = [0] * n_states  # depth of the deepest phrase that is a prefix of the node's path
        locked = [0.0] * n_states
        goto = torch.zeros((n_states, n_tokens), dtype=torch.long)
        order = deque([0])
        for tok, child in children[0].items():
            goto[0, tok] = child
        while order:
            n = order.popleft()
            for tok, child in children[n].items():
                if n != 0:
                    fail[child] = int(goto[fail[n], tok])
                    goto[child] = goto[fail[child]]
                else:
                    fail[child] = 0
                    goto[child] = goto[0]
                for t2, c2 in children[child].items():
                    goto[child, t2] = c2
                end_depth[child] = depth[child] if is_end[child] else end_depth[n]
                locked[child] = (weight * depth[child] if is_end[child] else 0.0) + locked[fail[child]]
                order.append(child)
        # A node's goto row must copy its failure target's row, which BFS has completed (shallower).

        pending = torch.tensor([weight * (d - e) for d, e in zip(depth, end_depth)], dtype=torch.float64)
        locked_t = torch.tensor(locked, dtype=torch.float64)
        self.next_state = goto
        self.bonus = (pending[goto] - pending[:, None] + locked_t[goto]).to(torch.float32)
        self.final = (-pending).to(torch.float32)
        self.depth = torch.tensor(depth, dtype=torch.long)
        self._next_rows = goto.tolist()
        self._bonus_rows = self.bonus.tolist()
        self._final = self.final.tolist()

    def step(self, state: int, token: int) -> tuple[int, float]:
        """(next state, bonus) for emitting `token` in `state` (never the blank)."""
        if not 0 <= token < self.n_tokens:
            raise ValueError(f"token id {token} is outside [0, {self.n_tokens})")
        return self._next_rows[state][token], self._bonus_rows[state][token]

    def final_score(self, state: int) -> float:
        """`final[state]` as a Python float."""
        return self._final[state]

    def to(self, device) -> "HotwordTrie":
        """Moves the tables to `device` (in place); returns self."""
        self.next_state = self.next_state.to(device)
        self.bonus = self.bonus.to(device)
        self.final = self.final.to(device)
        self.depth = self.depth.to(device)
        return self

    def __repr__(self) -> str:
        return f"HotwordTrie(n_states={self.n_states}, n_tokens={self.n_tokens}, weight={self.weight})"


def phrases_to_ids(phrases: Sequence[str], encode: Callable[[str], list[int]]) -> list[list[int]]:
    """Tokenizes each phrase with `encode` (e.g. a SentencePiece encoder). Raises ValueError for a
    phrase that is empty or only whitespace, or that encodes to no tokens."""
    if isinstance(phrases, str):
        raise ValueError("phrases must be a sequence of strings, not one string")
    out = []
    for i, phrase in enumerate(phrases):
        if not isinstance(phrase, str):
            raise ValueError(f"hotword {i} is not a string: {phrase!r}")
        text = phrase.strip()
        if not text:
            raise ValueError(f"hotword {i} is empty")
        ids = [int(t) for t in encode(text)]
        if not ids:
            raise ValueError(f"hotword {i} ({phrase!r}) encodes to no tokens")
        out.append(ids)
    return out

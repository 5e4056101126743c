"""Batched modified alignment-length synchronous decoding (mALSD) for TDT and RNN-T transducers.

The semantics are those of NeMo's `malsd_batch` strategy (ModifiedALSDBatchedTDTComputer and
ModifiedALSDBatchedRNNTComputer, pure PyTorch path, no language model), written anew over a
`TransducerSteps`. Every utterance keeps `beam` hypotheses in [B, beam] tensors; one loop step
extends every hypothesis once, with the predictor and the joint called once for all B * beam rows:

1. Each active hypothesis proposes its `beam` best (label, duration) pairs by log-probability
   (TDT: token and duration log-probabilities summed, the pair's index into the flattened
   [token, duration] grid ranking ties as torch.topk does; a blank with duration 0 takes 1).
2. A hypothesis that has emitted `max_symbols` labels on its current frame may only take blank
   (scored with the blank's log-prob plus the best duration log-prob; TDT keeps the duration of
   its best pair, at least 1). A hypothesis past its last frame is final: it proposes itself,
   unchanged, in its first candidate slot.
3. The `beam` best of the beam x beam candidates survive (one topk per utterance).
4. Survivors with the same token sequence, the same last token and (TDT) the same next frame are
   merged: the highest-scoring copy keeps its slot with the log-sum-exp of their scores.
5. The predictor advances for survivors that took a token; blank and final survivors keep their
   parent's predictor output and state.

Time: a blank moves a hypothesis one frame (RNN-T) or its duration (TDT); a token moves it by its
duration (TDT) or not at all (RNN-T). An utterance ends when all its hypotheses (empty slots
included, as in NeMo's loop) are past their last frame; after that its hypotheses are frozen, so a
result does not depend on the other utterances in the batch.

The N-best list is ranked by score / (tokens + 1) when `score_norm` is on (NeMo's normalization,
the +1 standing for the start-of-sequence token), by the raw score otherwise; empty slots (score
-inf) are dropped. A token's frame is the frame its hypothesis was at when it took the token; its
duration is the predicted one (TDT) or 1 (RNN-T). The token trail is kept as one small integer
record per step (parent slot, label, frame, duration) and traced back once at the end.

Hotword boosting: with `hotwords` (an object with dense tensors `next_state [S, V']`, `bonus
[S, V']` and `final [S]`, V' >= the number of non-blank tokens, root state 0) each hypothesis
carries a trie state; `bonus[state, token]` is added to a token's log-probability before the
candidates are ranked (late pruning), the state follows the emitted tokens through every
reordering and merge, and `final[state]` is added to each surviving score at the end.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import torch

from .decoded import Decoded
from .steps import TransducerSteps

# NeMo's 64-bit polynomial hash of token sequences (the hypothesis identity used for merging).
HASH_MUL = 6364136223846793005
HASH_ADD = 1
NO_LABEL = -1  # what a final hypothesis "emits": nothing


def check_durations(durations: Optional[Sequence[int]]) -> Optional[tuple[int, ...]]:
    """A TDT duration table, validated: integers >= 0, no repeats, at least one positive."""
    if durations is None:
        return None
    table = tuple(durations)
    if not table:
        raise ValueError("TDT duration table is empty")
    for d in table:
        if isinstance(d, bool) or int(d) != d:
            raise ValueError(f"TDT durations must be integers, got {table!r}")
    table = tuple(int(d) for d in table)
    if any(d < 0 for d in table):
        raise ValueError(f"TDT durations must not be negative, got {table!r}")
    if len(set(table)) != len(table):
        raise ValueError(f"TDT durations must not repeat, got {table!r}")
    if max(table) <= 0:
        raise ValueError(f"TDT duration table {table!r} has no positive duration: decoding could not advance")
    return table


def _hotword_tables(hotwords, n_tok: int, device, dtype):
    """(next_state [S, V], bonus [S, V], final [S]) on the search's device, V = non-blank tokens."""
    nxt = torch.as_tensor(hotwords.next_state).to(device=device, dtype=torch.long)
    bonus = torch.as_tensor(hotwords.bonus).to(device=device, dtype=dtype)
    final = torch.as_tensor(hotwords.final).to(device=device, dtype=dtype)
    vocab = n_tok - 1
    if nxt.dim() != 2 or bonus.shape != nxt.shape or final.shape != nxt.shape[:1]:
        raise ValueError(f"hotword tables disagree: next_state {tuple(nxt.shape)}, bonus {tuple(bonus.shape)}, "
                         f"final {tuple(final.shape)}")
    if nxt.shape[1] < vocab:
        raise ValueError(f"hotword tables cover {nxt.shape[1]} tokens, the model has {vocab} non-blank tokens")
    if nxt.shape[0] < 1:
        raise ValueError("hotword trie has no states (state 0 is the root)")
    if not (bool(torch.isfinite(bonus).all()) and bool(torch.isfinite(final).all())):
        raise ValueError("hotword bonuses must be finite")
    if nxt.numel() and (int(nxt.min()) < 0 or int(nxt.max()) >= nxt.shape[0]):
        raise ValueError("hotword next_state points outside the trie")
    return nxt[:, :vocab].contiguous(), bonus[:, :vocab].contiguous(), final


def malsd_batch(
    enc: torch.Tensor,
    lengths: torch.Tensor,
    steps: TransducerSteps,
    beam_size: int = 4,
    max_symbols: Optional[int] = 10,
    score_norm: bool = True,
    hotwords=None,
) -> list[list[Decoded]]:
    """enc [B, T, H] (projected for the joint), lengths [B] -> per utterance, its N-best list
    (at most `beam_size` hypotheses, best first). See the module docstring for the semantics."""
    if isinstance(beam_size, bool) or int(beam_size) != beam_size or beam_size < 1:
        raise ValueError(f"beam_size must be an integer >= 1, got {beam_size!r}")
    if max_symbols is not None and (isinstance(max_symbols, bool) or int(max_symbols) != max_symbols
                                    or max_symbols < 1):
        raise ValueError(f"max_symbols must be None or an integer >= 1, got {max_symbols!r}")
    if enc.dim() != 3:
        raise ValueError(f"enc must be [B, T, H], got shape {tuple(enc.shape)}")
    table = check_durations(steps.durations)
    k = int(beam_size)
    b, t_max, _ = enc.shape
    device, dtype = enc.device, enc.dtype
    blank, n_tok = steps.blank, steps.n_tokens
    lengths = torch.as_tensor(lengths).to(device=device, dtype=torch.long).reshape(-1)
    if lengths.numel() != b:
        raise ValueError(f"{lengths.numel()} lengths for a batch of {b}")
    if b and (int(lengths.min()) < 0 or int(lengths.max()) > t_max):
        raise ValueError(f"lengths must lie in [0, {t_max}], got {lengths.tolist()}")
    if b == 0:
        return []
    return _Search(enc, lengths, steps, k, max_symbols, table, hotwords).run(score_norm)


class _Search:
    """The loop's state and step; all per-hypothesis tensors are [B, K]."""

    def __init__(self, enc, lengths, steps: TransducerSteps, k: int, max_symbols, table, hotwords):
        b, t_max, h = enc.shape
        dev, dtype = enc.device, enc.dtype
        self.steps, self.k, self.b, self.max_symbols = steps, k, b, max_symbols
        self.blank, self.n_tok = steps.blank, steps.n_tokens
        self.n_dur = len(table) if table is not None else 0
        self.dur_values = torch.tensor(table, device=dev) if table is not None else None
        self.neg_inf = torch.tensor(-math.inf, device=dev, dtype=dtype)
        n = b * k
        # encoder frames as rows [B * T, H]; row of (utterance, frame) = utterance * T + frame
        self.enc_rows = enc.reshape(b * t_max, h)
        self.utt = torch.arange(b, device=dev)[:, None].expand(b, k)
        self.row_base = (self.utt * t_max).contiguous()
        self.flat_base = (self.utt * k).contiguous()  # row of slot j of utterance u: u * K + j
        self.slots = torch.arange(k, device=dev)[None, :].expand(b, k)
        self.parent_of = torch.arange(k, device=dev).repeat_interleave(k)  # candidate c -> parent c // K
        self.rows_n = torch.arange(n, device=dev)
        self.last = (lengths - 1)[:, None].expand(b, k)
        self.last_safe = self.last.clamp(min=0)

        zeros = torch.zeros(b, k, dtype=torch.long, device=dev)
        self.score = torch.full((b, k), -math.inf, device=dev, dtype=dtype)
        self.score[:, 0] = 0.0
        self.time = zeros.clone()          # the frame each hypothesis is at
        self.lasts = zeros.clone()         # labels emitted on the current frame
        self.n_labels = zeros.clone()      # non-blank labels so far
        self.hash = zeros.clone()          # hash of the token sequence
        self.last_label = torch.full((b, k), NO_LABEL, dtype=torch.long, device=dev)
        self.active = self.time <= self.last
        self.finite = torch.ones((), dtype=torch.bool, device=dev)

        self.hot = None
        if hotwords is not None:
            self.hot = _hotword_tables(hotwords, self.n_tok, dev, dtype)
            self.trie = zeros.clone()

        self.pred, self.state = steps.predict(torch.full((n,), self.blank, dtype=torch.long, device=dev),
                                              steps.init_state(n))
        self.records: list[torch.Tensor] = []

    # -- one step -------------------------------------------------------------------------------
    def proposals(self, logits):
        """Each hypothesis' K best (log-prob, label, duration) and its forced-blank log-prob."""
        b, k, n_tok = self.b, self.k, self.n_tok
        logp = torch.log_softmax(logits[:, :n_tok], dim=-1).view(b, k, n_tok)
        if self.hot is not None:
            logp = torch.cat([logp[..., :self.blank] + self.hot[1][self.trie], logp[..., self.blank:]], dim=-1)
        if self.dur_values is None:
            self.finite &= torch.isfinite(logp).all()
            width = n_tok
            top_lp, top_idx = torch.topk(self._pad(logp, width), k, dim=-1)
            labels = top_idx
            durs = None
            blank_lp = logp[..., self.blank]
        else:
            dlogp = torch.log_softmax(logits[:, n_tok:], dim=-1).view(b, k, self.n_dur)
            self.finite &= torch.isfinite(logp).all() & torch.isfinite(dlogp).all()
            width = n_tok * self.n_dur
            grid = (logp[..., :, None] + dlogp[..., None, :]).view(b, k, width)
            top_lp, top_idx = torch.topk(self._pad(grid, width), k, dim=-1)
            labels = torch.div(top_idx, self.n_dur, rounding_mode="floor")
            durs = self.dur_values[top_idx % self.n_dur]
            durs = torch.where((labels == self.blank) & (durs == 0), 1, durs)
            blank_lp = logp[..., self.blank] + dlogp.max(dim=-1).values
        if width < k:  # padded candidates: impossible, labelled blank so they stay well-formed
            labels = torch.where(top_idx >= width, self.blank, labels)
            if durs is not None:
                durs = torch.where(top_idx >= width, 1, durs)
        return top_lp, labels, durs, blank_lp

    def _pad(self, x, width):
        if width >= self.k:
            return x
        return torch.cat([x, x.new_full(x.shape[:-1] + (self.k - width,), -math.inf)], dim=-1)

    def step(self):
        b, k = self.b, self.k
        safe = torch.minimum(self.time, self.last_safe)
        frames = self.enc_rows.index_select(0, (self.row_base + safe).view(-1))
        top_lp, labels, durs, blank_lp = self.proposals(self.steps.joint(frames, self.pred))

        # candidates [B, K parents, K choices]
        active = self.active
        cand = self.score[..., None] + top_lp
        cand = torch.where(active[..., None], cand, self.neg_inf)
        cand[..., 0] = torch.where(active, cand[..., 0], self.score)
        labels = torch.where(active[..., None], labels, NO_LABEL)
        if self.max_symbols is not None:
            forced = (self.lasts >= self.max_symbols) & active
            cand = torch.where(forced[..., None], self.neg_inf, cand)
            cand[..., 0] = torch.where(forced, self.score + blank_lp, cand[..., 0])
            labels = torch.where(forced[..., None], self.blank, labels)
            if durs is not None:
                durs = torch.where(forced[..., None] & (durs == 0), 1, durs)

        new_score, pick = torch.topk(cand.view(b, k * k), k, dim=-1)
        parent = self.parent_of[pick]
        label = labels.view(b, k * k).gather(1, pick)
        # an utterance whose hypotheses are all final is frozen (NeMo's loop would have ended)
        done = ~active.any(dim=-1, keepdim=True)
        parent = torch.where(done, self.slots, parent)
        label = torch.where(done, NO_LABEL, label)
        new_score = torch.where(done, self.score, new_score)

        is_blank = label == self.blank
        is_token = (label >= 0) & ~is_blank
        time = self.time.gather(1, parent)
        lasts = self.lasts.gather(1, parent)
        if durs is None:
            dur = torch.ones_like(label)
            self.time = time + is_blank
            self.lasts = torch.where(is_blank, 0, lasts + is_token)
        else:
            dur = torch.where(label >= 0, durs.view(b, k * k).gather(1, pick), 0)
            self.time = time + dur
            self.lasts = torch.where(dur > 0, 0, lasts + is_token)
        self.records.append(torch.stack([parent, label, time, dur]))

        prev_hash = self.hash.gather(1, parent)
        self.hash = torch.where(is_token, prev_hash * HASH_MUL + HASH_ADD + label, prev_hash)
        self.last_label = torch.where(is_token, label, self.last_label.gather(1, parent))
        self.n_labels = self.n_labels.gather(1, parent) + is_token
        if self.hot is not None:
            trie = self.trie.gather(1, parent)
            self.trie = torch.where(is_token, self.hot[0][trie, label.clamp(0, self.blank - 1)], trie)
        self.score = self.merge(new_score)

        # predictor: advance the rows that took a token, the others keep their parent's output
        rows = (self.flat_base + parent).view(-1)
        keep = ~is_token.view(-1)
        prev_pred = self.pred.index_select(0, rows)
        prev_state = self.steps.select_state(self.state, rows)
        pred, state = self.steps.predict(torch.where(is_token, label, self.blank).view(-1), prev_state)
        self.pred = torch.where(keep[:, None], prev_pred, pred)
        both = self.steps.cat_states([prev_state, state])
        self.state = self.steps.select_state(both, torch.where(keep, self.rows_n, self.rows_n + keep.numel()))
        self.active = self.time <= self.last

    def merge(self, score):
        """Hypotheses equal in tokens (hash, last token, count) and, for TDT, next frame merge:
        the first best copy keeps the log-sum-exp of the group's scores, the others are emptied."""
        if self.k == 1:
            return score
        same = ((self.hash[:, :, None] == self.hash[:, None, :])
                & (self.last_label[:, :, None] == self.last_label[:, None, :])
                & (self.n_labels[:, :, None] == self.n_labels[:, None, :]))
        if self.dur_values is not None:
            same &= self.time[:, :, None] == self.time[:, None, :]
        group = torch.where(same, score[:, None, :], self.neg_inf)
        keeper = group.argmax(dim=-1) == self.slots
        return torch.where(keeper, torch.logsumexp(group, dim=-1), self.neg_inf)

    # -- the whole search -----------------------------------------------------------------------
    def run(self, score_norm: bool) -> list[list[Decoded]]:
        while bool(self.active.any()):
            self.step()
        if not bool(self.finite):
            raise ValueError("the joint produced non-finite log-probabilities")
        score = self.score
        if self.hot is not None:
            score = score + self.hot[2][self.trie]
        norm = score / (self.n_labels.to(score.dtype) + 1)
        order = torch.sort(norm if score_norm else score, dim=-1, descending=True, stable=True).indices
        ids, frames, durs = self.trace(order)
        scores = score.gather(1, order).tolist()
        norms = norm.gather(1, order).tolist()
        out = []
        for u in range(self.b):
            nbest = []
            for j in range(self.k):
                if scores[u][j] == -math.inf:
                    continue
                nbest.append(Decoded(ids=ids[u][j], frames=frames[u][j], durations=durs[u][j],
                                     score=scores[u][j], normalized_score=norms[u][j]))
            out.append(nbest)
        return out

    def trace(self, order: torch.Tensor):
        """Follow each slot of `order` [B, K] back through the step records -> per utterance and
        slot: token ids, frames, durations."""
        b, k = self.b, self.k
        empty = [[[] for _ in range(k)] for _ in range(b)]
        if not self.records:
            return empty, [[[] for _ in range(k)] for _ in range(b)], [[[] for _ in range(k)] for _ in range(b)]
        rec = torch.stack(self.records).cpu().numpy()  # [S, 4, B, K]
        n_steps = rec.shape[0]
        path = np.empty((n_steps, 3, b, k), dtype=np.int64)
        ptr = order.cpu().numpy()
        utt = np.arange(b)[:, None]
        for s in range(n_steps - 1, -1, -1):
            r = rec[s][:, utt, ptr]
            path[s] = r[1:]
            ptr = r[0]
        ids, frames, durs = [], [], []
        for u in range(b):
            iu, fu, du = [], [], []
            for j in range(k):
                lab = path[:, 0, u, j]
                sel = (lab >= 0) & (lab != self.blank)
                iu.append(lab[sel].tolist())
                fu.append(path[:, 1, u, j][sel].tolist())
                du.append(path[:, 2, u, j][sel].tolist())
            ids.append(iu)
            frames.append(fu)
            durs.append(du)
        return ids, frames, durs

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
    lengths = torch.as_tensor(lengths).to(device=enc.device, dtype=torch.long).reshape(-1)
    if lengths.numel() != b:
        raise ValueError(f"{lengths.numel()} lengths for a batch of {b}")
    if b and (int(lengths.min()) < 0 or int(lengths.max()) > t_max):
        raise ValueError(f"lengths must lie in [0, {t_max}], got {lengths.tolist()}")
    if b == 0:
        return []
    with torch.inference_mode():
        return _Search(enc, lengths, steps, k, max_symbols, table, hotwords).run(score_norm)


# Per-hypothesis integer fields, packed in one [B, K, 5] tensor so a beam reordering is one gather.
# The fields a merge compares are the trailing ones: (n_labels, hash) for RNN-T, and the time too
# for TDT.
TRIE, LASTS, TIME, N_LABELS, HASH = range(5)


class _Search:
    """The loop's state and step; per-hypothesis tensors are [B, K] (K = beam size)."""

    def __init__(self, enc, lengths, steps: TransducerSteps, k: int, max_symbols, table, hotwords):
        b, t_max, h = enc.shape
        dev, dtype = enc.device, enc.dtype
        self.steps, self.k, self.b, self.max_symbols = steps, k, b, max_symbols
        self.blank, self.n_tok = steps.blank, steps.n_tokens
        self.tdt = table is not None
        n = b * k
        # encoder frames as rows [B * T, H]: (utterance u, frame t) is row u * T + t; an utterance
        # without frames reads a real frame of another one (its rows are never used, only computed)
        self.enc_rows = enc.reshape(b * t_max, h)
        utt = torch.arange(b, device=dev)[:, None].expand(b, k)
        spare = int(torch.nonzero(lengths > 0)[0, 0]) if bool((lengths > 0).any()) else 0
        self.row_base = torch.where(lengths[:, None] > 0, utt, spare) * t_max
        self.last = (lengths - 1)[:, None].expand(b, k)
        self.last_safe = self.last.clamp(min=0)
        self.flat_base = (utt * k).contiguous()  # row of slot j of utterance u: u * K + j
        self.slots = torch.arange(k, device=dev)[None, :].expand(b, k)
        self.rows_n = torch.arange(n, device=dev)
        self.rows_2n = self.rows_n + n
        self.neg_inf = torch.tensor(-math.inf, device=dev, dtype=dtype)
        self.neg_inf_rest = torch.full((b, k, k - 1), -math.inf, device=dev, dtype=dtype)
        # candidate c of the flattened [K parents, K choices] grid -> its parent slot
        self.parent_of = torch.arange(k, device=dev).repeat_interleave(k)
        # TDT: index into the flattened [token, duration] grid -> label, duration
        if self.tdt:
            n_dur = len(table)
            self.n_dur = n_dur
            grid = torch.arange(self.n_tok * n_dur, device=dev)
            self.grid_label = torch.div(grid, n_dur, rounding_mode="floor")
            self.grid_dur = torch.tensor(table, device=dev)[grid % n_dur]
            self.zero_dur = 0 in table
            self.width = self.n_tok * n_dur
        else:
            self.width = self.n_tok
            self.ones = torch.ones(b, k, dtype=torch.long, device=dev)

        self.score = torch.full((b, k), -math.inf, device=dev, dtype=dtype)
        self.score[:, 0] = 0.0
        self.info = torch.zeros(b, k, 5, dtype=torch.long, device=dev)
        self.time = self.info[..., TIME]
        self.lasts = self.info[..., LASTS]
        self.active = self.time <= self.last
        self.check = torch.zeros((), device=dev, dtype=torch.float32)
        self.hot = _hotword_tables(hotwords, self.n_tok, dev, dtype) if hotwords is not None else None
        self.pred, self.state = steps.predict(torch.full((n,), self.blank, dtype=torch.long, device=dev),
                                              steps.init_state(n))
        self.records: list[torch.Tensor] = []

    # -- one step -------------------------------------------------------------------------------
    def proposals(self, logits):
        """Each hypothesis' K best (log-prob, label, duration) and its forced-blank log-prob."""
        b, k, n_tok = self.b, self.k, self.n_tok
        logp = torch.log_softmax(logits[:, :n_tok] if self.tdt else logits, dim=-1).view(b, k, n_tok)
        if self.hot is not None:
            logp[..., :self.blank] += self.hot[1][self.info[..., TRIE]]
        if not self.tdt:
            top_lp, labels = torch.topk(self._pad(logp), k, dim=-1)
            if self.width < k:  # padded candidates (-inf) get a well-formed label
                labels = labels.clamp(max=self.blank)
            return top_lp, labels, None, logp[..., self.blank]
        dlogp = torch.log_softmax(logits[:, n_tok:], dim=-1).view(b, k, self.n_dur)
        grid = (logp[..., :, None] + dlogp[..., None, :]).view(b, k, self.width)
        top_lp, idx = torch.topk(self._pad(grid), k, dim=-1)
        if self.width < k:
            idx = idx.clamp(max=self.width - 1)
        return top_lp, self.grid_label[idx], self.grid_dur[idx], logp[..., self.blank] + dlogp.amax(dim=-1)

    def _pad(self, x):
        if self.width >= self.k:
            return x
        return torch.cat([x, x.new_full(x.shape[:-1] + (self.k - self.width,), -math.inf)], dim=-1)

    def step(self):
        b, k, blank = self.b, self.k, self.blank
        rows = torch.minimum(self.time, self.last_safe).add_(self.row_base).view(-1)
        logits = self.steps.joint(self.enc_rows.index_select(0, rows), self.pred)
        self.check += logits.sum()
        top_lp, top_label, top_dur, blank_lp = self.proposals(logits)

        # candidates [B, K parents, K choices]: a free hypothesis proposes its top K; one that
        # reached max_symbols proposes only blank; a final one proposes itself, unchanged
        active = self.active
        free = active if self.max_symbols is None else active & (self.lasts < self.max_symbols)
        alone = torch.cat([torch.where(active, blank_lp, 0.0)[..., None], self.neg_inf_rest], dim=-1)
        cand = (self.score[..., None] + torch.where(free[..., None], top_lp, alone)).view(b, k * k)
        labels = torch.where(free[..., None], top_label, torch.where(active, blank, NO_LABEL)[..., None])

        new_score, pick = torch.topk(cand, k, dim=-1)
        parent = self.parent_of[pick]
        label = labels.view(b, k * k).gather(1, pick)
        if b > 1:  # an utterance whose hypotheses are all final is frozen (NeMo's loop would end)
            live = active.any(dim=-1, keepdim=True)
            parent = torch.where(live, parent, self.slots)
            new_score = torch.where(live, new_score, self.score)

        emits = label >= 0
        is_blank = label == blank
        is_token = emits ^ is_blank
        trie, lasts, time, n_labels, hash_ = self.info.gather(1, parent[..., None].expand(b, k, 5)).unbind(-1)
        frame = time
        if self.tdt:
            dur = top_dur.view(b, k * k).gather(1, pick)
            if self.zero_dur:  # a blank moves time by at least one frame
                dur = torch.where(is_blank & (dur == 0), 1, dur)
            dur = dur * emits
            time = time + dur
            lasts = torch.where(dur > 0, 0, lasts + is_token)
        else:
            dur = self.ones
            time = time + is_blank
            lasts = torch.where(is_blank, 0, lasts + is_token)
        if self.hot is not None:
            trie = torch.where(is_token, self.hot[0][trie, label.clamp(0, blank - 1)], trie)
        hash_ = torch.where(is_token, torch.add(label + HASH_ADD, hash_, alpha=HASH_MUL), hash_)
        self.info = torch.stack([trie, lasts, time, n_labels + is_token, hash_], dim=-1)
        self.time, self.lasts = time, lasts
        self.records.append(torch.stack([parent, label, frame, dur]))
        self.score = self.merge(new_score)

        # predictor: rows that took a token advance, the others keep their parent's output and state
        rows = (self.flat_base + parent).view(-1)
        took = is_token.view(-1)
        prev_state = self.steps.select_state(self.state, rows)
        pred, state = self.steps.predict(torch.where(is_token, label, blank).view(-1), prev_state)
        self.pred = torch.where(took[:, None], pred, self.pred.index_select(0, rows))
        both = self.steps.cat_states([prev_state, state])
        self.state = self.steps.select_state(both, torch.where(took, self.rows_2n, self.rows_n))
        self.active = time <= self.last

    def merge(self, score):
        """Hypotheses with the same tokens (hash and count) and, for TDT, the same frame merge: the
        first best of them keeps the log-sum-exp of their scores, the others are emptied."""
        if self.k == 1:
            return score
        key = self.info[..., TIME:] if self.tdt else self.info[..., N_LABELS:]
        same = (key[:, :, None] == key[:, None]).all(dim=-1)
        group = torch.where(same, score[:, None, :], self.neg_inf)
        keeper = group.argmax(dim=-1) == self.slots
        return torch.where(keeper, torch.logsumexp(group, dim=-1), self.neg_inf)

    # -- the whole search -----------------------------------------------------------------------
    def run(self, score_norm: bool) -> list[list[Decoded]]:
        while bool(self.active.any()):
            self.step()
        if not bool(torch.isfinite(self.check)):
            raise ValueError("the joint produced non-finite logits (log-probabilities would not be finite)")
        score = self.score
        n_labels = self.info[..., N_LABELS]
        if self.hot is not None:
            score = score + self.hot[2][self.info[..., TRIE]]
        norm = score / (n_labels.to(score.dtype) + 1)
        order = torch.sort(norm if score_norm else score, dim=-1, descending=True, stable=True).indices
        ids, frames, durs = self.trace(order)
        scores = score.gather(1, order).tolist()
        norms = norm.gather(1, order).tolist()
        out = []
        for u in range(self.b):
            out.append([Decoded(ids=ids[u][j], frames=frames[u][j], durations=durs[u][j],
                                score=scores[u][j], normalized_score=norms[u][j])
                        for j in range(self.k) if scores[u][j] != -math.inf])
        return out

    def trace(self, order: torch.Tensor):
        """Follow each slot of `order` [B, K] back through the step records -> per utterance and
        slot: token ids, frames, durations."""
        b, k = self.b, self.k
        if not self.records:
            return ([[[] for _ in range(k)] for _ in range(b)] for _ in range(3))
        rec = torch.stack(self.records).cpu().numpy()  # [S, (parent, label, frame, dur), B, K]
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
            sel = [(path[:, 0, u, j] >= 0) & (path[:, 0, u, j] != self.blank) for j in range(k)]
            ids.append([path[:, 0, u, j][sel[j]].tolist() for j in range(k)])
            frames.append([path[:, 1, u, j][sel[j]].tolist() for j in range(k)])
            durs.append([path[:, 2, u, j][sel[j]].tolist() for j in range(k)])
        return ids, frames, durs

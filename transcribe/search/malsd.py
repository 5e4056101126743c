"""Batched modified alignment-length synchronous decoding (mALSD) for TDT and RNN-T transducers.

The semantics are those of NeMo's `malsd_batch` strategy (ModifiedALSDBatchedTDTComputer and
ModifiedALSDBatchedRNNTComputer, pure PyTorch path, no language model), written anew over a
`TransducerSteps`. Every utterance keeps `beam` hypotheses in [B, beam] tensors; one loop step
extends every hypothesis once, with the predictor and the joint called once for all B * beam rows:

1. Each active hypothesis proposes its `beam` best (label, duration) pairs by log-probability
   (TDT: token and duration log-probabilities summed; a blank with duration 0 takes 1, so
   (blank, 0) and (blank, 1) are two candidates for the same hypothesis and merge in step 4).
   TDT pairs are ranked among the `beam` best tokens only, each paired with every duration: a
   pair whose token is not among them is matched, duration for duration, by `beam` pairs at
   least as good (float addition is monotone), so the `beam` best pairs are the same as over
   the whole grid up to exact ties, which torch.topk orders in no documented way either way.
2. A hypothesis that has emitted `steps.max_symbols` labels on its current frame may only take blank
   (scored with the blank's log-prob plus the best duration log-prob; TDT keeps the duration of
   its best pair, at least 1). A hypothesis past its last frame is final: it proposes itself,
   unchanged, in its first candidate slot.
3. The `beam` best of the beam x beam candidates survive (one topk per utterance).
4. Survivors with the same token sequence (NeMo's 64-bit rolling hash of it and its length; NeMo
   also compares the last token, which the hash fixes but for a collision) and, TDT only, the same
   frame are merged: the first highest-scoring copy keeps its slot, its token frames and its
   count of labels on the current frame, with the log-sum-exp of their scores; the others empty.
5. The predictor advances for survivors that took a token; blank and final survivors keep their
   parent's predictor output and state.

Time: a blank moves a hypothesis one frame (RNN-T) or its duration (TDT); a token moves it by its
duration (TDT) or not at all (RNN-T). An utterance ends when all its hypotheses (empty slots
included, as in NeMo's loop) are past their last frame; after that its hypotheses are frozen, so a
result does not depend on the other utterances in the batch.

The N-best list is ranked by score / (tokens + 1) when `score_norm` is on (NeMo's normalization,
the +1 standing for the start-of-sequence token), by the raw score otherwise; empty slots (score
-inf) are dropped. A token's frame is the frame its hypothesis was at when it took the token; its
duration is the predicted one (TDT) or 1 (RNN-T). The token trail is kept as each step's picks
and packed fields (a few integers per hypothesis) and traced back once at the end.

TDT durations, as NeMo's malsd reads them: a duration is its index in the table
(`steps.durations`), not the table's value. The table is checked (search.steps.check_durations) and
its length gives the number of duration outputs; a (label, duration i) pair moves a hypothesis i
frames, reports duration i, and the "duration 0" that a blank may not take is index 0, whatever
the table holds there. For the published tables 0, 1, ..., D-1 index and value are the same; on
another table (0, 1, 2, 4, 8; 0, 2, 4; ...) this is NeMo's `malsd_batch` (NeMo 3.0.0), which then
searches a different lattice from its greedy and default beam (those move by the value).
`steps.max_symbols` None (no bound, as NeMo allows) can loop forever on an RNN-T model whose blank never
reaches a beam's top candidates.

Hotword boosting: with `hotwords` (an object with dense tensors `next_state [S, V']`, `bonus
[S, V']` and `final [S]`, V' >= the number of non-blank tokens, root state 0) each hypothesis
carries a trie state; `bonus[state, token]` is added to a token's log-probability before the
candidates are ranked (late pruning), the state follows the emitted tokens through every
reordering and merge, and `final[state]` is added to each surviving score at the end.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from .confidence import confidence as confidence_measure
from .decoded import Decoded
from .steps import TransducerSteps, check_durations

# NeMo's 64-bit polynomial hash of token sequences (the hypothesis identity used for merging).
HASH_MUL = 6364136223846793005
HASH_ADD = 1
NO_LABEL = -1  # what a final hypothesis "emits": nothing


def _hotword_tables(hotwords, n_tok: int, device, dtype):
    """(next_state [S, V], bonus [S, V], final [S]) on the search's device, V = non-blank tokens."""
    nxt = torch.as_tensor(hotwords.next_state).to(device=device, dtype=torch.long)
    bonus = torch.as_tensor(hotwords.bonus).to(device=device, dtype=dtype)
    final = torch.as_tensor(hotwords.final).to(device=device, dtype=dtype)
    vocab = n_tok - 1
    if vocab < 1:
        raise ValueError("hotwords need a model with at least one non-blank token")
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
    score_norm: bool = True,
    hotwords=None,
    confidence: Optional[str] = None,
    alpha: float = 0.33,
) -> list[list[Decoded]]:
    """enc [B, T, H] (projected for the joint), lengths [B] -> per utterance, its N-best list
    (at most `beam_size` hypotheses, best first). See the module docstring for the semantics."""
    if isinstance(beam_size, bool) or int(beam_size) != beam_size or beam_size < 1:
        raise ValueError(f"beam_size must be an integer >= 1, got {beam_size!r}")
    if enc.dim() != 3:
        raise ValueError(f"enc must be [B, T, H], got shape {tuple(enc.shape)}")
    table = malsd_durations(steps.durations)
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
        return _Search(enc, lengths, steps, k, table, hotwords, confidence, alpha).run(score_norm)


def malsd_durations(durations) -> Optional[tuple[int, ...]]:
    """The frames each duration output moves a hypothesis in NeMo's malsd: its index in the
    (checked) table, 0, 1, ..., D-1 (see the module docstring); None for RNN-T."""
    table = check_durations(durations)
    return None if table is None else tuple(range(len(table)))


# Per-hypothesis integers, packed in one [B, K, 6] tensor so that a beam reordering is one gather:
# the code of the step's choice (below), the hotword trie state, labels emitted on the current
# frame, the frame, the number of tokens and the token sequence's hash. The fields a merge compares
# are the trailing ones: (n_labels, hash) for RNN-T, with the frame for TDT.
CODE, TRIE, LASTS, TIME, N_LABELS, HASH = range(6)
N_FIELDS = 6


class _Codes:
    """A step's choice as one integer, code = (label + 1) * W + duration (label -1: nothing, a final
    hypothesis; W = 1 for RNN-T, for TDT the largest move + 1, at least 2), with tables of what each code does:
    new fields = old fields * mul[code] + add[code] (int64 arithmetic wraps, as the hash needs)."""

    def __init__(self, blank: int, table, device):
        w = max(max(table), 1) + 1 if table is not None else 1  # a blank moves at least 1
        code = torch.arange((blank + 2) * w, device=device)
        label, dur = torch.div(code, w, rounding_mode="floor") - 1, code % w
        is_blank = label == blank
        token = (label >= 0) & ~is_blank
        self.w, self.label, self.dur, self.token = w, label, dur, token
        self.label_wb = torch.where(token, label, blank)  # what the predictor is fed
        one, zero = torch.ones_like(code), torch.zeros_like(code)
        if table is None:
            lasts = (one * ~is_blank, zero + token)   # blank: 0 on the new frame; token: + 1
            time = (one, zero + is_blank)             # blank: next frame
        else:
            stay = dur == 0
            lasts = (one * stay, zero + (token & stay))  # moving resets the count
            time = (one, dur)
        mul = [zero, one, lasts[0], time[0], one, torch.where(token, HASH_MUL, one)]
        add = [code, zero, lasts[1], time[1], zero + token, torch.where(token, label + HASH_ADD, zero)]
        # one row per code: mul (N_FIELDS), add (N_FIELDS), took a token, predictor input, label
        # (clamped to a token index: where the step's token log-prob is read)
        self.fused = torch.stack(mul + add + [zero + token, self.label_wb, label.clamp(min=0, max=blank)], dim=-1)
        tokens = torch.arange(blank + 1, device=device)
        if table is None:
            self.grid = tokens + 1  # a proposal's token -> its code
            self.forced = torch.full_like(tokens, blank + 1)
        else:
            dur_of = torch.tensor(table, device=device)
            # [token, duration] -> code; a blank moves time by at least one frame
            self.grid = (tokens + 1)[:, None] * w + torch.where((tokens == blank)[:, None] & (dur_of == 0), 1, dur_of)
            # candidate j of a hypothesis' [best tokens, durations] sub-grid has the duration
            # dur_of[j % n_dur]; a hypothesis forced to blank keeps the duration of its best
            # candidate, at least one (NeMo)
            self.forced = (blank + 1) * w + dur_of.clamp(min=1).repeat(blank + 1)


class _Search:
    """The loop's state and step; per-hypothesis tensors are [B, K] (K = beam size)."""

    def __init__(self, enc, lengths, steps: TransducerSteps, k: int, table, hotwords,
                 confidence: Optional[str] = None, alpha: float = 0.33):
        b, t_max, h = enc.shape
        dev, dtype = enc.device, enc.dtype
        self.steps, self.k, self.b, self.max_symbols = steps, k, b, steps.max_symbols
        self.blank, self.n_tok = steps.blank, steps.n_tokens
        self.tdt = table is not None
        self.n_dur = len(table) if self.tdt else 0
        self.codes = _Codes(self.blank, table, dev)
        n = b * k
        # encoder frames as rows [B * T, H]: (utterance u, frame t) is row u * T + t; an utterance
        # without frames reads a real frame of another one (computed, never used)
        self.enc_rows = enc.reshape(b * t_max, h)
        utt = torch.arange(b, device=dev)[:, None].expand(b, k)
        has = lengths > 0
        spare = int(torch.nonzero(has)[0, 0]) if bool(has.any()) else 0
        self.row_base = torch.where(has[:, None], utt, spare) * t_max
        self.last = (lengths - 1)[:, None].expand(b, k)
        self.last_safe = self.last.clamp(min=0)
        self.flat_base = (utt * k).contiguous()  # row of slot j of utterance u: u * K + j
        self.diag = torch.arange(k, device=dev)[None, :].expand(b, k) * k  # candidate (j, 0): slot j itself
        self.new_rows = torch.arange(n, 2 * n, device=dev)
        self.neg_inf = torch.tensor(-math.inf, device=dev, dtype=dtype)
        self.zero, self.zero_code = torch.zeros((), device=dev, dtype=dtype), torch.zeros((), device=dev, dtype=torch.long)
        self.neg_inf_rest = torch.full((b, k, k - 1), -math.inf, device=dev, dtype=dtype)
        # candidate c of utterance u (parent slot c // K) -> the parent's row u * K + c // K
        self.rows_of = self.flat_base[:, :1] + torch.arange(k, device=dev).repeat_interleave(k)
        self.earlier = torch.ones(k, k, dtype=torch.bool, device=dev).tril(-1)  # [j, i]: i < j
        self.cpu = dev.type == "cpu"
        self.n_best_tok = min(k, self.n_tok)  # TDT: tokens each hypothesis pairs with the durations
        self.sub_width = self.n_best_tok * self.n_dur if self.tdt else self.n_tok
        self.score = torch.full((b, k), -math.inf, device=dev, dtype=dtype)
        self.score[:, 0] = 0.0
        self.info = torch.zeros(b, k, N_FIELDS, dtype=torch.long, device=dev)
        self.active = self.info[..., TIME] <= self.last
        self.sums: list[torch.Tensor] = []  # each step's sum of logits (finite unless a logit is not)
        self.hot = _hotword_tables(hotwords, self.n_tok, dev, dtype) if hotwords is not None else None
        self.pred, self.state = steps.predict(torch.full((n,), self.blank, dtype=torch.long, device=dev),
                                              steps.init_state(n))
        self.picks: list[torch.Tensor] = []
        self.infos: list[torch.Tensor] = []
        # each step's token log-prob (token distribution only, as greedy records it) and, when asked,
        # confidence of every survivor's last choice, traced back with the tokens
        self.confidence, self.alpha = confidence, alpha
        self.lps: list[torch.Tensor] = []
        self.confs: list[torch.Tensor] = []

    # -- one step -------------------------------------------------------------------------------
    def proposals(self, logits):
        """Each hypothesis' K best (log-prob, code), the code of its forced blank and its log-prob."""
        b, k, n_tok, codes = self.b, self.k, self.n_tok, self.codes
        logp = torch.log_softmax(logits[:, :n_tok] if self.tdt else logits, dim=-1).view(b, k, n_tok)
        self.tok_logp = logp
        if self.confidence is not None:
            self.tok_conf = confidence_measure(logp, self.confidence, self.alpha)
        if self.hot is not None:
            logp = torch.cat([logp[..., :self.blank] + self.hot[1][self.info[..., TRIE]], logp[..., self.blank:]], dim=-1)
        if self.tdt:
            # the K best pairs of the [token, duration] grid have their tokens among the K best
            # tokens (see the module docstring): only those are paired with every duration
            dlogp = torch.log_softmax(logits[:, n_tok:], dim=-1).view(b, k, self.n_dur)
            blank_lp = logp[..., self.blank] + dlogp.amax(dim=-1)
            tok_lp, tok = torch.topk(logp, self.n_best_tok, dim=-1)
            scores = (tok_lp.unsqueeze(-1) + dlogp.unsqueeze(-2)).view(b, k, self.sub_width)
            grid = codes.grid[tok].view(b, k, self.sub_width)
        else:
            scores, blank_lp, grid = logp, logp[..., self.blank], codes.grid
        if self.sub_width < k:  # fewer candidates than slots: pad with impossible ones
            scores = torch.cat([scores, scores.new_full((b, k, k - self.sub_width), -math.inf)], dim=-1)
        top_lp, idx = torch.topk(scores, k, dim=-1)
        if self.sub_width < k:
            idx = idx.clamp(max=self.sub_width - 1)
        top_code = grid.gather(-1, idx) if self.tdt else grid[idx]
        return top_lp, top_code, codes.forced[idx[..., 0]], blank_lp

    def step(self):
        b, k, info = self.b, self.k, self.info
        rows = torch.minimum(info[..., TIME], self.last_safe).add_(self.row_base).view(-1)
        logits = self.steps.joint(self.enc_rows.index_select(0, rows), self.pred)
        self.sums.append(logits.sum())
        top_lp, top_code, forced_code, blank_lp = self.proposals(logits)

        # candidates [B, K parents, K choices]: a free hypothesis proposes its top K; one that
        # reached max_symbols proposes only blank; a final one proposes itself, unchanged
        active = self.active
        free = active if self.max_symbols is None else active & (info[..., LASTS] < self.max_symbols)
        free3 = free.unsqueeze(-1)
        alone = torch.cat([torch.where(active, blank_lp, self.zero).unsqueeze(-1), self.neg_inf_rest], dim=-1)
        cand = (self.score.unsqueeze(-1) + torch.where(free3, top_lp, alone)).view(b, k * k)
        codes = torch.where(free3, top_code, torch.where(active, forced_code, self.zero_code).unsqueeze(-1)).view(b, k * k)

        new_score, pick = torch.topk(cand, k, dim=-1)  # sorted: merge relies on it
        live = None
        if b > 1:  # an utterance whose hypotheses are all final is frozen (NeMo's loop would end)
            live = active.any(dim=-1, keepdim=True)
            pick = torch.where(live, pick, self.diag)
        parent = self.rows_of.gather(1, pick)  # [B, K] rows u * K + parent slot
        rows = parent.view(-1)
        # one lookup gives what the codes do: mul, add, took a token, predictor input, label
        fused = self.codes.fused[codes.gather(1, pick)]
        old = info.view(-1, N_FIELDS).index_select(0, rows).view(b, k, N_FIELDS)
        info = torch.addcmul(fused[..., N_FIELDS:2 * N_FIELDS], old, fused[..., :N_FIELDS])
        took, feed = fused[..., 2 * N_FIELDS], fused[..., 2 * N_FIELDS + 1]
        if self.hot is not None:
            trie = old[..., TRIE]
            info[..., TRIE] = torch.where(took.bool(), self.hot[0][trie, feed.clamp(max=self.blank - 1)], trie)
        self.info = info
        self.picks.append(parent)
        self.infos.append(info)
        self.lps.append(torch.take(self.tok_logp, torch.add(fused[..., 2 * N_FIELDS + 2], parent, alpha=self.n_tok)))
        if self.confidence is not None:
            self.confs.append(torch.take(self.tok_conf, parent))
        score = self.merge(new_score, info)
        self.score = score if live is None else torch.where(live, score, self.score)

        # predictor: rows that took a token advance, the others keep their parent's output and state
        # (the predictor reads all its weights whatever the rows: it runs only when a row took a
        # token, on those rows alone; on about half the steps none did)
        took, feed = took.view(-1), feed.view(-1)
        n_took = int(took.sum())
        if n_took == 0:
            self.pred, self.state = self.pred.index_select(0, rows), self.steps.select_state(self.state, rows)
        elif n_took == rows.numel():
            self.pred, self.state = self.steps.predict(feed.contiguous(), self.steps.select_state(self.state, rows))
        else:
            idx = took.nonzero().view(-1)
            sel = rows.index_select(0, idx)
            pred, state = self.steps.predict(feed.index_select(0, idx), self.steps.select_state(self.state, sel))
            # rows of [old, new] each slot takes: its parent's, or its new one
            order = rows.index_copy(0, idx, self.new_rows[:n_took])
            self.pred = torch.cat([self.pred, pred]).index_select(0, order)
            self.state = self.steps.select_state(self.steps.cat_states([self.state, state]), order)
        self.active = info[..., TIME] <= self.last

    def merge(self, score, info):
        """Hypotheses with the same tokens (hash and count) and, for TDT, the same frame merge: the
        first best of them keeps the log-sum-exp of their scores, the others are emptied. `score`
        is sorted (best first), so the first best is the first slot of its group."""
        if self.k == 1:
            return score
        key = info[..., TIME:] if self.tdt else info[..., N_LABELS:]
        same = (key.unsqueeze(2) == key.unsqueeze(1)).all(dim=-1)
        if self.cpu and int(same.sum()) == same.shape[0] * self.k:  # each slot only matches itself
            return score  # (most steps): a keeper's log-sum-exp would be its own score, exactly
        dup = (same & self.earlier).any(dim=-1)  # an earlier slot has the same key
        # torch.logsumexp's arithmetic, the group's max being the keeper's own score
        group = torch.where(same, score.unsqueeze(1), self.neg_inf)
        top = torch.where(torch.isinf(score), 0.0, score)
        return (group - top.unsqueeze(-1)).exp_().sum(dim=-1).log_().add_(top).masked_fill_(dup, -math.inf)

    # -- the whole search -----------------------------------------------------------------------
    def run(self, score_norm: bool) -> list[list[Decoded]]:
        while bool(self.active.any()):
            self.step()
        if self.sums and not bool(torch.isfinite(torch.stack(self.sums)).all()):
            raise ValueError("the joint produced non-finite logits (log-probabilities would not be finite)")
        score = self.score
        n_labels = self.info[..., N_LABELS]
        if self.hot is not None:
            score = score + self.hot[2][self.info[..., TRIE]]
        norm = score / (n_labels.to(score.dtype) + 1)
        order = torch.sort(norm if score_norm else score, dim=-1, descending=True, stable=True).indices
        ids, frames, durs, lps, confs = self.trace(order)
        scores = score.gather(1, order).tolist()
        norms = norm.gather(1, order).tolist()
        out = []
        for u in range(self.b):
            out.append([Decoded(ids=ids[u][j], frames=frames[u][j], durations=durs[u][j],
                                confidences=confs[u][j], logprobs=lps[u][j],
                                score=scores[u][j], normalized_score=norms[u][j])
                        for j in range(self.k) if scores[u][j] != -math.inf])
        return out

    def trace(self, order: torch.Tensor):
        """Follow each slot of `order` [B, K] back through the steps -> per utterance and slot:
        token ids, frames, durations."""
        b, k = self.b, self.k
        if not self.picks:
            return ([[[] for _ in range(k)] for _ in range(b)] for _ in range(5))
        parents = torch.stack(self.picks) % k
        infos = torch.stack(self.infos)
        rec = torch.stack([parents, infos[..., CODE], infos[..., TIME]], dim=1).cpu().numpy()  # [S, 3, B, K]
        path = np.empty((rec.shape[0], 2, b, k), dtype=np.int64)
        floats = [torch.stack(self.lps)] + ([torch.stack(self.confs)] if self.confs else [])
        flt = torch.stack(floats, dim=1).double().cpu().numpy()  # [S, 1 or 2, B, K]
        fpath = np.empty((rec.shape[0], flt.shape[1], b, k), dtype=np.float64)
        ptr = order.cpu().numpy()
        utt = np.arange(b)[:, None]
        for s in range(rec.shape[0] - 1, -1, -1):
            r = rec[s][:, utt, ptr]
            path[s] = r[1:]
            fpath[s] = flt[s][:, utt, ptr]
            ptr = r[0]
        c = self.codes
        label, dur, token = (x.cpu().numpy() for x in (c.label, c.dur, c.token))
        ids, frames, durs, lps, confs = [], [], [], [], []
        for u in range(b):
            iu, fu, du, lu, cu = [], [], [], [], []
            for j in range(k):
                code, time = path[:, 0, u, j], path[:, 1, u, j]
                sel = token[code]
                iu.append(label[code[sel]].tolist())
                lu.append(fpath[sel, 0, u, j].tolist())
                cu.append(fpath[sel, 1, u, j].tolist() if fpath.shape[1] > 1 else [])
                if self.tdt:  # a token moves time by its duration; its frame is where it started
                    fu.append((time[sel] - dur[code[sel]]).tolist())
                    du.append(dur[code[sel]].tolist())
                else:  # an RNN-T token does not move time
                    fu.append(time[sel].tolist())
                    du.append([1] * len(fu[-1]))
            ids.append(iu)
            frames.append(fu)
            durs.append(du)
            lps.append(lu)
            confs.append(cu)
        return ids, frames, durs, lps, confs

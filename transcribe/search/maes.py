"""Modified adaptive expansion search (mAES) for TDT and RNN-T transducers.

The search of Kim et al. (2020), as NeMo runs it for one utterance in `BeamTDTInfer` and
`BeamRNNTInfer` (search_type "maes"), on a `TransducerSteps` and projected encoder frames.

At each frame the hypotheses first pool probability mass from their prefixes (prefix search),
then are expanded for at most `num_steps` rounds: each round scores the hypotheses' candidates,
keeps those within `expansion_gamma` of the hypothesis' best candidate (out of the top
`beam_size + expansion_beta`), and expands again only the candidates that stay on the frame (RNN-T:
every label; TDT: labels with duration 0); the knobs are a `MaesOptions`. After the last round those still on the frame are
closed with a blank. The `beam_size` best hypotheses are kept, and at the end ranked by score,
or by score / (tokens + 1) with `score_norm` (NeMo counts its leading blank sentinel).

NeMo's behaviour is kept where it matters to the result; each point is marked "NeMo:" below.

Tokens per frame: as in NeMo's mAES, nothing bounds the labels a hypothesis emits on one frame but
the `num_steps` rounds (one label a round); `steps.max_symbols`, greedy's cap, is not used. No work
guard is needed either: a round expands each hypothesis into at most `beam_size + expansion_beta`
candidates, so a frame's work is bounded by the rounds, whatever the model's probabilities (even a
model that never lets the default beam leave a frame; tests/test_beam_many_symbols.py).

Predictor outputs live in a tree of token-sequence nodes, one per distinct sequence that a live
hypothesis reaches, made when a hypothesis first needs it and computed batched over a step's new
sequences: the predictor runs once per sequence, as with NeMo's decoder cache, while memory stays
bounded on long inputs (a node no hypothesis reaches is freed; should a later expansion rebuild its
sequence, the predictor runs again, on the same inputs).
"""
from __future__ import annotations

import itertools
import math
import weakref
from dataclasses import dataclass
from typing import Optional

import torch

from .decoded import Decoded
from .steps import TransducerSteps, check_durations, logaddexp32


@dataclass(frozen=True)
class MaesOptions:
    """The mAES knobs (NeMo's maes_num_steps, maes_prefix_alpha, maes_expansion_beta and
    maes_expansion_gamma), NeMo's defaults: at most `num_steps` expansion rounds per frame; prefix
    search over prefixes at most `prefix_alpha` tokens shorter; candidates out of the top
    `beam_size + expansion_beta`, kept within `expansion_gamma` of the best."""

    num_steps: int = 2
    prefix_alpha: int = 1
    expansion_beta: int = 2
    expansion_gamma: float = 2.3


class _Node:
    """A token sequence: its last token, parent and depth; the predictor output and state after it
    (computed on demand: `pred` is None until then)."""

    __slots__ = ("uid", "parent", "token", "depth", "key", "pred", "state", "row", "__weakref__")

    def __init__(self, uid: int, parent: Optional["_Node"], token: int):
        self.uid = uid
        self.parent = parent
        self.token = token
        self.depth = 0 if parent is None else parent.depth + 1
        self.key = (-1, -1) if parent is None else (parent.uid, token)  # the sequence, as _Hyp.key
        self.pred = None
        self.state = None
        self.row = 0

    def ancestor(self, up: int) -> "_Node":
        node = self
        for _ in range(up):
            node = node.parent
        return node

    def path_from(self, ancestor: "_Node") -> list["_Node"]:
        """The nodes after `ancestor` down to this one."""
        out = []
        node = self
        while node is not ancestor:
            out.append(node)
            node = node.parent
        return out[::-1]

    def chain(self) -> list["_Node"]:
        """The nodes from the first token to this one (the root excluded)."""
        out = []
        node = self
        while node.parent is not None:
            out.append(node)
            node = node.parent
        return out[::-1]


class _Hyp:
    """A hypothesis: its sequence (`node`, then `token` when >= 0: a label not yet given a node, as
    most expansions are pruned before they need the predictor), score, the frame it is next expanded
    at (TDT), its emissions as a linked list (frame, duration, previous) and its hotword state."""

    __slots__ = ("node", "token", "score", "last", "emits", "hw")

    def __init__(self, node, token, score, last, emits, hw):
        self.node = node
        self.token = token
        self.score = score
        self.last = last
        self.emits = emits
        self.hw = hw

    def key(self) -> tuple[int, int]:
        """Equal exactly when the token sequences are equal (among live hypotheses)."""
        return (self.node.uid, self.token) if self.token >= 0 else self.node.key

    def length(self) -> int:
        """NeMo's len(y_sequence): the tokens plus its leading blank sentinel."""
        return self.node.depth + 1 + (self.token >= 0)


def _logaddexp(a: float, b: float) -> float:
    """float64 log(exp(a) + exp(b)), as numpy's logaddexp."""
    if a == b:
        return a + math.log(2.0)
    m, d = (a, b - a) if a > b else (b, a - b)
    return m + math.log1p(math.exp(d))


class _Search:
    """One utterance's search state: the model steps, the node tree and the options."""

    def __init__(self, enc, steps: TransducerSteps, beam_size: int, options: MaesOptions, hotwords):
        self.enc = enc
        self.steps = steps
        self.blank = steps.blank
        self.n_tok = steps.blank + 1
        self.durations = steps.durations
        self.beam = beam_size
        self.num_steps = int(options.num_steps)
        self.alpha = int(options.prefix_alpha)
        self.max_candidates = beam_size + int(options.expansion_beta)
        self.gamma = float(options.expansion_gamma)
        self.hotwords = hotwords
        self.uids = itertools.count(1)
        # (parent uid, token) -> child: a child keeps its parent alive, nothing keeps a child alive
        # but the hypotheses (and descendants) that reach it.
        self.children: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
        self.root = _Node(0, None, steps.blank)
        pred, state = steps.predict(torch.tensor([steps.blank], dtype=torch.long, device=enc.device),
                                    steps.init_state(1))
        self.root.pred, self.root.state, self.root.row = pred[0], state, 0

    # -- tree and predictor ------------------------------------------------------------------
    def child(self, node: _Node, token: int) -> _Node:
        key = (node.uid, token)
        c = self.children.get(key)
        if c is None:
            c = _Node(next(self.uids), node, token)
            self.children[key] = c
        return c

    def nodes_of(self, hyps: list[_Hyp]) -> list[_Node]:
        """The hypotheses' nodes, made for those that have a pending label."""
        for h in hyps:
            if h.token >= 0:
                h.node, h.token = self.child(h.node, h.token), -1
        return [h.node for h in hyps]

    def ensure_preds(self, nodes) -> None:
        """Run the predictor once, batched, for the nodes (distinct sequences) that lack an output."""
        todo, seen = [], set()
        for n in nodes:
            if n.pred is None and n.uid not in seen:
                seen.add(n.uid)
                todo.append(n)
        if not todo:
            return
        groups: dict[int, list] = {}
        for n in todo:
            groups.setdefault(id(n.parent.state), []).append(n)
        order, parts = [], []
        dev = self.enc.device
        for members in groups.values():
            rows = torch.tensor([m.parent.row for m in members], dtype=torch.long, device=dev)
            parts.append(self.steps.select_state(members[0].parent.state, rows))
            order.extend(members)
        state = parts[0] if len(parts) == 1 else self.steps.cat_states(parts)
        labels = torch.tensor([n.token for n in order], dtype=torch.long, device=dev)
        pred, state = self.steps.predict(labels, state)
        for i, n in enumerate(order):
            n.pred, n.state, n.row = pred[i], state, i

    def logits(self, t: int, nodes) -> torch.Tensor:
        self.ensure_preds(nodes)
        preds = torch.stack([n.pred for n in nodes])
        out = self.steps.joint(self.enc[t][None], preds)
        return out.float() if out.dtype != torch.float32 else out

    def token_logp(self, t: int, nodes) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Log-probs of the tokens (and, TDT, of the durations) for each node at frame t."""
        out = self.logits(t, nodes)
        tdt = self.durations is not None
        width = self.n_tok + (len(self.durations) if tdt else 0)
        if out.shape[-1] != width:
            raise ValueError(f"the joint gives {out.shape[-1]} logits, expected {width} "
                             f"({self.n_tok} tokens{f' + {len(self.durations)} durations' if tdt else ''})")
        if not bool(torch.isfinite(out).all()):
            raise ValueError(f"non-finite log-probabilities: the joint gave a NaN or infinite logit at frame {t}")
        # NeMo: RNN-T log-softmaxes the whole output; TDT the tokens and the durations separately
        # (softmax temperature 1: its division is exact and left out).
        logp = torch.log_softmax(out[:, :self.n_tok], dim=-1)
        dlogp = torch.log_softmax(out[:, self.n_tok:], dim=-1) if tdt else None
        return logp, dlogp

    # -- hotwords ----------------------------------------------------------------------------
    def boost(self, state: int, token: int) -> tuple[int, float]:
        if self.hotwords is None:
            return state, 0.0
        new, bonus = self.hotwords.step(state, token)
        return new, float(bonus)

    # -- prefix search -----------------------------------------------------------------------
    def prefix_search(self, hyps: list[_Hyp], t: int, zero_idx: Optional[int]) -> None:
        """NeMo's prefix_search: `hyps` sorted longest first; each hypothesis whose sequence extends a
        later (shorter) one by at most `alpha` tokens adds (log-sum-exp) the prefix's score plus the
        log-probs of the missing tokens at this frame (TDT: each with duration 0), every term from
        the prefix's own score before that prefix is itself updated. In place."""
        pairs = []
        for i, cur in enumerate(hyps[:-1]):
            lc = cur.node.depth
            for pref in hyps[i + 1:]:
                lp = pref.node.depth
                if lp < lc and lc - lp <= self.alpha and cur.node.ancestor(lc - lp) is pref.node:
                    pairs.append((cur, pref))
        if not pairs:
            return
        # One joint over every (sequence, next token) a pair needs: the nodes of cur's chain from the
        # prefix's depth on, each scoring the token that follows it in cur.
        index: dict[int, int] = {}
        nodes, nexts = [], []
        for cur, pref in pairs:
            node = cur.node
            while node is not pref.node:
                if node.uid not in index:  # keyed by the child: one parent may need several tokens
                    index[node.uid] = len(nodes)
                    nodes.append(node.parent)
                    nexts.append(node.token)
                node = node.parent
        logp, dlogp = self.token_logp(t, nodes)
        rows = torch.arange(len(nodes), device=logp.device)
        picked = logp[rows, torch.tensor(nexts, dtype=torch.long, device=logp.device)]
        if dlogp is not None:
            picked = picked + dlogp[:, zero_idx]  # float32 sum, as NeMo's float(logp[k] + dur_logp[0])
        terms = picked.tolist()
        for cur, pref in pairs:
            path = cur.node.path_from(pref.node)
            hw = pref.hw
            score = pref.score
            for node in path:
                score += terms[index[node.uid]]
                hw, bonus = self.boost(hw, node.token)
                score += bonus
            cur.score = _logaddexp(cur.score, score)

    # -- results -----------------------------------------------------------------------------
    def finish(self, kept: list[_Hyp], score_norm: bool) -> list[Decoded]:
        if self.hotwords is not None:
            final = self.hotwords.final
            for h in kept:
                h.score += float(final[h.hw])
        # NeMo's sort_nbest (a stable sort): by score, or by score / len(y_sequence).
        key = (lambda h: h.score / h.length()) if score_norm else (lambda h: h.score)
        out = []
        self.nodes_of(kept)
        for h in sorted(kept, key=key, reverse=True):
            ids = [n.token for n in h.node.chain()]
            frames, durs = [], []
            e = h.emits
            while e is not None:
                frames.append(e[0])
                durs.append(e[1])
                e = e[2]
            out.append(Decoded(ids=ids, frames=frames[::-1], durations=durs[::-1], score=h.score,
                               normalized_score=h.score / h.length()))
        return out


def _sort(hyps: list[_Hyp], beam: Optional[int] = None) -> list[_Hyp]:
    out = sorted(hyps, key=lambda h: h.score, reverse=True)
    return out if beam is None else out[:beam]


def _merge(hyps: list[_Hyp]) -> list[_Hyp]:
    """NeMo's TDT merge_duplicate_hypotheses: hypotheses with the same tokens and the same next frame
    become one, the best-scored (its frames kept), with the log-sum-exp of the scores."""
    kept: dict[tuple[int, int], _Hyp] = {}
    for h in _sort(hyps):
        key = (h.key(), h.last)
        k = kept.get(key)
        if k is None:
            kept[key] = h
        else:
            k.score = logaddexp32(k.score, h.score)
    return list(kept.values())


def _tdt(s: _Search, length: int) -> list[_Hyp]:
    durations = s.durations
    mc = s.max_candidates
    zero_idx = durations.index(0) if 0 in durations else None
    # NeMo: the smallest positive duration, which a blank predicted with duration 0 takes instead.
    min_pos_idx = min((i for i, d in enumerate(durations) if d > 0), key=lambda i: durations[i])
    kept = [_Hyp(s.root, -1, 0.0, 0, None, 0 if s.hotwords is None else s.hotwords.root)]
    for t in range(length):
        hyps = [h for h in kept if h.last == t]
        kept = [h for h in kept if h.last > t]
        if not hyps:
            continue
        s.nodes_of(hyps)  # the prefix search walks their nodes
        # NeMo: the prefix search needs a zero duration (a label that stays on the frame); a TDT
        # without one skips it, and then no expansion stays on the frame either.
        if zero_idx is not None:
            hyps = sorted(hyps, key=lambda h: h.node.depth, reverse=True)
            s.prefix_search(hyps, t, zero_idx)
        list_b: list[_Hyp] = []
        list_nb: list[_Hyp] = []
        for n in range(s.num_steps):
            logp, dlogp = s.token_logp(t, s.nodes_of(hyps))
            top_lp, top_tok = logp.topk(mc, dim=-1)
            # NeMo: the top `mc` (duration, token) pairs out of durations x the top `mc` tokens, indices
            # flattened duration-major; pruned by value against the hypothesis' best pair (in float32).
            total = (dlogp[:, :, None] + top_lp[:, None, :]).reshape(len(hyps), -1)
            tot_lp, tot_idx = total.topk(mc, dim=-1)
            mask = tot_lp >= tot_lp.max(dim=-1, keepdim=True).values - s.gamma
            tot_lp, tot_idx, mask, top_tok = tot_lp.tolist(), tot_idx.tolist(), mask.tolist(), top_tok.tolist()
            list_exp: list[_Hyp] = []
            for i, hyp in enumerate(hyps):
                for lp, idx, keep in zip(tot_lp[i], tot_idx[i], mask[i]):
                    if not keep:
                        continue
                    k = top_tok[i][idx % mc]
                    d = durations[idx // mc]
                    if k == s.blank:
                        if d == 0:
                            # NeMo: a blank with duration 0 moves by the smallest positive duration,
                            # its score still that of duration 0 (the pair may duplicate another
                            # blank's and is then merged).
                            d = durations[min_pos_idx]
                        list_b.append(_Hyp(hyp.node, -1, hyp.score + lp, hyp.last + d, hyp.emits, hyp.hw))
                        continue
                    hw, bonus = s.boost(hyp.hw, k)
                    # NeMo's TDT timestamp of a label is time_idx + duration: frame t, duration d.
                    new = _Hyp(hyp.node, k, hyp.score + lp + bonus, hyp.last + d, (t, d, hyp.emits), hw)
                    (list_exp if d == 0 else list_nb).append(new)
            if not list_exp:
                kept = _sort(_merge(kept + list_b + list_nb), s.beam)
                break
            if n < s.num_steps - 1:
                # NeMo: the labels that stay on the frame are merged and expanded again, all of them
                # (not cut to the beam; gamma bounds them, num_steps bounds the rounds).
                hyps = _merge(list_exp)
                continue
            # Last round: close the labels still on the frame with a blank of the most probable
            # duration -- NeMo: duration 0 replaced by the smallest positive one, and here (unlike
            # the expansions above) scored with that replacement's log-prob.
            logp, dlogp = s.token_logp(t, s.nodes_of(list_exp))
            best_d = torch.max(dlogp, dim=-1).indices
            if zero_idx is not None:
                best_d = torch.where(best_d == zero_idx, torch.full_like(best_d, min_pos_idx), best_d)
            close = (logp[:, s.blank] + dlogp.gather(1, best_d[:, None])[:, 0]).tolist()  # float32 sums
            for h, c, di in zip(list_exp, close, best_d.tolist()):
                h.score += c
                h.last += durations[di]
            kept = _sort(_merge(kept + list_b + list_exp + list_nb), s.beam)
    return kept


def _rnnt(s: _Search, length: int) -> list[_Hyp]:
    mc = s.max_candidates
    kept = [_Hyp(s.root, -1, 0.0, 0, None, 0 if s.hotwords is None else s.hotwords.root)]
    for t in range(length):
        # NeMo: every hypothesis is expanded at every frame, after a prefix search over all of them.
        hyps = sorted(kept, key=lambda h: h.node.depth, reverse=True)
        s.prefix_search(hyps, t, None)
        # NeMo: no merging in RNN-T mAES; instead a label expansion that rebuilds the sequence of a
        # hypothesis present at the start of the frame is dropped (the check is not updated in later
        # rounds, so equal sequences can still meet in the beam, and stay apart).
        present = {h.key() for h in hyps}
        list_b: list[_Hyp] = []
        for n in range(s.num_steps):
            logp, _ = s.token_logp(t, s.nodes_of(hyps))
            top_lp, top_tok = logp.topk(mc, dim=-1)
            top_lp, top_tok = top_lp.tolist(), top_tok.tolist()
            list_exp: list[_Hyp] = []
            for i, hyp in enumerate(hyps):
                # NeMo's select_k_expansions: candidate scores hyp.score + logp (float64), kept
                # within gamma of the best, in ascending order of score.
                cands = [(k, hyp.score + lp) for k, lp in zip(top_tok[i], top_lp[i])]
                best = max(c[1] for c in cands)
                for k, score in sorted((c for c in cands if best - s.gamma <= c[1]), key=lambda c: c[1]):
                    if k == s.blank:
                        list_b.append(_Hyp(hyp.node, -1, score, t, hyp.emits, hyp.hw))
                    elif (hyp.node.uid, k) not in present:
                        hw, bonus = s.boost(hyp.hw, k)
                        # NeMo's RNN-T timestamp of a label is its frame; the duration is 1.
                        list_exp.append(_Hyp(hyp.node, k, score + bonus, t, (t, 1, hyp.emits), hw))
            if not list_exp:
                kept = _sort(list_b, s.beam)
                break
            s.ensure_preds(s.nodes_of(list_exp))
            if n < s.num_steps - 1:
                hyps = list_exp
                continue
            logp, _ = s.token_logp(t, [h.node for h in list_exp])
            blank_lp = logp[:, s.blank].tolist()
            for i, h in enumerate(list_exp):
                h.score += blank_lp[i]
            kept = _sort(list_b + list_exp, s.beam)
    return kept


def _check_options(beam_size: int, opts: MaesOptions, vocab: int) -> None:
    if int(beam_size) != beam_size or beam_size < 1:
        raise ValueError(f"beam_size must be an integer >= 1, got {beam_size}")
    if int(opts.num_steps) != opts.num_steps or opts.num_steps < 1:
        # NeMo's RNN-T refuses num_steps 1 (its TDT does not); one round is well defined for both.
        raise ValueError(f"maes_num_steps must be an integer >= 1, got {opts.num_steps}")
    if int(opts.prefix_alpha) != opts.prefix_alpha or opts.prefix_alpha < 0:
        raise ValueError(f"maes_prefix_alpha must be an integer >= 0, got {opts.prefix_alpha}")
    if int(opts.expansion_beta) != opts.expansion_beta or opts.expansion_beta < 0:
        raise ValueError(f"maes_expansion_beta must be an integer >= 0, got {opts.expansion_beta}")
    if not float(opts.expansion_gamma) >= 0.0:
        raise ValueError(f"maes_expansion_gamma must be >= 0, got {opts.expansion_gamma}")
    if beam_size + opts.expansion_beta > vocab:
        raise ValueError(f"beam_size ({beam_size}) + maes_expansion_beta ({opts.expansion_beta}) must be at most "
                         f"the vocabulary size ({vocab})")


def maes(
    enc: torch.Tensor,
    length,
    steps: TransducerSteps,
    beam_size: int = 4,
    options: MaesOptions = MaesOptions(),
    score_norm: bool = True,
    hotwords=None,
) -> list[Decoded]:
    """mAES over one utterance: enc [T, H] (projected for the joint), its first `length` frames.

    Returns at most `beam_size` hypotheses, best first (NeMo's N-best list, `return_best_hypothesis`
    off). Frames are the frame a label was emitted at; durations its TDT duration, 1 for RNN-T.
    `options` holds the mAES knobs (`MaesOptions`). `hotwords` (a HotwordTrie) adds its bonus to a
    hypothesis at each label and its final score at the end, before ranking.
    """
    if enc.dim() != 2:
        raise ValueError(f"enc must be [T, H] for one utterance, got shape {tuple(enc.shape)}")
    length = int(length)
    if not 0 <= length <= enc.shape[0]:
        raise ValueError(f"length {length} outside the {enc.shape[0]} encoder frames")
    _check_options(beam_size, options, steps.blank)  # NeMo's vocab_size: the labels, blank excluded
    durations = check_durations(steps.durations)
    if hotwords is not None and not (hasattr(hotwords, "step") and hasattr(hotwords, "final")):
        raise ValueError("hotwords must be a HotwordTrie (with step() and final)")
    with torch.inference_mode():
        s = _Search(enc, steps, int(beam_size), options, hotwords)
        if durations is not None:
            s.durations = durations
            kept = _tdt(s, length)
        else:
            kept = _rnnt(s, length)
        return s.finish(kept, score_norm)

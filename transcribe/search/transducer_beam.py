"""The default transducer beam searches, TDT and RNN-T, with the semantics of NeMo's
`BeamTDTInfer.default_beam_search` and `BeamRNNTInfer.default_beam_search`.

Both take one utterance: encoder frames projected for the joint `enc [T, H]`, its length and the
model's `TransducerSteps` (search.steps). They return the N-best list as `Decoded`s, best first,
with each token's emission frame and duration, so the best hypothesis keeps its timestamps.

TDT, frame by frame: the hypotheses whose last frame is the current one are expanded best first.
Token and duration logits get their own log-softmax; the top `beam` non-blank tokens and the top
durations are paired, and the best `beam` pairs by summed log-probability extend the hypothesis
(a pair with duration 0 stays on this frame and is expanded again); blank is paired with each top
non-zero duration. Hypotheses with the same tokens and the same next frame merge (logaddexp). The
frame ends when `beam` finished expansions score above every hypothesis still waiting on it.

Tokens per frame: like NeMo's, these searches put no bound on the tokens a hypothesis emits on one
frame. `steps.max_symbols` None is NeMo's semantics and what the recognizer runs (parakeet/beams.py
clears the greedy search's cap, which the model's steps carry, before calling these); an integer caps
the tokens a hypothesis emits on one frame, an explicit opt-in that departs from NeMo.

The work guard, instead of a cap: NeMo's loop over a frame ends only when `beam` finished hypotheses
score above every waiting one, and its lists are not pruned until then, so a model whose token (TDT:
token with duration 0) probability saturates at 1 never ends the frame, and a merely flat one makes
the frame take thousands of expansions (NeMo's list on the random tiny TDT model, beam 4, grows to
2,159 hypotheses through 1,336 expansions on one frame: 14-20 s of NeMo's time for that frame, 7 s of
ours). A frame may take `MAX_POPS_PER_BEAM * beam` expansions (2,048 per beam slot: 8,192 at beam 4);
at that count a frame that has not ended raises a ValueError naming the frame: never a truncated list,
so a result is NeMo's or an error. Each expansion scans NeMo's growing lists, so NeMo's time on a frame
grows with the square of its expansions or faster; measured on the tiny models with a saturated joint
at beam 4 (tools/nemo_beam_work_timing.py: NeMo 3.0.0, one CPU thread), NeMo's RNN-T beam takes 12.7 s for 4,096
expansions on one frame (about 50 s for 8,192) and its TDT beam 425 s for 4,096 (its merge hashes every
hypothesis's whole token list on each expansion: about an hour for 8,192). So the guard fires only on a
frame that NeMo would spend about a minute (RNN-T) or an hour (TDT) on, or never end. Reaching it costs
this search 0.6 s (RNN-T, whose frame keeps its lists in heaps) or about 30 s (TDT, whose merge after
each expansion re-sorts the frame's list as NeMo's does) at beam 4, 0.1 s / 0.6 s at beam 1. Sequences
are interned (`_Sequences`), so an expansion's cost does not grow with the tokens a hypothesis holds.

Where we differ from NeMo, on purpose: when the duration beam holds only duration 0 (beam 1), blank
takes the best-scoring positive duration; NeMo takes the smallest one (`blank_fallback="smallest"`
reproduces NeMo).

Scores follow NeMo's arithmetic: the TDT scores are float32 sums (NeMo adds float32 tensors), the
RNN-T ones double, so the N-best lists agree with NeMo's within float32 noise.
"""
from __future__ import annotations

import heapq
import weakref
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from .decoded import Decoded
from .steps import TransducerSteps, check_durations, logaddexp32

# The work guard: expansions one frame may take per beam slot before the search raises (see the module
# docstring: far beyond any frame NeMo ends in reasonable time).
MAX_POPS_PER_BEAM = 2048


class _Seq:
    """A token sequence, interned (`_Sequences`): equal live sequences are one object, so hypotheses
    compare and hash their sequences in constant time, however many tokens they hold. It carries the
    predictor's output and state after its last token once computed (NeMo's per-search cache)."""

    __slots__ = ("parent", "token", "length", "pred", "after", "__weakref__")

    def __init__(self, parent: Optional["_Seq"], token: int):
        self.parent = parent
        self.token = token
        self.length = 0 if parent is None else parent.length + 1
        self.pred = None
        self.after = None

    def ids(self) -> list[int]:
        out = []
        node = self
        while node.parent is not None:
            out.append(node.token)
            node = node.parent
        return out[::-1]


class _Sequences:
    """The interning table: (parent, token) -> the live child sequence. A sequence keeps its parent
    alive; nothing keeps a sequence alive but the hypotheses (and longer sequences) that reach it."""

    def __init__(self):
        self.root = _Seq(None, -1)
        self.children: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()

    def child(self, parent: _Seq, token: int) -> _Seq:
        key = (id(parent), token)  # the parent is alive (the caller holds it), so its id is its identity
        got = self.children.get(key)
        if got is None:
            got = _Seq(parent, token)
            self.children[key] = got
        return got


@dataclass
class _Hyp:
    seq: _Seq
    emits: Optional[tuple]  # (frame, duration, previous emits) of the last token, None before any
    score: Any  # np.float32 (TDT) or float (RNN-T)
    last_frame: int
    state: Any  # the predictor state before the last token (NeMo's dec_state)
    run: int = 0  # tokens emitted on the current frame
    hot: int = 0  # hotword automaton state


def _finite(logits: torch.Tensor, frame: int) -> None:
    if not bool(torch.isfinite(logits).all()):
        raise ValueError(f"non-finite log-probabilities at encoder frame {frame}")


class _Predictor:
    """Predictor outputs by token sequence, computed once per live sequence (NeMo's per-search cache;
    a sequence no hypothesis reaches any more is freed, and would be recomputed on the same inputs)."""

    def __init__(self, steps: TransducerSteps):
        self.steps = steps
        self.sequences = _Sequences()
        self.zero = steps.init_state(1)

    def logits(self, h: _Hyp, frame: torch.Tensor, t: int):
        """The joint's logits [V+1(+D)] for hypothesis h at encoder frame t (float32, checked
        finite), and the predictor state after its last token."""
        pred, state = self(h)
        logits = self.steps.joint(frame, pred)[0].float()
        _finite(logits, t)
        return logits, state

    def __call__(self, h: _Hyp):
        """-> (pred [1, H], state after the hypothesis's last token)."""
        seq = h.seq
        if seq.pred is None:
            last = seq.token if seq.length else self.steps.blank
            state = h.state if seq.length else self.zero
            seq.pred, seq.after = self.steps.predict(torch.tensor([last], dtype=torch.long, device=_device(self.zero)),
                                                     state)
        return seq.pred, seq.after


def _device(state) -> torch.device:
    if torch.is_tensor(state):
        return state.device
    for s in state:
        return _device(s)
    return torch.device("cpu")


def _result(hyps: list[_Hyp], score_norm: bool, hotwords) -> list[Decoded]:
    out = []
    for h in hyps:
        score = float(h.score)
        if hotwords is not None:
            score += float(hotwords.final[h.hot])
        frames, durations = [], []
        e = h.emits
        while e is not None:
            frames.append(e[0])
            durations.append(e[1])
            e = e[2]
        out.append(Decoded(ids=h.seq.ids(), frames=frames[::-1], durations=durations[::-1],
                           score=score, normalized_score=score / (h.seq.length + 1)))
    # NeMo's sort_nbest: by score / len(y_sequence), the leading blank sentinel counted.
    out.sort(key=(lambda d: d.normalized_score) if score_norm else (lambda d: d.score), reverse=True)
    return out


def _merge(hyps: list[_Hyp]) -> list[_Hyp]:
    """Hypotheses with the same tokens and next frame become one, their probabilities summed
    (float32, as NeMo does), the best one's history kept; the result is ordered best first."""
    kept: dict = {}
    for h in sorted(hyps, key=lambda x: x.score, reverse=True):
        key = (h.seq, h.last_frame)
        if key in kept:
            k = kept[key]
            k.score = np.float32(logaddexp32(float(k.score), float(h.score)))
        else:
            kept[key] = h
    return list(kept.values())


def _max_symbols(steps: TransducerSteps) -> float:
    """The cap on tokens a hypothesis emits on one frame: none (NeMo's semantics) unless the steps set one."""
    return float("inf") if steps.max_symbols is None else steps.max_symbols


def _over_budget(pops: int, beam: int, t: int) -> None:
    """The work guard (see the module docstring): raises once a frame has taken its budget of expansions."""
    budget = MAX_POPS_PER_BEAM * beam
    if pops >= budget:
        raise ValueError(
            f"the beam search took {budget} expansions ({MAX_POPS_PER_BEAM} per beam slot) on encoder frame {t} "
            f"without the frame ending: the model's token probabilities never let the hypotheses leave this frame "
            f"(NeMo's default beam search, which has no such guard, would run on); a cap on the tokens per frame "
            f"(TransducerSteps.max_symbols) or the greedy or malsd search decodes it")


@torch.inference_mode()
def tdt_beam(
    enc: torch.Tensor,
    length: int,
    steps: TransducerSteps,
    beam_size: int = 4,
    score_norm: bool = True,
    blank_fallback: str = "best",
    hotwords=None,
) -> list[Decoded]:
    """NeMo's default TDT beam search on one utterance (see the module docstring) -> N-best."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    max_symbols = _max_symbols(steps)
    if blank_fallback not in ("best", "smallest"):
        raise ValueError(f"blank_fallback must be 'best' or 'smallest', got {blank_fallback!r}")
    if steps.durations is None:
        raise ValueError("tdt_beam needs a TDT model (a duration table); use rnnt_beam for RNN-T")
    durations = check_durations(steps.durations)
    n_dur = len(durations)
    vocab = steps.blank  # non-blank tokens
    beam = min(beam_size, vocab)
    beam_k = min(beam, vocab - 1) if vocab > 1 else 1
    dur_k = min(beam, n_dur)
    zero_idx = durations.index(0) if 0 in durations else None
    smallest_positive = min((i for i, d in enumerate(durations) if d > 0), key=lambda i: durations[i])
    not_positive = torch.tensor([d <= 0 for d in durations], device=enc.device)
    predictor = _Predictor(steps)
    f32 = np.float32

    kept = [_Hyp(seq=predictor.sequences.root, emits=None, score=f32(0.0), last_frame=0, state=None)]
    for t in range(int(length)):
        hyps = [h for h in kept if h.last_frame == t]
        kept = [h for h in kept if h.last_frame > t]
        frame = enc[t : t + 1]
        pops = 0
        while hyps:
            best = max(hyps, key=lambda x: x.score)
            hyps.remove(best)
            pops += 1
            logits, state = predictor.logits(best, frame, t)
            logp = torch.log_softmax(logits[: vocab + 1], dim=-1)
            dlogp = torch.log_softmax(logits[vocab + 1 : vocab + 1 + n_dur], dim=-1)
            tok_top, tok_idx = logp[:-1].topk(beam_k)
            dur_top, dur_idx = dlogp.topk(dur_k)
            # every (duration, token) pair, duration-major as NeMo's cartesian product orders them
            pair_top, pair_idx = (dur_top[:, None] + tok_top[None, :]).flatten().topk(beam_k)
            for total, flat in zip(pair_top.tolist(), pair_idx.tolist()):
                tok = int(tok_idx[flat % beam_k])
                dur = durations[int(dur_idx[flat // beam_k])]
                if dur == 0 and best.run >= max_symbols:
                    continue  # the bound on tokens per frame
                h = _Hyp(seq=predictor.sequences.child(best.seq, tok), emits=(t, dur, best.emits),
                         score=f32(best.score + f32(total)), last_frame=best.last_frame + dur, state=state,
                         run=best.run + 1 if dur == 0 else 0, hot=best.hot)
                if hotwords is not None:
                    h.hot, bonus = hotwords.step(best.hot, tok)
                    h.score = f32(h.score + f32(bonus))
                (hyps if dur == 0 else kept).append(h)
            blank_lp = f32(logp[vocab].item())
            for di in dur_idx.tolist():
                if di == zero_idx:
                    if len(dur_idx) > 1:
                        continue
                    if blank_fallback == "smallest":
                        di = smallest_positive
                    else:
                        di = int(dlogp.masked_fill(not_positive, -float("inf")).argmax())
                score = f32(f32(best.score + blank_lp) + f32(dlogp[di].item()))
                kept.append(_Hyp(seq=best.seq, emits=best.emits, score=score,
                                 last_frame=best.last_frame + durations[di], state=best.state, hot=best.hot))
            kept = _merge(kept)
            if not hyps:
                kept = sorted(kept, key=lambda x: x.score, reverse=True)[:beam]
                break
            hyps_max = max(h.score for h in hyps)
            above = sorted((h for h in kept if h.score > hyps_max), key=lambda x: x.score)
            if len(above) >= beam:
                kept = above
                break
            _over_budget(pops, beam, t)
    return _result(kept, score_norm, hotwords)


@torch.inference_mode()
def rnnt_beam(
    enc: torch.Tensor,
    length: int,
    steps: TransducerSteps,
    beam_size: int = 4,
    score_norm: bool = True,
    hotwords=None,
) -> list[Decoded]:
    """NeMo's default RNN-T beam search on one utterance -> N-best.

    Frame by frame, the best waiting hypothesis is expanded with blank (it is done with this
    frame) and with the top `beam` tokens (they wait on this frame), until `beam` finished
    hypotheses score above every waiting one. No bound on the tokens per frame unless
    `steps.max_symbols` sets one; the work guard of the module docstring raises on a frame that never
    ends. At beam 1 NeMo runs its greedy search instead, whose score leaves out the blanks'
    log-probabilities; this is a beam of one, blanks scored.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    max_symbols = _max_symbols(steps)
    if steps.durations is not None:
        raise ValueError("rnnt_beam takes an RNN-T model; use tdt_beam for TDT")
    vocab = steps.blank
    beam = min(beam_size, vocab)
    beam_k = min(beam, vocab - 1) if vocab > 1 else 1
    predictor = _Predictor(steps)

    kept = [_Hyp(seq=predictor.sequences.root, emits=None, score=0.0, last_frame=0, state=None)]
    for t in range(int(length)):
        kept = _rnnt_frame(kept, t, enc[t : t + 1], predictor, (vocab, beam, beam_k, max_symbols), hotwords)
        for h in kept:
            h.run = 0
    return _result(kept, score_norm, hotwords)


def _rnnt_frame(kept: list[_Hyp], t: int, frame: torch.Tensor, predictor: _Predictor, sizes, hotwords) -> list[_Hyp]:
    """One frame of NeMo's RNN-T default beam -> the hypotheses done with it, in NeMo's order.

    NeMo keeps the waiting hypotheses in a list, takes max() of it (the best score, the earliest in
    the list among equal ones) and rescans its lists after each expansion; here the waiting ones are
    a heap ordered by (score, place in NeMo's list) and the `beam` best finished scores a min-heap, so
    an expansion costs a logarithm, not a scan, with the same choices."""
    vocab, beam, beam_k, max_symbols = sizes
    waiting = [(-h.score, i, h) for i, h in enumerate(kept)]
    heapq.heapify(waiting)
    order = len(waiting)
    done: list[_Hyp] = []
    done_top: list = []  # the `beam` best scores in `done`, a min-heap
    pops = 0
    while waiting:
        best = heapq.heappop(waiting)[2]
        pops += 1
        logits, state = predictor.logits(best, frame, t)
        logp = torch.log_softmax(logits[: vocab + 1], dim=-1)
        top, idx = logp[:-1].topk(beam_k)
        if best.run < max_symbols:
            for lp, tok in zip(top.tolist(), idx.tolist()):
                h = _Hyp(seq=predictor.sequences.child(best.seq, tok), emits=(t, 1, best.emits),
                         score=best.score + lp, last_frame=t, state=state, run=best.run + 1, hot=best.hot)
                if hotwords is not None:
                    h.hot, bonus = hotwords.step(best.hot, tok)
                    h.score += float(bonus)
                heapq.heappush(waiting, (-h.score, order, h))
                order += 1
        h = _Hyp(seq=best.seq, emits=best.emits, score=best.score + float(logp[vocab]), last_frame=t + 1,
                 state=best.state, hot=best.hot)
        done.append(h)
        if len(done_top) < beam:
            heapq.heappush(done_top, h.score)
        elif h.score > done_top[0]:
            heapq.heapreplace(done_top, h.score)
        if not waiting:  # only with a cap on tokens per frame: NeMo always has token expansions waiting
            return sorted(done, key=lambda x: x.score, reverse=True)[:beam]
        hyps_max = -waiting[0][0]
        if len(done_top) >= beam and done_top[0] > hyps_max:  # NeMo: `beam` finished ones score above
            return sorted((h for h in done if h.score > hyps_max), key=lambda x: x.score)
        _over_budget(pops, beam, t)
    return done

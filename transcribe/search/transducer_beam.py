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

Where we differ from NeMo, on purpose:
- when the duration beam holds only duration 0 (beam 1), blank takes the best-scoring positive
  duration; NeMo takes the smallest one (`blank_fallback="smallest"` reproduces NeMo);
- a hypothesis emits at most `steps.max_symbols` tokens on one frame (NeMo has no bound: a model whose
  duration-0 token probability saturates at 1 would loop forever), and a frame takes at most
  `MAX_POPS_PER_BEAM * beam` expansions, after which its best `beam` hypotheses go on. Neither
  bound is reached by a model that decodes normally; both keep long audio from looping.

Scores follow NeMo's arithmetic: the TDT scores are float32 sums (NeMo adds float32 tensors), the
RNN-T ones double, so the N-best lists agree with NeMo's within float32 noise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .decoded import Decoded
from .steps import TransducerSteps, check_durations, logaddexp32

# A frame stops expanding after this many expansions per beam slot (see the module docstring).
MAX_POPS_PER_BEAM = 64


@dataclass
class _Hyp:
    ids: tuple
    frames: list
    durations: list
    score: Any  # np.float32 (TDT) or float (RNN-T)
    last_frame: int
    state: Any  # the predictor state before the last token (NeMo's dec_state)
    run: int = 0  # tokens emitted on the current frame
    hot: int = 0  # hotword automaton state


def _finite(logits: torch.Tensor, frame: int) -> None:
    if not bool(torch.isfinite(logits).all()):
        raise ValueError(f"non-finite log-probabilities at encoder frame {frame}")


class _Predictor:
    """Predictor outputs by token sequence, computed once each (NeMo's per-search cache)."""

    def __init__(self, steps: TransducerSteps):
        self.steps = steps
        self.cache: dict = {}
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
        got = self.cache.get(h.ids)
        if got is None:
            last = h.ids[-1] if h.ids else self.steps.blank
            state = h.state if h.ids else self.zero
            got = self.steps.predict(torch.tensor([last], dtype=torch.long, device=_device(self.zero)), state)
            self.cache[h.ids] = got
        return got


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
        out.append(Decoded(ids=list(h.ids), frames=list(h.frames), durations=list(h.durations),
                           score=score, normalized_score=score / (len(h.ids) + 1)))
    # NeMo's sort_nbest: by score / len(y_sequence), the leading blank sentinel counted.
    out.sort(key=(lambda d: d.normalized_score) if score_norm else (lambda d: d.score), reverse=True)
    return out


def _merge(hyps: list[_Hyp]) -> list[_Hyp]:
    """Hypotheses with the same tokens and next frame become one, their probabilities summed
    (float32, as NeMo does), the best one's history kept; the result is ordered best first."""
    kept: dict = {}
    for h in sorted(hyps, key=lambda x: x.score, reverse=True):
        key = (h.ids, h.last_frame)
        if key in kept:
            k = kept[key]
            k.score = np.float32(logaddexp32(float(k.score), float(h.score)))
        else:
            kept[key] = h
    return list(kept.values())


def _max_symbols(steps: TransducerSteps) -> int:
    """The bound on tokens per frame, which the default beams need (see the module docstring)."""
    if steps.max_symbols is None:
        raise ValueError("the default beam needs a bound on tokens per frame: max_symbols must be at least 1, got None")
    return steps.max_symbols


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

    kept = [_Hyp(ids=(), frames=[], durations=[], score=f32(0.0), last_frame=0, state=None)]
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
                h = _Hyp(ids=best.ids + (tok,), frames=best.frames + [t], durations=best.durations + [dur],
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
                kept.append(_Hyp(ids=best.ids, frames=best.frames, durations=best.durations, score=score,
                                 last_frame=best.last_frame + durations[di], state=best.state, hot=best.hot))
            kept = _merge(kept)
            if hyps and pops < MAX_POPS_PER_BEAM * beam:
                hyps_max = max(h.score for h in hyps)
                above = sorted((h for h in kept if h.score > hyps_max), key=lambda x: x.score)
                if len(above) >= beam:
                    kept = above
                    break
            else:
                kept = sorted(kept, key=lambda x: x.score, reverse=True)[:beam]
                break
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
    hypotheses score above every waiting one. A hypothesis emits at most `steps.max_symbols` tokens on
    one frame, and a frame takes at most `MAX_POPS_PER_BEAM * beam` expansions (NeMo has neither
    bound; a normal model never reaches them). At beam 1 NeMo runs its greedy search instead,
    whose score leaves out the blanks' log-probabilities; this is a beam of one, blanks scored.
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

    kept = [_Hyp(ids=(), frames=[], durations=[], score=0.0, last_frame=0, state=None)]
    for t in range(int(length)):
        hyps = kept
        kept = []
        frame = enc[t : t + 1]
        pops = 0
        while hyps:
            best = max(hyps, key=lambda x: x.score)
            hyps.remove(best)
            pops += 1
            logits, state = predictor.logits(best, frame, t)
            logp = torch.log_softmax(logits[: vocab + 1], dim=-1)
            top, idx = logp[:-1].topk(beam_k)
            if best.run < max_symbols:
                for lp, tok in zip(top.tolist(), idx.tolist()):
                    h = _Hyp(ids=best.ids + (tok,), frames=best.frames + [t], durations=best.durations + [1],
                             score=best.score + lp, last_frame=t, state=state, run=best.run + 1, hot=best.hot)
                    if hotwords is not None:
                        h.hot, bonus = hotwords.step(best.hot, tok)
                        h.score += float(bonus)
                    hyps.append(h)
            kept.append(_Hyp(ids=best.ids, frames=best.frames, durations=best.durations,
                             score=best.score + float(logp[vocab]), last_frame=t + 1, state=best.state, hot=best.hot))
            if not hyps or pops >= MAX_POPS_PER_BEAM * beam:
                kept = sorted(kept, key=lambda x: x.score, reverse=True)[:beam]
                break
            hyps_max = max(h.score for h in hyps)
            above = sorted((h for h in kept if h.score > hyps_max), key=lambda x: x.score)
            if len(above) >= beam:
                kept = above
                break
        for h in kept:
            h.run = 0
    return _result(kept, score_norm, hotwords)

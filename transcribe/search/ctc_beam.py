"""CTC beam search over a log-probability matrix, with N-best output, an optional word n-gram LM
and optional hotword boosting. Without an LM or hotwords it gives the same N-best lists as NeMo's
`beam_batch` CTC strategy (BatchedBeamCTCComputer, its pure-PyTorch path).

The algorithm (NeMo's, as reimplemented here):

- A hypothesis is a CTC *alignment path* summarized by (emitted tokens, last frame label), where the
  last label may be the blank: "a" ending on blank and "a" ending on "a" are different hypotheses
  (the next "a" is a new token after the first, a repeat after the second).
- Every frame, each of the K = `beam_size` hypotheses is extended by every label (blank included):
  `score + logp[t, label]`, plus `beam_beta` when the label emits a token (non-blank and different
  from the last label). The K best of the K*(V+1) candidates survive (`topk`, sorted); candidates
  scoring at or below `best - beam_threshold` are dropped (score -inf, inactive for good; so the
  threshold must be > 0, NeMo would drop everything at 0).
- Survivors with the same tokens *and* the same last label are merged by *max* (a Viterbi merge,
  not log-sum-exp): the first of the best keeps the score, the others become inactive.
- At the end the hypotheses are ranked by their raw score (no length normalization) and every
  active one is returned: up to K, fewer when pruning or merging left fewer. As in NeMo, the same
  token sequence can appear twice in the list (once ending on blank, once on its last token).

The score of a hypothesis (`Decoded.score`) is
`acoustic + beam_beta * n_tokens [+ lm_weight * lm_logprob + word_bonus * n_words] [+ hotword boost]`,
where `acoustic` is the sum of the path's frame log-probabilities (the path's, not the sum over all
paths of the prefix). `normalized_score` is None. `frames[i]` is the frame at which token i was
emitted on the hypothesis' best path (the first frame of its run: NeMo's `timestamp`), `durations[i]`
the length of that run in frames (the blanks after it excluded), `logprobs[i]` the sum of the run's
frame log-probabilities, `confidences[i]` (only when `confidence` is set) the minimum over the run's
frames, as in greedy CTC.

Word LM (`lm`, an `ngram.NGramLM`): words are scored when they complete. A token whose piece starts
with "▁" (U+2581) begins a new word, completing the word in progress (if it has any text); the end of
the utterance completes the last word and adds `</s>`. The completion term `lm_weight * ln P(word |
history) + word_bonus` is added to the candidate that emits the word-starting token, so it counts in
that frame's ranking and pruning. Defaults: `lm_weight` 0.5 and `word_bonus` 1.0, the usual
shallow-fusion range (pyctcdecode uses 0.5 / 1.5): a word costs about 0.5 * 6 nats under a small
3-gram, and `beam_beta` already rewards every token, so the word bonus only offsets part of it.

Hotwords (`hotwords`, a `hotwords.HotwordTrie`): advanced on every emitted token; its arc bonus is
added to the candidate; its `final` is added at the end.

Batching: `beam_search_batch` runs B utterances at once; each utterance's search stops at its own
length (its state is frozen after it, unlike NeMo's, whose scores keep moving on padded frames), so a
result never depends on the batch it ran in.

Scores against NeMo's transcribe(): NeMo hands beam_batch the CTC head's whole output, and when an
input's feature count is a multiple of the subsampling factor its encoder yields one frame past the
encoded length (T' = L + 1); NeMo's scores then include that frame's best candidate (one offset on
every hypothesis, e.g. -0.098 at 24.64 s and 0 at 60.04 s with tiny-ctc-fit; a hypothesis can drop
out of its list), on top of the padding frames of a batch. This search scores the L frames only,
which is what NeMo's search gives on log-probs cut to the length (bit for bit on the same
log-probs); from audio our encoder's float32 numerics move the scores by < 1e-4 up to 2 minutes
(tests/test_ctc_beam_long.py).

Merging compares a 64-bit polynomial hash of the token sequence (plus the token count and the last
label), as NeMo does; two different live sequences colliding is a ~2^-64 event.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from .confidence import confidence as confidence_measure
from .ctc import collapse
from .decoded import Decoded

__all__ = ["CtcBeamOptions", "beam_search", "beam_search_batch", "DEFAULT_BEAM_BETA", "DEFAULT_BEAM_THRESHOLD",
           "DEFAULT_LM_WEIGHT", "DEFAULT_WORD_BONUS"]

DEFAULT_BEAM_BETA = 1.0  # NeMo's BeamCTCInferConfig.beam_beta
DEFAULT_BEAM_THRESHOLD = 20.0  # NeMo's BeamCTCInferConfig.beam_threshold
DEFAULT_LM_WEIGHT = 0.5
DEFAULT_WORD_BONUS = 1.0
WORD_START = "\u2581"

_NO_LABEL = -1
_HASH_MUL = -7046029254386353131  # 0x9E3779B97F4A7C15 as a signed 64-bit integer (odd)


@dataclass(frozen=True)
class CtcBeamOptions:
    """How the CTC beam search runs (see the module docstring): `beam_size` hypotheses, the token
    reward `beam_beta`, the pruning margin `beam_threshold`; an optional word LM (`lm`, an
    `ngram.NGramLM`, which needs `pieces`, the vocabulary's token pieces, index = token id) with
    `lm_weight` and `word_bonus`; optional `hotwords` (a `hotwords.HotwordTrie`); the per-token
    `confidence` measure (None: none) and its `alpha`."""

    beam_size: int = 4
    beam_beta: float = DEFAULT_BEAM_BETA
    beam_threshold: float = DEFAULT_BEAM_THRESHOLD
    lm: Any = None
    lm_weight: float = DEFAULT_LM_WEIGHT
    word_bonus: float = DEFAULT_WORD_BONUS
    pieces: Optional[Sequence[str]] = None
    hotwords: Any = None
    confidence: Optional[str] = None
    alpha: float = 0.33


def _check_options(opts: CtcBeamOptions, n_labels: int, blank: int) -> None:
    beam_size = opts.beam_size
    if isinstance(beam_size, bool) or int(beam_size) != beam_size or beam_size < 1:
        raise ValueError(f"beam_size must be an integer >= 1, got {beam_size!r}")
    for name, v in (("beam_beta", opts.beam_beta), ("beam_threshold", opts.beam_threshold),
                    ("lm_weight", opts.lm_weight), ("word_bonus", opts.word_bonus)):
        if not math.isfinite(float(v)):
            raise ValueError(f"{name} must be finite, got {v!r}")
    if opts.beam_threshold <= 0:
        # Candidates at or below best - threshold are dropped: 0 would drop the best one too (NeMo
        # then returns an empty list).
        raise ValueError(f"beam_threshold must be > 0, got {opts.beam_threshold}")
    if not 0 <= blank < n_labels:
        raise ValueError(f"blank index {blank} is outside the {n_labels} labels")
    if opts.lm is not None:
        if opts.pieces is None:
            raise ValueError("an LM needs `pieces` (the vocabulary's token pieces, index = token id)")
        needed = n_labels - 1 if blank == n_labels - 1 else n_labels  # every non-blank id
        if len(opts.pieces) < needed:
            raise ValueError(f"pieces has {len(opts.pieces)} entries for {n_labels} labels (blank {blank})")


def _check_inputs(logp: torch.Tensor, lengths, blank, opts: CtcBeamOptions) -> tuple[list[int], int]:
    """Validates the batch and the options; -> the lengths as a list of ints, the blank as an int."""
    if logp.dim() != 3:
        raise ValueError(f"logp must be [B, T, V+1], got shape {tuple(logp.shape)}")
    n_batch, n_frames, n_labels = logp.shape
    lens = [int(x) for x in (lengths.tolist() if torch.is_tensor(lengths) else lengths)]
    if len(lens) != n_batch:
        raise ValueError(f"{len(lens)} lengths for a batch of {n_batch}")
    if any(n < 0 or n > n_frames for n in lens):
        raise ValueError(f"lengths {lens} must lie in [0, {n_frames}]")
    blank = int(blank)
    _check_options(opts, n_labels, blank)
    if not logp.is_floating_point():
        raise ValueError(f"logp must be floating point, got {logp.dtype}")
    for b, n in enumerate(lens):
        if n and not bool(torch.isfinite(logp[b, :n]).all()):
            raise ValueError(f"logp of utterance {b} has non-finite values within its length {n}")
    if opts.hotwords is not None and opts.hotwords.n_tokens > n_labels:
        raise ValueError(f"the hotword tables cover {opts.hotwords.n_tokens} token ids, the model has {n_labels} labels")
    return lens, blank


class _WordLMState:
    """Per-hypothesis LM bookkeeping: the n-gram context and the word in progress."""

    __slots__ = ("context", "partial", "words", "lm_logprob")

    def __init__(self, context, partial, words, lm_logprob):
        self.context = context
        self.partial = partial
        self.words = words
        self.lm_logprob = lm_logprob


class _WordLM:
    """Glue between the token-level beam and the word-level n-gram LM, with a score cache."""

    def __init__(self, lm, weight: float, bonus: float, pieces: Sequence[str], n_labels: int, blank: int):
        self.lm = lm
        self.weight = float(weight)
        self.bonus = float(bonus)
        self.pieces = [str(pieces[i]) if i < len(pieces) and i != blank else "" for i in range(n_labels)]
        self.starts = torch.tensor([i != blank and p.startswith(WORD_START) for i, p in enumerate(self.pieces)])
        self._cache: dict = {}

    def initial(self) -> _WordLMState:
        return _WordLMState(self.lm.begin(), "", 0, 0.0)

    def _word(self, context, word):
        key = (context, word)
        hit = self._cache.get(key)
        if hit is None:
            hit = self.lm.score(context, word)
            self._cache[key] = hit
        return hit

    def completion(self, st: Optional[_WordLMState]) -> float:
        """The term added when the word in progress completes (0 when there is none)."""
        if st is None or not st.partial:
            return 0.0
        return self.weight * self._word(st.context, st.partial)[0] + self.bonus

    def advance(self, st: _WordLMState, token: int) -> _WordLMState:
        piece = self.pieces[token]
        if piece.startswith(WORD_START):
            if st.partial:
                lp, ctx = self._word(st.context, st.partial)
                return _WordLMState(ctx, piece[1:], st.words + 1, st.lm_logprob + lp)
            return _WordLMState(st.context, piece[1:], st.words, st.lm_logprob)
        return _WordLMState(st.context, st.partial + piece, st.words, st.lm_logprob)

    def finish(self, st: _WordLMState) -> float:
        """The end-of-utterance term: completes the last word, then `</s>`."""
        term = 0.0
        ctx = st.context
        if st.partial:
            lp, ctx = self._word(ctx, st.partial)
            term += self.weight * lp + self.bonus
        return term + self.weight * self.lm.end_score(ctx)


class _Beams:
    """The K hypotheses of every utterance in a batch, [B, K] tensors, and their trail."""

    def __init__(self, logp: torch.Tensor, lens: list[int], blank: int, opts: CtcBeamOptions):
        n_batch, _, n_labels = logp.shape
        device, dtype = logp.device, logp.dtype
        K, L = int(opts.beam_size), n_labels
        self.logp, self.lens, self.blank, self.opts, self.K, self.L = logp, lens, blank, opts, K, L
        self.n_batch, self.device, self.dtype = n_batch, device, dtype
        self.vocab = torch.arange(L, device=device)
        self.blank_mask = self.vocab == blank
        self.inf = torch.tensor(float("-inf"), device=device, dtype=dtype)
        self.zero = torch.zeros((), device=device, dtype=dtype)

        self.scores = torch.full((n_batch, K), float("-inf"), device=device, dtype=dtype)
        self.scores[:, 0] = 0.0
        self.last = torch.full((n_batch, K), _NO_LABEL, device=device, dtype=torch.long)
        self.hashes = torch.zeros((n_batch, K), device=device, dtype=torch.long)
        self.counts = torch.zeros((n_batch, K), device=device, dtype=torch.long)
        self.lengths_t = torch.tensor(lens, device=device, dtype=torch.long)
        self.identity = torch.arange(K, device=device)[None, :].expand(n_batch, K)
        self.hist_labels: list[torch.Tensor] = []
        self.hist_parents: list[torch.Tensor] = []

        self.hw_next = self.hw_bonus = self.hw_state = None
        hotwords = opts.hotwords
        if hotwords is not None:
            nt = hotwords.n_tokens
            self.hw_next = torch.zeros((hotwords.n_states, L), dtype=torch.long, device=device)
            self.hw_next[:, :nt] = hotwords.next_state.to(device)
            # Ids past the tables never match: back to the root, the pending credit taken back.
            self.hw_bonus = hotwords.final.to(device=device, dtype=dtype)[:, None].repeat(1, L)
            self.hw_bonus[:, :nt] = hotwords.bonus.to(device=device, dtype=dtype)
            self.hw_state = torch.zeros((n_batch, K), device=device, dtype=torch.long)

        self.wlm = self.lm_states = self.lm_starts = None
        if opts.lm is not None:
            self.wlm = _WordLM(opts.lm, opts.lm_weight, opts.word_bonus, opts.pieces, L, blank)
            self.lm_starts = self.wlm.starts.to(device)
            self.lm_states = [[self.wlm.initial() if k == 0 else None for k in range(K)] for _ in range(n_batch)]

    def candidates(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every hypothesis extended by every label at frame t: scores [B, K, L] and whether the
        label emits a token."""
        emits = ~((self.last[:, :, None] == self.vocab) | self.blank_mask)  # [B, K, L]
        cand = self.logp[:, t, None, :] + self.scores[:, :, None]
        cand = torch.where(emits, cand + self.opts.beam_beta, cand)
        if self.hw_bonus is not None:
            cand = cand + torch.where(emits, self.hw_bonus[self.hw_state], self.zero)
        if self.wlm is not None:
            comp = torch.tensor([[self.wlm.completion(s) for s in row] for row in self.lm_states],
                                device=self.device, dtype=self.dtype)
            cand = cand + torch.where(emits & self.lm_starts, comp[:, :, None], self.zero)
        return cand, emits

    def merge(self, top, lab, new_hash, new_counts) -> torch.Tensor:
        """Survivors with the same tokens and the same last label: the first of the best keeps its
        score (a Viterbi merge), the others are dropped (-inf)."""
        n_batch, K = self.n_batch, self.K
        same = ((new_hash[:, :, None] == new_hash[:, None, :]) & (lab[:, :, None] == lab[:, None, :])
                & (new_counts[:, :, None] == new_counts[:, None, :]))
        grid = torch.where(same, top[:, None, :].expand(n_batch, K, K), self.inf)
        # (amax and argmax: Tensor.max(dim) is needlessly slow on small CPU tensors.)
        keep = grid.argmax(dim=-1) == torch.arange(K, device=self.device)[None, :]
        return torch.where(keep, grid.amax(dim=-1), self.inf)

    def step(self, t: int) -> None:
        """Frame t: the K best candidates of each utterance survive, pruned and merged."""
        n_batch, K, L, blank = self.n_batch, self.K, self.L, self.blank
        active = (t < self.lengths_t)[:, None]  # [B, 1]
        cand, _ = self.candidates(t)
        top, idx = torch.topk(cand.reshape(n_batch, K * L), k=K, dim=-1, largest=True, sorted=True)
        src = idx // L
        lab = idx % L
        top = torch.where(top <= top[:, :1] - self.opts.beam_threshold, self.inf, top)

        prev_last = self.last.gather(1, src)
        emitted = (lab != blank) & (lab != prev_last)
        prev_hash = self.hashes.gather(1, src)
        new_hash = torch.where(emitted, prev_hash * _HASH_MUL + (lab + 1), prev_hash)
        new_counts = self.counts.gather(1, src) + emitted.long()
        if self.hw_state is not None:
            prev_hw = self.hw_state.gather(1, src)
            new_hw = torch.where(emitted, self.hw_next[prev_hw, lab], prev_hw)
        if K > 1:
            top = self.merge(top, lab, new_hash, new_counts)

        # Utterances past their length keep their state (parents: identity, no label).
        self.scores = torch.where(active, top, self.scores)
        self.last = torch.where(active, lab, self.last)
        self.hashes = torch.where(active, new_hash, self.hashes)
        self.counts = torch.where(active, new_counts, self.counts)
        if self.hw_state is not None:
            self.hw_state = torch.where(active, new_hw, self.hw_state)
        self.hist_labels.append(torch.where(active, lab, torch.full_like(lab, _NO_LABEL)))
        self.hist_parents.append(torch.where(active, src, self.identity))
        if self.wlm is not None:
            self.advance_lm(t, src, lab, emitted, top)

    def advance_lm(self, t: int, src, lab, emitted, top) -> None:
        """Each survivor takes its parent's LM state, advanced by the token it emitted."""
        src_l, lab_l, em_l, alive_l = src.tolist(), lab.tolist(), emitted.tolist(), torch.isfinite(top).tolist()
        for b in range(self.n_batch):
            if t >= self.lens[b]:
                continue
            old = self.lm_states[b]
            row = []
            for k in range(self.K):
                st = old[src_l[b][k]] if alive_l[b][k] else None
                if st is not None and em_l[b][k]:
                    st = self.wlm.advance(st, lab_l[b][k])
                row.append(st)
            self.lm_states[b] = row

    def final_scores(self) -> list[list[float]]:
        """End of utterance: hotword `final`, LM completion of the last word and </s>."""
        final_scores = self.scores.clone()
        if self.hw_state is not None:
            final_scores = final_scores + self.opts.hotwords.final.to(device=self.device, dtype=self.dtype)[self.hw_state]
        final_l = final_scores.tolist()
        if self.wlm is not None:
            for b in range(self.n_batch):
                for k in range(self.K):
                    st = self.lm_states[b][k]
                    if st is not None and math.isfinite(final_l[b][k]):
                        final_l[b][k] += self.wlm.finish(st)
        return final_l

    def paths(self) -> list[list[list[int]]]:
        """The alignment paths of all the hypotheses, [B][K][T], by walking the back-pointers."""
        if not self.hist_labels:
            return [[[] for _ in range(self.K)] for _ in range(self.n_batch)]
        labels = torch.stack(self.hist_labels, dim=-1)  # [B, K, T]
        parents = torch.stack(self.hist_parents, dim=-1)
        paths = torch.empty_like(labels)
        ptr = self.identity.clone()
        for t in range(labels.shape[-1] - 1, -1, -1):
            paths[:, :, t] = labels[:, :, t].gather(1, ptr)
            ptr = parents[:, :, t].gather(1, ptr)
        return paths.tolist()


@torch.inference_mode()
def beam_search_batch(
    logp: torch.Tensor,
    lengths,
    blank: int,
    options: CtcBeamOptions = CtcBeamOptions(),
) -> list[list[Decoded]]:
    """logp [B, T, V+1] log-probabilities, lengths [B] (a tensor or a sequence of ints) -> for each
    utterance its N-best list (best first, at most `options.beam_size`). See the module docstring
    for the algorithm, the score and the fields, `CtcBeamOptions` for the options."""
    lens, blank = _check_inputs(logp, lengths, blank, options)
    beams = _Beams(logp, lens, blank, options)
    for t in range(max(lens, default=0)):
        beams.step(t)
    final_l = beams.final_scores()
    paths_l = beams.paths()
    frame_lp = logp.float()
    conf = confidence_measure(frame_lp, options.confidence, options.alpha) if options.confidence else None

    results: list[list[Decoded]] = []
    for b in range(logp.shape[0]):
        order = sorted((k for k in range(beams.K) if final_l[b][k] > float("-inf")),
                       key=lambda k: final_l[b][k], reverse=True)
        if not lens[b]:
            order = [0]
        nbest = []
        for k in order:
            hyp = _decode_path(paths_l[b][k][: lens[b]], blank, frame_lp[b], conf[b] if conf is not None else None)
            hyp.score = float(final_l[b][k])
            nbest.append(hyp)
        results.append(nbest)
    return results


def _decode_path(path: list[int], blank: int, frame_lp: torch.Tensor, conf: Optional[torch.Tensor]) -> Decoded:
    """An alignment path -> its tokens, emission frames, run lengths, run log-probs (and confidences)."""
    hyp = Decoded(ids=[], frames=[], durations=[], confidences=[], logprobs=[])
    if not path:
        return hyp
    idx = torch.tensor(path, dtype=torch.long)
    lp_path = frame_lp[: len(path)].gather(1, idx.clamp(min=0)[:, None])[:, 0].tolist()
    conf_l = conf[: len(path)].tolist() if conf is not None else None
    for run in collapse(path, blank):
        first, end = run.frame, run.frame + run.frames
        hyp.ids.append(run.id)
        hyp.frames.append(first)
        hyp.durations.append(run.frames)
        lp = lp_path[first]
        for t in range(first + 1, end):
            lp += lp_path[t]
        hyp.logprobs.append(lp)
        if conf_l is not None:
            c = conf_l[first]
            for t in range(first + 1, end):
                c = min(c, conf_l[t])
            hyp.confidences.append(c)
    return hyp


def beam_search(
    logp: torch.Tensor,
    length: int,
    blank: int,
    options: CtcBeamOptions = CtcBeamOptions(),
) -> list[Decoded]:
    """logp [T, V+1] -> the N-best list of one utterance (best first). See `beam_search_batch`."""
    if logp.dim() != 2:
        raise ValueError(f"logp must be [T, V+1], got shape {tuple(logp.shape)}")
    return beam_search_batch(logp[None], [int(length)], blank, options)[0]

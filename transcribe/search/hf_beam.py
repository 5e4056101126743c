"""transformers' beam search (`GenerationMixin._beam_search`, transformers 5.24.0, `do_sample=False`, no logits
processors), for the transformers-format models (Canary's encoder-decoder, the audio-LLMs' decoder-only LMs
through `llm.generate`): the same steps and the same float32 operations, so token ids and `sequences_scores` match
`generate(num_beams=N)`.

It drives a decoder through the callables `search.aed` takes: `step(ids [rows, L]) -> logits [rows, vocab]`
and `select(rows)` (the rows of the decoder's state to keep, in order). Rows are batch item major: item b's
beams are rows b*N .. b*N+N-1.

transformers' rules kept here (each differs from NeMo's beam, `search.aed.beam`):
- each step, the log-softmax of every beam's logits plus the beam's running sum; the top K = max(2, 1 + the
  number of stop tokens) x N of the N x vocab candidates of an item (`torch.topk` over the flattened beams,
  transformers' tie order);
- a candidate "hits a stopping criterion" when its token is a stop token (EOS; Qwen has two) or the output
  reaches `max_new` tokens; the
  N best candidates that do not are the running beams of the next step (the first step starts from one
  beam: the others start at -1e9);
- a candidate that hits a criterion and ranks among the top N of the 2N becomes a finished hypothesis,
  scored sum / (tokens generated, EOS included) ** length_penalty; an item keeps the N best finished ones;
- an item stops taking finished hypotheses once all N slots are filled and its best running beam's sum over
  its length ** length_penalty is no better than its worst finished score (`early_stopping=False`'s
  heuristic; with "never" and a positive length penalty the best running score is taken at `max_new` tokens);
  with `early_stopping=True` an item whose N slots are filled takes no more, and the search ends once every
  item's are; the search ends when every item has stopped so, or when every candidate hits a criterion
  (at `max_new`).
The hypotheses come back best first, without their stop token; a hypothesis' score is its finished score
(`sequences_scores`).
"""
from __future__ import annotations

from typing import Callable

import torch

from typing import Sequence, Union

from .aed import AEDHypothesis

_NEG = -1.0e9  # transformers' mask value


@torch.no_grad()
def beam(step: Callable, select: Callable, prompt: torch.Tensor, num_beams: int, max_new: int,
         eos: Union[int, Sequence[int]], length_penalty: float = 1.0,
         early_stopping: Union[bool, str] = False) -> list[list[AEDHypothesis]]:
    """transformers' beam search for each row of `prompt` [B, P] (the decoder state holds B rows); per row,
    its finished hypotheses, best first. `eos`: the stop token or tokens."""
    b, _ = prompt.shape
    n = num_beams
    if max_new <= 0:
        return [[AEDHypothesis([], 0.0, [])] for _ in range(b)]
    if early_stopping not in (True, False, "never"):
        raise ValueError(f"early_stopping must be True, False or 'never' (got {early_stopping!r})")
    stops = torch.tensor([eos] if isinstance(eos, int) else list(eos), dtype=torch.long)
    k = max(2, 1 + len(stops)) * n
    select(torch.arange(b, device=prompt.device).repeat_interleave(n))
    running: list[list[list[int]]] = [[[] for _ in range(n)] for _ in range(b)]
    running_scores = torch.zeros(b, n)
    running_scores[:, 1:] = _NEG
    finished: list[list[list[int]]] = [[[] for _ in range(n)] for _ in range(b)]
    finished_scores = torch.full((b, n), _NEG)
    is_finished = torch.zeros(b, n, dtype=torch.bool)
    open_items = torch.ones(b, 1, dtype=torch.bool)  # is_early_stop_heuristic_unsatisfied
    top_n = torch.arange(k) < n
    ids = prompt.repeat_interleave(n, dim=0)
    generated = 0
    while True:
        logits = step(ids).to(dtype=torch.float32, device="cpu")
        logp = torch.log_softmax(logits, dim=-1)
        vocab = logp.shape[-1]
        acc = (logp.view(b, n, vocab) + running_scores[:, :, None]).reshape(b, -1)
        top_scores, top_index = torch.topk(acc, k=k)
        source = top_index // vocab
        tokens = top_index % vocab
        hits = torch.isin(tokens, stops)
        if generated + 1 >= max_new:
            hits = torch.ones_like(hits)
        # the running beams of the next step: the N best candidates that hit no criterion
        masked = top_scores + hits.to(torch.float32) * _NEG
        keep = torch.topk(masked, k=n)[1]
        new_running = [[running[i][int(source[i, j])] + [int(tokens[i, j])] for j in keep[i]] for i in range(b)]
        # finished hypotheses: the top-N candidates that hit a criterion, while the item is still open
        done_now = hits & top_n[None, :]
        scores = top_scores / ((generated + 1) ** length_penalty)
        if early_stopping is True:
            scores = scores + torch.all(is_finished, dim=-1, keepdim=True).to(torch.float32) * _NEG
        scores = scores + (~open_items).to(torch.float32) * _NEG
        scores = scores + (~done_now) * _NEG
        merged_scores = torch.cat([finished_scores, scores], dim=1)
        best = torch.topk(merged_scores, k=n)[1]
        new_finished, new_flags = [], []
        for i in range(b):
            seqs, flags = [], []
            for j in best[i].tolist():
                if j < n:
                    seqs.append(finished[i][j])
                    flags.append(bool(is_finished[i, j]))
                else:
                    c = j - n
                    seqs.append(running[i][int(source[i, c])] + [int(tokens[i, c])])
                    flags.append(bool(done_now[i, c]))
            new_finished.append(seqs)
            new_flags.append(flags)
        finished_scores = torch.gather(merged_scores, 1, best)
        finished, is_finished = new_finished, torch.tensor(new_flags, dtype=torch.bool)
        running_scores = torch.gather(masked, 1, keep)
        running = new_running
        rows = (torch.gather(source, 1, keep) + torch.arange(b)[:, None] * n).reshape(-1)
        generated += 1
        hypothetical = max_new if early_stopping == "never" and length_penalty > 0.0 else generated
        best_running = running_scores[:, :1] / (hypothetical ** length_penalty)
        worst_finished = torch.where(is_finished, torch.min(finished_scores, dim=1, keepdim=True)[0], _NEG)
        open_items = open_items & torch.any(best_running > worst_finished, dim=-1, keepdim=True)
        if not bool(open_items.any()) or bool(hits.all()):
            break
        if early_stopping is True and bool(is_finished.all()):
            break
        select(rows.to(prompt.device))
        ids = torch.tensor([[seq[-1]] for item in running for seq in item], dtype=torch.long, device=prompt.device)
    out = []
    for i in range(b):
        hyps = []
        for j in range(n):
            if not bool(is_finished[i, j]):
                continue
            seq = finished[i][j]
            stopped = bool(seq) and bool(torch.isin(torch.tensor(seq[-1]), stops))
            hyps.append(AEDHypothesis(seq[:-1] if stopped else seq, float(finished_scores[i, j]), []))
        out.append(hyps)
    return out

"""Batched generation from prompt embeddings, as transformers' `generate` runs it with `do_sample=False`:
greedy search (`_sample`: the argmax of each step's float32 logits; a request ends at its first stop token or
after `max_new_tokens`) and beam search (`search.hf_beam`: `num_beams`, `length_penalty`, `early_stopping`,
several stop tokens), so token ids match transformers'.

Requests of different lengths are left-padded into one batch; the cache masks the padding and each row counts
its own positions (`model.KVCache`), so a request's tokens do not depend on its neighbours. A finished greedy
request leaves the batch (transformers keeps feeding it padding; its tokens are discarded either way).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import torch

from ..search.hf_beam import beam as hf_beam
from .model import DecoderLM


@dataclass
class Generated:
    ids: list[int]    # the generated tokens, the stop token removed
    score: float      # greedy: the sum of the tokens' log-probabilities (stop token included); beam: transformers'
    #                   sequences_scores (that sum over length ** length_penalty)
    stopped: bool     # a stop token ended it (False: max_new_tokens was reached)
    logprobs: list[float] = field(default_factory=list)  # greedy: each kept token's log-probability


def _pack(prompts: Sequence[torch.Tensor]) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Left-pad the [L_i, D] prompts into [B, L, D]; the validity mask, or None when none is padded."""
    if not prompts:
        raise ValueError("no prompts to generate from")
    longest = max(p.shape[0] for p in prompts)
    if min(p.shape[0] for p in prompts) < 1:
        raise ValueError("a prompt has no rows")
    if all(p.shape[0] == longest for p in prompts):
        return torch.stack(list(prompts)), None
    first = prompts[0]
    x = torch.zeros(len(prompts), longest, first.shape[-1], dtype=first.dtype, device=first.device)
    valid = torch.zeros(len(prompts), longest, dtype=torch.bool, device=first.device)
    for i, p in enumerate(prompts):
        x[i, longest - p.shape[0]:] = p
        valid[i, longest - p.shape[0]:] = True
    return x, valid


@torch.inference_mode()
def generate(lm: DecoderLM, prompts: Sequence[torch.Tensor], *, max_new_tokens: int, stop_ids: Sequence[int],
             num_beams: int = 1, length_penalty: float = 1.0, early_stopping: Union[bool, str] = False,
             on_token: Optional[Callable[[int, int], None]] = None) -> list[list[Generated]]:
    """Per request, its hypotheses best first (greedy: one). `prompts`: one [L_i, D] embedding sequence per
    request, in the LM's dtype. `on_token(request, token)` hears each greedy token as it is chosen (stop tokens
    excluded); with beams it hears the best hypothesis' tokens when the search ends."""
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0 (got {max_new_tokens})")
    if num_beams < 1:
        raise ValueError(f"num_beams must be >= 1 (got {num_beams})")
    x, valid = _pack(prompts)
    stops = torch.tensor(sorted(set(int(t) for t in stop_ids)), dtype=torch.long)
    if num_beams == 1:
        return [[g] for g in _greedy(lm, x, valid, max_new_tokens, stops, on_token)]
    out = _beam(lm, x, valid, max_new_tokens, stops, num_beams, length_penalty, early_stopping)
    if on_token is not None:
        for i, hyps in enumerate(out):
            for t in hyps[0].ids if hyps else []:
                on_token(i, t)
    return out


def _greedy(lm: DecoderLM, x: torch.Tensor, valid: Optional[torch.Tensor], max_new: int, stops: torch.Tensor,
            on_token) -> list[Generated]:
    b = x.shape[0]
    results = [Generated([], 0.0, False) for _ in range(b)]
    if max_new == 0:
        return results
    cache = lm.new_cache(b, x.shape[1] + max_new)
    logits = lm.logits(lm(x, cache, valid)[:, -1]).to(torch.float32)
    active = list(range(b))  # the requests the cache's rows hold, in order
    for step in range(max_new):
        tokens = torch.argmax(logits, dim=-1)
        logp = torch.log_softmax(logits, dim=-1).gather(1, tokens[:, None])[:, 0]
        ended = torch.isin(tokens.cpu(), stops)
        keep = []
        for row, request in enumerate(active):
            t = int(tokens[row])
            r = results[request]
            r.score += float(logp[row])
            if bool(ended[row]):
                r.stopped = True
                continue
            r.ids.append(t)
            r.logprobs.append(float(logp[row]))
            if on_token is not None:
                on_token(request, t)
            keep.append(row)
        if not keep or step + 1 == max_new:
            break
        if len(keep) < len(active):
            rows = torch.tensor(keep, dtype=torch.long)
            cache.select(rows)
            tokens = tokens[rows.to(tokens.device)]
            active = [active[r] for r in keep]
        logits = lm.logits(lm(lm.embed(tokens[:, None]), cache)[:, -1]).to(torch.float32)
    return results


def _beam(lm: DecoderLM, x: torch.Tensor, valid: Optional[torch.Tensor], max_new: int, stops: torch.Tensor,
          num_beams: int, length_penalty: float, early_stopping) -> list[list[Generated]]:
    b = x.shape[0]
    state: dict = {"cache": None, "expand": None}

    def select(rows: torch.Tensor) -> None:
        if state["cache"] is None:  # the first call expands each request to its beams: done after the prompt
            state["expand"] = rows
        else:
            state["cache"].select(rows)

    def step(ids: torch.Tensor) -> torch.Tensor:
        cache = state["cache"]
        if cache is None:  # the prompt, once per request, then copied to the request's beams
            cache = state["cache"] = lm.new_cache(b, x.shape[1] + max_new)
            logits = lm.logits(lm(x, cache, valid)[:, -1])
            rows = state["expand"]
            if rows is not None:
                cache.select(rows)
                logits = logits.index_select(0, rows.to(logits.device))
            return logits
        return lm.logits(lm(lm.embed(ids[:, -1:].to(x.device)), cache)[:, -1])

    prompt = torch.zeros(b, 1, dtype=torch.long)
    found = hf_beam(step, select, prompt, num_beams, max_new, stops.tolist(), length_penalty, early_stopping)
    return [[Generated(h.ids, h.score, len(h.ids) < max_new) for h in hyps] for hyps in found]

"""What the audio-LLM recognizers (Qwen3-ASR, Voxtral, Canary-Qwen) share around `generate`: the search settings
of a call (its options over the generation config), generation from prompt embeddings bounded by the LM's position
table, and the untimed transcript of the hypotheses (one segment over the input, each token spanning it with its
greedy log-probability, the beams as transformers scores them)."""
from __future__ import annotations

import logging
from typing import Callable, Optional, Sequence, Union

import torch

from ..errors import TranscribeError
from ..results import Hypothesis, HypothesisToken, NBest, Segment, Token, Transcript
from .generate import Generated, generate
from .generation_config import GenerationDefaults
from .model import DecoderLM

log = logging.getLogger("transcribe")


def search_settings(gen: GenerationDefaults, opts) -> tuple[int, float, Union[bool, str], int]:
    """(beams, length_penalty, early_stopping, max_new_tokens) of a call: its options over the generation config's
    defaults."""
    beams = opts.beam_size if opts.beam_size is not None else gen.num_beams
    penalty = opts.length_penalty if opts.length_penalty is not None else gen.length_penalty
    max_new = opts.max_new_tokens if opts.max_new_tokens is not None else gen.max_new_tokens
    return beams, penalty, gen.early_stopping, max_new


def generate_within(lm: DecoderLM, prompts: Sequence[torch.Tensor], seconds: Sequence[float], *,
                    stop_ids: Sequence[int], search: tuple[int, float, Union[bool, str], int],
                    name: str) -> list[list[Generated]]:
    """`generate` over the prompts (one per input of `seconds`), max_new_tokens bounded by what the LM's position
    table leaves after the longest prompt (an input whose prompt fills it is an error); an input whose text
    reached max_new_tokens is logged as possibly cut."""
    beams, penalty, early, max_new = search
    limit = lm.cfg.max_position_embeddings
    if limit:
        room = limit - max(x.shape[0] for x in prompts)
        if room < 1:
            raise TranscribeError(f"{name}: an input of {max(seconds):.0f} s fills the language model's {limit} "
                                  "positions: give a smaller max_piece_s")
        max_new = min(max_new, room)
    found = generate(lm, prompts, max_new_tokens=max_new, stop_ids=stop_ids, num_beams=beams,
                     length_penalty=penalty, early_stopping=early)
    for s, hyps in zip(seconds, found):
        if hyps and not hyps[0].stopped:
            log.warning("%s: an input of %.1f s reached max_new_tokens (%d) before its end: its text may be cut "
                        "(give a larger max_new_tokens or a smaller max_piece_s)", name, s, max_new)
    return found


def untimed_transcript(hyps: list[Generated], duration: float, tokenizer, *, name: str, language: Optional[str],
                       timestamps: bool, beams: int, nbest: Optional[int],
                       read: Optional[Callable[[list[int]], tuple[str, list[int]]]] = None) -> Transcript:
    """The transcript of an input's hypotheses (best first). `read(ids) -> (text, the ids the text is made of: a
    tail of ids)`; default: the ids decoded (special tokens dropped), stripped, all of them."""
    def plain(ids: list[int]) -> tuple[str, list[int]]:
        return tokenizer.decode(ids).strip(), ids

    read = read or plain
    best = hyps[0]
    text, ids = read(best.ids)
    segments = [Segment(text, 0.0, duration)] if timestamps and text else []
    skip = len(best.ids) - len(ids)
    logprobs = best.logprobs[skip:] if len(best.logprobs) == len(best.ids) else [None] * len(ids)
    tokens = [Token(id=int(i), text=tokenizer.decode([i], skip_special=False), start=0.0, end=duration, logprob=lp,
                    piece=tokenizer.token(i)) for i, lp in zip(ids, logprobs)]
    t = Transcript(text=text, duration=duration, segments=segments, words=[], tokens=tokens, model=name,
                   language=language)
    if beams > 1 and nbest is not None:
        out = []
        for h in hyps[:nbest]:
            h_text, h_ids = read(h.ids)
            marks = [HypothesisToken(int(i), 0, None, 0.0, duration) for i in h_ids]
            out.append(Hypothesis(h_text, h.score, h.score / (len(h.ids) + 1), marks))
        # scores: transformers' sequences_scores (log-probability sums over length ** length_penalty)
        t.nbest = NBest(beams, False, out, beam="transformers")
    return t

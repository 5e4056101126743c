"""Beam search for the Parakeet recognizer: which search runs for which head, with what options.

The searches themselves live in `search/` (malsd, transducer_beam, maes, ctc_beam); this module
checks the user's options, builds the hotword automaton and the language model, runs the search
over a batch, and recovers per-token log-probabilities and confidences along the best path.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import torch

from ..errors import TranscribeError
from ..search import ctc_beam, maes as maes_search, malsd, transducer_beam
from ..search.confidence import confidence as confidence_measure
from ..search.decoded import Decoded
from ..search.hotwords import HotwordTrie, phrases_to_ids
from ..search.steps import TransducerSteps

BEAMS = ("malsd", "default", "maes")
RECOMMENDED = "malsd"  # batched over hypotheses and utterances: the fast one
DEFAULT_HOTWORD_WEIGHT = 1.5  # log-probability added per matched token (sherpa-onnx's default context score)


@dataclass(frozen=True)
class BeamOptions:
    """What the user asked for, checked."""

    beam_size: int
    nbest: int
    beam: Optional[str]  # None for CTC
    score_norm: bool
    hotwords: Optional[HotwordTrie]
    lm: object  # an NGramLM or None
    lm_weight: float


@dataclass(frozen=True)
class BeamRequest:
    """What the user asked for, as given to `transcribe` (None: not given), to be checked by `options`."""

    beam_size: Optional[int]
    nbest: Optional[int]
    beam: Optional[str]
    score_norm: bool
    hotwords: Optional[Sequence[str]]
    hotword_weight: Optional[float]
    lm: object  # a path, an NGramLM or None
    lm_weight: Optional[float]


def options(recognizer, head: str, asked: BeamRequest) -> Optional[BeamOptions]:
    """The checked beam options, or None when greedy decoding does the job (beam size 1, no
    N-best, no hotwords, no language model)."""
    size, want, hotwords = _check_request(recognizer, head, asked)
    if size == 1 and not hotwords and asked.lm is None and asked.beam is None:
        return None
    trie = _hotword_trie(recognizer, hotwords, asked.hotword_weight) if hotwords else None
    model_lm = _language_model(asked.lm) if asked.lm is not None else None
    return BeamOptions(size, want, None if head == "ctc" else (asked.beam or RECOMMENDED), bool(asked.score_norm), trie,
                       model_lm, ctc_beam.DEFAULT_LM_WEIGHT if asked.lm_weight is None else float(asked.lm_weight))


def _check_request(recognizer, head: str, asked: BeamRequest) -> tuple[int, int, Optional[Sequence[str]]]:
    """Refuses what cannot run; -> the beam size, the N-best size and the hotword phrases."""
    beam_size, nbest, beam, lm = asked.beam_size, asked.nbest, asked.beam, asked.lm
    size = 1 if beam_size is None else beam_size
    want = 1 if nbest is None else nbest
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise TranscribeError(f"beam_size must be a positive integer, got {beam_size!r}")
    if isinstance(want, bool) or not isinstance(want, int) or want < 1:
        raise TranscribeError(f"nbest must be a positive integer, got {nbest!r}")
    if want > size:
        raise TranscribeError(f"nbest ({want}) cannot exceed beam_size ({size}): a beam of {size} keeps {size} hypotheses")
    if beam is not None and beam not in BEAMS:
        raise TranscribeError(f"unknown beam {beam!r} (one of {', '.join(BEAMS)})")
    if head == "ctc" and beam is not None:
        raise TranscribeError(f"beam={beam!r} chooses a transducer search; the CTC head has one beam search (leave beam unset)")
    hotwords = asked.hotwords
    if hotwords is not None and isinstance(hotwords, str):
        hotwords = hotwords.split(",")
    if asked.hotword_weight is not None and not hotwords:
        raise TranscribeError("hotword_weight needs hotwords")
    if lm is not None and head != "ctc":
        raise TranscribeError(f"a language model (lm) is used by the CTC head's beam search; {recognizer.name}'s {head} head does not take one")
    if asked.lm_weight is not None and lm is None:
        raise TranscribeError("lm_weight needs lm")
    return size, want, hotwords


def _hotword_trie(recognizer, hotwords: Sequence[str], hotword_weight: Optional[float]) -> HotwordTrie:
    weight = DEFAULT_HOTWORD_WEIGHT if hotword_weight is None else float(hotword_weight)
    try:
        ids = phrases_to_ids(list(hotwords), recognizer.tokenizer.encode)
        return HotwordTrie(ids, weight, recognizer.model.blank + 1)
    except ValueError as e:
        raise TranscribeError(f"hotwords: {e}") from None


_LM_CACHE: dict = {}
_LM_LOCK = threading.Lock()


def _language_model(lm):
    """An NGramLM from a path (parsed once per file version, shared) or as given."""
    from ..search.ngram import NGramLM

    if isinstance(lm, NGramLM):
        return lm
    path = os.fspath(lm)
    try:
        st = os.stat(path)
    except OSError as e:
        raise TranscribeError(f"language model {path}: {e.strerror or e}") from None
    key = (os.path.realpath(path), st.st_mtime_ns, st.st_size)
    with _LM_LOCK:
        got = _LM_CACHE.get(key)
        if got is None:
            try:
                got = NGramLM.from_arpa(path)
            except ValueError as e:
                raise TranscribeError(f"language model {path}: {e}") from None
            _LM_CACHE.clear()  # one language model at a time: they can be large
            _LM_CACHE[key] = got
    return got


def search_ctc(recognizer, logp: torch.Tensor, lengths: torch.Tensor, opts: BeamOptions, confidence: str) -> list[list[Decoded]]:
    hot = opts.hotwords.to(logp.device) if opts.hotwords is not None else None
    try:
        return ctc_beam.beam_search_batch(logp, lengths, recognizer.model.blank, ctc_beam.CtcBeamOptions(
            beam_size=opts.beam_size, lm=opts.lm, lm_weight=opts.lm_weight,
            pieces=recognizer.tokenizer.pieces if opts.lm is not None else None, hotwords=hot,
            confidence=confidence))
    except ValueError as e:
        raise TranscribeError(f"{recognizer.name}: {e}") from None


def search_transducer(recognizer, enc_proj: torch.Tensor, lengths: torch.Tensor, opts: BeamOptions,
                      confidence: str) -> list[list[Decoded]]:
    """enc_proj [B, T, H] -> per utterance its N-best list, the best with token log-probs and
    confidences recomputed along its path."""
    steps = recognizer.transducer_steps()
    try:
        if opts.beam == "malsd":
            hot = opts.hotwords.to(enc_proj.device) if opts.hotwords is not None else None
            lists = malsd.malsd_batch(enc_proj, lengths, steps, beam_size=opts.beam_size,
                                      score_norm=opts.score_norm, hotwords=hot, confidence=confidence)
        else:
            # NeMo's default beam and mAES put no bound on the tokens a hypothesis emits on one frame:
            # the steps' max_symbols (the greedy search's cap, from the model's config) is cleared.
            nemo_steps = replace(steps, max_symbols=None)
            if opts.beam == "maes":
                lists = [maes_search.maes(enc_proj[i], int(lengths[i]), nemo_steps, beam_size=opts.beam_size,
                                          score_norm=opts.score_norm, hotwords=opts.hotwords)
                         for i in range(enc_proj.shape[0])]
            else:
                fn = transducer_beam.tdt_beam if steps.durations is not None else transducer_beam.rnnt_beam
                lists = [fn(enc_proj[i], int(lengths[i]), nemo_steps, beam_size=opts.beam_size,
                            score_norm=opts.score_norm, hotwords=opts.hotwords)
                         for i in range(enc_proj.shape[0])]
    except ValueError as e:
        raise TranscribeError(f"{recognizer.name}: {e}") from None
    if opts.beam != "malsd":  # malsd records them as it goes
        for i, nb in enumerate(lists):
            if nb:
                path_details(enc_proj[i], steps, nb[0], confidence)
    return lists


@torch.inference_mode()
def path_details(enc: torch.Tensor, steps: TransducerSteps, d: Decoded, confidence: Optional[str], alpha: float = 0.33) -> None:
    """Fills `d.logprobs` and `d.confidences` along its own path: for each token, the joint's token
    distribution at its frame after the tokens before it (what the greedy search records)."""
    n = len(d.ids)
    if n == 0:
        d.logprobs, d.confidences = [], []
        return
    labels = [steps.blank] + d.ids[:-1]
    state = steps.init_state(1)
    device = enc.device
    preds = []
    for lab in labels:
        pred, state = steps.predict(torch.tensor([lab], dtype=torch.long, device=device), state)
        preds.append(pred)
    pred = torch.cat(preds)
    frames = torch.tensor(d.frames, dtype=torch.long, device=device).clamp(max=enc.shape[0] - 1)
    logits = steps.joint(enc[frames], pred)[:, : steps.blank + 1].float()
    logp = torch.log_softmax(logits, dim=-1)
    d.logprobs = logp.gather(1, torch.tensor(d.ids, device=device)[:, None])[:, 0].tolist()
    d.confidences = confidence_measure(logp, confidence, alpha).tolist() if confidence else []

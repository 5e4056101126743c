"""The MedASR recognizer behind `load_model`: audio in, `Transcript` out.

Inputs are encoded in batches of similar length (a result does not depend on its batch: see model.py), the CTC
logits searched greedily (`search.ctc.greedy`: every frame's argmax, repeats merged, blanks dropped, as
transformers' `generate` + LasrTokenizer's decode) or with the shared CTC beam search (`search.ctc_beam`), and
the ids decoded as the reference decodes them (tokenizer.py). Token times follow NeMo's CTC convention (a token
runs from the previous token's first frame to its own), words and segments are grouped from the pieces
(`text.words`); special tokens (</s>, which the published model emits at the end) are in neither the text nor the
tokens. Inputs longer than `max_piece_s` are cut at pauses (`long_input`)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from .. import long_input
from ..errors import ModelError
from ..recognizer import Recognizer
from ..results import Hypothesis, HypothesisToken, NBest, Segment, Token, Transcript, Word
from ..search import ctc as ctc_search
from ..search.ctc_beam import CtcBeamOptions, beam_search_batch
from ..search.decoded import Decoded
from ..text.sentencepiece import punctuation_in
from ..text.words import TokenSpan, group_segments, group_words
from . import KIND
from .config import MedASRConfig
from .frontend import LasrFrontend
from .model import MedASRModel
from .options import MedASROptions
from .tokenizer import WORD_START, LasrTokenizer

log = logging.getLogger("transcribe")

# A batch holds at most this much padded audio (its longest input times its size).
MAX_BATCH_AUDIO_S = 8 * 60.0


class MedASR(Recognizer):
    """A loaded MedASR model: `transcribe(audio, **options)` takes paths, bytes or arrays at `sample_rate` (its
    options: `MedASROptions`)."""

    family = "medasr"
    kind = KIND
    Options = MedASROptions

    def __init__(self, model: MedASRModel, tokenizer: LasrTokenizer, name: str, device: str = "cpu"):
        c: MedASRConfig = model.config
        self.model = model
        self.config = c
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)
        self.frontend = LasrFrontend(c.features)
        self.sample_rate = c.features.sample_rate
        self.threads: Optional[int] = None
        self.blank = c.blank
        self.punctuation = punctuation_in(tokenizer.pieces[: c.vocab_size])
        if len(tokenizer.pieces) < c.vocab_size:
            raise ModelError(f"{name}: the tokenizer has {len(tokenizer.pieces)} pieces, fewer than the CTC head's "
                             f"{c.vocab_size} outputs")

    @classmethod
    def load(cls, path: Path, name: str, device, dtype: Optional[torch.dtype] = None) -> "MedASR":
        """A transformers-format directory (config.json, model.safetensors, tokenizer.json) -> a recognizer."""
        from .checkpoint import read_state
        from .config import parse_config, read_features, read_json
        from .tokenizer import load_tokenizer

        path = Path(path)
        cfg = read_json(path / "config.json")
        if cfg is None:
            raise ModelError(f"{path}: no config.json")
        try:
            config = parse_config(cfg, read_features(path))
        except (ValueError, KeyError, TypeError) as e:
            raise ModelError(f"{path}: model config not supported ({e})") from None
        return cls.finish(config, read_state(path), load_tokenizer(path), name, device, dtype, str(path))

    @classmethod
    def finish(cls, config: MedASRConfig, state: dict, tokenizer: LasrTokenizer, name: str, device,
               dtype: Optional[torch.dtype], where: str) -> "MedASR":
        """A config, its tensors (the checkpoint's names) and the tokenizer -> the recognizer on `device` in
        `dtype` (bfloat16/float16: the encoder; int8: its linear layers; the front end stays float64/32)."""
        with torch.device("meta"):
            model = MedASRModel(config)
        try:
            model.load_checkpoint(state)
        except KeyError as e:
            raise ModelError(f"{where}: {e.args[0] if e.args else e}") from None
        model.encoder.fold_batch_norm()
        model.eval().to(device)
        if dtype == torch.int8:
            from ..quant import quantize_linears

            quantize_linears(model.encoder)
        elif dtype is not None and dtype != torch.float32:
            model.encoder.to(dtype)
        return cls(model, tokenizer, name, str(device))

    @property
    def default_batch_size(self) -> int:
        return 16 if self.device.type == "cuda" else 4

    @property
    def frame_s(self) -> float:
        """Seconds per encoder frame (the unit of a token's `frame`): hop x subsampling / rate (0.04 s)."""
        f = self.config.features
        return f.hop * self.config.subsampling / f.sample_rate

    def seconds(self, frames: float) -> float:
        return round(frames * self.frame_s, 6)

    # -- transcription
    def _transcribe(self, items: list, opts: MedASROptions) -> list[Transcript]:
        batch_size = self.default_batch_size if opts.batch_size is None else opts.batch_size
        rate = self.sample_rate
        grain = self.config.features.hop * self.config.subsampling
        out: list[Optional[Transcript]] = [None] * len(items)

        def run(pcms: list[np.ndarray]) -> list[Transcript]:
            return self.decode(pcms, opts)

        for group in self.groups(items, opts.sample_rate):
            done = long_input.in_pieces(group, run, rate=rate, max_piece_s=opts.max_piece_s, detector=opts.detector,
                                        grain=grain, batch_size=batch_size, max_batch_s=MAX_BATCH_AUDIO_S)
            for i, t in done.items():
                out[i] = t
        return out  # type: ignore[return-value]

    @torch.inference_mode()
    def logits(self, pcm: Sequence[np.ndarray]) -> tuple[torch.Tensor, list[int]]:
        """Mono float32 inputs at the model's rate -> CTC logits [B, T', V] (float32) and each input's frames. An
        input too short for one encoder frame (< 0.145 s at the published settings) has 0 frames."""
        n = max(1, max(len(p) for p in pcm))
        audio = torch.zeros(len(pcm), n)
        for i, p in enumerate(pcm):
            audio[i, : len(p)] = torch.from_numpy(np.asarray(p, dtype=np.float32))
        lengths = torch.tensor([len(p) for p in pcm], dtype=torch.long)
        feats, frames = self.frontend(audio, lengths)
        enc_frames = [self.config.encoded_length(int(f)) for f in frames]
        if max(enc_frames) == 0:
            return torch.zeros(len(pcm), 0, self.config.vocab_size), enc_frames
        logits, _ = self.model(feats.to(self.device), frames.to(self.device))
        return logits.cpu(), enc_frames

    def decode(self, pcm: Sequence[np.ndarray], opts: MedASROptions) -> list[Transcript]:
        logits, frames = self.logits(pcm)
        logp = torch.log_softmax(logits, dim=-1)
        durations = [len(p) / self.sample_rate for p in pcm]
        if opts.beam_size is None:
            hyps = [ctc_search.greedy(logits[i], frames[i], self.blank, None) if frames[i] else Decoded([], [])
                    for i in range(len(pcm))]
            if opts.confidence:  # greedy's log-probs and confidences from the log-softmax, its argmax from the logits
                hyps = [self._rescore(h, logp[i], frames[i], opts.confidence) for i, h in enumerate(hyps)]
            return [self._to_transcript(h, d, opts.timestamps) for h, d in zip(hyps, durations)]
        beam = CtcBeamOptions(beam_size=opts.beam_size, confidence=opts.confidence)
        lists = beam_search_batch(logp, frames, self.blank, beam) if logp.shape[1] else [[] for _ in pcm]
        out = []
        for nb, d in zip(lists, durations):
            t = self._to_transcript(nb[0] if nb else Decoded([], []), d, opts.timestamps)
            t.nbest = self._nbest(nb, opts)
            out.append(t)
        return out

    def _rescore(self, h: Decoded, logp: torch.Tensor, length: int, confidence: str) -> Decoded:
        """The greedy path's ids and frames (from the logits' argmax, as the reference) with its log-probs and
        confidences from the log-softmax."""
        if not h.ids:
            return h
        ref = ctc_search.greedy(logp, length, self.blank, confidence)
        if ref.ids != h.ids or ref.frames != h.frames:  # a tie moved by the softmax's rounding: keep the argmax's
            return h
        return ref

    # -- results
    def _spans(self, h: Decoded) -> list[tuple[int, TokenSpan]]:
        """(index in h, span) of each non-special token; frames by NeMo's CTC convention."""
        tok = self.tokenizer
        out = []
        prev = None
        for k, (tid, f) in enumerate(zip(h.ids, h.frames)):
            if tok.is_special(tid):
                continue
            start = max(0, f - 1) if prev is None else prev
            conf = h.confidences[k] if h.confidences else None
            out.append((k, TokenSpan(tid, tok.piece(tid), tok.decode([tid]), start, f, conf)))
            prev = f
        for _, sp in out[1:]:
            if sp.text[:1] in self.punctuation:
                sp.end = sp.start
        return out

    def _to_transcript(self, h: Decoded, duration: float, timestamps: bool) -> Transcript:
        tok = self.tokenizer
        text = tok.decode(h.ids)
        spans = self._spans(h)
        sec = self.seconds
        tokens = [Token(s.id, (" " + s.text) if s.piece.startswith(WORD_START) else s.text, sec(s.start),
                        sec(s.end), s.confidence, h.frames[k], h.durations[k] if h.durations else None,
                        h.logprobs[k] if h.logprobs else None, s.piece) for k, s in spans]
        if not timestamps:
            return Transcript(text=text, duration=duration, tokens=tokens, model=self.name, language="en")
        wspans = group_words([s for _, s in spans], tok.decode, self.punctuation)
        words = [Word(w.word, sec(w.start), sec(w.end), w.confidence) for w in wspans]
        word_of = {id(w): words[i] for i, w in enumerate(wspans)}
        segments = [Segment(s.text, sec(s.start), sec(s.end), [word_of[id(w)] for w in s.words])
                    for s in group_segments(wspans)]
        return Transcript(text=text, duration=duration, segments=segments, words=words, tokens=tokens,
                          model=self.name, language="en")

    def _nbest(self, nb: list[Decoded], opts: MedASROptions) -> NBest:
        """At most `nbest` (default 1) hypotheses, best first, a token sequence listed once (at its best rank)."""
        want = opts.nbest or 1
        hyps: list[Hypothesis] = []
        seen = set()
        for d in nb:
            key = tuple(d.ids)
            if key in seen:
                continue
            seen.add(key)
            spans = self._spans(d)
            tokens = [HypothesisToken(s.id, d.frames[k], d.durations[k] if d.durations else None,
                                      self.seconds(s.start), self.seconds(s.end)) for k, s in spans]
            hyps.append(Hypothesis(self.tokenizer.decode(d.ids), d.score, d.score / (len(d.ids) + 1), tokens))
            if len(hyps) == want:
                break
        return NBest(opts.beam_size, False, hyps, "ctc")

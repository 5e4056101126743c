"""The Moonshine recognizer behind `load_model`: audio in, `Transcript` out.

Each input is encoded on its own (the stem's GroupNorm spans all of an input's frames, so zero padding would change
it: transformers' batched encoder differs from its single one; here a result does not depend on its batch), the
encoder states padded into one batch the decoder attends to with a mask, and the decoder runs transformers'
greedy search (`search.aed.greedy`: the argmax of the raw logits, finished rows fed the pad token) for the batch,
or transformers' beam search (`search.hf_beam`) one input at a time.

The output bound is the model card's (`generate(max_length=int(samples * 6.5 / rate))`, the decoder's start token
counted, computed with the card's float32 tensor product), per input; an input of too few samples for one encoder
frame or one token (under 0.31 s) has an empty transcript. Inputs longer than `max_piece_s` are cut at pauses (`long_input`)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from .. import long_input
from ..errors import ModelError
from ..recognizer import Recognizer
from ..results import Hypothesis, HypothesisToken, NBest, Segment, Token, Transcript
from ..search import aed
from . import KIND
from .config import MoonshineConfig
from .model import STRIDE, MoonshineModel, encoder_frames
from .options import MoonshineOptions, MoonshineStreamOptions
from .tokenizer import MoonshineTokenizer

log = logging.getLogger("transcribe")

MAX_BATCH_AUDIO_S = 8 * 60.0  # a batch holds at most this much padded audio
TOKENS_PER_SECOND = 6.5       # the model card's output bound


def max_length(samples: int, rate: int) -> int:
    """The model card's `max_length` for an input of `samples` samples: int(samples * (6.5 / rate)), the product
    taken as the card takes it (an int64 tensor times a Python float: float32)."""
    return int((torch.tensor([samples], dtype=torch.long) * (TOKENS_PER_SECOND / rate)).item())


class MoonshineASR(Recognizer):
    """A loaded Moonshine model: `transcribe(audio, **options)` takes paths, bytes or arrays at `sample_rate`
    (its options: `MoonshineOptions`)."""

    family = "moonshine"
    kind = KIND
    Options = MoonshineOptions
    StreamOptions = MoonshineStreamOptions

    def __init__(self, model: MoonshineModel, tokenizer: MoonshineTokenizer, name: str, device: str = "cpu"):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)
        c: MoonshineConfig = model.config
        self.sample_rate = c.sample_rate
        self.threads: Optional[int] = None
        if len(tokenizer) > c.vocab_size:
            raise ModelError(f"{name}: the tokenizer has {len(tokenizer)} pieces, more than the decoder's "
                             f"{c.vocab_size} outputs")

    @classmethod
    def load(cls, path: Path, name: str, device, dtype: Optional[torch.dtype] = None) -> "MoonshineASR":
        """A transformers-format directory -> a recognizer on `device`; `dtype`: bfloat16 / float16 (every layer),
        int8 (the encoder's and decoder's linear layers and the head, `quant.Int8Linear`; the stem, norms and
        embedding float32)."""
        from ..safetensors_files import read_tensors, weight_files
        from .config import read_config
        from .tokenizer import load_tokenizer

        path = Path(path)
        config = read_config(path)
        state = read_tensors(weight_files(path))
        with torch.device("meta"):
            model = MoonshineModel(config)
        try:
            model.load_checkpoint(state)
        except KeyError as e:
            raise ModelError(f"{path}: {e.args[0] if e.args else e}") from None
        try:
            tokenizer = load_tokenizer(path)
        except ValueError as e:
            raise ModelError(f"{path}: {e}") from None
        return cls.finish(model, tokenizer, name, device, dtype)

    @classmethod
    def finish(cls, model: MoonshineModel, tokenizer: MoonshineTokenizer, name: str, device,
               dtype: Optional[torch.dtype] = None) -> "MoonshineASR":
        model.eval().requires_grad_(False).to(device)
        if dtype == torch.int8:
            if torch.device(device).type != "cpu":
                raise ModelError(f"{name}: int8 runs on the CPU only (float32, bfloat16 or float16 on {device})")
            from ..quant import Int8Linear, quantize_linears

            for part in (model.model.encoder.layers, model.model.decoder.layers):
                quantize_linears(part)
            model.proj_out = Int8Linear.from_linear(model.proj_out)
        elif dtype is not None and dtype != torch.float32:
            model.to(dtype)
        return cls(model, tokenizer, name, str(device))

    @property
    def default_batch_size(self) -> int:
        return 16 if self.device.type == "cuda" else 4

    # -- bounds
    def max_new(self, samples: int, opts: MoonshineOptions) -> int:
        """Tokens an input of `samples` samples may generate: max_new_tokens, else the model card's max_length less
        the start token (0 under 0.31 s at 16 kHz: an empty transcript, where transformers' generate refuses a
        max_length of 1)."""
        if opts.max_new_tokens is not None:
            return opts.max_new_tokens
        return max(max_length(samples, self.sample_rate) - 1, 0)

    def _stream(self, opts: MoonshineStreamOptions):
        """A live session cut at pauses (`transcribe.utterances`): each utterance decoded once, whole, with the
        session's options; words placed at the cut that ended their utterance (the model gives no times). An
        utterance's first piece carries its own word-start mark, so the session adds no space between them."""
        import dataclasses

        from ..runtime import model_call
        from ..utterances import UtteranceSession

        piece_opts = MoonshineOptions(**{f.name: getattr(opts, f.name) for f in dataclasses.fields(MoonshineOptions)})
        tok = self.tokenizer

        def decode_piece(pcm: np.ndarray) -> list[int]:
            with model_call(self.threads):
                return self.decode([pcm], piece_opts)[0][0].ids

        return UtteranceSession(decode_piece, decode=tok.text, piece=tok.piece,
                                punctuation={".", ",", "?", "!", ";", ":"},
                                pause_s=0.5 if opts.pause_s is None else opts.pause_s, max_piece_s=opts.max_piece_s,
                                partial_s=opts.partial_s)

    # -- transcription
    def _transcribe(self, items: list, opts: MoonshineOptions) -> list[Transcript]:
        batch_size = self.default_batch_size if opts.batch_size is None else opts.batch_size
        rate = self.sample_rate
        out: list[Optional[Transcript]] = [None] * len(items)

        def run(pcms: list[np.ndarray]) -> list[Transcript]:
            results = []
            for hyps, p in zip(self.decode(pcms, opts), pcms):
                t = self._to_transcript(hyps[0], len(p) / rate, opts)
                if opts.beam_size is not None and opts.nbest is not None:
                    t.nbest = self._nbest(hyps[:opts.nbest], len(p) / rate, opts)
                results.append(t)
            return results

        for group in self.groups(items, opts.sample_rate):
            done = long_input.in_pieces(group, run, rate=rate, max_piece_s=opts.max_piece_s, detector=opts.detector,
                                        grain=STRIDE, batch_size=batch_size, max_batch_s=MAX_BATCH_AUDIO_S)
            for i, t in done.items():
                out[i] = t
        return out  # type: ignore[return-value]

    @torch.inference_mode()
    def encode(self, pcm: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (each with at least one encoder frame) -> encoder states [B, S, hidden], zero-padded, and their
        frame counts [B]."""
        states = [self.model.encode(torch.from_numpy(np.ascontiguousarray(p, dtype=np.float32))[None]
                                    .to(self.device))[0] for p in pcm]
        lengths = torch.tensor([len(s) for s in states], dtype=torch.long, device=self.device)
        return torch.nn.utils.rnn.pad_sequence(states, batch_first=True), lengths

    @torch.inference_mode()
    def decode(self, pcm: Sequence[np.ndarray], opts: MoonshineOptions) -> list[list[aed.AEDHypothesis]]:
        """Mono float32 inputs at the model's rate -> each input's hypotheses, best first (greedy: one)."""
        out = [[aed.AEDHypothesis([], 0.0, [])] for _ in pcm]
        rows = [i for i, p in enumerate(pcm) if encoder_frames(len(p)) > 0 and self.max_new(len(p), opts) > 0]
        if not rows:
            return out
        c = self.model.config
        if opts.beam_size is not None:
            from ..search.hf_beam import beam

            pen = 1.0 if opts.length_penalty is None else opts.length_penalty
            for i in rows:
                states, lengths = self.encode([pcm[i]])
                state = self.model.start(states, lengths)
                ids = torch.tensor([[c.decoder_start]], dtype=torch.long, device=self.device)
                hyps = beam(lambda x: self.model.step(x, state), state.select, ids, opts.beam_size,
                            self.max_new(len(pcm[i]), opts), c.eos, pen)[0]
                out[i] = hyps or [aed.AEDHypothesis([], 0.0, [])]
            return out
        limits = [self.max_new(len(pcm[i]), opts) for i in rows]
        states, lengths = self.encode([pcm[i] for i in rows])
        state = self.model.start(states, lengths)
        ids = torch.full((len(rows), 1), c.decoder_start, dtype=torch.long, device=self.device)
        # rows are independent: each row's output is the batch's cut to its own bound
        for i, limit, h in zip(rows, limits, aed.greedy(lambda x: self.model.step(x, state), ids, max(limits),
                                                         c.eos, c.pad)):
            out[i] = [aed.AEDHypothesis(h.ids[:limit], h.score, h.logprobs[:limit])]
        return out

    def _to_transcript(self, hyp: aed.AEDHypothesis, duration: float, opts: MoonshineOptions) -> Transcript:
        tok = self.tokenizer
        text = tok.text(hyp.ids)
        segments = [Segment(text.strip(), 0.0, duration)] if opts.timestamps and text.strip() else []
        tokens = [Token(id=int(i), text=tok.token_text(int(i)), start=0.0, end=duration,
                        logprob=hyp.logprobs[k] if k < len(hyp.logprobs) else None, piece=tok.piece(int(i)))
                  for k, i in enumerate(hyp.ids)]
        return Transcript(text=text, duration=duration, segments=segments, words=[], tokens=tokens,
                          model=self.name, language="en")

    def _nbest(self, hyps: list[aed.AEDHypothesis], duration: float, opts: MoonshineOptions) -> NBest:
        out = []
        for h in hyps:
            tokens = [HypothesisToken(int(i), 0, None, 0.0, duration) for i in h.ids]
            out.append(Hypothesis(self.tokenizer.text(h.ids).strip(), h.score, h.score / (len(h.ids) + 1), tokens))
        # scores: transformers' sums of log-probabilities over length ** length_penalty
        return NBest(opts.beam_size or 1, False, out, beam="transformers")

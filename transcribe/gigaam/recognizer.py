"""The GigaAM recognizer behind `load_model`: audio in, `Transcript` out.

Greedy decoding is gigaam's: CTC takes the argmax of every frame, collapses repeats and drops blanks
(`search.ctc.greedy`); RNN-T starts its predictor from a zero input and emits at most `max_symbols_per_step`
labels per frame (`search.transducer.greedy_one`). Text is the reference's: a character model's characters
joined, an e2e model's SentencePiece ids decoded (then stripped of outer spaces). Times come from the
encoder's frames (hop 160 x subsampling 4 = 40 ms): a token spans its frame, a word its tokens' frames, as
gigaam's word timestamps do (a word starts at a space character or a "▁" piece). Inputs longer than
max_piece_s (at most 25 s: gigaam's limit for one call) are cut at pauses, the pieces run in batches and
joined (`long_input.in_pieces`); a batch's results are each piece's alone (padding masked as gigaam does).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from .. import long_input
from ..errors import ModelError, TranscribeError
from ..recognizer import Recognizer
from ..results import Hypothesis, HypothesisToken, NBest, Segment, Token, Transcript, Word
from ..search import ctc as ctc_search
from ..search import transducer as transducer_search
from ..search.decoded import Decoded
from ..search.steps import lstm_steps
from . import KIND
from .checkpoint import read
from .config import GigaAMConfig
from .model import GigaAM
from .options import GigaAMOptions

WORD_START = "\u2581"
SENTENCE_END = (".", "?", "!")
MAX_BATCH_AUDIO_S = 4 * 60.0


class Vocabulary:
    """A character vocabulary (ids -> characters joined) or a SentencePiece model (ids -> its decode)."""

    def __init__(self, chars: Sequence[str] = (), sentencepiece: Optional[Path | bytes] = None):
        self.sp = None
        if sentencepiece is not None:
            from ..text.sentencepiece import SentencePieceTokenizer

            try:
                self.sp = SentencePieceTokenizer(sentencepiece if isinstance(sentencepiece, bytes)
                                                 else str(sentencepiece))
            except ValueError as e:
                raise ModelError(str(e)) from None
            self.pieces = list(self.sp.pieces)
        else:
            self.pieces = list(chars)

    def __len__(self) -> int:
        return len(self.pieces)

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode(ids) if self.sp is not None else "".join(self.pieces[i] for i in ids)

    def text(self, i: int) -> str:
        """One token's text: a piece's word-start mark as a space."""
        return self.pieces[i].replace(WORD_START, " ")


class GigaAMASR(Recognizer):
    """A loaded GigaAM v3 model: `transcribe()` takes paths, bytes or arrays (options: `GigaAMOptions`)."""

    family = "gigaam"
    kind = KIND
    Options = GigaAMOptions
    StreamOptions = None
    sample_rate = 16000

    def __init__(self, model: GigaAM, vocab: Vocabulary, name: str, device: str = "cpu"):
        cfg = model.cfg
        if len(vocab) + 1 != cfg.classes:
            raise ModelError(f"{name}: the vocabulary has {len(vocab)} tokens but the head {cfg.classes} classes "
                             "(tokens and the blank)")
        self.model, self.vocab, self.name = model, vocab, name
        self.device = torch.device(device)
        self.threads: Optional[int] = None

    @classmethod
    def load(cls, path: Path, name: str, device: torch.device, dtype: Optional[torch.dtype] = None) -> "GigaAMASR":
        """A model folder (or a loadable .ckpt) -> a recognizer on `device`: float32 (None); bfloat16 or
        float16 (the encoder's weights and compute; front end and heads float32); int8 (the encoder's linear
        layers and pointwise convolutions as int8 products, `quant.quantize_linears`; the rest float32)."""
        ckpt = read(Path(path))
        vocab = Vocabulary(ckpt.config.vocabulary, ckpt.tokenizer)
        model = build(ckpt.config, ckpt.state_dict, str(path))
        return cls(finish(model, device, dtype), vocab, name, str(device))

    def cannot_stream(self) -> str:
        return f"{self.name} is a GigaAM model: it transcribes whole inputs and has no streaming session"

    def frame_seconds(self, frame: float) -> float:
        """Encoder frames -> seconds (40 ms each): the one conversion of this family."""
        return frame * self.model.cfg.frame_samples / self.sample_rate

    @property
    def frame_s(self) -> float:
        return self.frame_seconds(1)

    # ------------------------------------------------------------------------------------------
    def _transcribe(self, items: list, opts: GigaAMOptions) -> list[Transcript]:
        out: list = [None] * len(items)
        min_samples = self.model.cfg.win_length
        for group in self.groups(items, opts.sample_rate):
            for i, pcm in group:
                if len(pcm) < min_samples:
                    raise TranscribeError(f"input {i + 1}: audio of {len(pcm)} samples is shorter than one GigaAM "
                                          f"window ({min_samples} samples, 20 ms)")
            done = long_input.in_pieces(group, lambda pcms: self._run(pcms, opts), rate=self.sample_rate,
                                        max_piece_s=opts.max_piece_s, detector=opts.detector,
                                        grain=self.model.cfg.frame_samples, batch_size=opts.batch_size,
                                        max_batch_s=MAX_BATCH_AUDIO_S)
            for i, t in done.items():
                out[i] = t
        return out

    @torch.inference_mode()
    def encode(self, pcms: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero-padded waveforms -> encoder output [B, D, T] and lengths (as gigaam's forward)."""
        n = max(len(p) for p in pcms)
        wav = torch.zeros(len(pcms), n)
        for j, p in enumerate(pcms):
            wav[j, : len(p)] = torch.from_numpy(np.ascontiguousarray(p, dtype=np.float32))
        lengths = torch.tensor([len(p) for p in pcms], dtype=torch.long)
        return self.model.encode(wav.to(self.device), lengths.to(self.device))

    @torch.inference_mode()
    def _run(self, pcms: list[np.ndarray], opts: GigaAMOptions) -> list[Transcript]:
        enc, lengths = self.encode(pcms)
        out = []
        for j, pcm in enumerate(pcms):
            n = int(lengths[j])
            lists = self.decode(enc[j: j + 1, :, :n], n, opts.beam_size)
            t = self._to_transcript(lists[0] if lists else Decoded([], []), len(pcm) / self.sample_rate,
                                    opts.timestamps)
            if opts.beam_size is not None:
                t.nbest = self._nbest(lists, opts)
            out.append(t)
        return out

    def decode(self, enc: torch.Tensor, length: int, beam_size: Optional[int] = None) -> list[Decoded]:
        """One input's encoder output [1, D, T] -> [greedy result], or the beam's N-best list."""
        m = self.model
        if m.cfg.head == "ctc":
            logp = m.head(enc)[0]
            if beam_size is None:
                return [ctc_search.greedy(logp, length, m.blank, None)]
            from ..search.ctc_beam import CtcBeamOptions, beam_search

            return beam_search(logp, length, m.blank, CtcBeamOptions(beam_size=beam_size))
        frames = m.head.joint.enc(enc[0].transpose(0, 1))
        steps = self.transducer_steps()
        if beam_size is None:
            return [transducer_search.greedy_one(frames, length, steps, None)]
        from ..search.transducer_beam import rnnt_beam

        return rnnt_beam(frames, length, steps, beam_size)

    def transducer_steps(self):
        """The predictor and joint as the transducer searches see them (search.steps)."""
        head = self.model.head
        dev = next(head.parameters()).device
        h = self.model.cfg.pred_hidden
        layers = self.model.cfg.pred_layers

        def predict(labels, state):
            out, st = head.decoder(labels, state)
            return head.joint.pred(out), st

        def init_state(n):
            return (torch.zeros(layers, n, h, device=dev), torch.zeros(layers, n, h, device=dev))

        return lstm_steps(predict, head.joint, init_state, self.model.blank, None, self.model.cfg.max_symbols)

    # ------------------------------------------------------------------------------------------
    def _to_transcript(self, h: Decoded, duration: float, timestamps: bool) -> Transcript:
        sec = self.frame_seconds
        text = self.vocab.decode(h.ids).strip()
        tokens = [Token(i, self.vocab.text(i), sec(f), sec(f + 1), None, f, None,
                        h.logprobs[k] if k < len(h.logprobs) else None, self.vocab.pieces[i])
                  for k, (i, f) in enumerate(zip(h.ids, h.frames))]
        if not timestamps:
            return Transcript(text=text, duration=duration, tokens=tokens, model=self.name)
        words = self._words(h.ids, h.frames)
        segments, cur = [], []
        for w in words:
            cur.append(w)
            if w.word.endswith(SENTENCE_END):
                segments.append(cur)
                cur = []
        if cur:
            segments.append(cur)
        segs = [Segment(" ".join(w.word for w in s), s[0].start, s[-1].end, s) for s in segments]
        return Transcript(text=text, duration=duration, segments=segs, words=words, tokens=tokens, model=self.name)

    def _words(self, ids: Sequence[int], frames: Sequence[int]) -> list[Word]:
        """gigaam's grouping: a word ends before a "▁" piece or at a space character; it spans from its first
        token's frame to the end of its last's."""
        words: list[Word] = []
        chars: list[str] = []
        at: list[int] = []

        def commit():
            text = "".join(chars).strip()
            if text:
                words.append(Word(text, self.frame_seconds(at[0]), self.frame_seconds(at[-1] + 1)))
            chars.clear()
            at.clear()

        for i, f in zip(ids, frames):
            piece = self.vocab.pieces[i]
            if piece.startswith(WORD_START):
                commit()
                piece = piece[1:]
            elif piece == " ":
                commit()
                continue
            chars.append(piece)
            at.append(f)
        commit()
        return words

    def _nbest(self, lists: list[Decoded], opts: GigaAMOptions) -> NBest:
        sec = self.frame_seconds
        hyps, seen = [], set()
        for d in lists:
            if tuple(d.ids) in seen:
                continue
            seen.add(tuple(d.ids))
            toks = [HypothesisToken(i, f, None, sec(f), sec(f + 1)) for i, f in zip(d.ids, d.frames)]
            hyps.append(Hypothesis(self.vocab.decode(d.ids).strip(), d.score, d.score / (len(d.ids) + 1), toks))
            if len(hyps) == (opts.nbest or 1):
                break
        ctc = self.model.cfg.head == "ctc"
        return NBest(opts.beam_size, not ctc, hyps, "ctc" if ctc else "default")


def finish(model: GigaAM, device, dtype: Optional[torch.dtype]) -> GigaAM:
    """The built model on `device` in `dtype` (as GigaAMASR.load says); every loader ends here."""
    if dtype == torch.int8:
        from ..quant import quantize_linears, quantize_matching

        quantize_linears(model.encoder)
        quantize_matching(model.encoder, lambda name: ".pointwise_conv" in name)
    elif dtype not in (None, torch.float32):
        if dtype not in (torch.bfloat16, torch.float16):
            raise ModelError(f"GigaAM models run in float32, bfloat16, float16 or int8, not {dtype}")
        model.encoder.to(dtype)
    return model.to(device)


def build(cfg: GigaAMConfig, state_dict: dict, where: str) -> GigaAM:
    """The model with the checkpoint's weights (gigaam's state dict names; the front end's filterbank and
    window from preprocessor.featurizer), float32, in eval mode. Missing, extra or misshapen tensors are
    errors naming them."""
    model = GigaAM(cfg)
    sd = {}
    for k, v in state_dict.items():
        if k == "preprocessor.featurizer.0.mel_scale.fb":
            sd["frontend.fb"] = v
        elif k == "preprocessor.featurizer.0.spectrogram.window":
            sd["frontend.window"] = v
        elif k.startswith(("encoder.", "head.")):
            sd[k] = v
    own = model.state_dict()
    missing = sorted(set(own) - set(sd))
    extra = sorted(set(sd) - set(own))
    if missing or extra:
        raise ModelError(f"{where}: the weights do not match the config (missing: {', '.join(missing[:6]) or '-'}; "
                         f"unexpected: {', '.join(extra[:6]) or '-'})")
    for k, v in sd.items():
        if not isinstance(v, torch.Tensor) or tuple(v.shape) != tuple(own[k].shape):
            raise ModelError(f"{where}: tensor {k} has shape {tuple(getattr(v, 'shape', ()))}, the config makes "
                             f"{tuple(own[k].shape)}")
        if not torch.isfinite(v.float()).all():
            raise ModelError(f"{where}: tensor {k} holds non-finite values")
    model.load_state_dict({k: v.float() for k, v in sd.items()})
    return model.eval()

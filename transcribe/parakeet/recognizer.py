"""The Parakeet recognizer behind `load_model`: audio in, `Transcript` out."""
from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import torch

from ..errors import ModelError, OptionsNotTaken, TranscribeError
from ..recognizer import Recognizer
from . import KIND
from ..nemo.checkpoint import check_bpe_tokenizer, read_nemo
from . import beams
from .model import ParakeetModel
from .options import BUFFERED_ONLY, ParakeetOptions, ParakeetStreamOptions
from ..results import Hypothesis, HypothesisToken, NBest, Segment, Token, Transcript, Word
from ..search import ctc as ctc_search
from ..search.decoded import Decoded
from ..search.steps import TransducerSteps, lstm_steps
from ..search import transducer as transducer_search
from ..text.sentencepiece import WORD_START, SentencePieceTokenizer, punctuation_in
from ..text.words import TokenSpan, group_segments, group_words, join_punctuation, snap_punctuation

if TYPE_CHECKING:  # pragma: no cover
    from ..streaming import StreamingSession

log = logging.getLogger("transcribe")

# Above this much audio in one input, the encoder switches from full attention to NeMo's local
# attention with a [128, 128] context (as NVIDIA recommends for long audio): full attention's cost
# grows with the square of the length.
LOCAL_ATTENTION_AFTER_S = 20 * 60.0
LOCAL_CONTEXT = (128, 128)
# A batch holds at most this much padded audio (its longest input times its size); a longer input
# runs alone.
MAX_BATCH_AUDIO_S = 8 * 60.0


class ParakeetASR(Recognizer):
    """A loaded Parakeet model: `transcribe(audio, **options)` takes paths, bytes or arrays at
    `sample_rate` (its options: `ParakeetOptions`); `stream(**options)` opens a live session (its
    options: `ParakeetStreamOptions`)."""

    family = "parakeet"
    kind = KIND
    Options = ParakeetOptions
    StreamOptions = ParakeetStreamOptions

    def __init__(self, model: ParakeetModel, tokenizer: SentencePieceTokenizer, name: str, device: str = "cpu"):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)
        self.sample_rate = model.sample_rate
        self.punctuation = punctuation_in(tokenizer.pieces)
        self.threads: Optional[int] = None  # CPU threads while this model runs (runtime.model_call)
        if len(tokenizer) != model.vocab_size:
            raise TranscribeError(
                f"{name}: tokenizer has {len(tokenizer)} pieces but the model's vocabulary has {model.vocab_size}"
            )

    @classmethod
    def load(cls, path: Path, name: str, device: torch.device, dtype: Optional[torch.dtype] = None) -> "ParakeetASR":
        """A `.nemo` file or NeMo directory -> a recognizer on `device`; `dtype` (bfloat16, float16)
        applies to the encoder, the front end stays in float32; int8 quantizes the encoder's,
        predictor's and joint's matrix products (`ParakeetModel.quantize_int8`)."""
        ckpt = read_nemo(path)
        check_bpe_tokenizer(ckpt.config, path)
        if ckpt.tokenizer is None:
            raise ModelError(f"{path}: the config names no SentencePiece tokenizer (tokenizer.model_path)")
        try:
            with torch.device("meta"):
                model = ParakeetModel(ckpt.config)
        except (ValueError, KeyError, TypeError) as e:
            raise ModelError(f"{path}: model config not supported ({e})") from None
        try:
            model.load_nemo_state_dict(ckpt.state_dict)
        except KeyError as e:
            raise ModelError(f"{path}: {e.args[0] if e.args else e}") from None
        del ckpt.state_dict
        try:
            tokenizer = SentencePieceTokenizer(ckpt.tokenizer)
        except ValueError as e:
            raise ModelError(f"{path}: {e}") from None
        return cls.finish_load(model, tokenizer, name, device, dtype)

    @classmethod
    def finish_load(cls, model: ParakeetModel, tokenizer: SentencePieceTokenizer, name: str, device: torch.device,
                    dtype: Optional[torch.dtype] = None) -> "ParakeetASR":
        """A model with its weights (float32 on the CPU) and its tokenizer -> the recognizer: batch norm
        folded, eval mode, on `device`, in `dtype` (as `load` says). Every loader ends here."""
        model.encoder.fold_batch_norm()
        model.eval()
        model.to(device)
        if dtype == torch.int8:
            model.quantize_int8()
        elif dtype is not None and dtype != torch.float32:
            model.encoder.to(dtype)
        return cls(model, tokenizer, name, str(device))

    @property
    def default_batch_size(self) -> int:
        """Inputs per batch when a call does not say, chosen by measurement
        (benchmarks/parakeet_batching.py, 8 clips of 10-20 s, full-size TDT 0.6B on 2 CPU threads):
        batches of 4 were faster than one at a time in every dtype (float32 1.19x, bf16 1.20x,
        int8 1.06x), batches of 8 not always (float32 1.04x, int8 0.95x); on a GPU, 16."""
        return 16 if self.device.type == "cuda" else 4

    @property
    def heads(self) -> list[str]:
        return self.model.heads

    # ------------------------------------------------------------------------------------------
    # transcribe(audio, **options) is the base class's: the options are ParakeetOptions' fields (documented
    # there); batch_size None is `default_batch_size`.
    def check_for_model(self, opts: ParakeetOptions) -> None:
        """The checks of `opts` that need the model: a head it has, and the beam options for that head
        (a beam only for the transducer, lm only for the CTC head, hotword_weight with hotwords,
        lm_weight with lm, hotwords its tokenizer can spell, an lm file that parses)."""
        self._plan(opts)

    def _plan(self, opts: ParakeetOptions) -> tuple[str, Optional[beams.BeamOptions]]:
        """The head that decodes and the beam search (None: greedy)."""
        head = self._resolve_head(opts.head)
        return head, beams.options(self, head, beams.BeamRequest(
            opts.beam_size, opts.nbest, opts.beam, opts.score_norm, opts.hotwords, opts.hotword_weight, opts.lm,
            opts.lm_weight))

    def _transcribe(self, items: list, opts: ParakeetOptions) -> list[Transcript]:
        head, search = self._plan(opts)
        batch_size = self.default_batch_size if opts.batch_size is None else opts.batch_size
        out: list[Optional[Transcript]] = [None] * len(items)
        for group in self.groups(items, opts.sample_rate):
            for batch in self._batches(group, batch_size, opts.attention):
                local = batch[0][2]
                pcm = [p for _, p, _ in batch]
                decoded = self._transcribe_batch(pcm, head, opts.confidence, local, opts.timestamps, search)
                for (i, _, _), t in zip(batch, decoded):
                    out[i] = t
        return out  # type: ignore[return-value]

    @property
    def frame_s(self) -> float:
        """Seconds per encoder frame: the unit of a token's `frame` (batch jobs shift token frames by it
        when they join the pieces of a long input)."""
        return self.model.frame_seconds(1)

    # -- stream(**options) is the base class's: the options are ParakeetStreamOptions' fields
    def stream_options(self, **given) -> ParakeetStreamOptions:
        """The checked `stream()` options. A cache-aware model refuses the names it does not take, and the
        buffered windows' chunk_s/left_s/right_s, as "unknown streaming options" (listing those it takes)."""
        from .streaming import refuse_for_cache_aware

        try:
            return super().stream_options(**given)
        except OptionsNotTaken as e:
            refuse_for_cache_aware(self, e.names + [n for n in BUFFERED_ONLY if given.get(n) is not None])
            raise

    def _stream(self, opts: ParakeetStreamOptions) -> "StreamingSession":
        """A cache-aware streaming model streams chunk by chunk with its caches (att_context_size = one
        of the model's [left, right] lookaheads, head, eou_reset=True, confidence, drop_short_tail,
        language); any other model streams through buffered windows (chunk_s, left_s, right_s, head,
        confidence)."""
        from .streaming import open_session

        return open_session(self, opts)

    def _resolve_head(self, head: Optional[str]) -> str:
        heads = self.heads
        if head is None:
            return heads[0]
        if head in ("tdt", "rnnt", "transducer") and self.model.transducer:
            return self.model.transducer
        if head == "ctc" and self.model.ctc_decoder is not None:
            return "ctc"
        raise TranscribeError(f"{self.name} has no {head} head (it has: {', '.join(heads)})")

    def _local_context(self, samples: int, attention: str) -> Optional[tuple[int, int]]:
        """The attention of one input: None (full) or a (left, right) local context."""
        own = self.model.encoder.local_context
        if attention == "full":
            return None
        if attention == "local":
            return own or LOCAL_CONTEXT
        return own or (LOCAL_CONTEXT if samples / self.sample_rate > LOCAL_ATTENTION_AFTER_S else None)

    def _batches(self, group: list[tuple[int, np.ndarray]], batch_size: int, attention: str):
        """Batches of (index, pcm, local context): longest first, so lengths in a batch are alike; at
        most `batch_size` inputs and MAX_BATCH_AUDIO_S of padded audio; one attention per batch."""
        items = sorted(((i, p, self._local_context(len(p), attention)) for i, p in group), key=lambda x: -len(x[1]))
        batch: list = []
        for item in items:
            padded_s = len(batch[0][1] if batch else item[1]) * (len(batch) + 1) / self.sample_rate
            if batch and (len(batch) >= batch_size or item[2] != batch[0][2] or padded_s > MAX_BATCH_AUDIO_S):
                yield batch
                batch = []
            batch.append(item)
        if batch:
            yield batch

    # ------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _transcribe_batch(self, pcm: Sequence[np.ndarray], head: str, confidence: str,
                          local: Optional[tuple[int, int]], timestamps: bool, search: Optional[beams.BeamOptions] = None):
        m = self.model
        n = max(1, max(len(p) for p in pcm))
        audio = torch.zeros(len(pcm), n)
        for i, p in enumerate(pcm):
            audio[i, : len(p)] = torch.from_numpy(p)
        lengths = torch.tensor([len(p) for p in pcm], dtype=torch.long)
        audio, lengths = audio.to(self.device), lengths.to(self.device)
        enc, enc_len = m.encode(audio, lengths, local)
        enc = enc.float()
        logp = m.ctc_decoder(enc.to(next(m.ctc_decoder.parameters()).dtype)) if head == "ctc" else None
        if search is not None:
            if head == "ctc":
                lists = beams.search_ctc(self, logp, enc_len, search, confidence)
            else:
                lists = beams.search_transducer(self, self.project_encoder(enc), enc_len, search, confidence)
            out = []
            for nb, p in zip(lists, pcm):
                t = self._to_transcript(nb[0] if nb else Decoded([], []), len(p) / self.sample_rate, head, timestamps)
                t.nbest = self._nbest(nb, head, search)
                out.append(t)
            return out
        if head == "ctc":
            hyps = [ctc_search.greedy(logp[i], int(enc_len[i]), m.blank, confidence) for i in range(len(pcm))]
        else:
            hyps = self._greedy_transducer(enc, enc_len, confidence)
        return [self._to_transcript(h, len(p) / self.sample_rate, head, timestamps) for h, p in zip(hyps, pcm)]

    def _nbest(self, nb: list[Decoded], head: str, search: "beams.BeamOptions") -> NBest:
        """The user's N-best list: at most `nbest` hypotheses, best first; a token sequence that a
        search returns more than once (different alignments of the same tokens) is listed once,
        at its best rank."""
        sec = self.model.frame_seconds
        hyps: list[Hypothesis] = []
        seen = set()
        for d in nb:
            key = tuple(d.ids)
            if key in seen:
                continue
            seen.add(key)
            text = join_punctuation(self.tokenizer.decode(d.ids), self.punctuation)
            offsets = token_offsets(head, d.frames, d.durations)
            tokens = [HypothesisToken(tid, f, (d.durations[i] if d.durations else None), sec(a), sec(b))
                      for i, (tid, f, (a, b)) in enumerate(zip(d.ids, d.frames, offsets))]
            hyps.append(Hypothesis(text.strip(), d.score, d.score / (len(d.ids) + 1), tokens))
            if len(hyps) == search.nbest:
                break
        return NBest(search.beam_size, search.score_norm if head != "ctc" else False, hyps, search.beam or "ctc")

    def transducer_steps(self) -> TransducerSteps:
        """The predictor and joint as the transducer searches see them (search.steps); the encoder
        frames they take are projected with `project_encoder`."""
        m = self.model
        if not m.transducer:
            raise TranscribeError(f"{self.name} has no transducer head")
        dtype = _first_float(m.joint).dtype
        device = _first_float(m.joint).device

        @torch.inference_mode()
        def predict(labels, state):
            out, st = m.decoder(labels, state)
            return m.joint.project_predictor(out), st

        @torch.inference_mode()
        def joint(enc, pred):
            return m.joint(enc, pred)

        return lstm_steps(predict, joint, lambda n: m.decoder.initial_state(n, device, dtype), m.blank,
                          m.durations if m.transducer == "tdt" else None, m.max_symbols)

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        """Encoder output [B, D, T] -> frames projected for the joint [B, T, H]."""
        m = self.model
        return m.joint.project_encoder(enc.transpose(1, 2).to(_first_float(m.joint).dtype))

    def _greedy_transducer(self, enc: torch.Tensor, enc_len: torch.Tensor, confidence: str) -> list[Decoded]:
        steps = self.transducer_steps()
        if enc.shape[0] == 1:
            return [transducer_search.greedy_one(self.project_encoder(enc)[0], int(enc_len[0]), steps, confidence)]
        return transducer_search.greedy_batch(self.project_encoder(enc), enc_len, steps, confidence)

    # ------------------------------------------------------------------------------------------
    def _to_transcript(self, h: Decoded, duration: float, head: str, timestamps: bool) -> Transcript:
        tok = self.tokenizer
        text = join_punctuation(tok.decode(h.ids), self.punctuation)
        offsets = token_offsets(head, h.frames, h.durations)
        spans = [
            TokenSpan(tid, tok.piece(tid), tok.decode([tid]), a, b, h.confidences[i] if h.confidences else None)
            for i, (tid, (a, b)) in enumerate(zip(h.ids, offsets))
        ]
        if head == "tdt":
            snap_punctuation(spans, self.punctuation)
        elif head == "ctc":
            for sp in spans[1:]:
                if sp.text[:1] in self.punctuation:
                    sp.end = sp.start
        sec = self.model.frame_seconds
        tokens = [
            Token(s.id, (" " + s.text) if s.piece.startswith(WORD_START) else s.text, sec(s.start), sec(s.end), s.confidence, h.frames[i],
                  h.durations[i] if head != "rnnt" else None, h.logprobs[i] if h.logprobs else None, s.piece)
            for i, s in enumerate(spans)
        ]
        if not timestamps:
            return Transcript(text=text, duration=duration, tokens=tokens, model=self.name)
        wspans = group_words(spans, tok.decode, self.punctuation)
        words = [Word(w.word, sec(w.start), sec(w.end), w.confidence) for w in wspans]
        word_of = {id(w): words[i] for i, w in enumerate(wspans)}
        segments = [
            Segment(s.text, sec(s.start), sec(s.end), [word_of[id(w)] for w in s.words])
            for s in group_segments(wspans)
        ]
        return Transcript(text=text, duration=duration, segments=segments, words=words, tokens=tokens, model=self.name)


def token_offsets(head: str, frames: Sequence[int], durations: Sequence[int]) -> list[tuple[int, int]]:
    """(start, end) encoder frames of each token, by NeMo's conventions per head.

    TDT: from the frame where the token was emitted to that plus its predicted duration.
    RNN-T: one frame. CTC: NeMo places each token between the onset of the token before it and its
    own onset (the first token starts one frame before its onset); we keep that convention so word
    times agree with NeMo's.
    """
    if head == "tdt":
        return [(f, f + d) for f, d in zip(frames, durations)]
    if head == "rnnt":
        return [(f, f + 1) for f in frames]
    out = []
    for i, f in enumerate(frames):
        start = max(0, f - 1) if i == 0 else frames[i - 1]
        out.append((start, f))
    return out


def _first_float(module: torch.nn.Module) -> torch.Tensor:
    """A module's first floating-point parameter or buffer: its compute dtype and device (an
    int8-quantized module keeps its scales and biases in buffers)."""
    return next(t for t in itertools.chain(module.parameters(), module.buffers()) if t.is_floating_point())

"""The Granite Speech 5 CTC recognizer behind `load_model`: audio in, `Transcript` out.

Decoding: greedy CTC (`search.ctc.greedy`: the argmax per frame, repeats collapsed, the blank (the pad token,
id 0) dropped: what transformers' `generate` and ParakeetTokenizer's decode do) or, with `beam_size`, the
shared CTC beam search (`search.ctc_beam`; the reference has none). The text is the ids decoded together
(special tokens skipped). Every token carries the frame its run starts at and the run's length: encoder frames
are 80 ms (stacked 20 ms features halved by each subsampling block), converted in `frame_seconds` only; words
start at a piece with the word mark, segments end at `.`, `?`, `!` and at the cuts between pieces. Live
sessions: buffered windows (streaming.py).

Long audio: an input longer than `max_piece_s` is cut at pauses into pieces on the 80 ms grid, the pieces (of
every input of the call) run in batches by length, and each input's pieces are joined back in order, all through
`transcribe.long_input`. A batch gives each input what it gets alone: features per input, padding masked in
attention and convolutions.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .. import long_input
from ..errors import ModelError, TranscribeError
from ..json_files import read_object
from ..llm.tokenizer import LLMTokenizer
from ..recognizer import Recognizer
from ..results import Segment, Token, Transcript, Word
from ..safetensors_files import read_tensors, weight_files
from ..search import ctc_beam
from ..search.ctc import greedy
from ..text.words import TokenSpan, group_segments, group_words
from . import KIND
from .config import parse_config
from .frontend import SAMPLES_PER_FRAME, FrontEnd, frames
from .model import GraniteSpeech5CTC, build
from .options import GraniteSpeech5Options, GraniteSpeech5StreamOptions

log = logging.getLogger("transcribe")

PUNCTUATION = {".", ",", "?", "!", ";", ":"}
# A batch holds at most this much padded audio (its longest piece times its size).
MAX_BATCH_AUDIO_S = 8 * 60.0


class GraniteSpeech5ASR(Recognizer):
    """A loaded Granite Speech 5 CTC model: `transcribe()` takes paths, bytes or arrays (options:
    `GraniteSpeech5Options`)."""

    family = "granite_speech5"
    kind = KIND
    Options = GraniteSpeech5Options
    StreamOptions = GraniteSpeech5StreamOptions
    sample_rate = 16000

    def __init__(self, model: GraniteSpeech5CTC, tokenizer: LLMTokenizer, name: str, device: str = "cpu",
                 floor: float = 8.0):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)
        self.frontend = FrontEnd(model.cfg.num_mel_bins, floor)
        self.threads: Optional[int] = None
        self.blank = model.cfg.blank
        vocab = model.cfg.vocab_size
        if len(tokenizer) > vocab:
            raise ModelError(f"{name}: the tokenizer has {len(tokenizer)} tokens but the CTC head {vocab}")
        self.pieces = [tokenizer.token(i) for i in range(vocab)]

    @classmethod
    def load(cls, path: Path, name: str, device: torch.device, dtype: Optional[torch.dtype] = None
             ) -> "GraniteSpeech5ASR":
        """A transformers directory (config.json, model.safetensors or shards, tokenizer.json, optionally
        preprocessor_config.json / processor_config.json) -> a recognizer on `device`; dtype None is float32
        (bfloat16 on a GPU); int8 reads float32 and quantizes the conformer's matrix products
        (`GraniteSpeech5CTC.quantize_int8`); float16 is refused."""
        path = Path(path)
        if dtype is None:
            dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        if dtype not in (torch.float32, torch.bfloat16, torch.int8):
            raise ModelError(f"{path}: Granite Speech 5 runs in float32, bfloat16 or int8, not {dtype}")
        try:
            cfg = parse_config(read_object(path / "config.json"))
            model = build(cfg, read_tensors(weight_files(path)), torch.float32 if dtype == torch.int8 else dtype)
        except ModelError as e:
            raise ModelError(f"{path}: {e}") from None
        if dtype == torch.int8:
            model.quantize_int8()
        floor = _feature_settings(path, cfg.num_mel_bins)
        tokenizer = LLMTokenizer.load(path)
        model.to(device)
        return cls(model, tokenizer, name, str(device), floor)

    def frame_seconds(self, frame: float) -> float:
        """Encoder frames (80 ms in the published model) -> seconds: the one conversion of this family."""
        return frame * self.model.cfg.subsampling * SAMPLES_PER_FRAME / self.sample_rate

    @property
    def frame_s(self) -> float:
        return self.frame_seconds(1)

    def _stream(self, opts: GraniteSpeech5StreamOptions):
        """A live session over buffered windows (`streaming.buffered_session`)."""
        from .streaming import buffered_session

        return buffered_session(self, opts)

    # ------------------------------------------------------------------------------------------
    def _transcribe(self, items: list, opts: GraniteSpeech5Options) -> list[Transcript]:
        out: list = [None] * len(items)
        grain = SAMPLES_PER_FRAME * self.model.cfg.subsampling
        for group in self.groups(items, opts.sample_rate):
            for i, pcm in group:
                if self.encoder_frames(len(pcm)) < 1:
                    raise TranscribeError(f"input {i + 1}: audio of {len(pcm)} samples is shorter than one "
                                          f"Granite Speech 5 frame ({grain} samples, {grain * 1000 // 16000} ms)")
            done = long_input.in_pieces(group, lambda pcms: self._run(pcms, opts), rate=self.sample_rate,
                                        max_piece_s=opts.max_piece_s, detector=opts.detector, grain=grain,
                                        batch_size=opts.batch_size, max_batch_s=MAX_BATCH_AUDIO_S)
            for i, t in done.items():
                out[i] = t
        return out

    def encoder_frames(self, samples: int) -> int:
        return int(self.model.output_lengths(torch.tensor([frames(samples)]))[0])

    @torch.inference_mode()
    def logprobs(self, pcms: list) -> tuple[torch.Tensor, torch.Tensor]:
        """The CTC log-probabilities [B, T', V] (float32, on the CPU) of a batch of pcm arrays, and their lengths."""
        feats = [self.frontend(torch.from_numpy(np.ascontiguousarray(p, dtype=np.float32))) for p in pcms]
        t = max(f.shape[0] for f in feats)
        x = torch.zeros(len(feats), t, feats[0].shape[1])
        for j, f in enumerate(feats):
            x[j, : f.shape[0]] = f
        lengths = torch.tensor([f.shape[0] for f in feats])
        logits, out_lengths = self.model(x.to(self.device), lengths.to(self.device))
        return torch.log_softmax(logits, dim=-1).cpu(), out_lengths.cpu()

    def _run(self, pcms: list, opts: GraniteSpeech5Options) -> list[Transcript]:
        logp, lengths = self.logprobs(pcms)
        if opts.beam_size:
            hyps = [nb[0] for nb in ctc_beam.beam_search_batch(logp, lengths, self.blank, ctc_beam.CtcBeamOptions(
                beam_size=opts.beam_size, confidence="entropy"))]
        else:
            hyps = [greedy(logp[j], int(lengths[j]), self.blank) for j in range(len(pcms))]
        return [self._transcript(h, len(p) / self.sample_rate, opts.timestamps) for h, p in zip(hyps, pcms)]

    def _transcript(self, hyp, duration: float, timestamps: bool) -> Transcript:
        tok = self.tokenizer
        keep = [k for k, i in enumerate(hyp.ids) if i not in tok.special]
        ids = [hyp.ids[k] for k in keep]
        text = tok.decode(ids).strip()
        if not timestamps:
            return Transcript(text=text, duration=duration, model=self.name)
        at = self.frame_seconds
        spans, tokens = [], []
        for k in keep:
            i, f, d = hyp.ids[k], hyp.frames[k], hyp.durations[k]
            conf = hyp.confidences[k] if hyp.confidences else None
            piece = self.pieces[i]
            spans.append(TokenSpan(i, piece, tok.decode([i]), f, f + d, conf))
            tokens.append(Token(i, tok.decode([i]), at(f), at(f + d), conf, frame=f, duration_frames=d,
                                logprob=hyp.logprobs[k] if hyp.logprobs else None, piece=piece))
        # a word starts at a piece with the word mark (its text alone differs from its piece)
        wspans = group_words(spans, tok.decode, PUNCTUATION)
        words = [Word(w.word.strip(), at(w.start), at(w.end), w.confidence) for w in wspans]
        word_of = {id(w): words[n] for n, w in enumerate(wspans)}
        segments = [Segment(sg.text.strip(), at(sg.start), at(sg.end), [word_of[id(w)] for w in sg.words])
                    for sg in group_segments(wspans)]
        return Transcript(text=text, duration=duration, segments=segments, words=words, tokens=tokens,
                          model=self.name)


def _feature_settings(path: Path, n_mels: int) -> float:
    """The feature extractor's settings (preprocessor_config.json, or processor_config.json's feature_extractor):
    the log-mel floor; a ModelError for one this front end does not compute."""
    fe = None
    if (path / "preprocessor_config.json").is_file():
        fe = read_object(path / "preprocessor_config.json")
    elif (path / "processor_config.json").is_file():
        fe = read_object(path / "processor_config.json").get("feature_extractor")
    if not isinstance(fe, dict):
        return 8.0
    want = dict(num_mel_bins=n_mels, sampling_rate=16000, n_fft=512, win_length=400, hop_length=160,
                delta_win_length=3)
    for key, value in want.items():
        if key in fe and fe[key] != value:
            raise ModelError(f"{path}: feature extractor {key} {fe[key]!r} is not supported (only {value})")
    floor = fe.get("logmel_floor_db", 8.0)
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not floor > 0:
        raise ModelError(f"{path}: feature extractor logmel_floor_db {floor!r} is not a positive number")
    return float(floor)

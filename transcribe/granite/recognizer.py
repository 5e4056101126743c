"""The Granite Speech NAR recognizer behind `load_model`: audio in, `Transcript` out.

Long audio: the editor holds `max_position_embeddings` (4096) positions, about 3.5-4 minutes of
speech. An input longer than `max_piece_s` (default 90 s) is cut at pauses into pieces that cover it
whole, the pieces (of every input of the call) run as batches by length, and each input's pieces are
joined back in order: all three through `transcribe.long_input`. Only a batch's tensors are alive at
a time, so a 1-hour file transcribes in bounded memory.

Word times: the editor's final ids are aligned to the BPE-CTC head's frames (12.5 per second,
each 80 ms) by a CTC forced alignment (Viterbi, `search.ctc.forced_align`): a token spans the frames
its best path sits on it, its confidence is exp(mean log-prob) of the CTC head over them. Words are
made of tokens (a token whose text starts with a space starts a word); segments end at `.`, `?`,
`!` and at the cuts between pieces. Where the alignment is impossible (more tokens than the frames
can carry) the piece's tokens are spread evenly over it and carry no confidence.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .. import long_input
from ..errors import ModelError, TranscribeError
from . import KIND
from ..recognizer import Recognizer
from ..results import Segment, Token, Transcript, Word
from ..runtime import release_memory
from ..search.ctc import forced_align
from ..text.words import TokenSpan, group_segments, group_words
from .checkpoint import read_checkpoint
from .config import parse_config
from .frontend import SAMPLES_PER_FRAME, GraniteFrontEnd
from .model import GraniteNAR, build
from .options import GraniteOptions
from .tokenizer import GraniteTokenizer

log = logging.getLogger("transcribe")

PUNCTUATION = {".", ",", "?", "!", ";", ":"}
# A batch holds at most this much padded audio (its longest piece times its size).
MAX_BATCH_AUDIO_S = 6 * 60.0


def check_dtype(device: torch.device, dtype: Optional[torch.dtype]) -> torch.dtype:
    """The dtype asked for: None is float32 on a CPU and bfloat16 on a GPU; int8 (the linear layers of
    the encoder, projector and editor as int8 products, the rest float32: `GraniteNAR.quantize_int8`) is
    returned as torch.int8; float16 is refused."""
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype == torch.float16:
        raise ModelError("Granite models run in float32 or bfloat16 (float16 overflows Granite's multipliers)")
    return dtype


class GraniteASR(Recognizer):
    """A loaded Granite Speech NAR model: `transcribe()` takes paths, bytes or arrays (options:
    `GraniteOptions`)."""

    family = "granite"
    kind = KIND
    Options = GraniteOptions
    StreamOptions = None  # it edits whole utterances
    sample_rate = 16000

    def __init__(self, model: GraniteNAR, tokenizer: GraniteTokenizer, name: str, device: str = "cpu"):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)
        self.frontend = GraniteFrontEnd()
        self.threads: Optional[int] = None
        vocab = model.cfg.text.vocab_size
        if tokenizer.size > vocab:
            raise ModelError(f"{name}: tokenizer has {tokenizer.size} tokens but the model's vocabulary has {vocab}")

    @classmethod
    def load(cls, path: Path, name: str, device: torch.device, dtype: Optional[torch.dtype] = None) -> "GraniteASR":
        """A checkpoint directory -> a recognizer on `device`; dtype None is float32 on a CPU and
        bfloat16 on a GPU (the front end stays float32); int8 reads the weights as float32 and quantizes
        the linear layers of the encoder, projector and editor (`GraniteNAR.quantize_int8`: int8 weights
        per output row, activations per row; embeddings, the tied LM head, the CTC heads, norms and the
        depthwise convolution stay float32)."""
        dtype = check_dtype(device, dtype)
        int8 = dtype == torch.int8
        ckpt = read_checkpoint(Path(path), torch.float32 if int8 else dtype)
        try:
            cfg = parse_config(ckpt.config, ckpt.layout)
            model = build(cfg, ckpt.state_dict, tied=cfg.text.tie_word_embeddings)
        except ModelError as e:
            raise ModelError(f"{path}: {e}") from None
        del ckpt.state_dict
        if int8:
            model.quantize_int8()
            release_memory()
        tokenizer = GraniteTokenizer(ckpt.tokenizer_path)
        model.to(device)
        return cls(model, tokenizer, name, str(device))

    def frame_seconds(self, frame: float) -> float:
        """BPE-CTC frames (pooled, 12.5 per second) -> seconds: the one conversion of this family."""
        return frame * self.model.cfg.encoder.bpe_pooling_window * SAMPLES_PER_FRAME / self.sample_rate

    @property
    def frame_s(self) -> float:
        """Seconds per token frame (a BPE-CTC frame: 80 ms)."""
        return self.frame_seconds(1)

    def cannot_stream(self) -> str:
        return (f"{self.name} is a Granite Speech NAR model: it edits whole utterances and has no "
                "streaming session (use a Parakeet or Whisper model for live audio)")

    # ------------------------------------------------------------------------------------------
    def _transcribe(self, items: list, opts: GraniteOptions) -> list[Transcript]:
        """The inputs' transcripts (opts checked: `GraniteOptions`). max_piece_s: inputs longer than
        this are cut at pauses into pieces of at most this length; batch_size: pieces run together;
        word_timestamps is accepted: words come with the timestamps here."""
        out: list = [None] * len(items)
        for group in self.groups(items, opts.sample_rate):
            for i, pcm in group:
                if len(pcm) < SAMPLES_PER_FRAME:
                    raise TranscribeError(f"input {i + 1}: audio of {len(pcm)} samples is shorter than one Granite "
                                          f"frame ({SAMPLES_PER_FRAME} samples, 20 ms)")
            pieces = self._pieces(group, opts.max_piece_s, opts.detector)
            results = self._run(pieces, opts.batch_size, opts.timestamps)
            for i, pcm in group:
                mine = [(p, r) for p, r in zip(pieces, results) if p[0] == i]
                out[i] = self._join(mine, len(pcm), opts.timestamps)
        return out

    # ------------------------------------------------------------------------------------------
    def _pieces(self, group, max_piece_s: float, detector: str) -> list[tuple[int, int, np.ndarray]]:
        """(input index, start sample, pcm) of every piece of the group's inputs, in order. Cuts snap
        down to whole 20 ms frames, so only the input's own tail (under 20 ms, as when it runs whole)
        is left out of the frames; a piece under one frame joins the one before."""
        pieces = []
        for i, pcm in group:
            spans = long_input.cut_spans(pcm, self.sample_rate, max_piece_s, detector, grain=SAMPLES_PER_FRAME)
            if len(spans) > 1:
                log.info("input %d: %.1f s cut at pauses into %d pieces", i + 1, len(pcm) / self.sample_rate,
                         len(spans))
            pieces += [(i, a, pcm[a:b]) for a, b in spans]
        return pieces

    def _run(self, pieces, batch_size: int, timestamps: bool) -> list[list[TokenSpan]]:
        """Token spans (frames counted from each piece's start) of every piece, run in batches by length
        (at most `batch_size` pieces and MAX_BATCH_AUDIO_S of padded audio)."""
        results: list = [None] * len(pieces)
        for batch in long_input.batches(range(len(pieces)), lambda k: len(pieces[k][2]), batch_size,
                                        MAX_BATCH_AUDIO_S, self.sample_rate):
            self._run_batch(pieces, batch, results, timestamps)
        return results

    @torch.inference_mode()
    def _run_batch(self, pieces, batch: list[int], results: list, timestamps: bool) -> None:
        feats = [self.frontend(torch.from_numpy(np.ascontiguousarray(pieces[k][2]))) for k in batch]
        t = max(f.shape[0] for f in feats)
        x = torch.zeros(len(feats), t, feats[0].shape[1])
        for j, f in enumerate(feats):
            x[j, : f.shape[0]] = f
        lengths = torch.tensor([f.shape[0] for f in feats])
        p = self.model(x.to(self.device), lengths.to(self.device))
        for j, k in enumerate(batch):
            n = p.bpe_lengths[j]
            results[k] = self._spans(p.ids[j], p.pooled[j, :n], p.bpe_lse[j, :n], timestamps)

    def _spans(self, ids: list[int], pooled: torch.Tensor, lse: torch.Tensor, timestamps: bool) -> list[TokenSpan]:
        """Token spans of one piece's final ids, aligned to its BPE-CTC frames."""
        tok = self.tokenizer
        ids = [i for i in ids if not tok.is_special(i)]
        n_frames = pooled.shape[0]
        al = None
        if ids and timestamps:
            cfg = self.model.cfg
            # Only the log-probs of the blank and of these ids are needed: a small table.
            cols = sorted(set(i + cfg.bpe_id_offset for i in ids) | {cfg.bpe_blank_channel})
            where = {c: j for j, c in enumerate(cols)}
            small = self.model.bpe_logprobs(pooled, lse, cols)
            al = forced_align(small.cpu(), [where[i + cfg.bpe_id_offset] for i in ids], where[cfg.bpe_blank_channel])
        spans = []
        for n, i in enumerate(ids):
            text = tok.decode([i])
            if al is not None:
                start, end, conf = al.starts[n], al.ends[n], al.confidences[n]
            else:  # spread evenly (no alignment asked for, or none possible)
                start, end, conf = n * n_frames / len(ids), (n + 1) * n_frames / len(ids), None
            spans.append(TokenSpan(i, tok.piece(i), text, start, end, conf))
        return spans

    def _join(self, mine, n_samples: int, timestamps: bool) -> Transcript:
        """One input's transcript from its pieces' spans, in order (`long_input.join`: times rounded to
        1 ms; the last 80 ms frame may reach past a piece's end (the tail of its last window is padding),
        so times stop there). The text is all the input's ids decoded at once."""
        parts = [self._piece(spans, len(pcm) / self.sample_rate, timestamps) for (_, _, pcm), spans in mine]
        text = self.tokenizer.decode([s.id for _, spans in mine for s in spans])
        return long_input.join(parts, [(a, a + len(pcm)) for (_, a, pcm), _ in mine], self.sample_rate, n_samples,
                               digits=3, clip=True, text=text)

    def _piece(self, spans: list[TokenSpan], duration: float, timestamps: bool) -> Transcript:
        """One piece's transcript, its times in seconds from the piece's start, not rounded."""
        at = self.frame_seconds
        tokens = [Token(s.id, s.text, at(s.start), at(s.end), s.confidence, piece=s.piece) for s in spans]
        if not timestamps or not spans:
            return Transcript(text="", duration=duration, tokens=tokens, model=self.name)
        # a word starts at a token whose text starts with a space (byte-level BPE's "Ġ")
        grouping = [TokenSpan(s.id, s.piece if s.text.startswith(" ") else s.text, s.text, s.start, s.end,
                              s.confidence) for s in spans]
        wspans = group_words(grouping, self.tokenizer.decode, PUNCTUATION)
        words = [Word(w.word.strip(), at(w.start), at(w.end), w.confidence) for w in wspans]
        word_of = {id(w): words[n] for n, w in enumerate(wspans)}
        segments = [Segment(sg.text.strip(), at(sg.start), at(sg.end), [word_of[id(w)] for w in sg.words])
                    for sg in group_segments(wspans)]
        return Transcript(text="", duration=duration, segments=segments, words=words, tokens=tokens, model=self.name)

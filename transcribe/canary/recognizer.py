"""The Canary recognizer behind `load_model`: audio in, `Transcript` out.

One call builds one prompt (its language, target language, task, punctuation, timestamp switches), encodes
the inputs in batches of similar length, and runs NeMo's greedy or beam search (`search.aed`) for every
input of a batch at once; a result does not depend on its batch neighbours (each row attends to its own
encoder frames only). Inputs shorter than one second are padded to one second on both sides, as NeMo's
`transcribe()` pads them (lhotse's `pad_min_duration`)."""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from ..errors import ModelError
from ..recognizer import Recognizer
from ..results import Hypothesis, HypothesisToken, NBest, Segment, Token, Transcript, Word
from .. import long_input
from ..search import aed
from . import KIND
from .config import max_new_tokens
from .model import CanaryModel
from .options import CanaryOptions, CanaryStreamOptions
from .prompt import Prompt, PromptBuilder, Request
from .tokenizer import CanaryTokenizer

log = logging.getLogger("transcribe")

# A batch holds at most this much padded audio (its longest input times its size).
MAX_BATCH_AUDIO_S = 8 * 60.0
# NeMo's transcribe() pads shorter inputs to this, half on each side.
MIN_INPUT_S = 1.0
# NeMo's segment marks for timestamped output (`process_aed_timestamp_outputs`).
SEGMENT_MARKS = (".", "?", "!")
_WORD_TIMES = re.compile(r"<\|(\d+)\|>(.*?)<\|(\d+)\|>")


@dataclass(frozen=True)
class Search:
    beam_size: Optional[int]   # None: greedy
    delta: int                 # max_generation_delta
    length_penalty: float
    nbest: int
    max_new: Optional[int] = None  # at most this many tokens generated (None: the other bounds alone)


class CanaryASR(Recognizer):
    """A loaded Canary model: `transcribe(audio, **options)` takes paths, bytes or arrays at `sample_rate`
    (its options: `CanaryOptions`)."""

    family = "canary"
    kind = KIND
    Options = CanaryOptions
    StreamOptions = CanaryStreamOptions

    def __init__(self, model: CanaryModel, tokenizer: CanaryTokenizer, name: str, device: str = "cpu"):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)
        self.sample_rate = model.sample_rate
        self.threads: Optional[int] = None
        self.prompts = PromptBuilder(model.config.prompt_format, tokenizer, model.config.prompt_defaults)
        if len(tokenizer) > model.vocab_size:
            raise ModelError(f"{name}: the tokenizer has {len(tokenizer)} pieces, more than the decoder's "
                             f"{model.vocab_size} outputs")

    @classmethod
    def load(cls, path: Path, name: str, device: torch.device, dtype: Optional[torch.dtype] = None) -> "CanaryASR":
        """A `.nemo` file or NeMo directory -> a recognizer on `device`; `dtype` (bfloat16, float16) applies to
        the encoder and the decoder, the front end stays in float32."""
        from ..nemo.checkpoint import read_nemo
        from .tokenizer import from_nemo

        ckpt = read_nemo(path)
        try:
            with torch.device("meta"):
                model = CanaryModel(ckpt.config)
        except (ValueError, KeyError, TypeError) as e:
            raise ModelError(f"{path}: model config not supported ({e})") from None
        try:
            model.load_nemo_state_dict(ckpt.state_dict)
        except KeyError as e:
            raise ModelError(f"{path}: {e.args[0] if e.args else e}") from None
        del ckpt.state_dict
        try:
            tokenizer = from_nemo(ckpt.config, ckpt.files, str(path))
        except ValueError as e:
            raise ModelError(f"{path}: {e}") from None
        return cls.finish(model, tokenizer, name, device, dtype)

    @classmethod
    def finish(cls, model: CanaryModel, tokenizer: CanaryTokenizer, name: str, device,
               dtype: Optional[torch.dtype] = None) -> "CanaryASR":
        """A model with its weights (float32) and its tokenizer -> the recognizer: batch norm folded, eval
        mode, on `device`, the encoder and decoder in `dtype`. Every loader ends here."""
        model.encoder.fold_batch_norm()
        model.eval().to(device)
        if dtype == torch.int8:
            raise ModelError(f"{name}: int8 is not implemented for Canary models (float32, bfloat16, float16)")
        if dtype is not None and dtype != torch.float32:
            model.encoder.to(dtype)
            if model.encoder_decoder_proj is not None:
                model.encoder_decoder_proj.to(dtype)
            model.transf_decoder.to(dtype)
            model.log_softmax.to(dtype)
        return cls(model, tokenizer, name, str(device))

    @property
    def default_batch_size(self) -> int:
        return 16 if self.device.type == "cuda" else 4

    @property
    def languages(self) -> list[str]:
        return list(self.prompts.languages)

    @property
    def frame_s(self) -> float:
        """Seconds per encoder frame: the unit of the timestamp tokens."""
        return self.model.frame_seconds(1)

    # -- options
    def check_for_model(self, opts: CanaryOptions) -> None:
        self._plan(opts)

    def _plan(self, opts: CanaryOptions) -> tuple[Prompt, Search]:
        prompt = self.prompts.build(Request(opts.language, opts.target_language, opts.task, opts.pnc, opts.itn,
                                            opts.word_timestamps))
        d = self.model.config.decoding
        delta = opts.max_generation_delta
        if delta is None:
            delta = d.beam_delta if d.strategy == "beam" else d.greedy_delta
        pen = d.length_penalty if opts.length_penalty is None else opts.length_penalty
        return prompt, Search(opts.beam_size, delta, pen, opts.nbest or 1, opts.max_new_tokens)

    def _stream(self, opts: CanaryStreamOptions):
        """A live session over buffered windows (`streaming.buffered_session`): models with timestamp tokens."""
        from .streaming import buffered_session

        return buffered_session(self, opts)

    # -- transcription
    def _transcribe(self, items: list, opts: CanaryOptions) -> list[Transcript]:
        prompt, search = self._plan(opts)
        batch_size = self.default_batch_size if opts.batch_size is None else opts.batch_size
        rate = self.sample_rate
        out: list[Optional[Transcript]] = [None] * len(items)
        for group in self.groups(items, opts.sample_rate):
            done = long_input.in_pieces(group, lambda pcm: self._transcribe_batch(pcm, prompt, search, opts),
                                        rate=rate, max_piece_s=opts.max_piece_s, detector=opts.detector,
                                        grain=self.model.frame_stride, batch_size=batch_size,
                                        max_batch_s=MAX_BATCH_AUDIO_S)
            for i, t in done.items():
                out[i] = t
        return out  # type: ignore[return-value]

    def _pad_left(self, n: int) -> int:
        """Samples of silence put before an input of `n` samples (half of what it lacks of MIN_INPUT_S)."""
        return max(int(round(MIN_INPUT_S * self.sample_rate)) - n, 0) // 2

    def _padded(self, pcm: np.ndarray) -> np.ndarray:
        short = int(round(MIN_INPUT_S * self.sample_rate)) - len(pcm)
        if short <= 0:
            return pcm
        left = self._pad_left(len(pcm))
        return np.concatenate([np.zeros(left, np.float32), pcm, np.zeros(short - left, np.float32)])

    @torch.inference_mode()
    def decode(self, pcm: Sequence[np.ndarray], prompt: Prompt, search: Search) -> list[list[aed.AEDHypothesis]]:
        """Mono float32 inputs at the model's rate -> each input's hypotheses (one for greedy, the beam's
        otherwise, best first)."""
        m = self.model
        pcm = [self._padded(p) for p in pcm]
        n = max(len(p) for p in pcm)
        audio = torch.zeros(len(pcm), n)
        for i, p in enumerate(pcm):
            audio[i, :len(p)] = torch.from_numpy(np.ascontiguousarray(p, dtype=np.float32))
        lengths = torch.tensor([len(p) for p in pcm], dtype=torch.long)
        states, enc_len = m.encode(audio.to(self.device), lengths.to(self.device))
        ids = torch.tensor([prompt.ids] * len(pcm), dtype=torch.long, device=self.device)
        tok = self.tokenizer
        frames = int(enc_len.max())
        # NeMo bounds a batch by its longest input's frames (the padded encoder output's length).
        max_new = max_new_tokens(m.max_positions, len(prompt.ids), frames, search.delta)
        if search.max_new is not None:
            max_new = min(max_new, search.max_new)
        holder = {"state": m.start(states, enc_len)}

        def step(x: torch.Tensor) -> torch.Tensor:
            return m.step(x, holder["state"])

        def select(rows: torch.Tensor) -> None:
            holder["state"] = holder["state"].select(rows)

        if search.beam_size is None:
            return [[h] for h in aed.greedy(step, ids, max_new, tok.eos, tok.pad)]
        return self._beam(step, select, ids, search, max_new)

    def _beam(self, step, select, ids: torch.Tensor, search: Search, max_new: int) -> list[list[aed.AEDHypothesis]]:
        """The beam search (NeMo's; a loader of another format's models may run that format's own)."""
        tok = self.tokenizer
        return aed.beam(step, select, ids, search.beam_size, max_new, tok.eos, tok.pad, search.length_penalty)

    def _transcribe_batch(self, pcm: list[np.ndarray], prompt: Prompt, search: Search,
                          opts: CanaryOptions) -> list[Transcript]:
        out = []
        for hyps, p in zip(self.decode(pcm, prompt, search), pcm):
            duration = len(p) / self.sample_rate
            # times count from the input's start, not from the silence a short input was padded with
            t = self._to_transcript(hyps[0], duration, prompt, opts, self._pad_left(len(p)) / self.sample_rate)
            if search.beam_size is not None and opts.nbest is not None:
                t.nbest = self._nbest(hyps[:search.nbest], duration, search)
            out.append(t)
        return out

    def _to_transcript(self, hyp: aed.AEDHypothesis, duration: float, prompt: Prompt, opts: CanaryOptions,
                       shift: float = 0.0) -> Transcript:
        tok = self.tokenizer

        def sec(frames: float) -> float:  # NeMo's time of a timestamp token (in the padded input, less its padding)
            t = self.model.frame_seconds(frames)
            return min(max(t - shift, 0.0), duration) if shift else t

        text = tok.text(hyp.ids)
        words: list[Word] = []
        segments: list[Segment] = []
        spans = self._token_times(hyp.ids, sec) if opts.word_timestamps else None
        if opts.word_timestamps:
            words, text = self._words(text, sec)
            if opts.timestamps:
                segments = _segments(words)
        elif opts.timestamps and text.strip():
            segments = [Segment(text.strip(), 0.0, duration)]
        tokens = []
        for k, i in enumerate(hyp.ids):
            start, end = spans[k] if spans else (0.0, duration)
            lp = hyp.logprobs[k] if k < len(hyp.logprobs) else None
            tokens.append(Token(id=int(i), text=tok.token_text(i), start=start, end=end, logprob=lp,
                                piece=tok.piece(i)))
        return Transcript(text=text, duration=duration, segments=segments, words=words, tokens=tokens,
                          model=self.name, language=prompt.target)

    def _words(self, text: str, sec) -> tuple[list[Word], str]:
        """NeMo's word times from the timestamp tokens: `<|s|> word <|e|>` (offsets in encoder frames),
        and the text without them (the words joined by spaces); the text as it is where no pair is found."""
        text = text.strip()
        if not re.search(r"<\|\d+\|>.*?<\|\d+\|>", text):
            return [], text
        words = []
        for m in _WORD_TIMES.finditer(text):
            word = m.group(2).strip()
            if word:
                words.append(Word(word, sec(int(m.group(1))), sec(int(m.group(3)))))
        return words, " ".join(w.word for w in words)

    def _token_times(self, ids: list[int], sec) -> list[tuple[float, float]]:
        """Each token's span: between the timestamp tokens around it (a timestamp token at its own time)."""
        stamps = self.tokenizer.timestamps
        marks = [(k, stamps[i]) for k, i in enumerate(ids) if i in stamps]
        out = []
        for k, i in enumerate(ids):
            if i in stamps:
                out.append((sec(stamps[i]), sec(stamps[i])))
                continue
            before = max((f for j, f in marks if j < k), default=0)
            after = min((f for j, f in marks if j > k), default=before)
            out.append((sec(before), sec(max(after, before))))
        return out

    def _nbest(self, hyps: list[aed.AEDHypothesis], duration: float, search: Search) -> NBest:
        tok = self.tokenizer
        out = []
        for h in hyps:
            tokens = [HypothesisToken(int(i), 0, None, 0.0, duration) for i in h.ids]
            out.append(Hypothesis(tok.text(h.ids).strip(), h.score, h.score / (len(h.ids) + 1), tokens))
        return NBest(search.beam_size or 1, False, out, beam="nemo-aed")


def _segments(words: list[Word]) -> list[Segment]:
    """NeMo's segments of timestamped output: a segment ends at a word ending with . ? or !."""
    segments, current = [], []
    for w in words:
        current.append(w)
        if w.word and (w.word[-1] in SEGMENT_MARKS or w.word in SEGMENT_MARKS):
            segments.append(Segment(" ".join(x.word for x in current), current[0].start, current[-1].end, current))
            current = []
    if current:
        segments.append(Segment(" ".join(x.word for x in current), current[0].start, current[-1].end, current))
    return segments


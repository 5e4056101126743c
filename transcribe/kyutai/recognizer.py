"""The Kyutai STT recognizer behind `load_model`: audio in, `Transcript` out, offline and live.

Offline (`transcribe`), each input at 24 kHz is padded as the processor pads it (audio_silence_prefix_seconds of
silence before, audio_delay_seconds + 1 s after) and decoded greedily as transformers' generate decodes it
(`decode.decode_padded`). Live (`stream`), `streaming.KyutaiSession` runs the same loop as the audio comes. The
text is the tokens decoded with the tokenizer's special tokens dropped (transformers' decode), and the text pad and
initial tokens (never text).

Times: the model writes a word's tokens `delay` frames after the audio they belong to, so a token chosen at position
p (which read frame p - 1) is placed at frame p - 1 - round(delay / 80 ms) of the padded input (`token_frame`), and
frame f at f x 80 ms less the silence prefix of the input (`frame_seconds`, the one conversion). beam_size > 1:
transformers' beam search over the same positions (`decode.beam_padded`; a beam's tokens carry no confidence)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import ModelError
from ..llm.tokenizer import LLMTokenizer
from ..recognizer import Recognizer
from ..results import Segment, Token, Transcript, Word
from ..text.words import TokenSpan, group_words
from . import KIND
from .config import SAMPLE_RATE, KyutaiConfig, read_config
from .decode import Decoder, Step, beam_padded, decode_padded
from .model import KyutaiModel
from .options import KyutaiOptions, KyutaiStreamOptions

PUNCTUATION = {".", ",", "?", "!", ";", ":", "…"}
WORD_MARK = "\u2581"


class KyutaiASR(Recognizer):
    family = "kyutai"
    kind = KIND
    Options = KyutaiOptions
    StreamOptions = KyutaiStreamOptions

    def __init__(self, model: KyutaiModel, tokenizer: LLMTokenizer, name: str, device: str = "cpu"):
        self.model = model
        self.config: KyutaiConfig = model.config
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)
        self.sample_rate = SAMPLE_RATE
        self.frame_s = self.config.frame_s
        self.threads: Optional[int] = None
        self.punctuation = PUNCTUATION
        self.delay_frames = int(round(self.config.delay_s / self.frame_s))
        drop = set(tokenizer.special) | {self.config.bos_token_id}
        if self.config.pad_token_id is not None:
            drop.add(self.config.pad_token_id)
        self.not_text = frozenset(drop)

    @classmethod
    def load(cls, path: Path, name: str, device, dtype: Optional[torch.dtype] = None) -> "KyutaiASR":
        """A transformers-layout directory -> a recognizer on `device`. `dtype` applies to the LM (bfloat16,
        float16: its weights and activations; int8: its matrix products, `lm.KyutaiLM.quantize_int8`); the codec
        stays float32, as transformers keeps it."""
        path = Path(path)
        if dtype not in (None, torch.float32, torch.bfloat16, torch.float16, torch.int8):
            raise ModelError(f"{path}: dtype {dtype} is not implemented for Kyutai STT")
        config = read_config(path)
        tokenizer = LLMTokenizer.load(path)
        if len(tokenizer) > config.lm.vocab_size:
            raise ModelError(f"{path}: the tokenizer has {len(tokenizer)} tokens, more than the model's "
                             f"{config.lm.vocab_size} text ids")
        model = KyutaiModel.load(path, config)
        if dtype == torch.int8:
            model.lm.quantize_int8()
        elif dtype in (torch.bfloat16, torch.float16):
            model.lm.cast(dtype)
        model.to(device)
        return cls(model, tokenizer, name, str(device))

    # -- frames and text
    def token_frame(self, position: int) -> int:
        """The frame of the padded input a token chosen at `position` belongs to."""
        return max(0, position - 1 - self.delay_frames)

    def frame_seconds(self, frame: float) -> float:
        """Frame `frame` of the padded input -> seconds into the input."""
        return max(0.0, frame * self.frame_s - self.config.prefix_s)

    def piece(self, i: int) -> str:
        return self.tokenizer.token(i)

    def decode_ids(self, ids) -> str:
        return self.tokenizer.decode([i for i in ids if i not in self.not_text])

    def pad(self, pcm: np.ndarray) -> np.ndarray:
        cfg = self.config
        return np.concatenate([np.zeros(cfg.prefix_samples(), np.float32), np.asarray(pcm, np.float32),
                               np.zeros(cfg.suffix_samples(), np.float32)])

    # -- offline
    def _transcribe(self, items: list, opts: KyutaiOptions) -> list[Transcript]:
        out = []
        for group in self.groups(items, opts.sample_rate):
            for _, pcm in group:
                out.append(self.transcribe_pcm(pcm, opts))
        return out

    def decode_pcm(self, pcm: np.ndarray) -> Decoder:
        """One mono float32 input at 24 kHz -> its decoder after the greedy run (`steps`: every token chosen)."""
        return decode_padded(self.model, self.pad(pcm))

    def transcribe_pcm(self, pcm: np.ndarray, opts: KyutaiOptions) -> Transcript:
        from ..runtime import model_call

        with model_call(self.threads):
            if (opts.beam_size or 1) > 1:
                best = beam_padded(self.model, self.pad(pcm), opts.beam_size)[0]
                steps = [Step(i, k, float("nan")) for k, i in enumerate(best.ids)]
            else:
                steps = self.decode_pcm(pcm).steps
        return self.to_transcript(steps, len(pcm) / SAMPLE_RATE, opts)

    def to_transcript(self, steps, duration: float, opts: KyutaiOptions) -> Transcript:
        tok = self.tokenizer
        tokens, spans = [], []
        for s in steps:
            if s.id in self.not_text:
                continue
            frame = self.token_frame(s.position)
            start = min(self.frame_seconds(frame), duration)
            end = min(self.frame_seconds(frame + 1), duration)
            logprob = None if s.logprob != s.logprob else s.logprob  # NaN: a beam's token
            conf = None if logprob is None else float(np.exp(logprob))
            tokens.append(Token(id=s.id, text=tok.decode([s.id]), start=start, end=end, confidence=conf,
                                frame=frame, logprob=logprob, piece=self.piece(s.id)))
            spans.append(TokenSpan(s.id, self.piece(s.id), tok.decode([s.id]), frame, frame + 1, conf))
        text = self.decode_ids([t.id for t in tokens]).strip()
        words = []
        if opts.word_timestamps and spans:
            for w in group_words(spans, self.decode_ids, self.punctuation):
                word = w.word.strip()
                if word:
                    words.append(Word(word, min(self.frame_seconds(w.start), duration),
                                      min(self.frame_seconds(w.end), duration), w.confidence))
        segments = [Segment(text, 0.0, duration, words=list(words))] if opts.timestamps and text else []
        return Transcript(text=text, duration=duration, segments=segments, words=words, tokens=tokens,
                          model=self.name)

    # -- live
    def _stream(self, opts: KyutaiStreamOptions):
        from .streaming import KyutaiSession

        return KyutaiSession(self)

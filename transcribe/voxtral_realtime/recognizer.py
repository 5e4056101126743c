"""The Voxtral Realtime recognizer behind `load_model`: audio in, `Transcript` out, offline and live.

Offline (`transcribe`), each input is padded as mistral-common's offline streaming request pads it (left-pad tokens
of silence before, whole tokens plus delay + 1 + 10 tokens after), its features computed whole, and decoded
greedily as transformers' generate decodes it (`decode.decode_offline`: one token per 80 ms, as many as the padded
input has audio embeddings). Live (`stream`), the session runs transformers' streaming path
(`streaming.VoxtralRealtimeSession`). The text is the tokens decoded with the special tokens dropped
(mistral-common's decode), without its leading space.

Times: the model writes the text `delay` tokens after the audio it belongs to, so a token chosen at position j
(prompt included) is placed at (j - left pad - delay) x 80 ms of the input (`token_frame`), its word at its first
token's. Beam search is not offered: the reference has none (transformers 5.25.0's `generate(num_beams=2)` on
this model raises an IndexError), the model's output is a stream in lockstep with the audio (one token per 80 ms,
mostly `[STREAMING_PAD]`) that its authors decode greedily (the streaming generate, vLLM, the model card:
temperature 0), and a beam over it would re-rank where pads and words fall rather than texts."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import ModelError
from ..llm.model import int8_compute
from ..llm.tekken import TekkenTokenizer
from ..recognizer import Recognizer
from ..results import Segment, Token, Transcript, Word
from ..text.words import TokenSpan, group_words
from . import KIND
from .config import VoxtralRealtimeConfig, read_config
from .decode import Run, decode_offline
from .frontend import LogMel, whole
from .model import VoxtralRealtimeModel
from .options import VoxtralRealtimeOptions, VoxtralRealtimeStreamOptions

FRAME_S = 0.08  # one text token's audio
PUNCTUATION = {".", ",", "?", "!", ";", ":", "。", "，", "？", "！"}
WORD_MARK = "\u2581"


class VoxtralRealtimeASR(Recognizer):
    family = "voxtral_realtime"
    kind = KIND
    Options = VoxtralRealtimeOptions
    StreamOptions = VoxtralRealtimeStreamOptions
    frame_s = FRAME_S

    def __init__(self, model: VoxtralRealtimeModel, tokenizer: TekkenTokenizer, name: str, device: str = "cpu"):
        self.model = model
        self.config: VoxtralRealtimeConfig = model.config
        self.tokenizer = tokenizer
        self.frontend = LogMel(self.config.features)
        self.name = name
        self.device = torch.device(device)
        self.sample_rate = self.config.features.sample_rate
        self.threads: Optional[int] = None
        self.bos_id = tokenizer.token_id("<s>")
        self.pad_id = tokenizer.token_id("[STREAMING_PAD]")
        self.punctuation = PUNCTUATION

    @classmethod
    def load(cls, path: Path, name: str, device, dtype: Optional[torch.dtype] = None) -> "VoxtralRealtimeASR":
        """A transformers-layout directory -> a recognizer on `device`; `dtype` (bfloat16, float16) applies to the
        encoder, the projector and the LM; the front end stays float32. int8: the LM's linear layers as
        `DecoderLM.quantize_int8` makes them for this device (`llm.model.int8_compute`), the encoder's and the
        projector's int8 products with float32 around them."""
        path = Path(path)
        config = read_config(path)
        tokenizer = TekkenTokenizer.load(path / "tekken.json")
        if len(tokenizer) > config.lm.vocab_size:
            raise ModelError(f"{path}: the tokenizer has {len(tokenizer)} tokens, more than the language model's "
                             f"{config.lm.vocab_size} embedding rows")
        for special in ("<s>", "[STREAMING_PAD]"):
            if not tokenizer.has(special):
                raise ModelError(f"{path}/tekken.json: no {special} token: not a Voxtral Realtime tokenizer")
        int8 = dtype == torch.int8
        dtype = torch.float32 if dtype is None or int8 else dtype
        model = VoxtralRealtimeModel.load(path, config, dtype, int8_compute(device) if int8 else None)
        model.eval().to(device)
        return cls(model, tokenizer, name, str(device))

    # -- the streaming layout
    def delay(self, delay_ms: Optional[float]) -> tuple[float, int]:
        """(delay in ms, delay tokens) of a call's delay_ms (None: tekken.json's)."""
        layout = self.config.layout
        ms = layout.delay_ms if delay_ms is None else float(delay_ms)
        return ms, layout.delay_tokens(ms)

    def prompt(self, delay_tokens: int) -> list[int]:
        """BOS and [STREAMING_PAD] x (left pad + delay): mistral-common's streaming transcription tokens."""
        return [self.bos_id] + [self.pad_id] * (self.config.layout.left_pad_tokens + delay_tokens)

    def new_run(self, delay_tokens: int) -> Run:
        return Run(self.model, self.prompt(delay_tokens), delay_tokens, self.config.eos_ids)

    def token_frame(self, position: int, delay_tokens: int) -> int:
        """The 80 ms step of the input a token chosen at sequence position `position` belongs to."""
        return max(0, position - self.config.layout.left_pad_tokens - delay_tokens)

    def piece(self, i: int) -> str:
        """A token's text with a leading space shown as the word mark (what word grouping reads)."""
        text = self.tokenizer.token(i)
        return WORD_MARK + text[1:] if text.startswith(" ") else text

    def decode_ids(self, ids) -> str:
        return self.tokenizer.decode(ids)

    # -- offline
    def _transcribe(self, items: list, opts: VoxtralRealtimeOptions) -> list[Transcript]:
        out = []
        for group in self.groups(items, opts.sample_rate):
            for _, pcm in group:
                out.append(self.transcribe_pcm(pcm, opts))
        return out

    @torch.inference_mode()
    def decode_pcm(self, pcm: np.ndarray, delay_ms: Optional[float] = None) -> Run:
        """One mono float32 input at the model's rate -> its decoded run (greedy, transformers' offline generate)."""
        ms, tokens = self.delay(delay_ms)
        mel = whole(self.frontend, self.config.layout, pcm, ms)
        return decode_offline(self.new_run(tokens), mel.to(self.device))

    def transcribe_pcm(self, pcm: np.ndarray, opts: VoxtralRealtimeOptions) -> Transcript:
        run = self.decode_pcm(pcm, opts.delay_ms)
        duration = len(pcm) / self.sample_rate
        return self.to_transcript(run, duration, opts)

    def to_transcript(self, run: Run, duration: float, opts: VoxtralRealtimeOptions) -> Transcript:
        tok = self.tokenizer
        special = tok.special
        tokens = []
        spans = []
        for s in run.steps:
            if s.id in special:
                continue
            frame = self.token_frame(s.position, run.delay_tokens)
            start = min(frame * FRAME_S, duration)
            end = min(start + FRAME_S, duration)
            tokens.append(Token(id=s.id, text=tok.decode([s.id]), start=start, end=end,
                                confidence=float(np.exp(s.logprob)), frame=frame, logprob=s.logprob,
                                piece=self.piece(s.id)))
            spans.append(TokenSpan(s.id, self.piece(s.id), tok.decode([s.id]), frame, frame + 1,
                                   float(np.exp(s.logprob))))
        text = tok.decode([t.id for t in tokens]).strip()
        words = []
        if opts.word_timestamps and spans:
            for w in group_words(spans, tok.decode, self.punctuation):
                word = w.word.strip()
                if word:
                    words.append(Word(word, min(w.start * FRAME_S, duration), min(w.end * FRAME_S, duration),
                                      w.confidence))
        segments = [Segment(text, 0.0, duration, words=list(words))] if opts.timestamps and text else []
        return Transcript(text=text, duration=duration, segments=segments, words=words, tokens=tokens,
                          model=self.name)

    # -- live
    def _stream(self, opts: VoxtralRealtimeStreamOptions):
        from .streaming import VoxtralRealtimeSession

        return VoxtralRealtimeSession(self, opts.delay_ms)

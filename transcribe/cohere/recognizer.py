"""The Cohere Transcribe recognizer behind `load_model`: audio in, `Transcript` out.

One call builds one prompt (language, punctuation), encodes the inputs in batches of similar length, and
runs greedy search (`search.aed.greedy`: the argmax of the raw logits, EOS kept as the end, finished rows
fed PAD, as transformers' greedy `generate()` runs it) for every input of a batch at once; a result does
not depend on its batch neighbours (each row's dither is seeded by its own length, and it attends to its
own encoder frames only). Inputs longer than `max_piece_s` are cut at pauses (`long_input`)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from .. import long_input
from ..errors import ModelError
from ..recognizer import Recognizer
from ..results import Segment, Token, Transcript
from ..search import aed
from . import KIND
from .model import CohereModel, pcm_batch
from .options import CohereOptions
from .prompt import NO_SPACE_LANGUAGES, Prompt, PromptBuilder
from .tokenizer import CohereTokenizer

log = logging.getLogger("transcribe")

# A batch holds at most this much padded audio (its longest input times its size).
MAX_BATCH_AUDIO_S = 8 * 60.0


class CohereASR(Recognizer):
    """A loaded Cohere Transcribe model: `transcribe(audio, **options)` takes paths, bytes or arrays at
    `sample_rate` (its options: `CohereOptions`)."""

    family = "cohere"
    kind = KIND
    Options = CohereOptions

    def __init__(self, model: CohereModel, tokenizer: CohereTokenizer, name: str, device: str = "cpu"):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)
        self.sample_rate = model.sample_rate
        self.threads: Optional[int] = None
        c = model.config
        if len(tokenizer) > model.vocab_size:
            raise ModelError(f"{name}: the tokenizer has {len(tokenizer)} pieces, more than the decoder's "
                             f"{model.vocab_size} outputs")
        self.prompts = PromptBuilder(tokenizer, name, c.decoder_start, c.bos)
        self.eos, self.pad = c.eos, c.pad

    @classmethod
    def load(cls, path: Path, name: str, device, dtype: Optional[torch.dtype] = None) -> "CohereASR":
        """A transformers-format directory -> a recognizer on `device`; `dtype` (bfloat16, float16) applies
        to the encoder and the decoder, the front end stays in float32."""
        from .checkpoint import read_checkpoint
        from .config import parse_config
        from .tokenizer import load_tokenizer

        path = Path(path)
        ckpt = read_checkpoint(path)
        try:
            config = parse_config(ckpt.config, ckpt.features, ckpt.generation)
            with torch.device("meta"):
                model = CohereModel(config)
        except (ValueError, KeyError, TypeError) as e:
            raise ModelError(f"{path}: model config not supported ({e})") from None
        try:
            model.load_checkpoint(ckpt.state_dict)
        except KeyError as e:
            raise ModelError(f"{path}: {e.args[0] if e.args else e}") from None
        try:
            tokenizer = load_tokenizer(path)
        except ValueError as e:
            raise ModelError(f"{path}: {e}") from None
        return cls.finish(model, tokenizer, name, device, dtype)

    @classmethod
    def finish(cls, model: CohereModel, tokenizer: CohereTokenizer, name: str, device,
               dtype: Optional[torch.dtype] = None) -> "CohereASR":
        model.encoder.fold_batch_norm()
        model.eval().to(device)
        if dtype == torch.int8:
            raise ModelError(f"{name}: int8 is not implemented for Cohere Transcribe models (float32, bfloat16, "
                             "float16)")
        if dtype is not None and dtype != torch.float32:
            for part in (model.encoder, model.encoder_decoder_proj, model.transf_decoder, model.log_softmax):
                part.to(dtype)
        return cls(model, tokenizer, name, str(device))

    @property
    def default_batch_size(self) -> int:
        return 16 if self.device.type == "cuda" else 4

    @property
    def languages(self) -> list[str]:
        return list(self.prompts.languages)

    # -- options
    def check_for_model(self, opts: CohereOptions) -> None:
        self.prompts.build(opts.language, opts.pnc)

    def max_new(self, prompt: Prompt, opts: CohereOptions) -> int:
        """Tokens greedy may generate: max_new_tokens, within what the position table leaves."""
        room = max(self.model.max_positions - len(prompt.ids), 0)
        return room if opts.max_new_tokens is None else min(opts.max_new_tokens, room)

    # -- transcription
    def _transcribe(self, items: list, opts: CohereOptions) -> list[Transcript]:
        prompt = self.prompts.build(opts.language, opts.pnc)
        batch_size = self.default_batch_size if opts.batch_size is None else opts.batch_size
        rate = self.sample_rate
        out: list[Optional[Transcript]] = [None] * len(items)
        sep = "" if prompt.language in NO_SPACE_LANGUAGES else " "  # transformers joins ja/zh chunks without one

        def run(pcms: list[np.ndarray]) -> list[Transcript]:
            hyps = self.decode(pcms, prompt, opts)
            return [self._to_transcript(h, len(p) / rate, prompt, opts) for h, p in zip(hyps, pcms)]

        for group in self.groups(items, opts.sample_rate):
            done = long_input.in_pieces(group, run, rate=rate, max_piece_s=opts.max_piece_s, detector=opts.detector,
                                        grain=self.model.frame_stride, batch_size=batch_size,
                                        max_batch_s=MAX_BATCH_AUDIO_S, separator=lambda parts: sep)
            for i, t in done.items():
                out[i] = t
        return out  # type: ignore[return-value]

    @torch.inference_mode()
    def decode(self, pcm: Sequence[np.ndarray], prompt: Prompt, opts: CohereOptions) -> list[aed.AEDHypothesis]:
        """Mono float32 inputs at the model's rate -> each input's greedy hypothesis (EOS removed)."""
        m = self.model
        # An input shorter than one hop (10 ms) has no feature frame, so nothing to attend to (transformers
        # would divide by its zero frames): its transcript is empty.
        out = [aed.AEDHypothesis([], 0.0, []) for _ in pcm]
        rows = [i for i, p in enumerate(pcm) if len(p) >= m.preprocessor.hop_length]
        if not rows:
            return out
        audio, lengths = pcm_batch([pcm[i] for i in rows])
        states, enc_len = m.encode(audio.to(self.device), lengths.to(self.device))
        ids = torch.tensor([prompt.ids] * len(rows), dtype=torch.long, device=self.device)
        state = m.start(states, enc_len)
        for i, h in zip(rows, aed.greedy(lambda x: m.step(x, state), ids, self.max_new(prompt, opts), self.eos,
                                         self.pad)):
            out[i] = h
        return out

    def _to_transcript(self, hyp: aed.AEDHypothesis, duration: float, prompt: Prompt,
                       opts: CohereOptions) -> Transcript:
        tok = self.tokenizer
        text = tok.text(hyp.ids)
        segments = [Segment(text.strip(), 0.0, duration)] if opts.timestamps and text.strip() else []
        tokens = [Token(id=int(i), text=tok.token_text(int(i)), start=0.0, end=duration,
                        logprob=hyp.logprobs[k] if k < len(hyp.logprobs) else None, piece=tok.piece(int(i)))
                  for k, i in enumerate(hyp.ids)]
        return Transcript(text=text, duration=duration, segments=segments, words=[], tokens=tokens,
                          model=self.name, language=prompt.language)

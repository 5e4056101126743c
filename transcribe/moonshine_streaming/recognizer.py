"""The Moonshine Streaming recognizer behind `load_model`: audio in, `Transcript` out, and live sessions.

Offline, an input is zero-padded to whole 5 ms frames (transformers' processor pads to a multiple of 80 samples,
and a zero frame's features are zero, as its mask makes them), encoded whole, and decoded from the decoder start
token by greedy search (`search.aed.greedy`: the argmax of the logits until EOS, as transformers' greedy
`generate()`) or transformers' beam search (`search.hf_beam`). Inputs longer than `max_piece_s` (and than the
adapter's position table) are cut at pauses (`long_input`). `stream()` runs the encoder on audio as it comes
(`streaming.MoonshineStreamingSession`)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .. import long_input
from ..errors import ModelError
from ..recognizer import Recognizer
from ..results import Segment, Token, Transcript
from ..search import aed, hf_beam
from . import KIND
from .config import MoonshineStreamingConfig
from .model import DecoderState, MoonshineStreamingModel
from .options import TOKENS_PER_S, MoonshineStreamingOptions, MoonshineStreamingStreamOptions
from .tokenizer import WORD_START, MoonshineStreamingTokenizer

# transformers' generation defaults the published generation_config.json keeps (beam search).
LENGTH_PENALTY = 1.0


class MoonshineStreamingASR(Recognizer):
    """A loaded Moonshine Streaming model: `transcribe(audio, **options)` (MoonshineStreamingOptions) and
    `stream(**options)` (MoonshineStreamingStreamOptions)."""

    family = "moonshine_streaming"
    kind = KIND
    Options = MoonshineStreamingOptions
    StreamOptions = MoonshineStreamingStreamOptions
    frame_s = 0.02

    def __init__(self, model: MoonshineStreamingModel, tokenizer: MoonshineStreamingTokenizer, name: str,
                 device: str = "cpu"):
        self.model = model
        self.config: MoonshineStreamingConfig = model.config
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)
        self.sample_rate = self.config.sample_rate
        self.threads: Optional[int] = None
        self.frame_s = model.frame_samples / self.sample_rate
        if len(tokenizer) > self.config.decoder.vocab_size:
            raise ModelError(f"{name}: the tokenizer has {len(tokenizer)} pieces, more than the decoder's "
                             f"{self.config.decoder.vocab_size} outputs")
        self.punctuation = {".", ",", "?", "!", ";", ":"}

    @classmethod
    def load(cls, path: Path, name: str, device, dtype: Optional[torch.dtype] = None) -> "MoonshineStreamingASR":
        from ..safetensors_files import read_tensors, weight_files
        from .config import parse_config, read_features, read_json
        from .tokenizer import load_tokenizer

        path = Path(path)
        try:
            cfg = read_json(path / "config.json")
            if cfg is None:
                raise ValueError("no config.json")
            config = parse_config(cfg, read_features(path), read_json(path / "generation_config.json"))
            tokenizer = load_tokenizer(path)
        except ValueError as e:
            raise ModelError(f"{path}: model config not supported ({e})") from None
        with torch.device("meta"):
            model = MoonshineStreamingModel(config)
        try:
            model.load_checkpoint(read_tensors(weight_files(path)))
        except KeyError as e:
            raise ModelError(f"{path}: {e.args[0] if e.args else e}") from None
        return cls(finish(model, name, device, dtype), tokenizer, name, str(device))

    # -- pieces of the contract
    def piece(self, i: int) -> str:
        return self.tokenizer.piece(int(i))

    def decode_ids(self, ids) -> str:
        return self.tokenizer.text(ids)

    def max_new(self, n_samples: int, opts_max: Optional[int]) -> int:
        """Tokens a decoding may generate: max_new_tokens, else the model card's 6.5 a second of audio."""
        if opts_max is not None:
            return opts_max
        return max(1, math.ceil(TOKENS_PER_S * n_samples / self.sample_rate))

    @property
    def max_frames(self) -> int:
        """Encoder frames one decoding holds (the adapter's position table)."""
        return self.config.decoder.max_positions

    # -- running the network
    def _dtype(self) -> torch.dtype:
        return self.model.decoder.embed_tokens.weight.dtype

    @torch.inference_mode()
    def encode(self, pcm: np.ndarray) -> torch.Tensor:
        """Mono float32 at the model's rate -> encoder states [1, T, hidden] (zero-padded to whole 5 ms frames)."""
        fl = self.config.encoder.frame_len
        n = -(-len(pcm) // fl) * fl
        x = torch.zeros(1, n, dtype=torch.float32)
        x[0, :len(pcm)] = torch.from_numpy(np.ascontiguousarray(pcm, dtype=np.float32))
        return self.model.encoder(x.to(self.device, self._dtype()))

    @torch.inference_mode()
    def start(self, enc: torch.Tensor) -> DecoderState:
        """A decoder state over encoder states [1, T, hidden] of the frames 0..T-1."""
        if enc.shape[1] > self.max_frames:
            raise ModelError(f"{self.name}: {enc.shape[1]} encoder frames exceed the adapter's position table "
                             f"({self.max_frames})")
        d = self.model.decoder
        return DecoderState(d.cross_kv(d.adapt(enc)))

    def _prompt(self) -> torch.Tensor:
        return torch.tensor([[self.config.decoder_start]], dtype=torch.long, device=self.device)

    @torch.inference_mode()
    def greedy(self, state: DecoderState, max_new: int, draft=None) -> aed.AEDHypothesis:
        """Greedy ids over a fresh state; `draft`: ids it likely starts with (a live session's previous partial),
        verified in one call (`aed.greedy_from_draft`)."""
        m = self.model

        def step(ids, every=False):
            return m.logits(ids, state, every)

        if draft:
            return aed.greedy_from_draft(step, state.cut, self._prompt(), list(draft), max_new, self.config.eos,
                                         self.config.pad)
        return aed.greedy(step, self._prompt(), max_new, self.config.eos, self.config.pad)[0]

    @torch.inference_mode()
    def beam(self, state: DecoderState, beams: int, max_new: int) -> list[aed.AEDHypothesis]:
        m = self.model

        def select(rows: torch.Tensor) -> None:
            state.cross = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in state.cross]
            state.self_kv = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in state.self_kv]

        return hf_beam.beam(lambda ids: m.logits(ids, state), select, self._prompt(), beams, max_new,
                            self.config.eos, length_penalty=LENGTH_PENALTY, early_stopping=False)[0]

    def decode_pcm(self, pcm: np.ndarray, opts: MoonshineStreamingOptions) -> aed.AEDHypothesis:
        """One input (no longer than the position table) -> its best hypothesis."""
        if len(pcm) == 0:
            return aed.AEDHypothesis([], 0.0, [])
        state = self.start(self.encode(pcm))
        max_new = self.max_new(len(pcm), opts.max_new_tokens)
        if opts.beam_size is not None and opts.beam_size > 1:
            return self.beam(state, opts.beam_size, max_new)[0]
        return self.greedy(state, max_new)

    # -- transcription
    def piece_seconds(self, opts: MoonshineStreamingOptions) -> float:
        """The longest piece: max_piece_s, within the position table (less one frame for the padding)."""
        return min(opts.max_piece_s, (self.max_frames - 1) * self.frame_s)

    def _transcribe(self, items: list, opts: MoonshineStreamingOptions) -> list[Transcript]:
        rate = self.sample_rate
        out: list[Optional[Transcript]] = [None] * len(items)

        def run(pcms: list[np.ndarray]) -> list[Transcript]:
            return [self.to_transcript(self.decode_pcm(p, opts), len(p) / rate, opts) for p in pcms]

        for group in self.groups(items, opts.sample_rate):
            done = long_input.in_pieces(group, run, rate=rate, max_piece_s=self.piece_seconds(opts),
                                        detector=opts.detector, grain=self.model.frame_samples, batch_size=1,
                                        max_batch_s=None)
            for i, t in done.items():
                out[i] = t
        return out  # type: ignore[return-value]

    def to_transcript(self, hyp: aed.AEDHypothesis, duration: float, opts: MoonshineStreamingOptions) -> Transcript:
        tok = self.tokenizer
        text = tok.text(hyp.ids)
        segments = [Segment(text.strip(), 0.0, duration)] if opts.timestamps and text.strip() else []
        tokens = [Token(id=int(i), text=tok.token_text(int(i)), start=0.0, end=duration,
                        logprob=hyp.logprobs[k] if k < len(hyp.logprobs) else None, piece=tok.piece(int(i)))
                  for k, i in enumerate(hyp.ids)]
        return Transcript(text=text, duration=duration, segments=segments, words=[], tokens=tokens, model=self.name)

    # -- live
    def _stream(self, opts: MoonshineStreamingStreamOptions):
        from .streaming import MoonshineStreamingSession

        return MoonshineStreamingSession(self, opts.decode_every_ms, opts.segment_s)


__all__ = ["MoonshineStreamingASR", "WORD_START"]


def finish(model: MoonshineStreamingModel, name: str, device, dtype: Optional[torch.dtype]) -> MoonshineStreamingModel:
    """A loaded model on `device` in `dtype` (every loader ends here): bfloat16 / float16 every layer; int8 (CPU
    only) the encoder's and decoder's layers' linear layers and the head as `quant.Int8Linear` (int8 weights per
    output row, activations quantized per row at run time), the stem, adapter, norms and embeddings float32."""
    model.eval().requires_grad_(False).to(device)
    if dtype == torch.int8:
        if torch.device(device).type != "cpu":
            raise ModelError(f"{name}: int8 runs on the CPU only (float32, bfloat16 or float16 on {device})")
        from ..quant import Int8Linear, quantize_linears

        for part in (model.encoder.layers, model.decoder.layers):
            quantize_linears(part)
        model.proj_out = Int8Linear.from_linear(model.proj_out)
    elif dtype is not None and dtype != torch.float32:
        model.to(dtype)
    return model

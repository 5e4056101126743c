"""The Canary-Qwen recognizer behind `load_model`: audio in, `Transcript` out.

A batch of inputs goes through the perception module (NeMo's mel front end, the FastConformer encoder, the
projection; each row masked to its own length) and the LM: the prompt (`prompt.PromptBuilder`, NeMo's `qwen` format
of "Transcribe the following: <|audioplaceholder|>") is embedded, its placeholder row replaced by the input's audio
rows, and `llm.generate` runs greedy or beam search over the left-padded batch as transformers' `generate` does for
`SALM.generate`, stopping at the tokenizer's eos (<|im_end|>). The text is the generated ids decoded with the special
tokens dropped (NeMo's `ids_to_text`).

Words are untimed: the model writes no times, so a transcript has one segment over its input and no words; its
tokens are the generated tokens, each spanning the input, with its log-probability under greedy search. Inputs
longer than `max_piece_s` are cut at pauses (`long_input`) and their pieces' texts joined. `stream()` is a live
session cut at pauses (`transcribe.utterances`), each utterance decoded whole."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from .. import long_input
from ..errors import ModelError, TranscribeError
from ..llm.generate import Generated, generate
from ..llm.model import int8_compute
from ..llm.tokenizer import LLMTokenizer
from ..recognizer import Recognizer
from ..results import Hypothesis, HypothesisToken, NBest, Segment, Token, Transcript
from . import KIND
from .config import named_token, read_config
from .model import CanaryQwenModel
from .options import DEFAULT_MAX_NEW_TOKENS, CanaryQwenOptions, CanaryQwenStreamOptions
from .prompt import PromptBuilder

log = logging.getLogger("transcribe")

# A batch holds at most this much padded audio (its longest input times its size).
MAX_BATCH_AUDIO_S = 8 * 60.0


class CanaryQwen(Recognizer):
    """A loaded Canary-Qwen model: `transcribe(audio, **options)` takes paths, bytes or arrays at `sample_rate` (its
    options: `CanaryQwenOptions`)."""

    family = "canary_qwen"
    kind = KIND
    Options = CanaryQwenOptions
    StreamOptions = CanaryQwenStreamOptions

    def __init__(self, model: CanaryQwenModel, tokenizer: LLMTokenizer, prompts: PromptBuilder, stop_ids: list[int],
                 name: str, device: str = "cpu"):
        self.model = model
        self.tokenizer = tokenizer
        self.prompts = prompts
        self.stop_ids = stop_ids
        self.name = name
        self.device = torch.device(device)
        self.sample_rate = model.sample_rate
        self.threads: Optional[int] = None

    @classmethod
    def load(cls, path: Path, name: str, device, dtype: Optional[torch.dtype] = None) -> "CanaryQwen":
        """A SALM checkpoint directory (config.json + model.safetensors, its LM's config and tokenizer beside it or
        from its `pretrained_llm` repo) -> a recognizer on `device`; `dtype` (bfloat16, float16) applies to the
        encoder, the projection and the LM, the front end stays float32; int8: see `CanaryQwenModel.load`."""
        path = Path(path)
        config, tok_dir, tok_cfg = read_config(path)
        tokenizer = LLMTokenizer.load(tok_dir)
        where = str(path)
        prompts = PromptBuilder(tokenizer, config.audio_locator_tag, where)
        if len(tokenizer) > config.lm.vocab_size:
            raise ModelError(f"{path}: the tokenizer has {len(tokenizer)} tokens (with {config.audio_locator_tag}), "
                             f"more than the language model's {config.lm.vocab_size} embedding rows")
        eos = named_token(tok_cfg, "eos_token")
        if eos is None:
            raise ModelError(f"{tok_dir}/tokenizer_config.json: no eos_token (generation stops at it)")
        stop_ids = [tokenizer.token_id(eos)]
        int8 = dtype == torch.int8
        dtype = torch.float32 if dtype is None or int8 else dtype
        model = CanaryQwenModel.load(path, config, dtype, int8_compute(device) if int8 else None)
        model.eval().to(device)
        return cls(model, tokenizer, prompts, stop_ids, name, str(device))

    @property
    def default_batch_size(self) -> int:
        return 16 if self.device.type == "cuda" else 4

    @property
    def languages(self) -> list[str]:
        return ["en"]

    def _search(self, opts: CanaryQwenOptions) -> tuple[int, float, int]:
        beams = opts.beam_size or 1
        penalty = 1.0 if opts.length_penalty is None else opts.length_penalty
        max_new = DEFAULT_MAX_NEW_TOKENS if opts.max_new_tokens is None else opts.max_new_tokens
        return beams, penalty, max_new

    def _stream(self, opts: CanaryQwenStreamOptions):
        """A live session cut at pauses (`transcribe.utterances`): each utterance decoded once, whole."""
        import dataclasses

        from ..runtime import model_call
        from ..utterances import UtteranceSession

        piece_opts = CanaryQwenOptions(**{f.name: getattr(opts, f.name) for f in dataclasses.fields(CanaryQwenOptions)})
        tok = self.tokenizer

        def decode_piece(pcm: np.ndarray) -> list[int]:
            with model_call(self.threads):
                return self.decode([pcm], piece_opts)[0][0].ids

        return UtteranceSession(decode_piece, decode=lambda ids: tok.decode(ids).strip(), piece=tok.token,
                                punctuation={".", ",", "?", "!", ";", ":"},
                                pause_s=0.5 if opts.pause_s is None else opts.pause_s, max_piece_s=opts.max_piece_s,
                                partial_s=opts.partial_s, space=lambda: tok.encode(" "))

    # -- transcription
    def _transcribe(self, items: list, opts: CanaryQwenOptions) -> list[Transcript]:
        batch_size = self.default_batch_size if opts.batch_size is None else opts.batch_size
        rate = self.sample_rate
        out: list[Optional[Transcript]] = [None] * len(items)

        def run(pcms: list[np.ndarray]) -> list[Transcript]:
            return [self._to_transcript(h, len(p) / rate, opts) for h, p in zip(self.decode(pcms, opts), pcms)]

        grain = self.model.perception.preprocessor.hop_length
        for group in self.groups(items, opts.sample_rate):
            done = long_input.in_pieces(group, run, rate=rate, max_piece_s=opts.max_piece_s, detector=opts.detector,
                                        grain=grain, batch_size=batch_size, max_batch_s=MAX_BATCH_AUDIO_S)
            for i, t in done.items():
                out[i] = t
        return out  # type: ignore[return-value]

    @torch.inference_mode()
    def encode(self, pcm: Sequence[np.ndarray]) -> list[torch.Tensor]:
        """Mono float32 inputs at the model's rate -> each input's audio rows for the LM ([rows, hidden])."""
        audio = torch.nn.utils.rnn.pad_sequence([torch.as_tensor(p, dtype=torch.float32) for p in pcm],
                                                batch_first=True).to(self.device)
        lengths = torch.tensor([len(p) for p in pcm], dtype=torch.long, device=self.device)
        return self.model.audio_embeddings(audio, lengths)

    @torch.inference_mode()
    def decode(self, pcm: Sequence[np.ndarray], opts: CanaryQwenOptions) -> list[list[Generated]]:
        """Mono float32 inputs at the model's rate -> each input's hypotheses, best first (greedy: one)."""
        m = self.model
        lm = m.language_model
        out: list[list[Generated]] = [[Generated([], 0.0, False)] for _ in pcm]
        # an input too short for one encoder frame has no audio: its transcript is empty
        n_fft = m.perception.preprocessor.n_fft
        rows = [i for i, p in enumerate(pcm) if len(p) > n_fft // 2]
        if not rows:
            return out
        audio = self.encode([pcm[i] for i in rows])
        keep = [k for k, a in enumerate(audio) if a.shape[0] > 0]
        rows, audio = [rows[k] for k in keep], [audio[k] for k in keep]
        if not rows:
            return out
        beams, penalty, max_new = self._search(opts)
        p = self.prompts.build()
        text = lm.embed(torch.tensor(p.ids, dtype=torch.long, device=self.device))
        prompts = [torch.cat([text[:p.audio_at], a, text[p.audio_at + 1:]]) for a in audio]
        limit = lm.cfg.max_position_embeddings
        room = limit - max(x.shape[0] for x in prompts) if limit else max_new
        if room < 1:
            raise TranscribeError(f"{self.name}: an input of {max(len(pcm[i]) for i in rows) / self.sample_rate:.0f} s "
                                  f"fills the language model's {limit} positions: give a smaller max_piece_s")
        max_new = min(max_new, room)
        found = generate(lm, prompts, max_new_tokens=max_new, stop_ids=self.stop_ids, num_beams=beams,
                         length_penalty=penalty, early_stopping=False)
        for i, hyps in zip(rows, found):
            out[i] = hyps
            if hyps and not hyps[0].stopped:
                log.warning("%s: an input of %.1f s reached max_new_tokens (%d) before its end: its text may be cut "
                            "(give a larger max_new_tokens or a smaller max_piece_s)", self.name,
                            len(pcm[i]) / self.sample_rate, max_new)
        return out

    def _to_transcript(self, hyps: list[Generated], duration: float, opts: CanaryQwenOptions) -> Transcript:
        tok = self.tokenizer
        best = hyps[0]
        text = tok.decode(best.ids).strip()
        segments = [Segment(text, 0.0, duration)] if opts.timestamps and text else []
        logprobs = best.logprobs if len(best.logprobs) == len(best.ids) else [None] * len(best.ids)
        tokens = [Token(id=int(i), text=tok.decode([i], skip_special=False), start=0.0, end=duration, logprob=lp,
                        piece=tok.token(i)) for i, lp in zip(best.ids, logprobs)]
        t = Transcript(text=text, duration=duration, segments=segments, words=[], tokens=tokens, model=self.name,
                       language="en")
        beams = self._search(opts)[0]
        if beams > 1 and opts.nbest is not None:
            out = []
            for h in hyps[:opts.nbest]:
                marks = [HypothesisToken(int(i), 0, None, 0.0, duration) for i in h.ids]
                out.append(Hypothesis(tok.decode(h.ids).strip(), h.score, h.score / (len(h.ids) + 1), marks))
            # scores: transformers' sequences_scores (log-probability sums over length ** length_penalty)
            t.nbest = NBest(beams, False, out, beam="transformers")
        return t

"""The Granite Speech recognizer behind `load_model`: audio in, `Transcript` out.

One call builds one prompt (the task's request in the model's chat format), computes each input's features
alone (`frontend`), runs the encoder and the projector over a batch of similar lengths (padding masked, so an
input's embeddings are its own), writes each input's audio embeddings over its prompt's audio tokens and
generates from all of them at once (`llm.generate`: transformers' greedy or beam search; a request's tokens do
not depend on its neighbours). Inputs longer than `max_piece_s` are cut at pauses (`long_input`).

Words are not timed: the model emits no times and no alignment is implemented (word_timestamps=True is an
error); each transcript has one segment over its input.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from .. import long_input
from ..errors import ModelError
from ..llm.generate import Generated, generate
from ..llm.model import int8_compute
from ..llm.tokenizer import LLMTokenizer
from ..recognizer import Recognizer
from ..results import Hypothesis, HypothesisToken, NBest, Segment, Token, Transcript
from . import KIND
from .checkpoint import lm_tensors, merge_lora, read_weights
from .config import parse_config, read_json
from .frontend import HOP, FrontEnd, audio_tokens, frames
from .model import GraniteSpeechModel
from .options import GraniteSpeechOptions, GraniteSpeechStreamOptions
from .prompt import Prompt, PromptBuilder

log = logging.getLogger("transcribe")

# A batch holds at most this much padded audio (its longest input times its size).
MAX_BATCH_AUDIO_S = 8 * 60.0
# Without max_new_tokens: at most this many tokens per second of the longest piece (max_piece_s), plus a floor
# (speech is 2-4 tokens a second; a looping output stops here instead of filling the LM's table). It does not
# depend on the input, so a request's tokens do not depend on its batch.
TOKENS_PER_S, TOKENS_FLOOR = 16, 64


class GraniteSpeechASR(Recognizer):
    """A loaded Granite Speech model: `transcribe(audio, **options)` takes paths, bytes or arrays at
    `sample_rate` (its options: `GraniteSpeechOptions`)."""

    family = "granite_speech"
    kind = KIND
    Options = GraniteSpeechOptions
    StreamOptions = GraniteSpeechStreamOptions

    def __init__(self, model: GraniteSpeechModel, tokenizer: LLMTokenizer, name: str, device: str,
                 stop_ids: list[int], defaults: dict):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)
        self.frontend = FrontEnd()
        self.sample_rate = self.frontend.sample_rate
        self.threads: Optional[int] = None
        self.prompts = PromptBuilder(tokenizer, name)
        self.stop_ids = stop_ids
        self.defaults = defaults  # generation_config.json's num_beams / length_penalty / early_stopping / max_new_tokens
        cfg = model.cfg
        self.audio_id = cfg.audio_token_id
        if len(tokenizer) > cfg.lm.vocab_size:
            raise ModelError(f"{name}: the tokenizer has {len(tokenizer)} tokens, more than the LM's "
                             f"{cfg.lm.vocab_size}")

    @classmethod
    def load(cls, path: Path, name: str, device, dtype: Optional[torch.dtype] = None) -> "GraniteSpeechASR":
        path = Path(path)
        cfg_path = path / "config.json"
        if not cfg_path.is_file():
            raise ModelError(f"{path}: no config.json")
        raw = read_json(cfg_path)
        try:
            cfg = parse_config(raw)
        except ModelError as e:
            raise ModelError(f"{path}: {e}") from None
        int8 = dtype == torch.int8
        dtype = torch.float32 if dtype is None or int8 else dtype
        state = read_weights(path)
        lm_state = lm_tensors(state)
        if cfg.has_lora_adapter:
            n = merge_lora(path, lm_state)
            log.debug("%s: LoRA adapter merged into %d matrices", name, n)
        rest = {k: v for k, v in state.items() if not k.startswith("lm.")}
        del state  # int8: each float weight is freed as it is quantized (from_state consumes the dicts)
        model = GraniteSpeechModel.from_state(cfg, rest, lm_state, str(path), dtype,
                                              int8_compute(device) if int8 else None)
        del rest, lm_state
        tokenizer = LLMTokenizer.load(path)
        stop_ids, defaults = _generation(path, raw, tokenizer)
        model.to(device)
        return cls(model, tokenizer, name, str(device), stop_ids, defaults)

    @property
    def default_batch_size(self) -> int:
        return 16 if self.device.type == "cuda" else 4

    # -- options
    def check_for_model(self, opts: GraniteSpeechOptions) -> None:
        self.prompts.build(opts.task, opts.target_language, opts.instruction)

    def _max_new(self, prompt_len: int, opts: GraniteSpeechOptions) -> int:
        room = self.model.cfg.lm.max_position_embeddings - prompt_len
        if self.model.cfg.lm.max_position_embeddings <= 0:
            room = 1 << 16
        if opts.max_new_tokens is not None:
            want = opts.max_new_tokens
        elif self.defaults.get("max_new_tokens") is not None:
            want = self.defaults["max_new_tokens"]
        else:
            want = TOKENS_FLOOR + int(TOKENS_PER_S * opts.max_piece_s)
        return max(0, min(want, room))

    def _stream(self, opts: GraniteSpeechStreamOptions):
        """A live session cut at pauses (`transcribe.utterances`): each utterance decoded once, whole, with the
        session's options; words placed at the cut that ended their utterance (the model gives no times)."""
        import dataclasses

        from ..runtime import model_call
        from ..utterances import UtteranceSession

        piece_opts = GraniteSpeechOptions(**{f.name: getattr(opts, f.name) for f in dataclasses.fields(GraniteSpeechOptions)})
        prompt = self.prompts.build(opts.task, opts.target_language, opts.instruction)
        tok = self.tokenizer

        def decode_piece(pcm: np.ndarray) -> list[int]:
            with model_call(self.threads):
                return self.decode([pcm], prompt, piece_opts)[0][0].ids

        return UtteranceSession(decode_piece, decode=lambda ids: tok.decode(ids), piece=tok.token,
                                punctuation={".", ",", "?", "!", ";", ":"},
                                pause_s=0.5 if opts.pause_s is None else opts.pause_s, max_piece_s=opts.max_piece_s,
                                partial_s=opts.partial_s, space=tok.encode(" "))

    # -- transcription
    def _transcribe(self, items: list, opts: GraniteSpeechOptions) -> list[Transcript]:
        prompt = self.prompts.build(opts.task, opts.target_language, opts.instruction)
        batch_size = self.default_batch_size if opts.batch_size is None else opts.batch_size
        rate = self.sample_rate
        out: list[Optional[Transcript]] = [None] * len(items)

        def run(pcms: list[np.ndarray]) -> list[Transcript]:
            found = self.decode(pcms, prompt, opts)
            return [self._to_transcript(h, len(p) / rate, opts) for h, p in zip(found, pcms)]

        for group in self.groups(items, opts.sample_rate):
            done = long_input.in_pieces(group, run, rate=rate, max_piece_s=opts.max_piece_s, detector=opts.detector,
                                        grain=2 * HOP, batch_size=batch_size, max_batch_s=MAX_BATCH_AUDIO_S)
            for i, t in done.items():
                out[i] = t
        return out  # type: ignore[return-value]

    def search(self, opts: GraniteSpeechOptions) -> dict:
        d = self.defaults
        beams = opts.beam_size if opts.beam_size is not None else d.get("num_beams", 1)
        lp = opts.length_penalty if opts.length_penalty is not None else d.get("length_penalty", 1.0)
        return {"num_beams": beams, "length_penalty": lp, "early_stopping": d.get("early_stopping", False)}

    @torch.inference_mode()
    def audio_embeddings(self, pcm: Sequence[np.ndarray]) -> list[torch.Tensor]:
        """Each input's audio embeddings [n_i, D] (the projector's outputs the prompt's audio tokens carry)."""
        m = self.model
        feats = [self.frontend(p) for p in pcm]
        lengths = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)
        longest = int(lengths.max())
        x = torch.zeros(len(feats), longest, feats[0].shape[-1])
        for i, f in enumerate(feats):
            x[i, : f.shape[0]] = f
        q = m.cfg.projector
        counts = [audio_tokens(len(p), q.window_size, q.num_queries) for p in pcm]
        return m.audio_embeddings(x.to(self.device), lengths.to(self.device), counts)

    @torch.inference_mode()
    def decode(self, pcm: Sequence[np.ndarray], prompt: Prompt, opts: GraniteSpeechOptions,
               on_token=None) -> list[list[Generated]]:
        """Mono float32 inputs at the model's rate -> each input's hypotheses, best first (greedy: one)."""
        out: list[list[Generated]] = [[Generated([], 0.0, False)] for _ in pcm]
        rows = [i for i, p in enumerate(pcm) if frames(len(p)) > 0]
        if not rows:
            return out
        lm = self.model.lm
        embeds = self.audio_embeddings([pcm[i] for i in rows])
        prompts = []
        for audio in embeds:
            ids = prompt.ids(self.audio_id, audio.shape[0])
            x = lm.embed(torch.tensor(ids, dtype=torch.long, device=self.device))
            a = len(prompt.before)
            x[a:a + audio.shape[0]] = audio.to(x.dtype)
            prompts.append(x)
        longest = max(p.shape[0] for p in prompts)
        max_new = self._max_new(longest, opts)
        s = self.search(opts)
        heard = None if on_token is None else (lambda r, t: on_token(rows[r], t))
        found = generate(lm, prompts, max_new_tokens=max_new, stop_ids=self.stop_ids, num_beams=s["num_beams"],
                         length_penalty=s["length_penalty"], early_stopping=s["early_stopping"], on_token=heard)
        for i, hyps in zip(rows, found):
            out[i] = hyps
        return out

    def _to_transcript(self, hyps: list[Generated], duration: float, opts: GraniteSpeechOptions) -> Transcript:
        tok = self.tokenizer
        best = hyps[0]
        text = tok.decode(best.ids).strip()
        segments = [Segment(text, 0.0, duration)] if opts.timestamps and text else []
        tokens = [Token(id=int(i), text=tok.decode([i], skip_special=False), start=0.0, end=duration,
                        logprob=best.logprobs[k] if k < len(best.logprobs) else None, piece=tok.token(i))
                  for k, i in enumerate(best.ids)]
        nbest = None
        if opts.nbest is not None:
            nbest = NBest(opts.beam_size or 1, False, [
                Hypothesis(tok.decode(h.ids).strip(), h.score, h.score,
                           [HypothesisToken(int(i), 0, None, 0.0, duration) for i in h.ids])
                for h in hyps[: opts.nbest]], beam="transformers")
        return Transcript(text=text, duration=duration, segments=segments, words=[], tokens=tokens,
                          model=self.name, nbest=nbest)


def _generation(path: Path, cfg: dict, tokenizer: LLMTokenizer) -> tuple[list[int], dict]:
    """The stop tokens and the search defaults transformers' generate would take: generation_config.json's when
    the checkpoint has one, else the text config's eos_token_id (the LM's end of text)."""
    gen_path = path / "generation_config.json"
    gen = read_json(gen_path) if gen_path.is_file() else {}
    text = cfg.get("text_config") or {}
    eos = gen.get("eos_token_id", text.get("eos_token_id", cfg.get("eos_token_id")))
    stops = [eos] if isinstance(eos, int) else list(eos or [])
    if not stops or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in stops):
        raise ModelError(f"{path}: no usable eos_token_id (generation_config.json or config.json's text_config): "
                         f"{eos!r}")
    defaults: dict = {}
    for key, kinds in (("num_beams", int), ("length_penalty", (int, float)), ("max_new_tokens", int)):
        if gen.get(key) is not None:
            if isinstance(gen[key], bool) or not isinstance(gen[key], kinds):
                raise ModelError(f"{gen_path}: {key} = {gen[key]!r} is not a number")
            defaults[key] = gen[key]
    if gen.get("early_stopping") is not None:
        if gen["early_stopping"] not in (True, False, "never"):
            raise ModelError(f"{gen_path}: early_stopping = {gen['early_stopping']!r} is not true, false or never")
        defaults["early_stopping"] = gen["early_stopping"]
    if gen.get("do_sample"):
        raise ModelError(f"{gen_path}: do_sample is set; sampling is not implemented (greedy and beam search)")
    for key, neutral in (("repetition_penalty", 1.0), ("no_repeat_ngram_size", 0), ("num_beam_groups", 1),
                         ("diversity_penalty", 0.0), ("min_new_tokens", None), ("min_length", 0),
                         ("suppress_tokens", None), ("begin_suppress_tokens", None), ("bad_words_ids", None),
                         ("forced_bos_token_id", None), ("forced_eos_token_id", None)):
        if gen.get(key, neutral) not in (neutral, None):
            raise ModelError(f"{gen_path}: {key} = {gen[key]!r} is not implemented")
    return stops, defaults

"""The Voxtral recognizer behind `load_model`: audio in, `Transcript` out.

Each input is padded to whole 30 s chunks and turned into log-mel chunks (`frontend.LogMel`); the Whisper encoder
runs every chunk of a batch together, the projector makes 375 LM rows of each chunk, and those rows are written
over the prompt's [AUDIO] rows (`prompt.PromptBuilder`: mistral-common's transcription request, or the chat turn
of a translation). `llm.generate` runs greedy or beam search over the left-padded batch as transformers'
`generate` does, stopping at the generation config's stop tokens. The output is the generated text as
mistral-common decodes it (special tokens dropped), stripped of surrounding spaces.

Words are untimed (the model writes no times): a transcript has one segment over its input; its tokens span the
input, with their log-probabilities under greedy search. Inputs longer than `max_piece_s` are cut at pauses
(`long_input`) and their pieces' texts joined; `stream()` is a live session cut at pauses
(`transcribe.utterances`), each utterance decoded whole."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
import torch

from .. import long_input
from ..errors import ModelError, TranscribeError
from ..llm.generate import Generated, generate
from ..llm.model import int8_compute
from ..llm.tekken import TekkenTokenizer
from ..recognizer import Recognizer
from ..results import Hypothesis, HypothesisToken, NBest, Segment, Token, Transcript
from . import KIND
from .frontend import LogMel
from .model import VoxtralModel
from .options import VoxtralOptions, VoxtralStreamOptions
from .prompt import LANGUAGES, PromptBuilder

log = logging.getLogger("transcribe")

# A batch holds at most this many 30 s chunks of audio.
MAX_BATCH_CHUNKS = 16


def read_tokenizer(path: Path) -> TekkenTokenizer:
    tek = path / "tekken.json"
    if not tek.is_file():
        raise ModelError(f"{path}: tekken.json is missing (Voxtral's tokenizer)")
    return TekkenTokenizer.load(tek)


class Voxtral(Recognizer):
    """A loaded Voxtral model: `transcribe(audio, **options)` (its options: `VoxtralOptions`)."""

    family = "voxtral"
    kind = KIND
    Options = VoxtralOptions
    StreamOptions = VoxtralStreamOptions

    def __init__(self, model: VoxtralModel, tokenizer: TekkenTokenizer, name: str, device: str = "cpu",
                 where: str = ""):
        self.model = model
        self.tokenizer = tokenizer
        self.prompts = PromptBuilder(tokenizer, model.config.audio_token_id, where or name)
        self.frontend = LogMel(model.config.features)
        self.name = name
        self.device = torch.device(device)
        self.sample_rate = model.config.features.sample_rate
        self.threads: Optional[int] = None

    @classmethod
    def load(cls, path: Path, name: str, device, dtype: Optional[torch.dtype] = None) -> "Voxtral":
        """A transformers-layout directory -> a recognizer on `device`; `dtype` (bfloat16, float16) applies to the
        encoder, the projector and the LM; the front end stays float32. int8: the LM's linear layers as
        `DecoderLM.quantize_int8` makes them for this device (`llm.model.int8_compute`), the encoder's and the
        projector's as `quant.quantize_linears`."""
        from .config import read_config

        path = Path(path)
        config = read_config(path)
        tokenizer = read_tokenizer(path)
        if len(tokenizer) > config.lm.vocab_size:
            raise ModelError(f"{path}: the tokenizer has {len(tokenizer)} tokens, more than the language model's "
                             f"{config.lm.vocab_size} embedding rows")
        int8 = dtype == torch.int8
        dtype = torch.float32 if dtype is None or int8 else dtype
        model = VoxtralModel.load(path, config, dtype, int8_compute(device) if int8 else None)
        model.eval().to(device)
        return cls(model, tokenizer, name, str(device), str(path))

    @property
    def default_batch_size(self) -> int:
        return 8 if self.device.type == "cuda" else 2

    @property
    def languages(self) -> list[str]:
        return list(LANGUAGES)

    def _search(self, opts: VoxtralOptions) -> tuple[int, float, Union[bool, str], int]:
        gen = self.model.config.generation
        beams = opts.beam_size if opts.beam_size is not None else gen.num_beams
        penalty = opts.length_penalty if opts.length_penalty is not None else gen.length_penalty
        max_new = opts.max_new_tokens if opts.max_new_tokens is not None else gen.max_new_tokens
        return beams, penalty, gen.early_stopping, max_new

    def _stream(self, opts: VoxtralStreamOptions):
        """A live session cut at pauses (`transcribe.utterances`): each utterance decoded once, whole."""
        import dataclasses

        from ..runtime import model_call
        from ..utterances import UtteranceSession

        piece_opts = VoxtralOptions(**{f.name: getattr(opts, f.name) for f in dataclasses.fields(VoxtralOptions)})
        tok = self.tokenizer
        space_ids = tok.encode(" ")

        def decode_piece(pcm: np.ndarray) -> list[int]:
            with model_call(self.threads):
                ids = self.decode([pcm], piece_opts)[0][0].ids
            # the utterance's text without the spaces around it (the session puts one between utterances)
            text = tok.decode(ids)
            return tok.encode(text.strip()) if text != text.strip() else ids

        return UtteranceSession(decode_piece, decode=lambda ids: tok.decode(ids), piece=tok.token,
                                punctuation={".", ",", "?", "!", ";", ":"},
                                pause_s=0.5 if opts.pause_s is None else opts.pause_s, max_piece_s=opts.max_piece_s,
                                partial_s=opts.partial_s, space=lambda: space_ids)

    def _transcribe(self, items: list, opts: VoxtralOptions) -> list[Transcript]:
        batch_size = self.default_batch_size if opts.batch_size is None else opts.batch_size
        rate = self.sample_rate
        out: list[Optional[Transcript]] = [None] * len(items)

        def run(pcms: list[np.ndarray]) -> list[Transcript]:
            return [self._to_transcript(h, len(p) / rate, opts) for h, p in zip(self.decode(pcms, opts), pcms)]

        max_batch_s = MAX_BATCH_CHUNKS * self.model.config.features.chunk_s
        for group in self.groups(items, opts.sample_rate):
            done = long_input.in_pieces(group, run, rate=rate, max_piece_s=opts.max_piece_s, detector=opts.detector,
                                        grain=self.model.config.features.hop, batch_size=batch_size,
                                        max_batch_s=max_batch_s)
            for i, t in done.items():
                out[i] = t
        return out  # type: ignore[return-value]

    @torch.inference_mode()
    def decode(self, pcm: Sequence[np.ndarray], opts: VoxtralOptions) -> list[list[Generated]]:
        """Mono float32 inputs at the model's rate -> each input's hypotheses, best first (greedy: one). An empty
        input has no audio chunk: its transcript is empty."""
        m = self.model
        lm = m.language_model
        out: list[list[Generated]] = [[Generated([], 0.0, False)] for _ in pcm]
        rows = [i for i, p in enumerate(pcm) if len(p) > 0]
        if not rows:
            return out
        mels = [self.frontend.chunks(pcm[i]) for i in rows]
        audio = m.audio_rows(torch.cat(mels).to(self.device))
        per_chunk = m.config.encoder.chunk_rows
        language, target = opts.language_code, opts.target_code
        beams, penalty, early, max_new = self._search(opts)
        prompts = []
        at = 0
        for mel in mels:
            n = mel.shape[0] * per_chunk
            p = self.prompts.build(n, language, target)
            x = lm.embed(torch.tensor(p.ids, dtype=torch.long, device=self.device))
            x[p.audio_start:p.audio_start + n] = audio[at:at + n]
            at += n
            prompts.append(x)
        limit = lm.cfg.max_position_embeddings
        if limit:
            room = limit - max(x.shape[0] for x in prompts)
            if room < 1:
                raise TranscribeError(f"{self.name}: an input of {max(len(pcm[i]) for i in rows) / self.sample_rate:.0f}"
                                      f" s fills the language model's {limit} positions: give a smaller max_piece_s")
            max_new = min(max_new, room)
        found = generate(lm, prompts, max_new_tokens=max_new, stop_ids=m.config.generation.stop_ids,
                         num_beams=beams, length_penalty=penalty, early_stopping=early)
        for i, hyps in zip(rows, found):
            out[i] = hyps
            if hyps and not hyps[0].stopped:
                log.warning("%s: an input of %.1f s reached max_new_tokens (%d) before its end: its text may be cut "
                            "(give a larger max_new_tokens or a smaller max_piece_s)", self.name,
                            len(pcm[i]) / self.sample_rate, max_new)
        return out

    def _to_transcript(self, hyps: list[Generated], duration: float, opts: VoxtralOptions) -> Transcript:
        tok = self.tokenizer
        best = hyps[0]
        text = tok.decode(best.ids).strip()
        segments = [Segment(text, 0.0, duration)] if opts.timestamps and text else []
        logprobs = best.logprobs if len(best.logprobs) == len(best.ids) else [None] * len(best.ids)
        tokens = [Token(id=int(i), text=tok.decode([i], skip_special=False), start=0.0, end=duration, logprob=lp,
                        piece=tok.token(i)) for i, lp in zip(best.ids, logprobs)]
        language = opts.target_code or opts.language_code
        t = Transcript(text=text, duration=duration, segments=segments, words=[], tokens=tokens, model=self.name,
                       language=language)
        beams = self._search(opts)[0]
        if beams > 1 and opts.nbest is not None:
            out = []
            for h in hyps[:opts.nbest]:
                marks = [HypothesisToken(int(i), 0, None, 0.0, duration) for i in h.ids]
                out.append(Hypothesis(tok.decode(h.ids).strip(), h.score, h.score / (len(h.ids) + 1), marks))
            t.nbest = NBest(beams, False, out, beam="transformers")
        return t

"""The Qwen3-ASR recognizer behind `load_model`: audio in, `Transcript` out.

A batch of inputs goes through the front end (each input alone), the audio encoder and projector (windows of
one input only), and the LM: each input's prompt (`prompt.PromptBuilder`: the chat layout with one placeholder
row per encoder position, and the forced language if one is asked) is embedded, its placeholder rows replaced
by the input's audio rows, and `llm.generate` runs greedy or beam search over the left-padded batch as
transformers' `generate` does (each row masked from its neighbours), stopping at the generation config's stop
tokens. The generated text is read as the processor's parsed output (`prompt.parse_output`: the repetition fix,
the language the model named, the text after `<asr_text>`).

Words are untimed: the model writes no times (its forced aligner is another model), so a transcript has one
segment over its input and no words; its tokens are the transcription's tokens, each spanning the input, with
its log-probability under greedy search.
Inputs longer than `max_piece_s` are cut at pauses (`long_input`) and their pieces' texts joined. `stream()` is a
live session cut at pauses (`transcribe.utterances`), each utterance decoded whole."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from .. import long_input
from ..errors import ModelError
from ..llm.generate import Generated
from ..llm.model import int8_compute
from ..llm.recognition import generate_within, search_settings, untimed_transcript
from ..llm.tokenizer import LLMTokenizer
from ..recognizer import Recognizer
from ..results import Transcript
from . import KIND
from .frontend import LogMel
from .model import Qwen3ASRModel
from .options import Qwen3ASROptions, Qwen3ASRStreamOptions
from .prompt import (LANGUAGES, NO_SPACE_LANGUAGES, PromptBuilder, check_template, marker_end, output_language,
                     parse_output, read_template)

# A batch holds at most this much padded audio (its longest input times its size).
MAX_BATCH_AUDIO_S = 8 * 60.0


class Qwen3ASR(Recognizer):
    """A loaded Qwen3-ASR model: `transcribe(audio, **options)` takes paths, bytes or arrays at `sample_rate` (its
    options: `Qwen3ASROptions`)."""

    family = "qwen3_asr"
    kind = KIND
    Options = Qwen3ASROptions
    StreamOptions = Qwen3ASRStreamOptions

    def __init__(self, model: Qwen3ASRModel, tokenizer: LLMTokenizer, prompts: PromptBuilder, name: str,
                 device: str = "cpu"):
        self.model = model
        self.tokenizer = tokenizer
        self.prompts = prompts
        self.frontend = LogMel(model.config.features)
        self.name = name
        self.device = torch.device(device)
        self.sample_rate = model.config.features.sample_rate
        self.threads: Optional[int] = None

    @classmethod
    def load(cls, path: Path, name: str, device, dtype: Optional[torch.dtype] = None) -> "Qwen3ASR":
        """A transformers-format (-hf) directory -> a recognizer on `device`; `dtype` (bfloat16, float16) applies
        to the encoder, the projector and the LM; the front end stays in float32. int8: every linear layer of the
        encoder and the projector an int8 product (`quant.quantize_linears`, float32 around them), the LM's as
        `DecoderLM.quantize_int8` makes them for this device (`llm.model.int8_compute`)."""
        from .config import read_config

        path = Path(path)
        config = read_config(path)
        tokenizer = LLMTokenizer.load(path)
        if len(tokenizer) > config.lm.vocab_size:
            raise ModelError(f"{path}: the tokenizer has {len(tokenizer)} tokens, more than the language model's "
                             f"{config.lm.vocab_size} embedding rows")
        template, source = read_template(path)
        check_template(template, f"{path}/{source}" if source else str(path))
        prompts = PromptBuilder(tokenizer, config.audio_token_id, str(path))
        int8 = dtype == torch.int8
        dtype = torch.float32 if dtype is None or int8 else dtype
        model = Qwen3ASRModel.load(path, config, dtype, int8_compute(device) if int8 else None)
        model.eval().to(device)
        return cls(model, tokenizer, prompts, name, str(device))

    @property
    def default_batch_size(self) -> int:
        return 16 if self.device.type == "cuda" else 4

    @property
    def languages(self) -> list[str]:
        return list(LANGUAGES)

    def _stream(self, opts: Qwen3ASRStreamOptions):
        """A live session cut at pauses (`transcribe.utterances`): each utterance decoded once, whole, with the
        session's options; words placed at the cut that ended their utterance (the model gives no times)."""
        import dataclasses

        from ..runtime import model_call
        from ..utterances import UtteranceSession

        piece_opts = Qwen3ASROptions(**{f.name: getattr(opts, f.name) for f in dataclasses.fields(Qwen3ASROptions)})
        tok = self.tokenizer
        # an utterance's text starts without a space (the model writes it after "<asr_text>"): the session puts
        # one between utterances, but after one in a language written without spaces
        space_ids = tok.encode(" ")
        last = {"language": None}

        def decode_piece(pcm: np.ndarray) -> list[int]:
            with model_call(self.threads):
                _, language, ids = self._read(self.decode([pcm], piece_opts)[0][0].ids, piece_opts)
            last["language"] = language
            return ids

        def space() -> list[int]:
            return [] if last["language"] in NO_SPACE_LANGUAGES else space_ids

        return UtteranceSession(decode_piece, decode=lambda ids: tok.decode(ids), piece=tok.token,
                                punctuation={".", ",", "?", "!", ";", ":", "。", "，", "？", "！"},
                                pause_s=0.5 if opts.pause_s is None else opts.pause_s, max_piece_s=opts.max_piece_s,
                                partial_s=opts.partial_s, space=space)

    # -- transcription
    def _transcribe(self, items: list, opts: Qwen3ASROptions) -> list[Transcript]:
        batch_size = self.default_batch_size if opts.batch_size is None else opts.batch_size
        rate = self.sample_rate
        out: list[Optional[Transcript]] = [None] * len(items)

        def run(pcms: list[np.ndarray]) -> list[Transcript]:
            return [self._to_transcript(h, len(p) / rate, opts) for h, p in zip(self.decode(pcms, opts), pcms)]

        def separator(parts: list[Transcript]) -> str:
            language = next((p.language for p in parts if p.language), None)
            return "" if language in NO_SPACE_LANGUAGES else " "

        for group in self.groups(items, opts.sample_rate):
            done = long_input.in_pieces(group, run, rate=rate, max_piece_s=opts.max_piece_s, detector=opts.detector,
                                        grain=self.model.config.features.hop, batch_size=batch_size,
                                        max_batch_s=MAX_BATCH_AUDIO_S, separator=separator)
            for i, t in done.items():
                out[i] = t
        return out  # type: ignore[return-value]

    @torch.inference_mode()
    def decode(self, pcm: Sequence[np.ndarray], opts: Qwen3ASROptions) -> list[list[Generated]]:
        """Mono float32 inputs at the model's rate -> each input's hypotheses, best first (greedy: one)."""
        m = self.model
        lm = m.language_model
        # an input with no mel frame (shorter than one hop where the model pads nothing) has no audio: its
        # transcript is empty (the published models pad every input to 0.5 s first)
        out: list[list[Generated]] = [[Generated([], 0.0, False)] for _ in pcm]
        rows = [i for i, p in enumerate(pcm) if self.frontend.frames(len(p)) > 0
                and max(len(p), m.config.features.min_samples) > m.config.features.n_fft // 2]
        if not rows:
            return out
        feats, frames = self.frontend.batch([pcm[i] for i in rows])
        audio = m.audio_embeddings(feats.to(self.device), frames.to(self.device))
        language = opts.language_code
        prefix = self.prompts.context_prefix(opts.context)
        prompts = []
        for audio_rows in audio:
            p = self.prompts.build(audio_rows.shape[0], language, prefix)
            x = lm.embed(torch.tensor(p.ids, dtype=torch.long, device=self.device))
            x[p.audio_start:p.audio_start + p.audio_rows] = audio_rows
            prompts.append(x)
        seconds = [len(pcm[i]) / self.sample_rate for i in rows]
        found = generate_within(lm, prompts, seconds, stop_ids=m.config.generation.stop_ids,
                                search=search_settings(m.config.generation, opts), name=self.name)
        for i, hyps in zip(rows, found):
            out[i] = hyps
        return out

    def _read(self, ids: list[int], opts: Qwen3ASROptions) -> tuple[str, Optional[str], list[int]]:
        """Generated ids -> (the transcription, the language's code, the transcription's ids)."""
        name, text = parse_output(self.tokenizer.decode(ids, skip_special=True))
        forced = opts.language_code
        start = 0 if forced is not None else marker_end(ids, self.prompts.marker_id)
        return text, forced if forced is not None else output_language(name), ids[start:]

    def _to_transcript(self, hyps: list[Generated], duration: float, opts: Qwen3ASROptions) -> Transcript:
        def read(ids: list[int]) -> tuple[str, list[int]]:
            text, _, kept = self._read(ids, opts)
            return text, kept

        language = self._read(hyps[0].ids, opts)[1]
        return untimed_transcript(hyps, duration, self.tokenizer, name=self.name, language=language,
                                  timestamps=opts.timestamps, beams=search_settings(self.model.config.generation,
                                                                                    opts)[0],
                                  nbest=opts.nbest, read=read)

"""The Whisper recognizer (`transcribe.recognizer.Recognizer`): weights, tokenizer, and openai-whisper's
decoding.

`decode_window` decodes one 30 s window (openai-whisper's `decode`: greedy, beam search or
best-of sampling, with its logit rules, prompt and prefix); `transcribe` (the base class's) checks
its options (`WhisperOptions`, transcribe/whisper/options.py; `check_for_model` the ones that need
the model) and runs audio of any length through it window by window: openai-whisper's sequential
loop (seeking by timestamps, conditioning on earlier text, temperature fallback, language detection
and word timestamps) in transcribe/whisper/sequential.py, a list's loops in lockstep in
transcribe/whisper/lockstep.py, and batched=True's windows cut at pauses in transcribe/whisper/pieces.py.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

import torch

from ..audio import model_input
from ..errors import ModelError, OptionValueError, TranscribeError
from ..recognizer import Recognizer
from ..results import Transcript
from ..runtime import scoped
from ..streaming import StreamingSession
from ..text.languages import language_code
from . import KIND
from . import decoding as search
from . import lockstep, pieces, sequential
from .frontend import WHISPER_CHUNK_FRAMES, WHISPER_CHUNK_SAMPLES, whisper_log_mel
from .language import detect_language
from .model import KVCache, Whisper, WhisperDims
from .options import WhisperOptions, WhisperStreamOptions
from .tokenizer import WhisperTokenizer


class WhisperASR(Recognizer):
    family = "whisper"
    kind = KIND
    Options = WhisperOptions
    StreamOptions = WhisperStreamOptions
    sample_rate = 16000

    def __init__(self, model: Whisper, tokenizer: WhisperTokenizer, config: dict, name: str):
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.name = name
        self.threads: Optional[int] = None  # CPU threads while this model runs (runtime.model_call)
        self.quantized = False  # int8 weights (load(..., dtype=torch.int8), transcribe/whisper/int8.py)

    @classmethod
    def load(cls, path: Path, name: str, device: torch.device, dtype: Optional[torch.dtype] = None,
             kind: str = "ctranslate2") -> "WhisperASR":
        """A checkpoint of `kind` (ctranslate2, openai, transformers) -> a recognizer on `device`.
        Without a dtype: float32 on a CPU, float16 on a GPU (as openai-whisper)."""
        if dtype is None and device.type == "cuda":
            dtype = torch.float16
        int8 = dtype == torch.int8
        build = {"ctranslate2": cls.from_ctranslate2, "openai": cls.from_openai,
                 "transformers": cls.from_transformers}[kind]
        # int8: the weights are read in float16 (as stored by float16 checkpoints: no float32
        # copy of the whole model is made) and quantized layer by layer; the rest goes to float32.
        asr = build(path, torch.float16 if int8 else dtype)
        asr.name = name
        asr.model.to(device)
        if device.type != "cpu":
            asr.model.decoder.expand_embedding()
        if int8:
            # int8 weights, float32 activations (transcribe/whisper/int8.py)
            from .int8 import quantize_whisper, widen_floats

            quantize_whisper(asr.model)
            widen_floats(asr.model)  # layer norms, convolutions, position tables to float32
            asr.quantized = True
            if device.type == "cpu":
                from ..runtime import release_memory

                release_memory()  # the float16 weights just freed go back to the system
        return asr

    @classmethod
    def from_ctranslate2(cls, path, dtype: Optional[torch.dtype] = None) -> "WhisperASR":
        from .checkpoints.ctranslate2 import read_ctranslate2

        config, sd, tok_json = read_ctranslate2(path)
        return cls.from_state_dict(config, sd, tok_json, path, dtype)

    @classmethod
    def from_openai(cls, path, dtype: Optional[torch.dtype] = None) -> "WhisperASR":
        """An openai-whisper .pt checkpoint (or a directory holding one)."""
        from .checkpoints.openai_pt import read_openai_pt

        return cls.from_state_dict(*read_openai_pt(path), path, dtype)

    @classmethod
    def from_transformers(cls, path, dtype: Optional[torch.dtype] = None) -> "WhisperASR":
        """A Hugging Face transformers Whisper directory (config.json, safetensors or .bin weights)."""
        from .checkpoints.transformers import read_transformers_whisper

        return cls.from_state_dict(*read_transformers_whisper(path), path, dtype)

    @classmethod
    def from_state_dict(cls, config: dict, sd: dict, tok_json: str, path, dtype: Optional[torch.dtype] = None) -> "WhisperASR":
        """openai-whisper state dict + config (with "dims") + tokenizer.json text -> a recognizer."""
        dims = WhisperDims.from_dict(config["dims"])
        with torch.device("meta"):
            model = Whisper(dims)
        target = dtype or torch.float32
        emb = sd.get("decoder.token_embedding.weight")
        # A float16 embedding under float32 compute stays float16 (see TextDecoder.compact_embedding):
        # never widened, so loading holds 80 MB less for tiny.en.
        keep = {"decoder.token_embedding.weight"} if (
            target == torch.float32 and emb is not None and emb.dtype == torch.float16) else set()
        sd = {k: (v if k in keep else v.to(target)) for k, v in sd.items()}
        try:
            missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
        except RuntimeError as e:  # shapes that do not fit the dims
            raise ModelError(f"{path}: weights do not fit Whisper {dims} ({str(e).splitlines()[-1].strip()[:300]})") from None
        if missing or unexpected:
            raise ModelError(f"{path}: weights do not fit Whisper {dims} (missing {missing[:3]}, unexpected {unexpected[:3]})")
        try:
            tokenizer = WhisperTokenizer(tok_json, dims.n_vocab)
        except ValueError as e:
            raise ModelError(f"{path}: {e}") from None
        model.decoder.compact_embedding()  # float16 checkpoints: half the bytes per step, same products
        return cls(model.eval(), tokenizer, config, str(path))

    @property
    def multilingual(self) -> bool:
        return self.model.is_multilingual

    @property
    def device(self) -> torch.device:
        """Where the weights are (and every tensor of a decoding is made)."""
        return self.model.decoder.positional_embedding.device

    def suppress_ids(self) -> list[int]:
        """openai-whisper's suppress_tokens="-1": non-speech symbols and the task/control tokens."""
        t = self.tokenizer
        ids = set(int(i) for i in self.config.get("suppress_ids") or [])
        ids |= {t.transcribe, t.translate, t.sot, t.sot_prev}
        ids |= {i for i in (t.sot_lm, t.no_speech) if i is not None}
        return sorted(ids)

    def logit_rules(self, sample_begin: int, timestamps: bool = True) -> list:
        """openai-whisper's logit filters for a window whose sampled tokens start at `sample_begin`:
        no blank first, the suppressed tokens, and (with timestamps) the timestamp rules with a
        first timestamp of at most 1 s."""
        t = self.tokenizer
        rules = [
            search.SuppressBlank(t.encode(" "), t.eot, sample_begin),
            search.SuppressTokens(self.suppress_ids()),
        ]
        if timestamps:
            rules.append(search.ApplyTimestampRules(t.timestamp_begin, t.eot, t.no_timestamps, sample_begin, 50))
        return rules

    def initial_tokens(self, language: Optional[str], task: str = "transcribe", prompt: Sequence[int] = (),
                       timestamps: bool = True, prefix: Sequence[int] | str = ()) -> tuple[list[int], int]:
        """A window's forced tokens (openai-whisper's): [<|startofprev|> prompt] <|startoftranscript|>
        [language task] [<|notimestamps|>] prefix, and the index of <|startoftranscript|> in them."""
        t = self.tokenizer
        initial = t.sot_sequence(language, task, self.multilingual)
        if prompt:
            initial = [t.sot_prev] + list(prompt)[-(self.model.dims.n_text_ctx // 2 - 1) :] + initial
        sot_index = initial.index(t.sot)  # (a prompt, when there is one, comes before it)
        if not timestamps:
            initial = initial + [t.no_timestamps]
        if isinstance(prefix, str):
            prefix = t.encode(" " + prefix.strip()) if prefix.strip() else []
        return initial + [int(x) for x in prefix], sot_index

    @scoped
    @torch.inference_mode()
    def decode_window(self, mel: torch.Tensor, opts: Optional[WhisperOptions] = None, *, prompt: Sequence[int] = (),
                      temperature: float = 0.0, generator: Optional[torch.Generator] = None,
                      cross: Optional[list] = None, **given) -> search.WindowResult:
        """mel [n_mels, 3000] (one 30 s window, padded) -> tokens of that window: greedy, or beam
        search with `beam_size` (openai-whisper's patience and length penalty); at a temperature
        above 0, the likeliest of `best_of` samples (beam options are then ignored, as in
        openai-whisper).

        opts: the options (`WhisperOptions`) whose timestamps, language (a code; None: detected),
        task, beam_size, patience, length_penalty, best_of and prefix (text or tokens the window's
        transcript is forced to begin with; the result holds the tokens after it) apply; given:
        options by name, instead of or over `opts` (e.g. `decode_window(mel, beam_size=2)`).
        prompt: earlier text tokens, given after <|startofprev|> (at most n_text_ctx // 2 - 1).
        temperature: this decoding's (one of the schedule's). generator: the sampling generator, on
        the model's device (`self.device`). cross: the window's `encode(mel)`, when the caller has it.
        """
        if opts is None:
            opts = WhisperOptions(**given)
        elif given:
            opts = replace(opts, **given)
        t = self.tokenizer
        m = self.model
        if cross is None:
            cross = self.encode(mel)
        language = opts.language
        if language is None and self.multilingual:
            language = detect_language(m, t, cross=cross)[0]  # openai-whisper's decode does so too
        initial, sot_index = self.initial_tokens(language, opts.task, prompt, opts.timestamps, opts.prefix or ())
        setup = search.SearchSetup(t.eot, self.logit_rules(len(initial), opts.timestamps), m.dims.n_text_ctx // 2,
                                   no_speech=t.no_speech, sot_index=sot_index, n_ctx=m.dims.n_text_ctx)
        device = cross[0][0].device  # every tensor of the search lives with the weights
        if temperature > 0:
            if generator is not None and torch.device(generator.device) != device:
                raise TranscribeError(f"the generator is on {generator.device}, the model on {device}: "
                                      f"make it with torch.Generator(device={str(device)!r})")
            step, _ = self.decoder_steps(cross, opts.best_of)
            r = search.greedy(step, torch.tensor([initial] * opts.best_of, device=device), setup,
                              temperature=temperature, generator=generator)
            k = search.rank_by_likelihood([len(x) for x in r.tokens], r.sum_logprobs, opts.length_penalty)
            return search.WindowResult([r.tokens[k]], [r.sum_logprobs[k]], [r.no_speech_probs[0]])
        step, reorder = self.decoder_steps(cross, opts.beam_size)
        if opts.beam_size is None:
            return search.greedy(step, torch.tensor([initial], device=device), setup)
        return search.beam_search(step, reorder, torch.tensor([initial], device=device), setup, opts.beam_size,
                                  patience=opts.patience, length_penalty=opts.length_penalty)

    def decoder_steps(self, cross: list, rows: Optional[int]):
        """(step, reorder) of one window's search (see `decoding.greedy`): the decoder over the
        window's cross-attention keys and values `cross`, with its self-attention cache. rows: the
        rows (beams, samples) that all read the window's one audio row (None: as many rows as
        audio rows, each its own: greedy). reorder(rows) keeps those cache rows (a beam reorder)."""
        m = self.model
        device = cross[0][0].device
        # Every beam (sample) of the window reads the one set of cross-attention keys and values.
        state = {"cache": None if rows is None else
                 KVCache([], [], torch.zeros(rows, dtype=torch.long, device=device), [0] * rows)}

        def step(new: torch.Tensor, positions: Sequence[int]) -> torch.Tensor:
            cache = state["cache"]
            rows = new.shape[0]
            if m.decoder.shared_prefix and rows > 1 and cache is not None and cache.length == 0:
                # The rows' forced tokens are the same: run them once, share their keys and values.
                one = KVCache([], [], cache.audio_index[:1], [0])
                logits, first, _ = m.decoder(new[:1], cross, one, positions=positions)
                state["cache"] = KVCache([], [], cache.audio_index, cache.rows_on_host(), None,
                                         (first.keys, first.values))
                return logits.expand(rows, *logits.shape[1:])
            logits, state["cache"], _ = m.decoder(new, cross, cache, positions=positions)
            return logits

        def reorder(rows: torch.Tensor) -> None:
            state["cache"] = state["cache"].reorder(rows)

        return step, reorder

    @scoped
    def detect_language(self, mel: torch.Tensor) -> tuple[str, dict[str, float]]:
        """The spoken language of a 30 s window (mel [n_mels, 3000]) and every language's
        probability, for a multilingual model."""
        if not self.multilingual:
            raise TranscribeError(f"{self.name} is an English-only model: it has no languages to detect")
        return detect_language(self.model, self.tokenizer, cross=self.encode(mel))

    @scoped
    @torch.inference_mode()
    def encode(self, mel: torch.Tensor) -> list:
        """One window's mel [n_mels, 3000] -> the cross-attention keys and values of every decoder
        layer (computed once per window, shared by every decoding of it), [1, heads, frames, d]
        each; or windows [B, n_mels, 3000] -> the same with B rows."""
        m = self.model
        w = m.decoder.positional_embedding
        if mel.ndim == 2:
            mel = mel[None]
        audio = m.encoder(mel.to(device=w.device, dtype=w.dtype))
        return m.decoder.cross_kv(audio)

    def window_mel(self, audio) -> torch.Tensor:
        """The first 30 s window of an audio array, as openai-whisper pads it."""
        mel = whisper_log_mel(audio, self.model.dims.n_mels, padding=WHISPER_CHUNK_SAMPLES)
        return mel[:, :WHISPER_CHUNK_FRAMES]

    # ------------------------------------------------------------------------------------------
    def _transcribe(self, items: list, opts: WhisperOptions) -> list[Transcript]:
        """Transcribe audio of any length in 30 s windows, seeking by the predicted timestamps
        (openai-whisper's `transcribe`, transcribe/whisper/sequential.py). A window whose text is too
        repetitive (compression ratio above the threshold) or too unlikely (average log-prob below
        `logprob_threshold`, unless it is silence) is decoded again at the next temperature.

        batch_size: with a list, up to this many inputs run their window loops in lockstep
        (transcribe/whisper/lockstep.py): their pending windows go through the encoder together and
        their first (greedy) decodings are one batched search; each result is the one the input
        gets alone, up to float rounding. 1: one input after the other.

        initial_prompt: text before the first window (as if it had been said before); prefix: text
        the first window's transcript starts with (the first window only, as faster-whisper does:
        openai-whisper forces it on every window).

        word_timestamps: align every word (and token) to the audio through the cross-attention of
        the model's alignment heads; segments then start and end with their words, and the next
        window starts after the last word, as in openai-whisper.

        batched: cut each input at pauses into windows of at most 30 s and decode its windows
        together, `batch_size` (default 8) at a time (transcribe/whisper/pieces.py); no window is
        conditioned on another's text (condition_on_previous_text does not apply), an initial_prompt
        goes to every window, and `prefix` is refused. A list is transcribed one input after the
        other, each that way. Without it (the default), openai-whisper's sequential loop, and
        `batch_size` (default 1) batches across the inputs of a list.

        sample_rate: the rate of array inputs (default: the model's, 16 kHz); files carry their own."""
        # The loops cut windows at their timestamps: every window is decoded with them.
        opts = replace(opts, language=self.language_code(opts.language), timestamps=True)

        def load(a):
            return model_input(a, self.sample_rate, opts.sample_rate)

        if not opts.batched and len(items) > 1 and opts.windows_at_once > 1:
            # Each input samples from its own generator, as it would alone.
            return lockstep.transcribe_batch(self, items, load, opts)
        generator = sequential.sampling_generator(self, opts.seed)  # (one for the inputs, in turn)
        if opts.batched:
            return [pieces.transcribe_pieces(self, load(a), opts, generator) for a in items]
        return [sequential.transcribe_one(self, load(a), opts, generator) for a in items]

    def check_for_model(self, opts: WhisperOptions) -> None:
        """The checks of `opts` that need the model: a language it knows, a translation only by a
        multilingual model, alignment heads for word timestamps."""
        self.language_code(opts.language)
        if opts.task == "translate" and not self.multilingual:
            raise OptionValueError("task", f"{self.name} is an English-only Whisper model and cannot translate "
                                  "(a multilingual model can)")
        if opts.word_timestamps and not self.alignment_heads():
            raise TranscribeError(f"{self.name}: the model's config names no alignment heads, needed for word timestamps")

    def language_code(self, language: Optional[str]) -> Optional[str]:
        """A `language` option (a code or a name, any case) as the model's code; None stays None.
        Raises TranscribeError for a language the model cannot transcribe: an unknown one, or any but
        English for an English-only model (openai-whisper transcribes such a request in English with a
        warning; here it is refused, as every surface refuses what a model cannot honour)."""
        if language is None:
            return None
        code = language_code(str(language))
        if not self.multilingual:
            if code != "en":
                raise OptionValueError("language", f"{self.name} is an English-only Whisper model and cannot transcribe "
                                      f"language {language!r} (only en)")
            return code
        if code not in self.tokenizer.languages:
            raise OptionValueError("language", f"unknown language {language!r} (this model knows "
                                  f"{', '.join(self.tokenizer.languages)})")
        return code

    def alignment_heads(self) -> list[tuple[int, int]]:
        """(decoder layer, head) pairs whose cross-attention follows the speech: from the model's
        config; without one, every head of the upper half of the layers (openai-whisper's default)."""
        heads = self.config.get("alignment_heads")
        if heads:
            return [(int(a), int(b)) for a, b in heads]
        d = self.model.dims
        return [(layer, h) for layer in range(d.n_text_layer // 2, d.n_text_layer) for h in range(d.n_text_head)]

    def stream_options(self, **given) -> WhisperStreamOptions:
        """The checked options of `stream(**given)`: chunk_s, left_s, right_s and transcribe's
        decoding options (language, beam_size, temperature, ...); the options a stream sets itself
        (word timestamps, ...) and a prefix are refused (transcribe/whisper/streaming.py)."""
        from .streaming import refuse_fixed

        refuse_fixed(given)
        opts = super().stream_options(**given)
        self.check_for_model(replace(opts, word_timestamps=True))
        return opts

    def _stream(self, opts: WhisperStreamOptions) -> StreamingSession:
        """A live session over windows of the stream (transcribe/whisper/streaming.py): `feed` audio
        as it arrives, committed and tentative text come out as windows are decoded; a context
        manager (finalized on exit)."""
        from .streaming import buffered_session

        return buffered_session(self, opts)

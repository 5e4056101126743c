"""The Whisper recognizer: weights, tokenizer, and openai-whisper's decoding.

`decode_window` decodes one 30 s window (openai-whisper's `decode`: greedy, beam search or
best-of sampling, with its logit rules, prompt and prefix); `transcribe` runs audio of any length
through it window by window (openai-whisper's `transcribe`: seeking by timestamps, conditioning on
earlier text, temperature fallback, language detection and word timestamps).
"""
from __future__ import annotations

import logging
import zlib
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

import torch

from ..audio import model_input
from ..runtime import scoped
from ..errors import ModelError, TranscribeError
from ..results import Segment, Token, Transcript, Word
from .frontend import WHISPER_CHUNK_FRAMES, WHISPER_CHUNK_SAMPLES, whisper_log_mel
from .model import KVCache, Whisper, WhisperDims
from . import decoding as search
from .tokenizer import WhisperTokenizer
from .language import detect_language
from .timing import APPEND_PUNCTUATION, PREPEND_PUNCTUATION, add_word_timestamps, find_alignment


log = logging.getLogger("transcribe")

TIME_PRECISION = 0.02  # seconds per timestamp token
INPUT_STRIDE = 2  # mel frames per encoder position


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


class WhisperASR:
    family = "whisper"
    sample_rate = 16000

    def __init__(self, model: Whisper, tokenizer: WhisperTokenizer, config: dict, name: str):
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.name = name
        self.threads: Optional[int] = None  # CPU threads while this model runs (runtime.model_call)

    @classmethod
    def load(cls, path: Path, name: str, device: torch.device, dtype: Optional[torch.dtype] = None,
             kind: str = "ctranslate2") -> "WhisperASR":
        """A checkpoint of `kind` (ctranslate2, openai, transformers) -> a recognizer on `device`.
        Without a dtype: float32 on a CPU, float16 on a GPU (as openai-whisper)."""
        if dtype is None and device.type == "cuda":
            dtype = torch.float16
        build = {"ctranslate2": cls.from_ctranslate2, "openai": cls.from_openai,
                 "transformers": cls.from_transformers}[kind]
        asr = build(path, dtype)
        asr.name = name
        asr.model.to(device)
        if device.type != "cpu":
            asr.model.decoder.expand_embedding()
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

    @scoped
    @torch.inference_mode()
    def decode_window(
        self,
        mel: torch.Tensor,
        timestamps: bool = True,
        language: Optional[str] = None,
        task: str = "transcribe",
        prompt: Sequence[int] = (),
        beam_size: Optional[int] = None,
        patience: Optional[float] = None,
        length_penalty: Optional[float] = None,
        temperature: float = 0.0,
        best_of: int = 5,
        generator: Optional[torch.Generator] = None,
        cross: Optional[list] = None,
        prefix: Sequence[int] | str = (),
    ) -> search.WindowResult:
        """mel [n_mels, 3000] (one 30 s window, padded) -> tokens of that window: greedy, or beam
        search with `beam_size` (openai-whisper's patience and length penalty); at a temperature
        above 0, the likeliest of `best_of` samples (beam options are then ignored, as in
        openai-whisper).

        prompt: earlier text tokens, given after <|startofprev|> (at most n_text_ctx // 2 - 1).
        generator: the sampling generator, on the model's device (`self.device`).
        cross: the window's `encode(mel)`, when the caller has it already.
        prefix: text (or tokens) the window's transcript is forced to begin with; the result holds
        the tokens after it.
        """
        t = self.tokenizer
        m = self.model
        if cross is None:
            cross = self.encode(mel)
        if language is None and self.multilingual:
            language = detect_language(m, t, cross=cross)[0]  # openai-whisper's decode does so too
        initial = t.sot_sequence(language, task, self.multilingual)
        if prompt:
            initial = [t.sot_prev] + list(prompt)[-(m.dims.n_text_ctx // 2 - 1) :] + initial
        sot_index = initial.index(t.sot)  # (a prompt, when there is one, comes before it)
        if not timestamps:
            initial = initial + [t.no_timestamps]
        if isinstance(prefix, str):
            prefix = t.encode(" " + prefix.strip()) if prefix.strip() else []
        initial = initial + [int(x) for x in prefix]
        sample_begin = len(initial)
        rules = self.logit_rules(sample_begin, timestamps)
        device = cross[0][0].device  # every tensor of the search lives with the weights
        sampled = temperature > 0
        if sampled:
            if generator is not None and torch.device(generator.device) != device:
                raise TranscribeError(f"the generator is on {generator.device}, the model on {device}: "
                                      f"make it with torch.Generator(device={str(device)!r})")
            beam_size = None
            state = {"cache": KVCache([], [], torch.zeros(best_of, dtype=torch.long, device=device), [0] * best_of)}
        elif beam_size is None:
            state = {"cache": None}
        else:
            # Every beam of the window reads the one set of cross-attention keys and values.
            state = {"cache": KVCache([], [], torch.zeros(beam_size, dtype=torch.long, device=device), [0] * beam_size)}

        def step(new: torch.Tensor, positions: Sequence[int]) -> torch.Tensor:
            logits, state["cache"], _ = m.decoder(new, cross, state["cache"], positions=positions)
            return logits

        if sampled:
            r = search.greedy(
                step, torch.tensor([initial] * best_of, device=device), t.eot, rules, m.dims.n_text_ctx // 2,
                no_speech=t.no_speech, sot_index=sot_index, temperature=temperature, generator=generator,
                n_ctx=m.dims.n_text_ctx,
            )
            k = search.rank_by_likelihood([len(x) for x in r.tokens], r.sum_logprobs, length_penalty)
            return search.WindowResult([r.tokens[k]], [r.sum_logprobs[k]], [r.no_speech_probs[0]])
        if beam_size is None:
            return search.greedy(
                step, torch.tensor([initial], device=device), t.eot, rules, m.dims.n_text_ctx // 2,
                no_speech=t.no_speech, sot_index=sot_index, n_ctx=m.dims.n_text_ctx,
            )

        def reorder(rows: torch.Tensor) -> None:
            state["cache"] = state["cache"].reorder(rows)

        return search.beam_search(
            step, reorder, torch.tensor([initial], device=device), t.eot, rules, m.dims.n_text_ctx // 2, beam_size,
            patience=patience, length_penalty=length_penalty, no_speech=t.no_speech, sot_index=sot_index,
            n_ctx=m.dims.n_text_ctx,
        )

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
        layer (computed once per window, shared by every decoding of it)."""
        m = self.model
        w = m.decoder.positional_embedding
        audio = m.encoder(mel[None].to(device=w.device, dtype=w.dtype))
        return m.decoder.cross_kv(audio)

    def window_mel(self, audio) -> torch.Tensor:
        """The first 30 s window of an audio array, as openai-whisper pads it."""
        mel = whisper_log_mel(audio, self.model.dims.n_mels, padding=WHISPER_CHUNK_SAMPLES)
        return mel[:, :WHISPER_CHUNK_FRAMES]

    # ------------------------------------------------------------------------------------------
    @scoped
    def transcribe(
        self,
        audio,
        *,
        batch_size: int = 1,
        timestamps: bool = True,
        head: Optional[str] = None,
        language: Optional[str] = None,
        task: str = "transcribe",
        condition_on_previous_text: bool = True,
        initial_prompt: Optional[str] = None,
        prefix: Optional[str] = None,
        no_speech_threshold: Optional[float] = 0.6,
        logprob_threshold: Optional[float] = -1.0,
        beam_size: Optional[int] = None,
        patience: Optional[float] = None,
        length_penalty: Optional[float] = None,
        temperature: float | Sequence[float] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
        best_of: int = 5,
        compression_ratio_threshold: Optional[float] = 2.4,
        seed: Optional[int] = 0,
        word_timestamps: bool = False,
        prepend_punctuations: str = PREPEND_PUNCTUATION,
        append_punctuations: str = APPEND_PUNCTUATION,
        sample_rate: Optional[int] = None,
    ):
        """Transcribe audio of any length in 30 s windows, seeking by the predicted timestamps
        (openai-whisper's `transcribe`). A window whose text is too repetitive (compression ratio
        above the threshold) or too unlikely (average log-prob below `logprob_threshold`, unless it
        is silence) is decoded again at the next temperature. A list gives a list.

        initial_prompt: text before the first window (as if it had been said before); prefix: text
        the first window's transcript starts with (the first window only, as faster-whisper does:
        openai-whisper forces it on every window).

        word_timestamps: align every word (and token) to the audio through the cross-attention of
        the model's alignment heads; segments then start and end with their words, and the next
        window starts after the last word, as in openai-whisper.

        sample_rate: the rate of array inputs (default: the model's, 16 kHz); files carry their own."""
        if head is not None:
            raise TranscribeError(f"{self.name} is a Whisper model: it has no {head} head")
        if language is not None:
            if not self.multilingual:
                if language != "en":
                    log.warning("%s is an English-only model: transcribing in English, not %r", self.name, language)
                language = "en"
            elif language not in self.tokenizer.languages:
                raise TranscribeError(f"unknown language {language!r} (this model knows {', '.join(self.tokenizer.languages)})")
        if task not in ("transcribe", "translate"):
            raise TranscribeError(f"task must be transcribe or translate, got {task!r}")
        if word_timestamps and not self.alignment_heads():
            raise TranscribeError(f"{self.name}: the model's config names no alignment heads, needed for word timestamps")
        single = not isinstance(audio, (list, tuple))
        items = [audio] if single else list(audio)
        temps = (temperature,) if isinstance(temperature, (int, float)) else tuple(temperature)
        search_opts = dict(beam_size=beam_size, patience=patience, length_penalty=length_penalty, best_of=best_of,
                           prefix=prefix or ())
        fallback = dict(temperatures=temps, compression_ratio_threshold=compression_ratio_threshold,
                        logprob_threshold=logprob_threshold, no_speech_threshold=no_speech_threshold,
                        generator=torch.Generator(device=self.device).manual_seed(seed) if seed is not None else None)
        words = (prepend_punctuations, append_punctuations) if word_timestamps else None
        out = [self._transcribe_one(model_input(a, self.sample_rate, sample_rate), language, task, condition_on_previous_text,
                                    initial_prompt, no_speech_threshold, logprob_threshold, search_opts, fallback, words)
               for a in items]
        return out[0] if single else out

    def alignment_heads(self) -> list[tuple[int, int]]:
        """(decoder layer, head) pairs whose cross-attention follows the speech: from the model's
        config; without one, every head of the upper half of the layers (openai-whisper's default)."""
        heads = self.config.get("alignment_heads")
        if heads:
            return [(int(a), int(b)) for a, b in heads]
        d = self.model.dims
        return [(layer, h) for layer in range(d.n_text_layer // 2, d.n_text_layer) for h in range(d.n_text_head)]

    def _decode_with_fallback(self, window, cross, language, task, prompt, search_opts, temperatures,
                              compression_ratio_threshold, logprob_threshold, no_speech_threshold, generator):
        """Decode at each temperature in turn until the result passes the checks; returns the
        result, its average log-prob, its compression ratio and the temperature used."""
        t = self.tokenizer
        for temp in temperatures:
            r = self.decode_window(window, True, language, task, prompt, temperature=temp, generator=generator,
                                   cross=cross, **search_opts)
            tokens = r.tokens[0]
            avg = r.sum_logprobs[0] / (len(tokens) + 1)
            ratio = compression_ratio(t.decode(tokens).strip())
            retry = (compression_ratio_threshold is not None and ratio > compression_ratio_threshold) or (
                logprob_threshold is not None and avg < logprob_threshold
            )
            if (no_speech_threshold is not None and r.no_speech_probs[0] > no_speech_threshold
                    and logprob_threshold is not None and avg < logprob_threshold):
                retry = False  # silence: no point in sampling
            if not retry:
                break
        return r, avg, ratio, temp

    def _transcribe_one(self, pcm, language, task, condition, initial_prompt, no_speech_threshold, logprob_threshold,
                        search_opts, fallback, words_opts):
        t = self.tokenizer
        duration = len(pcm) / self.sample_rate
        mel = whisper_log_mel(pcm, self.model.dims.n_mels, padding=WHISPER_CHUNK_SAMPLES)
        content = mel.shape[-1] - WHISPER_CHUNK_FRAMES
        if language is None:
            # English-only models speak English; a multilingual one detects the language in the
            # first 30 s (the mel of the audio itself, not zero-padded) and keeps it throughout.
            language = "en" if not self.multilingual else self.detect_language(mel[:, :WHISPER_CHUNK_FRAMES])[0]
        prompt_tokens = t.encode(" " + initial_prompt.strip()) if initial_prompt else []
        all_tokens = list(prompt_tokens)
        reset_since = 0
        seek = 0
        last_speech = 0.0
        segments: list[Segment] = []
        token_list: list[Token] = []
        while seek < content:
            offset = seek * 160 / self.sample_rate
            size = min(WHISPER_CHUNK_FRAMES, content - seek)
            # As openai-whisper: the window ends with the audio, then zeros (in log-mel units).
            window = mel[:, seek : seek + size]
            if window.shape[-1] < WHISPER_CHUNK_FRAMES:
                window = torch.nn.functional.pad(window, (0, WHISPER_CHUNK_FRAMES - window.shape[-1]))
            cross = self.encode(window)
            r, avg_logprob, ratio, temp = self._decode_with_fallback(
                window, cross, language, task, all_tokens[reset_since:], search_opts, **fallback)
            search_opts = {**search_opts, "prefix": ()}  # the prefix starts the first window only
            tokens = r.tokens[0]
            no_speech = r.no_speech_probs[0]
            if no_speech_threshold is not None and no_speech > no_speech_threshold:
                if logprob_threshold is None or avg_logprob <= logprob_threshold:
                    seek += size
                    continue
            stats = dict(avg_logprob=avg_logprob, no_speech_prob=no_speech, compression_ratio=ratio, temperature=temp)
            current, next_seek, single_ending = self._segments(tokens, offset, seek, size, stats)
            if words_opts is not None:
                self._add_words(current, cross, size, offset, language, task, last_speech, words_opts, token_list)
                last_end = _last_end(current)
                if not single_ending and last_end is not None and last_end > offset:
                    next_seek = round(last_end * 100)
                if last_end is not None:
                    last_speech = last_end
            seek = next_seek
            for seg, toks in current:
                if seg.start == seg.end or not seg.text.strip():
                    seg.text, toks[:], seg.words = "", [], []
                segments.append(seg)
                all_tokens.extend(toks)
            if not condition or temp > 0.5:
                reset_since = len(all_tokens)
        text = t.decode(all_tokens[len(prompt_tokens):])
        words = [w for s in segments for w in s.words]
        return Transcript(text=text, duration=duration, segments=segments, words=words, tokens=token_list,
                          model=self.name, language=language)

    def _add_words(self, current, cross, size, offset, language, task, last_speech, opts, token_list) -> None:
        """Word (and token) times for one window's segments, from the cross-attention alignment."""
        t = self.tokenizer
        text_tokens = [[x for x in toks if x < t.eot] for _, toks in current]
        sot = t.sot_sequence(language, task, self.multilingual)
        aligned = find_alignment(self.model.decoder, cross, t, sot, [x for tt in text_tokens for x in tt], size,
                                 self.alignment_heads(), language=language)
        views = [dict(start=seg.start, end=seg.end, text_tokens=tt) for (seg, _), tt in zip(current, text_tokens)]
        add_word_timestamps(aligned, views, offset, last_speech, *opts)
        for (seg, _), v in zip(current, views):
            seg.start, seg.end = float(v["start"]), float(v["end"])
            seg.words = [Word(w["word"].strip(), float(w["start"]), float(w["end"]), float(w["probability"]))
                         for w in v["words"]]
            for w in v["words"]:
                for tok, (a, b, p) in zip(w["tokens"], w["token_times"]):
                    token_list.append(Token(int(tok), t.token_text(tok), round(a, 2), round(b, 2), confidence=p,
                                            piece=t.piece(tok)))

    def _segments(self, tokens: list[int], offset: float, seek: int, size: int, stats: dict):
        """Cut one window's tokens into segments at timestamp pairs; returns them, the next seek,
        and whether the window ended on a single timestamp (its speech ran to the end)."""
        t = self.tokenizer
        tb = t.timestamp_begin
        is_ts = [x >= tb for x in tokens]
        single_ending = is_ts[-2:] == [False, True]
        cuts = [i + 1 for i in range(len(tokens) - 1) if is_ts[i] and is_ts[i + 1]]
        out = []

        def seg(toks, start, end):
            text = t.decode([x for x in toks if x < t.eot])
            return (Segment(text, start, end, **stats), list(toks))

        if cuts:
            if single_ending:
                cuts.append(len(tokens))
            last = 0
            for c in cuts:
                piece = tokens[last:c]
                out.append(seg(piece, offset + (piece[0] - tb) * TIME_PRECISION, offset + (piece[-1] - tb) * TIME_PRECISION))
                last = c
            if single_ending:
                seek += size
            else:
                seek += (tokens[last - 1] - tb) * INPUT_STRIDE
        else:
            dur = size * 160 / self.sample_rate
            stamps = [x for x in tokens if x >= tb]
            if stamps and stamps[-1] != tb:
                dur = (stamps[-1] - tb) * TIME_PRECISION
            out.append(seg(tokens, offset, offset + dur))
            seek += size
        return out, seek, single_ending


def _last_end(current) -> Optional[float]:
    """The end of the last word of a window's segments, or of its last segment."""
    for seg, _ in reversed(current):
        if seg.words:
            return seg.words[-1].end
    return current[-1][0].end if current else None

"""The Whisper recognizer: weights, tokenizer and decoding of 30 s windows.

So far one window at a time with greedy search (openai-whisper's `decode` at temperature 0);
long-form transcription, beam search and temperature fallback build on `decode_window`.
"""
from __future__ import annotations

from typing import Optional

import torch

from .errors import ModelError
from .features import WHISPER_CHUNK_FRAMES, WHISPER_CHUNK_SAMPLES, whisper_log_mel
from .models.whisper import Whisper, WhisperDims
from .search import whisper as search
from .text.tokenizers import WhisperTokenizer


class WhisperASR:
    family = "whisper"
    sample_rate = 16000

    def __init__(self, model: Whisper, tokenizer: WhisperTokenizer, config: dict, name: str):
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.name = name

    @classmethod
    def from_ctranslate2(cls, path, dtype: Optional[torch.dtype] = None) -> "WhisperASR":
        from .formats.ctranslate2 import read_ctranslate2

        config, sd, tok_json = read_ctranslate2(path)
        dims = WhisperDims.from_dict(config["dims"])
        with torch.device("meta"):
            model = Whisper(dims)
        sd = {k: v.to(dtype or torch.float32) for k, v in sd.items()}
        missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
        if missing or unexpected:
            raise ModelError(f"{path}: weights do not fit Whisper {dims} (missing {missing[:3]}, unexpected {unexpected[:3]})")
        try:
            tokenizer = WhisperTokenizer(tok_json, dims.n_vocab)
        except ValueError as e:
            raise ModelError(f"{path}: {e}") from None
        return cls(model.eval(), tokenizer, config, str(path))

    @property
    def multilingual(self) -> bool:
        return self.model.is_multilingual

    def suppress_ids(self) -> list[int]:
        """openai-whisper's suppress_tokens="-1": non-speech symbols and the task/control tokens."""
        t = self.tokenizer
        ids = set(int(i) for i in self.config.get("suppress_ids") or [])
        ids |= {t.transcribe, t.translate, t.sot, t.sot_prev}
        ids |= {i for i in (t.sot_lm, t.no_speech) if i is not None}
        return sorted(ids)

    @torch.inference_mode()
    def decode_window(
        self, mel: torch.Tensor, timestamps: bool = True, language: Optional[str] = None, task: str = "transcribe"
    ) -> search.WindowResult:
        """mel [n_mels, 3000] (one 30 s window, padded) -> greedy tokens of that window."""
        t = self.tokenizer
        m = self.model
        dtype = m.decoder.token_embedding.weight.dtype
        audio = m.encoder(mel[None].to(dtype))
        cross = m.decoder.cross_kv(audio)
        initial = t.sot_sequence(language, task, self.multilingual)
        sot_index = initial.index(t.sot)  # (a prompt, when there is one, comes before it)
        if not timestamps:
            initial = initial + [t.no_timestamps]
        sample_begin = len(initial)
        rules = [
            search.SuppressBlank(t.encode(" "), t.eot, sample_begin),
            search.SuppressTokens(self.suppress_ids()),
        ]
        if timestamps:
            rules.append(search.ApplyTimestampRules(t.timestamp_begin, t.eot, t.no_timestamps, sample_begin, 50))
        state = {"cache": None}

        def step(new: torch.Tensor) -> torch.Tensor:
            logits, state["cache"], _ = m.decoder(new, cross, state["cache"])
            return logits

        return search.greedy(
            step, torch.tensor([initial]), t.eot, rules, m.dims.n_text_ctx // 2,
            no_speech=t.no_speech, sot_index=sot_index,
        )

    def window_mel(self, audio) -> torch.Tensor:
        """The first 30 s window of an audio array, as openai-whisper pads it."""
        mel = whisper_log_mel(audio, self.model.dims.n_mels, padding=WHISPER_CHUNK_SAMPLES)
        return mel[:, :WHISPER_CHUNK_FRAMES]

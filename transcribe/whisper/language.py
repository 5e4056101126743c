"""Spoken-language identification with a multilingual Whisper model.

The decoder reads the 30 s window's audio features with the prompt <|startoftranscript|> alone;
its next-token distribution, restricted to the language tokens, gives each language's probability
(openai-whisper's `detect_language`). English-only models have no language to choose: they
transcribe English.
"""
from __future__ import annotations

from typing import Optional

import torch

from .model import Whisper
from .tokenizer import WhisperTokenizer


@torch.inference_mode()
def language_probabilities(
    model: Whisper,
    tokenizer: WhisperTokenizer,
    mel: Optional[torch.Tensor] = None,
    audio_features: Optional[torch.Tensor] = None,
    cross: Optional[list] = None,
) -> torch.Tensor:
    """Probabilities [rows, n_languages] (float32) of the tokenizer's languages, in its order.

    mel: [n_mels, 3000] or [rows, n_mels, 3000] (30 s windows); or, instead, the encoder's output
    `audio_features` [rows, n_audio_ctx, n_audio_state], or the decoder's cross-attention keys
    and values of them (`cross`), so that a caller that decodes the window next runs the encoder
    once.
    """
    if not model.is_multilingual or not tokenizer.languages:
        raise ValueError("an English-only Whisper model has no language tokens to detect a language with")
    if cross is None and audio_features is None:
        if mel is None:
            raise ValueError("give mel or audio_features")
        if mel.ndim == 2:
            mel = mel[None]
        w = model.decoder.positional_embedding
        audio_features = model.encoder(mel.to(device=w.device, dtype=w.dtype))
    if cross is None:
        cross = model.decoder.cross_kv(audio_features)
    rows = cross[0][0].shape[0]
    prompt = torch.full((rows, 1), tokenizer.sot, dtype=torch.long, device=cross[0][0].device)
    logits, _, _ = model.decoder(prompt, cross)
    ids = torch.tensor(list(tokenizer.languages.values()), dtype=torch.long, device=logits.device)
    # Every other token masked out: a softmax over the language tokens' logits alone.
    return torch.softmax(logits[:, 0].float().index_select(1, ids), dim=-1)


def detect_language(
    model: Whisper,
    tokenizer: WhisperTokenizer,
    mel: Optional[torch.Tensor] = None,
    audio_features: Optional[torch.Tensor] = None,
    cross: Optional[list] = None,
) -> tuple[str, dict[str, float]]:
    """The likeliest language of one 30 s window and every language's probability:
    (code, {code: probability}), codes in the model's order. mel [n_mels, 3000] (or the window's
    encoder output as `audio_features` [1, n_audio_ctx, n_audio_state]).

    On a tie the language listed first wins, as in openai-whisper.
    """
    probs = language_probabilities(model, tokenizer, mel, audio_features, cross)
    if probs.shape[0] != 1:
        raise ValueError(f"one window at a time; got {probs.shape[0]} (use language_probabilities)")
    codes = list(tokenizer.languages)
    values = probs[0].tolist()
    best = max(range(len(codes)), key=lambda i: (values[i], -i))
    return codes[best], dict(zip(codes, values))

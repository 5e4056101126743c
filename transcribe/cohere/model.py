"""Cohere Transcribe's network (transformers' `CohereAsrForConditionalGeneration`): a NeMo mel front end with
transformers' deterministic dither, NeMo's FastConformer encoder, the linear map to the decoder's width
(transformers' `decoder.proj`, applied to the encoder output at every decoder call: the same values as once
here), NeMo's pre-LN Transformer decoder with the position table the checkpoint stores, and the head: its
own weight (`tie_word_embeddings` false, as published), or the token embedding when a config ties them, as
transformers ties them.

Module and parameter names are the checkpoint's (`save_pretrained` writes NeMo's names, the reverse of
transformers' load-time renames): `encoder.*`, `encoder_decoder_proj.*`, `transf_decoder._embedding.*`,
`transf_decoder._decoder.*`, `log_softmax.mlp.layer0.*`, with a `model.` prefix on all but the head in the
files transformers writes (the published file has none)."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..nemo.checkpoint import adopt
from ..nemo.conformer import ConformerEncoder
from ..nemo.frontend import NemoMelFrontEnd
from ..nemo.transformer import DecoderState, Head, TransformerDecoder
from .config import CohereConfig


def dither(audio: torch.Tensor, lengths: torch.Tensor, scale: float) -> torch.Tensor:
    """transformers' deterministic dither: row i's first n_i samples get `scale` x N(0, 1) numbers drawn by
    torch's CPU generator seeded with n_i (so a row's noise does not depend on its batch), before
    pre-emphasis. Drawn on the CPU whatever the device (a GPU generator draws other numbers)."""
    if scale <= 0:
        return audio
    out = audio.clone()
    g = torch.Generator(device="cpu")
    for i, n in enumerate(lengths.tolist()):
        n = min(int(n), audio.shape[1])
        if n <= 0:
            continue
        g.manual_seed(n)
        noise = torch.randn(n, dtype=torch.float32, generator=g)
        out[i, :n] += (scale * noise).to(out.device)
    return out


class CohereFrontEnd(NemoMelFrontEnd):
    """NeMo's mel features (transformers' `CohereAsrFeatureExtractor` computes the same: centred STFT of a
    symmetric Hann window, power, slaney mel, log(x + 2^-24), per-feature normalization over the valid
    frames, padded frames 0, no padding to a multiple of frames) after the dither."""

    def __init__(self, config: CohereConfig):
        super().__init__(config.preprocessor)
        self.dither_scale = config.dither

    @torch.no_grad()
    def forward(self, audio: torch.Tensor, lengths: torch.Tensor):
        return super().forward(dither(audio.float(), lengths, self.dither_scale), lengths)


class CohereModel(nn.Module):
    """Front end + FastConformer encoder + projection + Transformer decoder + head."""

    def __init__(self, config: CohereConfig):
        super().__init__()
        self.config = config
        self.sample_rate = config.sample_rate
        self.preprocessor = CohereFrontEnd(config)
        self.encoder = ConformerEncoder(config.encoder)
        d = config.decoder
        self.encoder_decoder_proj = nn.Linear(config.encoder.d_model, d.hidden)
        self.transf_decoder = TransformerDecoder(d)
        self.log_softmax = Head(d.hidden, d.vocab_size)
        self.vocab_size = d.vocab_size
        self.max_positions = d.max_positions
        self.frame_stride = self.preprocessor.hop_length * self.encoder.subsampling_factor

    # -- loading
    def load_checkpoint(self, sd: dict) -> None:
        """Tensors under the checkpoint's names (the `model.` prefix already removed); KeyError naming
        what is missing, unexpected or of another shape."""
        own = {k: v for k, v in sd.items() if not k.endswith("num_batches_tracked")}
        if self.config.tie:  # transformers ties the head's weight to the token embedding (a stored one is replaced)
            emb = own.get("transf_decoder._embedding.token_embedding.weight")
            if emb is not None:
                own["log_softmax.mlp.layer0.weight"] = emb
        for k, v in own.items():
            if not v.is_floating_point():
                raise KeyError(f"checkpoint tensor {k} is {v.dtype}, not floating point")
        adopt(self, {k: v.float() for k, v in own.items()}, lambda: NemoMelFrontEnd(self.config.preprocessor))

    # -- running
    @torch.no_grad()
    def features(self, audio: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """audio [B, samples] and lengths -> features [B, n_mels, T] and valid frames [B]."""
        return self.preprocessor(audio, lengths)

    @torch.no_grad()
    def encode(self, audio: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """audio [B, samples] and lengths -> the states the decoder attends to [B, T, hidden] (after the
        projection) and their lengths (encoder frames)."""
        feats, flen = self.features(audio, lengths)
        enc, enc_len = self.encode_features(feats, flen)
        return self.project(enc), enc_len

    @torch.no_grad()
    def encode_features(self, feats: torch.Tensor, flen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """features -> the encoder's output [B, T, d_model] and lengths."""
        dtype = next(self.encoder.parameters()).dtype
        enc, enc_len = self.encoder(feats.to(dtype), flen)
        return enc.transpose(1, 2), enc_len

    @torch.no_grad()
    def project(self, enc: torch.Tensor) -> torch.Tensor:
        return self.encoder_decoder_proj(enc.to(self.encoder_decoder_proj.weight.dtype))

    @torch.no_grad()
    def start(self, states: torch.Tensor, lengths: torch.Tensor) -> DecoderState:
        """A decoder state over encoder states [B, T, hidden] (their valid lengths [B])."""
        return self.transf_decoder.start(states, lengths)

    @torch.no_grad()
    def step(self, ids: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """Feeds ids [rows, L] at the state's next positions (the cache grows by L) -> the head's logits
        of the last position [rows, vocab], float32."""
        return self.log_softmax.mlp.layer0(self.transf_decoder.last_hidden(ids, state)).float()


def pcm_batch(pcm: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mono float32 inputs -> a zero-padded [B, samples] tensor and the lengths."""
    n = max(len(p) for p in pcm)
    audio = torch.zeros(len(pcm), n)
    for i, p in enumerate(pcm):
        audio[i, :len(p)] = torch.from_numpy(np.ascontiguousarray(p, dtype=np.float32))
    return audio, torch.tensor([len(p) for p in pcm], dtype=torch.long)

"""Canary's network: NeMo's front end and FastConformer encoder, the projection to the decoder's width, and
NeMo's Transformer decoder with its output head (all but the projection in transcribe/nemo/).

Module and parameter names follow NeMo's state dict (`encoder_decoder_proj.*`, `transf_decoder._embedding.*`,
`transf_decoder._decoder.layers.{i}.{layer_norm_1,first_sub_layer,...}`, `log_softmax.mlp.layer0.*`), so a
checkpoint loads without renaming. The decoder runs with a key/value cache (`DecoderState`): the prompt in
one call, then one token a step, each at its own position of the fixed sinusoidal table, as NeMo's
generators feed it (NeMo caches each layer's input states and recomputes keys and values from them; the
products are the same)."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..nemo.checkpoint import adopt, own_names
from ..nemo.conformer import ConformerEncoder
from ..nemo.frontend import NemoMelFrontEnd
from ..nemo.transformer import DecoderState, Head, TransformerDecoder
from .config import CanaryConfig, parse_config


class CanaryModel(nn.Module):
    """Front end + FastConformer encoder + (projection) + Transformer decoder + head."""

    def __init__(self, cfg: dict, config: Optional[CanaryConfig] = None):
        """`cfg`: NeMo's model config; `config`: its parsed form when a loader adjusted it (a setting NeMo's
        config has no key for, such as transformers' per-head width), else parsed from `cfg`."""
        super().__init__()
        config = parse_config(cfg) if config is None else config
        self.cfg = cfg
        self.config: CanaryConfig = config
        self.sample_rate = config.sample_rate
        self.preprocessor = NemoMelFrontEnd(config.preprocessor)
        self.encoder = ConformerEncoder(config.encoder)
        d = config.decoder
        self.encoder_decoder_proj = nn.Linear(config.encoder.d_model, d.hidden) if config.projection else None
        self.transf_decoder = TransformerDecoder(d)
        self.log_softmax = Head(d.hidden, d.vocab_size)
        self.vocab_size = d.vocab_size
        self.max_positions = d.max_positions
        # Seconds per encoder frame: hop x subsampling / rate (`frame_seconds`).
        self.frame_stride = self.preprocessor.hop_length * self.encoder.subsampling_factor

    def frame_seconds(self, frames: float) -> float:
        """The one place where encoder frames (a timestamp token's unit) become seconds."""
        return float(frames) * self.frame_stride / self.sample_rate

    # -- loading
    def load_nemo_state_dict(self, sd: dict) -> None:
        adopt(self, own_names(sd), lambda: NemoMelFrontEnd(self.config.preprocessor))

    # -- running
    @torch.no_grad()
    def encode(self, audio: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """audio [B, samples] and lengths -> the states the decoder attends to [B, T, hidden] and their
        lengths (encoder frames)."""
        feats, flen = self.preprocessor(audio, lengths)
        dtype = next(self.encoder.parameters()).dtype
        enc, enc_len = self.encoder(feats.to(dtype), flen)
        states = enc.transpose(1, 2)
        if self.encoder_decoder_proj is not None:
            states = self.encoder_decoder_proj(states.to(self.encoder_decoder_proj.weight.dtype))
        return states, enc_len

    @torch.no_grad()
    def start(self, states: torch.Tensor, lengths: torch.Tensor) -> DecoderState:
        """A decoder state over encoder states [B, T, hidden] (their valid lengths [B])."""
        return self.transf_decoder.start(states, lengths)

    @torch.no_grad()
    def step(self, ids: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """Feeds ids [rows, L] at the state's next positions (the cache grows by L) -> the head's logits
        of the last position [rows, vocab], float32."""
        return self.log_softmax.mlp.layer0(self.transf_decoder.last_hidden(ids, state)).float()

"""Sortformer's network: NeMo's front end and FastConformer encoder (transcribe/nemo/), the projection to the
Transformer's width, NeMo's `TransformerEncoder`, and the speaker head (ReLU, Linear, ReLU, Linear, sigmoid):
per-frame activity probabilities of `n_spk` speakers, one frame per `subsampling_factor` mel frames (80 ms).

Module and parameter names follow NeMo's state dict (`encoder.*`, `sortformer_modules.{encoder_proj,
first_hidden_to_hidden,single_hidden_to_spks,hidden_to_spks}.*`, `transformer_encoder.layers.{i}.*`), so a
checkpoint loads without renaming (`hidden_to_spks`, in every checkpoint, is not used by NeMo's inference).
"""
from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from ..nemo.checkpoint import adopt, own_names
from ..nemo.conformer import ConformerEncoder
from ..nemo.frontend import NemoMelFrontEnd
from ..nemo.transformer import TransformerEncoder
from .config import SortformerConfig


class _Modules(nn.Module):
    """NeMo's `SortformerModules`: the projection and the head."""

    def __init__(self, fc_d_model: int, tf_d_model: int, n_spk: int, projection: bool = True):
        super().__init__()
        self.encoder_proj = nn.Linear(fc_d_model, tf_d_model) if projection else None
        self.first_hidden_to_hidden = nn.Linear(tf_d_model, tf_d_model)
        self.single_hidden_to_spks = nn.Linear(tf_d_model, n_spk)
        self.hidden_to_spks = nn.Linear(2 * tf_d_model, n_spk)  # in the checkpoint; NeMo's inference never uses it

    def head(self, h: torch.Tensor) -> torch.Tensor:
        h = self.first_hidden_to_hidden(F.relu(h))
        return torch.sigmoid(self.single_hidden_to_spks(F.relu(h)))


class SortformerModel(nn.Module):
    def __init__(self, config: SortformerConfig):
        super().__init__()
        self.config = config
        # NeMo's diarize() runs the front end with pad_to 0 (and no dither)
        pre = config.preprocessor
        self.preprocessor = NemoMelFrontEnd(replace(pre, pad_to=0))
        self.encoder = ConformerEncoder(config.encoder)
        self.sortformer_modules = _Modules(config.fc_d_model, config.tf_d_model, config.n_spk, config.projection)
        t = config.transformer
        self.transformer_encoder = TransformerEncoder(t.hidden_size, t.inner_size, t.num_layers, t.num_attention_heads,
                                                      t.hidden_act, t.pre_ln, t.pre_ln_final_layer_norm)
        self.n_spk = config.n_spk
        self.subsampling_factor = config.subsampling_factor

    def load_nemo_state_dict(self, sd: dict) -> None:
        adopt(self, own_names(sd), lambda: NemoMelFrontEnd(self.preprocessor.config))

    # The precision the network runs in (float32; bfloat16 or float16 when loaded so; int8 layers take float32).
    dtype: torch.dtype = torch.float32

    # -- running
    @torch.no_grad()
    def features(self, audio: torch.Tensor, scale: bool) -> torch.Tensor:
        """audio [samples] float32 -> log-mel [n_mels, T]; `scale`: NeMo's offline input scaling, by 1 / (max + eps)
        (the largest sample, not the largest magnitude)."""
        if scale:
            audio = audio * (1.0 / (audio.max() + self.config.eps))
        feats, frames = self.preprocessor(audio[None], torch.tensor([audio.shape[0]], device=audio.device))
        return feats[0, :, : int(frames[0])]

    @torch.no_grad()
    def pre_encode(self, feats: torch.Tensor) -> torch.Tensor:
        """Mel frames [n_mels, T] -> the subsampling's embeddings [T', fc_d_model] (NeMo's `pre_encode`)."""
        x, _ = self.encoder.pre_encode(feats.T[None].to(self.dtype), torch.tensor([feats.shape[1]], device=feats.device))
        return x[0]

    @torch.no_grad()
    def predict(self, embs: torch.Tensor) -> torch.Tensor:
        """Pre-encoded embeddings [T, fc_d_model] -> speaker probabilities [T, n_spk] (float32): the conformer
        layers, the projection, the Transformer and the head over the whole sequence."""
        x = embs[None].to(self.dtype)
        enc, _ = self.encoder.layers_forward(x, torch.tensor([x.shape[1]], device=x.device))
        h = enc.transpose(1, 2)
        if self.sortformer_modules.encoder_proj is not None:
            h = self.sortformer_modules.encoder_proj(h)
        h = self.transformer_encoder(h)
        return self.sortformer_modules.head(h)[0].float()

    @torch.no_grad()
    def offline(self, feats: torch.Tensor) -> torch.Tensor:
        """NeMo's offline path (`frontend_encoder` + `forward_infer`) on mel frames [n_mels, T] -> [T', n_spk]."""
        return self.predict(self.pre_encode(feats))

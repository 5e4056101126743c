"""The Granite Speech network: the conformer encoder (`ibm.conformer`, shared with the NAR family), the
Q-Former projector and the Granite LM (`llm.model`); tensors in, embeddings and token ids out (no text).

The plus models join the outputs of some encoder layers (`cat_hidden_layers`: 0 is the input projection, i
the output of block i; the middle block's after its self-conditioning, as transformers' in-place sum gives it)
to the last block's along the features before the projector.
"""
from __future__ import annotations

import re
from typing import Mapping, Optional

import torch
from torch import nn

from ..modules import checked_state
from ..ibm.conformer import GraniteEncoder
from ..llm.model import DecoderLM
from .config import GraniteSpeechConfig
from .projector import Projector


# The encoder's and projector's matrix products an int8 model runs as Int8Linear (the LM's: `DecoderLM.quantize_int8`):
# the encoder's input projection, feed-forwards, attention q / kv / out and pointwise convolutions, the Q-Former's
# attention and feed-forward layers and the projector's output map. What stays float: the CTC self-conditioning
# heads (their softmax feeds back into the encoder), the norms, the depthwise convolution, the relative-position
# table, the queries.
INT8_WEIGHTS = re.compile(
    r"^(encoder\.(input_linear|layers\.\d+\.(ff[12]\.(up|down)_proj|attn\.to_(q|kv|out)|conv\.(up|down)_conv))"
    r"|projector\.(linear|qformer\.encoder\.layer\.\d+\.((attention|crossattention)\.(attention\.(query|key|value)"
    r"|output\.dense)|intermediate_query\.dense|output_query\.dense)))\.weight$")


class GraniteSpeechModel(nn.Module):
    def __init__(self, cfg: GraniteSpeechConfig):
        super().__init__()
        self.cfg = cfg
        taps = sorted(cfg.cat_hidden_layers) + [cfg.encoder.num_layers]
        self.encoder = GraniteEncoder(cfg.encoder, taps)
        self.projector = Projector(cfg.projector, cfg.lm.hidden_size)
        self.lm = DecoderLM(cfg.lm)

    @classmethod
    def from_state(cls, cfg: GraniteSpeechConfig, state: Mapping[str, torch.Tensor], lm_state, where: str,
                   dtype: torch.dtype, int8: Optional[torch.dtype] = None) -> "GraniteSpeechModel":
        """The model holding the checkpoint's tensors (`state`: encoder.* and projector.*; `lm_state`: the LM's
        own names) in `dtype`, BatchNorm folded into the depthwise convolutions. `int8` (the dtype the LM computes
        in): an int8 model, the LM quantized first from its weights as stored, then the encoder and projector
        cast to float32 and INT8_WEIGHTS quantized (`quant.quantize_matching`); both dicts are consumed as they load, so that no float
        weight lives beside its copy (the caller holding no other reference)."""
        with torch.device("meta"):
            model = cls(cfg)
        if int8 is not None:
            model.lm = DecoderLM.from_tensors(cfg.lm, lm_state, where, int8=int8)
            dtype = torch.float32
        own = {k: v for k, v in model.state_dict().items()
               if not k.startswith("lm.") and not k.endswith("num_batches_tracked")}
        # the BatchNorms stay float32 until they are folded into the convolutions below
        loaded = checked_state({k: v.shape for k, v in own.items()}, state, "the", where, dtype,
                               keep_float=lambda k: "batch_norm" in k, consume=int8 is not None)
        model.load_state_dict(loaded, strict=False, assign=True)
        del loaded
        for layer in model.encoder.layers:  # BatchNorm's buffers: a fresh module's, then the checkpoint's
            bn = layer.conv.batch_norm
            bn.num_batches_tracked = torch.zeros((), dtype=torch.long)
        model.encoder.fold_batch_norm()
        for layer in model.encoder.layers:
            conv = layer.conv.depth_conv.conv
            conv.weight.data = conv.weight.data.to(dtype)
            conv.bias.data = conv.bias.data.to(dtype)
        if int8 is not None:
            from ..quant import quantize_matching

            quantize_matching(model, INT8_WEIGHTS.match)
        else:
            model.lm = DecoderLM.from_tensors(cfg.lm, lm_state, where, dtype)
        return model.eval()

    @property
    def dtype(self) -> torch.dtype:
        return self.lm.dtype

    def audio_embeddings(self, features: torch.Tensor, lengths: torch.Tensor, counts: list[int]) -> list[torch.Tensor]:
        """features [B, T, 160] (zeros past each input's frames), lengths [B] (frames) -> each input's LM
        embeddings [counts[i], D] (its first ceil(T_i / window) * queries projector outputs)."""
        out = self.encoder(features, lengths)
        x = torch.cat(out.taps, dim=-1) if len(out.taps) > 1 else out.taps[0]
        t = x.shape[1]
        if bool((lengths < t).any()):  # zeros past each input, as its own window padding is
            x = x * (torch.arange(t, device=x.device)[None, :] < lengths[:, None])[:, :, None].to(x.dtype)
        emb = self.projector(x.to(self.projector.qformer.layernorm.weight.dtype))
        return [emb[i, :n] for i, n in enumerate(counts)]

"""Granite Speech 5 CTC's network: IBM's conformer (the blocks of `transcribe.ibm.conformer`, the same
computation under other tensor names) with two changes: the blocks of `subsample_layers` halve the frame rate
(a stride-2 depthwise convolution added to the mean of each pair of frames; an odd last frame dropped), and the
CTC head reads the last block (tied to the self-conditioning head `out` in the published model).

transformers' names (`encoder.layers.{i}.feed_forward1.linear1`, `self_attn.{q,k,v,o}_proj`,
`conv.pointwise_lin1`, `conv.norm` = the BatchNorm, `norm_conv` = the LayerNorm before it, ...) are renamed to
the shared blocks' at load (`shared_names`); keys and values are one matrix there.
"""
from __future__ import annotations

import re
from typing import Optional

import torch
from torch import nn

from ..errors import ModelError
from ..ibm.conformer import ConformerBlock, ConvModule, compute_dtype, padding_masks
from .config import Config


class SubsamplingBlock(ConformerBlock):
    """A conformer block whose convolution has stride 2 and whose residual is the mean of frame pairs."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.conv = ConvModule(cfg, stride=2)

    def forward(self, x, key_bias, valid):
        x = x + 0.5 * self.ff1(x)
        x = x + self.attn(x, key_bias)
        conv = self.conv(x, valid)
        b, t, d = x.shape
        half = t // 2
        pooled = x[:, : 2 * half].reshape(b, half, 2, d).mean(dim=2)
        x = pooled + conv[:, :half]
        x = x + 0.5 * self.ff2(x)
        return self.post_norm(x)


class GraniteSpeech5CTC(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        enc = cfg.encoder
        self.input_linear = nn.Linear(enc.input_dim, enc.hidden_dim)
        self.layers = nn.ModuleList(SubsamplingBlock(enc) if i in cfg.subsample_layers else ConformerBlock(enc)
                                    for i in range(enc.num_layers))
        self.out = nn.Linear(enc.hidden_dim, enc.output_dim)
        self.out_mid = nn.Linear(enc.output_dim, enc.hidden_dim)
        self.ctc_head = None if cfg.tied else nn.Linear(enc.hidden_dim, enc.output_dim)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Encoder frames of inputs of `lengths` stacked feature frames: halved (rounded down) per subsampling."""
        for _ in self.cfg.subsample_layers:
            lengths = lengths // 2
        return lengths

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """features [B, T, 4 * num_mel_bins] (anything past a length is ignored), lengths [B] -> CTC logits
        [B, T', V] (float32) and their lengths [B]."""
        cfg = self.cfg
        dtype = compute_dtype(self.input_linear)
        x = self.input_linear(features.to(dtype))
        for i, layer in enumerate(self.layers):
            valid, key_bias = padding_masks(lengths, x.shape[1], cfg.encoder.context_size, dtype)
            x = layer(x, key_bias, valid)
            if i in cfg.subsample_layers:
                lengths = lengths // 2
            if i + 1 == cfg.encoder.self_conditioning_layer:
                probs = torch.softmax(self.out(x).float(), dim=-1)
                x = x + self.out_mid(probs.to(dtype))
        head = self.out if self.ctc_head is None else self.ctc_head
        return head(x).float(), lengths

    def quantize_int8(self) -> int:
        """The layers INT8_WEIGHTS names as Int8Linear (int8 weights per output row, activations per row at run
        time); the model must be float32. Returns how many were quantized."""
        from ..quant import quantize_matching

        return quantize_matching(self, INT8_WEIGHTS.match)

    def fold_batch_norm(self) -> None:
        for layer in self.layers:
            layer.conv.fold_batch_norm()


# dtype int8: the conformer's matrix products (transcribe/quant.py's Int8Linear); the input projection's,
# the self-conditioning heads' and the CTC head's stay float32 (the first reads the features, the heads' softmax
# and argmax decide the output)
INT8_WEIGHTS = re.compile(r"^layers\.\d+\.(ff[12]\.(up|down)_proj|attn\.to_(q|kv|out)|conv\.(up|down)_conv)\.weight$")


_BLOCK = {
    "norm_feed_forward1": "ff1.pre_norm", "feed_forward1.linear1": "ff1.up_proj",
    "feed_forward1.linear2": "ff1.down_proj", "norm_feed_forward2": "ff2.pre_norm",
    "feed_forward2.linear1": "ff2.up_proj", "feed_forward2.linear2": "ff2.down_proj",
    "norm_self_att": "attn.pre_norm", "self_attn.q_proj": "attn.to_q", "self_attn.o_proj": "attn.to_out",
    "self_attn.rel_pos_emb": "attn.rel_pos_emb", "norm_conv": "conv.norm", "conv.pointwise_lin1": "conv.up_conv",
    "conv.depthwise_conv": "conv.depth_conv.conv", "conv.norm": "conv.batch_norm",
    "conv.pointwise_lin2": "conv.down_conv", "norm_out": "post_norm",
}
_LAYER = re.compile(r"^encoder\.layers\.(\d+)\.(.+)\.(weight|bias|running_mean|running_var|num_batches_tracked)$")
_TOP = {"encoder.input_linear": "input_linear", "encoder.out": "out", "encoder.out_mid": "out_mid",
        "ctc_head": "ctc_head"}


def shared_names(tensors: dict, cfg: Config) -> dict:
    """transformers' tensors -> this module's state dict (keys and values concatenated, pointwise weights as
    1-wide convolutions, zero biases where attention_bias is off); a ModelError
    for a tensor it does not know."""
    out: dict = {}
    kv: dict = {}
    for name, t in tensors.items():
        if name.startswith("model."):  # a base_model_prefix some savers add
            name = name[len("model."):]
        m = _LAYER.match(name)
        if m:
            i, part, kind = m.groups()
            if part in ("self_attn.k_proj", "self_attn.v_proj"):
                kv[(i, part[-6])] = t
                continue
            if part not in _BLOCK:
                raise ModelError(f"unexpected tensor {name}")
            if part in ("conv.pointwise_lin1", "conv.pointwise_lin2") and kind == "weight":
                t = t[:, :, None]
            out[f"layers.{i}.{_BLOCK[part]}.{kind}"] = t
            continue
        stem, _, kind = name.rpartition(".")
        if stem not in _TOP or kind not in ("weight", "bias"):
            raise ModelError(f"unexpected tensor {name}")
        if stem == "ctc_head" and cfg.tied:
            continue  # the same tensor as encoder.out (some savers write it anyway)
        out[f"{_TOP[stem]}.{kind}"] = t
    for i in range(cfg.encoder.num_layers):
        k, v = kv.pop((str(i), "k"), None), kv.pop((str(i), "v"), None)
        if k is None or v is None:
            raise ModelError(f"encoder.layers.{i}.self_attn: k_proj or v_proj missing")
        out[f"layers.{i}.attn.to_kv.weight"] = torch.cat([k, v], dim=0)
        if not cfg.ffn_bias:
            for ff in ("ff1", "ff2"):
                for lin, n in (("up_proj", cfg.encoder.hidden_dim * cfg.encoder.feedforward_mult),
                               ("down_proj", cfg.encoder.hidden_dim)):
                    out.setdefault(f"layers.{i}.{ff}.{lin}.bias", torch.zeros(n, dtype=k.dtype))
    if kv:
        raise ModelError(f"unexpected attention tensors of blocks {sorted({i for i, _ in kv})}")
    return out


def build(cfg: Config, tensors: dict, dtype: Optional[torch.dtype] = None) -> GraniteSpeech5CTC:
    """The network with `tensors` (transformers' names) loaded, BatchNorm folded, in eval mode, in `dtype`
    (None: the tensors' own). The BatchNorm and the depthwise convolution it folds into are folded in float32
    (transformers keeps the BatchNorm in float32), then cast."""
    with torch.device("meta"):
        model = GraniteSpeech5CTC(cfg)
    state = shared_names(tensors, cfg)
    if dtype is not None:
        state = {k: v if not v.is_floating_point() else v.float() if ".conv.batch_norm." in k or
                 ".conv.depth_conv." in k else v.to(dtype) for k, v in state.items()}
    expected = model.state_dict()
    for k in expected:
        if k.endswith("num_batches_tracked"):  # a counter of training steps: not every saver writes it
            state.setdefault(k, torch.zeros((), dtype=torch.long))
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ModelError(f"weights do not match the config: missing {missing[:4]}, unexpected {unexpected[:4]}")
    for k, v in state.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise ModelError(f"tensor {k}: shape {tuple(v.shape)}, the config says {tuple(expected[k].shape)}")
    model.load_state_dict(state, assign=True)  # (the relative distances are made on the CPU, not the meta device)
    model.fold_batch_norm()
    if dtype is not None:
        model.to(dtype)
    model.eval()
    return model.requires_grad_(False)

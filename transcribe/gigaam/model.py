"""GigaAM v3 as modules: the log-mel front end, the conformer encoder (conv1d subsampling, rotary attention
applied to the layer's input before the query and key projections, a layer-norm convolution module) and
the two heads (CTC: a 1x1 convolution; RNN-T: an LSTM predictor whose start input is zeros, and a
ReLU joint). Parameter names are the `gigaam` package's, so its state dict loads as it is.

The operations follow the reference's order on the same data (the front end on its stored filterbank and
window, attention through scaled_dot_product_attention with the same mask), so on one machine the float32
results are the reference's bit for bit; across CPUs they move in the last bits (see tests/test_gigaam.py)."""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..modules import label_lstm_step
from .config import GigaAMConfig


class FrontEnd(nn.Module):
    """Waveform [B, N] -> log-mel [B, n_mels, frames]: |STFT|^2 (periodic Hann, no centering) through the
    HTK mel filterbank, natural log of the power clamped to [1e-9, 1e9] (torchaudio's MelSpectrogram and
    gigaam's SpecScaler). The filterbank and window are the checkpoint's own buffers."""

    def __init__(self, cfg: GigaAMConfig):
        super().__init__()
        self.n_fft, self.hop, self.win = cfg.n_fft, cfg.hop_length, cfg.win_length
        self.register_buffer("fb", torch.zeros(cfg.n_fft // 2 + 1, cfg.n_mels))
        self.register_buffer("window", torch.zeros(cfg.win_length))

    def frames(self, samples: Tensor) -> Tensor:
        return torch.div(samples - self.win, self.hop, rounding_mode="floor") + 1

    def forward(self, wav: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        spec = torch.stft(wav, self.n_fft, self.hop, self.win, self.window, center=False, normalized=False,
                          onesided=True, return_complex=True).abs().pow(2.0)
        mel = torch.matmul(spec.transpose(-1, -2), self.fb).transpose(-1, -2)
        return torch.log(mel.clamp_(1e-9, 1e9)), self.frames(lengths).long()


class Subsampling(nn.Module):
    """Strided conv1d stages (kernel k, stride 2, padding (k-1)/2), each followed by ReLU; after every
    convolution the frames past each input's length are zeroed, as the reference does for batches."""

    def __init__(self, cfg: GigaAMConfig):
        super().__init__()
        k = cfg.subs_kernel_size
        self.k, self.pad, self.stages = k, (k - 1) // 2, int(math.log2(cfg.subsampling_factor))
        layers, c = [], cfg.feat_in
        for _ in range(self.stages):
            layers += [nn.Conv1d(c, cfg.d_model, k, stride=2, padding=self.pad), nn.ReLU()]
            c = cfg.d_model
        self.conv = nn.Sequential(*layers)

    def out_len(self, lengths: Tensor, stages: int) -> Tensor:
        lengths = lengths.to(torch.float)
        for _ in range(stages):
            lengths = torch.floor((lengths + 2 * self.pad - self.k) / 2 + 1.0)
        return lengths.to(torch.int)

    @staticmethod
    def _mask(x: Tensor, lengths: Tensor) -> Tensor:
        pad = torch.arange(x.shape[2], device=x.device)[None, :] >= lengths[:, None]
        return x.masked_fill(pad[:, None], 0.0)

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, T, F] -> [B, T', D]."""
        x = self._mask(x.transpose(1, 2), lengths)
        cur = lengths
        for m in self.conv:
            x = m(x)
            if isinstance(m, nn.Conv1d):
                cur = self.out_len(cur, 1)
                x = self._mask(x, cur)
        return x.transpose(1, 2), self.out_len(lengths, self.stages)


def rotary(length: int, dim: int, base: float, device) -> tuple[Tensor, Tensor]:
    """cos, sin [T, 1, 1, dim] of positions 0..T-1 (frequencies base^(-2i/dim), each used twice)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    t = torch.arange(length).type_as(inv_freq)
    emb = torch.cat([torch.outer(t, inv_freq)] * 2, dim=-1).to(device)
    return emb.cos()[:, None, None, :], emb.sin()[:, None, None, :]


def _half_turn(x: Tensor) -> Tensor:
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([-b, a], dim=-1)


class RotaryAttention(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.h, self.d_k = heads, d_model // heads
        self.linear_q = nn.Linear(d_model, d_model)
        self.linear_k = nn.Linear(d_model, d_model)
        self.linear_v = nn.Linear(d_model, d_model)
        self.linear_out = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Optional[Tensor]) -> Tensor:
        b, t, d = x.shape
        xs = x.transpose(0, 1).view(t, b, self.h, self.d_k)  # [T, B, H, d_k], the reference's layout
        rot = (xs * cos) + (_half_turn(xs) * sin)
        rot = rot.view(t, b, d).transpose(0, 1)
        q = self.linear_q(rot).view(b, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(rot).view(b, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(xs.view(t, b, d).transpose(0, 1)).view(b, -1, self.h, self.d_k).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else ~mask.unsqueeze(1))
        return self.linear_out(out.transpose(1, 2).reshape(b, t, d))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.activation = nn.SiLU()
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.activation(self.linear1(x)))


class ConvModule(nn.Module):
    """Pointwise (2D) -> GLU -> depthwise (k) -> LayerNorm over channels ("batch_norm" is its name in the
    checkpoint) -> SiLU -> pointwise."""

    def __init__(self, d_model: int, kernel: int):
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(d_model, 2 * d_model, 1)
        self.depthwise_conv = nn.Conv1d(d_model, d_model, kernel, padding=(kernel - 1) // 2, groups=d_model)
        self.batch_norm = nn.LayerNorm(d_model)
        self.activation = nn.SiLU()
        self.pointwise_conv2 = nn.Conv1d(d_model, d_model, 1)

    def forward(self, x: Tensor, pad_mask: Optional[Tensor]) -> Tensor:
        """[B, T, C] -> [B, T, C]. The pointwise convolutions may be int8 matrix products (`quant.Int8Linear`,
        dtype int8), which take [..., C] rows."""
        quantized = not isinstance(self.pointwise_conv1, nn.Conv1d)
        x = self.pointwise_conv1(x).transpose(1, 2) if quantized else self.pointwise_conv1(x.transpose(1, 2))
        x = F.glu(x, dim=1)
        if pad_mask is not None:
            x = x.masked_fill(pad_mask.unsqueeze(1), 0.0)
        x = self.depthwise_conv(x)
        x = self.activation(self.batch_norm(x.transpose(1, 2)))
        if quantized:
            return self.pointwise_conv2(x)
        return self.pointwise_conv2(x.transpose(1, 2)).transpose(1, 2)


class ConformerLayer(nn.Module):
    def __init__(self, cfg: GigaAMConfig):
        super().__init__()
        d = cfg.d_model
        self.norm_feed_forward1 = nn.LayerNorm(d)
        self.feed_forward1 = FeedForward(d, d * cfg.ff_expansion_factor)
        self.norm_conv = nn.LayerNorm(d)
        self.conv = ConvModule(d, cfg.conv_kernel_size)
        self.norm_self_att = nn.LayerNorm(d)
        self.self_attn = RotaryAttention(d, cfg.n_heads)
        self.norm_feed_forward2 = nn.LayerNorm(d)
        self.feed_forward2 = FeedForward(d, d * cfg.ff_expansion_factor)
        self.norm_out = nn.LayerNorm(d)

    def forward(self, x, cos, sin, att_mask, pad_mask):
        x = x + self.feed_forward1(self.norm_feed_forward1(x)) * 0.5
        x = x + self.self_attn(self.norm_self_att(x), cos, sin, att_mask)
        x = x + self.conv(self.norm_conv(x), pad_mask)
        x = x + self.feed_forward2(self.norm_feed_forward2(x)) * 0.5
        return self.norm_out(x)


class Encoder(nn.Module):
    def __init__(self, cfg: GigaAMConfig):
        super().__init__()
        self.cfg = cfg
        self.pre_encode = Subsampling(cfg)
        self.layers = nn.ModuleList(ConformerLayer(cfg) for _ in range(cfg.n_layers))

    def forward(self, feats: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """log-mel [B, F, T] -> encoded [B, D, T'] and lengths [B]."""
        x, lengths = self.pre_encode(feats.transpose(1, 2), lengths)
        t = x.shape[1]
        cos, sin = rotary(t, self.cfg.d_model // self.cfg.n_heads, float(self.cfg.pos_emb_max_len), x.device)
        valid = torch.arange(t, device=x.device).expand(lengths.shape[0], -1) < lengths.unsqueeze(-1)
        att_mask = None
        if x.shape[0] > 1:  # the reference masks only batches (a lone input attends everywhere)
            m = valid.unsqueeze(1).repeat([1, t, 1])
            att_mask = ~torch.logical_and(m, m.transpose(1, 2))
        pad_mask = ~valid
        for layer in self.layers:
            x = layer(x, cos.to(x.dtype), sin.to(x.dtype), att_mask, pad_mask)
        return x.transpose(1, 2), lengths


class CTCHead(nn.Module):
    def __init__(self, d_model: int, classes: int):
        super().__init__()
        self.decoder_layers = nn.Sequential(nn.Conv1d(d_model, classes, 1))

    def forward(self, enc: Tensor) -> Tensor:
        """[B, D, T] -> log-probs [B, T, classes]."""
        return F.log_softmax(self.decoder_layers(enc).transpose(1, 2), dim=-1)


class Predictor(nn.Module):
    def __init__(self, hidden: int, layers: int, classes: int):
        super().__init__()
        self.blank = classes - 1
        self.embed = nn.Embedding(classes, hidden, padding_idx=self.blank)
        self.lstm = nn.LSTM(hidden, hidden, layers)

    def forward(self, labels: Tensor, state) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """labels [N] (blank: the start, a zero input as gigaam's decoding gives) -> output [N, H], state: one
        step of the LSTM written out (`modules.label_lstm_step`: 20x cheaper than a call of nn.LSTM)."""
        return label_lstm_step(self.__dict__.setdefault("_fused", {}), self.embed.weight, self.blank, self.lstm,
                               False, labels, state)


class Joint(nn.Module):
    def __init__(self, enc_hidden: int, pred_hidden: int, hidden: int, classes: int):
        super().__init__()
        self.pred = nn.Linear(pred_hidden, hidden)
        self.enc = nn.Linear(enc_hidden, hidden)
        self.joint_net = nn.Sequential(nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, enc: Tensor, pred: Tensor) -> Tensor:
        """Projected encoder frames and predictor outputs (each [..., hidden]) -> logits."""
        return self.joint_net(enc + pred)


class RNNTHead(nn.Module):
    def __init__(self, cfg: GigaAMConfig):
        super().__init__()
        self.decoder = Predictor(cfg.pred_hidden, cfg.pred_layers, cfg.classes)
        self.joint = Joint(cfg.d_model, cfg.pred_hidden, cfg.joint_hidden, cfg.classes)


class GigaAM(nn.Module):
    """Front end, encoder and one head (`cfg.head`: "ctc" or "rnnt")."""

    def __init__(self, cfg: GigaAMConfig):
        super().__init__()
        self.cfg = cfg
        self.frontend = FrontEnd(cfg)
        self.encoder = Encoder(cfg)
        self.head = CTCHead(cfg.d_model, cfg.classes) if cfg.head == "ctc" else RNNTHead(cfg)

    @property
    def blank(self) -> int:
        return self.cfg.classes - 1

    def encode(self, wav: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Waveforms [B, N] (zero-padded) and their lengths -> encoded [B, D, T'] and lengths."""
        feats, flen = self.frontend(wav, lengths)
        dtype = next(p.dtype for p in self.encoder.parameters() if p.is_floating_point())
        enc, lengths = self.encoder(feats.to(dtype), flen)
        return enc.float(), lengths

"""FastConformer's convolutional subsampling (NeMo `ConvSubsampling`), inference only.

Parameter names follow NeMo's state dict (`pre_encode.conv.{i}`, `pre_encode.out`).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


# --------------------------------------------------------------------------------------------------
# Subsampling
# --------------------------------------------------------------------------------------------------


class ConvSubsampling(nn.Module):
    """`dw_striding` / `striding` 2-D convolutional subsampling by 2, 4, 8 or 16.

    Time frames past each sequence's length are zeroed before every layer, as NeMo does, so a
    batch gives the same result as one file at a time. Long inputs run in overlapping time chunks,
    which gives the same numbers with bounded memory.
    """

    def __init__(
        self,
        feat_in: int,
        d_model: int,
        factor: int,
        conv_channels: int,
        kind: str = "dw_striding",
        causal: bool = False,
    ):
        super().__init__()
        if kind not in ("dw_striding", "striding"):
            raise ValueError(f"encoder.subsampling = {kind!r} is not implemented (dw_striding, striding)")
        n = int(math.log2(factor))
        if 2**n != factor or n < 1:
            raise ValueError(f"encoder.subsampling_factor = {factor!r} is not implemented (a power of 2)")
        self.factor = factor
        self.kind = kind
        self.stages = n
        self.kernel = 3
        self.stride = 2
        self.causal = causal
        if causal:
            self.pad = (self.kernel - 1, self.stride - 1)
        else:
            self.pad = ((self.kernel - 1) // 2, (self.kernel - 1) // 2)
        c = conv_channels
        layers: list[nn.Module] = []
        # The index of each module matches NeMo's nn.Sequential so state dict keys line up.
        layers.append(nn.Conv2d(1, c, self.kernel, self.stride, 0))
        layers.append(nn.ReLU())
        for _ in range(n - 1):
            if kind == "dw_striding":
                layers.append(nn.Conv2d(c, c, self.kernel, self.stride, 0, groups=c))
                layers.append(nn.Conv2d(c, c, 1, 1, 0))
            else:
                layers.append(nn.Conv2d(c, c, self.kernel, self.stride, 0))
            layers.append(nn.ReLU())
        self.conv = nn.ModuleList(layers)
        f = feat_in
        for _ in range(n):
            f = (f + sum(self.pad) - self.kernel) // self.stride + 1
        self.out = nn.Linear(c * f, d_model)
        # Elements of the first conv output above which the input is processed in time chunks:
        # small enough (16 MB) that the convolutions' buffers are reused from the heap.
        self.chunk_elements = 1 << 22

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        x = lengths.to(torch.float32)
        for _ in range(self.stages):
            x = torch.floor((x + sum(self.pad) - self.kernel) / self.stride + 1.0)
        return x.to(torch.long)

    def _convs(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """x [B, 1, T, F] -> [B, C, T', F'], zeroing frames past each length before every layer."""
        if self.kind == "dw_striding":
            return self._convs_channels_last(x[:, 0], lengths).permute(0, 3, 1, 2)
        cur = lengths.tolist()
        x = _zero_tails(x.clone(), cur)
        left, right = self.pad
        for layer in self.conv:
            if isinstance(layer, nn.Conv2d) and layer.stride != (1, 1):
                if left == right:
                    x = F.conv2d(x, layer.weight, layer.bias, layer.stride, left, 1, layer.groups)
                else:
                    x = layer(F.pad(x, (left, right, left, right)))
                cur = [(n + left + right - self.kernel) // self.stride + 1 for n in cur]
            elif isinstance(layer, nn.ReLU):
                x = torch.relu_(x)
            else:
                x = layer(x)
            x = _zero_tails(x, cur)
        return x

    def _convs_channels_last(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """dw_striding on x [B, T, F] -> [B, T', F', C] (channels last), the same layers as `_convs`.

        The first convolution has one input channel, which oneDNN runs at a few percent of the
        machine's speed (and slower still in bfloat16); here it is one matrix product of the 9
        strided views of the input with the [C, 9] kernel. Every later layer reads and writes
        channels last: the depthwise convolutions take that layout natively, the pointwise ones
        are plain matrix products over the channels."""
        cur = lengths.tolist()
        left, right = self.pad
        k, st = self.kernel, self.stride
        xp = F.pad(_zero_tails(x.clone()[:, None], cur)[:, 0], (left, right, left, right))
        t1 = (xp.shape[1] - k) // st + 1
        f1 = (xp.shape[2] - k) // st + 1
        taps = torch.stack([xp[:, a : a + st * (t1 - 1) + 1 : st, c : c + st * (f1 - 1) + 1 : st]
                            for a in range(k) for c in range(k)], dim=-1)  # [B, T1, F1, k*k]
        w0 = self.conv[0]
        y = torch.relu_(F.linear(taps, w0.weight.view(w0.out_channels, k * k), w0.bias))  # [B, T1, F1, C]
        cur = [(n + left + right - k) // st + 1 for n in cur]
        y = _zero_tails_last(y, cur)
        layers = list(self.conv[2:])
        i = 0
        while i < len(layers):
            dw, pw = layers[i], layers[i + 1]
            z = y.permute(0, 3, 1, 2)  # NCHW view of channels-last memory
            if left == right:
                z = F.conv2d(z, dw.weight, dw.bias, st, left, 1, dw.groups)
            else:
                z = F.conv2d(F.pad(z, (left, right, left, right)), dw.weight, dw.bias, st, 0, 1, dw.groups)
            cur = [(n + left + right - k) // st + 1 for n in cur]
            z = _zero_tails(z, cur).permute(0, 2, 3, 1)  # [B, T', F', C]
            y = torch.relu_(F.linear(z, pw.weight.view(pw.out_channels, pw.in_channels), pw.bias))
            y = _zero_tails_last(y, cur)
            i += 3  # depthwise, pointwise, ReLU
        return y

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """feats [B, T, F] -> [B, T', d_model]."""
        b, t, f = feats.shape
        out_len = self.output_lengths(lengths)
        c = self.conv[0].out_channels
        if b * c * (t // 2) * (f // 2) <= self.chunk_elements:
            x = self._convs(feats.unsqueeze(1), lengths)
        else:
            x = self._chunked(feats, lengths, c, f)
        b, c, t2, f2 = x.shape
        return self.out(x.transpose(1, 2).reshape(b, t2, c * f2)), out_len

    def _chunked(self, feats: torch.Tensor, lengths: torch.Tensor, c: int, f: int) -> torch.Tensor:
        # Output frame j depends on input frames within a few `factor`s of j*factor; chunks start on
        # multiples of `factor` with a margin on both sides, and the margin's outputs are dropped.
        b, t, _ = feats.shape
        margin = 4 * self.factor
        out_total = int(self.output_lengths(torch.tensor([t]))[0])
        step = max(self.factor, (self.chunk_elements // max(1, b * c * (f // 2))) * 2 // self.factor * self.factor)
        outs = []
        for start in range(0, t, step):
            lo = max(0, start - margin)
            hi = min(t, start + step + margin)
            local = torch.clamp(lengths - lo, min=0)
            y = self._convs(feats[:, lo:hi].unsqueeze(1), local)
            first = (start - lo) // self.factor
            n_out = min(step // self.factor, out_total - start // self.factor)
            outs.append(y[:, :, first : first + n_out])
        return torch.cat(outs, dim=2)


def _zero_tails_last(x: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Zero time frames (dim 1 of [B, T, F, C]) at and past each item's length, in place."""
    t = x.shape[1]
    for i, n in enumerate(lengths):
        if n < t:
            x[i, max(n, 0) :].zero_()
    return x


def _zero_tails(x: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Zero time frames (dim 2) at and past each item's length, in place."""
    t = x.shape[2]
    for i, n in enumerate(lengths):
        if n < t:
            x[i, :, max(n, 0) :].zero_()
    return x

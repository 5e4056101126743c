"""Moonshine Streaming's encoder run incrementally: each front-end frame, each convolution output and each layer's
output frame computed once, as the audio arrives.

- Front end: complete 5 ms frames are normalized, compressed and mapped (`linear` + SiLU) as they come; each
  causal convolution (kernel 5, stride 2) keeps the last inputs its next output reads (zeros before the start: the
  convolution's own left padding), so its outputs are those of the whole input.
- Layers: layer l's output at frame t reads its input frames t - (left - 1) .. t + (right - 1); it is computed once
  those have arrived. Each layer keeps the input frames its next outputs read (at most `left - 1` back plus its
  lookahead), so the state is bounded whatever the stream's length.

The encoder frames come out once every layer's lookahead has arrived (the frames `streaming.py` calls final),
the same values as the whole input's encoding (other matrix shapes: equal up to float rounding). A segment's end
(the audio padded to whole 5 ms frames, no more to come) is encoded by `streaming.py` from its audio instead."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .model import Encoder, window_mask


class StreamEncoder:
    def __init__(self, encoder: Encoder, device, dtype):
        self.enc = encoder
        c = encoder.config
        self.frame_len = c.frame_len
        self.device, self.dtype = device, dtype
        e = encoder.embedder
        h = c.hidden
        # convolution inputs kept for the next outputs: start as the left padding (4 zero frames)
        self.emb = torch.zeros(1, 4, h, device=device, dtype=dtype)           # embedded 5 ms frames
        self.emb_first = -4                                                     # index of emb[0]
        self.n_emb = 0
        self.c1 = torch.zeros(1, 4, e.conv1.out_channels, device=device, dtype=dtype)
        self.c1_first = -4
        self.n_c1 = 0
        self.n_c2 = 0
        self.rest = np.zeros(0, np.float32)                                   # samples of an incomplete frame
        # per layer: its input frames kept, the index of the first, and how many outputs it has made
        self.x = [torch.zeros(1, 0, h, device=device, dtype=dtype) for _ in c.windows]
        self.x_first = [0] * len(c.windows)
        self.done = [0] * len(c.windows)

    @property
    def held_frames(self) -> int:
        return sum(int(x.shape[1]) for x in self.x) + int(self.emb.shape[1]) + int(self.c1.shape[1])

    def _conv(self, conv, buf, first, n_in, n_out):
        """New outputs [n_out, ceil(n_in / 2)) of a stride-2 kernel-5 causal convolution over buf (index first..)."""
        end = -(-n_in // 2)
        if end <= n_out:
            return None, n_out
        a = 2 * n_out - 4 - first
        b = 2 * (end - 1) + 1 - first
        y = F.conv1d(buf[:, a:b].transpose(1, 2), conv.weight, conv.bias, stride=2).transpose(1, 2)
        return y, end

    def feed(self, samples: np.ndarray) -> torch.Tensor:
        """New audio -> the encoder frames [1, n, hidden] that became final (n may be 0)."""
        e = self.enc.embedder
        pcm = np.concatenate([self.rest, np.asarray(samples, np.float32)])
        n = pcm.size // self.frame_len
        self.rest = pcm[n * self.frame_len:]
        if n:
            x = torch.from_numpy(np.ascontiguousarray(pcm[:n * self.frame_len])).to(self.device, self.dtype)
            x = x.reshape(1, n, self.frame_len)
            x = x - x.mean(dim=-1, keepdim=True)
            x = x / (x.pow(2).mean(dim=-1, keepdim=True) + 1e-6).sqrt()
            x = F.silu(e.linear(torch.asinh(torch.exp(e.comp.log_k) * x)))
            self.emb = torch.cat((self.emb, x), dim=1)
            self.n_emb += n
        y, end = self._conv(e.conv1, self.emb, self.emb_first, self.n_emb, self.n_c1)
        if y is not None:
            self.n_c1 = end
            self.c1 = torch.cat((self.c1, F.silu(y)), dim=1)
            keep = 2 * self.n_c1 - 4 - self.emb_first  # the next output reads from 2 n - 4
            self.emb, self.emb_first = self.emb[:, keep:], self.emb_first + keep
        y, end = self._conv(e.conv2, self.c1, self.c1_first, self.n_c1, self.n_c2)
        if y is None:
            return self.emb.new_zeros(1, 0, self.emb.shape[2])
        self.n_c2 = end
        keep = 2 * self.n_c2 - 4 - self.c1_first
        self.c1, self.c1_first = self.c1[:, keep:], self.c1_first + keep
        return self._layers(y)

    def _layers(self, new: torch.Tensor) -> torch.Tensor:
        enc = self.enc
        for i, ((left, right), layer) in enumerate(zip(enc.config.windows, enc.layers)):
            self.x[i] = torch.cat((self.x[i], new), dim=1)
            n_in = self.x_first[i] + self.x[i].shape[1]
            ahead = max(0, right - 1)
            end = n_in - ahead
            if end <= self.done[i]:
                return new.new_zeros(1, 0, new.shape[2])
            q0 = self.done[i] - self.x_first[i]
            q1 = end - self.x_first[i]
            buf = self.x[i]
            new = self._layer(layer, buf, q0, q1, left, right)
            self.done[i] = end
            back = max(0, left - 1)
            drop = max(0, self.done[i] - back - self.x_first[i])
            self.x[i], self.x_first[i] = self.x[i][:, drop:], self.x_first[i] + drop
        return enc.final_norm(new)

    @staticmethod
    def _layer(layer, buf, q0, q1, left, right):
        """The layer's outputs at buf's frames q0..q1-1, the keys being buf's frames (all of them are in the window
        of some query or before it: the mask keeps each query's own)."""
        a = layer.self_attn
        h = layer.input_layernorm(buf)
        t, kv = q1 - q0, buf.shape[1]
        q = a.q_proj(h[:, q0:q1]).view(1, t, a.heads, a.head_dim).transpose(1, 2)
        k = a.k_proj(h).view(1, kv, a.kv_heads, a.head_dim).transpose(1, 2)
        v = a.v_proj(h).view(1, kv, a.kv_heads, a.head_dim).transpose(1, 2)
        if a.kv_heads != a.heads:
            k = k.repeat_interleave(a.heads // a.kv_heads, dim=1)
            v = v.repeat_interleave(a.heads // a.kv_heads, dim=1)
        mask = window_mask(kv, left, right, buf.device)[q0:q1]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = buf[:, q0:q1] + a.o_proj(o.transpose(1, 2).reshape(1, t, -1))
        return x + layer.mlp(layer.post_attention_layernorm(x))

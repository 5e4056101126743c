"""Qwen3-ASR's audio encoder and projector (transformers' `Qwen3ASREncoder` + `Qwen3ASRMultiModalProjector`;
module and tensor names are transformers' below `model.audio_tower.` and `model.multi_modal_projector.`).

The mel features of an input are cut into chunks of 2 * n_window frames (the last one padded with 0.0); three
stride-2 3x3 convolutions with GELU turn each chunk into `chunk_positions` positions (13 for 100 frames) of
conv_channels x remaining mel bins, a linear map (`conv_out`) takes them to d_model, and the same sinusoidal
table (positions 0..12) is added to every chunk. Only the positions the chunk's valid frames give are kept (a
chunk of n valid frames keeps post_cnn(n)). The kept positions of one input are then cut into windows of
`window_chunks` chunks (8 in the published models: n_window_infer = 800 frames), and every pre-LN layer attends
within a window only (transformers' `cu_seqlens`); `ln_post`, then the projector (linear_1, GELU, linear_2) to
the LM's width.

Batching: every window of every input is one row of a padded [windows, window positions, d_model] tensor with a
key mask, attended with scaled-dot-product attention; a window never sees another input's positions, so an
input's result does not depend on its neighbours.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import EncoderConfig, post_cnn

# Chunks run through the convolutions at once: the first one's output is conv_channels x n_mels/2 x n_window values
# a chunk (6 MB in float32 in the published models), held with its GELU and the next convolution's input, so a
# long batch is taken in slices (the chunks are independent): 8 chunks keep that under ~150 MB (32 made a 60 s
# call peak ~0.3 GB higher).
CONV_CHUNKS = 8


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """Whisper's sinusoidal table [length, channels]: sin of the first half of the channels, cos of the second."""
    step = math.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-step * torch.arange(channels // 2, dtype=torch.float32))
    t = torch.arange(length, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x [N, T, D], mask [N, 1, 1, T] (True: a key to attend to) -> [N, T, D]."""
        n, t, d = x.shape
        q, k, v = (p(x).view(n, t, self.heads, d // self.heads).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(y.transpose(1, 2).reshape(n, t, d))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.self_attn = Attention(cfg.d_model, cfg.heads)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.d_model)
        self.fc1 = nn.Linear(cfg.d_model, cfg.ffn_dim)
        self.fc2 = nn.Linear(cfg.ffn_dim, cfg.d_model)
        self.final_layer_norm = nn.LayerNorm(cfg.d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x), mask)
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class AudioEncoder(nn.Module):
    """Mel features -> encoder states ([positions, d_model] per input, after ln_post)."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        c = cfg.conv_channels
        self.conv2d1 = nn.Conv2d(1, c, 3, 2, padding=1)
        self.conv2d2 = nn.Conv2d(c, c, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(c, c, 3, 2, padding=1)
        self.conv_out = nn.Linear(c * cfg.conv_freqs, cfg.d_model, bias=False)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.layers))
        self.ln_post = nn.LayerNorm(cfg.d_model)
        # not a checkpoint tensor (transformers' buffer is not persistent): made here, moved with the module
        self.register_buffer("positions", self.table(cfg), persistent=False)

    @staticmethod
    def table(cfg: EncoderConfig) -> torch.Tensor:
        """The sinusoidal positions of one chunk [chunk_positions, d_model] (float32, on the CPU)."""
        with torch.device("cpu"):
            return sinusoids(cfg.chunk_positions, cfg.d_model)

    def _downsample(self, chunks: torch.Tensor) -> torch.Tensor:
        """[N, n_mels, chunk_frames] mel chunks -> [N, chunk_positions, d_model]: the convolutions, `conv_out` and
        the positions of one chunk."""
        x = chunks.unsqueeze(1)
        x = F.gelu(self.conv2d1(x))
        x = F.gelu(self.conv2d2(x))
        x = F.gelu(self.conv2d3(x))
        n, channels, freqs, steps = x.shape
        x = self.conv_out(x.permute(0, 3, 1, 2).reshape(n, steps, channels * freqs))
        return x + self.positions[:steps].to(x.dtype)

    def output_lengths(self, frames: torch.Tensor) -> torch.Tensor:
        """Encoder positions of inputs of `frames` valid mel frames (transformers' audio token count)."""
        chunk = self.cfg.chunk_frames
        tail = torch.tensor([post_cnn(int(f) % chunk) for f in frames], dtype=torch.long)
        return tail + (frames.cpu() // chunk) * self.cfg.chunk_positions

    def forward(self, feats: torch.Tensor, frames: torch.Tensor) -> list[torch.Tensor]:
        """feats [B, n_mels, T] (T a multiple of chunk_frames, 0.0 beyond each input's frames), frames [B] valid
        frames -> one [positions_b, d_model] tensor per input."""
        cfg = self.cfg
        chunk, win = cfg.chunk_frames, cfg.window_chunks
        n_mels = feats.shape[1]
        frames = [int(f) for f in frames]
        # each input's chunks (only those holding valid frames), padded to whole windows
        counts = [-(-f // chunk) for f in frames]
        chunks, valid = [], []
        for i, (f, n) in enumerate(zip(frames, counts)):
            x = feats[i, :, :n * chunk].reshape(n_mels, n, chunk).permute(1, 0, 2)
            chunks.append(x)
            lengths = [chunk] * (n - 1) + [f - (n - 1) * chunk]
            padded = -(-n // win) * win
            valid.append([post_cnn(v) for v in lengths] + [0] * (padded - n))
        x = torch.cat([self._downsample(part) for part in torch.cat(chunks).split(CONV_CHUNKS)])
        steps = x.shape[1]
        # windows: each input's chunks in groups of `win`, the last group filled with empty chunks
        rows = []
        start = 0
        for n, v in zip(counts, valid):
            part = x[start:start + n]
            start += n
            if len(v) > n:
                part = torch.cat([part, part.new_zeros(len(v) - n, steps, part.shape[-1])])
            rows.append(part)
        x = torch.cat(rows).reshape(-1, win * steps, cfg.d_model)
        keep = (torch.arange(steps)[None, :] < torch.tensor([p for v in valid for p in v])[:, None])
        keep = keep.reshape(-1, win * steps).to(x.device)
        mask = keep[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask)
        x = self.ln_post(x)
        # each input's kept positions, in order
        flat = x[keep]
        sizes = [sum(v) for v in valid]
        return list(torch.split(flat, sizes))


class Projector(nn.Module):
    """transformers' `Qwen3ASRMultiModalProjector`: linear_1, GELU, linear_2 (d_model -> the LM's width)."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.linear_1 = nn.Linear(cfg.d_model, cfg.d_model)
        self.linear_2 = nn.Linear(cfg.d_model, cfg.output_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.gelu(self.linear_1(x)))

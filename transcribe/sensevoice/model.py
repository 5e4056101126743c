"""SenseVoice's network (funasr's SenseVoiceSmall): the 16-row prompt embedding, the SAN-M encoder
(`SenseVoiceEncoderSmall`) and the CTC head, with funasr's parameter names so that its model.pt loads as
it is. Tensors only: the prompt rows are chosen by the recognizer.

The input is [language, event, emotion, text norm] prompt embeddings followed by the LFR features; it is
scaled by sqrt(d_model), gets sinusoidal positions (1-based, over the input's own width), then runs one
SAN-M block that maps the input width to d_model (`encoders0`, no residual around its attention), the
main tier (`encoders`) + `after_norm`, the "tp" tier (`tp_encoders`) + `tp_norm`. A SAN-M block is a
pre-norm transformer block whose attention adds an FSMN memory: a depthwise convolution over the values
(kernel k, left padding (k-1)//2 + shift) plus the values themselves."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

N_PROMPTS = 4  # output frames of the prompts: language, emotion, event, text norm


@dataclass(frozen=True)
class EncoderConfig:
    d_input: int = 560
    d_model: int = 512
    heads: int = 4
    d_ff: int = 2048
    blocks: int = 50      # encoders0 (1) + encoders (blocks - 1)
    tp_blocks: int = 20
    kernel_size: int = 11
    sanm_shift: int = 0
    vocab_size: int = 25055
    prompt_rows: int = 16


class SANMAttention(nn.Module):
    def __init__(self, d_in: int, d: int, heads: int, kernel: int, shift: int):
        super().__init__()
        self.heads, self.d_k = heads, d // heads
        self.linear_q_k_v = nn.Linear(d_in, 3 * d)
        self.linear_out = nn.Linear(d, d)
        self.fsmn_block = nn.Conv1d(d, d, kernel, groups=d, bias=False)
        left = (kernel - 1) // 2 + max(shift, 0)
        self.pad = (left, kernel - 1 - left)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.linear_q_k_v(x).chunk(3, dim=-1)
        memory = self.fsmn_block(F.pad(v.transpose(1, 2), self.pad)).transpose(1, 2) + v
        q, k, vh = (z.reshape(b, t, self.heads, self.d_k).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, vh)
        return self.linear_out(att.transpose(1, 2).reshape(b, t, -1)) + memory


class FeedForward(nn.Module):
    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.w_1 = nn.Linear(d, d_ff)
        self.w_2 = nn.Linear(d_ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(torch.relu(self.w_1(x)))


class SANMBlock(nn.Module):
    def __init__(self, d_in: int, cfg: EncoderConfig):
        super().__init__()
        d = cfg.d_model
        self.self_attn = SANMAttention(d_in, d, cfg.heads, cfg.kernel_size, cfg.sanm_shift)
        self.feed_forward = FeedForward(d, cfg.d_ff)
        self.norm1 = nn.LayerNorm(d_in)
        self.norm2 = nn.LayerNorm(d)
        self.residual = d_in == d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.self_attn(self.norm1(x))
        x = x + a if self.residual else a
        return x + self.feed_forward(self.norm2(x))


def sinusoids(t: int, depth: int, dtype=torch.float32) -> torch.Tensor:
    """(t, depth) positions 1..t as funasr's SinusoidalPositionEncoder makes them: sines then cosines of
    depth/2 timescales spaced by log(10000) / (depth/2 - 1)."""
    inc = math.log(10000.0) / (depth / 2 - 1)
    inv = torch.exp(torch.arange(depth // 2, dtype=dtype) * -torch.tensor(inc, dtype=dtype))
    pos = torch.arange(1, t + 1, dtype=dtype)[:, None] * inv[None, :]
    return torch.cat([torch.sin(pos), torch.cos(pos)], dim=1)


class SenseVoiceEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.d_model = cfg.d_model
        self.encoders0 = nn.ModuleList([SANMBlock(cfg.d_input, cfg)])
        self.encoders = nn.ModuleList([SANMBlock(cfg.d_model, cfg) for _ in range(cfg.blocks - 1)])
        self.after_norm = nn.LayerNorm(cfg.d_model)
        self.tp_encoders = nn.ModuleList([SANMBlock(cfg.d_model, cfg) for _ in range(cfg.tp_blocks)])
        self.tp_norm = nn.LayerNorm(cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * self.d_model ** 0.5
        x = x + sinusoids(x.shape[1], x.shape[2]).to(device=x.device, dtype=x.dtype)
        for block in (*self.encoders0, *self.encoders):
            x = block(x)
        x = self.after_norm(x)
        for block in self.tp_encoders:
            x = block(x)
        return self.tp_norm(x)


class CTCHead(nn.Module):
    def __init__(self, d: int, vocab: int):
        super().__init__()
        self.ctc_lo = nn.Linear(d, vocab)


class SenseVoiceModel(nn.Module):
    """embed (prompt rows), encoder, ctc.ctc_lo: funasr's SenseVoiceSmall state dict."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.prompt_rows, cfg.d_input)
        self.encoder = SenseVoiceEncoder(cfg)
        self.ctc = CTCHead(cfg.d_model, cfg.vocab_size)

    def forward(self, feats: torch.Tensor, prompt: list[int]) -> torch.Tensor:
        """feats (batch, frames, d_input), prompt the 4 embedding rows -> CTC log-probs (batch, 4 + frames,
        vocab); the first 4 frames are the prompts' (language, emotion, event, text norm)."""
        rows = self.embed(torch.tensor(prompt, device=feats.device))[None].expand(feats.shape[0], -1, -1)
        x = self.encoder(torch.cat([rows.to(feats.dtype), feats], dim=1))
        return torch.log_softmax(self.ctc.ctc_lo(x).float(), dim=-1)

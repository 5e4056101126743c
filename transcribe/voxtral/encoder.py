"""Voxtral's audio encoder: Whisper's (as transformers' `VoxtralEncoder` runs it, under its parameter names) over
chunks of 3000 mel frames: conv k3 + GELU, conv k3 stride 2 + GELU, the stored position table (float32) added,
pre-LN layers (attention whose key projection has no bias, a GELU MLP), a final LayerNorm."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import EncoderConfig


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        o = F.scaled_dot_product_attention(split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x)))
        return self.out_proj(o.transpose(1, 2).reshape(b, t, d))


class Layer(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.self_attn = Attention(cfg.d_model, cfg.heads)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.d_model)
        self.fc1 = nn.Linear(cfg.d_model, cfg.ffn_dim)
        self.fc2 = nn.Linear(cfg.ffn_dim, cfg.d_model)
        self.final_layer_norm = nn.LayerNorm(cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class AudioEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.conv1 = nn.Conv1d(cfg.n_mels, cfg.d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(cfg.d_model, cfg.d_model, kernel_size=3, stride=2, padding=1)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.layers))
        self.layer_norm = nn.LayerNorm(cfg.d_model)
        self.embed_positions = torch.zeros(0)  # the checkpoint's table [positions, d_model], float32

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel [C, n_mels, 2 * positions] -> [C, positions, d_model]."""
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).transpose(1, 2)
        x = (x + self.embed_positions).to(x.dtype)
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)

"""The conformer encoder's settings (torch-free, so a config can be read without importing torch)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EncoderConfig:
    num_layers: int
    hidden_dim: int
    num_heads: int
    dim_head: int
    input_dim: int
    output_dim: int  # char-CTC classes (index 0 = blank)
    bpe_output_dim: int  # 0: no BPE head (the autoregressive models)
    bpe_pooling_window: int
    conv_kernel_size: int
    conv_expansion_factor: int
    feedforward_mult: int
    max_pos_emb: int
    context_size: int
    self_conditioning_layer: int  # 1-based

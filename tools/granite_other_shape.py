"""A second tiny Granite Speech NAR model, of another shape than ../shared/models/granite-nar-tiny, as
transcribe.cpp GGUF files (BF16 = the upstream converter's output, Q8_0 = transcribe-quantize's), from the
repo root:

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python3 tools/granite_other_shape.py [--keep-checkpoint DIR]

writes tests/models/gguf/granite-nar-other-{BF16,Q8_0}.gguf. The GGUF files are written by our
`transcribe.granite.gguf_export.export_gguf`, which tests/test_gguf_granite.py shows writes the upstream
files byte for byte (same keys, order, types, tensor bytes) for the shared tiny model.

The model keeps every structural switch of the tiny model's config (IBM hub layout: self-conditioning at
a middle block that is also a projector tap, four taps ending with -1, a BPE-CTC head over the same
100-piece tokenizer with blank 3, a windowed Q-Former whose window is a multiple of the downsample rate,
tied embeddings, the four Granite multipliers with attention = 1/head_dim, grouped KV heads, projected
embeddings scaled) but changes the sizes: encoder 5 blocks of width 96 with 3 heads x 32 (tiny: 4 x 64,
4 x 16), feed-forward x2 (x4), conv kernel 9 (15), context 10 (16), max_pos_emb 12 (20), 16 characters
(12), self-conditioning after block 3 (2), taps [1, 3, 4, -1] ([1, 2, 3, -1]), BPE pooling window 3 (4);
projector 1 layer of width 64 with 2 heads, window 10 and downsample 5 (2 x 64, 4 heads, 15 and 5), MLP
ratio 3 (2); editor 3 layers of width 96, MLP 160, 3 query / 1 KV heads of 32 (2 x 64, 128, 4 / 2 of 16).
Widths are multiples of 32 (Q8_0's block) so that every linear weight is Q8_0 in the quantized file and
most rows span several blocks.

Weights are random (seed SEED), drawn as the tiny model's are distributed: weights N(0, 0.08) (the BPE
head 0.64, so that its argmax is decisive), norm scales 1 + N(0, 0.1), biases N(0, 0.07), BatchNorm
running mean N(0, 0.1), running variance 1 + |N(0, 0.3)|; the projector LayerNorms are identity (ones and
zeros, as in the real checkpoint). Transcripts are word salad: the model exists for parity tests.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from transcribe.granite.config import parse_config  # noqa: E402
from transcribe.granite.gguf_export import export_gguf  # noqa: E402
from transcribe.granite.model import GraniteNAR  # noqa: E402

TINY = Path("../shared/models/granite-nar-tiny")
OUT = Path("tests/models/gguf")
NAME = "granite-nar-other"
SEED = 20261203

CONFIG = {
    "model_type": "granite_speech_nar",
    "blank_token_id": 3,
    "encoder_layer_indices": [1, 2, 4, -1],
    "scale_projected_embeddings": True,
    "min_edit_sequence_length": 8,
    "tie_word_embeddings": True,
    "encoder_config": {
        "num_layers": 5, "hidden_dim": 64, "num_heads": 2, "dim_head": 32, "input_dim": 160, "output_dim": 16,
        "bpe_output_dim": 100, "bpe_pooling_window": 3, "conv_kernel_size": 9, "conv_expansion_factor": 1,
        "feedforward_mult": 2, "max_pos_emb": 12, "context_size": 10, "self_conditioning_layer": 2,
        "blank_token_id": 3,
    },
    "projector_config": {
        "num_layers": 1, "num_encoder_layers": 4, "hidden_size": 64, "num_heads": 2, "block_size": 10,
        "downsample_rate": 5, "encoder_dim": 64, "llm_dim": 96, "mlp_ratio": 2, "mlp_bias": True,
        "attn_bias": True, "layernorm_eps": 1e-06,
    },
    "text_config": {
        "model_type": "granite", "vocab_size": 100, "hidden_size": 96, "intermediate_size": 96,
        "num_hidden_layers": 3, "num_attention_heads": 3, "num_key_value_heads": 1,
        "max_position_embeddings": 512, "rms_norm_eps": 1e-05,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "tie_word_embeddings": True,
        "attention_multiplier": 1 / 32, "embedding_multiplier": 12.0, "logits_scaling": 8.0,
        "residual_multiplier": 0.22, "bos_token_id": 3, "eos_token_id": 3, "pad_token_id": 2,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
    },
}


def identity_norms(cfg) -> dict[str, torch.Tensor]:
    """The projector LayerNorms' affine parameters the checkpoint stores (ones and zeros)."""
    out = {}
    dims = [(f"projector.layer_norms.{j}", cfg.projector.encoder_dim) for j in range(len(cfg.encoder_layer_indices))]
    dims.append(("projector.out_norm", cfg.projector.hidden_size))
    for i in range(cfg.projector.num_layers):
        dims += [(f"projector.qformer.layers.{i}.{n}", cfg.projector.hidden_size) for n in ("attn_norm", "mlp_norm")]
    for name, d in dims:
        out[name + ".weight"] = torch.ones(d)
        out[name + ".bias"] = torch.zeros(d)
    return out


def random_state(cfg, seed: int) -> dict[str, torch.Tensor]:
    """Every tensor of the model (IBM's names), drawn as described in the module docstring."""
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in GraniteNAR(cfg, tied=True).state_dict().items()}
    gen = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(shape, generator=gen) * std

    state = {}
    for name, shape in shapes.items():
        if name.endswith("num_batches_tracked"):
            state[name] = torch.zeros((), dtype=torch.int64)
        elif name.endswith("running_mean"):
            state[name] = normal(shape, 0.1)
        elif name.endswith("running_var"):
            state[name] = 1 + normal(shape, 0.3).abs()
        elif name.endswith("bias"):
            state[name] = normal(shape, 0.07)
        elif len(shape) == 1:  # norm scales, BatchNorm weight
            state[name] = 1 + normal(shape, 0.1)
        else:
            state[name] = normal(shape, 0.64 if name.startswith("encoder.out_bpe.") else 0.08)
    state.update(identity_norms(cfg))
    return {k: v.contiguous() for k, v in sorted(state.items())}


def write_checkpoint(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    cfg = parse_config(CONFIG)
    (d / "config.json").write_text(json.dumps(CONFIG, indent=1))
    save_file(random_state(cfg, SEED), str(d / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(TINY / "tokenizer.json", d / "tokenizer.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep-checkpoint", type=Path, help="also write the checkpoint directory here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = (args.keep_checkpoint or Path(tmp)) / NAME  # the folder's name is the converter's stt.variant
        write_checkpoint(src)
        params = sum(t.numel() for t in random_state(parse_config(CONFIG), SEED).values())
        print(f"{NAME}: {params} parameters")
        for q in ("BF16", "Q8_0"):
            out = export_gguf(src, OUT / f"{NAME}-{q}.gguf", q.lower())
            print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

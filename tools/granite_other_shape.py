"""A second tiny Granite Speech NAR model, of another shape than ../shared/models/granite-nar-tiny, as
transcribe.cpp GGUF files (BF16 = the upstream converter's output, Q8_0 = transcribe-quantize's), from the
repo root (about a minute on one thread):

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python3 tools/granite_other_shape.py [--keep-checkpoint DIR]

writes tests/models/gguf/granite-nar-other-{BF16,Q8_0}.gguf (then run tools/granite_tcpp_reference.py for
transcribe.cpp's texts). The GGUF files are written by our `transcribe.granite.gguf_export.export_gguf`,
which tests/test_gguf_granite.py shows writes the upstream files byte for byte (same keys, order, types,
tensor bytes) from the shared tiny model.

The model keeps every structural switch of the tiny model's config (IBM hub layout: self-conditioning at
a middle block that is also a projector tap, four taps ending with -1, a BPE-CTC head over the same
100-piece tokenizer with blank 3, a windowed Q-Former whose window is a multiple of the downsample rate,
tied embeddings, the four Granite multipliers with attention = 1/head_dim, grouped KV heads, projected
embeddings scaled) and changes the sizes: encoder 5 blocks (tiny 4) with 2 heads x 32 (4 x 16),
feed-forward x2 (x4), conv expansion 1 (2), conv kernel 9 (15), context 10 (16), max_pos_emb 12 (20), 16
characters (12), taps [1, 2, 4, -1] ([1, 2, 3, -1]), BPE pooling window 3 (4); projector 1 layer (2) with
2 heads (4), window 10 (15); editor 3 layers (2) of width 96 (64), MLP 96 (128), 3 query / 1 KV heads of 32
(4 / 2 of 16). Widths are multiples of 32 (Q8_0's block), so every linear weight but the 16-input
`enc.ctc_bypass` is Q8_0 in the quantized file and most rows span several blocks.

The self-conditioning block is 2 = 5 // 2: transcribe.cpp's graph applies it after block n_layers // 2
whatever `stt.granite_nar.encoder.self_cond_layer` says (its encoder.cpp: `bypass_after =
hp.enc_n_layers / 2`), while IBM's code (and ours) follow `self_conditioning_layer`; with 3 of 5 blocks the
two runtimes compute different models (measured: 2 of 10 texts equal, the char-CTC logits differ by 0.9).

Weights: random (seed SEED), drawn as the tiny model's are distributed: weights N(0, 0.08) (the BPE head
0.64), norm scales 1 + N(0, 0.1), biases N(0, 0.07), BatchNorm running mean N(0, 0.1), running variance
1 + |N(0, 0.3)|; the projector LayerNorms identity (ones and zeros, as in the real checkpoint). Then a brief
fit (`fit`, FIT_STEPS Adam steps): self-distillation on FIT_CLIPS, cross-entropy of the character head,
the BPE head and the editor toward their own step-0 argmax. It makes the random model's decisions on those
clips confident: a random model has near ties (top-2 logit gaps of 1e-4) that any rounding difference
flips, so its texts cannot tell a real difference from BF16 / Q8_0 arithmetic. Measured before the fit
(random weights): our float32 texts equal transcribe.cpp's on 8/10 clips from the BF16 file, 4/10 from
the Q8_0 file; after it 10/10 and 10/10. Transcripts are word salad: the model exists for parity tests.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
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
# Standard deviations of the weights drawn larger than the rest's 0.08 (by name prefix): see the docstring.
WEIGHT_STD = {"encoder.out_bpe.": 0.64}
SHARED = Path("../shared")
# The brief fit (see `fit`): the clips of tools/granite_tcpp_reference.py, relative to shared/.
FIT_CLIPS = [f"models/granite-nar-tiny/wave_{c}.wav" for c in "ABC"] + ["audio/jfk.wav", "audio/ls_2086-149220-0033.wav"] + \
            [f"audio/dev/{c}" for c in ("ls_1995-1837-0001.wav", "lj_LJ050-0131.wav", "cv_19172268.wav",
                                        "fleurs_en_002.wav", "ls_1089-134691-0001.wav")]
FIT_STEPS, FIT_LR = 150, 1e-3

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
            state[name] = normal(shape, next((v for k, v in WEIGHT_STD.items() if name.startswith(k)), 0.08))
    state.update(identity_norms(cfg))
    return {k: v.contiguous() for k, v in sorted(state.items())}


def clip_features(frontend) -> list[torch.Tensor]:
    from transcribe.audio import load_audio

    return [frontend(torch.from_numpy(load_audio(str(SHARED / c)))) for c in FIT_CLIPS]


def margins(logits: torch.Tensor) -> torch.Tensor:
    top = logits.topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def fit(cfg, state: dict, steps: int) -> dict:
    """Self-distillation: the random model's own decisions on FIT_CLIPS (argmax of the character head,
    the BPE head and the editor, fixed at step 0) made confident by cross-entropy toward them."""
    from transcribe.granite.frontend import GraniteFrontEnd

    model = GraniteNAR(cfg, tied=True)
    own = model.state_dict()
    model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=True)
    model.eval()  # BatchNorm on its running statistics
    feats = clip_features(GraniteFrontEnd())
    with torch.no_grad():
        passes = [model(f[None], torch.tensor([f.shape[0]]), keep=True).stages for f in feats]
    keys = ("enc.mid_logits", "enc.bpe_logits")
    targets = [[p[k][0].argmax(-1) for k in keys] + [p["text_logits"][0].argmax(-1)] for p in passes]
    opt = torch.optim.Adam(model.parameters(), lr=FIT_LR)
    for step in range(steps + 1):
        opt.zero_grad()
        loss, low = 0.0, []
        for f, want in zip(feats, targets):
            st = model(f[None], torch.tensor([f.shape[0]]), keep=True).stages
            outs = [st[k][0] for k in keys] + [st["text_logits"][0]]
            for j, (o, w) in enumerate(zip(outs, want)):
                if o.shape[0] == w.shape[0]:  # the template keeps its length while the hypothesis holds
                    loss = loss + F.cross_entropy(o.float(), w)
                    if j:  # the decisions that make the text: the BPE head's and the editor's
                        low.append(margins(o.detach().float()))
        if step % 25 == 0 or step == steps:
            gaps = torch.cat(low)
            print(f"fit step {step}: loss {float(loss.detach()):.4f}; BPE / editor positions with a top-2 logit "
                  f"gap under 0.01: {int((gaps < 0.01).sum())} of {gaps.numel()}", flush=True)
        if step < steps:
            loss.backward()
            opt.step()
    out = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out.update({k: v for k, v in state.items() if k not in out})
    return dict(sorted(out.items()))


def write_checkpoint(d: Path, steps: int = FIT_STEPS) -> None:
    d.mkdir(parents=True, exist_ok=True)
    cfg = parse_config(CONFIG)
    (d / "config.json").write_text(json.dumps(CONFIG, indent=1))
    state = random_state(cfg, SEED)
    if steps:
        state = fit(cfg, state, steps)
    save_file(state, str(d / "model.safetensors"), metadata={"format": "pt"})
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
        for q in ("BF16", "Q8_0"):
            out = export_gguf(src, OUT / f"{NAME}-{q}.gguf", q.lower())
            print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

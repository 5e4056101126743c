#!/usr/bin/env python
"""Build a random-weight model with the full UsefulSensors/moonshine-base architecture, in transformers' format.

Run from the repository root with the Python of the NeMo/transformers virtual environment (transformers 5.25;
made by tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python benchmarks/make_moonshine_model.py [OUT_DIR] [--size base|tiny]

The output (config.json, generation_config.json, preprocessor_config.json, tokenizer.json, model.safetensors; about
250 MB for base in float32; default local-models/moonshine-base-random, relative to the repository root) goes to a
git-ignored folder and is never committed. It stands in for the published checkpoint with the same shapes, so the
same compute: only the weights differ. Used by benchmarks/moonshine_speed.py.

What it builds: transformers' own `MoonshineForConditionalGeneration(MoonshineConfig(...))` with the published
config.json's values: base hidden 416, intermediate 1664, 8 encoder and 8 decoder layers, 8 heads,
partial_rotary_factor 0.62 (tiny: 288, 1152, 6 + 6 layers, 8 heads, 0.9), pad_head_dim_to_multiple_of 8, vocabulary
32768, max_position_embeddings 194, tied head; transformers' initialization (seeded). A random model rarely emits
EOS, so both engines generate up to the same bound.

Tokenizer: tests/models/moonshine/tiny's tokenizer.json with filler pieces (`<fillNNNNN>`) appended to its BPE
vocabulary up to 32768 entries, so every id the head can emit has a piece. Only the sizes matter for speed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "tests" / "models" / "moonshine" / "tiny"
VOCAB = 32768
SEED = 20261205
SIZES = {"base": dict(hidden_size=416, intermediate_size=1664, layers=8, heads=8, partial_rotary_factor=0.62),
         "tiny": dict(hidden_size=288, intermediate_size=1152, layers=6, heads=8, partial_rotary_factor=0.9)}


def padded_tokenizer(dst: Path) -> None:
    tok = json.loads((TINY / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    used = set(vocab.values()) | {t["id"] for t in tok["added_tokens"]}
    for i in range(max(used) + 1, VOCAB):
        vocab[f"<fill{i:05d}>"] = i
    (dst / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None, help="output folder (default local-models/moonshine-<size>-random)")
    ap.add_argument("--size", choices=sorted(SIZES), default="base")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    from transformers import MoonshineConfig, MoonshineForConditionalGeneration

    torch.set_num_threads(args.threads)
    s = SIZES[args.size]
    out = Path(args.out).resolve() if args.out else REPO / "local-models" / f"moonshine-{args.size}-random"
    out.mkdir(parents=True, exist_ok=True)
    config = MoonshineConfig(
        vocab_size=VOCAB, hidden_size=s["hidden_size"], intermediate_size=s["intermediate_size"],
        encoder_num_hidden_layers=s["layers"], decoder_num_hidden_layers=s["layers"],
        encoder_num_attention_heads=s["heads"], decoder_num_attention_heads=s["heads"],
        encoder_num_key_value_heads=s["heads"], decoder_num_key_value_heads=s["heads"], pad_head_dim_to_multiple_of=8,
        encoder_hidden_act="gelu", decoder_hidden_act="silu", max_position_embeddings=194,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": s["partial_rotary_factor"]},
        attention_bias=False, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2,
        decoder_start_token_id=1)
    torch.manual_seed(SEED)
    model = MoonshineForConditionalGeneration(config).eval()
    for old in out.glob("model*.safetensors*"):
        old.unlink()
    model.save_pretrained(out)
    for name in ("generation_config.json", "preprocessor_config.json"):
        shutil.copy(TINY / name, out / name)
    padded_tokenizer(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"saved {out}: {n / 1e6:.1f} M parameters ({args.size}), vocabulary {VOCAB}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Build a random-weight model with the nvidia/parakeet-ctc-1.1b architecture in transformers' layout.

Run from the repository root with the Python of the NeMo/transformers virtual environment (transformers
5.25; made by tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python benchmarks/make_parakeet_hf_model.py [OUT_DIR] [--layers 42] [--hidden 1024] [--seed 1]

The output (a folder as `save_pretrained` writes it: config.json, model.safetensors, processor and tokenizer
files; about 4.2 GB in float32 at full size; default local-models/parakeet-ctc-1.1b-hf-random, relative to the
repository root; a path given is relative to the working directory) goes to a git-ignored folder and is never
committed. It stands in for the published checkpoint (not downloadable here) with the same shapes, so the same
compute: only the weights differ. Used by benchmarks/parakeet_hf_speed.py. --layers / --hidden shrink it for a
smoke test.

What it builds: transformers' own `ParakeetForCTC(ParakeetCTCConfig(...))` with parakeet-ctc-1.1b's sizes:
FastConformer encoder of 42 layers, hidden 1024, 8 heads, FF 4096, SiLU, kernel 9, x8 dw_striding subsampling
with 256 channels, 80 mels, relative positions with per-layer biases; a CTC head of 1024 pieces + blank (1025
classes, blank = pad_token_id 1024). Weights: transformers' initialisation under torch.manual_seed(seed) (batch
norm statistics mean 0, variance 1), about 1.1 billion parameters.

Tokenizer and processor: the tiny CTC folder's (tests/models/parakeet-hf/ctc, written by transformers' own
converter), its tokenizer.json's BPE vocabulary padded with unreachable filler pieces (`<|fillNNNN|>`) to 1024
pieces and `<pad>` moved to 1024 (the blank), the feature extractor's feature_size 80. Only the sizes matter
for speed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "tests" / "models" / "parakeet-hf" / "ctc"
VOCAB = 1024
DEFAULT_OUT = "local-models/parakeet-ctc-1.1b-hf-random"


def write_processor_files(out: Path, mels: int) -> None:
    tok = json.loads((TINY / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    added = [t for t in tok["added_tokens"] if t["content"] != "<pad>"]
    used = set(vocab.values()) | {t["id"] for t in added}
    for i in range(VOCAB):
        if i not in used:
            vocab[f"<|fill{i:04d}|>"] = i
    pad = next(t for t in tok["added_tokens"] if t["content"] == "<pad>")
    tok["added_tokens"] = added + [{**pad, "id": VOCAB}]
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    shutil.copy(TINY / "tokenizer_config.json", out / "tokenizer_config.json")
    proc = json.loads((TINY / "processor_config.json").read_text())
    proc["feature_extractor"]["feature_size"] = mels
    (out / "processor_config.json").write_text(json.dumps(proc, indent=2) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help=f"output folder (default {DEFAULT_OUT} in the repository)")
    ap.add_argument("--layers", type=int, default=42)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--mels", type=int, default=80)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    out = Path(os.path.abspath(args.out)) if args.out else REPO / DEFAULT_OUT

    import torch
    from transformers import ParakeetCTCConfig, ParakeetEncoderConfig, ParakeetForCTC

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0 = time.time()
    enc = ParakeetEncoderConfig(hidden_size=args.hidden, num_hidden_layers=args.layers,
                                num_attention_heads=args.heads, intermediate_size=4 * args.hidden,
                                conv_kernel_size=9, subsampling_factor=8, subsampling_conv_channels=256,
                                num_mel_bins=args.mels, layerdrop=0.0, dropout=0.0, attention_dropout=0.0,
                                activation_dropout=0.0)
    config = ParakeetCTCConfig(vocab_size=VOCAB + 1, pad_token_id=VOCAB, encoder_config=enc)
    model = ParakeetForCTC(config).eval()
    n = sum(p.numel() for p in model.parameters())
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out)
    write_processor_files(out, args.mels)
    print(f"{out}: {n / 1e9:.3f} B parameters, {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

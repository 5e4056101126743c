#!/usr/bin/env python
"""Build a random-weight model with the full google/medasr architecture, in transformers' format.

Run from the repository root with the Python of the NeMo/transformers virtual environment (transformers 5.25;
made by tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python benchmarks/make_medasr_model.py [OUT_DIR] [--layers 17]

The output (config.json, model.safetensors, the processor and tokenizer files; about 0.42 GB in float32; default
local-models/medasr-random, relative to the repository root) goes to a git-ignored folder and is never committed.
It stands in for the published checkpoint (gated) with the same shapes, so the same compute: only the weights
differ. Used by benchmarks/medasr_speed.py.

What it builds: transformers' own `LasrForCTC(LasrCTCConfig())`: transformers' defaults are google/medasr's
config (17 Conformer layers, hidden 512, 8 heads, FF 2048, conv kernel 32, 2 stride-2 subsampling convolutions
with 256 channels, 128 mels, RoPE, a 512-output CTC head; about 105 M parameters), its weights as transformers
initializes them (seeded) and random batch-norm statistics. Tokenizer and processor: tests/models/medasr/tiny's,
its unigram vocabulary padded with unreachable filler pieces (`<fillNNN>`) to the published 512 entries (the
sentinels renumbered above them), so that every id the head can emit has a piece. Only the sizes matter for
speed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "tests" / "models" / "medasr" / "tiny"
VOCAB = 512
SEED = 20261205


def padded_tokenizer_dir(tmp: Path) -> Path:
    out = tmp / "processor"
    out.mkdir()
    for name in ("tokenizer_config.json", "processor_config.json", "preprocessor_config.json", "spiece.model"):
        shutil.copy(TINY / name, out / name)
    tok = json.loads((TINY / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    n = len(vocab)
    vocab += [[f"<fill{i:03d}>", -100.0] for i in range(n, VOCAB)]
    for a in tok["added_tokens"]:
        if a["id"] >= n:
            a["id"] += VOCAB - n
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None, help="output folder (default local-models/medasr-random)")
    ap.add_argument("--layers", type=int, default=17, help="published: 17 (fewer only for a smoke test)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    from transformers import AutoProcessor, LasrCTCConfig, LasrForCTC

    torch.set_num_threads(args.threads)
    out = Path(args.out).resolve() if args.out else REPO / "local-models" / "medasr-random"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        processor = AutoProcessor.from_pretrained(str(padded_tokenizer_dir(Path(tmp))))
        torch.manual_seed(SEED)
        model = LasrForCTC(LasrCTCConfig(encoder_config={"num_hidden_layers": args.layers})).eval()
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm1d):
                    m.running_mean.normal_(0.0, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
        model.save_pretrained(str(out))
        processor.save_pretrained(str(out))
        processor.feature_extractor.save_pretrained(str(out))
    (out / "generation_config.json").unlink(missing_ok=True)
    n = sum(p.numel() for p in model.parameters())
    print(f"saved {out}: {n / 1e6:.1f} M parameters, {args.layers} layers, vocabulary {VOCAB}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

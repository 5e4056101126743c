#!/usr/bin/env python
"""Build a random-weight model with the full granite-speech-5.0-470m-turboctc architecture, in transformers' format.

Run from the repository root with the Python of the NeMo/transformers virtual environment (transformers 5.25;
made by tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python benchmarks/make_granite_speech5_model.py [OUT_DIR] [--layers 16] [--hidden 1024]

The output (config.json, model.safetensors, the processor and tokenizer files; about 1.9 GB in float32; default
local-models/granite-speech5-random, relative to the repository root; a path given is relative to the working
directory) goes to a git-ignored folder and is never committed. It stands in for the published checkpoint
with the same shapes, so the same compute: only the weights differ. Used by benchmarks/granite_speech5_speed.py.

What it builds: transformers' own `GraniteSpeech5ForCTC(GraniteSpeech5CTCConfig())`, the config being
transformers' defaults (configuration_granite_speech5.py documents them as the published checkpoint's):
16 conformer blocks of hidden 1024, 8 heads, FF 4096, SiLU, depthwise kernel 7, block attention of 128
frames with Shaw's relative positions (512), subsampling blocks 0 and 1, self-conditioning at block 8, a CTC
head of 16,384 BPE units tied to the encoder's `out`. About 470 million parameters. The weights are redrawn
seeded (matrices N(0, 1/fan_in), vectors 0.1 N(0, 1), norm gains 1 + that, random BatchNorm statistics), so
the activations keep their scale through the blocks. `--layers` / `--hidden` make a smaller one (smoke tests).

Tokenizer and processor: the tiny model's (tests/models/granite_speech5/tiny), its tokenizer.json's BPE
vocabulary padded with unreachable filler pieces (`<fillNNNNN>`) to 16,384 entries, so every id the head can
emit has a piece. Only the sizes matter for speed.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "tests" / "models" / "granite_speech5" / "tiny"
VOCAB = 16384
SEED = 20261205


def reinit_(model) -> None:
    import torch

    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(1.0 + 0.2 * torch.rand(b.shape, generator=g))


def padded_tokenizer(out: Path) -> None:
    tok = json.loads((TINY / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    n = max(set(vocab.values()) | {t["id"] for t in tok["added_tokens"]}) + 1
    for i in range(n, VOCAB):
        vocab[f"<fill{i:05d}>"] = i
    (out / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    for name in ("tokenizer_config.json", "processor_config.json"):
        shutil.copy(TINY / name, out / name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("out", nargs="?", help="output folder (default local-models/granite-speech5-random)")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=1024)
    args = ap.parse_args(argv)
    import torch
    from transformers import GraniteSpeech5CTCConfig, GraniteSpeech5ForCTC

    out = Path(args.out).resolve() if args.out else REPO / "local-models" / "granite-speech5-random"
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    enc = dict(vocab_size=VOCAB, num_hidden_layers=args.layers, hidden_size=args.hidden,
               intermediate_size=4 * args.hidden, num_attention_heads=max(1, args.hidden // 128))
    model = GraniteSpeech5ForCTC(GraniteSpeech5CTCConfig(vocab_size=VOCAB, encoder_config=enc)).eval()
    reinit_(model)
    model.save_pretrained(str(out))
    padded_tokenizer(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"{out}: {n / 1e6:.1f} M parameters", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

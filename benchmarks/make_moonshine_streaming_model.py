#!/usr/bin/env python
"""Build a random-weight model with the moonshine-streaming-medium architecture, in transformers' format.

Run from the repository root with the Python of the NeMo/transformers virtual environment (transformers 5.25):

    .venv-nemo/bin/python benchmarks/make_moonshine_streaming_model.py [OUT_DIR] [--size medium|small|tiny]

The output (default local-models/moonshine-streaming-<size>-random, git-ignored, never committed) stands in for
the published checkpoint with the same shapes, so the same compute: transformers' own
`MoonshineStreamingForConditionalGeneration(MoonshineStreamingConfig(...))` with transformers' random
initialization (seeded). Used by benchmarks/moonshine_streaming_speed.py.

The sizes (transcribe.cpp's intake of the published configs, docs/porting/families/moonshine_streaming.md):
tiny encoder 6 x 320 (8 heads of 40), decoder 6 x 320; small encoder 10 x 620 with attention 8 x 64, decoder
10 x 512; medium encoder 14 x 768 with attention 10 x 64, decoder 14 x 640; vocabulary 32768, 4096 adapter
positions, the published sliding windows. The MLP widths are taken as 4 x the layer's width (tiny's published
1280 = 4 x 320; small's and medium's are not in the intake: medium comes out at 266 M parameters against the
published 245 M, so its MLPs may be narrower; the benchmark's comparison is unaffected, both engines run these
shapes). Tokenizer and processor: the tiny test model's (tests/models/moonshine_streaming/tiny); only the
vocabulary size of the head matters for speed.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "models" / "moonshine_streaming" / "tiny"
WINDOWS = [[16, 4], [16, 4], [16, 0], [16, 0], [16, 4], [16, 4]]
SIZES = {  # (encoder layers, width, heads, head_dim), (decoder layers, width, heads)
    "tiny": ((6, 320, 8, 40), (6, 320, 8)),
    "small": ((10, 620, 8, 64), (10, 512, 8)),
    "medium": ((14, 768, 10, 64), (14, 640, 10)),
}


def windows(n: int) -> list:
    """The published pattern for n layers: lookahead on the first two and last two, none between."""
    return [[16, 4] if i < 2 or i >= n - 2 else [16, 0] for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--size", choices=sorted(SIZES), default="medium")
    args = ap.parse_args()
    import torch
    from transformers import MoonshineStreamingConfig, MoonshineStreamingForConditionalGeneration

    torch.manual_seed(0)
    (el, ew, eh, ed), (dl, dw, dh) = SIZES[args.size]
    config = MoonshineStreamingConfig(
        encoder_config=dict(hidden_size=ew, intermediate_size=4 * ew, num_hidden_layers=el, num_attention_heads=eh,
                            num_key_value_heads=eh, head_dim=ed, hidden_act="gelu", max_position_embeddings=4096,
                            sliding_windows=windows(el)),
        vocab_size=32768, hidden_size=dw, intermediate_size=4 * dw, num_hidden_layers=dl, num_attention_heads=dh,
        num_key_value_heads=dh, head_dim=dw // dh, hidden_act="silu", max_position_embeddings=4096,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, tie_word_embeddings=False)
    model = MoonshineStreamingForConditionalGeneration(config).eval()
    out = Path(args.out) if args.out else REPO / "local-models" / f"moonshine-streaming-{args.size}-random"
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "processor_config.json"):
        shutil.copy(TINY / name, out / name)
    print(out, sum(p.numel() for p in model.parameters()), "parameters")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Build a random-weight model with the kyutai/stt-2.6b-en architecture, in transformers' layout.

Run from the repository root with the Python of the NeMo/transformers virtual environment (transformers 5.25.0):

    .venv-nemo/bin/python benchmarks/make_kyutai_model.py [OUT_DIR] [--layers 48] [--hidden 2048]

The output (config.json, generation_config.json, model.safetensors, processor_config.json, tokenizer files; about
10.5 GB in float32; default local-models/kyutai-stt-2.6b-random, relative to the repository root) goes to a
git-ignored folder and is never committed. Used by benchmarks/kyutai_speed.py.

What it builds: transformers' own `KyutaiSpeechToTextForConditionalGeneration(KyutaiSpeechToTextConfig())`, the
config being transformers' defaults (configuration_kyutai_speech_to_text.py documents them as
kyutai/stt-2.6b-en-trfs's): the LM 48 layers x 2048, 32 heads, gated MLP ffn_dim 11264, RMSNorm eps 1e-8, a
375-position window, text vocabulary 4001, 32 codebooks of 2049 ids; the Mimi codec at MimiConfig's defaults (SEANet
64 filters, strides 4 5 6 8, transformer 8 x 512 with a 250-frame window, 32 quantizers of 2048 entries, 12.5 Hz).
About 2.6 billion parameters. Weights: transformers' initialization, seeded; the codebooks drawn N(0, 1) (their
initialization is all zeros: every frame would take code 0). The processor pads 1.0 s before and 2.5 s + 1 s after
(stt-2.6b-en's delay); the tokenizer is the tiny model's (tests/models/kyutai/tiny) with its unigram vocabulary
padded with unreachable filler pieces to the 4000 text ids and the initial token at 4000, so that every id the
head can emit has a piece. `--layers` / `--hidden` shrink it (a smoke test of the benchmark)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "tests" / "models" / "kyutai" / "tiny"
VOCAB = 4001
SEED = 20261205


def padded_tokenizer(tmp: Path) -> Path:
    """The tiny model's tokenizer, its unigram pieces padded to VOCAB - 1 and the initial token at VOCAB - 1."""
    tok = json.loads((TINY / "tokenizer.json").read_text(encoding="utf-8"))
    pieces = tok["model"]["vocab"]
    for i in range(len(pieces), VOCAB - 1):
        pieces.append([f"<fill{i:05d}>", -100.0])
    for t in tok["added_tokens"]:
        if t["content"] == "<text_start>":
            t["id"] = VOCAB - 1
    out = tmp / "tok"
    out.mkdir()
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    shutil.copy(TINY / "tokenizer_config.json", out / "tokenizer_config.json")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--layers", type=int, default=48, help="published: 48")
    ap.add_argument("--hidden", type=int, default=2048, help="published: 2048 (ffn_dim scales with it)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    from transformers import (GenerationConfig, KyutaiSpeechToTextConfig, KyutaiSpeechToTextFeatureExtractor,
                              KyutaiSpeechToTextForConditionalGeneration, KyutaiSpeechToTextProcessor,
                              PreTrainedTokenizerFast)

    torch.set_num_threads(args.threads)
    out = Path(args.out).resolve() if args.out else REPO / "local-models" / "kyutai-stt-2.6b-random"
    out.mkdir(parents=True, exist_ok=True)
    heads = 32 if args.hidden == 2048 else max(1, args.hidden // 64)
    config = KyutaiSpeechToTextConfig(vocab_size=VOCAB, num_hidden_layers=args.layers, hidden_size=args.hidden,
                                      num_attention_heads=heads, ffn_dim=11264 * args.hidden // 2048,
                                      rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
                                      bos_token_id=VOCAB - 1, codec_config={"model_type": "mimi"})
    torch.manual_seed(SEED)
    t0 = time.time()
    model = KyutaiSpeechToTextForConditionalGeneration(config).eval()
    with torch.no_grad():
        q = model.codec_model.quantizer
        for rvq in (q.semantic_residual_vector_quantizer, q.acoustic_residual_vector_quantizer):
            for layer in rvq.layers:
                layer.codebook.embed_sum.normal_()
                layer.codebook._embed = None
    model.generation_config = GenerationConfig(bos_token_id=VOCAB - 1, pad_token_id=3)
    n_params = sum(p.numel() for p in model.parameters())
    for old in out.glob("model*.safetensors*"):
        old.unlink()
    model.save_pretrained(out)
    with tempfile.TemporaryDirectory() as tmp:
        tok = PreTrainedTokenizerFast.from_pretrained(padded_tokenizer(Path(tmp)))
        fe = KyutaiSpeechToTextFeatureExtractor(feature_size=1, sampling_rate=24000, padding_value=0.0,
                                                audio_delay_seconds=2.5, audio_silence_prefix_seconds=1.0)
        KyutaiSpeechToTextProcessor(feature_extractor=fe, tokenizer=tok).save_pretrained(out)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"saved {out} ({size / 1e9:.2f} GB) in {time.time() - t0:.0f} s: {n_params / 1e6:.0f} M parameters, "
          f"{args.layers} layers x {args.hidden}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

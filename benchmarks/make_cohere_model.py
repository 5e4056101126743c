#!/usr/bin/env python
"""Build a random-weight model with the full cohere-transcribe-03-2026 architecture, in transformers' format.

Run from the repository root with the Python of the NeMo/transformers virtual environment (transformers
5.24.0; made by tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python benchmarks/make_cohere_model.py [OUT_DIR] [--encoder-layers 48] [--dtype float32]

The output (a folder as `save_pretrained` writes it: config.json, generation_config.json, safetensors
shards, processor and tokenizer files; about 8.2 GB in float32; default local-models/cohere-transcribe-random,
relative to the repository root; a path given is relative to the working directory) goes to a git-ignored
folder and is never committed. It stands in for the published checkpoint (gated, not downloadable here)
with the same shapes, so the same compute: only the weights differ. Used by benchmarks/cohere_speed.py.

What it builds: transformers' own `CohereAsrForConditionalGeneration(CohereAsrConfig(...))`, the config
being transformers' defaults for `CohereAsrConfig` (configuration_cohere_asr.py documents them as
CohereLabs/cohere-transcribe-03-2026's): FastConformer encoder of 48 layers, hidden 1280, 8 heads, FF
5120, SiLU, kernel 9, x8 subsampling with 256 channels, 128 mels; encoder->decoder Linear(1280, 1024);
decoder of 8 layers, hidden 1024, 8 heads, FF 4096, 1024 positions; untied head Linear(1024, 16384).
About 2.0 billion parameters. The weights are redrawn as tests/models/cohere-tiny's are
(tools/cohere_hf_reference.py `reinit_`: matrices N(0, 1/fan_in), vectors 0.1 N(0, 1), norm gains 1 + that,
random BatchNorm statistics; seeded), the decoder position table is NeMo's sinusoid table (what the
published file stores), and the EOS logit is not boosted: a random model then never stops, so both
engines generate up to the same `max_new_tokens`.

Tokenizer and processor: cohere-tiny's (tests/models/cohere-tiny: same special ids and 10-token English
prompt as the published model, all published feature-extractor defaults), its `tokenizer.json` BPE
vocabulary padded with unreachable filler pieces (`<|fillNNNNN|>`) to the published 16384 entries, so that
every id the head can emit has a piece. Only the sizes matter for speed.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "tests" / "models" / "cohere-tiny"
VOCAB = 16384
SEED = 20261204

log = logging.getLogger("make_cohere_model")


def padded_tokenizer_dir(tmp: Path) -> Path:
    """cohere-tiny's processor files, its tokenizer.json's vocabulary padded to VOCAB pieces."""
    out = tmp / "processor"
    out.mkdir()
    for name in ("tokenizer_config.json", "processor_config.json"):
        shutil.copy(TINY / name, out / name)
    tok = json.loads((TINY / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    used = set(vocab.values()) | {t["id"] for t in tok["added_tokens"]}
    n = max(used) + 1
    for i in range(n, VOCAB):
        vocab[f"<|fill{i:05d}|>"] = i
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None,
                    help="output folder (default local-models/cohere-transcribe-random in the repository)")
    ap.add_argument("--encoder-layers", type=int, default=48, help="published: 48 (fewer only to save memory)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="the dtype the weights are saved in (default float32)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import torch
    from transformers import AutoProcessor, CohereAsrConfig, CohereAsrForConditionalGeneration

    sys.path.insert(0, str(REPO / "tools"))
    from cohere_hf_reference import nemo_sinusoid_table, reinit_  # the recipe of tests/models/cohere-tiny

    torch.set_num_threads(args.threads)
    out = Path(args.out).resolve() if args.out else REPO / "local-models" / "cohere-transcribe-random"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        processor = AutoProcessor.from_pretrained(padded_tokenizer_dir(Path(tmp)))
        tok = processor.tokenizer
        if len(tok) != VOCAB:
            raise SystemExit(f"padded tokenizer has {len(tok)} entries, wanted {VOCAB}")
        blank = tok.convert_tokens_to_ids("\u2581")
        config = CohereAsrConfig(encoder_config={"num_hidden_layers": args.encoder_layers}, vocab_size=VOCAB,
                                 decoder_start_token_id=blank)
        torch.manual_seed(SEED)
        t0 = time.time()
        model = CohereAsrForConditionalGeneration(config).eval()
        log.info("built in %.1f s", time.time() - t0)
        t0 = time.time()
        reinit_(model, SEED)
        with torch.no_grad():
            pe = model.model.decoder.pos_emb.weight
            pe.copy_(nemo_sinusoid_table(*pe.shape))
        log.info("weights drawn in %.1f s", time.time() - t0)
        gc = model.generation_config
        gc.decoder_start_token_id = blank
        gc.bos_token_id, gc.eos_token_id, gc.pad_token_id = config.bos_token_id, config.eos_token_id, config.pad_token_id
        n_params = sum(p.numel() for p in model.parameters())
        if args.dtype == "bfloat16":
            model = model.to(torch.bfloat16)
        t0 = time.time()
        for old in out.glob("model*.safetensors*"):
            old.unlink()
        model.save_pretrained(out)
        processor.save_pretrained(out)
    size = sum(f.stat().st_size for f in out.iterdir())
    log.info("saved %s (%.2f GB, %s) in %.1f s: %.1f M parameters (encoder %d layers), vocabulary %d, '\u2581' id %d",
             out, size / 1e9, args.dtype, time.time() - t0, n_params / 1e6, args.encoder_layers, VOCAB, blank)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Build a random-weight model with the full SenseVoiceSmall architecture, in funasr's published layout.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/make_sensevoice_model.py [OUT_DIR] [--blocks 50 --tp-blocks 20 --d 512 --ff 2048 --vocab 25055]

The output (config.yaml, configuration.json, model.pt (float32, about 0.94 GB), am.mvn, the SentencePiece model;
default local-models/sensevoice-small-random, relative to the repository root) goes to a git-ignored folder and
is never committed. It stands in for FunAudioLLM/SenseVoiceSmall with the same shapes (the published
config.yaml's encoder: 50 SAN-M blocks + 20 tp blocks, d_model 512, 4 heads, FF 2048, FSMN kernel 11; LFR 7/6
over 80 fbank bins; a 25,055-piece vocabulary), so the same compute: only the weights differ. The smaller
shapes are for smoke tests of benchmarks/sensevoice_speed.py. Used by benchmarks/sensevoice_speed.py.

Weights: PyTorch's default initialisation of this package's `SenseVoiceModel` (funasr's parameter names), seeded;
CMVN shift 0 and scale 0.1 (log-mel values to about unit range); the vocabulary: the tiny model's rich tags
(tests/models/sensevoice/tiny) and filler pieces (`▁wNNNNN`) up to --vocab, written as a SentencePiece model
by transcribe.text.sentencepiece.sentencepiece_proto.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SEED = 20261205


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="output folder (default local-models/sensevoice-small-random)")
    ap.add_argument("--blocks", type=int, default=50)
    ap.add_argument("--tp-blocks", type=int, default=20)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--ff", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=25055)
    args = ap.parse_args(argv)
    import torch

    from transcribe.sensevoice.model import EncoderConfig, SenseVoiceModel
    from transcribe.text.sentencepiece import sentencepiece_proto

    out = Path(args.out) if args.out else REPO / "local-models" / "sensevoice-small-random"
    out.mkdir(parents=True, exist_ok=True)
    tiny = REPO / "tests" / "models" / "sensevoice" / "tiny"
    cfg_text = (tiny / "config.yaml").read_text()
    for key, value in (("output_size", args.d), ("linear_units", args.ff), ("num_blocks", args.blocks),
                       ("tp_blocks", args.tp_blocks)):
        lines = [f"    {key}: {value}" if ln.strip().startswith(key + ":") else ln for ln in cfg_text.splitlines()]
        cfg_text = "\n".join(lines) + "\n"
    (out / "config.yaml").write_text(cfg_text)
    (out / "configuration.json").write_text((tiny / "configuration.json").read_text())
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tiny / "chn_jpn_yue_eng_ko_spectok.bpe.model"))
    tags = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.id_to_piece(i).startswith("<|")]
    pieces = ["<unk>", "<s>", "</s>"] + tags
    pieces += [f"\u2581w{k:05d}" for k in range(args.vocab - len(pieces))]
    types = [2, 3, 3] + [4] * len(tags) + [1] * (len(pieces) - 3 - len(tags))
    (out / "chn_jpn_yue_eng_ko_spectok.bpe.model").write_bytes(sentencepiece_proto(pieces, types=types))
    n = 560
    (out / "am.mvn").write_text(f"<Nnet>\n<Splice> {n} {n}\n[ 0 ]\n<AddShift> {n} {n}\n<LearnRateCoef> 0 [ "
                                + " ".join(["0"] * n) + f" ]\n<Rescale> {n} {n}\n<LearnRateCoef> 0 [ "
                                + " ".join(["0.1"] * n) + " ]\n</Nnet>\n")
    torch.manual_seed(SEED)
    model = SenseVoiceModel(EncoderConfig(d_model=args.d, d_ff=args.ff, blocks=args.blocks, tp_blocks=args.tp_blocks,
                                          vocab_size=args.vocab))
    torch.save(model.state_dict(), out / "model.pt")
    n_params = sum(p.numel() for p in model.parameters())
    (out / "made_by.json").write_text(json.dumps({"script": "benchmarks/make_sensevoice_model.py", "seed": SEED,
                                                 "params": n_params, **vars(args)}, indent=1) + "\n")
    print(f"{out}: {n_params / 1e6:.1f} M parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())

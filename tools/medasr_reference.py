"""Reference outputs of a MedASR model (transformers' LasrForCTC + LasrProcessor), for tests/test_medasr.py.

Run from the repository root with the venv that holds transformers >= 5.25 (.venv-nemo):

    OMP_NUM_THREADS=1 nice .venv-nemo/bin/python tools/medasr_reference.py

It reads the tiny model (--model, default tests/models/medasr/tiny) and writes --out
(default tests/references/medasr/reference.json) with, for jfk.wav and a few dev clips (tools/speech_clips.py):
  - the feature extractor's output on a sample of frames (every FEAT_STEP-th, whole rows) and its frame count;
  - the CTC logits on a sample of frames (every LOGIT_STEP-th) and every frame's argmax (`generate`'s output);
  - the greedy ids after the CTC collapse (what LasrTokenizer._decode keeps: repeats merged, blanks dropped) and
    the decoded text, both as the pipeline decodes (skip_special_tokens=True) and as the model card's example
    does (batch_decode with its defaults);
  - one batch of all the clips through the processor (padding, attention mask) and `generate`: its argmax paths;
  - the tokenizer's batch_decode of random frame-label sequences (specials, repeats and blanks among them), both
    ways, so the text rules are checked beyond what the tiny model happens to emit.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_clips import clips  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CLIPS = ("jfk.wav", "dev/ls_61-70968-0002.wav", "dev/ls_1089-134691-0001.wav")
FEAT_STEP = 97
LOGIT_STEP = 23


def collapse(path, blank):
    out, prev = [], None
    for k in path:
        if k != prev and k != blank:
            out.append(int(k))
        prev = k
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=REPO / "tests" / "models" / "medasr" / "tiny")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "references" / "medasr" / "reference.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import transformers
    from transformers import AutoModelForCTC, AutoProcessor

    proc = AutoProcessor.from_pretrained(str(args.model))
    model = AutoModelForCTC.from_pretrained(str(args.model)).eval()
    blank = model.config.pad_token_id
    data = {n: (w, t) for n, w, t in clips()}
    out = {"transformers": transformers.__version__, "model": "tests/models/medasr/tiny", "blank": blank,
           "feat_step": FEAT_STEP, "logit_step": LOGIT_STEP, "clips": {}}
    with torch.inference_mode():
        for name in CLIPS:
            wav = data[name][0]
            x = proc(wav, sampling_rate=16000, return_tensors="pt", padding=True)
            feats = x["input_features"][0]
            logits = model(**x).logits[0]
            path = model.generate(**x)[0].tolist()
            ids = collapse(path, blank)
            out["clips"][name] = {
                "samples": len(wav), "frames": feats.shape[0],
                "features": feats[::FEAT_STEP].tolist(), "logits": logits[::LOGIT_STEP].tolist(),
                "path": path, "ids": ids,
                "text": proc.batch_decode([path], skip_special_tokens=True)[0],
                "text_card": proc.batch_decode([path])[0], "transcript": data[name][1]}
            print(name, "|", out["clips"][name]["text"])
        wavs = [data[n][0] for n in CLIPS]
        x = proc(wavs, sampling_rate=16000, return_tensors="pt", padding=True)
        paths = model.generate(**x)
        out["batch"] = {"clips": list(CLIPS), "paths": paths.tolist(),
                        "ids": [collapse(p, blank) for p in paths.tolist()],
                        "text": proc.batch_decode(paths, skip_special_tokens=True)}
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    seqs = []
    for _ in range(40):
        n = int(rng.integers(1, 30))
        seq = rng.integers(0, vocab, n)
        seq[rng.random(n) < 0.3] = blank
        seq[rng.random(n) < 0.1] = rng.integers(1, 4)  # <s>, </s>, <unk>
        seqs.append([int(v) for v in seq])
    seqs.append([blank] * 5)
    out["decode"] = {"paths": seqs, "skip": proc.batch_decode(seqs, skip_special_tokens=True),
                     "card": proc.batch_decode(seqs)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, separators=(",", ":")))
    print("wrote", args.out, args.out.stat().st_size, "bytes")


if __name__ == "__main__":
    main()

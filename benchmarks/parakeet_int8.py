#!/usr/bin/env python
"""How close Parakeet's int8 (and bf16) results are to float32, on the tiny fitted models and the dev set.

Run from the repository root with the project's Python:

    python3 benchmarks/parakeet_int8.py --json bench-out/parakeet_int8.json

    options: --models L   comma list of model stems in ../shared/models/parakeet-tiny
                          (default tiny-tdt-fit,tiny-rnnt-fit,tiny-ctc-fit,tiny-hybrid-tdt-ctc-fit)
             --threads N  torch threads (default 1)

For every model and every utterance of ../shared/audio/dev/manifest.jsonl: the relative error of
the encoder output (||int8 - fp32|| / ||fp32||, the whole [D, T] output), and the greedy token ids
of each head against float32's: token edit distance over the set (total edits / fp32 tokens) and
how many utterances come out identical. bf16 (the encoder in bfloat16) is measured the same way,
as a yardstick: these tiny models were fitted on few hours and sit close to decision boundaries,
so any change of arithmetic moves some tokens. The full-size model's speed is in parakeet_rtfx.py;
its random weights make agreement there meaningless.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from machine import cpu_info, cpu_line  # benchmarks/machine.py (this script's folder is on sys.path)
from whisper_wer import word_edits  # Levenshtein over any sequence (here token ids)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny-tdt-fit,tiny-rnnt-fit,tiny-ctc-fit,tiny-hybrid-tdt-ctc-fit")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import soundfile as sf
    import torch

    sys.path.insert(0, str(REPO))
    import transcribe

    torch.set_num_threads(args.threads)
    dev = SHARED / "audio" / "dev"
    manifest = [json.loads(line) for line in open(dev / "manifest.jsonl")]
    audio = [sf.read(dev / m["audio"], dtype="float32")[0] for m in manifest]
    rows = []
    for stem in args.models.split(","):
        path = str(SHARED / "models" / "parakeet-tiny" / f"{stem}.nemo")
        ref = transcribe.load_model(path)
        for dtype in ("int8", "bfloat16"):
            other = transcribe.load_model(path, dtype=dtype)
            errs = []
            with torch.inference_mode():
                for a in audio:
                    x = torch.from_numpy(a)[None]
                    lens = torch.tensor([x.shape[1]])
                    e32, _ = ref.model.encode(x, lens)
                    eo, _ = other.model.encode(x, lens)
                    eo = eo.float()
                    errs.append(float((eo - e32).norm() / e32.norm()))
            for head in ref.heads:
                t0 = time.perf_counter()
                r_ids = [[t.id for t in ref.transcribe(a, head=head).tokens] for a in audio]
                o_ids = [[t.id for t in other.transcribe(a, head=head).tokens] for a in audio]
                n = sum(len(r) for r in r_ids)
                e = sum(word_edits(r, o) for r, o in zip(r_ids, o_ids))
                rows.append(dict(model=stem, dtype=dtype, head=head, utterances=len(audio),
                                 encoder_rel_err_median=round(statistics.median(errs), 5),
                                 encoder_rel_err_max=round(max(errs), 5), tokens_fp32=n, token_edits=e,
                                 token_edit_rate_pct=round(100 * e / max(1, n), 2),
                                 identical_utterances=sum(r == o for r, o in zip(r_ids, o_ids)),
                                 seconds=round(time.perf_counter() - t0, 1)))
                print(f"{stem} {dtype} {head}: encoder rel. error median {rows[-1]['encoder_rel_err_median']:.4f}, "
                      f"token edits {e}/{n} ({rows[-1]['token_edit_rate_pct']:.2f} %), identical "
                      f"{rows[-1]['identical_utterances']}/{len(audio)}", file=sys.stderr, flush=True)
    head = ["model", "head", "dtype", "encoder rel. error (median / max)", "token edits vs fp32", "identical utterances"]
    lines = [head] + [[r["model"], r["head"], r["dtype"],
                       f"{100 * r['encoder_rel_err_median']:.2f} % / {100 * r['encoder_rel_err_max']:.2f} %",
                       f"{r['token_edits']}/{r['tokens_fp32']} ({r['token_edit_rate_pct']:.2f} %)",
                       f"{r['identical_utterances']}/{r['utterances']}"] for r in rows]
    w = [max(len(l[i]) for l in lines) for i in range(len(head))]
    text = "\n".join(" | ".join(c.ljust(w[i]) for i, c in enumerate(l)) for l in lines)
    print(cpu_line())
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(started=time.strftime("%Y-%m-%d %H:%M:%S"), threads=args.threads,
                                                   **cpu_info(), loadavg=round(os.getloadavg()[0], 2), results=rows, table=text),
                                              indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

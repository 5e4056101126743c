#!/usr/bin/env python
"""Does batching help? Parakeet TDT 0.6B on a set of clips, one at a time against batches of 2..N.

Run from the repository root with the project's Python:

    python3 benchmarks/parakeet_batching.py --json bench-out/parakeet_batching.json

    options: --model PATH      the .nemo (default local-models/parakeet-tdt-0.6b-v2-random.nemo)
             --clips N         how many clips (default 8)
             --min-s, --max-s  their lengths, spread evenly between the two (default 10, 20)
             --batch-sizes L   comma list (default 1,2,4,8)
             --precisions L    comma list of fp32, bf16, int8 (default fp32,bf16)
             --threads N       torch threads (default 2)
             --rounds N        rounds; the best of each batch size counts (default 3)

The clips are cut from the 60 s benchmark clip (benchmarks/speech_clip.py, real speech) at
different offsets and lengths, in a shuffled order (fixed seed), so a batch holds inputs of
different lengths as a real list does. One model per precision is loaded; each round runs
`model.transcribe(clips, batch_size=B)` for every B, in an order that rotates between rounds. The
package sorts its inputs by length and batches neighbours, so a batch pads little. Reported per B:
the best and median wall time of the whole set, the speed-up against B = 1 (> 1: batching helps),
and whether every clip's token ids equal its B = 1 result (they must: results do not depend on the
batch).
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL = "local-models/parakeet-tdt-0.6b-v2-random.nemo"


def clips(n: int, lo: float, hi: float, sr: int = 16000):
    import numpy as np

    sys.path.insert(0, str(HERE))
    from speech_clip import speech_clip

    base, _ = speech_clip(60.0)
    rng = np.random.default_rng(7)
    out = []
    for i in range(n):
        length = lo + (hi - lo) * (i / max(1, n - 1))
        k = int(length * sr)
        start = int(rng.integers(0, len(base) - k))
        out.append(np.ascontiguousarray(base[start : start + k]))
    order = rng.permutation(n)
    return [out[i] for i in order]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--clips", type=int, default=8)
    ap.add_argument("--min-s", type=float, default=10.0)
    ap.add_argument("--max-s", type=float, default=20.0)
    ap.add_argument("--batch-sizes", default="1,2,4,8")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    args.model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    if not Path(args.model).exists():
        ap.error(f"{args.model}: no such model (make it with benchmarks/make_parakeet_model.py)")
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    sys.path.insert(0, str(REPO))
    import transcribe
    import transcribe.runtime

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    transcribe.runtime.tune_malloc()
    data = clips(args.clips, args.min_s, args.max_s)
    audio_s = sum(len(c) for c in data) / 16000
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    load_start = os.getloadavg()
    rows = []
    for prec in [p.strip() for p in args.precisions.split(",") if p.strip()]:
        dtype = {"fp32": None, "bf16": "bfloat16", "int8": "int8"}[prec]
        model = transcribe.load_model(args.model, threads=args.threads, dtype=dtype)
        model.transcribe(data[:2], batch_size=2)  # warm-up
        times = {b: [] for b in sizes}
        ids = {}
        for r in range(args.rounds):
            order = sizes[r % len(sizes):] + sizes[: r % len(sizes)]
            for b in order:
                t0 = time.perf_counter()
                out = model.transcribe(data, batch_size=b)
                times[b].append(time.perf_counter() - t0)
                ids[b] = [[t.id for t in o.tokens] for o in out]
            print(f"[{time.strftime('%H:%M:%S')}] {prec} round {r + 1}: "
                  + ", ".join(f"B={b} {times[b][-1]:.2f} s" for b in sizes)
                  + f" (load average {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        one = min(times[sizes[0]])
        for b in sizes:
            rows.append(dict(precision=prec, batch_size=b, best_s=round(min(times[b]), 3),
                             median_s=round(statistics.median(times[b]), 3), times_s=[round(x, 3) for x in times[b]],
                             speedup_vs_first=round(one / min(times[b]), 3), same_tokens_as_first=ids[b] == ids[sizes[0]]))
        del model
    head = ["precision", "batch size", "best", "median", f"speed-up vs B={sizes[0]}", "same tokens"]
    lines = [head] + [[r["precision"], str(r["batch_size"]), f"{r['best_s']:.2f} s", f"{r['median_s']:.2f} s",
                       f"{r['speedup_vs_first']:.2f}x", "yes" if r["same_tokens_as_first"] else "NO"] for r in rows]
    w = [max(len(l[i]) for l in lines) for i in range(len(head))]
    text = "\n".join(" | ".join(c.ljust(w[i]) for i, c in enumerate(l)) for l in lines)
    print(f"\n{args.clips} clips of {args.min_s:g}-{args.max_s:g} s ({audio_s:.0f} s of audio), {cpu_line()}, "
          f"{args.threads} threads, best of {args.rounds}; load average {load_start[0]:.2f} -> {os.getloadavg()[0]:.2f}\n\n{text}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(
            started=time.strftime("%Y-%m-%d %H:%M:%S"), clips=args.clips, min_s=args.min_s, max_s=args.max_s,
            audio_s=round(audio_s, 1), threads=args.threads, rounds=args.rounds, **cpu_info(),
            loadavg_start=[round(x, 2) for x in load_start], loadavg_end=[round(x, 2) for x in os.getloadavg()],
            results=rows, table=text), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

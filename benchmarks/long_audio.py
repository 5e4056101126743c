#!/usr/bin/env python
"""Parakeet TDT 0.6B on long audio: time and memory per minute of audio at 1, 5, 10, 20 minutes.

Run from the repository root with the project's Python:

    python3 benchmarks/long_audio.py --json bench-out/long_audio.json

    options: --model PATH       the .nemo (default local-models/parakeet-tdt-0.6b-v2-random.nemo,
                                made by benchmarks/make_parakeet_model.py)
             --minutes L        comma list (default 1,5,10,20)
             --precisions L     comma list of fp32, bf16, int8 (default fp32,bf16)
             --threads N        torch threads (default 2)
             --rounds N         timed calls per length, the best counts (default 2; 1-minute calls: 3)
             --attention A      auto (the package's default: full attention up to 20 minutes,
                                local after), full or local (default auto)

The audio: the 60 s benchmark clip (benchmarks/speech_clip.py: the dev utterances joined) repeated
to the length. Every (precision, length) runs in a fresh child process, so that its peak RSS
(getrusage ru_maxrss) is its own: load the model, one warm-up call on the 1-minute clip, then the
timed calls on the long input. Reported per length: the best call, seconds per minute of audio,
the ratio of the call to the 1-minute call, RTFx, peak RSS and its growth over the RSS after the
warm-up, per minute of audio. The target of issue 13: 10 minutes at most 12x the time of 1 minute
(full attention).

A FLOP count of the encoder is printed next to it (the linear part, and full attention's part that
grows with the square of the length: QK^T, the position term over T + block - 1 relative positions,
and AV), so a measured ratio can be read against the ratio the arithmetic alone allows.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from machine import cpu_info, cpu_line  # benchmarks/machine.py (this script's folder is on sys.path)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL = "local-models/parakeet-tdt-0.6b-v2-random.nemo"
TAG = "LONG-RESULT "


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(args) -> int:
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(REPO))
    import transcribe
    import transcribe.runtime
    from speech_clip import speech_clip

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    clip, _ = speech_clip(60.0)
    minutes = float(args.child_minutes)
    audio = np.ascontiguousarray(np.tile(clip, int(np.ceil(minutes)))[: int(minutes * 60 * 16000)])
    transcribe.runtime.tune_malloc()
    dtype = {"fp32": None, "bf16": "bfloat16", "int8": "int8"}[args.child_precision]
    t0 = time.perf_counter()
    model = transcribe.load_model(args.model, threads=args.threads, dtype=dtype)
    load_s = time.perf_counter() - t0
    model.transcribe(clip, attention=args.attention)  # warm-up
    rss_warm = _rss_mb()
    times = []
    rounds = args.rounds if minutes > 1 else max(3, args.rounds)
    for _ in range(rounds):
        t0 = time.perf_counter()
        t = model.transcribe(audio, attention=args.attention)
        times.append(time.perf_counter() - t0)
    print(TAG + json.dumps(dict(
        minutes=minutes, precision=args.child_precision, load_s=round(load_s, 2), times_s=[round(x, 3) for x in times],
        best_s=round(min(times), 3), tokens=len(t.tokens), rss_after_warmup_mb=round(rss_warm),
        peak_rss_mb=round(_peak_rss_mb()), loadavg=round(os.getloadavg()[0], 2),
    )), flush=True)
    return 0


def encoder_gflop(minutes: float, d: int = 1024, layers: int = 24, ff: int = 4096, block: int = 256) -> tuple[float, float]:
    """(linear, quadratic) GFLOP of the FastConformer 0.6B encoder for `minutes` of audio (80 ms frames)."""
    t = minutes * 60 / 0.08
    per_frame = 2 * (2 * 2 * d * ff + 4 * d * d + 2 * d * d + d * d + 2 * d)  # FFs, QKVO, conv pointwise, pos
    linear = layers * t * per_frame
    quad = layers * (2 * t * t * d + 2 * t * (t + block) * d + 2 * t * t * d)
    return linear / 1e9, quad / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--minutes", default="1,5,10,20")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--attention", default="auto", choices=("auto", "full", "local"))
    ap.add_argument("--json")
    ap.add_argument("--child-minutes", help=argparse.SUPPRESS)
    ap.add_argument("--child-precision", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    if args.child_minutes:
        return child(args)
    if not Path(args.model).exists():
        ap.error(f"{args.model}: no such model (make it with benchmarks/make_parakeet_model.py)")
    minutes = [float(m) for m in args.minutes.split(",")]
    if 1.0 not in minutes:
        minutes.insert(0, 1.0)
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load_start = os.getloadavg()
    rows = []
    for prec in precisions:
        base = None
        for m in minutes:
            env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child-minutes", str(m), "--child-precision", prec,
                   "--model", args.model, "--threads", str(args.threads), "--rounds", str(args.rounds),
                   "--attention", args.attention]
            print(f"[{time.strftime('%H:%M:%S')}] {prec} {m:g} min (load average {os.getloadavg()[0]:.2f}) ...",
                  file=sys.stderr, flush=True)
            p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
            got = [json.loads(line[len(TAG):]) for line in p.stdout.splitlines() if line.startswith(TAG)]
            if not got:
                raise SystemExit(f"{prec} {m:g} min failed (exit {p.returncode}):\n" + "\n".join(p.stderr.splitlines()[-20:]))
            r = got[0]
            if m == 1.0:
                base = r
            r["s_per_min"] = round(r["best_s"] / m, 3)
            r["ratio_to_1min"] = round(r["best_s"] / base["best_s"], 2) if base else None
            r["rtfx"] = round(m * 60 / r["best_s"], 2)
            r["peak_growth_mb_per_min"] = round((r["peak_rss_mb"] - r["rss_after_warmup_mb"]) / m, 1)
            lin, quad = encoder_gflop(m)
            lin1, quad1 = encoder_gflop(1.0)
            r["encoder_gflop"] = [round(lin), round(quad)]
            r["flop_ratio_to_1min"] = round((lin + quad) / (lin1 + quad1), 2)
            rows.append(r)
            print(f"    best {r['best_s']:.2f} s, {r['s_per_min']:.2f} s/min, x{r['ratio_to_1min']} of 1 min "
                  f"(FLOPs x{r['flop_ratio_to_1min']}), peak RSS {r['peak_rss_mb']} MB", file=sys.stderr, flush=True)
    head = ["precision", "minutes", "best call", "s / min", "x 1 min", "FLOPs x 1 min", "RTFx", "peak RSS",
            "peak - warm RSS per min"]
    lines = [head] + [[r["precision"], f"{r['minutes']:g}", f"{r['best_s']:.2f} s", f"{r['s_per_min']:.2f}",
                       f"{r['ratio_to_1min']:.2f}", f"{r['flop_ratio_to_1min']:.2f}", f"{r['rtfx']:.1f}",
                       f"{r['peak_rss_mb']} MB", f"{r['peak_growth_mb_per_min']} MB"] for r in rows]
    w = [max(len(str(l[i])) for l in lines) for i in range(len(head))]
    text = "\n".join(" | ".join(str(c).ljust(w[i]) for i, c in enumerate(l)) for l in lines)
    print(f"\n{cpu_line()}, {args.threads} threads, attention {args.attention}; load average at start "
          f"{load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}\n\n{text}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(
            started=started, model=args.model if not Path(args.model).is_relative_to(REPO) else str(Path(args.model).relative_to(REPO)),
            threads=args.threads, attention=args.attention, **cpu_info(),
            loadavg_start=[round(x, 2) for x in load_start], loadavg_end=[round(x, 2) for x in os.getloadavg()],
            results=rows, table=text), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Streaming Sortformer on long audio: peak memory (and time) of ours diarizing 10 against 60 minutes.

Run from the repository root with the project's Python:

    python3 benchmarks/sortformer_memory.py --json bench-out/sortformer_memory.json

    options: --model PATH       the .nemo (default local-models/diar_streaming_sortformer_4spk-v2.1-random.nemo,
                                made by benchmarks/make_sortformer_model.py)
             --minutes L        comma list (default 10,60)
             --precisions L     comma list of fp32, bf16 (default bf16,fp32)
             --threads N        torch threads (default 2)
             --bound X          the target: peak RSS at the longest length at most X times the shortest's
                                (default 1.3, issue 30)
             --call C           diarize (default: the public call) or probabilities: `model.probabilities(audio)`
                                and `model.turns(...)`, the two steps diarize() runs, without its audio intake
                                (`transcribe.audio.model_input`, which copies an in-memory array: see the README)

Every (precision, length) runs in a fresh child process, so its peak RSS (getrusage ru_maxrss) is its own:
import the package, `transcribe.runtime.tune_malloc()` (as the command line), load the model
(`transcribe.load_model(path, threads=N, dtype=None | "bfloat16")`), make the audio (the 60 s benchmark clip,
benchmarks/speech_clip.py, repeated to the length into one preallocated float32 array: no temporary copies),
then one call `model.diarize(audio, sample_rate=16000)` (the model's streaming path: NeMo's chunk loop with
the speaker cache, sync update; --call probabilities: the same without the audio intake). Reported: RSS after the load, after the audio is made, peak RSS, the call's
own growth (peak - RSS before the call), the audio array's size, the output's frames, and the call's time.
The ratio that issue 30 bounds is peak RSS at 60 minutes / at 10 minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from machine import cpu_info, cpu_line, package_commit  # benchmarks/machine.py (this script's folder is on sys.path)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL = "local-models/diar_streaming_sortformer_4spk-v2.1-random.nemo"
TAG = "SFMEM-RESULT "
SAMPLE_RATE = 16000


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
    transcribe.runtime.tune_malloc()
    rss_import = _rss_mb()
    dtype = {"fp32": None, "bf16": "bfloat16"}[args.child_precision]
    t0 = time.perf_counter()
    model = transcribe.load_model(args.model, threads=args.threads, dtype=dtype)
    load_s = time.perf_counter() - t0
    rss_loaded = _rss_mb()
    peak_loaded = _peak_rss_mb()
    clip, _ = speech_clip(60.0)
    n = int(float(args.child_minutes) * 60 * SAMPLE_RATE)
    audio = np.empty(n, dtype=np.float32)
    for i in range(0, n, len(clip)):
        audio[i:i + len(clip)] = clip[: n - i]
    del clip
    rss_audio = _rss_mb()
    t0 = time.perf_counter()
    if args.call == "diarize":
        d = model.diarize(audio, sample_rate=SAMPLE_RATE)
        probs, turns = d.probs, d.turns
    else:  # the two steps diarize() runs, on the array as it is (no audio intake: model_input)
        probs = model.probabilities(audio, model.options())
        turns = model.turns(probs, model.options())
    call_s = time.perf_counter() - t0
    peak = _peak_rss_mb()
    print(TAG + json.dumps(dict(
        minutes=float(args.child_minutes), precision=args.child_precision, load_s=round(load_s, 2),
        call_s=round(call_s, 2), rtfx=round(n / SAMPLE_RATE / call_s, 2), frames=int(probs.shape[0]), turns=len(turns),
        call="model.diarize" if args.call == "diarize" else "model.probabilities + model.turns",
        rss_after_import_mb=round(rss_import), rss_after_load_mb=round(rss_loaded), peak_after_load_mb=round(peak_loaded),
        audio_mb=round(audio.nbytes / 2**20, 1), rss_after_audio_mb=round(rss_audio), peak_rss_mb=round(peak),
        call_growth_mb=round(peak - rss_audio), rss_after_call_mb=round(_rss_mb()),
        loadavg=round(os.getloadavg()[0], 2),
    )), flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--minutes", default="10,60")
    ap.add_argument("--precisions", default="bf16,fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bound", type=float, default=1.3)
    ap.add_argument("--call", choices=("diarize", "probabilities"), default="diarize")
    ap.add_argument("--json")
    ap.add_argument("--child-minutes", help=argparse.SUPPRESS)
    ap.add_argument("--child-precision", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    if args.child_minutes:
        return child(args)
    if not Path(args.model).exists():
        ap.error(f"{args.model}: no such model (make it with benchmarks/make_sortformer_model.py)")
    minutes = [float(m) for m in args.minutes.split(",")]
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if not set(precisions) <= {"fp32", "bf16"}:
        ap.error("precisions: fp32, bf16")
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load_start = os.getloadavg()
    rows, verdicts = [], {}
    for prec in precisions:
        got = []
        for m in minutes:
            env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child-minutes", str(m), "--child-precision", prec,
                   "--model", args.model, "--threads", str(args.threads), "--call", args.call]
            print(f"[{time.strftime('%H:%M:%S')}] {prec} {m:g} min (load average {os.getloadavg()[0]:.2f}) ...",
                  file=sys.stderr, flush=True)
            p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
            out = [json.loads(line[len(TAG):]) for line in p.stdout.splitlines() if line.startswith(TAG)]
            if not out:
                raise SystemExit(f"{prec} {m:g} min failed (exit {p.returncode}):\n" + "\n".join(p.stderr.splitlines()[-20:]))
            r = out[0]
            got.append(r)
            rows.append(r)
            print(f"    peak RSS {r['peak_rss_mb']} MB (after load {r['rss_after_load_mb']}, audio {r['audio_mb']} MB, "
                  f"call growth {r['call_growth_mb']} MB), {r['call_s']:.1f} s", file=sys.stderr, flush=True)
        lo, hi = got[0], got[-1]
        ratio = hi["peak_rss_mb"] / lo["peak_rss_mb"]
        verdicts[prec] = dict(minutes=[lo["minutes"], hi["minutes"]], peak_ratio=round(ratio, 3),
                              peak_ratio_without_audio=round((hi["peak_rss_mb"] - hi["audio_mb"])
                                                             / (lo["peak_rss_mb"] - lo["audio_mb"]), 3),
                              within_bound=ratio <= args.bound)
    head = ["precision", "minutes", "call", "RTFx", "RSS after load", "audio array", "RSS before call", "peak RSS",
            "call growth", "frames"]
    lines = [head] + [[r["precision"], f"{r['minutes']:g}", f"{r['call_s']:.1f} s", f"{r['rtfx']:.1f}",
                       f"{r['rss_after_load_mb']} MB", f"{r['audio_mb']:.0f} MB", f"{r['rss_after_audio_mb']} MB",
                       f"{r['peak_rss_mb']} MB", f"{r['call_growth_mb']} MB", r["frames"]] for r in rows]
    w = [max(len(str(l[i])) for l in lines) for i in range(len(head))]
    text = "\n".join(" | ".join(str(c).ljust(w[i]) for i, c in enumerate(l)) for l in lines)
    verdict = "\n".join(f"{p}: peak at {v['minutes'][1]:g} min / at {v['minutes'][0]:g} min = {v['peak_ratio']:.3f} "
                        f"(bound {args.bound:g}: {'holds' if v['within_bound'] else 'FAILS'}; without the audio array "
                        f"{v['peak_ratio_without_audio']:.3f})" for p, v in verdicts.items())
    print(f"\n{cpu_line()}, {args.threads} threads; load average at start {load_start[0]:.2f}, at end "
          f"{os.getloadavg()[0]:.2f}\n\n{text}\n\n{verdict}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        model = Path(args.model)
        Path(args.json).write_text(json.dumps(dict(
            started=started, package_commit=package_commit(),
            model=str(model.relative_to(REPO)) if model.is_relative_to(REPO) else str(model),
            threads=args.threads, bound=args.bound, call=args.call, **cpu_info(),
            loadavg_start=[round(x, 2) for x in load_start], loadavg_end=[round(x, 2) for x in os.getloadavg()],
            results=rows, verdicts=verdicts, table=text), indent=2) + "\n")
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""What `--diarize` adds to a Parakeet transcription: Parakeet TDT 0.6B alone, the streaming Sortformer alone,
and both with `transcribe(..., diarize=True)`, on the same 10 minutes of speech.

Run from the repository root with the project's Python:

    python3 benchmarks/diarize_cost.py --json bench-out/diarize_cost.json

    options: --model PATH       the recognizer (default local-models/parakeet-tdt-0.6b-v2-random.nemo, made by
                                benchmarks/make_parakeet_model.py)
             --diarizer PATH    the diarizer (default local-models/diar_streaming_sortformer_4spk-v2.1-random.nemo,
                                made by benchmarks/make_sortformer_model.py)
             --precisions L     comma list of fp32, bf16 (default bf16): both models in that precision
             --threads N        torch threads (default 2)
             --rounds N         timed rounds after one warm-up (default 2)
             --seconds S        audio length (default 600)

Each precision runs in a fresh child process: `transcribe.runtime.tune_malloc()`, both models loaded with
`transcribe.load_model(path, threads=N, dtype=None | "bfloat16")`, the audio made (the dev utterances joined,
benchmarks/speech_clip.py), one warm-up of each call on the first 20 s, then per round, one call at a time:
  transcribe   model.transcribe(pcm)                         (the recognizer alone, its defaults)
  diarize      diarizer.diarize(pcm, sample_rate=16000)      (the Sortformer alone: its streaming path and
                                                              post-processing)
  together     model.transcribe(pcm, diarize=True, diarizer=diarizer)
                                                             (both and the attribution of words to speakers;
                                                              only where the package has diarize=True)
Reported: best and median seconds of each, the diarizer's cost as a fraction of the transcription
(diarize / transcribe, and (together - transcribe) / transcribe), the peak RSS of the process (both models
loaded), the CPU and the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import cpu_info, cpu_line, package_commit  # benchmarks/machine.py (this script's folder is on sys.path)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL = "local-models/parakeet-tdt-0.6b-v2-random.nemo"
DEFAULT_DIARIZER = "local-models/diar_streaming_sortformer_4spk-v2.1-random.nemo"
TAG = "DCOST-RESULT "
SAMPLE_RATE = 16000


def child(args) -> int:
    import inspect
    import resource

    import torch

    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(REPO))
    import transcribe
    import transcribe.runtime
    from speech_clip import speech_clip

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    transcribe.runtime.tune_malloc()
    dtype = {"fp32": None, "bf16": "bfloat16"}[args.child_precision]
    t0 = time.perf_counter()
    asr = transcribe.load_model(args.model, threads=args.threads, dtype=dtype)
    asr_load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    dia = transcribe.load_model(args.diarizer, threads=args.threads, dtype=dtype)
    dia_load_s = time.perf_counter() - t0
    pcm, _ = speech_clip(args.seconds)
    together = "diarize" in inspect.signature(asr.transcribe).parameters

    calls = {"transcribe": lambda x: asr.transcribe(x),
             "diarize": lambda x: dia.diarize(x, sample_rate=SAMPLE_RATE).turns}
    if together:
        calls["together"] = lambda x: asr.transcribe(x, diarize=True, diarizer=dia)
    short = pcm[: 20 * SAMPLE_RATE]
    for fn in calls.values():  # warm-up
        fn(short)
    times = {k: [] for k in calls}
    info = {}
    for r in range(args.rounds):
        order = list(calls) if r % 2 == 0 else list(calls)[::-1]
        for k in order:
            t0 = time.perf_counter()
            out = calls[k](pcm)
            times[k].append(time.perf_counter() - t0)
            print(f"    {args.child_precision} round {r + 1} {k}: {times[k][-1]:.2f} s (load average "
                  f"{os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
            if k == "transcribe":
                info["words"] = len(out.words) if getattr(out, "words", None) is not None else None
            elif k == "diarize":
                info["turns"] = len(out)
            else:
                info["together_speakers"] = len(out.speakers or [])
                info["together_words_with_speaker"] = sum(1 for w in (out.words or []) if w.speaker is not None)
    print(TAG + json.dumps(dict(
        precision=args.child_precision, seconds=args.seconds, asr_load_s=round(asr_load_s, 2),
        diarizer_load_s=round(dia_load_s, 2), together_available=together,
        times_s={k: [round(x, 3) for x in v] for k, v in times.items()},
        best_s={k: round(min(v), 3) for k, v in times.items()},
        median_s={k: round(statistics.median(v), 3) for k, v in times.items()},
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), **info,
        loadavg=round(os.getloadavg()[0], 2))), flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--diarizer")
    ap.add_argument("--precisions", default="bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--json")
    ap.add_argument("--child-precision", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    args.diarizer = os.path.abspath(args.diarizer) if args.diarizer else str(REPO / DEFAULT_DIARIZER)
    if args.child_precision:
        return child(args)
    for p, how in ((args.model, "make_parakeet_model.py"), (args.diarizer, "make_sortformer_model.py")):
        if not Path(p).exists():
            ap.error(f"{p}: no such model (make it with benchmarks/{how})")
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if not set(precisions) <= {"fp32", "bf16"}:
        ap.error("precisions: fp32, bf16")
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load_start = os.getloadavg()
    rows = []
    for prec in precisions:
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child-precision", prec, "--model", args.model,
               "--diarizer", args.diarizer, "--threads", str(args.threads), "--rounds", str(args.rounds),
               "--seconds", str(args.seconds)]
        print(f"[{time.strftime('%H:%M:%S')}] {prec} (load average {os.getloadavg()[0]:.2f}) ...", file=sys.stderr,
              flush=True)
        p = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
        out = [json.loads(line[len(TAG):]) for line in p.stdout.splitlines() if line.startswith(TAG)]
        if not out:
            raise SystemExit(f"{prec} failed (exit {p.returncode})")
        r = out[0]
        b, m = r["best_s"], r["median_s"]
        r["diarize_over_transcribe"] = dict(best=round(b["diarize"] / b["transcribe"], 3),
                                            median=round(m["diarize"] / m["transcribe"], 3))
        if "together" in b:
            r["added_by_diarize"] = dict(best=round((b["together"] - b["transcribe"]) / b["transcribe"], 3),
                                         median=round((m["together"] - m["transcribe"]) / m["transcribe"], 3))
        rows.append(r)
    head = ["precision", "transcribe best / median", "diarize best / median", "together best / median",
            "diarize / transcribe", "(together - transcribe) / transcribe", "peak RSS"]
    fmt = lambda r, k: f"{r['best_s'][k]:.2f} / {r['median_s'][k]:.2f} s" if k in r["best_s"] else "-"  # noqa: E731
    lines = [head] + [[r["precision"], fmt(r, "transcribe"), fmt(r, "diarize"), fmt(r, "together"),
                       f"{r['diarize_over_transcribe']['best']:.3f} / {r['diarize_over_transcribe']['median']:.3f}",
                       f"{r['added_by_diarize']['best']:.3f} / {r['added_by_diarize']['median']:.3f}"
                       if "added_by_diarize" in r else "-", f"{r['peak_rss_mb']} MB"] for r in rows]
    w = [max(len(str(l[i])) for l in lines) for i in range(len(head))]
    text = "\n".join(" | ".join(str(c).ljust(w[i]) for i, c in enumerate(l)) for l in lines)
    print(f"\nParakeet TDT 0.6B + streaming Sortformer v2.1 (random weights), {args.seconds:g} s of speech, "
          f"{args.threads} threads, {args.rounds} rounds after a warm-up; {cpu_line()}; load average at start "
          f"{load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}\n\n{text}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        shown = lambda p: str(Path(p).relative_to(REPO)) if Path(p).is_relative_to(REPO) else p  # noqa: E731
        Path(args.json).write_text(json.dumps(dict(
            started=started, package_commit=package_commit(), model=shown(args.model), diarizer=shown(args.diarizer),
            threads=args.threads, rounds=args.rounds, **cpu_info(),
            loadavg_start=[round(x, 2) for x in load_start], loadavg_end=[round(x, 2) for x in os.getloadavg()],
            results=rows, table=text), indent=2) + "\n")
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

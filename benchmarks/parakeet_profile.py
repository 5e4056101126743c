#!/usr/bin/env python
"""Where our Parakeet transcription spends its time: torch.profiler over one call, ops by self CPU time.

Run from the repository root with the project's Python:

    python3 benchmarks/parakeet_profile.py [--model PATH] [--dtype bfloat16] [--seconds 60] [--threads 2]

--model defaults to local-models/parakeet-tdt-0.6b-v2-random.nemo in the repository (made by
benchmarks/make_parakeet_model.py); a path given is relative to the working directory.
Same model and clip as parakeet_rtfx.py, and the same process setup (glibc's malloc thresholds
tuned as the command line tunes them); one warm-up call, then one profiled call.  Prints the
top ops by self CPU time, then the time in the encoder against the whole call.  The minor page
faults of the profiled call are printed too: first touches of freshly mapped memory, which cost
noticeably on a virtual machine (without that tuning glibc maps and unmaps large tensors on every
call; TRANSCRIBE_MALLOC_TUNING=0 shows the difference).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL = "local-models/parakeet-tdt-0.6b-v2-random.nemo"  # relative to the repository (git-ignored)
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help=f"the .nemo (default {DEFAULT_MODEL} in the repository)")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=25)
    a = ap.parse_args()
    a.model = os.path.abspath(a.model) if a.model else str(HERE.parent / DEFAULT_MODEL)
    if not os.path.exists(a.model):
        ap.error(f"{a.model}: no such model (make it with benchmarks/make_parakeet_model.py)")
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    import transcribe
    import transcribe.runtime
    from machine import cpu_line
    from speech_clip import speech_clip

    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    pcm, _ = speech_clip(a.seconds)
    transcribe.runtime.tune_malloc()  # the CLI does the same before it loads a model
    m = transcribe.load_model(a.model, threads=a.threads, dtype=a.dtype)
    m.transcribe(pcm)  # warm-up
    encode = m.model.encode

    def timed_encode(*args, **kw):  # mark the encoder (front end + conformer) in the trace
        with record_function("## encode (front end + encoder)"):
            return encode(*args, **kw)

    m.model.encode = timed_encode
    import resource

    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("## transcribe"):
            t = m.transcribe(pcm)
    wall = time.perf_counter() - t0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    print(cpu_line())
    print(f"{a.seconds:g} s clip, dtype {a.dtype or 'float32'}, {a.threads} threads: {wall:.2f} s "
          f"under the profiler, {len(t.tokens)} tokens, {faults} minor page faults, "
          f"load average {os.getloadavg()[0]:.2f}\n")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows))
    for e in prof.key_averages():
        if e.key.startswith("## "):
            print(f"{e.key}: {e.cpu_time_total / 1e6:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

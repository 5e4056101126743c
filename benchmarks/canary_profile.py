#!/usr/bin/env python
"""Where our Canary transcription spends its time: encoder against decoder steps, then torch.profiler ops.

Run from the repository root with the project's Python:

    python3 benchmarks/canary_profile.py [--model PATH] [--dtype bfloat16] [--seconds 60] [--threads 2]

--model defaults to local-models/canary-1b-flash-random.nemo in the repository (made by
benchmarks/make_canary_model.py); a path given is relative to the working directory. Same clip and
call as canary_speed.py (one piece: max_piece_s = seconds + 1; beam_size 1 as NeMo's default decoding).
One warm-up call, then one timed call with the model's parts wrapped by timers (plain wall time, no
profiler): the front end + encoder (`CanaryModel.encode`), the decoder's start (cross-attention keys and
values, `start`), the prompt step (9 positions at once) and the one-token steps (`step`), and the rest
(search bookkeeping, transcript). Then one call under torch.profiler: the top ops by self CPU time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL = "local-models/canary-1b-flash-random.nemo"  # relative to the repository (git-ignored)
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help=f"the .nemo (default {DEFAULT_MODEL} in the repository)")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=20)
    ap.add_argument("--no-profiler", action="store_true", help="only the timed call")
    a = ap.parse_args()
    a.model = os.path.abspath(a.model) if a.model else str(HERE.parent / DEFAULT_MODEL)
    if not os.path.exists(a.model):
        ap.error(f"{a.model}: no such model (make it with benchmarks/make_canary_model.py)")
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
    transcribe.runtime.tune_malloc()
    m = transcribe.load_model(a.model, threads=a.threads, dtype=a.dtype)
    opts = dict(max_piece_s=max(40.0, a.seconds + 1), beam_size=1)
    m.transcribe(pcm, **opts)  # warm-up
    net = m.model
    spent: dict[str, list[float]] = {"encode": [], "start": [], "prompt step": [], "token step": []}
    originals = {name: getattr(net, name) for name in ("encode", "start", "step")}

    def wrap(name):
        fn = originals[name]

        def timed(*args, **kw):
            with record_function(f"## {name}"):
                t0 = time.perf_counter()
                out = fn(*args, **kw)
                dt = time.perf_counter() - t0
            key = name if name != "step" else ("prompt step" if args[0].shape[1] > 1 else "token step")
            spent[key].append(dt)
            return out

        return timed

    for name in originals:
        setattr(net, name, wrap(name))
    t0 = time.perf_counter()
    t = m.transcribe(pcm, **opts)
    wall = time.perf_counter() - t0
    print(cpu_line())
    print(f"{a.seconds:g} s clip, {Path(a.model).name}, dtype {a.dtype or 'float32'}, {a.threads} threads: {wall:.2f} s, "
          f"{len(t.tokens)} tokens, load average {os.getloadavg()[0]:.2f}")
    parts = 0.0
    for k, v in spent.items():
        s = sum(v)
        parts += s
        per = f", {len(v)} calls, median {statistics.median(v) * 1e3:.1f} ms" if len(v) > 1 else ""
        print(f"  {k:12s} {s:7.2f} s  {100 * s / wall:5.1f} %{per}")
    print(f"  {'rest':12s} {wall - parts:7.2f} s  {100 * (wall - parts) / wall:5.1f} %")
    if a.no_profiler:
        return 0
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        m.transcribe(pcm, **opts)
    print()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

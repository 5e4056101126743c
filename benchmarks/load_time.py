#!/usr/bin/env python
"""Model load time: the Parakeet TDT 0.6B `.nemo` (float32) against its Q8_0 GGUF (int8 layers from the file's
bytes, the default for such a file), each load in a fresh process, on the quiet machine and beside a busy one.

Run from the repository root with the project's Python, alone on the machine:

    python3 benchmarks/load_time.py --json benchmarks/results/load_time.json

    options: --model PATH   the .nemo (default local-models/parakeet-tdt-0.6b-v2-random.nemo, made by
                            benchmarks/make_parakeet_model.py); the Q8_0 file beside it is made by
                            `transcribe convert ... --schema parakeet.cpp --type q8_0` when missing
             --rounds N     loads of each variant per condition (default 5), alternating
             --threads N    torch threads (default 2)
             --conditions L comma list of quiet, busy (default both)

A load is `transcribe.load_model(path)` timed in a child process that has already imported the package and
PyTorch and called `tune_malloc` (as the command line does); the file is in the page cache (one untimed load
of each first). Each child runs under the environment the package's own processes get (GOMP_SPINCOUNT=1000,
transcribe/runtime.py) unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set. Reported: best and median seconds,
and the Q8_0 / .nemo ratio of each.
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

from contention import condition  # benchmarks/contention.py
from machine import cpu_line, package_commit, write_result  # benchmarks/machine.py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL = "local-models/parakeet-tdt-0.6b-v2-random.nemo"
CHILD = """
import json, sys, time
import torch, transcribe, transcribe.runtime
transcribe.runtime.tune_malloc()
torch.set_num_threads({threads})
t0 = time.perf_counter()
model = transcribe.load_model({path!r}{dtype})
print(json.dumps({{"load_s": time.perf_counter() - t0}}))
"""


def load_once(path: Path, dtype, threads: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS=str(threads))
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env["GOMP_SPINCOUNT"] = "1000"  # what the package's own processes set (runtime.openmp_waiting)
    code = CHILD.format(threads=threads, path=str(path), dtype=f", dtype={dtype!r}" if dtype else "")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"load of {path} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["load_s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--conditions", default="quiet,busy")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    model = Path(os.path.abspath(args.model) if args.model else REPO / DEFAULT_MODEL)
    if not model.exists():
        ap.error(f"{model}: no such model (make it with benchmarks/make_parakeet_model.py)")
    q8 = model.with_name(model.stem + "-q8_0.gguf")
    if not q8.exists():
        subprocess.run([sys.executable, "-m", "transcribe", "convert", str(model), str(q8), "--schema", "parakeet.cpp",
                        "--type", "q8_0"], cwd=REPO, check=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    variants = {"nemo fp32": (model, None), "q8_0": (q8, None)}
    started, load_start = time.strftime("%Y-%m-%d %H:%M:%S"), os.getloadavg()
    print(f"{cpu_line()}; load average {load_start[0]:.2f}", file=sys.stderr, flush=True)
    for path, dtype in variants.values():  # the page cache
        load_once(path, dtype, args.threads)
    results = {}
    for cond in [c.strip() for c in args.conditions.split(",") if c.strip()]:
        times = {name: [] for name in variants}
        with condition(cond):
            for k in range(args.rounds):
                for name in (list(variants)[k % 2:] + list(variants)[:k % 2]):
                    times[name].append(load_once(*variants[name], args.threads))
                print(f"    {cond} round {k + 1}: " + ", ".join(f"{n} {t[-1]:.2f} s" for n, t in times.items())
                      + f" (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        results[cond] = {n: {"best_s": round(min(t), 2), "median_s": round(statistics.median(t), 2),
                             "times_s": [round(x, 2) for x in t]} for n, t in times.items()}
        r = results[cond]
        r["ratio_best"] = round(r["q8_0"]["best_s"] / r["nemo fp32"]["best_s"], 2)
        r["ratio_median"] = round(r["q8_0"]["median_s"] / r["nemo fp32"]["median_s"], 2)
    print(f"\nload time at {package_commit()}, {args.threads} threads; {cpu_line()}")
    print("| condition | .nemo fp32 best / median | Q8_0 best / median | Q8_0 / .nemo (best, median) |")
    print("| --- | --- | --- | --- |")
    for cond, r in results.items():
        print(f"| {cond} | {r['nemo fp32']['best_s']:.2f} / {r['nemo fp32']['median_s']:.2f} s | "
              f"{r['q8_0']['best_s']:.2f} / {r['q8_0']['median_s']:.2f} s | {r['ratio_best']:.2f}, {r['ratio_median']:.2f} |")
    if args.json:
        write_result(args.json, dict(started=started, threads=args.threads,
                                     model=str(model.relative_to(REPO)) if model.is_relative_to(REPO) else str(model),
                                     loadavg_start=[round(x, 2) for x in load_start], results=results,
                                     command=" ".join(["python3", "benchmarks/load_time.py", *(argv if argv is not None else sys.argv[1:])])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

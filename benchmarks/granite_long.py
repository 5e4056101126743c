#!/usr/bin/env python
"""Long audio through the Granite Speech NAR recognizer: an hour in bounded memory.

Run from the repository root with the project's Python:

    python3 benchmarks/granite_long.py [--minutes 10 60] [--threads 2] [--json benchmarks/results/granite_long.json]

The input: the utterances of `../shared/audio/dev/manifest.jsonl` in order, each followed by 0.5-2 s
of silence (uniform, fixed seed), looped to `--minutes` of audio, as one array. Each length runs in
a fresh subprocess: the parent writes it to a 16-bit WAV file, the child runs `load_model(--model).transcribe(path)` (default model: the tiny random
`../shared/models/granite-nar-tiny`, whose network is small, so what is measured is the pipeline
around it: the front end, the pause detector, the batches of pieces, the alignment of word times and
the joining). Reported per length: wall time, pieces, tokens, peak RSS (ru_maxrss) and the peak over
the RSS after loading the model and making the audio (the pipeline's own working memory), of which the decoded audio (4 bytes a sample, held while the
file is transcribed, as any tool holds it) is one part. Bounded memory means the rest does not grow
with the length: the ratio of the longest run's to the shortest's is the figure (target: about 1,
not the ratio of the lengths).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from machine import cpu_info, cpu_line  # benchmarks/machine.py (this script's folder is on sys.path)

REPO = Path(__file__).resolve().parent.parent


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def make_audio(minutes: float, audio_dir: Path):
    import numpy as np

    from transcribe.audio import load_audio

    rows = [json.loads(x) for x in (audio_dir / "dev" / "manifest.jsonl").read_text().splitlines() if x.strip()]
    clips = []
    for r in rows:
        p = r.get("audio_filepath") or r.get("path") or r.get("audio")
        clips.append(load_audio(str((audio_dir / "dev" / Path(p).name)), 16000))
    rng = np.random.default_rng(0)
    want = int(minutes * 60 * 16000)
    out = np.zeros(want, np.float32)
    at = k = 0
    while at < want:
        c = clips[k % len(clips)][: want - at]
        out[at:at + len(c)] = c
        at += len(c) + int(rng.uniform(0.5, 2.0) * 16000)
        k += 1
    return out


def child(args) -> dict:
    import soundfile as sf
    import torch

    import transcribe

    torch.set_num_threads(args.threads)
    model = transcribe.load_model(args.model, threads=args.threads)
    samples = sf.info(args.wav).frames
    base = rss_mb()
    t0 = time.perf_counter()
    r = model.transcribe(args.wav)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    audio_mb = samples * 4 / 2**20
    cuts = sorted({round(s.start, 2) for s in r.segments})
    return {"minutes": args.child, "wall_s": round(wall, 2), "rtfx": round(samples / 16000 / wall, 1),
            "tokens": len(r.tokens), "words": len(r.words), "segments": len(r.segments),
            "rss_before_mb": round(base, 1), "peak_rss_mb": round(peak, 1),
            "working_mb": round(peak - base, 1), "decoded_audio_mb": round(audio_mb, 1),
            "beyond_decoded_audio_mb": round(peak - base - audio_mb, 1), "segment_starts_sample": cuts[:5]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, nargs="+", default=[10, 60])
    ap.add_argument("--model", default=str(REPO.parent / "shared" / "models" / "granite-nar-tiny"))
    ap.add_argument("--audio-dir", default=str(REPO.parent / "shared" / "audio"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--wav", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args)))
        return 0
    import tempfile

    import soundfile as sf

    print(cpu_line())
    runs = []
    tmp = tempfile.TemporaryDirectory()
    for m in args.minutes:
        wav = Path(tmp.name) / f"long-{m}.wav"
        sf.write(str(wav), make_audio(m, Path(args.audio_dir)), 16000, subtype="PCM_16")
        cmd = [sys.executable, __file__, "--child", str(m), "--wav", str(wav), "--model", args.model,
               "--threads", str(args.threads)]
        out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        if out.returncode:
            print(out.stderr, file=sys.stderr)
            return 1
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(runs[-1]))
    a, b = runs[0], runs[-1]
    summary = {**cpu_info(), "runs": runs, "working_memory_ratio": round(b["working_mb"] / max(a["working_mb"], 1e-9), 2),
               "beyond_decoded_audio_ratio": round(b["beyond_decoded_audio_mb"] / max(a["beyond_decoded_audio_mb"], 1e-9), 2),
               "length_ratio": round(b["minutes"] / a["minutes"], 2), "threads": args.threads,
               "model": Path(args.model).name}
    print(json.dumps({k: v for k, v in summary.items() if k != "runs" and not k.startswith("cpu_")}))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Batched long-form Whisper against the sequential loop: word error rate and speed on a long input.

The input is every dev utterance of `../shared/audio/dev/manifest.jsonl` joined end to end, in file
order, with 0.25 s of silence between them (as benchmarks/speech_clip.py joins them, but never cut
inside an utterance): 37 utterances, about 340 s. Its reference is their texts joined; WER is
corpus WER after `text_normalizer.py` (as whisper_wer.py).

Systems (each loaded once in a worker process of its own, as in whisper_speed.py, and called in
turn, round after round): ours sequential (openai-whisper's loop) and ours batched
(`transcribe(batched=True)`: windows cut at pauses, 8 decoded together), in float32 and int8; and,
when faster-whisper's venv is there, faster-whisper int8 sequential and its
BatchedInferencePipeline (batch_size 8). Greedy, language en, each system's default temperature
fallback (0, 0.2, ..., 1.0; ours and openai-whisper seed their sampling): on a long input at
temperature 0 only (`--no-fallback`) a sequential loop can lock into repeating one word for the
rest of a window and then keep it in its prompt (measured: ours float32 sequential 71.8 % WER,
"Sir." 265 times), which the fallback is there to catch.

    taskset -c 1 python3 benchmarks/whisper_batched_longform.py --threads 1 --rounds 3 \\
        --json benchmarks/results/whisper_batched_longform.json

Options: --systems (default ours,ours-batched,ours-int8,ours-int8-batched,faster-int8,faster-int8-batched),
--decodings greedy[,beam5], --threads N, --rounds N, --fw-python PATH, --json PATH.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import wave
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import cpu_info, cpu_line  # noqa: E402
from whisper_speed import LABELS, Worker, commit  # noqa: E402
from whisper_systems import FW_PYTHON, OPENAI_CHECKPOINT, path_option  # noqa: E402
from whisper_wer import corpus_wer  # noqa: E402

REPO = HERE.parent
MANIFEST = REPO / ".." / "shared" / "audio" / "dev" / "manifest.jsonl"
GAP_S = 0.25


def long_input(path: Path) -> tuple[str, float]:
    """Write the joined dev utterances as a 16 kHz int16 WAV; returns (reference text, seconds)."""
    import numpy as np
    import soundfile as sf

    rows = [json.loads(line) for line in MANIFEST.read_text().splitlines() if line.strip()]
    gap = np.zeros(int(GAP_S * 16000), dtype=np.float32)
    parts = []
    for row in rows:
        x, sr = sf.read(MANIFEST.parent / row["audio"], dtype="float32", always_2d=True)
        if sr != 16000:
            raise SystemExit(f"{row['audio']}: {sr} Hz")
        parts += [x.mean(axis=1), gap]
    pcm = np.concatenate(parts)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes())
    return " ".join(r["text"] for r in rows), len(pcm) / 16000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--systems", default="ours,ours-batched,ours-int8,ours-int8-batched,faster-int8,faster-int8-batched")
    p.add_argument("--decodings", default="greedy")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fw-python", help=f"default {FW_PYTHON} in the repository")
    p.add_argument("--json")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--no-fallback", action="store_true",
                   help="temperature 0 only (default: each system's temperature fallback 0, 0.2, ..., 1.0)")
    args = p.parse_args()
    args.fw_python = path_option(args.fw_python, FW_PYTHON)
    args.openai_checkpoint = path_option(None, OPENAI_CHECKPOINT)

    tmp = Path(tempfile.mkdtemp(prefix="whisper-longform-"))
    wav = tmp / "dev_joined.wav"
    ref, seconds = long_input(wav)
    meta = {"threads": args.threads, "rounds": args.rounds, **cpu_info(), "commit": commit(),
            "fallback": not args.no_fallback,
            "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "audio_s": seconds, "loadavg_start": os.getloadavg()}
    print(f"input {seconds:.1f} s; cpu {cpu_line()}, cores {meta['affinity']}, threads {args.threads}, "
          f"commit {meta['commit']}, load average {meta['loadavg_start'][0]:.2f}", flush=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    workers = {}
    for system in args.systems.split(","):
        py = sys.executable if system.startswith("ours") else args.fw_python
        if not Path(py).exists():
            print(f"skip {system}: {py} missing", flush=True)
            continue
        workers[system] = Worker(system, py, args, env)
        print(f"loaded {LABELS[system]}", flush=True)
    res: dict = {}
    try:
        for rnd in range(args.rounds + 1):  # round 0: the cold calls (their text is scored)
            for decoding in args.decodings.split(","):
                for system, w in workers.items():
                    r = w.call(str(wav), decoding, fallback=not args.no_fallback)
                    cell = res.setdefault((system, decoding), {"times": [], "text": r["text"]})
                    if rnd:
                        cell["times"].append(r["seconds"])
                    cell["peak_rss_bytes"] = r["peak_rss_bytes"]
            print(f"round {rnd}/{args.rounds} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        for w in workers.values():
            w.close()
    meta["loadavg_end"] = os.getloadavg()
    rows = []
    for (system, decoding), c in res.items():
        wer, edits, words = corpus_wer({"x": ref}, {"x": c["text"]})
        rows.append({"system": system, "decoding": decoding, "wer": wer, "edits": edits, "ref_words": words,
                     "times": c["times"], "best_s": min(c["times"]), "median_s": statistics.median(c["times"]),
                     "peak_rss_bytes": c["peak_rss_bytes"], "text": c["text"]})
    lines = ["| system | decoding | WER % | best (s) | median (s) | x real time (best) | peak RSS (MiB) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {LABELS[r['system']]} | {r['decoding']} | {r['wer']:.2f} | {r['best_s']:.2f} | "
                     f"{r['median_s']:.2f} | {seconds / r['best_s']:.0f} | {r['peak_rss_bytes'] / 2**20:.0f} |")
    lines += ["", "| decoding | batched | sequential | batched / sequential, best round | median round |",
              "| --- | --- | --- | ---: | ---: |"]
    by = {(r["system"], r["decoding"]): r for r in rows}
    for r in rows:
        seq = by.get((r["system"].removesuffix("-batched"), r["decoding"]))
        if r["system"].endswith("-batched") and seq is not None:
            ratios = [a / b for a, b in zip(r["times"], seq["times"])]
            lines.append(f"| {r['decoding']} | {LABELS[r['system']]} | {LABELS[seq['system']]} | "
                         f"{min(ratios):.2f} | {statistics.median(ratios):.2f} |")
    print(f"load average at end: {meta['loadavg_end'][0]:.2f}\n")
    print("\n".join(lines))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({**meta, "reference_words": rows[0]["ref_words"] if rows else 0,
                                               "results": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

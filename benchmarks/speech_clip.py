"""A fixed clip of real speech for the benchmarks: dev utterances joined end to end.

Shared by `make_parakeet_model.py` (NeMo's Python) and `parakeet_rtfx.py` (the project's Python),
so it needs only numpy and soundfile.  The clip is deterministic: the utterances of
`<audio_dir>/dev/manifest.jsonl` in file order, each followed by GAP_S of silence, cut to exactly
`seconds` (the list starts over if it runs out).

    python benchmarks/speech_clip.py out.wav [--seconds 60]   # write it as a 16 kHz mono WAV
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
AUDIO_DIR = REPO / ".." / "shared" / "audio"  # ../shared/audio from the repository root
SAMPLE_RATE = 16000
GAP_S = 0.25


def speech_clip(seconds: float = 60.0, audio_dir: Path | str = AUDIO_DIR) -> tuple[np.ndarray, list[str]]:
    """(float32 mono PCM at 16 kHz of exactly `seconds`, names of the utterances used)."""
    dev = Path(audio_dir) / "dev"
    rows = [json.loads(line) for line in (dev / "manifest.jsonl").read_text().splitlines() if line.strip()]
    want = int(round(seconds * SAMPLE_RATE))
    gap = np.zeros(int(GAP_S * SAMPLE_RATE), dtype=np.float32)
    parts, used, have = [], [], 0
    while have < want:
        for row in rows:
            x, sr = sf.read(dev / row["audio"], dtype="float32", always_2d=True)
            if sr != SAMPLE_RATE:
                raise ValueError(f"{row['audio']}: {sr} Hz, expected {SAMPLE_RATE}")
            x = x.mean(axis=1)
            parts += [x, gap]
            used.append(row["audio"])
            have += len(x) + len(gap)
            if have >= want:
                break
    return np.concatenate(parts)[:want].astype(np.float32), used


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seconds", type=float, default=60.0)
    a = ap.parse_args()
    pcm, names = speech_clip(a.seconds)
    sf.write(a.out, pcm, SAMPLE_RATE, subtype="FLOAT")
    print(f"{a.out}: {len(pcm) / SAMPLE_RATE:.2f} s from {', '.join(names)}")
